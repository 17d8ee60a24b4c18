"""TLV framing of the PyTorch adapter's FRAMEWORK files, walked without per-record objects.

Layout: specs/framework_outputs.md §1.2 (torch_npu ``toolkit/profiler/inc/data_reporter.h``
writes it, ``prof_common_func/_tlv_decoder.py`` reads it). A file is a run of records, each a
u16 record type, a u32 value length and the value; a value is a fixed-size packed struct followed
by zero or more fields, each a u16 field type, a u32 length and UTF-8 bytes. Everything is
little-endian.

The walk is sequential by nature, so it runs in small numba kernels that return arrays of record
and field offsets; fixed parts and text columns are then gathered into Arrow buffers in one pass
each. The kernels compile on first use (not when ``profstream.codecs`` is imported) and are cached
on disk; numba is imported here only.

Rules, and where they differ from torch_npu's reader:

* The record type is ignored: the file name decides the layout, as in torch_npu.
* An incomplete record (header or value) at the end of a buffer is not consumed, so the caller can
  carry it into the next buffer. At the end of the stream (``ctx.final``) it is reported: an error
  under the ``error`` policy, dropped and counted under ``skip`` (torch_npu warns "The collected
  data has been lost" and stops).
* A value length above :data:`MAX_VALUE_LENGTH` (64 MiB, far above any record the writer's 5 MB
  batches can hold) means the framing is corrupt. Nothing after it can be framed, so it is a
  :class:`~profstream.errors.DecodeError` under both policies, and no memory is sized from it.
* A value shorter than its fixed part, or whose fields do not end exactly where the value ends, is
  an invalid record (error, or skip and count). torch_npu skips the first kind with a warning and
  keeps whatever fields it could read of the second; half-read records are not kept here.
* A field type repeated within one record: the last one wins (torch_npu reads fields into a dict).
  A field type the layout does not know is ignored. An absent field is null.
* A field that is not valid UTF-8 becomes ``'N/A'`` and is counted in ``Decoded.replaced``
  (torch_npu does the same and prints one counted warning).

Layout generations: torch_npu changed the fixed parts and field ids several times
(specs/framework_outputs.md §1.5). A :class:`TlvLayout` lists every :class:`Generation` of a file
and maps them onto one output schema; :meth:`TlvLayout.detect` picks the generation of a buffer
from the data itself (see there).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs._base import ByteBuffer, DecodeContext, Decoded, batch, column, row_count
from profstream.errors import DecodeError

#: u16 type + u32 length, in front of every record and every field.
HEADER_SIZE = 6
#: a longer record value is corrupt framing (the writer batches at most 5 MB).
MAX_VALUE_LENGTH = 64 * 2**20
#: how many leading records of a buffer vote on its layout generation.
DETECT_SAMPLE = 256
#: what a field that is not valid UTF-8 becomes (torch_npu ``_tlv_decoder.py``).
PLACEHOLDER = "N/A"
_PLACEHOLDER_BYTES = np.frombuffer(PLACEHOLDER.encode(), np.uint8)
TRUNCATED = "truncated record at end of stream"
#: ``Decoded.replace_reason`` of texts that became :data:`PLACEHOLDER`
NOT_UTF8 = f"text not valid UTF-8, kept as {PLACEHOLDER!r}"

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
UInt16Array = npt.NDArray[np.uint16]

# why the record walk stopped
_END, _SHORT_HEADER, _SHORT_VALUE, _ABSURD = range(4)
_INT32_MAX = 2**31 - 1

_F = TypeVar("_F", bound=Callable[..., Any])
_DISPATCHERS: dict[str, Any] = {}


def _jit(fn: _F) -> _F:
    """Compile ``fn`` with numba on its first call, not at import; the machine code is cached on disk."""

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        kernel = _DISPATCHERS.get(fn.__name__)
        if kernel is None:
            numba = importlib.import_module("numba")
            kernel = _DISPATCHERS[fn.__name__] = numba.njit(cache=True, nogil=True)(fn)
        return kernel(*args)

    return cast(_F, call)


# --------------------------------------------------------------------------- kernels


@_jit
def _scan_records(buf: ByteBuffer, limit: int) -> tuple[Int64Array, Int64Array, int, int]:
    """Value offsets and lengths of the whole records of ``buf``, where the walk stopped and why."""
    n = buf.size
    starts = np.empty(0, np.int64)
    lengths = np.empty(0, np.int64)
    count = 0
    pos = 0
    status = _END
    for fill in (False, True):
        if fill:
            starts = np.empty(count, np.int64)
            lengths = np.empty(count, np.int64)
        pos = 0
        status = _END
        i = 0
        while pos < n:
            if n - pos < HEADER_SIZE:
                status = _SHORT_HEADER
                break
            length = 0
            for b in range(4):
                length |= int(buf[pos + 2 + b]) << (8 * b)
            if length > limit:
                status = _ABSURD
                break
            if n - pos - HEADER_SIZE < length:
                status = _SHORT_VALUE
                break
            if fill:
                starts[i] = pos + HEADER_SIZE
                lengths[i] = length
            i += 1
            pos += HEADER_SIZE + length
        count = i
    return starts, lengths, pos, status


@_jit
def _scan_fields(
    buf: ByteBuffer, starts: Int64Array, lengths: Int64Array, fixed: int
) -> tuple[BoolArray, Int64Array, UInt16Array, Int64Array, Int64Array]:
    """Per record: does the value tile as fixed part + whole fields; per field of those records:
    its record index, type, byte offset and length."""
    nrec = starts.size
    ok = np.zeros(nrec, np.bool_)
    record = np.empty(0, np.int64)
    kind = np.empty(0, np.uint16)
    fstart = np.empty(0, np.int64)
    flen = np.empty(0, np.int64)
    total = 0
    for fill in (False, True):
        if fill:
            record = np.empty(total, np.int64)
            kind = np.empty(total, np.uint16)
            fstart = np.empty(total, np.int64)
            flen = np.empty(total, np.int64)
        j = 0
        for i in range(nrec):
            if lengths[i] < fixed or (fill and not ok[i]):
                continue
            pos = starts[i] + fixed
            end = starts[i] + lengths[i]
            first = j
            while end - pos >= HEADER_SIZE:
                word = 0
                for b in range(HEADER_SIZE):
                    word |= int(buf[pos + b]) << (8 * b)
                length = word >> 16
                if end - pos - HEADER_SIZE < length:
                    break
                if fill:
                    record[j] = i
                    kind[j] = word & 0xFFFF
                    fstart[j] = pos + HEADER_SIZE
                    flen[j] = length
                j += 1
                pos += HEADER_SIZE + length
            if pos == end:
                ok[i] = True
            else:
                j = first
        total = j
    return ok, record, kind, fstart, flen


@_jit
def _gather(buf: ByteBuffer, starts: Int64Array, lengths: Int64Array) -> ByteBuffer:
    """The byte ranges ``starts``/``lengths`` of ``buf``, back to back."""
    out = np.empty(lengths.sum(), np.uint8)
    pos = 0
    for i in range(starts.size):
        for p in range(starts[i], starts[i] + lengths[i]):
            out[pos] = buf[p]
            pos += 1
    return out


@_jit
def _field_table(record: Int64Array, kind: UInt16Array, slots: Int64Array, count: int) -> Int64Array:
    """Per text column (``slots`` maps a field type to its column, -1 if unknown) and record: the
    index of the record's last field of that type, -1 if it has none."""
    table = np.full((slots.max() + 1, count), -1, np.int64)
    for f in range(record.size):
        slot = slots[kind[f]]
        if slot >= 0:
            table[slot, record[f]] = f
    return table


