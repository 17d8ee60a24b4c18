"""The Thrift compact codec of Parquet footers: pyarrow's footers round-trip byte for byte."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.sinks import _parquet_footer as ft


def pyarrow_file(rows: int = 3_000) -> bytes:
    table = pa.table(
        {
            "name": pa.array([f"op{i % 9}" for i in range(rows)]).dictionary_encode(),
            "start_ns": pa.array(range(rows), pa.int64()),
            "ratio": pa.array([i / 7 for i in range(rows)]),
            "shape": pa.array([[i, i + 1] for i in range(rows)], pa.list_(pa.int32())),
            "flag": pa.array([i % 2 == 0 for i in range(rows)]),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1_000, compression="zstd")
    return sink.getvalue().to_pybytes()


def test_pyarrow_footers_decode_and_encode_to_the_same_bytes() -> None:
    data = pyarrow_file()
    body, metadata = ft.split_file(data)
    assert ft.footer(metadata) == data[4 + len(body) :]
    assert ft.field(metadata, ft.FILE_NUM_ROWS) == 3_000
    groups = ft.field(metadata, ft.FILE_ROW_GROUPS)[1]
    assert [ft.field(group, ft.GROUP_NUM_ROWS) for group in groups] == [1_000, 1_000, 1_000]
    assert ft.chunk_start(ft.field(groups[0], ft.GROUP_COLUMNS)[1][0]) == 4  # right after the magic


def test_moving_a_chunk_shifts_its_offsets_only() -> None:
    _, metadata = ft.split_file(pyarrow_file())
    chunk = ft.field(ft.field(metadata, ft.FILE_ROW_GROUPS)[1][1], ft.GROUP_COLUMNS)[1][0]
    moved = ft.moved_chunk(chunk, 1_000)
    assert ft.chunk_start(moved) == ft.chunk_start(chunk) + 1_000
    meta, moved_meta = ft.field(chunk, ft.CHUNK_META_DATA), ft.field(moved, ft.CHUNK_META_DATA)
    assert ft.field(moved_meta, ft.META_DATA_PAGE_OFFSET) == ft.field(meta, ft.META_DATA_PAGE_OFFSET) + 1_000
    unmoved = [f for f in meta if f[0] not in ft.META_OFFSETS]
    assert [f for f in moved_meta if f[0] not in ft.META_OFFSETS] == unmoved
    assert ft.field(moved, 2) == ft.field(chunk, 2) == 0  # the deprecated file_offset stays "none"


def test_bytes_that_are_not_a_footer_are_refused_with_where() -> None:
    data = pyarrow_file(10)
    with pytest.raises(ft.FooterError, match="starts and ends with"):
        ft.split_file(data[:-1])
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length : -8]
    with pytest.raises(ft.FooterError, match="ends at byte"):
        ft.decode(footer[:-5])
    with pytest.raises(ft.FooterError, match="bytes after its struct"):
        ft.decode(footer + b"\x00")


def _values(depth: int) -> st.SearchStrategy[tuple[int, Any]]:
    """(type code, value) pairs of every compact type; collections and structs nest ``depth`` deep."""
    scalars: list[st.SearchStrategy[tuple[int, Any]]] = [
        st.tuples(st.just(ft.BOOL_TRUE), st.booleans()),
        st.tuples(st.just(ft.BYTE), st.integers(0, 255)),
        st.tuples(st.just(ft.I16), st.integers(-(2**15), 2**15 - 1)),
        st.tuples(st.just(ft.I32), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just(ft.I64), st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just(ft.DOUBLE), st.floats(allow_nan=False)),
        st.tuples(st.just(ft.BINARY), st.binary(max_size=40)),
    ]
    if depth == 0:
        return st.one_of(scalars)
    inner = _values(depth - 1)

    def collection(kind: int) -> st.SearchStrategy[tuple[int, Any]]:
        return inner.flatmap(
            lambda first: st.tuples(
                st.just(kind),
                st.tuples(st.just(first[0]), st.lists(st.just(first[1]), max_size=20)),
            )
        )

    structs = st.tuples(st.just(ft.STRUCT), _structs(depth - 1))
    maps = st.tuples(inner, inner).flatmap(
        lambda kv: st.tuples(
            st.just(ft.MAP),
            st.tuples(
                st.just(kv[0][0]), st.just(kv[1][0]), st.lists(st.just((kv[0][1], kv[1][1])), min_size=1)
            ),
        )
    )
    return st.one_of([*scalars, collection(ft.LIST), collection(ft.SET), maps, structs])


def _structs(depth: int) -> st.SearchStrategy[ft.Struct]:
    fields = st.lists(st.tuples(st.integers(1, 40), _values(depth)), max_size=6, unique_by=lambda f: f[0])
    return fields.map(lambda items: [(fid, kind, value) for fid, (kind, value) in sorted(items)])


@given(_structs(2))
def test_any_struct_survives_encoding(fields: ft.Struct) -> None:
    assert ft.decode(ft.encode(fields)) == fields
