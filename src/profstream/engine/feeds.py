"""Feeds: decoded record batches of one family with their times converted to host-monotonic ns.

Each family's time columns and the clock that converts them are listed once, in
:data:`TIME_SPECS` (cann_raw_formats.md §3.2; framework_outputs.md §1.4). Converted columns are
appended as int64 ``*_ns`` columns; the raw columns stay for operators that need native units.

Choices: ``npu_mem`` and version-1.0 ``hbm`` timestamps are microseconds without the device
monotonic offset, converted as msprof's Python ``get_absolute_time_by_sampling_timestamp`` does
(``us * 1000 + host monotonic``, cann_raw_formats.md §2.11 and the §3.2 caveat; msprof adds the
wall-clock offset too, which profstream adds when it writes). Version-2.0 ``hbm`` timestamps are ns
that msprof keeps as its absolute (wall-clock) time, so profstream takes off the collection's wall-clock
offset, the one its outputs add back (``Profile.wall_offset_ns``).
``npu_module_mem`` cycle counts go through the device dir's host-counter conversion (msprof
``time_from_host_syscnt(..., is_host=False)``). PMU families with no time (``aicore``, ``aiv``) are
ordered like the task log they belong to and follow its watermark (see
:class:`~profstream.engine.runtime.Feed`).

A host family with both unaging and aging slices is read as two time-ordered streams merged row
by row into one time order (the readers' ``aging`` bool column tells them apart), so a run whose
static node info grows with its length still streams; ``aging=`` picks one group instead.

Follow mode (``FeedSet(..., follow=Follow())``, the collector daemon): readers tail growing
slices (:class:`~profstream.engine.sources.StreamReader` ``follow=True``) and a feed yields
:data:`~profstream.engine.runtime.WAIT` when nothing new is written. Slices are re-listed once per
:meth:`Follow.poll` (not on every read); once :attr:`Follow.closing` is set (the collection wrote
its end files) each stream is read to its end, its partial last record reported, and the feed
ends as an offline one does. A family with unaging and aging streams waits while either has
nothing pending, so the merge never releases a row an older one could still precede.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs._base import OnInvalid
from profstream.engine import discovery
from profstream.engine.clock import DeviceClock, FrameworkClock
from profstream.engine.runtime import WAIT, Feed, ipc_stream
from profstream.engine.sources import DEFAULT_CHUNK_BYTES, Listings, Stream, StreamOffsets, StreamReader


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """Which raw columns become which ns columns, through which clock; ``order`` is watermarked."""

    conversions: tuple[tuple[str, str, str], ...]  # (raw column, ns column, clock kind)
    order: str | None  # None: no time of its own (follows its task log)


def _spec(order: str | None, *conversions: tuple[str, str, str]) -> TimeSpec:
    return TimeSpec(conversions, order)


_SYSCNT = ("syscnt", "time_ns", "syscnt")
_HOST_TS = ("timestamp", "time_ns", "host")

TIME_SPECS: dict[str, TimeSpec] = {
    **{f: _spec("time_ns", _SYSCNT) for f in ("hwts", "hwts_aiv", "stars_soc", "stars_soc_v6")},
    **{f: _spec("time_ns", _SYSCNT) for f in ("ts_track", "ts_track_aiv", "training_trace", "lpm_freq")},
    # FFTS+ PMU records are written when the task ends: ordered by end
    **{
        f: _spec("end_ns", ("start_syscnt", "start_ns", "syscnt"), ("end_syscnt", "end_ns", "syscnt"))
        for f in ("ffts_profile", "ffts_profile_v6")
    },
    "aicore": _spec(None),
    "aiv": _spec(None),
    "l2_cache": _spec(None),
    "npu_mem": _spec("time_ns", ("timestamp", "time_ns", "sampling_us")),
    "npu_mem_app": _spec("time_ns", ("timestamp", "time_ns", "sampling_us")),
    "hbm": _spec("time_ns", ("timestamp", "time_ns", "sampling_us")),
    "hbm_v2": _spec("time_ns", ("timestamp", "time_ns", "wall")),
    "npu_module_mem": _spec("time_ns", ("cpu_cycle_count", "time_ns", "host")),
    "api_event": _spec("start_ns", ("begin_time", "start_ns", "host"), ("end_time", "end_ns", "host")),
    **{
        f: _spec("time_ns", _HOST_TS)
        for f in (
            "task_track",
            "task_track_v2",
            "runtime_track",
            "node_basic_info",
            "node_attr_info",
            "memcpy_info",
            "hccl_op_info",
            "capture_stream_info",
            "expand_stream_spec",
            "tensor_info",
            "context_id_info",
            "graph_id_map",
            "fusion_op_info",
            "hccl_info",
            "multi_thread",
            "task_memory_info",
            "static_op_mem",
            "memory_application",
            "logic_stream_info",
        )
    },
    # torch_npu records: raw framework timestamps, converted in place to host-monotonic ns
    "torch_op_range": _spec(
        "end_ns", ("start_ns", "start_ns", "framework"), ("end_ns", "end_ns", "framework")
    ),
    "torch_op_mark": _spec("time_ns", ("time_ns", "time_ns", "framework")),
    "torch_memory_usage": _spec("time_ns", ("time_ns", "time_ns", "framework")),
    "torch_gc_record": _spec(
        "end_ns", ("start_ns", "start_ns", "framework"), ("end_ns", "end_ns", "framework")
    ),
    "torch_python_tracer_func": _spec("ts", ("ts", "ts", "framework")),
}

Converter = Callable[[np.ndarray[Any, Any]], np.ndarray[Any, np.dtype[np.int64]]]


def converters(clock: DeviceClock | FrameworkClock | None, wall_offset_ns: int = 0) -> dict[str, Converter]:
    """The clock kinds of :data:`TIME_SPECS` as functions over one clock (``wall_offset_ns``: the
    collection's, for wall-clock times)."""
    if isinstance(clock, FrameworkClock):
        return {"framework": clock.to_ns}
    if clock is None:
        return {}
    device = clock

    def sampling_us(values: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
        return values.astype(np.int64) * 1000 + np.int64(device.host_mono or 0)

    def wall(values: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
        return values.astype(np.int64) - np.int64(wall_offset_ns)

    return {
        "syscnt": device.syscnt_to_ns,
        "host": device.host_to_ns,
        "sampling_us": sampling_us,
        "wall": wall,
    }


def convert(batch: pa.RecordBatch, spec: TimeSpec, convs: dict[str, Converter]) -> pa.RecordBatch:
    """``batch`` with its ns columns appended (or replaced, for torch_npu's raw ``*_ns``)."""
    for raw, target, kind in spec.conversions:
        values = batch.column(raw).to_numpy(zero_copy_only=False)
        ns = pa.array(convs[kind](values), pa.int64())
        index = batch.schema.get_field_index(target)
        batch = batch.set_column(index, target, ns) if index >= 0 else batch.append_column(target, ns)
    return batch


def first_framework_time(data_dir: discovery.DataDir, *, read_bytes: int = 1 << 16) -> int | None:
    """The earliest raw timestamp in the first whole records of each framework stream written so far
    (the daemon tells torch_npu's clock by it, :func:`~profstream.engine.clock.framework_counts_syscnt`);
    None before any such record."""
    found = []
    for stream in data_dir.streams:
        spec = TIME_SPECS.get(stream.family)
        if spec is None or not spec.conversions or spec.conversions[0][2] != "framework":
            continue
        raw = spec.conversions[0][0]
        batches = StreamReader(stream, follow=True).read_available(read_bytes)
        found += [int(pc.min(b.column(raw)).as_py()) for b in batches if b.num_rows]
    return min(found, default=None)


@dataclass(slots=True)
class Follow:
    """The live feeds' shared poll state; the daemon calls :meth:`poll` and sets ``closing``."""

    generation: int = 0  # bumped once per poll: readers re-list slices when it changes
    closing: bool = False  # the collection is complete: read every stream to its end
    listings: Listings = field(default_factory=dict)  # this poll's directory listings, shared

    def poll(self) -> None:
        self.generation += 1
        self.listings = {}


class FeedSet:
    """Opens the feeds of one collection, each reading one family of one dir (unaging, then aging)."""

    def __init__(
        self,
        collection: discovery.Profile,
        *,
        on_invalid: OnInvalid = "error",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        positions: dict[str, Any] | None = None,
        follow: Follow | None = None,
    ) -> None:
        self.collection = collection
        self.on_invalid: OnInvalid = on_invalid
        self.chunk_bytes = chunk_bytes
        self.positions = positions or {}
        self.follow = follow

    def clock(self, data_dir: discovery.DataDir) -> DeviceClock | FrameworkClock:
        if data_dir.metadata is None:
            return self.collection.framework_clock()
        return self.collection.clock(data_dir)

    def streams(
        self, data_dir: discovery.DataDir | None, family: str, aging: bool | None = None
    ) -> list[Stream]:
        """The family's streams in reading order; ``aging`` True/False keeps one group only."""
        if data_dir is None:
            return []
        found = [s for s in data_dir.streams if s.family == family]
        if aging is not None:
            found = [s for s in found if s.aging is aging]
        return sorted(found, key=lambda s: bool(s.aging))

    def has(self, data_dir: discovery.DataDir | None, family: str, aging: bool | None = None) -> bool:
        return bool(self.streams(data_dir, family, aging))

    def feed(
        self,
        data_dir: discovery.DataDir,
        family: str,
        *,
        name: str | None = None,
        slack_ns: int = 0,
        follows: str | None = None,
        aging: bool | None = None,
    ) -> Feed:
        """A feed of ``family`` in ``data_dir``, resumed from ``positions[name]`` if given.

        A family without a time (:data:`TIME_SPECS` ``order`` None) must name the feed it
        ``follows``.
        """
        name = name or family
        spec = TIME_SPECS.get(family, _spec(None))
        streams = self.streams(data_dir, family, aging)
        convs = converters(self.clock(data_dir), self.collection.wall_offset_ns) if spec.conversions else {}
        start = self.positions.get(name)
        reading: _Reading | _Merged
        if spec.order is not None and len({s.aging for s in streams}) > 1:
            reading = _Merged(
                streams, spec, convs, self.on_invalid, self.chunk_bytes, start=start, follow=self.follow
            )
            batches: Iterator[pa.RecordBatch] = iter(reading)
        else:
            reading = _Reading(streams, self.on_invalid, self.chunk_bytes, start, follow=self.follow)
            batches = (b if b is WAIT else convert(b, spec, convs) for b in reading)
        if spec.order is None and follows is None:
            msg = f"{family} has no time of its own: say which feed it follows"
            raise ValueError(msg)
        return Feed(
            name, batches, spec.order or "", slack_ns=slack_ns, position=reading.position, follows=follows
        )

    def table(
        self, data_dir: discovery.DataDir | None, family: str, aging: bool | None = None
    ) -> pa.Table | None:
        """A whole (small) family: dictionaries and static node info that operators index up front."""
        streams = self.streams(data_dir, family, aging)
        if data_dir is None or not streams:
            return None
        spec = TIME_SPECS.get(family, _spec(None))
        convs = converters(self.clock(data_dir), self.collection.wall_offset_ns) if spec.conversions else {}
        batches = [convert(b, spec, convs) for b in _Reading(streams, self.on_invalid, self.chunk_bytes)]
        if not batches:
            return None
        return pa.Table.from_batches(batches)


class _Reading:
    """Iterates the streams of one family in order, remembering where it stands."""

    def __init__(
        self,
        streams: Sequence[Stream],
        on_invalid: OnInvalid,
        chunk_bytes: int,
        start: Any = None,
        *,
        follow: Follow | None = None,
    ) -> None:
        self._streams = list(streams)
        self._follow = follow
        self._on_invalid: OnInvalid = on_invalid
        self._chunk = chunk_bytes
        self._index = 0
        resume = None
        if start is not None:
            self._index = int(start[0])
            resume = None if start[1] is None else msgspec.convert(start[1], StreamOffsets)
        self._reader: StreamReader | None = None
        self._resume = resume

    def _open(self) -> StreamReader | None:
        if self._reader is None and self._index < len(self._streams):
            self._reader = StreamReader(
                self._streams[self._index],
                on_invalid=self._on_invalid,
                chunk_size=self._chunk,
                follow=self._follow is not None,
                resume=self._resume,
            )
            self._resume = None
        return self._reader

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._follow is not None:
            yield from self._tail(self._follow)
            return
        while (reader := self._open()) is not None:
            yield from reader
            self._index += 1
            self._reader = None

    def _tail(self, follow: Follow) -> Iterator[pa.RecordBatch]:
        """Follow mode: a chunk at a time, :data:`WAIT` when nothing is new, to the end once closing."""
        seen: int | None = None
        listed_closed = False  # the slices were listed after the collection closed: all are there
        while (reader := self._open()) is not None:
            fresh = seen != follow.generation
            if fresh:
                seen, listed_closed = follow.generation, follow.closing
            # one batch per call: position() must not run ahead of the batches handed over
            batches = reader.read_available(1, rescan=fresh, listings=follow.listings)
            if batches:
                yield from batches
            elif listed_closed:
                yield from reader.finish()
                self._index += 1
                self._reader = None
                seen = None  # the next stream's reader lists its slices afresh
            else:
                yield WAIT

    def position(self) -> Any:
        """``[stream index, reader offsets or None]``, msgpack-encodable.

        A resumed reading not opened yet still stands where it was resumed: its start offsets.
        """
        offsets = self._resume if self._reader is None else self._reader.offsets()
        return [
            self._index,
            None if offsets is None else msgspec.to_builtins(offsets, builtin_types=(bytes,)),
        ]


class _Merged:
    """Streams of one family (unaging and aging slices), each in time order, merged into time order.

    A k-way merge at batch granularity: a row is released once no live stream can still deliver an
    older one, i.e. when it is no later than the last pending time of every live stream.
    """

    def __init__(
        self,
        streams: Sequence[Stream],
        spec: TimeSpec,
        convs: dict[str, Converter],
        on_invalid: OnInvalid,
        chunk_bytes: int,
        *,
        start: Any = None,
        follow: Follow | None = None,
    ) -> None:
        starts = start or [[None, None] for _ in streams]
        self._readings = [
            _Reading([stream], on_invalid, chunk_bytes, position, follow=follow)
            for stream, (position, _) in zip(streams, starts, strict=True)
        ]
        self._iters = [iter(r) for r in self._readings]
        self._pending: list[pa.Table | None] = [
            None if held is None else pa.ipc.open_stream(held).read_all() for _, held in starts
        ]
        self._live = [True] * len(streams)
        self._spec, self._convs = spec, convs
        self._time = spec.order or ""

    def _fill(self, i: int) -> None:
        while self._live[i] and _empty(self._pending[i]):
            batch = next(self._iters[i], None)
            if batch is WAIT:
                return
            if batch is None:
                self._live[i] = False
            elif batch.num_rows:
                self._pending[i] = pa.Table.from_batches([convert(batch, self._spec, self._convs)])

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            for i in range(len(self._readings)):
                self._fill(i)
            if any(live and _empty(t) for live, t in zip(self._live, self._pending, strict=True)):
                yield WAIT  # a live stream has nothing pending yet (follow mode only)
                continue
            held = [(i, t) for i, t in enumerate(self._pending) if t is not None and t.num_rows]
            if not held:
                return
            lasts = [pc.max(t.column(self._time)).as_py() for i, t in held if self._live[i]]
            bound = min(lasts) if lasts else None
            out = []
            for i, table in held:
                if bound is None:
                    ready, rest = table, table.slice(0, 0)
                else:
                    early = pc.less_equal(table.column(self._time), bound)
                    ready, rest = table.filter(early), table.filter(pc.invert(early))
                out.append(ready)
                self._pending[i] = rest
            merged = pa.concat_tables(out).sort_by(self._time)
            yield from merged.combine_chunks().to_batches()

    def position(self) -> Any:
        """Each stream's position and its pending rows (Arrow IPC bytes), msgpack-encodable."""
        return [[r.position(), _ipc(t)] for r, t in zip(self._readings, self._pending, strict=True)]


def _empty(table: pa.Table | None) -> bool:
    return table is None or table.num_rows == 0


def _ipc(table: pa.Table | None) -> bytes | None:
    if table is None or table.num_rows == 0:
        return None
    return bytes(ipc_stream(table).to_pybytes())