@_jit
def _gather_text(
    buf: ByteBuffer, starts: Int64Array, lengths: Int64Array, chosen: Int64Array, placeholder: ByteBuffer
) -> tuple[ByteBuffer, Int64Array, int]:
    """Arrow string data and offsets of fields ``chosen`` (-1: null, empty); a field that is not
    valid UTF-8 (as Python's strict decoder defines it) becomes ``placeholder`` and is counted."""
    n = chosen.size
    total = 0
    for i in range(n):
        if chosen[i] >= 0:
            total += max(lengths[chosen[i]], placeholder.size)
    out = np.empty(total, np.uint8)
    offsets = np.zeros(n + 1, np.int64)
    pos = 0
    bad = 0
    for i in range(n):
        f = chosen[i]
        if f < 0:
            offsets[i + 1] = pos
            continue
        s = starts[f]
        e = s + lengths[f]
        p = s
        valid = True
        while p < e and valid:
            lead = buf[p]
            p += 1
            if lead < 0x80:
                continue
            need, lo, hi = 0, 0x80, 0xBF  # continuation bytes; bounds of the first one
            if 0xC2 <= lead <= 0xDF:
                need = 1
            elif lead == 0xE0:
                need, lo = 2, 0xA0  # no overlong 3-byte forms
            elif lead == 0xED:
                need, hi = 2, 0x9F  # no surrogates
            elif 0xE1 <= lead <= 0xEF:
                need = 2
            elif lead == 0xF0:
                need, lo = 3, 0x90  # no overlong 4-byte forms
            elif 0xF1 <= lead <= 0xF3:
                need = 3
            elif lead == 0xF4:
                need, hi = 3, 0x8F  # nothing above U+10FFFF
            valid = need > 0 and e - p >= need and lo <= buf[p] <= hi
            for k in range(1, need):
                valid = valid and buf[p + k] & 0xC0 == 0x80
            p += need
        if valid:
            out[pos : pos + e - s] = buf[s:e]
            pos += e - s
        else:
            out[pos : pos + placeholder.size] = placeholder
            pos += placeholder.size
            bad += 1
        offsets[i + 1] = pos
    return out[:pos], offsets, bad


