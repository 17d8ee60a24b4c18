"""Host text dictionaries hash_dic / type_info_dic: line parsing, malformed-line policy, resolve()."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs import codec_for_file, dictionaries, get_codec
from profstream.codecs._base import DecodeContext, Decoded
from profstream.errors import DecodeError
from tests.strategies import uint_column

HASH = get_codec("hash_dic")
TYPE = get_codec("type_info_dic")
NAMES = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)


def _decode(text: bytes, **ctx: Any) -> Decoded:
    return HASH.decode(np.frombuffer(text, np.uint8), DecodeContext(**ctx))


@given(st.data())
def test_hash_dic_round_trip(data: st.DataObject) -> None:
    """decode(encode(x)) == x, names with ':' and non-ASCII text included."""
    n = data.draw(st.integers(0, 30))
    cols = {
        "hash": data.draw(uint_column(n, np.uint64)),
        "value": data.draw(st.lists(NAMES, min_size=n, max_size=n)),
    }
    raw = HASH.encode(cols)
    out = HASH.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    assert out.batch.column("hash").to_pylist() == cols["hash"].tolist()
    assert out.batch.column("value").to_pylist() == cols["value"]


@given(st.data())
def test_type_info_dic_round_trip(data: st.DataObject) -> None:
    """decode(encode(x)) == x for (level, type, name) rows."""
    n = data.draw(st.integers(0, 30))
    cols = {
        "level": data.draw(uint_column(n, np.uint16)),
        "type": data.draw(uint_column(n, np.uint64)),
        "name": data.draw(st.lists(NAMES, min_size=n, max_size=n)),
    }
    raw = TYPE.encode(cols)
    out = TYPE.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch
    assert out.column("level").to_pylist() == cols["level"].tolist()
    assert out.column("type").to_pylist() == cols["type"].tolist()
    assert out.column("name").to_pylist() == cols["name"]


def test_hash_dic_splits_at_the_first_colon() -> None:
    """Names keep every colon after the first; leading zeros and the u64 maximum are valid keys."""
    out = _decode(b"12:aten::add\n007:a:b:\n18446744073709551615:max\n5:\n").batch
    assert out.column("hash").to_pylist() == [12, 7, 2**64 - 1, 5]
    assert out.column("value").to_pylist() == ["aten::add", "a:b:", "max", ""]
    assert out.schema.field("hash").type == pa.uint64()


def test_names_keep_their_blanks() -> None:
    """As msprof's C++ splits the line (its Python strips the line first): only the line break goes."""
    out = _decode(b"1: padded \t\r\n2:tail \n").batch
    assert out.column("value").to_pylist() == [" padded \t", "tail "]


def test_empty_lines_and_crlf() -> None:
    """Empty lines hold nothing and a trailing CR is not part of the name."""
    out = _decode(b"\n1:a\r\n\r\n\n2:b\n")
    assert out.batch.to_pydict() == {"hash": [1, 2], "value": ["a", "b"]}
    assert out.dropped == 0


def test_incomplete_last_line_waits_unless_final() -> None:
    """Bytes after the last newline are not consumed while more may follow; at the end they are a line."""
    text = b"1:a\n2:b\n3:partial"
    waiting = _decode(text, final=False)
    assert waiting.consumed == 8
    assert waiting.batch.column("hash").to_pylist() == [1, 2]
    assert _decode(b"no newline yet", final=False).consumed == 0
    final = _decode(text, final=True)
    assert final.consumed == len(text)
    assert final.batch.column("value").to_pylist() == ["a", "b", "partial"]


BAD = [
    b"Add:12",  # non-numeric key
    b"no colon at all",
    b"-1:neg",
    b" 1:space",
    b":empty key",
    b"18446744073709551616:overflow",
    b"1:\xff\xfe not utf-8",
]


@pytest.mark.parametrize("line", BAD)
def test_malformed_line_error_names_file_and_offset(line: bytes) -> None:
    """Under the error policy a malformed line raises with the file, its byte offset and line number."""
    text = b"1:ok\n\n" + line + b"\n2:ok\n"
    with pytest.raises(DecodeError) as info:
        _decode(text, path="unaging.additional.hash_dic.slice_0", offset=1000, record_index=40)
    err = info.value
    assert err.path == "unaging.additional.hash_dic.slice_0"
    assert err.offset == 1000 + 6
    assert err.record_index == 40 + 2
    assert "<decimal u64>:<string>" in str(err)


