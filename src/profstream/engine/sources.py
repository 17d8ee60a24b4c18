"""Stream readers: the ordered slice files of one record family decoded into record batches.

A *stream* is every slice of one family in one directory (per aging group on the host),
ordered and concatenated as msprof does (specs/cann_raw_formats.md §1.4): slices sort by
the integer after the last ``_`` (Python ``int(x.split("_")[-1])``, C++ ``ExtractNumber``),
records straddle slice boundaries (the partial tail of one slice is carried into the next),
and [MSP] ``analysis/framework/offset_calculator.py`` drops ``total % record_size`` bytes
at the start of a fixed-size stream because an aged stream may begin mid-record.

Reading is bounded: each file is memory-mapped one window (``chunk_size``, 4 MiB by
default, rounded down to whole records) at a time, the window is decoded as a zero-copy
``uint8`` view, and only the partial record at its end is copied into the next buffer.
Codecs whose batches never view their input (``Codec.views_input`` False: the numba
decoders of the big device families) are read instead (``preadv``) into one reused
buffer (one window of memory per reader) that each window fills across slice
boundaries. Slices are about 2 MB long and end mid-record; per slice this saves a
short slice-tail window (a batch's fixed cost), the copy of a whole window behind the
carried partial record, and mapping, faulting and unmapping its pages.

Choices:
- Alignment (``alignment="auto"``, the default): the leading drop applies when the
  stream's first slice is not slice 0, i.e. when it was aged — exactly msprof's rule in
  every case where msprof's result is meaningful. A stream that still starts at slice 0
  begins on a record boundary, so a size that is not a multiple of the record size
  there is a truncated *tail* (a crash mid-write): it is reported (``TRUNCATED_TAIL``,
  ``stats.truncated_*``) instead of shifting every record as msprof would.
  ``alignment="msprof"`` reproduces msprof unconditionally. Either way a drop is logged
  (``LEADING_BYTES_DROPPED``), never silent. msprof drops the bytes from the first file
  only (and misbehaves when that file is shorter than the drop); we drop them from the
  concatenated stream.
- Tail mode (``follow=True``) decides the alignment when it first sees the stream, from
  the sizes at that moment; a slice is finished once a later slice exists; a slice that
  disappears under the reader (storage-limit ageing) is logged as ``GAP`` and reading
  re-aligns on the next slice by msprof's rule. A reader that has read a finished slice to
  its end stands at the start of the next one (the partial record carried), also between
  batches, so its position (:meth:`StreamReader.offsets`) is past that slice, which may
  then age without a gap: the daemon protects from aging only slices a position is not past.
- Errors: a codec's ``DecodeError`` carries the offset in the concatenated stream; the
  reader re-raises it naming the actual slice file and the offset inside it.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
from collections.abc import Generator, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.codecs import NOT_DATA, codec_for_file
from profstream.codecs._base import ByteBuffer, Codec, DecodeContext, OnInvalid, StreamTraits, counter_gaps
from profstream.errors import DecodeError, InputPathError

#: bytes of one stream decoded at once. Decoding alone is about as fast from 1 to 4 MiB (a batch's
#: fixed cost is about 0.1 ms); in a pipeline the window sets how far one pull moves a sparse stream
#: ahead in time (2 MiB of node_basic_info span about 4 % of a run), and the host joins hold what
#: arrived ahead until the other streams catch up. 1 MiB windows, with ``runtime.ADVANCE_BYTES`` at
#: 8 MiB (16 MiB since session 30), made bench/macro.py's 1 GB msprof summary 19 % faster at 24 MB
#: less peak RSS than 2 MiB windows and 4 MiB advances (bench/README.md, "Export", session 13).
DEFAULT_CHUNK_BYTES = 1 << 20
#: columns whose min/max become the stream's time range, first present wins (native units).
TIME_COLUMNS = ("syscnt", "timestamp", "start_syscnt", "begin_time", "start_ns", "time_ns")
Alignment = Literal["auto", "msprof"]
_EMPTY = np.empty(0, np.uint8)


def _size(path: Path) -> int:
    """The size of ``path``; 0 once it is gone (aged away)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def resolve_inside(root: Path, path: Path) -> Path:
    """``path`` resolved, refusing anything (a symlink, a ``..``) that leads outside ``root``."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        msg = f"{path} resolves to {resolved}, outside the input directory {root}"
        raise InputPathError(msg)
    return resolved


def slice_number(name: str, match: re.Match[str] | None) -> int:
    """The slice number msprof sorts by: the integer after the last ``_``.

    Legacy names without one (``hwts.log.data.45.4.7``) use the codec's ``slice`` group;
    names with neither (``torch.op_range``) are slice 0.
    """
    head, sep, tail = name.rpartition("_")
    if sep and head and tail.isdigit():
        return int(tail)
    group = match.groupdict().get("slice") if match is not None else None
    return int(group) if group is not None else 0


@dataclass(frozen=True, slots=True)
class SliceFile:
    """One slice of a stream: its number, base name and resolved path."""

    slice: int
    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class Stream:
    """Every slice of one record family in one directory (and one aging group on the host)."""

    codec: Codec
    device_id: int | None  # None: the host (or FRAMEWORK) dir
    aging: bool | None  # host streams: True for aging.*, False for unaging.*; else None
    data_dir: Path
    root: Path  # the input directory every slice must stay inside
    files: tuple[SliceFile, ...]
    traits: StreamTraits = field(default_factory=StreamTraits)  # for layout-dependent codecs

    @property
    def family(self) -> str:
        return self.codec.family

    def rescan(self, listings: Listings | None = None) -> Stream:
        """The same stream with its slice list re-read from disk (tail mode); ``listings`` shares one
        listing of a directory between the streams that read it (until the caller clears it)."""
        key = (self.data_dir, self.root, self.traits)
        scan = None if listings is None else listings.get(key)
        if scan is None:
            scan = scan_data_dir(self.data_dir, self.root, self.traits)
            if listings is not None:
                listings[key] = scan
        return replace(self, files=scan.slices.get((self.family, self.aging), ()))


def aging_group(match: re.Match[str]) -> bool | None:
    """True for an ``aging.*`` file, False for ``unaging.*``, None for names without the prefix."""
    group = match.groupdict().get("aging")
    return None if group is None else group == "aging"


StreamKey = tuple[str, bool | None]  # (family, aging group)
#: directory listings shared by the streams of one poll: (data dir, root, traits) -> scan
Listings = dict[tuple[Path, Path, StreamTraits], "DirScan"]


@dataclass(frozen=True, slots=True)
class DirScan:
    """A data dir's files grouped into streams, in msprof's slice order, plus the names nobody owns."""

    slices: Mapping[StreamKey, tuple[SliceFile, ...]]
    codecs: Mapping[str, Codec]
    unknown: tuple[Path, ...]


def scan_data_dir(data_dir: Path, root: Path, traits: StreamTraits) -> DirScan:
    """Group the files of ``data_dir`` by (family, aging group) via the codec registry.

    ``.done`` / ``.complete`` / ``.zip`` markers are skipped; anything that resolves
    outside ``root`` raises :class:`~profstream.errors.InputPathError`.
    """
    groups: dict[StreamKey, list[SliceFile]] = {}
    codecs: dict[str, Codec] = {}
    unknown = []
    resolved_dir: Path | None = None
    with os.scandir(data_dir) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        if NOT_DATA.match(entry.name):
            continue
        # a followed dir is listed every poll: only a symlink needs resolving (realpath stats every
        # component), a plain entry of the resolved dir stays inside it
        if entry.is_symlink():
            path = resolve_inside(root, Path(entry.path))
        else:
            resolved_dir = resolved_dir or resolve_inside(root, data_dir)
            path = resolved_dir / entry.name
        owner = codec_for_file(entry.name, traits) if entry.is_file() else None
        if owner is None:
            unknown.append(data_dir / entry.name)
            continue
        codec, match = owner
        codecs[codec.family] = codec
        key = (codec.family, aging_group(match))
        groups.setdefault(key, []).append(SliceFile(slice_number(entry.name, match), entry.name, path))
    slices = {key: tuple(sorted(files, key=lambda f: (f.slice, f.name))) for key, files in groups.items()}
    return DirScan(slices, codecs, tuple(unknown))


class StreamOffsets(msgspec.Struct, frozen=True, kw_only=True):
    """Where a reader stands, so a restarted reader resumes after the last emitted record."""

    file: str | None  # base name of the slice reading continues in; None before any slice
    slice: int  # its slice number
    offset: int  # bytes of ``file`` already read (into emitted records or ``carry``)
    carry: bytes  # bytes read but not yet decoded: the start of a partial record
    stream_offset: int  # bytes of the concatenated stream read so far, dropped bytes included
    record_index: int  # records decoded so far, invalid ones included
    leading_dropped: int | None  # None: alignment not decided yet
    last_counter: int | None  # last rolling-counter value seen


@dataclass(slots=True)
class StreamStats:
    """What a reader saw: counts of records, drops and losses, and the time range."""

    records: int = 0
    batches: int = 0
    bytes_read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> invalid records skipped
    replaced: int = 0  # values kept but replaced by a placeholder
    lost: int = 0  # records missing according to the rolling counter
    leading_bytes_dropped: int = 0
    truncated_tails: int = 0
    truncated_bytes: int = 0
    gaps: int = 0  # slices that disappeared before they were read to the end
    time_column: str | None = None
    time_min: int | None = None
    time_max: int | None = None


class StreamReader:
    """Decode one stream into ``pa.RecordBatch`` es, offline or following growing files.

    Offline, iterate it: every batch, then the tail check. In tail mode
    (``follow=True``) call :meth:`read_available` (alias :meth:`poll`) repeatedly; it
    emits only whole records and keeps its place; :meth:`finish` reads what is left and
    reports a partial final record. :meth:`offsets` is a snapshot that resumes exactly
    after the last emitted record when passed back as ``resume=``.
    """

    def __init__(
        self,
        stream: Stream,
        *,
        on_invalid: OnInvalid = "error",
        chunk_size: int = DEFAULT_CHUNK_BYTES,
        follow: bool = False,
        alignment: Alignment = "auto",
        resume: StreamOffsets | None = None,
    ) -> None:
        if chunk_size < 1:
            msg = f"chunk_size: expected a positive number of bytes, got {chunk_size}"
            raise ValueError(msg)
        self.stream = stream
        self.codec = stream.codec
        self.stats = StreamStats()
        self._on_invalid: OnInvalid = on_invalid
        self._chunk = chunk_size
        self._follow = follow
        self._alignment: Alignment = alignment
        self._files = list(stream.files)
        self._index = 0
        self._offset = 0
        # bytes read but not decoded yet: between batches the start of a partial record; on the
        # read path, a prefix of ``_buffer`` while a window fills
        self._carry: ByteBuffer = _EMPTY
        self._buffer: ByteBuffer = _EMPTY  # the window the read path fills (views_input False)
        self._stream_offset = 0
        self._record_index = 0
        self._lead: int | None = None  # leading bytes dropped; None until decided
        self._lead_pending = 0
        self._realign = False  # after a gap: msprof's rule whatever the alignment mode
        self._slice_no = -1  # slice number of the last slice entered (or lost)
        self._last_counter: int | None = None
        self._starts: list[tuple[int, Path]] = []  # (stream offset, file) of every file entered
        self._log = events.get_logger(
            component="sources", family=stream.family, device=stream.device_id, aging=stream.aging
        )
        if resume is not None:
            self._restore(resume)

    # -- public -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Every batch available now; offline, ends with the truncated-tail check."""
        return self._pump(final=not self._follow)

    def read_available(
        self, max_bytes: int | None = None, *, rescan: bool = True, listings: Listings | None = None
    ) -> list[pa.RecordBatch]:
        """Batches of the whole records written since the last call.

        With ``max_bytes`` it returns once that many bytes were read; more may remain.
        ``rescan`` False skips re-listing the slices (the caller knows nothing new appeared, or
        polls the directory less often than it reads); ``listings``: see :meth:`Stream.rescan`.
        """
        start = self.stats.bytes_read
        out = []
        pump = self._pump(final=False, rescan=rescan, listings=listings)
        try:
            for batch in pump:
                out.append(batch)
                if max_bytes is not None and self.stats.bytes_read - start >= max_bytes:
                    break
        finally:
            pump.close()
        return out

    poll = read_available

    def finish(self) -> list[pa.RecordBatch]:
        """Read what is left and report a partial final record (end of tail mode)."""
        return list(self._pump(final=True))

    def offsets(self) -> StreamOffsets:
        current = self._files[self._index] if self._index < len(self._files) else None
        return StreamOffsets(
            file=None if current is None else current.name,
            slice=self._slice_no if current is None else current.slice,
            offset=self._offset,
            carry=self._carry.tobytes(),
            stream_offset=self._stream_offset,
            record_index=self._record_index,
            leading_dropped=self._lead,
            last_counter=self._last_counter,
        )

    # -- reading --------------------------------------------------------------------------

    def _pump(
        self, *, final: bool, rescan: bool = True, listings: Listings | None = None
    ) -> Generator[pa.RecordBatch, None, None]:
        """Read every byte available now; all state lives on ``self`` so abandoning it is safe."""
        if self._follow and rescan:
            self._refresh(listings)
        self._align()
        while self._index < len(self._files):
            current = self._files[self._index]
            try:
                size = current.path.stat().st_size
            except FileNotFoundError:
                del self._files[self._index]
                yield from self._drain()
                self._gap(current)
                continue
            if self._offset < size and (yield from self._read_file(current, size)):
                continue  # its last batch was handed over from the next slice already
            if not self._step_on():
                break
        yield from self._drain()
        if final:
            yield from self._flush()

    def _step_on(self) -> bool:
        """Stand at the start of the next listed slice, the carry kept; False at the last one."""
        if self._index + 1 >= len(self._files):
            return False
        self._index += 1
        self._offset = 0
        return True

    def _read_file(self, current: SliceFile, size: int) -> Generator[pa.RecordBatch, None, bool]:
        """Read ``current`` up to ``size``; True when it stepped on to the next slice.

        The batch that ends a slice with a later one listed (so the slice is finished) is handed
        over standing on that later slice: a caller that stops there has a position (offsets())
        past the finished slice, which then may vanish without a gap, its partial record carried.
        """
        self._slice_no = current.slice
        start = self._stream_offset - self._offset
        if not self._starts or self._starts[-1][1] != current.path:
            self._starts.append((start, current.path))
        fd = os.open(current.path, os.O_RDONLY)
        try:
            while self._offset < size:
                if self._lead_pending:
                    skip = min(self._lead_pending, size - self._offset)
                    self._lead_pending -= skip
                    self._advance(skip)
                    continue
                if self.codec.views_input:
                    batch = self._decode_window(fd, self._window(size))
                elif self._append(fd, min(size - self._offset, self._window_size() - len(self._carry))):
                    batch = self._decode_held() if len(self._carry) == self._window_size() else None
                else:
                    break  # the file shrank since it was sized: the next pass sizes it again
                if batch is None:
                    continue
                if self._offset >= size and self._step_on():
                    yield batch
                    return True
                yield batch
        finally:
            os.close(fd)
        return False

    def _window(self, size: int) -> int:
        """Bytes to map next: whole records with the carry when the chunk holds one."""
        record = self.codec.record_size
        want = self._chunk
        if record and self._chunk >= record:
            want = max(record, (self._chunk // record) * record - len(self._carry))
        return min(size - self._offset, want)

    def _window_size(self) -> int:
        """Bytes the read path decodes at once: the chunk in whole records (at least one)."""
        record = self.codec.record_size or 1
        return max(record, self._chunk - self._chunk % record)

    def _append(self, fd: int, count: int) -> int:
        """Read ``count`` bytes of the current slice into the buffer behind the held bytes.

        Returns how many were read: fewer when the file shrank since it was sized.
        """
        held = len(self._carry)
        if len(self._buffer) < held + count:
            self._buffer = np.empty(max(held + count, self._window_size()), np.uint8)
        if held and self._carry.base is not self._buffer:  # not yet at the buffer's start
            self._buffer[:held] = self._carry
        got = 0
        while got < count:
            read = os.preadv(fd, [self._buffer.data[held + got : held + count]], self._offset + got)
            if not read:
                break
            got += read
        self._carry = self._buffer[: held + got]
        self._advance(got)
        return got

    def _decode_held(self) -> pa.RecordBatch | None:
        """Decode the bytes the read path holds; the partial record at their end stays held."""
        return self._decode(self._carry, self._stream_offset - len(self._carry), final=False)

    def _drain(self) -> Iterator[pa.RecordBatch]:
        """Decode the whole records the read path holds (it fills windows across slices)."""
        if not self.codec.views_input and len(self._carry) >= (self.codec.record_size or 1):
            batch = self._decode_held()
            if batch is not None:
                yield batch

    def _advance(self, count: int) -> None:
        self._offset += count
        self._stream_offset += count
        self.stats.bytes_read += count

    def _decode_window(self, fd: int, length: int) -> pa.RecordBatch | None:
        base = self._offset - self._offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(fd, length + self._offset - base, offset=base, access=mmap.ACCESS_READ)
        try:
            view = np.frombuffer(mapped, np.uint8, count=length, offset=self._offset - base)
            buf = view if not len(self._carry) else np.concatenate([self._carry, view])
            begin = self._stream_offset - len(self._carry)
            self._advance(length)
            batch = self._decode(buf, begin, final=False)
            del view, buf
        finally:
            # a batch column may still view the window; the map then closes when it dies
            with suppress(BufferError):
                mapped.close()
        return batch

    def _flush(self) -> Iterator[pa.RecordBatch]:
        """Decode the carried bytes as the end of the stream; what remains is a truncated tail."""
        if not len(self._carry):
            return
        batch = self._decode(self._carry, self._stream_offset - len(self._carry), final=True)
        if batch is not None:
            yield batch
        if len(self._carry):
            count = len(self._carry)
            path, offset = self._locate(self._stream_offset - count)
            self.stats.truncated_tails += 1
            self.stats.truncated_bytes += count
            self._log.warning(events.TRUNCATED_TAIL, bytes=count, file=str(path), offset=offset)
            self._carry = _EMPTY

    def _decode(self, buf: ByteBuffer, begin: int, *, final: bool) -> pa.RecordBatch | None:
        ctx = DecodeContext(
            path=str(self._files[0].path if self._files else self.stream.data_dir),
            offset=begin,
            record_index=self._record_index,
            on_invalid=self._on_invalid,
            traits=self.stream.traits,
            final=final,
        )
        try:
            out = self.codec.decode(buf, ctx)
        except DecodeError as err:
            if err.offset is None:
                raise
            raise self._relocated(err) from err
        self._carry = buf[out.consumed :].copy()
        rows = out.batch.num_rows
        self._record_index += rows + out.dropped
        if out.replaced:
            self.stats.replaced += out.replaced
            self._log.warning(events.VALUES_REPLACED, count=out.replaced, reason=out.replace_reason)
        if out.dropped:
            reason = out.drop_reason or "invalid"
            self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + out.dropped
            self._log.warning(events.RECORDS_DROPPED, count=out.dropped, reason=reason, stage="decode")
        if not rows:
            return None
        batch = out.batch
        self._count_lost(batch)
        self._track_time(batch)
        if self.stream.aging is not None:
            batch = batch.append_column("aging", pa.array(np.full(rows, self.stream.aging)))
        self.stats.records += rows
        self.stats.batches += 1
        self._log.debug(events.BATCH_DECODED, rows=rows, offset=begin)
        return batch

    def _count_lost(self, batch: pa.RecordBatch) -> None:
        name = self.codec.counter
        if name is None:
            return
        values = batch.column(name).to_numpy()
        lost = counter_gaps(values, self._last_counter)
        self._last_counter = int(values[-1])
        if lost:
            self.stats.lost += lost
            self._log.warning(events.RECORDS_LOST, count=lost, counter=name)

    def _track_time(self, batch: pa.RecordBatch) -> None:
        name = self.stats.time_column
        if name is None:
            name = next((c for c in TIME_COLUMNS if c in batch.schema.names), None)
            if name is None:
                return
            self.stats.time_column = name
        bounds = pc.min_max(batch.column(name))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:
            return
        self.stats.time_min = low if self.stats.time_min is None else min(self.stats.time_min, low)
        self.stats.time_max = high if self.stats.time_max is None else max(self.stats.time_max, high)

    # -- alignment, gaps, resume --------------------------------------------------------------

    def _align(self) -> None:
        """Decide the leading drop once, from the sizes of the remaining slices."""
        if self._lead is not None or self._index >= len(self._files):
            return
        record = self.codec.record_size
        first = self._files[self._index]
        lead = 0
        if record and (self._realign or first.slice > 0 or self._alignment == "msprof"):
            lead = (sum(_size(f.path) for f in self._files[self._index :]) - self._offset) % record
        self._lead = self._lead_pending = lead
        self._realign = False
        if lead:
            self.stats.leading_bytes_dropped += lead
            self._log.warning(
                events.LEADING_BYTES_DROPPED, count=lead, file=first.name, slice=first.slice, record=record
            )

    def _gap(self, missing: SliceFile) -> None:
        """Slice ``missing`` vanished (aged) unread: re-align on the next slice by msprof's rule."""
        self.stats.gaps += 1
        self._log.warning(events.GAP, file=missing.name, carry=len(self._carry))
        self._slice_no = missing.slice
        self._carry = _EMPTY
        self._offset = 0
        self._last_counter = None
        self._lead = None
        self._realign = True
        self._align()

    def _refresh(self, listings: Listings | None) -> None:
        """Re-list the stream's slices (tail mode), keeping the place in the current one."""
        current = self._files[self._index] if self._index < len(self._files) else None
        self._files = list(self.stream.rescan(listings).files)
        names = [f.name for f in self._files]
        if current is not None and current.name in names:
            self._index = names.index(current.name)
            return
        self._index = self._after(self._slice_no if current is None else current.slice)
        if current is not None:
            self._gap(current)

    def _restore(self, state: StreamOffsets) -> None:
        self._stream_offset = state.stream_offset
        self._record_index = state.record_index
        self._last_counter = state.last_counter
        self._lead = state.leading_dropped
        self._slice_no = state.slice
        names = [f.name for f in self._files]
        if state.file is not None and state.file in names:
            self._index = names.index(state.file)
            self._offset = state.offset
            self._carry = np.frombuffer(state.carry, np.uint8).copy()
            return
        self._index = self._after(state.slice)
        if state.file is not None:
            self._gap(SliceFile(state.slice, state.file, self.stream.data_dir / state.file))

    def _after(self, slice_no: int) -> int:
        """Index of the first slice numbered after ``slice_no``."""
        return next((i for i, f in enumerate(self._files) if f.slice > slice_no), len(self._files))

    def _locate(self, stream_offset: int) -> tuple[Path, int]:
        """The slice file holding byte ``stream_offset`` of the stream, and the offset inside it."""
        if not self._starts:
            return (self._files[0].path if self._files else self.stream.data_dir), stream_offset
        position = bisect.bisect_right([s for s, _ in self._starts], stream_offset) - 1
        start, path = self._starts[max(position, 0)]
        return path, stream_offset - start

    def _relocated(self, err: DecodeError) -> DecodeError:
        """``err`` re-addressed from a stream offset to the slice file and the offset inside it."""
        path, offset = self._locate(err.offset or 0)
        return DecodeError(
            err.reason, path=path, offset=offset, record_index=err.record_index, family=err.family
        )