# --------------------------------------------------------------------------- walking


@dataclass(frozen=True, slots=True)
class Records:
    """The whole records at the start of a buffer: value offsets and lengths (bytes)."""

    starts: Int64Array
    lengths: Int64Array
    stop: int  # buf[stop:] is an incomplete record
    expected: str  # what the incomplete record at ``stop`` still needs ("" if none)


@dataclass(frozen=True, slots=True)
class Fields:
    """The fields of the records whose values tile exactly as fixed part + whole fields."""

    ok: BoolArray  # per record
    record: Int64Array  # per field: index of its record
    kind: UInt16Array  # per field: field type
    start: Int64Array  # per field: byte offset of its bytes in the buffer
    length: Int64Array

    def select(self, keep: BoolArray) -> Fields:
        """The fields of the records in ``keep``, with records renumbered after dropping the others."""
        mine = keep[self.record]
        renumber = np.cumsum(keep) - 1
        return Fields(
            self.ok[keep], renumber[self.record[mine]], self.kind[mine], self.start[mine], self.length[mine]
        )


_NO_FIELDS = (np.empty(0, np.int64), np.empty(0, np.uint16), np.empty(0, np.int64), np.empty(0, np.int64))


def walk(buf: ByteBuffer, ctx: DecodeContext, family: str) -> Records:
    """Frame ``buf`` into records; an absurd value length raises (the framing cannot be trusted)."""
    starts, lengths, stop, status = _scan_records(buf, MAX_VALUE_LENGTH)
    stop = int(stop)
    header = bytes(buf[stop : stop + HEADER_SIZE])
    length = int.from_bytes(header[2:], "little") if len(header) == HEADER_SIZE else 0
    if status == _ABSURD:
        msg = (
            f"{family}: expected a record value length of at most {MAX_VALUE_LENGTH} bytes, "
            f"found {length} (corrupt framing)"
        )
        raise DecodeError(
            msg,
            path=ctx.path,
            offset=ctx.offset + stop,
            record_index=ctx.record_index + len(starts),
            family=family,
        )
    expected = {
        _END: "",
        _SHORT_HEADER: f"a {HEADER_SIZE}-byte record header (u16 type, u32 length)",
        _SHORT_VALUE: f"a record of {HEADER_SIZE} + {length} bytes",
    }[int(status)]
    return Records(starts, lengths, stop, expected)


def scan_fields(buf: ByteBuffer, starts: Int64Array, lengths: Int64Array, fixed_size: int) -> Fields:
    """The fields after a ``fixed_size``-byte fixed part in each value; see :class:`Fields`."""
    return Fields(*_scan_fields(buf, starts, lengths, fixed_size))


