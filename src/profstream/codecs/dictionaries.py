"""Host text dictionaries ``(aging|unaging).additional.hash_dic`` and ``.type_info_dic``: ids -> names.

Layout: specs/cann_raw_formats.md §2.10 ([MSP] ``analysis/csrc/domain/services/parser/host/cann/
hash_data.cpp``, ``type_data.cpp``; Python ``analysis/msparser/hash_dic/hash_dic_parser.py``).
UTF-8 text, one entry per line, split at the FIRST colon (names may contain ':'):

- ``hash_dic``: ``<hash>:<string>``, hash a decimal u64 -> columns ``hash`` (uint64), ``value``;
- ``type_info_dic``: ``<level>_<type>:<name>``, level a decimal u16, type a decimal u64 -> columns
  ``level`` (uint16), ``type`` (uint64), ``name``.

Rules: a line is the bytes before a '\\n' (a trailing '\\r' is dropped); empty lines hold nothing and
are passed over. Other whitespace stays: msprof's C++ (``HashData::ReadFiles``) splits each line as
it is, while its Python parser strips the whole line first (``line.strip().split(":", 1)``), so there a
key with leading blanks still parses and a name loses its trailing blanks; profstream follows the C++,
the path msprof takes for the 910B exports it compiles. With ``ctx.final`` False the bytes after the
last '\\n' are an incomplete line and are not consumed. Keys must be ASCII digits that fit their type
(leading zeros allowed): msprof's Python keeps only all-digit keys and its C++ ``StrToU64``/``StrToU16``
reject the rest. A line without a colon, with a bad key, or whose text is not UTF-8 is malformed: the
``error`` policy raises a DecodeError naming the file, the byte offset of the line and its 0-based line
number (``record_index``); ``skip`` drops and counts it (msprof's C++ logs and skips). ``decode`` keeps
every row in file order, duplicates included; the last duplicate wins, as in msprof's C++ (it
overwrites and warns), which :func:`resolve` implements. msprof's Python filter of levels it does
not know and the C++ fallback names for types 27/28 (:data:`TYPE_FALLBACKS`) are the engine's.

Splitting is vectorised: numpy finds the line boundaries (which also give the byte offsets for
errors), ``pyarrow.compute`` splits key from name and parses the numbers. Only when a buffer holds
text that is not UTF-8 are its lines checked one by one, to find the offending ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs._base import (
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    column,
    named_patterns,
    row_count,
)
from profstream.codecs._host import host_file_pattern
from profstream.errors import DecodeError

NEWLINE, CARRIAGE_RETURN = ord("\n"), ord("\r")
U16_MAX, U64_MAX = 2**16 - 1, 2**64 - 1
#: type names msprof's C++ uses when type_info_dic lacks them.
TYPE_FALLBACKS = {27: "DYNAMIC_ENABLE", 28: "DYNAMIC_DISABLE"}
#: how much of a malformed line an error message quotes.
QUOTE_BYTES = 80

KeyParser = Callable[[pa.Array], tuple[pa.Array, dict[str, pa.Array]]]


def _lines(buf: ByteBuffer, final: bool) -> tuple[pa.Array, npt.NDArray[np.int64], int]:
    """The complete lines of ``buf`` without terminators, their byte offsets, and the bytes used."""
    newlines = np.flatnonzero(buf == NEWLINE)
    consumed = len(buf) if final else (int(newlines[-1]) + 1 if len(newlines) else 0)
    data = buf[:consumed]
    newlines = newlines[newlines < consumed]
    starts = np.concatenate(([0], newlines + 1)).astype(np.int64)
    ends = np.concatenate((newlines, [consumed])).astype(np.int64)
    if starts[-1] == consumed:  # nothing after the last newline
        starts, ends = starts[:-1], ends[:-1]
    carriage = (ends > starts) & (data[ends - 1] == CARRIAGE_RETURN)
    ends -= carriage
    keep = np.ones(consumed, np.bool_)  # the terminators go, the lines stay in order
    keep[newlines] = False
    keep[ends[carriage]] = False
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data[keep])]
    return pa.Array.from_buffers(pa.large_binary(), len(starts), buffers), starts, consumed


def _split_first(text: pa.Array, separator: str) -> tuple[pa.Array, pa.Array]:
    """Text before and after the first ``separator``; the second is null where there is none."""
    parts = pc.split_pattern(text, separator, max_splits=1)
    head = pc.list_element(parts, 0)
    tail = pc.list_element(pc.list_slice(parts, 1, 2, return_fixed_size_list=True), 0)
    return head, tail


def _decimal(text: pa.Array, top: int) -> tuple[pa.Array, pa.Array]:
    """Which strings are decimal numbers <= ``top`` (leading zeros allowed), and their uint64 values."""
    digits = pc.fill_null(pc.ascii_is_decimal(text), False)
    short = pc.ascii_ltrim(text, "0")
    limit = str(top)
    length = pc.binary_length(short)
    same_width = pc.and_(pc.equal(length, len(limit)), pc.less_equal(short, pa.scalar(limit, text.type)))
    ok = pc.and_(digits, pc.fill_null(pc.or_(pc.less(length, len(limit)), same_width), False))
    number = pc.if_else(pc.and_(ok, pc.greater(length, 0)), short, pa.scalar("0", text.type))
    return ok, pc.cast(number, pa.uint64())


def _hash_key(key: pa.Array) -> tuple[pa.Array, dict[str, pa.Array]]:
    ok, value = _decimal(key, U64_MAX)
    return ok, {"hash": value}


def _type_key(key: pa.Array) -> tuple[pa.Array, dict[str, pa.Array]]:
    level_text, type_text = _split_first(key, "_")
    level_ok, level = _decimal(level_text, U16_MAX)
    type_ok, type_id = _decimal(type_text, U64_MAX)
    return pc.and_(level_ok, type_ok), {"level": pc.cast(level, pa.uint16()), "type": type_id}


def _is_utf8(raw: bytes | None) -> bool:
    try:
        (raw or b"").decode()
    except UnicodeDecodeError:
        return False
    return True


def _as_text(lines: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Binary lines as strings, and which were UTF-8 (the others become empty strings).

    Lines are checked one by one only when the buffer as a whole is not UTF-8.
    """
    try:
        return lines.cast(pa.large_string()), np.ones(len(lines), np.bool_)
    except pa.ArrowInvalid:
        utf8 = np.array([_is_utf8(raw) for raw in lines.to_pylist()], np.bool_)
        blanked = pc.if_else(pa.array(utf8), lines, pa.scalar(b"", lines.type))
        return blanked.cast(pa.large_string()), utf8


