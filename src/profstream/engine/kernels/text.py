"""Byte kernels for reading exported text: JSON array framing and exact decimal parsing.

The import source (``engine/imports``) reads files that msprof and torch_npu already wrote. Two
loops there run once per byte or per value and so live here:

* :func:`scan_objects` finds the top-level objects of a JSON array (a Chrome trace: ``[{...},
  {...}]``) in a stream of chunks, so each complete event can be handed to msgspec without the
  whole file in memory. It tracks nesting depth and string/escape state across chunk boundaries.
* :func:`parse_decimal` turns decimal text (``"1736408883704643.212"``, ``53.7410625``, ``1e-05``,
  with optional quotes and surrounding whitespace such as the trailing TAB msprof prints after
  start times) into scaled int64 exactly, without going through float: microseconds with three
  decimals become integer nanoseconds digit for digit (specs/msprof_outputs.md §3.2: ``ts`` is the
  ns integer with a decimal point inserted).

Digits below the target unit are dropped toward zero (:data:`TRUNCATE`) or rounded half away from
zero (:data:`NEAREST`); any number of digits may follow, and a value beyond int64 (a wall-clock
time in ns has 19 digits, int64 holds 19) is null rather than wrapped or cut.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.engine.kernels._dispatch import BoolArray, Int64Array, kernel

#: :func:`parse_decimal` rounding of digits below the unit
TRUNCATE = 0
NEAREST = 1

# scan state slots: nesting depth, inside a string, after a backslash, start of the open element
_DEPTH, _IN_STRING, _ESCAPE, _OPEN = range(4)
_NONE = -1

_QUOTE, _BACKSLASH = 34, 92
_OPEN_BRACE, _CLOSE_BRACE, _OPEN_BRACKET, _CLOSE_BRACKET = 123, 125, 91, 93
_SPACE, _PLUS, _MINUS, _POINT, _ZERO, _NINE, _UPPER_E, _LOWER_E = 32, 43, 45, 46, 48, 57, 69, 101
_MAX_EXPONENT = 100_000  # beyond any int64 value in either direction

U8Array = npt.NDArray[np.uint8]


class Objects(NamedTuple):
    """Byte ranges ``[starts[i], ends[i])`` of complete top-level objects in a buffer."""

    starts: Int64Array
    ends: Int64Array


@kernel
def _scan_kernel(buf: U8Array, begin: int, state: Int64Array, out_s: Int64Array, out_e: Int64Array) -> int:
    """Record every object that opens and closes at array depth 1 in ``buf[begin:]``."""
    depth = state[_DEPTH]
    in_string = state[_IN_STRING]
    escape = state[_ESCAPE]
    open_at = state[_OPEN]
    n = 0
    for i in range(begin, buf.size):
        c = buf[i]
        if in_string:
            if escape:
                escape = 0
            elif c == _BACKSLASH:
                escape = 1
            elif c == _QUOTE:
                in_string = 0
            continue
        if c == _QUOTE:
            in_string = 1
        elif c in (_OPEN_BRACE, _OPEN_BRACKET):
            if depth == 1 and c == _OPEN_BRACE:
                open_at = i
            depth += 1
        elif c in (_CLOSE_BRACE, _CLOSE_BRACKET):
            depth -= 1
            if depth == 1 and c == _CLOSE_BRACE and open_at != _NONE:
                out_s[n] = open_at
                out_e[n] = i + 1
                n += 1
                open_at = _NONE
    state[_DEPTH] = depth
    state[_IN_STRING] = in_string
    state[_ESCAPE] = escape
    state[_OPEN] = open_at
    return n


def scan_state() -> Int64Array:
    """The :func:`scan_objects` state before the first byte of a file."""
    state = np.zeros(4, np.int64)
    state[_OPEN] = _NONE
    return state


def scan_objects(buf: U8Array, begin: int, state: Int64Array) -> Objects:
    """Complete depth-1 objects of a JSON array whose bytes so far are ``buf``; scans from ``begin``.

    ``state`` (from :func:`scan_state`, updated in place) carries nesting and string state. Bytes
    before ``begin`` were scanned by an earlier call. Between calls the caller keeps the bytes from
    :func:`open_object` on, appends the next chunk, and tells the state with :func:`rebase` how
    many bytes it dropped from the front (offsets in the state refer to the buffer).
    """
    if buf.dtype != np.uint8 or buf.ndim != 1:
        msg = f"buf: expected a 1-D uint8 array, got {buf.dtype} of shape {buf.shape}"
        raise ValueError(msg)
    size = max(buf.size - begin, 0) // 2 + 1  # an object takes at least two bytes
    out_s = np.empty(size, np.int64)
    out_e = np.empty(size, np.int64)
    n = _scan_kernel(buf, begin, state, out_s, out_e)
    return Objects(out_s[:n], out_e[:n])


def open_object(state: Int64Array) -> int | None:
    """Where the object still open at the end of the scanned bytes starts, if any."""
    at = int(state[_OPEN])
    return None if at == _NONE else at


def depth(state: Int64Array) -> int:
    """Nesting depth after the scanned bytes (1 inside the top-level array, 0 before or after it)."""
    return int(state[_DEPTH])


def rebase(state: Int64Array, dropped: int) -> None:
    """The caller dropped the first ``dropped`` bytes of the buffer: shift the open object's start."""
    if state[_OPEN] != _NONE:
        state[_OPEN] -= dropped


