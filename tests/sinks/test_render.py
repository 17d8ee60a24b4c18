"""The numba row renderer (JSON objects, CSV lines) and the float text, against hand-derived text."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.sinks._format import float_text
from profstream.sinks._json import Template, render_pieces
from profstream.sinks._numbers import SHORTEST_MAX, SHORTEST_MIN

I64_MIN = int(np.iinfo(np.int64).min)
I64_MAX = int(np.iinfo(np.int64).max)


def render(template: Template) -> list[bytes]:
    """Each row's object; checks the size bound the kernel relies on to stay inside its buffer."""
    compiled = template.compile()
    pieces = render_pieces(compiled)
    assert all(len(piece) <= compiled.max_event for piece in pieces)
    return pieces


def line_cells(value: object, **kwargs: object) -> list[str]:
    """Each row's text in a one-cell line template (no line end)."""
    rows = len(value) if isinstance(value, pa.Array | pa.ChunkedArray | np.ndarray) else 1
    template = Template(rows, line_end="")
    template.member("v", value, **kwargs)  # type: ignore[arg-type]
    return [piece.decode() for piece in render(template)]


def one_member(value: object, **kwargs: object) -> list[bytes]:
    """Each row of a one-member object ``{"v": value}``."""
    rows = len(value) if isinstance(value, pa.Array | pa.ChunkedArray | np.ndarray) else 1
    template = Template(rows)
    template.member("v", value, **kwargs)  # type: ignore[arg-type]
    return render(template)


def micros_reference(ns: int, *, trim: bool) -> str:
    """The decimal text of ns / 1000 by Python's Decimal (3 places, or Python-float-like trimming)."""
    text = str((Decimal(ns) / 1000).quantize(Decimal("0.000")))
    if trim:
        text = text.rstrip("0")
        text = text + "0" if text.endswith(".") else text
    return text


def test_integers_print_exactly_at_the_int64_extremes() -> None:
    """Integers, negative ones and both int64 extremes included, print as decimal text."""
    values = np.array([0, 7, -7, 10, -10, 123456789, I64_MIN, I64_MAX], np.int64)
    assert one_member(values) == [f'{{"v":{v}}}'.encode() for v in values.tolist()]


def test_ts_is_a_string_of_microseconds_with_three_decimals() -> None:
    """ts: ns with the decimal point inserted, negative and extreme values exact."""
    values = np.array([0, 1, 999, 1000, -1, -999, -1000, -1500, 1_700_000_000_123_456_789, I64_MIN, I64_MAX])
    expected = [
        "0.000",
        "0.001",
        "0.999",
        "1.000",
        "-0.001",
        "-0.999",
        "-1.000",
        "-1.500",
        "1700000000123456.789",
        "-9223372036854775.808",
        "9223372036854775.807",
    ]
    assert one_member(values, role="ts") == [f'{{"v":"{e}"}}'.encode() for e in expected]
    assert one_member(values, role="ts_tab") == [f'{{"v":"{e}\\t"}}'.encode() for e in expected]


def test_dur_is_the_exact_decimal_without_trailing_zeros() -> None:
    """dur: 12345 ns -> 12.345, 12340 -> 12.34, 12300 -> 12.3, 12000 -> 12.0 (as Python prints floats)."""
    values = np.array([12345, 12340, 12300, 12000, 0, 1, 10, 100, -1, -1500, I64_MIN])
    expected = ["12.345", "12.34", "12.3", "12.0", "0.0", "0.001", "0.01", "0.1", "-0.001", "-1.5"]
    expected.append("-9223372036854775.808")
    assert one_member(values, role="dur") == [f'{{"v":{e}}}'.encode() for e in expected]
    assert [json.loads(p)["v"] for p in one_member(values[:-1], role="dur")] == [
        v / 1000 for v in values[:-1]
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(I64_MIN, I64_MAX), min_size=1, max_size=30))
def test_microseconds_agree_with_decimal(values: list[int]) -> None:
    """The kernel's ts/dur text, in objects and in lines, and Python's Decimal are the same string."""
    ns = np.array(values, np.int64)
    one_member(ns)
    one_member(ns, role="ts_tab")
    fixed = [micros_reference(v, trim=False) for v in values]
    trimmed = [micros_reference(v, trim=True) for v in values]
    assert [json.loads(p)["v"] for p in one_member(ns, role="ts")] == fixed
    assert [p[5:-1].decode() for p in one_member(ns, role="dur")] == trimmed
    assert line_cells(ns, role="ts") == fixed
    assert line_cells(ns, role="dur") == trimmed


def test_strings_are_escaped_like_json_dumps() -> None:
    """Quotes, backslashes, every control character and non-ASCII text: json.dumps's escaping, exactly."""
    strings = ['say "hi"', "back\\slash", "tab\tnew\nline\r", "\b\f", "\x00\x01\x1f\x7f", "名前 é 😀", ""]
    strings.append("".join(chr(c) for c in range(32)))
    expected = [b'{"v":' + json.dumps(s, ensure_ascii=False).encode() + b"}" for s in strings]
    assert one_member(pa.array(strings)) == expected
    assert one_member(pa.array(strings).dictionary_encode()) == expected
    assert one_member(pa.array(strings, pa.large_string())) == expected
    assert b'"\\u0000\\u0001\\u001f\x7f"' in one_member(pa.array(strings))[4]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=20))