def _decode(
    buf: ByteBuffer, ctx: DecodeContext, *, family: str, expected: str, parse_key: KeyParser, name: str
) -> Decoded:
    lines, starts, consumed = _lines(buf, ctx.final)
    numbers = np.flatnonzero(pc.binary_length(lines).to_numpy() > 0)
    lines = lines.take(pa.array(numbers))
    text, utf8 = _as_text(lines)
    key, text = _split_first(text, ":")
    key_ok, columns = parse_key(key)
    ok = pc.and_(key_ok, pc.is_valid(text)).to_numpy(zero_copy_only=False) & utf8
    dropped = int(len(ok) - ok.sum())
    if dropped:
        bad = int(np.argmin(ok))
        if ctx.on_invalid == "error":
            first = int(numbers[bad])
            quote = buf[starts[first] : starts[first] + QUOTE_BYTES].tobytes().split(b"\n")[0]
            msg = f"{family}: expected a line {expected}, found {quote.decode(errors='replace')!r}"
            raise DecodeError(
                msg,
                path=ctx.path,
                offset=ctx.offset + int(starts[first]),
                record_index=ctx.record_index + first,
                family=family,
            )
        keep = pa.array(ok)
        columns = {column_name: values.filter(keep) for column_name, values in columns.items()}
        text = text.filter(keep)
    columns[name] = text.cast(pa.string())
    out = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
    return Decoded(out, consumed, dropped, "malformed line" if dropped else "")


