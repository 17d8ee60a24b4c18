"""The 24-byte header of every binary host record, and the decode/encode skeleton host codecs share.

Layout: specs/cann_raw_formats.md §2.7 ([MSP] ``analysis/csrc/infrastructure/utils/prof_common.h``;
the same structs are in [COL] ``collector/inc/toolchain/prof_common.h``). ``MsprofApi``,
``MsprofEvent`` (40 B), ``MsprofCompactInfo`` (64 B) and ``MsprofAdditionalInfo`` (256 B) all open with

    0 u16 magic 0x5A5A | 2 u16 level | 4 u32 type | 8 u32 threadId | 12 u32 dataLen | 16 u64 timeStamp

Api/Event name bytes 12-15 ``reserve``/``requestId`` and bytes 16-23 ``beginTime``/``timeStamp``, so
the names of those two fields are parameters of :func:`host_dtype`. Timestamps are host counter
values (cntvct/rdtsc ticks, or CLOCK_MONOTONIC_RAW ns when info.json gives no host frequency; §3),
kept raw. ``level`` and ``type`` stay numeric: ``type`` is resolved to a name through
``type_info_dic`` by (level, type) (§2.10); the levels are :data:`LEVELS`.

A :class:`HostRecord` is one record kind: its packed dtype, how individual fields become columns
(:class:`Convert`) and which count fields are bounded by a fixed-size array. Every other field
becomes one column of the same name and type; ``magic`` and reserved fields (``_...``) are not
output. Records whose magic is not 0x5A5A, or whose count field exceeds its array, are invalid
and go through the ``on_invalid`` policy (msprof's C++ parsers skip bad-magic records, §4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs._base import (
    HOST_MAGIC,
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    as_records,
    batch,
    column,
    packed_dtype,
    row_count,
    valid_mask,
)

HEADER_SIZE = 24
#: report levels (``level`` column; [MSP] ``analysis/common_func/ms_constant/level_type_constant.py``).
LEVELS = {
    30000: "pytorch_tx",
    25000: "pta",
    20500: "msproftx",
    20000: "acl",
    15000: "model",
    10000: "node",
    6000: "aicpu",
    5500: "communication",
    5000: "runtime",
}

Records = npt.NDArray[Any]
Columns = dict[str, Any]  # column name -> numpy array or pyarrow Array
Split = Callable[[Records], Columns]
Join = Callable[[Mapping[str, Any], int], npt.NDArray[Any]]


def host_dtype(
    payload: list[tuple[str, str]], size: int, *, length: str = "data_len", time: str = "timestamp"
) -> np.dtype[Any]:
    """The packed dtype of a host record: the 24-byte header followed by ``payload``."""
    header = [
        ("magic", "<u2"),
        ("level", "<u2"),
        ("type", "<u4"),
        ("thread_id", "<u4"),
        (length, "<u4"),
        (time, "<u8"),
    ]
    return packed_dtype([*header, *payload], size)


def host_file_pattern(stem: str) -> str:
    """The current host file name ``(aging|unaging).<stem>.slice_<n>`` (§1.3)."""
    return rf"^(?P<aging>aging|unaging)\.{re.escape(stem)}\.slice_(?P<slice>\d+)$"


class Convert(NamedTuple):
    """How one dtype field becomes columns (``split``) and back (``join``).

    ``split`` sees all records, so it may read other fields; the columns it returns replace the
    field at its place in the output (a name already present keeps its position). ``join`` builds
    the field from the encode() input; None copies the column of the field's own name.
    """

    split: Split
    join: Join | None = None


class Bits(NamedTuple):
    """Column ``name``: ``width`` bits from bit ``shift`` of a packed word (GCC LE bit fields)."""

    name: str
    shift: int
    width: int
    dtype: str


def bit_fields(name: str, *bits: Bits, raw: bool = False) -> Convert:
    """Field ``name`` unpacked into one column per bit field; with ``raw`` the word is kept too.

    Encoding builds the word from the bit-field columns only (a ``raw`` column is derived).
    """

    def split(records: Records) -> Columns:
        word = records[name]  # shifts and masks in the word's own width: no widening copy
        out: Columns = {b.name: ((word >> b.shift) & ((1 << b.width) - 1)).astype(b.dtype) for b in bits}
        if raw:
            out[name] = records[name]
        return out

    def join(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
        word = np.zeros(n, np.uint64)
        for b in bits:
            word |= (column(columns, b.name, n, np.uint64) & np.uint64((1 << b.width) - 1)) << np.uint64(
                b.shift
            )
        return word

    return Convert(split, join)


def counted_list(dtype: np.dtype[Any], count: str, values: str) -> dict[str, Convert]:
    """The first ``count`` entries of the fixed array field ``values`` of ``dtype`` as a list column.

    The column is named ``values``; the count is its list length, so it is no column of its own.
    """
    width, base = dtype[values].shape[0], dtype[values].base

    def split_values(records: Records) -> Columns:
        counts = np.minimum(records[count].astype(np.int64), width)  # a count past the array is cut
        keep = np.arange(width) < counts[:, None]
        offsets = np.zeros(len(counts) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        return {values: pa.ListArray.from_arrays(pa.array(offsets), pa.array(records[values][keep]))}

    def lists(columns: Mapping[str, Any]) -> tuple[pa.Array, npt.NDArray[np.int64]]:
        value = columns[values]
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if not isinstance(value, pa.Array):
            value = pa.array(value, pa.list_(pa.from_numpy_dtype(base)))
        lengths = value.value_lengths().fill_null(0).to_numpy().astype(np.int64)
        if lengths.size and lengths.max() > width:
            msg = f"{values}: at most {width} entries per record, got {int(lengths.max())}"
            raise ValueError(msg)
        return value, lengths

    def join_count(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
        return lists(columns)[1] if values in columns else np.zeros(n, np.int64)

    def join_values(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
        out = np.zeros((n, width), base)
        if values in columns:
            value, lengths = lists(columns)
            rows = np.repeat(np.arange(n), lengths)
            starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
            out[rows, np.arange(len(rows)) - starts] = value.flatten().to_numpy(zero_copy_only=False)
        return out

    return {count: Convert(lambda _: {}, join_count), values: Convert(split_values, join_values)}


@dataclass(frozen=True, slots=True)
class HostRecord:
    """One fixed-size host record kind and its decode/encode."""

    family: str
    dtype: np.dtype[Any]
    convert: Mapping[str, Convert] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)  # count field -> largest valid value
    #: count fields cut to their array's length when larger, the record kept (counted as replaced), as
    #: msprof's C++ ``ParserAdditionalInfoAdapter`` copies at most the array's entries
    cut: Mapping[str, int] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        """The dtype fields that are output (all but the magic and reserved bytes)."""
        names = self.dtype.names or ()
        return tuple(n for n in names if n != "magic" and not n.startswith("_"))

    def decode(self, buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
        records, consumed = as_records(buf, self.dtype)
        dropped, reasons = 0, []
        checks = [("magic", HOST_MAGIC, f"magic {HOST_MAGIC:#x} at bytes 0-1", "bad magic")]
        checks += [(name, top, f"{name} <= {top}", f"{name} > {top}") for name, top in self.limits.items()]
        for name, target, expected, reason in checks:
            values = records[name]
            ok = values == target if name == "magic" else values <= target
            mask, bad = valid_mask(
                ok, ctx, record_size=self.dtype.itemsize, family=self.family, expected=expected, found=values
            )
            if mask is not None:
                records = records[mask]
                dropped += bad
                reasons.append(reason)
        cut = {name: int((records[name] > top).sum()) for name, top in self.cut.items()}
        out: Columns = {}
        for name in self.fields:
            conv = self.convert.get(name)
            if conv is None:
                out[name] = records[name]
            else:
                out.update(conv.split(records))
        replaced = "; ".join(
            f"{name} above {self.cut[name]}, cut to {self.cut[name]}" for name, n in cut.items() if n
        )
        return Decoded(batch(out), consumed, dropped, "; ".join(reasons), sum(cut.values()), replaced)

    def encode(self, columns: Mapping[str, Any]) -> bytes:
        n = row_count(columns)
        records = np.zeros(n, self.dtype)
        records["magic"] = HOST_MAGIC
        for name in self.fields:
            conv = self.convert.get(name)
            join = None if conv is None else conv.join
            records[name] = column(columns, name, n, self.dtype[name]) if join is None else join(columns, n)
        return records.tobytes()

    def codec(self, patterns: tuple[re.Pattern[str], ...], description: str) -> Codec:
        """The registry entry of this record kind (a host family)."""
        return Codec(
            family=self.family,
            side="host",
            patterns=patterns,
            decode=self.decode,
            encode=self.encode,
            record_size=self.dtype.itemsize,
            description=description,
        )