@pytest.mark.parametrize("line", BAD)
def test_malformed_line_skip_counts(line: bytes) -> None:
    """Under the skip policy malformed lines are dropped and counted; good lines around them stay."""
    out = _decode(b"1:ok\n" + line + b"\n2:ok", on_invalid="skip")
    assert out.batch.to_pydict() == {"hash": [1, 2], "value": ["ok", "ok"]}
    assert (out.dropped, out.drop_reason) == (1, "malformed line")


def test_duplicates_are_all_kept_in_order() -> None:
    """decode keeps every duplicate row; resolving picks the last."""
    out = _decode(b"9:first\n9:second\n").batch
    assert out.column("value").to_pylist() == ["first", "second"]
    assert dictionaries.resolve(pa.array([9], pa.uint64()), out).to_pylist() == ["second"]


def test_type_info_dic_layout() -> None:
    """'<level>_<type>:<name>' with the name after the first colon."""
    raw = b"5000_98:FLIP_TASK\n20000_65541:aclopCompile:x\n"
    out = TYPE.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch
    assert out.to_pydict() == {
        "level": [5000, 20000],
        "type": [98, 65541],
        "name": ["FLIP_TASK", "aclopCompile:x"],
    }
    assert out.schema.field("level").type == pa.uint16()


@pytest.mark.parametrize("line", [b"5000:x", b"5000_98_1:x", b"65536_1:x", b"a_1:x", b"1_b:x", b"1_:x"])
def test_type_info_dic_bad_keys(line: bytes) -> None:
    """Keys need exactly one '_' between a u16 level and a u64 type."""
    out = TYPE.decode(np.frombuffer(b"1_2:ok\n" + line, np.uint8), DecodeContext(on_invalid="skip"))
    assert out.batch.column("name").to_pylist() == ["ok"]
    assert out.dropped == 1
    with pytest.raises(DecodeError, match="_<decimal u64>") as info:
        TYPE.decode(np.frombuffer(b"1_2:ok\n" + line, np.uint8), DecodeContext())
    assert info.value.offset == 7


def test_encode_rejects_line_breaks() -> None:
    """A name with a line break would split the entry, so encode refuses it."""
    with pytest.raises(ValueError, match="line break"):
        HASH.encode({"hash": np.array([1], np.uint64), "value": ["a\nb"]})


def test_resolve_unknown_ids_duplicates_and_nulls() -> None:
    """Known ids get their last name, unknown ids their decimal number, nulls stay null."""
    hashes = pa.table({"hash": pa.array([1, 2, 1], pa.uint64()), "value": ["old", "two", "new"]})
    ids = pa.array([1, 3, None, 2, 3, 2**64 - 1], pa.uint64())
    names = dictionaries.resolve(ids, hashes)
    assert isinstance(names, pa.DictionaryArray)
    assert names.to_pylist() == ["new", "3", None, "two", "3", "18446744073709551615"]
    assert sorted(names.dictionary.to_pylist()) == sorted(["new", "two", "3", "18446744073709551615"])


def test_resolve_with_record_batch_and_empty_inputs() -> None:
    """resolve takes a RecordBatch too, and empty ids or an empty dictionary."""
    empty = _decode(b"").batch
    assert dictionaries.resolve(pa.array([7], pa.uint64()), empty).to_pylist() == ["7"]
    batch = _decode(b"7:seven\n").batch
    assert dictionaries.resolve(pa.array([], pa.uint64()), batch).to_pylist() == []
    assert dictionaries.resolve(pa.array([7, 7], pa.uint64()), batch).to_pylist() == ["seven", "seven"]


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("aging.additional.hash_dic.slice_0", "hash_dic"),
        ("unaging.additional.hash_dic.slice_3", "hash_dic"),
        ("unaging.additional.type_info_dic.slice_0", "type_info_dic"),
        ("aging.additional.type_info_dic.slice_1", "type_info_dic"),
        ("unaging.additional.hash_dic.slice_0.done", None),
    ],
)
def test_file_names(name: str, family: str | None) -> None:
    """Both dictionaries under both prefixes; .done markers are not data."""
    found = codec_for_file(name)
    if family is None:
        assert found is None
    else:
        assert found is not None
        assert found[0].family == family
        assert found[0].record_size is None
