"""Numbers written as ASCII bytes by numba: integers, exact microseconds and floats as Python prints them.

The sinks format cells into byte buffers without a Python object per cell. Integers and
microseconds are exact integer arithmetic. Floats need Python's ``repr``, because msprof's Python
path and ``json.dumps`` print floats that way:

* Python's ``repr`` prints the *shortest* decimal that reads back as the same double. When several
  decimals of that length read back, it prints the one nearest the double. This is David Gay's
  ``dtoa`` mode 0, in CPython's ``Python/dtoa.c``. Python's ``float_repr_style`` is ``'short'``.
* The layout is fixed-point (``0.001``, ``21.0``, ``1000000000000000.0``) when the leading digit's
  decimal exponent is in [-4, 16). Otherwise Python uses exponent notation (``1e-05``,
  ``1e+16``). The kernel writes both layouts for magnitudes in ``[SHORTEST_MIN, SHORTEST_MAX)``;
  the caller gives it ``repr``'s text for the rare values outside. Summary values (ratios, KB,
  bandwidths) are almost all inside.

:func:`shortest_digits` finds the digits exactly (Steele and White's free-format rule, the one
``dtoa`` implements). A double ``m * 2**e`` reads back from every decimal strictly between the
midpoints to its neighbours; the midpoints themselves read back too when ``m`` is even, because
reading rounds half to even. Scaled by ``10**k`` for 18 significant digits, the value and both
midpoints are exact 128-bit products ``(4m ± 2) * 5**k`` shifted right. Then decimals are dropped
while the interval still holds a whole number, and the nearest whole number in it is kept. No
floating-point rounding enters the result. ``numpy.format_float_positional(unique=True)`` gives the
same digits, but costs a Python call per value. Most summary values (``0.938``, ``3328.0390625``,
``12.5``) are decimals of at most 15 digits, whose digits :func:`short_digits` finds first, with a
multiplication and a division of doubles (about a quarter of the exact search's time).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream._numba import inline, kernel

U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]

#: 10**k for k in 0..18: digits are counted by comparison (a division per digit costs twice as much)
POWERS = np.array([10**k for k in range(19)], np.int64)
#: the two digits of 0..99, "00" to "99": digits are written two per division
_DIGIT_PAIRS = np.frombuffer(b"".join(b"%02d" % k for k in range(100)), np.uint8)
#: 5**k for the decimal scalings (k <= 27 from SHORTEST_MIN up)
_POWERS_OF_5 = np.array([5**k for k in range(28)], np.uint64)
#: 10.0**k for k in 0..22, every one exact as a double (the scalings of :func:`short_digits`)
_EXACT_POWERS = np.array([10.0**k for k in range(23)], np.float64)
#: the decimals :func:`short_digits` reads at most (the digits of a double every such decimal keeps)
_SHORT_DIGITS = 15
_LOW_32 = np.uint64(0xFFFF_FFFF)
_FRACTION_BITS = np.uint64((1 << 52) - 1)
_HIDDEN_BIT = np.uint64(1 << 52)
_MAGNITUDE_BITS = np.uint64((1 << 63) - 1)
#: the bytes of one float at most: sign, "0.", 3 zeros and 17 digits; or 17 digits, ".", "e-09"
FLOAT_WIDTH = 23

#: the magnitudes :func:`shortest_digits` takes (``5**k`` and the 128-bit products fit 64 bits)
SHORTEST_MIN = 1e-9
SHORTEST_MAX = 1e16

# what :func:`float_texts` writes for a value
NO_TEXT = 0  # absent, NaN or infinite
SHORTEST = 1  # the kernel's own digits: zero, or a magnitude in [SHORTEST_MIN, SHORTEST_MAX)
GIVEN = 2  # the next of the texts the caller gives


@inline
def copy_bytes(out: U8, pos: int, src: U8, start: int, end: int) -> int:
    for k in range(start, end):
        out[pos] = src[k]
        pos += 1
    return pos


@inline
def _digit_count(value: int) -> int:
    """How many decimal digits ``value`` >= 0 has."""
    width = 1 if value < POWERS[8] else 9 if value < POWERS[16] else 17  # times have 16 digits
    while width < 19 and value >= POWERS[width]:
        width += 1
    return width


@inline
def _put_last(out: U8, end: int, rest: np.uint64, count: int) -> np.uint64:
    """The last ``count`` decimal digits of ``rest``, zero-padded, ending before ``end``; returns the
    digits above them. Unsigned, and by constants only: divisions without sign fix-ups, compiled to
    multiplications (a division by a power of ten looked up is a hardware division, several times
    slower)."""
    k = end
    start = end - count
    while k - start >= 2:
        pair = 2 * (rest % np.uint64(100))
        rest //= np.uint64(100)
        out[k - 2] = _DIGIT_PAIRS[pair]
        out[k - 1] = _DIGIT_PAIRS[pair + np.uint64(1)]
        k -= 2
    if k > start:
        out[start] = np.uint8(48) + np.uint8(rest % np.uint64(10))
        rest //= np.uint64(10)
    return rest


@inline
def _put_padded(out: U8, pos: int, value: int, width: int) -> int:
    """The last ``width`` decimal digits of ``value`` >= 0, zero-padded."""
    _put_last(out, pos + width, np.uint64(value), width)
    return pos + width


@inline
def put_digits(out: U8, pos: int, value: int) -> int:
    """Decimal digits of ``value`` >= 0."""
    return _put_padded(out, pos, value, _digit_count(value))


@inline
def _magnitude(value: int, unit: int) -> tuple[int, int]:
    """``|value|`` split as (``|value| // unit``, ``|value| % unit``) without overflowing at int64 min."""
    if value >= 0:
        return value // unit, value % unit
    rest = -(value + 1)  # |value| - 1 always fits
    carry = rest % unit + 1
    return rest // unit + carry // unit, carry % unit


@inline
def put_int(out: U8, pos: int, value: int) -> int:
    if value < 0:
        out[pos] = 45  # '-'
        pos += 1
    head, last = _magnitude(value, 10)
    if head:
        pos = put_digits(out, pos, head)
    out[pos] = 48 + last
    return pos + 1


@inline
def put_micros(out: U8, pos: int, ns: int, trim: bool) -> int:
    """``ns`` as microseconds: 3 decimals, or (``trim``) without trailing zeros but with one decimal."""
    if ns < 0:
        out[pos] = 45
        pos += 1
    whole, frac = _magnitude(ns, 1000)
    pos = put_digits(out, pos, whole)
    out[pos] = 46  # '.'
    out[pos + 1] = 48 + frac // 100
    out[pos + 2] = 48 + frac // 10 % 10
    out[pos + 3] = 48 + frac % 10
    if not trim or frac % 10:
        return pos + 4
    if frac % 100:
        return pos + 3
    return pos + 2


@inline
def _product(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:
    """The 128-bit product ``a * b`` as (high, low) 64-bit words."""
    a0, a1 = a & _LOW_32, a >> np.uint64(32)
    b0, b1 = b & _LOW_32, b >> np.uint64(32)
    p00, p01, p10 = a0 * b0, a0 * b1, a1 * b0
    middle = (p00 >> np.uint64(32)) + (p01 & _LOW_32) + (p10 & _LOW_32)
    low = (p00 & _LOW_32) | (middle << np.uint64(32))
    high = a1 * b1 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (middle >> np.uint64(32))
    return high, low


@inline
def _scaled(x: np.uint64, k: int, shift: int) -> tuple[np.uint64, np.uint64, np.uint64]:
    """``x * 5**k / 2**shift`` as (whole part, remainder, half the divisor); the caller's range
    keeps ``shift`` below 64 and the whole part below 2**64."""
    high, low = _product(x, _POWERS_OF_5[k])
    if shift <= 0:
        return low << np.uint64(-shift), np.uint64(0), np.uint64(1)
    s = np.uint64(shift)
    whole = (high << (np.uint64(64) - s)) | (low >> s)
    return whole, low & ((np.uint64(1) << s) - np.uint64(1)), np.uint64(1) << (s - np.uint64(1))


@inline
def shortest_digits(bits: np.uint64) -> tuple[int, int]:
    """``(digits, decimals)`` of Python's repr of the positive double ``bits`` in
    ``[SHORTEST_MIN, SHORTEST_MAX)``: it is what ``digits * 10**-decimals`` reads back as
    (``decimals`` may be negative)."""
    biased = int(np.int64((bits >> np.uint64(52)) & np.uint64(0x7FF)))  # int64 in numba, int for mypy
    fraction = bits & _FRACTION_BITS
    m = fraction | _HIDDEN_BIT
    exponent = biased - 1075  # the double is m * 2**exponent
    inclusive = (m & np.uint64(1)) == np.uint64(0)  # an even m also owns its midpoints
    # in units of 2**(exponent - 2): the value and the midpoints to its neighbours, the lower one
    # nearer at a power of two, where the spacing below halves
    x_value = m << np.uint64(2)
    x_high = x_value + np.uint64(2)
    x_low = x_value - (np.uint64(1) if fraction == np.uint64(0) and biased > 1 else np.uint64(2))
    # floor(log10(2) * binary exponent of the leading bit): the decimal exponent, or 1 below it
    decimal_exponent = ((exponent + 52) * 78913) >> 18
    k = 17 - decimal_exponent  # 18 significant digits (19 when the estimate is low)
    shift = 2 - exponent - k  # value * 10**k = x_value * 5**k / 2**shift
    whole, rest, half = _scaled(x_value, k, shift)
    if whole >= np.uint64(10**18):  # the estimate was low: one decimal fewer
        k -= 1
        shift += 1
        whole, rest, half = _scaled(x_value, k, shift)
    low_whole, low_rest, _ = _scaled(x_low, k, shift)
    high, high_rest, _ = _scaled(x_high, k, shift)
    low = low_whole + (np.uint64(1) if low_rest != np.uint64(0) or not inclusive else np.uint64(0))
    if high_rest == np.uint64(0) and not inclusive:
        high -= np.uint64(1)
    ten = np.uint64(10)
    dropped = 0
    while (low + np.uint64(9)) // ten <= high // ten:  # a whole number is still inside with one decimal fewer
        low, high = (low + np.uint64(9)) // ten, high // ten
        dropped += 1
    divisor = np.uint64(POWERS[dropped])
    digits, tail = whole // divisor, whole % divisor
    odd = digits % np.uint64(2) == np.uint64(1)
    if dropped == 0:  # round the exact value to the nearest whole number, ties to even
        up = rest > half or (rest == half and odd)
    else:
        midway = divisor // np.uint64(2)
        up = tail > midway or (tail == midway and (rest != np.uint64(0) or odd))
    if up:
        digits += np.uint64(1)
    return int(np.int64(min(max(digits, low), high))), k - dropped


@inline
def short_digits(value: float, bits: np.uint64) -> tuple[int, int]:
    """:func:`shortest_digits` of the positive double ``value`` (``bits``) when a decimal of at most
    15 significant digits reads back as it, else ``(-1, 0)``.

    That decimal is repr's: two decimals of at most 15 digits never read back as the same double (C's
    ``DBL_DIG``), so no shorter one does. Scaled by ``10**scale`` to 15 digits, it is the whole number
    ``n`` nearest to the product ``value * 10**scale``: the product's rounding and the decimal's distance
    to ``value``, half a unit in the last place each, keep them less than 1/4 apart. And it reads back as
    ``value`` exactly when the division ``n / 10**scale`` of two exact doubles, rounded as reading
    rounds, gives ``value``.
    """
    biased = int(np.int64((bits >> np.uint64(52)) & np.uint64(0x7FF)))
    # 15 digits from the leading one, whose exponent the binary one gives, at times one too low
    scale = _SHORT_DIGITS - 1 - (((biased - 1075 + 52) * 78913) >> 18)
    if scale < 1 or scale >= _EXACT_POWERS.size:
        return -1, 0
    limit = _EXACT_POWERS[_SHORT_DIGITS]
    n = np.rint(value * _EXACT_POWERS[scale])
    if n >= limit:  # the estimate was low: one decimal fewer
        scale -= 1
        n = np.rint(value * _EXACT_POWERS[scale])
    if n >= limit or n / _EXACT_POWERS[scale] != value:
        return -1, 0
    digits = np.uint64(n)
    for step, size in ((8, np.uint64(10**8)), (4, np.uint64(10**4)), (1, np.uint64(10))):  # trailing zeros
        while scale >= step and digits % size == np.uint64(0):
            digits //= size
            scale -= step
    return int(np.int64(digits)), scale


@inline
def _put_fixed(out: U8, pos: int, digits: int, decimals: int) -> int:
    """``digits * 10**-decimals`` in fixed-point, at least one decimal (``21.0``, ``0.001``)."""
    if decimals <= 0:
        pos = put_digits(out, pos, digits)
        for _ in range(-decimals):
            out[pos] = 48
            pos += 1
        out[pos] = 46
        out[pos + 1] = 48
        return pos + 2
    width = _digit_count(digits)
    if width <= decimals:  # below 1: "0." and the digits, zero-padded
        out[pos] = 48
        out[pos + 1] = 46
        return _put_padded(out, pos + 2, digits, decimals)
    point = pos + width - decimals
    head = _put_last(out, pos + width + 1, np.uint64(digits), decimals)
    out[point] = 46  # '.'
    _put_last(out, point, head, width - decimals)
    return pos + width + 1


@inline
def _put_exponent_form(out: U8, pos: int, digits: int, leading: int) -> int:
    """``d.ddde-0X`` as Python writes a value below 1e-4: no point for one digit, two exponent
    digits (``1e-05``, ``1.5e-09``); ``SHORTEST_MIN`` keeps the exponent at -9 or above."""
    width = _digit_count(digits)
    if width == 1:
        out[pos] = 48 + digits
        pos += 1
    else:  # d.ddd
        head = _put_last(out, pos + width + 1, np.uint64(digits), width - 1)
        out[pos] = np.uint8(48) + np.uint8(head)
        out[pos + 1] = 46
        pos += width + 1
    out[pos] = 101  # 'e'
    out[pos + 1] = 45  # '-'
    return _put_padded(out, pos + 2, -leading, 2)


@inline
def put_float(out: U8, pos: int, value: float, bits: np.uint64) -> int:
    """Python's repr of the double ``value`` (``bits``, its bit pattern): zero or a magnitude in
    ``[SHORTEST_MIN, SHORTEST_MAX)`` (a ``SHORTEST`` kind of :func:`float_kinds`)."""
    if bits >> np.uint64(63):
        out[pos] = 45  # '-', of -0.0 too
        pos += 1
    magnitude = bits & _MAGNITUDE_BITS
    if magnitude == np.uint64(0):
        return _put_fixed(out, pos, 0, 0)
    digits, decimals = short_digits(abs(value), magnitude)
    if digits < 0:
        digits, decimals = shortest_digits(magnitude)
    leading = _digit_count(digits) - 1 - decimals  # the decimal exponent of the first digit
    if leading < -4:
        return _put_exponent_form(out, pos, digits, leading)
    return _put_fixed(out, pos, digits, decimals)


@kernel
def float_kinds(values: F64) -> U8:
    """What :func:`float_texts` writes for each double: no text where it is not finite (NaN stands
    for an absent value too), the kernel's digits for zero and the magnitudes it prints, else repr's
    text, which the caller gives (one pass instead of numpy's ten)."""
    kinds = np.empty(values.size, np.uint8)
    for i in range(values.size):
        size = abs(values[i])
        if not np.isfinite(size):
            kinds[i] = NO_TEXT
        elif size == 0.0 or (size >= SHORTEST_MIN and size < SHORTEST_MAX):
            kinds[i] = SHORTEST
        else:
            kinds[i] = GIVEN
    return kinds


@kernel
def float_texts(values: F64, kinds: U8, given: I32, given_data: U8) -> tuple[I32, U8]:
    """Python's repr of every double, as Arrow string offsets and data; ``kinds`` says per value
    whether it has no text, the kernel's digits, or the next text of ``(given, given_data)``."""
    count = values.size
    bits = values.view(np.uint64)
    offsets = np.empty(count + 1, np.int32)
    out = np.empty(count * FLOAT_WIDTH + given_data.size, np.uint8)
    pos = 0
    other = 0
    for i in range(count):
        offsets[i] = pos
        if kinds[i] == NO_TEXT:
            continue
        if kinds[i] == GIVEN:
            pos = copy_bytes(out, pos, given_data, given[other], given[other + 1])
            other += 1
            continue
        pos = put_float(out, pos, values[i], bits[i])
    offsets[count] = pos
    return offsets, out[:pos].copy()