def fixed_parts(buf: ByteBuffer, starts: Int64Array, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The fixed parts (``dtype``) of the record values starting at ``starts``, as one array.

    Records at a regular stride (all values of one length, e.g. files without fields) are viewed
    in place, without a copy.
    """
    steps = np.diff(starts)
    if len(steps) and (steps == steps[0]).all() and steps[0] >= dtype.itemsize:
        first, stride = int(starts[0]), int(steps[0])
        rows = np.lib.stride_tricks.as_strided(
            buf[first:], (len(starts), dtype.itemsize), (stride, 1), writeable=False
        )
        return rows.view(dtype)[:, 0]
    return _gather(buf, starts, np.full(len(starts), dtype.itemsize, np.int64)).view(dtype)


def headers(kinds: Int64Array, lengths: Int64Array) -> ByteBuffer:
    """TLV headers (u16 type, u32 length) for each pair, back to back."""
    words = (kinds | (lengths << 16)).astype("<u8")
    return np.ascontiguousarray(words.view(np.uint8).reshape(-1, 8)[:, :HEADER_SIZE]).ravel()


def settle_tail(
    ctx: DecodeContext, *, family: str, stop: int, size: int, record_index: int, expected: str
) -> int:
    """How much of a ``size``-byte buffer is consumed when its whole records end at ``stop``.

    Before the end of the stream the incomplete tail is left for the next buffer. At the end
    (``ctx.final``) it is an error under the ``error`` policy, and consumed as one dropped record
    under ``skip`` (the caller counts it).
    """
    if stop == size or not ctx.final:
        return stop
    if ctx.on_invalid == "error":
        msg = f"{family}: {TRUNCATED}: expected {expected}, found only {size - stop} bytes"
        raise DecodeError(
            msg, path=ctx.path, offset=ctx.offset + stop, record_index=record_index, family=family
        )
    return size


def text_columns(
    buf: ByteBuffer, fields: Fields, count: int, kinds: Mapping[int, int]
) -> tuple[list[pa.Array], int]:
    """String columns of ``count`` records, column ``kinds[t]`` from fields of type ``t`` (null
    where absent, the last one where repeated), and how many values were not valid UTF-8 and
    became 'N/A'."""
    slots = np.full(2**16, -1, np.int64)
    for kind, slot in kinds.items():
        slots[kind] = slot
    table = _field_table(fields.record, fields.kind, slots, count)
    columns = []
    replaced = 0
    for chosen in table:
        data, offsets, bad = _gather_text(buf, fields.start, fields.length, chosen, _PLACEHOLDER_BYTES)
        if offsets[-1] > _INT32_MAX:
            msg = f"a text column of {int(offsets[-1])} bytes is too long for an Arrow string array"
            raise ValueError(msg)
        present = chosen >= 0
        nulls = count - int(present.sum())
        validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
        columns.append(
            pa.StringArray.from_buffers(
                count, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), validity, nulls
            )
        )
        replaced += int(bad)
    return columns, replaced


def strings(
    value: Any, count: int, *, fill_null: bool
) -> tuple[Int64Array, Int64Array, BoolArray, ByteBuffer]:
    """(starts, lengths, present, data) of a text column given to ``encode``; nulls become '' if
    ``fill_null``, else absent fields (length 0)."""
    array = pa.nulls(count, pa.string()) if value is None else value
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not isinstance(array, pa.Array):
        array = pa.array(array, pa.string())
    array = array.cast(pa.string())
    if fill_null:
        array = array.fill_null("")
    present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if not present.any():
        empty = np.zeros(count, np.int64)
        return empty, empty, present, np.empty(0, np.uint8)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[array.offset : array.offset + count + 1].astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return offsets[:-1], np.diff(offsets) * present, present, data


# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class Generation:
    """One historical layout of a TLV file: its fixed part and field ids.

    ``required`` are the field ids the writer always writes (the name); a record of this
    generation carries them, which tells apart generations whose fixed parts have the same size.
    ``encode`` writes them even when null (as '').
    """

    name: str  # the first torch_npu branch that wrote it (specs/framework_outputs.md §1.5)
    fixed: np.dtype[Any]
    fields: Mapping[int, str]  # field id -> text column
    required: frozenset[int] = frozenset()
    record_type: int = 1  # what the writer puts in the record type (the reader ignores it)

    @property
    def size(self) -> int:
        return self.fixed.itemsize

    def matches(
        self, buf: ByteBuffer, starts: Int64Array, lengths: Int64Array, scanned: dict[int, Fields]
    ) -> BoolArray:
        """Which records could be of this generation: the value is exactly the fixed part (no
        fields in this generation), or the fixed part plus whole fields whose ids this generation
        knows, including every required one."""
        if not self.fields:
            return np.asarray(lengths == self.size, np.bool_)
        if self.size not in scanned:
            scanned[self.size] = scan_fields(buf, starts, lengths, self.size)
        found = scanned[self.size]
        ok = found.ok.copy()
        ok[found.record[~np.isin(found.kind, list(self.fields))]] = False
        for kind in self.required:
            has = np.zeros(len(ok), np.bool_)
            has[found.record[found.kind == kind]] = True
            ok &= has
        return ok


@dataclass(frozen=True, slots=True)
class TlvLayout:
    """Every generation of one TLV file, mapped onto one output schema.

    ``numbers`` are the fixed-part columns (name -> output numpy dtype, wide enough for every
    generation), ``texts`` the field columns; a column a generation lacks is null.
    ``generations`` run oldest first, the last one being what the current writer produces.
    """

    family: str
    numbers: Mapping[str, str]
    texts: tuple[str, ...]
    generations: tuple[Generation, ...]

    def __post_init__(self) -> None:
        for gen in self.generations:
            unknown = (set(gen.fixed.names or ()) - set(self.numbers)) | (
                set(gen.fields.values()) - set(self.texts)
            )
            if unknown or not gen.required <= set(gen.fields):
                msg = (
                    f"{self.family} generation {gen.name}: columns {sorted(unknown)} not in the output schema"
                )
                raise AssertionError(msg)

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    def generation(self, name: str | None) -> Generation:
        """The generation called ``name`` (None: the current one)."""
        for gen in self.generations:
            if gen.name == name:
                return gen
        if name is None:
            return self.current
        known = ", ".join(gen.name for gen in self.generations)
        msg = f"{self.family}: unknown layout generation {name!r}; known: {known}"
        raise ValueError(msg)

    def detect(self, buf: ByteBuffer, records: Records) -> Generation:
        """The generation of a buffer, from its data.

        The first :data:`DETECT_SAMPLE` records vote: each generation scores the records that
        could be of it (:meth:`Generation.matches`: value size, whole fields, known and required
        field ids); the highest score wins and ties go to the newer generation (so an empty
        buffer decodes as the current layout). This separates every pair in §1.5: fixed parts
        of different sizes (op_range 57/58 B, memory_usage 58/75/76/77 B) by whether the fields
        tile the rest of the value, same-size generations by their field ids (op_range
        v2.1.0-6.0.rc3 names ops in field 3, master in field 2; op_mark 2 vs 1). Records that do
        not fit the winner are invalid records.
        """
        if len(self.generations) == 1:
            return self.current
        starts, lengths = records.starts[:DETECT_SAMPLE], records.lengths[:DETECT_SAMPLE]
        scanned: dict[int, Fields] = {}
        scores = [int(gen.matches(buf, starts, lengths, scanned).sum()) for gen in self.generations]
        best = max(scores)
        return self.generations[len(scores) - 1 - scores[::-1].index(best)]

    def decode(self, buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
        """Decode the whole records of ``buf`` (see the module docstring for the rules)."""
        records = walk(buf, ctx, self.family)
        gen = self.detect(buf, records)
        if gen.fields:
            fields = scan_fields(buf, records.starts, records.lengths, gen.size)
        else:  # the value is exactly the fixed part
            fields = Fields(np.asarray(records.lengths == gen.size, np.bool_), *_NO_FIELDS)
        keep, dropped = self._reject(fields.ok, ctx, records, gen)
        starts = records.starts
        if keep is not None:
            starts, fields = starts[keep], fields.select(keep)
        consumed = settle_tail(
            ctx,
            family=self.family,
            stop=records.stop,
            size=len(buf),
            record_index=ctx.record_index + len(records.starts),
            expected=records.expected,
        )
        truncated = int(consumed != records.stop)
        count = len(starts)
        fixed = fixed_parts(buf, starts, gen.fixed)
        names = set(gen.fixed.names or ())
        columns: dict[str, Any] = {
            name: fixed[name].astype(dtype)
            if name in names
            else pa.nulls(count, pa.from_numpy_dtype(np.dtype(dtype)))
            for name, dtype in self.numbers.items()
        }
        present = [name for name in self.texts if name in gen.fields.values()]
        slot = {name: index for index, name in enumerate(present)}
        texts, replaced = text_columns(buf, fields, count, {k: slot[name] for k, name in gen.fields.items()})
        found = dict(zip(present, texts, strict=True))
        for name in self.texts:
            columns[name] = found.get(name, pa.nulls(count, pa.string()))
        reasons = [f"value does not fit layout {gen.name}"] * bool(dropped) + [TRUNCATED] * truncated
        return Decoded(
            batch(columns),
            consumed,
            dropped + truncated,
            "; ".join(reasons),
            replaced,
            NOT_UTF8 * bool(replaced),
        )

    def encode(self, columns: Mapping[str, Any], generation: str | None = None) -> bytes:
        """Records in layout ``generation`` (default: the current writer's) from decoded columns.

        Null text values are not written (they decode as null), except required fields, which
        are written as '' like the writer's empty strings. Fields follow in id order, as the
        writer emits them.
        """
        gen = self.generation(generation)
        count = row_count(columns)
        fixed = np.zeros(count, gen.fixed)
        for name in gen.fixed.names or ():
            fixed[name] = column(columns, name, count, gen.fixed[name])
        kinds = sorted(gen.fields)
        texts = [
            strings(columns.get(gen.fields[kind]), count, fill_null=kind in gen.required) for kind in kinds
        ]
        # The output is a gather of segments from one source buffer laid out as
        # [record headers | field headers (record-major) | fixed parts | text bytes];
        # per record: record header, fixed part, then header and bytes of each field.
        segments = 2 + 2 * len(kinds)
        starts = np.zeros((count, segments), np.int64)
        lengths = np.zeros((count, segments), np.int64)
        values = np.full(count, gen.size, np.int64)
        field_kinds = np.zeros((count, len(kinds)), np.int64)
        field_lengths = np.zeros((count, len(kinds)), np.int64)
        fixed_base = HEADER_SIZE * count * (1 + len(kinds))
        text_base = fixed_base + gen.size * count
        rows = np.arange(count, dtype=np.int64)
        starts[:, 0] = HEADER_SIZE * rows
        lengths[:, 0] = HEADER_SIZE
        starts[:, 1] = fixed_base + gen.size * rows
        lengths[:, 1] = gen.size
        for j, (kind, (start, length, present, data)) in enumerate(zip(kinds, texts, strict=True)):
            values += (HEADER_SIZE + length) * present
            field_kinds[:, j], field_lengths[:, j] = kind, length
            starts[:, 2 + 2 * j] = HEADER_SIZE * (count + rows * len(kinds) + j)
            lengths[:, 2 + 2 * j] = HEADER_SIZE * present
            starts[:, 3 + 2 * j] = text_base + start
            lengths[:, 3 + 2 * j] = length
            text_base += len(data)
        source = np.concatenate(
            [
                headers(np.full(count, gen.record_type, np.int64), values),
                headers(field_kinds.ravel(), field_lengths.ravel()),
                fixed.view(np.uint8),
                *(text[3] for text in texts),
            ]
        )
        return bytes(_gather(source, starts.ravel(), lengths.ravel()))

    def _reject(
        self, ok: BoolArray, ctx: DecodeContext, records: Records, gen: Generation
    ) -> tuple[BoolArray | None, int]:
        """Apply the invalid-record policy to records whose value does not fit ``gen``."""
        if ok.all():
            return None, 0
        first = int(np.argmin(ok))
        if ctx.on_invalid == "skip":
            return ok, int(len(ok) - ok.sum())
        shape = f"a {gen.size}-byte value" if not gen.fields else f"{gen.size} fixed bytes then whole fields"
        msg = (
            f"{self.family}: expected {shape} (layout {gen.name}), "
            f"found a {int(records.lengths[first])}-byte value that does not fit"
        )
        raise DecodeError(
            msg,
            path=ctx.path,
            offset=ctx.offset + int(records.starts[first]) - HEADER_SIZE,
            record_index=ctx.record_index + first,
            family=self.family,
        )