@kernel
def _decimal_kernel(
    data: U8Array, offsets: Int64Array, exp10: int, mode: int, out: Int64Array, valid: BoolArray
) -> None:
    """Parse each ``data[offsets[i]:offsets[i+1]]`` as a decimal number times ``10**exp10``.

    A first pass finds the digits, the point and the exponent; then each digit's power of ten is
    known, the digits at or above the unit make the integer and the one just below it decides
    :data:`NEAREST` rounding (half away from zero needs no further digit).
    """
    limit = np.iinfo(np.int64).max
    for i in range(offsets.size - 1):
        lo = offsets[i]
        hi = offsets[i + 1]
        while lo < hi and (data[lo] == _QUOTE or data[lo] <= _SPACE):
            lo += 1
        while hi > lo and (data[hi - 1] == _QUOTE or data[hi - 1] <= _SPACE):
            hi -= 1
        out[i] = 0
        valid[i] = False
        negative = False
        if lo < hi and data[lo] in (_MINUS, _PLUS):
            negative = data[lo] == _MINUS
            lo += 1
        int_digits = 0
        frac_digits = 0
        seen_point = False
        j = lo
        while j < hi:
            c = data[j]
            if _ZERO <= c <= _NINE:
                if seen_point:
                    frac_digits += 1
                else:
                    int_digits += 1
            elif c == _POINT and not seen_point:
                seen_point = True
            else:
                break
            j += 1
        mantissa_end = j
        exponent = 0
        ok = int_digits + frac_digits > 0
        if j < hi and data[j] in (_LOWER_E, _UPPER_E):
            j += 1
            exp_negative = False
            if j < hi and data[j] in (_MINUS, _PLUS):
                exp_negative = data[j] == _MINUS
                j += 1
            exp_digits = 0
            while j < hi and _ZERO <= data[j] <= _NINE:
                exponent = min(exponent * 10 + (data[j] - _ZERO), _MAX_EXPONENT)
                exp_digits += 1
                j += 1
            ok = ok and exp_digits > 0
            exponent = -exponent if exp_negative else exponent
        if not ok or j != hi:
            continue
        top = int_digits - 1 + exponent + exp10  # power of ten of the first digit, in the unit
        value = 0
        round_digit = 0
        k = 0
        for t in range(lo, mantissa_end):
            if data[t] == _POINT:
                continue
            power = top - k
            digit = data[t] - _ZERO
            k += 1
            if power >= 0:
                if value > (limit - digit) // 10:
                    ok = False
                    break
                value = value * 10 + digit
            else:
                if power == -1:
                    round_digit = digit
                break
        low = top - (int_digits + frac_digits - 1)  # power of the last digit
        while ok and low > 0 and value != 0:
            if value > limit // 10:
                ok = False
            value *= 10
            low -= 1
        if mode == NEAREST and round_digit >= 5:
            ok = ok and value < limit
            value += 1
        if not ok:
            continue  # does not fit int64
        out[i] = -value if negative else value
        valid[i] = True


def parse_decimal(text: pa.Array | pa.ChunkedArray, exp10: int, mode: int = TRUNCATE) -> pa.Int64Array:
    """Decimal strings times ``10**exp10`` as int64; text that is not a number (``N/A``, empty) is null.

    ``exp10=3`` turns microseconds into nanoseconds. Quotes and whitespace around the number are
    ignored; an exponent (``1e-05``) is allowed. See the module docstring for rounding.
    """
    if mode not in (TRUNCATE, NEAREST):
        msg = f"mode: expected TRUNCATE ({TRUNCATE}) or NEAREST ({NEAREST}), got {mode}"
        raise ValueError(msg)
    array = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if not (pa.types.is_string(array.type) or pa.types.is_binary(array.type)):
        array = array.cast(pa.string())
    array = array.cast(pa.large_binary())
    n = len(array)
    offsets_buf, data_buf = array.buffers()[1], array.buffers()[2]
    offsets = np.frombuffer(offsets_buf, np.int64, n + 1, array.offset * 8) if n else np.zeros(1, np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    out = np.empty(n, np.int64)
    valid = np.empty(n, np.bool_)
    _decimal_kernel(data, np.ascontiguousarray(offsets), exp10, mode, out, valid)
    if array.null_count:
        valid &= np.asarray(array.is_valid())
    return pa.array(out, pa.int64(), mask=~valid)