def test_any_text_round_trips_through_json_loads(strings: list[str]) -> None:
    """Whatever the text, the rendered object parses back to it."""
    pieces = one_member(pa.array(strings).dictionary_encode())
    assert [json.loads(p)["v"] for p in pieces] == strings


def test_absent_values_are_left_out_or_printed_as_the_null_text() -> None:
    """An absent optional member disappears (commas stay right); with ``null`` it prints that text."""
    template = Template(3)
    template.member("a", pa.array([1, None, 3]))
    template.member("b", pa.array(["x", "y", None]).dictionary_encode())
    template.open("args")
    template.member("c", pa.array([None, 2.5, None]))
    template.member("d", pa.array([None, None, True]))
    template.close()
    template.member("e", pa.array([None, 5, None]), null="N/A")
    assert render(template) == [
        b'{"a":1,"b":"x","args":{},"e":"N/A"}',
        b'{"b":"y","args":{"c":2.5},"e":5}',
        b'{"a":3,"args":{"d":true},"e":"N/A"}',
    ]


def test_a_numeric_null_text_prints_as_a_number_in_objects() -> None:
    """msprof writes some absent values as numbers (a first wait ``0``, a release-only sample ``-1``)."""
    template = Template(2)
    template.member("w", pa.array([None, 0.5]), null="0")
    template.member("r", pa.array([None, 3]), null="-1")
    template.member("t", pa.array([None, 1.5]), null="1e-05x")
    assert render(template) == [b'{"w":0,"r":-1,"t":"1e-05x"}', b'{"w":0.5,"r":3,"t":1.5}']


def test_scalars_apply_to_every_row_and_constants_are_fixed_text() -> None:
    """A Python scalar (or one-value array) repeats for every row."""
    template = Template(2)
    template.member("pid", 7)
    template.member("name", "n")
    template.member("f", 0.5)
    template.member("ts", np.array([1000, 2000]), role="ts")
    template.constant("ph", "X")
    template.constant("k", 3)
    assert render(template) == [
        b'{"pid":7,"name":"n","f":0.5,"ts":"1.000","ph":"X","k":3}',
        b'{"pid":7,"name":"n","f":0.5,"ts":"2.000","ph":"X","k":3}',
    ]


def test_floats_print_shortest_with_point_zero_and_non_finite_as_absent() -> None:
    """0.1 -> 0.1, 21.0 -> 21.0 (Python's repr), NaN/inf have no JSON text: absent."""
    values = pa.array([0.1, 21.0, -3.0, 1e16, float("nan"), float("inf"), None])
    assert float_text(values).to_pylist() == ["0.1", "21.0", "-3.0", "1e+16", None, None, None]
    assert one_member(values, null="N/A")[:3] == [b'{"v":0.1}', b'{"v":21.0}', b'{"v":-3.0}']
    assert one_member(values, null="N/A")[4] == b'{"v":"N/A"}'


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=40))
def test_floats_print_as_python_repr(values: list[float]) -> None:
    """Every finite float prints as Python's repr, which msprof's Python path writes: Arrow's own
    text differs in layout below 1e-4 and from 1e10 on (0.00001, 1e-9, 1e+10)."""
    assert float_text(pa.array(values, pa.float64())).to_pylist() == [repr(v) for v in values]


def test_floats_at_the_layout_edges_print_as_python_repr() -> None:
    values = [1e-4, 9.999e-5, 1e-5, 1.2345e-9, 1e10, 9999999999.5, 1.2345e15, 1e16, -0.0, 0.0, -1e-7]
    assert float_text(pa.array(values)).to_pylist() == [repr(v) for v in values]


def test_floats_next_to_powers_of_two_and_ten_print_as_python_repr() -> None:
    """The shortest-digits search at its edges: the uneven neighbour spacing at powers of two, the
    digit count and layout changing at powers of ten, the ends of the kernel's range."""
    values = [0.0, -0.0, SHORTEST_MIN, SHORTEST_MAX, 5e-324, 1.7976931348623157e308]
    for exponent in range(-40, 64):
        power = 2.0**exponent
        values += [power, math.nextafter(power, 0.0), math.nextafter(power, math.inf)]
    for exponent in range(-10, 18):
        power = 10.0**exponent
        values += [power + step * math.ulp(power) for step in range(-200, 201)]
    values += [-v for v in values]
    assert float_text(pa.array(values)).to_pylist() == [repr(v) for v in values]


def test_random_doubles_print_as_python_repr() -> None:
    """Random bit patterns (every exponent) and random ratios, as msprof's metrics are."""
    rng = np.random.default_rng(20261122)
    patterns = rng.integers(0, 2**64 - 1, 100_000, dtype=np.uint64, endpoint=True).view(np.float64)
    ratios = rng.integers(1, 10**7, 100_000) / rng.integers(1, 10**7, 100_000)
    values = np.concatenate([patterns[np.isfinite(patterns)], ratios, rng.random(100_000) * 1e-6])
    assert float_text(pa.array(values)).to_pylist() == [repr(v) for v in values.tolist()]


