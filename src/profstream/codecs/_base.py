"""The contract every codec module follows, and the vectorised helpers they share.

A codec turns a buffer of raw bytes of one record family into a
``pyarrow.RecordBatch`` of decoded records in native units (syscnt ticks, ids,
hash ids), and back (``encode``, for the simulator and round-trip tests).

Conventions (see DESIGN.md and specs/cann_raw_formats.md):
- every fixed-size layout is one packed little-endian ``np.dtype`` whose
  ``itemsize`` is checked against the documented record size at import time;
- bit fields are unpacked with masks and shifts over whole arrays;
- ``decode`` never creates per-record Python objects;
- the output schema is derived from ``decode`` itself (decoding zero bytes), so
  the dtype and the decode function are the single source of truth.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.errors import DecodeError

OnInvalid = Literal["error", "skip"]
Side = Literal["device", "host", "framework"]
ByteBuffer = npt.NDArray[np.uint8]

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
    kept but replaced by a placeholder (a text field that is not valid UTF-8
    becomes ``'N/A'``, as torch_npu does).
    """

    batch: pa.RecordBatch
    consumed: int
    dropped: int = 0
    drop_reason: str = ""
    replaced: int = 0


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


def counter_gaps(cnt: npt.NDArray[np.integer[Any]], previous: int | None = None) -> int:
    """Records lost according to a 4-bit rolling counter that should step by one.

    ``previous`` is the last counter value of the preceding batch of the same
    stream, so gaps across batch boundaries are counted too.
    """
    values = cnt.astype(np.int16)
    if previous is not None:
        values = np.concatenate([np.array([previous], np.int16), values])
    if len(values) < 2:
        return 0
    return int(((np.diff(values) - 1) % 16).sum())


def column(mapping: Mapping[str, Any], name: str, count: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """Column ``name`` of an encode() input as an array of ``dtype``; zeros when absent or null."""
    value = mapping.get(name)
    if value is None:
        return np.zeros(count, dtype)
    if isinstance(value, pa.Array | pa.ChunkedArray):
        value = value.fill_null(0).to_numpy(zero_copy_only=False)
    return np.asarray(value).astype(dtype, copy=False)


def row_count(mapping: Mapping[str, Any]) -> int:
    """Number of rows of an encode() input (the length of its first column)."""
    for value in mapping.values():
        return len(value)
    return 0


def named_patterns(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """Compiled file-name patterns; ``(?P<dev>...)`` captures a device id, ``(?P<slice>...)`` a slice."""
    return tuple(re.compile(p) for p in patterns)
