"""TLV framing walker: records, fields, carry-over, truncation, corrupt lengths, UTF-8, generations."""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.codecs import _tlv
from profstream.codecs._base import DecodeContext, Decoded, packed_dtype
from profstream.codecs._tlv import Generation, TlvLayout
from profstream.errors import DecodeError

KEY = packed_dtype([("key", "<u8")], 8)
#: a two-generation test layout: fields 1/2 (old) renumbered to 2/3 (new), like torch_npu's.
LAYOUT = TlvLayout(
    family="test_tlv",
    numbers={"key": "<u8"},
    texts=("a", "b"),
    generations=(
        Generation("old", KEY, {1: "a", 2: "b"}, frozenset({1})),
        Generation("new", KEY, {2: "a", 3: "b"}, frozenset({2})),
    ),
)


def tlv(kind: int, value: bytes) -> bytes:
    """One TLV element built by hand: u16 type, u32 length, value."""
    return struct.pack("<HI", kind, len(value)) + value


def record(key: int, *fields: tuple[int, bytes]) -> bytes:
    """A test-layout record: fixed part ``<Q`` then the given fields."""
    return tlv(9, struct.pack("<Q", key) + b"".join(tlv(k, v) for k, v in fields))


def decode(raw: bytes, **ctx: Any) -> Decoded:
    return LAYOUT.decode(np.frombuffer(raw, np.uint8), DecodeContext(**ctx))


def test_fields_by_id_and_absent_is_null() -> None:
    """Fields land in the column of their id; a missing field is null, an empty one ''."""
    raw = record(7, (2, b"x"), (3, b"")) + record(8, (2, "é中".encode()))
    out = decode(raw)
    assert out.consumed == len(raw)
    assert out.batch.to_pydict() == {"key": [7, 8], "a": ["x", "é中"], "b": ["", None]}


def test_repeated_field_last_wins_unknown_ignored() -> None:
    """A field id repeated in a record keeps its last value; unknown ids are skipped."""
    out = decode(record(1, (2, b"first"), (99, b"?"), (2, b"second")))
    assert out.batch.to_pydict() == {"key": [1], "a": ["second"], "b": [None]}


@settings(deadline=None, max_examples=50)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.lists(st.tuples(st.sampled_from([2, 3]), st.binary()))),
        max_size=20,
    )
)
def test_many_fields_match_a_python_reading(recs: list[tuple[int, list[tuple[int, bytes]]]]) -> None:
    """Random records with many fields decode like a plain-Python TLV reading (last wins, N/A)."""
    raw = b"".join(record(key, (2, b"name"), *fields) for key, fields in recs)
    out = decode(raw)
    expected: dict[str, list[object]] = {"key": [], "a": [], "b": []}
    bad = 0
    for key, fields in recs:
        seen = dict([(2, b"name"), *fields])
        expected["key"].append(key)
        for kind, name in ((2, "a"), (3, "b")):
            if kind not in seen:
                expected[name].append(None)
                continue
            try:
                expected[name].append(seen[kind].decode())
            except UnicodeDecodeError:
                expected[name].append("N/A")
                bad += 1
    assert out.batch.to_pydict() == expected
    assert out.replaced == bad


@settings(deadline=None)
@given(st.binary(max_size=12))
def test_utf8_check_agrees_with_python(value: bytes) -> None:
    """A field decodes exactly as bytes.decode() does, or becomes 'N/A' where that raises."""
    out = decode(record(0, (2, value)))
    try:
        expected, bad = value.decode(), 0
    except UnicodeDecodeError:
        expected, bad = "N/A", 1
    assert out.batch.column("a").to_pylist() == [expected]
    assert out.replaced == bad


@pytest.mark.parametrize(
    "value",
    [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x9f\xbf", b"ab\xff", b"\xe4\xb8"],
)
def test_invalid_utf8_becomes_na_and_is_counted(value: bytes) -> None:
    """Overlongs, surrogates, > U+10FFFF, stray and cut-off bytes give 'N/A', counted in replaced."""
    out = decode(record(1, (2, b"ok")) + record(2, (2, value), (3, value)))
    assert out.batch.column("a").to_pylist() == ["ok", "N/A"]
    assert out.batch.column("b").to_pylist() == [None, "N/A"]
    assert out.replaced == 2


@pytest.mark.parametrize("cut", [1, 5, 6, 13, 20])
def test_truncated_tail_is_carried_when_not_final(cut: int) -> None:
    """An incomplete header or value at the end of a buffer is left for the next one."""
    whole = record(1, (2, b"abc")) + record(2, (2, b"defgh"))
    first_len = len(record(1, (2, b"abc")))
    out = decode(whole[: first_len + cut], final=False)
    assert out.consumed == first_len
    assert out.batch.column("key").to_pylist() == [1]
    assert out.dropped == 0


@pytest.mark.parametrize(("cut", "expected"), [(4, "6-byte record header"), (10, "a record of 6 + 19 bytes")])
def test_truncated_tail_at_end_of_stream_is_an_error(cut: int, expected: str) -> None:
    """At the end of the stream a truncated T/L/V raises with the file, offset and what was expected."""
    first = record(1, (2, b"abc"))
    raw = first + record(2, (2, b"defgh"))[:cut]
    with pytest.raises(DecodeError) as info:
        decode(raw, path="FRAMEWORK/torch.x", offset=100, record_index=5)
    err = info.value
    assert err.path == "FRAMEWORK/torch.x"
    assert err.offset == 100 + len(first)
    assert err.record_index == 6
    assert expected in str(err)
    assert f"found only {cut} bytes" in str(err)


def test_truncated_tail_at_end_of_stream_skip_counts() -> None:
    """Under skip the truncated tail is consumed and counted, the whole records kept."""
    raw = record(1, (2, b"abc")) + record(2, (2, b"defgh"))[:9]
    out = decode(raw, on_invalid="skip")
    assert out.consumed == len(raw)
    assert out.dropped == 1
    assert "truncated" in out.drop_reason
    assert out.batch.column("key").to_pylist() == [1]


@pytest.mark.parametrize("policy", ["error", "skip"])
def test_absurd_length_is_an_error_under_both_policies(policy: str) -> None:
    """A value length above 64 MiB is corrupt framing: an error naming file and offset, no allocation."""
    good = record(1, (2, b"a"))
    raw = good + struct.pack("<HI", 9, 0xFFFFFFF0) + b"\x00" * 8
    with pytest.raises(DecodeError) as info:
        decode(raw, path="torch.op_mark", offset=10, on_invalid=policy, final=False)
    assert info.value.offset == 10 + len(good)
    assert info.value.record_index == 1
    assert str(0xFFFFFFF0) in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [
        tlv(9, b"\x00" * 5),  # shorter than the 8-byte fixed part
        tlv(9, struct.pack("<Q", 3) + tlv(2, b"abc")[:-1]),  # field runs past the value
        tlv(9, struct.pack("<Q", 3) + tlv(2, b"abc") + b"\x01\x00"),  # stray bytes after the fields
    ],
)
def test_value_that_does_not_fit_is_invalid(bad: bytes) -> None:
    """A value shorter than its fixed part or not tiling as whole fields: error, or skip and count."""
    good = record(1, (2, b"a"))
    raw = good + bad + good
    with pytest.raises(DecodeError) as info:
        decode(raw, offset=1000, record_index=40)
    assert info.value.offset == 1000 + len(good)
    assert info.value.record_index == 41
    out = decode(raw, on_invalid="skip")
    assert out.dropped == 1
    assert out.consumed == len(raw)
    assert out.batch.to_pydict() == {"key": [1, 1], "a": ["a", "a"], "b": [None, None]}


