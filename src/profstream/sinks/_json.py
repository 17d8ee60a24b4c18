"""Rows rendered straight from Arrow columns by a numba byte writer: JSON objects, or CSV lines.

Building one Python object per event and serialising it runs at about 20 MB/s; formatting from
columns into a reused byte buffer runs at about 330 MB/s (peers.md §5.4). A :class:`Template` lists
the members of the object every row becomes (``"name"``, ``"pid"``, ...; nested ``"args"``) and
turns each column into one of five shapes the kernel understands:

* ``INT``: int64 values and a validity mask, printed as decimal integers;
* ``TS``: int64 ns printed as microseconds with exactly three decimals, in a JSON string
  (``"1.500"``; msprof's timeline ``ts``, msprof_outputs.md §3.2), or with the TAB that msprof
  appends to summary timestamps (``"1.500\\t"``, ``_format``);
* ``DUR``: int64 ns printed as the exact microsecond number without trailing zeros (``12.34``,
  ``12.0``): what msprof's double ``dur`` prints as, without binary rounding;
* ``FLOAT``: doubles printed as Python's repr (see ``_format``) by the kernel itself, NaN and
  infinities absent; a column holding a value outside the kernel's range (``_numbers``) is a
  ``TEXT`` one instead;
* ``TEXT``: a table of pre-rendered texts and a row -> entry index (-1 when absent). Strings
  are escaped and quoted once per *table entry*, so a dictionary column (names repeat) costs one
  escape per distinct value and a byte copy per row. Floats are Python's repr, booleans
  ``true``/``false``; ``raw`` strings are copied unescaped.

Each member is its key, the text around its value (the quotes of a ``TS``) and the value. A column
of length 1 (or a Python scalar) applies to every row. An absent value either drops the member (the
Chrome trace convention for optional keys) or prints the member's null text (``"N/A"`` in
summaries). A *line* template (``line_end``) writes the values only, comma-separated, every one
present or as its null text: the CSV sink's rows.

Escaping follows ``json.dumps(..., ensure_ascii=False)``: ``"`` and ``\\`` are backslash-escaped,
``\\b \\f \\n \\r \\t`` get their short forms, other bytes below 0x20 become ``\\u00XX``, and
everything else (UTF-8 included) is copied as is. Control characters that leak into names are a
known cause of traces that viewers refuse (peers.md §2, pytorch/pytorch#130622).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream._numba import kernel
from profstream.sinks._format import doubles, float_table, is_text
from profstream.sinks._numbers import (
    FLOAT_WIDTH,
    GIVEN,
    copy_bytes,
    float_kinds,
    put_float,
    put_int,
    put_micros,
)

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: what a column may be given as: an Arrow or numpy array (one value per row) or a scalar (all rows)
ColumnLike: TypeAlias = pa.Array | pa.ChunkedArray | np.ndarray | int | float | str | bool | None

# member kinds of a compiled template
OP_LIT = 0  # a constant member: the literal holds key and value
OP_INT = 1
OP_TS = 2
OP_DUR = 3
OP_TEXT = 4
OP_OPEN = 5  # ``"key":{`` opening a nested object
OP_CLOSE = 6
OP_FLOAT = 7

# renderer state slots (an int64 array the kernel updates in place)
S_ROW = 0  # next row to render
S_POS = 1  # bytes used in the output buffer
S_IN_FILE = 2  # events already in the file (a separator goes before the next one)
S_DATA_IN_FILE = 3  # events rendered into the file since it opened (the first one may be oversize)
S_EVENTS_LEFT = 4  # events the file may still take
S_FILE_LEFT = 5  # bytes the file may still take
S_BUDGET_LEFT = 6  # bytes the whole output may still take
S_REASON = 7
S_PENDING = 8  # size of the event that did not fit
STATE_SLOTS = 9

# why the kernel returned
DONE = 0  # every row rendered
BUFFER_FULL = 1  # flush the buffer and call again
FILE_FULL = 2  # the event in S_PENDING belongs in the next file
BUDGET_FULL = 3  # the event in S_PENDING exceeds the total budget

I64_MAX = int(np.iinfo(np.int64).max)
#: a bound that never binds
UNLIMITED = I64_MAX // 4

_INT_WIDTH = 20  # "-9223372036854775808"
_MICROS_WIDTH = 21  # "-9223372036854775.808", without the text around it

#: no per-event end positions wanted
NO_ENDS = np.zeros(0, np.int64)
#: no separator between events (read-only, like every separator made from bytes)
NO_SEPARATOR = np.frombuffer(b"", np.uint8)


# ---------------------------------------------------------------------------------------- kernels


@kernel
def escape_table(offsets: I64, data: U8, quote: bool) -> tuple[I64, U8]:
    """Every string of an Arrow (offsets, data) pair as JSON text, quoted when ``quote``."""
    count = offsets.size - 1
    extra = 2 if quote else 0
    size = 0
    for k in range(offsets[0], offsets[count]):
        b = data[k]
        if b in (34, 92, 8, 9, 10, 12, 13):
            size += 2
        elif b < 32:
            size += 6
        else:
            size += 1
    out_offsets = np.empty(count + 1, np.int64)
    out = np.empty(size + extra * count, np.uint8)
    pos = 0
    hexdigits = b"0123456789abcdef"
    for i in range(count):
        out_offsets[i] = pos
        if quote:
            out[pos] = 34
            pos += 1
        for k in range(offsets[i], offsets[i + 1]):
            b = data[k]
            if b >= 32 and b not in (34, 92):
                out[pos] = b
                pos += 1
                continue
            out[pos] = 92
            if b in (34, 92):
                out[pos + 1] = b
            elif b == 8:
                out[pos + 1] = 98  # b
            elif b == 9:
                out[pos + 1] = 116  # t
            elif b == 10:
                out[pos + 1] = 110  # n
            elif b == 12:
                out[pos + 1] = 102  # f
            elif b == 13:
                out[pos + 1] = 114  # r
            else:
                out[pos + 1] = 117  # u
                out[pos + 2] = 48
                out[pos + 3] = 48
                out[pos + 4] = hexdigits[b >> 4]
                out[pos + 5] = hexdigits[b & 15]
                pos += 4
            pos += 2
        if quote:
            out[pos] = 34
            pos += 1
    out_offsets[count] = pos
    return out_offsets, out


@kernel
def render_rows(  # noqa: PLR0917 (numba functions take no keyword-only arguments)
    rows: int, prog: Any, cols: Any, event_sep: U8, out: U8, state: I64, max_event: int, ends: I64
) -> None:
    """Render rows from ``state[S_ROW]`` into ``out`` until done, the buffer is full or a limit binds.

    Each event is preceded by ``event_sep`` unless it is the first of its file. An event that would
    exceed the budget stops with BUDGET_FULL; one that would exceed the file's bytes or event count
    stops with FILE_FULL, unless it is the first event of this kind of call in the file (a file
    always takes one event, however large). ``ends[row]``, when given, receives each event's end.
    """
    # unpacked once: each array taken from a tuple is a reference counted, per row too when taken there
    kinds, col_of, optional, lit_start, lit_end, lits, member_sep, row_open, row_close = prog
    ints, int_start, int_step, valid, valid_start, valid_step, index, index_start, index_step = cols[:9]
    table_base, table_offsets, table_data = cols[9:]
    floats = ints.view(np.float64)  # the values of OP_FLOAT members, kept as their bits
    row = state[S_ROW]
    pos = state[S_POS]
    state[S_REASON] = DONE
    while row < rows:
        if pos + max_event > out.size:
            state[S_REASON] = BUFFER_FULL
            break
        start = pos
        if state[S_IN_FILE]:
            pos = copy_bytes(out, pos, event_sep, 0, event_sep.size)
        # the row: literals of op k are ``3k`` its key and the text before a present value,
        # ``3k + 1`` the text after it, ``3k + 2`` its key and the text of an absent value
        pos = copy_bytes(out, pos, row_open, 0, row_open.size)
        first = True
        for op in range(kinds.size):
            kind = kinds[op]
            if kind == OP_CLOSE:
                out[pos] = 125
                pos += 1
                first = False
                continue
            col = col_of[op]
            absent = False
            entry = 0
            if kind == OP_TEXT:
                entry = index[index_start[col] + row * index_step[col]]
                absent = entry < 0
            elif kind not in (OP_LIT, OP_OPEN):
                absent = valid[valid_start[col] + row * valid_step[col]] == 0
            if absent and optional[op]:
                continue  # an absent optional member is left out
            if not first:
                pos = copy_bytes(out, pos, member_sep, 0, member_sep.size)
            first = kind == OP_OPEN
            lit = 3 * op + (2 if absent else 0)
            pos = copy_bytes(out, pos, lits, lit_start[lit], lit_end[lit])
            if absent or kind in (OP_LIT, OP_OPEN):
                continue
            if kind == OP_TEXT:
                slot = table_base[col] + entry
                pos = copy_bytes(out, pos, table_data, table_offsets[slot], table_offsets[slot + 1])
            else:
                at = int_start[col] + row * int_step[col]
                if kind == OP_FLOAT:
                    pos = put_float(out, pos, floats[at], np.uint64(ints[at]))
                elif kind == OP_INT:
                    pos = put_int(out, pos, ints[at])
                else:
                    pos = put_micros(out, pos, ints[at], kind == OP_DUR)
            pos = copy_bytes(out, pos, lits, lit_start[lit + 1], lit_end[lit + 1])
        pos = copy_bytes(out, pos, row_close, 0, row_close.size)
        size = pos - start
        full = size > state[S_FILE_LEFT] or state[S_EVENTS_LEFT] <= 0
        if size > state[S_BUDGET_LEFT] or (full and state[S_DATA_IN_FILE]):
            state[S_REASON] = BUDGET_FULL if size > state[S_BUDGET_LEFT] else FILE_FULL
            state[S_PENDING] = size
            pos = start
            break
        state[S_BUDGET_LEFT] -= size
        state[S_FILE_LEFT] -= size
        state[S_EVENTS_LEFT] -= 1
        state[S_IN_FILE] += 1
        state[S_DATA_IN_FILE] += 1
        if ends.size:
            ends[row] = pos
        row += 1
    state[S_ROW] = row
    state[S_POS] = pos


# ------------------------------------------------------------------------------- column encoding


@dataclass(frozen=True)
class _Ints:
    values: I64  # one per row, or one for all rows (an OP_FLOAT member's: the bits of its doubles)
    valid: U8  # 0 where absent (an OP_FLOAT member's: its float_kinds)


@dataclass(frozen=True)
class _Texts:
    offsets: I64  # entry k spans data[offsets[k]:offsets[k + 1]]
    data: U8
    index: I64  # per row (or one for all rows): the entry, -1 when absent

    @property
    def widest(self) -> int:
        return int(np.diff(self.offsets).max(initial=0))


Role = Literal["auto", "ts", "ts_tab", "dur", "raw"]
_TIME_OPS = {"ts": OP_TS, "ts_tab": OP_TS, "dur": OP_DUR}


def as_arrow(value: ColumnLike, rows: int, name: str) -> pa.Array:
    """``value`` as an Arrow array of ``rows`` values, or of one value that applies to every row."""
    if isinstance(value, pa.ChunkedArray):
        array = value.combine_chunks() if value.num_chunks != 1 else value.chunk(0)
    elif isinstance(value, pa.Array):
        array = value
    elif isinstance(value, np.ndarray):
        array = pa.array(value)
    else:
        array = pa.array([value])
    if len(array) not in (rows, 1):
        msg = f"column {name!r}: expected {rows} values (or one for all rows), got {len(array)}"
        raise ValueError(msg)
    return array


def _fits_int64(array: pa.Array) -> bool:
    """False for a uint64 column holding a value above the int64 range (it is printed as text)."""
    if not pa.types.is_uint64(array.type) or not len(array):
        return True
    return int(pc.max(array).as_py() or 0) <= I64_MAX


def _validity(array: pa.Array) -> U8:
    """1 where ``array`` has a value (a single 1 without nulls): its validity bitmap unpacked."""
    if not array.null_count:
        return np.ones(1, np.uint8)
    bitmap = np.frombuffer(array.buffers()[0], np.uint8)
    return np.unpackbits(bitmap, count=array.offset + len(array), bitorder="little")[array.offset :]


def int_values(array: pa.Array, name: str) -> I64:
    """An integer column as int64 numpy, nulls as 0 (the validity is kept apart)."""
    if not pa.types.is_integer(array.type):
        msg = f"column {name!r}: expected integers, got {array.type}"
        raise ValueError(msg)
    if not _fits_int64(array):
        msg = f"column {name!r}: value {pc.max(array).as_py()} does not fit int64"
        raise ValueError(msg)
    values = (array.fill_null(0) if array.null_count else array).to_numpy()
    return np.ascontiguousarray(values, np.int64)  # widened by numpy: no Arrow cast


def _string_table(strings: pa.Array, quote: bool) -> tuple[I64, U8]:
    """Arrow strings as an escaped (or raw, when not ``quote``) text table."""
    if not (pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type)):
        strings = pc.cast(strings, pa.large_string())
    width = np.int32 if pa.types.is_string(strings.type) else np.int64
    ends = np.frombuffer(strings.buffers()[1], width)[strings.offset : strings.offset + len(strings) + 1]
    offsets: I64 = np.ascontiguousarray(ends, np.int64)  # widened by numpy: no Arrow cast
    data_buffer = strings.buffers()[2]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return escape_table(offsets, data, True) if quote else (offsets, data)


def _texts(array: pa.Array, name: str, *, escape: bool = True) -> _Texts:
    """A non-integer column as a text table and a row index; strings JSON-escaped and quoted
    unless not ``escape``."""
    if pa.types.is_dictionary(array.type):
        table = _texts(array.dictionary, name, escape=escape)
        indices = array.indices
        index = np.asarray((indices.fill_null(-1) if indices.null_count else indices).to_numpy(), np.int64)
        if (table.index < 0).any():  # an absent dictionary entry (null, NaN) is an absent value too
            index = np.where(table.index[np.maximum(index, 0)] < 0, -1, index)
        return _Texts(table.offsets, table.data, np.ascontiguousarray(index, np.int64))
    kind = array.type
    if is_text(kind):
        offsets, data = _string_table(array, quote=escape)
    elif pa.types.is_floating(kind):  # NaN and infinities are absent
        float_offsets, data, present = float_table(array)
        index = np.where(present, np.arange(len(array), dtype=np.int64), -1)
        return _Texts(float_offsets.astype(np.int64), data, index)
    elif pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind):
        offsets, data = _string_table(pc.cast(array, pa.string()), quote=False)
    else:
        msg = f"column {name!r}: no JSON form for {kind}"
        raise ValueError(msg)
    index = np.arange(len(array), dtype=np.int64)
    if array.null_count:
        index[_validity(array) == 0] = -1
    return _Texts(offsets, data, index)


def _encode(value: ColumnLike, rows: int, name: str, role: Role) -> tuple[int, _Ints | _Texts]:
    array = as_arrow(value, rows, name)
    if array.type == pa.null():
        if role not in ("auto", "raw"):
            array = array.cast(pa.int64())
        else:
            return OP_TEXT, _Texts(np.zeros(1, np.int64), np.zeros(0, np.uint8), np.full(1, -1, np.int64))
    if role == "raw":
        return OP_TEXT, _texts(array, name, escape=False)
    if role != "auto":
        return _TIME_OPS[role], _Ints(int_values(array, name), _validity(array))
    if pa.types.is_integer(array.type) and _fits_int64(array):
        return OP_INT, _Ints(int_values(array, name), _validity(array))
    if pa.types.is_floating(array.type):
        numbers = doubles(array)
        kinds = float_kinds(numbers)
        if not (kinds == GIVEN).any():  # else repr prints some: a text table holds them
            return OP_FLOAT, _Ints(numbers.view(np.int64), kinds)
    return OP_TEXT, _texts(array, name)


# ------------------------------------------------------------------------------------- templates


#: a JSON number literal (RFC 8259 §6)
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def json_value(text: str) -> bytes:
    """``text`` as a JSON value: as it is when it is a JSON number, else a JSON string."""
    return text.encode() if _JSON_NUMBER.fullmatch(text) else json_text(text)


def json_text(value: str) -> bytes:
    """A Python string as JSON text, with the kernel's escaping (see the module docstring)."""
    return json.dumps(value, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Compiled:
    """A template's arrays in the layout :func:`render_rows` takes."""

    rows: int
    prog: tuple[Any, ...]
    cols: tuple[Any, ...]
    max_event: int  # an upper bound of one event's bytes, separator included

    def render(self, event_sep: U8, out: U8, state: I64, ends: I64 = NO_ENDS) -> int:
        """Run :func:`render_rows` from ``state``; returns why it stopped (``DONE``, ``BUFFER_FULL``, ...)."""
        render_rows(self.rows, self.prog, self.cols, event_sep, out, state, self.max_event, ends)
        return int(state[S_REASON])


class Template:
    """The members that every row becomes, in order: a JSON object, or a CSV line.

    ``key_sep``/``member_sep`` are the texts between a key and its value and between members (``:``
    and ``,`` for compact output, ``": "`` and ``", "`` for Python ``json.dump``'s). With
    ``line_end`` a row is a line instead: no braces and no keys, every member printed (an absent
    value as its ``null`` text, as given, or left out with its separator when that is None),
    ``line_end`` after the last one.
    """

    def __init__(
        self, rows: int, *, key_sep: str = ":", member_sep: str = ",", line_end: str | None = None
    ) -> None:
        self.rows = rows
        self._key_sep = key_sep
        self._member_sep = member_sep.encode()
        self._line = line_end is not None
        self._row_open = b"" if self._line else b"{"
        self._row_close = line_end.encode() if line_end is not None else b"}"
        self._lits = bytearray()
        self._ops: list[tuple[int, int, int]] = []  # kind, column, whether an absent value is left out
        self._texts_of_ops: list[tuple[int, int]] = []  # three literals per op (see _render_row)
        self._ints: list[_Ints] = []
        self._texts: list[_Texts] = []
        self._depth = 0

    def _literal(self, text: bytes) -> tuple[int, int]:
        start = len(self._lits)
        self._lits += text
        return start, len(self._lits)

    def _key(self, key: str) -> bytes:
        return b"" if self._line else json_text(key) + self._key_sep.encode()

    def _add(
        self,
        kind: int,
        col: int,
        key: bytes,
        around: tuple[bytes, bytes] = (b"", b""),
        null: bytes | None = None,
    ) -> None:
        """One op: its kind, column and key, the texts around a present value, an absent one's text
        (None: the member is left out)."""
        self._ops.append((kind, col, int(null is None)))
        before, after = around
        for text in (key + before, after, key + (null or b"")):
            self._texts_of_ops.append(self._literal(text))

    def constant(self, key: str, value: str | int) -> None:
        """A member whose value is the same JSON string or integer in every row."""
        text = json_text(value) if isinstance(value, str) else str(int(value)).encode()
        self._add(OP_LIT, 0, self._key(key) + text)

    def member(
        self,
        key: str,
        value: ColumnLike,
        *,
        role: Role = "auto",
        null: str | None = None,
        required: bool = False,
        wrap: tuple[str, str] | None = None,
    ) -> None:
        """A member from a column; roles ``ts``/``ts_tab``/``dur`` read int64 ns (module docstring),
        ``raw`` copies strings as they are (a CSV sink's quoted cells).

        An absent value leaves the member out when ``null`` is None (in a line: the cell and its
        separator, which keeps the columns in place only for trailing cells), else prints ``null`` (in
        an object as a JSON number when it is one, e.g. msprof's ``0`` or ``-1``, else as a JSON string;
        as it is in a line); a ``required`` member refuses absent values.
        ``wrap`` is the text around a present value; by default the quotes of a JSON string around
        ``ts``/``ts_tab`` (with the escaped TAB), and only the TAB of ``ts_tab`` in a line.
        """
        kind, encoded = _encode(value, self.rows, key, role)
        absent = (encoded.valid == 0) if isinstance(encoded, _Ints) else (encoded.index < 0)
        if required and absent.any():
            msg = f"column {key!r} has absent values; every event needs one"
            raise ValueError(msg)
        if isinstance(encoded, _Ints):
            col = len(self._ints)
            self._ints.append(encoded)
        else:
            col = len(self._texts)
            self._texts.append(encoded)
        before, after = wrap if wrap is not None else self._default_wrap(role)
        null_text = None if null is None else null.encode() if self._line else json_value(null)
        self._add(kind, col, self._key(key), (before.encode(), after.encode()), null_text)

    def _default_wrap(self, role: Role) -> tuple[str, str]:
        tab = "\t" if role == "ts_tab" else ""
        if self._line:
            return "", tab
        if role in ("ts", "ts_tab"):
            return '"', json_text(tab)[1:-1].decode() + '"'
        return "", ""

    def open(self, key: str) -> None:
        """Start a nested object ``key``; members up to :meth:`close` go inside it."""
        if self._line:
            msg = "open() needs a JSON object template, not a line"
            raise ValueError(msg)
        self._add(OP_OPEN, 0, self._key(key) + b"{")
        self._depth += 1

    def close(self) -> None:
        """End the nested object opened last."""
        if not self._depth:
            msg = "close() without a matching open()"
            raise ValueError(msg)
        self._add(OP_CLOSE, 0, b"")
        self._depth -= 1

    def compile(self, event_sep: int = 0) -> Compiled:
        """The arrays of the kernel; ``event_sep`` bytes go before every event but a file's first."""
        if self._depth:
            msg = "an open() has no matching close()"
            raise ValueError(msg)
        ops = np.array(self._ops, np.int64).reshape(-1, 3)
        texts = np.array(self._texts_of_ops, np.int64).reshape(-1, 2)
        prog = (
            *(np.ascontiguousarray(ops[:, k]) for k in range(3)),
            np.ascontiguousarray(texts[:, 0]),
            np.ascontiguousarray(texts[:, 1]),
            np.frombuffer(bytes(self._lits), np.uint8),
            np.frombuffer(self._member_sep, np.uint8),
            np.frombuffer(self._row_open, np.uint8),
            np.frombuffer(self._row_close, np.uint8),
        )
        cols = (*self._int_arrays(), *self._text_arrays())
        return Compiled(self.rows, prog, cols, self._max_event(ops, texts) + event_sep)

    def _int_arrays(self) -> tuple[I64 | U8, ...]:
        values = [c.values for c in self._ints]
        valid = [c.valid for c in self._ints]
        return (*_flat(values, np.int64), *_flat(valid, np.uint8))

    def _text_arrays(self) -> tuple[I64 | U8, ...]:
        bounds = [(int(c.offsets[0]), int(c.offsets[-1])) for c in self._texts]
        data = [c.data[first:last] for c, (first, last) in zip(self._texts, bounds, strict=True)]
        shifts = np.cumsum([0, *(d.size for d in data)], dtype=np.int64)[:-1].tolist()
        bases = np.cumsum([0, *(c.offsets.size for c in self._texts)], dtype=np.int64)
        offsets = np.zeros(max(int(bases[-1]), 1), np.int64)
        for c, base, shift, (first, _) in zip(self._texts, bases[:-1].tolist(), shifts, bounds, strict=True):
            np.add(c.offsets, shift - first, out=offsets[base : base + c.offsets.size])  # no temporaries
        return (
            *_flat([c.index for c in self._texts], np.int64),
            bases[:-1],
            offsets,
            np.concatenate(data) if data else np.zeros(0, np.uint8),
        )

    def _max_event(self, ops: I64, texts: I64) -> int:
        size = len(self._row_open) + len(self._row_close) + len(self._member_sep) * len(self._ops)
        widths = (texts[:, 1] - texts[:, 0]).reshape(-1, 3).tolist()
        for (kind, col, _), (before, after, absent) in zip(ops.tolist(), widths, strict=True):
            if kind == OP_INT:
                size += max(before + _INT_WIDTH + after, absent)
            elif kind in (OP_TS, OP_DUR):
                size += max(before + _MICROS_WIDTH + after, absent)
            elif kind == OP_FLOAT:
                size += max(before + FLOAT_WIDTH + after, absent)
            elif kind == OP_TEXT:
                size += max(before + self._texts[col].widest + after, absent)
            else:
                size += before + (kind == OP_CLOSE)
        return size


def _flat(columns: list[Any], dtype: type) -> tuple[Any, I64, I64]:
    """Columns of per-row (or single) values concatenated, with each one's start and row step."""
    if not columns:
        return np.zeros(0, dtype), np.zeros(0, np.int64), np.zeros(0, np.int64)
    lengths = np.array([c.size for c in columns], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    steps = (lengths != 1).astype(np.int64)
    return np.concatenate(columns).astype(dtype, copy=False), starts, steps


def new_state(
    *,
    in_file: int = 0,
    events_left: int = UNLIMITED,
    file_left: int = UNLIMITED,
    budget_left: int = UNLIMITED,
) -> I64:
    """A renderer state array starting at row 0 of an empty buffer."""
    state = np.zeros(STATE_SLOTS, np.int64)
    state[S_IN_FILE] = in_file
    state[S_EVENTS_LEFT] = events_left
    state[S_FILE_LEFT] = file_left
    state[S_BUDGET_LEFT] = budget_left
    return state


def render_pieces(compiled: Compiled) -> list[bytes]:
    """Every row as its own JSON object (no separators): for the few rows a writer must keep."""
    out = np.empty(max(compiled.max_event * compiled.rows, 1), np.uint8)
    ends = np.zeros(compiled.rows, np.int64)
    compiled.render(NO_SEPARATOR, out, new_state(), ends)
    starts = np.concatenate([[0], ends[:-1]]) if compiled.rows else ends
    return [out[s:e].tobytes() for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
