"""The contract every codec module follows, and the vectorised helpers they share.

A codec turns a buffer of raw bytes of one record family into a
``pyarrow.RecordBatch`` of decoded records in native units (syscnt ticks, ids,
hash ids), and back (``encode``, for the simulator and round-trip tests).

Conventions (see DESIGN.md and specs/cann_raw_formats.md):
- every fixed-size layout is one packed little-endian ``np.dtype`` whose
  ``itemsize`` is checked against the documented record size at import time;
- bit fields are unpacked with masks and shifts over whole arrays;
- ``decode`` never creates per-record Python objects;
- the hot fixed-size device families (hwts, aicore, stars_soc, ffts_profile)
  unpack every output column, derived ones included, in one numba pass over
  the records (:func:`record_words` in, :class:`ColumnSet` out) instead of one
  numpy pass per field; storing an int64 into a narrower column keeps its low
  bits, so a field that ends at its column's width needs no mask;
- the output schema is derived from ``decode`` itself (decoding zero bytes), so
  the dtype and the decode function are the single source of truth.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream._numba import kernel
from profstream.errors import DecodeError

OnInvalid = Literal["error", "skip"]
Side = Literal["device", "host", "framework"]
ByteBuffer = npt.NDArray[np.uint8]
Words = npt.NDArray[np.int64]  # records as little-endian 8-byte words (record_words)
U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]

#: chips whose raw formats are the "V6" variants (platform_version 15, 16).
V6_PLATFORMS = frozenset({15, 16})
#: chips with a STARS task scheduler (platform_version 5, 7, 8, 11, 15, 16).
STARS_PLATFORMS = frozenset({5, 7, 8, 11, 15, 16})
#: bytes 2-3 of every HWTS and STARS log record.
DEVICE_LOG_MAGIC = 0x6BD3
#: bytes 0-1 of every host MsprofApi / Event / Compact / Additional record.
HOST_MAGIC = 0x5A5A


@dataclass(frozen=True, slots=True)
class StreamTraits:
    """What a collection says about how its raw streams are laid out.

    Read from info.json / sample.json / expand_stream_spec before decoding;
    codecs whose layout depends on the chip or a collection switch use it.
    """

    platform: int | None = None  # info.json platform_version
    sample_based: bool = False  # sample.json ai_core_profiling_mode == "sample-based"
    aiv_sample_based: bool = False  # sample.json aiv_profiling_mode == "sample-based"
    stream_expand: bool = False  # expand_stream_spec expandStatus == 1
    version: str | None = None  # info.json "version" (selects the npu_mem layout)

    @property
    def is_v6(self) -> bool:
        return self.platform in V6_PLATFORMS


@dataclass(frozen=True, slots=True)
class DecodeContext:
    """Where a buffer comes from, for error messages, and how to treat bad records."""

    path: str = "<memory>"  # the file (first slice of a stream) the buffer was read from
    offset: int = 0  # byte offset of buf[0] in that stream
    record_index: int = 0  # index of the first whole record in buf
    on_invalid: OnInvalid = "error"
    traits: StreamTraits = field(default_factory=StreamTraits)
    final: bool = True  # True when no more bytes follow this buffer


@dataclass(slots=True)
class Decoded:
    """A decoded batch and how much of the buffer it used.

    ``buf[consumed:]`` is an incomplete record (or TLV) that the caller carries
    into the next buffer; ``dropped`` counts invalid records skipped under the
    ``skip`` policy, with ``drop_reason`` saying why. ``replaced`` counts values
    kept but replaced, as the profiler's own tools replace them (a text field
    that is not valid UTF-8 becomes ``'N/A'``, as torch_npu does; a count past
    its array is cut to the array), with ``replace_reason`` saying how.
    """

    batch: pa.RecordBatch
    consumed: int
    dropped: int = 0
    drop_reason: str = ""
    replaced: int = 0
    replace_reason: str = ""


DecodeFn = Callable[[ByteBuffer, DecodeContext], Decoded]
EncodeFn = Callable[[Mapping[str, Any]], bytes]


def _always(_: StreamTraits) -> bool:
    return True


@dataclass(frozen=True)
class Codec:
    """A record family: which files it owns, its record size and its decode/encode."""

    family: str
    side: Side
    patterns: tuple[re.Pattern[str], ...]
    decode: DecodeFn
    encode: EncodeFn
    record_size: int | None  # None: variable-length, the codec walks its own framing
    counter: str | None = None  # column holding the 4-bit rolling lost-record counter
    # False when decode's batch never views ``buf`` (every column is new), so a caller may reuse it
    views_input: bool = True
    applies: Callable[[StreamTraits], bool] = _always
    description: str = ""

    def matches(self, name: str) -> re.Match[str] | None:
        for pattern in self.patterns:
            found = pattern.match(name)
            if found:
                return found
        return None

    @cached_property
    def schema(self) -> pa.Schema:
        return self.decode(np.empty(0, np.uint8), DecodeContext()).batch.schema


def packed_dtype(fields: list[tuple[str, str]], size: int) -> np.dtype[Any]:
    """A packed little-endian structured dtype, checked against the documented record size.

    Field names starting with ``_`` are reserved bytes (``("_rsv", "V44")``).
    """
    dtype = np.dtype(fields)
    if dtype.itemsize != size:
        msg = f"dtype itemsize {dtype.itemsize} != documented record size {size}: {fields}"
        raise AssertionError(msg)
    return dtype


def as_records(buf: ByteBuffer, dtype: np.dtype[Any]) -> tuple[npt.NDArray[Any], int]:
    """Zero-copy view of the whole records at the start of ``buf``; returns (records, consumed)."""
    count = len(buf) // dtype.itemsize
    consumed = count * dtype.itemsize
    return buf[:consumed].view(dtype), consumed


def batch(columns: Mapping[str, npt.ArrayLike | pa.Array]) -> pa.RecordBatch:
    """A RecordBatch from named numpy columns (contiguous numeric columns are not copied)."""
    arrays = [c if isinstance(c, pa.Array) else pa.array(np.ascontiguousarray(c)) for c in columns.values()]
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


def valid_mask(
    ok: npt.NDArray[np.bool_],
    ctx: DecodeContext,
    *,
    record_size: int,
    family: str,
    expected: str,
    found: npt.NDArray[Any],
) -> tuple[npt.NDArray[np.bool_] | None, int]:
    """Apply the invalid-record policy to a per-record validity mask.

    Returns ``(mask, dropped)``: ``mask`` is ``None`` when every record is valid.
    Under the ``error`` policy the first invalid record raises a DecodeError that
    names the stream, its byte offset and what was expected and found.
    """
    if ok.all():
        return None, 0
    first = int(np.argmin(ok))
    if ctx.on_invalid == "error":
        msg = f"{family}: expected {expected}, found {int(found[first]):#x}"
        raise DecodeError(
            msg,
            path=ctx.path,
            offset=ctx.offset + first * record_size,
            record_index=ctx.record_index + first,
            family=family,
        )
    return ok, int(len(ok) - ok.sum())


def device_magic_policy(words: Words, kept: int, ctx: DecodeContext, *, family: str) -> int:
    """How many records a device-log kernel dropped for a bad magic (bytes 2-3); raises under ``error``.

    The kernel kept ``kept`` of ``len(words)`` records, those whose magic is
    :data:`DEVICE_LOG_MAGIC`; the first bad one is looked up again only when there is one.
    """
    if kept == len(words):
        return 0
    magic = (words[:, 0] >> 16) & 0xFFFF
    ok = magic == DEVICE_LOG_MAGIC
    expected = f"magic {DEVICE_LOG_MAGIC:#x} at bytes 2-3"
    _, dropped = valid_mask(
        ok, ctx, record_size=words.itemsize * words.shape[1], family=family, expected=expected, found=magic
    )
    return dropped


def counter_gaps(cnt: npt.NDArray[np.integer[Any]], previous: int | None = None) -> int:
    """Records lost according to a 4-bit rolling counter that should step by one.

    ``previous`` is the last counter value of the preceding batch of the same
    stream, so gaps across batch boundaries are counted too.
    """
    return int(_counter_gaps(cnt, -1 if previous is None else previous))


@kernel
def _counter_gaps(cnt: npt.NDArray[np.integer[Any]], previous: int) -> int:
    """Sum of ``(step - 1) mod 16`` over consecutive values; ``previous`` < 0: none."""
    lost = 0
    last = previous
    for value in cnt:
        step = int(value)
        if last >= 0:
            lost += (step - last - 1) & 15
        last = step
    return lost


def record_words(buf: ByteBuffer, record_size: int) -> tuple[Words, int]:
    """The whole records at the start of ``buf`` as ``(records, record_size // 8)`` int64 words.

    Decoder kernels read fields as shifts and masks of these little-endian
    words (signed, so numba's arithmetic stays in one type). The view is zero-copy
    and always read-only, so a kernel is compiled once for every kind of buffer;
    it may be unaligned (after a leading drop), which x86 and ARM64 loads accept.
    Returns the words and the bytes they span.
    """
    count = len(buf) // record_size
    consumed = count * record_size
    words = buf[:consumed].view(np.int64).reshape(count, record_size // 8)
    words.flags.writeable = False
    return words, consumed


#: bytes between the starts of successive output columns, modulo a page (see ColumnSet.empty).
_COLUMN_STAGGER = 9 * 64
_PAGE = 4096


@lru_cache(maxsize=64)
def _column_starts(columns: ColumnSet, rows: int) -> tuple[tuple[int, ...], int]:
    """Byte offsets of the columns of ``rows`` values in a page-aligned block, and its size."""
    starts, end = [], 0
    for k, (_, dtype) in enumerate(columns.fields):
        start = end + (k * _COLUMN_STAGGER - end) % _PAGE
        starts.append(start)
        end = start + rows * dtype.itemsize
    return tuple(starts), end


@dataclass(frozen=True)
class ColumnSet:
    """Names and numpy dtypes of a decoder kernel's output columns, in schema order.

    :meth:`empty` allocates them, the kernel fills them in one pass over the
    records, and :meth:`batch` wraps them in a RecordBatch without copying. A
    batch's columns share one block from Arrow's memory pool (which keeps freed
    blocks for reuse, where the system allocator returned and re-faulted them
    window after window); the block is freed when the last column dies.
    """

    fields: tuple[tuple[str, np.dtype[Any]], ...]

    @classmethod
    def of(cls, **dtypes: npt.DTypeLike) -> ColumnSet:
        return cls(tuple((name, np.dtype(dtype)) for name, dtype in dtypes.items()))

    def empty(self, rows: int) -> list[npt.NDArray[Any]]:
        """Uninitialised columns of ``rows`` values, carved from one allocation, 64-byte aligned.

        A kernel writes every column for each record. Columns that start at the
        same offset modulo 4 KiB advance through the same L1 cache sets and evict
        each other (measured: 1.8 GB/s instead of 11 for sixteen u64 columns), so
        column k starts at ``k * 576`` modulo a page.
        """
        starts, size = _column_starts(self, rows)
        block = pa.allocate_buffer(size + _PAGE)
        shift = -block.address % _PAGE
        return [
            np.frombuffer(block, dtype, rows, shift + start)
            for start, (_, dtype) in zip(starts, self.fields, strict=True)
        ]

    def batch(self, columns: list[npt.NDArray[Any]], rows: int) -> pa.RecordBatch:
        """The first ``rows`` values of ``columns`` (from :meth:`empty`) as a RecordBatch, zero-copy."""
        return pa.RecordBatch.from_arrays(
            [pa.array(values[:rows]) for values in columns], names=[name for name, _ in self.fields]
        )


def column(mapping: Mapping[str, Any], name: str, count: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """Column ``name`` of an encode() input as an array of ``dtype``; zeros when absent or null."""
    value = mapping.get(name)
    if value is None:
        return np.zeros(count, dtype)
    if isinstance(value, pa.Array | pa.ChunkedArray):
        value = value.fill_null(0).to_numpy(zero_copy_only=False)
    return np.asarray(value).astype(dtype, copy=False)


def pack_records(columns: Mapping[str, Any], dtype: np.dtype[Any]) -> bytes:
    """Records of ``dtype`` whose fields (all but the reserved ``_`` ones) come from encode() input
    ``columns``, each as its field's type (zeros where a column is absent)."""
    n = row_count(columns)
    records = np.zeros(n, dtype)
    for name in dtype.names or ():
        if not name.startswith("_"):
            records[name] = column(columns, name, n, dtype[name])
    return records.tobytes()


def row_count(mapping: Mapping[str, Any]) -> int:
    """Number of rows of an encode() input (the length of its first column)."""
    for value in mapping.values():
        return len(value)
    return 0


def named_patterns(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """Compiled file-name patterns; ``(?P<dev>...)`` captures a device id, ``(?P<slice>...)`` a slice."""
    return tuple(re.compile(p) for p in patterns)