def decode_hash_dic(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    """Decode hash_dic lines into (hash, value) rows."""
    return _decode(
        buf, ctx, family="hash_dic", expected="'<decimal u64>:<string>'", parse_key=_hash_key, name="value"
    )


def decode_type_info_dic(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    """Decode type_info_dic lines into (level, type, name) rows."""
    return _decode(
        buf,
        ctx,
        family="type_info_dic",
        expected="'<decimal u16>_<decimal u64>:<name>'",
        parse_key=_type_key,
        name="name",
    )


def _strings(columns: Mapping[str, Any], name: str, n: int) -> pa.Array:
    value = columns.get(name)
    strings = pa.array([""] * n, pa.string()) if value is None else pa.array(value, pa.string())
    if pc.any(pc.match_substring_regex(strings, "[\r\n]")).as_py():
        msg = f"{name}: a dictionary entry cannot hold a line break"
        raise ValueError(msg)
    return strings


def _number_strings(columns: Mapping[str, Any], name: str, n: int, dtype: npt.DTypeLike) -> pa.Array:
    return pc.cast(pa.array(column(columns, name, n, dtype)), pa.string())


def _text(keys: pa.Array, names: pa.Array) -> bytes:
    """``key:name\\n`` lines, joined by Arrow rather than per line in Python."""
    lines = pc.binary_join_element_wise(keys, ":", names, "\n", "")
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    return str(pc.binary_join(whole, "")[0].as_py()).encode()


def encode_hash_dic(columns: Mapping[str, Any]) -> bytes:
    """hash_dic text from ``hash`` and ``value`` columns."""
    n = row_count(columns)
    return _text(_number_strings(columns, "hash", n, np.uint64), _strings(columns, "value", n))


def encode_type_info_dic(columns: Mapping[str, Any]) -> bytes:
    """type_info_dic text from ``level``, ``type`` and ``name`` columns."""
    n = row_count(columns)
    keys = pc.binary_join_element_wise(
        _number_strings(columns, "level", n, np.uint16), _number_strings(columns, "type", n, np.uint64), "_"
    )
    return _text(keys, _strings(columns, "name", n))


def _whole(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def resolve(ids: pa.Array, hashes: pa.Table | pa.RecordBatch) -> pa.DictionaryArray:
    """Names of uint64 hash ids, dictionary-encoded, from decoded hash_dic rows.

    The last row of a duplicated hash wins; ids not in ``hashes`` are rendered as their decimal
    number (as msprof prints them); null ids stay null. The dictionary holds only the names used.
    """
    ids = ids.cast(pa.uint64())
    keys, names = _whole(hashes.column("hash")), _whole(hashes.column("value"))
    backwards = pa.array(np.arange(len(keys) - 1, -1, -1, dtype=np.int64))
    keys, names = keys.take(backwards), names.take(backwards)  # index_in finds the first match
    position = pc.index_in(ids, value_set=keys)
    known = pc.is_valid(position)
    used = pc.unique(position.filter(known))
    unknown = pc.unique(ids.filter(pc.and_(pc.invert(known), pc.is_valid(ids))))
    known_index = pc.index_in(position, value_set=used)
    unknown_index = pc.add(pc.index_in(ids, value_set=unknown), pa.scalar(len(used), pa.int32()))
    indices = pc.coalesce(known_index.cast(pa.int32()), unknown_index.cast(pa.int32()))
    dictionary = pa.concat_arrays([names.take(used).cast(pa.string()), pc.cast(unknown, pa.string())])
    return pa.DictionaryArray.from_arrays(indices, dictionary)


HASH_DIC = Codec(
    family="hash_dic",
    side="host",
    patterns=named_patterns(host_file_pattern("additional.hash_dic")),
    decode=decode_hash_dic,
    encode=encode_hash_dic,
    record_size=None,
    description="host hash id -> string dictionary (text)",
)

TYPE_INFO_DIC = Codec(
    family="type_info_dic",
    side="host",
    patterns=named_patterns(host_file_pattern("additional.type_info_dic")),
    decode=decode_type_info_dic,
    encode=encode_type_info_dic,
    record_size=None,
    description="host (level, type) -> type name dictionary (text)",
)

CODECS = (HASH_DIC, TYPE_INFO_DIC)