@settings(deadline=None, max_examples=30)
@given(st.data())
def test_split_anywhere_gives_the_same_rows(data: st.DataObject) -> None:
    """Decoding a stream in two buffers, carrying the unconsumed tail, equals decoding it whole."""
    recs = data.draw(st.lists(st.tuples(st.integers(0, 99), st.text(max_size=5)), min_size=1, max_size=8))
    raw = b"".join(record(key, (2, text.encode("utf-8", "surrogatepass"))) for key, text in recs)
    cut = data.draw(st.integers(0, len(raw)))
    head = decode(raw[:cut], final=False)
    tail = decode(raw[head.consumed :], offset=head.consumed)
    assert head.batch.column("key").to_pylist() + tail.batch.column("key").to_pylist() == [k for k, _ in recs]
    assert head.consumed + tail.consumed == len(raw)


def test_generation_detected_from_field_ids() -> None:
    """Same fixed size, renumbered fields: the ids present decide the generation."""
    old = decode(record(1, (1, b"x"), (2, b"y")))
    new = decode(record(1, (2, b"x"), (3, b"y")))
    assert old.batch.to_pydict() == new.batch.to_pydict() == {"key": [1], "a": ["x"], "b": ["y"]}


def test_one_generation_per_buffer() -> None:
    """The leading records vote; every record of the buffer is then read with the winner's field ids."""
    raw = b"".join(record(i, (1, b"old")) for i in range(3)) + record(9, (2, b"new"), (3, b"n"))
    out = decode(raw)
    assert out.batch.column("a").to_pylist() == ["old"] * 3 + [None]
    assert out.batch.column("b").to_pylist() == [None] * 3 + ["new"]


def test_empty_buffer_has_the_current_schema() -> None:
    """Zero bytes decode to zero rows of the one output schema."""
    out = decode(b"")
    assert out.consumed == 0
    assert out.batch.num_rows == 0
    assert out.batch.schema.names == ["key", "a", "b"]


def test_encode_round_trip_each_generation() -> None:
    """encode writes each generation's ids and the writer's record type; decode reads them back."""
    cols = {"key": np.array([5, 6], np.uint64), "a": ["p", None], "b": [None, "q"]}
    for gen in LAYOUT.generations:
        raw = LAYOUT.encode(cols, generation=gen.name)
        assert struct.unpack_from("<H", raw)[0] == gen.record_type
        assert decode(raw).batch.to_pydict() == {"key": [5, 6], "a": ["p", ""], "b": [None, "q"]}
    assert LAYOUT.encode(cols) == LAYOUT.encode(cols, generation="new")
    with pytest.raises(ValueError, match="unknown layout generation 'v0'; known: old, new"):
        LAYOUT.encode(cols, generation="v0")


def test_kernels_compile_lazily() -> None:
    """Importing the codecs compiles no TLV kernel (numba runs on first use only)."""
    code = "import profstream.codecs, profstream.codecs._tlv as t; print(len(t._DISPATCHERS))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "0"


def test_walk_and_field_table_offsets() -> None:
    """The walker returns value offsets/lengths per record and (record, type, start, length) per field."""
    buf = np.frombuffer(record(1, (2, b"ab"), (3, b"")) + record(2) + b"\x05", np.uint8)
    recs = _tlv.walk(buf, DecodeContext(), "test_tlv")
    assert recs.starts.tolist() == [6, 34]
    assert recs.lengths.tolist() == [22, 8]
    assert recs.stop == 42
    assert "record header" in recs.expected
    fields = _tlv.scan_fields(buf, recs.starts, recs.lengths, 8)
    assert fields.ok.tolist() == [True, True]
    assert fields.record.tolist() == [0, 0]
    assert fields.kind.tolist() == [2, 3]
    assert fields.start.tolist() == [20, 28]
    assert fields.length.tolist() == [2, 0]