def test_sizes_over_powers_of_two_print_as_python_repr() -> None:
    """KB and MB columns (bytes over 1024 or 1024**2) and other whole numbers over powers of two: the
    exact decimals of up to 15 digits, and those just longer, which the search prints instead."""
    rng = np.random.default_rng(20261124)
    whole = rng.integers(1, 2**53, 100_000, dtype=np.int64) >> rng.integers(0, 53, 100_000)
    values = np.concatenate(
        [
            rng.integers(0, 2**40, 100_000) / 1024.0,
            rng.integers(0, 2**40, 100_000) * 512 / 1024.0**2,
            (whole + 1) / 2.0 ** rng.integers(0, 60, 100_000),
            np.arange(1, 2**16) * 10.0**15 / 2**16,  # across the 15-digit limit
        ]
    )
    values = np.concatenate([values, -values])
    assert float_text(pa.array(values)).to_pylist() == [repr(v) for v in values.tolist()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(), min_size=1, max_size=40))
def test_rendered_floats_print_as_python_repr(values: list[float]) -> None:
    """Rows print floats as repr too (NaN and infinities absent), sliced arrays included."""
    expected = [repr(v) if math.isfinite(v) else "N/A" for v in values]
    assert line_cells(pa.array(values, pa.float64()), null="N/A") == expected
    assert line_cells(pa.array(values, pa.float64()).slice(1), null="N/A") == expected[1:]


def test_uint64_beyond_int64_prints_as_a_number() -> None:
    """uint64 ids above the int64 range keep their exact value."""
    assert one_member(pa.array([2**64 - 1, 5], pa.uint64())) == [b'{"v":18446744073709551615}', b'{"v":5}']


def test_dictionary_entries_that_are_null_count_as_absent() -> None:
    """A dictionary whose entry is null makes that row's value absent."""
    values = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0]), pa.array(["a", None]))
    assert one_member(values, null="-") == [b'{"v":"a"}', b'{"v":"-"}', b'{"v":"a"}']


def test_chunked_columns_are_combined() -> None:
    """A ChunkedArray (dictionary chunks with different dictionaries included) reads as one column."""
    chunks = pa.chunked_array([pa.array(["a", "b"]).dictionary_encode(), pa.array(["c"]).dictionary_encode()])
    assert one_member(chunks) == [b'{"v":"a"}', b'{"v":"b"}', b'{"v":"c"}']


def test_bad_columns_are_refused_with_their_name() -> None:
    """Wrong lengths, absent required values and non-integer times name the column."""
    template = Template(3)
    with pytest.raises(ValueError, match=r"'pid'.*expected 3 values"):
        template.member("pid", np.array([1, 2]))
    with pytest.raises(ValueError, match=r"'ts'.*has absent values"):
        template.member("ts", pa.array([1, None, 3]), role="ts", required=True)
    with pytest.raises(ValueError, match=r"'dur'.*expected integers"):
        template.member("dur", np.array([1.5, 2.0, 3.0]), role="dur")
    with pytest.raises(ValueError, match="close"):
        template.close()


def test_lines_print_every_cell_bare_with_its_null_text() -> None:
    """A line template: no keys or braces, timestamps with their TAB, absent cells as their null
    text (empty ones too), strings copied raw, one line end per row."""
    template = Template(3, line_end="\r\n")
    template.member("ts", pa.array([1500, None, -1], pa.int64()), role="ts_tab", null="N/A")
    template.member("dur", pa.array([1500, 2000, None], pa.int64()), role="dur", null="")
    template.member("name", pa.array(['"a,b"', None, "x"]).dictionary_encode(), role="raw", null="N/A")
    template.member("f", pa.array([0.5, None, 1e-05]), null="N/A")
    template.member("ok", pa.array([True, False, None]), null="")
    template.member("quoted", pa.array([1, 2, 3]), role="ts", wrap=('"', '\t"'))
    assert render(template) == [
        b'1.500\t,1.5,"a,b",0.5,true,"0.001\t"\r\n',
        b'N/A,2.0,N/A,N/A,false,"0.002\t"\r\n',
        b'-0.001\t,,x,1e-05,,"0.003\t"\r\n',
    ]
    with pytest.raises(ValueError, match="object"):
        template.open("args")


def test_sliced_arrays_read_from_their_offset() -> None:
    """Arrays that are slices of larger ones (batch.slice) render their own values only."""
    strings = pa.array(["a", None, 'b"', "c"])
    assert one_member(strings.slice(1, 2)) == [b"{}", b'{"v":"b\\""}']
    assert one_member(strings.dictionary_encode().slice(2)) == [b'{"v":"b\\""}', b'{"v":"c"}']
    ints = pa.array([1, None, 3, 4])
    assert one_member(ints.slice(1, 2)) == [b"{}", b'{"v":3}']
    assert one_member(ints.slice(2), role="ts") == [b'{"v":"0.003"}', b'{"v":"0.004"}']
