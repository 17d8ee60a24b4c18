"""Host additional record codecs (256 B): per-kind layouts, list columns, count limits, policy, file names."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import additional, codec_for_file, get_codec
from profstream.codecs._base import DecodeContext, OnInvalid
from profstream.errors import DecodeError
from tests.codecs.host_bytes import assert_header, decode_one, host_record, put, round_trip
from tests.strategies import columns, uint_column

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
HEADER_SPEC = {
    "level": (U16, None),
    "type": (U32, None),
    "thread_id": (U32, None),
    "data_len": (U32, None),
    "timestamp": (U64, None),
}
SCALARS: dict[str, dict[str, tuple[Any, int | None]]] = {
    "tensor_info": {"op_name_hash": (U64, None), "tensor_num": (U32, 5)},
    "context_id_info": {"op_name_hash": (U64, None)},
    "graph_id_map": {"model_name_hash": (U64, None), "graph_id": (U32, None), "model_id": (U32, None)},
    "fusion_op_info": {
        "op_name_hash": (U64, None),
        **{f"{k}_mem_size": (U64, None) for k in ("input", "output", "weight", "workspace", "total")},
    },
    "hccl_info": {
        **{name: (U64, None) for name in ("item_hash", "ccl_tag_hash", "group_name_hash", "notify_id")},
        **{name: (U64, None) for name in ("src_addr", "dst_addr", "data_size")},
        **{
            name: (U32, None)
            for name in (
                *("local_rank", "remote_rank", "rank_size", "work_flow_mode", "plane_id", "ctx_id", "stage"),
                *("role", "op_type", "data_type", "link_type", "transport_type", "rdma_type"),
            )
        },
    },
    "multi_thread": {},
    "task_memory_info": {
        "addr": (U64, None),
        "node_id_hash": (U64, None),
        "total_allocate_memory": (U64, None),
        "total_reserve_memory": (U64, None),
        "device_id": (U32, None),
        "device_type": (U32, None),
    },
    "static_op_mem": {
        "op_name_hash": (U64, None),
        "life_start": (U64, None),
        "life_end": (U64, 2**32 - 3),  # 2**32 - 2 is rewritten on decode
        "total_allocate_memory": (U64, None),
        "dyn_op_name_hash": (U64, None),
        "graph_id": (U32, None),
    },
    "memory_application": {
        **{name: (U64, None) for name in ("node_id_hash", "ptr", "memory_size", "total_memory_size")},
        "used_memory_size": (U64, None),
        "device_type": (U8, None),
        "device_id": (U8, None),
    },
    "logic_stream_info": {"logic_stream_id": (U32, None)},
}
LISTS = {"context_id_info": ("ctx_ids", U32, 55), "fusion_op_info": ("fusion_op_hashes", U64, 8)}
LISTS["multi_thread"] = ("thread_ids", U32, 25)
LISTS["logic_stream_info"] = ("physic_stream_ids", U32, 56)


def _lists(data: st.DataObject, n: int, dtype: Any, most: int) -> list[list[int]]:
    top = int(np.iinfo(dtype).max)
    return data.draw(st.lists(st.lists(st.integers(0, top), max_size=most), min_size=n, max_size=n))


@pytest.mark.parametrize("family", sorted(SCALARS))
@given(data=st.data())
def test_round_trip(family: str, data: st.DataObject) -> None:
    """decode(encode(x)) == x for every additional kind, list and fixed-size-list columns included."""
    cols: dict[str, Any] = data.draw(columns({**HEADER_SPEC, **SCALARS[family]}))
    n = len(cols["level"])
    if family in LISTS:
        name, dtype, most = LISTS[family]
        cols[name] = _lists(data, n, dtype, most)
    if family == "tensor_info":
        for name, dtype, shape in [
            ("tensor_type", U32, (5,)),
            ("format", U8, (5,)),
            ("sub_format", U16, (5,)),
            ("data_type", U32, (5,)),
            ("shape", U32, (5, 8)),
        ]:
            cols[name] = data.draw(hnp.arrays(dtype, (n, *shape)))
    if family == "hccl_info":
        cols["duration_estimated"] = data.draw(hnp.arrays(np.float64, n, elements=st.floats(allow_nan=False)))
    if family in {"task_memory_info", "static_op_mem"}:
        cols["size"] = data.draw(hnp.arrays(np.int64, n))
    out = round_trip(get_codec(family), cols)
    assert set(out) == set(cols)
    for name, values in cols.items():
        expected = values.tolist() if isinstance(values, np.ndarray) else values
        assert out[name] == expected, name


def test_tensor_info_layout() -> None:
    """24 op name, 32 tensor num, 36 + 44k: type, format (bits 0-7 / 8-23), data type, shape[8]."""
    raw = host_record(256)
    put(raw, 24, "QI", 0x99, 2)
    put(raw, 36, "III8I", additional.TENSOR_INPUT, (29 << 8) | 2, 1, 8, 3, 224, 224, 0, 0, 0, 0)
    put(raw, 36 + 44, "III8I", additional.TENSOR_OUTPUT, 0xFF00_0000 | 29, 12, *range(1, 9))
    row = decode_one(get_codec("tensor_info"), raw)
    assert_header(row)
    assert (row["op_name_hash"], row["tensor_num"]) == (0x99, 2)
    assert row["tensor_type"] == [0, 1, 0, 0, 0]
    assert row["format"] == [2, 29, 0, 0, 0]
    assert row["sub_format"] == [29, 0, 0, 0, 0]  # bits 24-31 are not part of the sub-format
    assert row["data_type"] == [1, 12, 0, 0, 0]
    assert row["shape"][:2] == [[8, 3, 224, 224, 0, 0, 0, 0], list(range(1, 9))]


def test_tensor_info_columns_are_fixed_size_lists() -> None:
    """Tensor slots are FixedSizeList<5>, shapes FixedSizeList<FixedSizeList<u32, 8>, 5>."""
    schema = get_codec("tensor_info").schema
    assert schema.field("tensor_type").type == pa.list_(pa.uint32(), 5)
    assert schema.field("format").type == pa.list_(pa.uint8(), 5)
    assert schema.field("shape").type == pa.list_(pa.list_(pa.uint32(), 8), 5)


def test_context_id_info_layout() -> None:
    """24 op name, 32 ctxIdNum, 36 ctxIds[55]: only the first ctxIdNum ids are listed."""
    raw = host_record(256)
    put(raw, 24, "QI", 5, 3)
    put(raw, 36, "4I", 10, 11, 12, 99)
    row = decode_one(get_codec("context_id_info"), raw)
    assert (row["op_name_hash"], row["ctx_ids"]) == (5, [10, 11, 12])


def test_graph_id_map_layout() -> None:
    """24 model name hash, 32 graph id, 36 model id."""
    raw = host_record(256)
    put(raw, 24, "QII", 0xABCDEF, 7, 3)
    row = decode_one(get_codec("graph_id_map"), raw)
    assert (row["model_name_hash"], row["graph_id"], row["model_id"]) == (0xABCDEF, 7, 3)


def test_fusion_op_info_layout() -> None:
    """pack(1): 32 count, 36..68 unaligned u64 sizes, 76 fused op hashes (first count of 8)."""
    raw = host_record(256)
    put(raw, 24, "QI5Q", 1, 2, 100, 200, 300, 400, 1000)
    put(raw, 76, "3Q", 0x1111111111111111, 0x2222, 0x3333)
    row = decode_one(get_codec("fusion_op_info"), raw)
    sizes = [row[f"{k}_mem_size"] for k in ("input", "output", "weight", "workspace", "total")]
    assert sizes == [100, 200, 300, 400, 1000]
    assert row["fusion_op_hashes"] == [0x1111111111111111, 0x2222]


def test_hccl_info_layout() -> None:
    """pack(4) MsprofHcclInfo offsets, the f64 duration at 88 and the enums at 120-136."""
    raw = host_record(256)
    put(raw, 24, "3Q6IQ2Id3Q5I", 1, 2, 3, 0, 1, 8, 2, 4, 6, 77, 5, 1, 12.5, 0xA, 0xB, 4096, 0, 3, 1, 1, 0)
    row = decode_one(get_codec("hccl_info"), raw)
    assert (row["item_hash"], row["ccl_tag_hash"], row["group_name_hash"]) == (1, 2, 3)
    assert [row[k] for k in ("local_rank", "remote_rank", "rank_size", "work_flow_mode")] == [0, 1, 8, 2]
    assert (row["plane_id"], row["ctx_id"], row["notify_id"], row["stage"]) == (4, 6, 77, 5)
    assert additional.HCCL_ROLES[row["role"]] == "src"
    assert row["duration_estimated"] == 12.5
    assert (row["src_addr"], row["dst_addr"], row["data_size"]) == (0xA, 0xB, 4096)
    assert additional.HCCL_OP_TYPES[row["op_type"]] == "sum"
    assert additional.HCCL_DATA_TYPES[row["data_type"]] == "FP16"
    assert additional.HCCL_LINK_TYPES[row["link_type"]] == "HCCS"
    assert additional.HCCL_TRANSPORT_TYPES[row["transport_type"]] == "RDMA"
    assert additional.HCCL_RDMA_TYPES[row["rdma_type"]] == "RDMASendNotify"


def test_multi_thread_layout() -> None:
    """24 threadNum, 28 threadId[25]."""
    raw = host_record(256)
    put(raw, 24, "I2I", 2, 1001, 1002)
    assert decode_one(get_codec("multi_thread"), raw)["thread_ids"] == [1001, 1002]


def test_logic_stream_info_layout() -> None:
    """24 logicStreamId, 28 physicStreamNum, 32 physicStreamId[56]: the ids past the count are not read
    (GeLogicStreamInfoBean takes data[8:8 + physicStreamNum] of ``HHIIIQII56I``)."""
    raw = host_record(256)
    put(raw, 24, "6I", 1, 2, 120, 121, 122, 123)
    row = decode_one(get_codec("logic_stream_info"), raw)
    assert (row["logic_stream_id"], row["physic_stream_ids"]) == (1, [120, 121])
    assert struct.calcsize("<HHIIIQII56I") == 256


def test_task_memory_info_layout() -> None:
    """24 addr, 32 signed size (negative = release), 40 node hash, 48/56 totals, 64 device id, 68 type."""
    raw = host_record(256)
    put(raw, 24, "QqQQQII", 0x7F00_0000_1000, -4096, 0x55, 1 << 30, 1 << 31, 6, 1)
    row = decode_one(get_codec("task_memory_info"), raw)
    assert (row["addr"], row["size"], row["node_id_hash"]) == (0x7F00_0000_1000, -4096, 0x55)
    assert (row["total_allocate_memory"], row["total_reserve_memory"]) == (1 << 30, 1 << 31)
    assert (row["device_id"], row["device_type"]) == (6, 1)


@pytest.mark.parametrize(
    ("life_end", "expected"), [(4294967294, 4294967295), (17, 17), (4294967295, 4294967295)]
)
def test_static_op_mem_layout(life_end: int, expected: int) -> None:
    """24 size, 32 op, 40 life start, 48 life end (4294967294 -> 4294967295), 56 total, 64 dyn, 72 graph."""
    raw = host_record(256)
    put(raw, 24, "qQQQQQI", 512, 0x66, 3, life_end, 1 << 20, 0, 9)
    row = decode_one(get_codec("static_op_mem"), raw)
    assert (row["size"], row["op_name_hash"], row["life_start"], row["life_end"]) == (512, 0x66, 3, expected)
    assert (row["total_allocate_memory"], row["dyn_op_name_hash"], row["graph_id"]) == (1 << 20, 0, 9)


def test_memory_application_is_256_byte_framed() -> None:
    """Fields at 24..65 of each 256-byte record; the second record starts at 256, not 66."""
    raw = host_record(256) + host_record(256)
    put(raw, 24, "5QBB", 0x10, 0xBEEF, 64, 1 << 30, 1 << 29, 1, 3)
    put(raw, 256 + 24, "Q", 0x20)
    rows = get_codec("memory_application").decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch
    first = rows.to_pylist()[0]
    assert (first["node_id_hash"], first["ptr"], first["memory_size"]) == (0x10, 0xBEEF, 64)
    assert (first["total_memory_size"], first["used_memory_size"]) == (1 << 30, 1 << 29)
    assert (first["device_type"], first["device_id"]) == (1, 3)
    assert rows.column("node_id_hash").to_pylist() == [0x10, 0x20]


ABSURD = [("tensor_info", 32, 6, "tensor_num <= 5")]
#: count fields msprof's C++ cuts to their array (ParserAdditionalInfoAdapter): family, offset, array, list
CUT = [
    ("context_id_info", 32, 55, "ctx_ids", "ctx_id_num"),
    ("fusion_op_info", 32, 8, "fusion_op_hashes", "fusion_op_num"),
    ("multi_thread", 24, 25, "thread_ids", "thread_num"),
    ("logic_stream_info", 28, 56, "physic_stream_ids", "physic_stream_num"),
]


@pytest.mark.parametrize(("family", "offset", "count", "expected"), ABSURD)
def test_absurd_count_raises(family: str, offset: int, count: int, expected: str) -> None:
    """A count beyond its fixed array is an invalid record: the error names file, offset and limit."""
    raw = host_record(256) + host_record(256)
    put(raw, 256 + offset, "I", count)
    ctx = DecodeContext(path=f"aging.additional.{family}.slice_0", offset=512, record_index=2)
    with pytest.raises(DecodeError) as info:
        get_codec(family).decode(np.frombuffer(bytes(raw), np.uint8), ctx)
    assert (info.value.path, info.value.offset, info.value.record_index) == (ctx.path, 768, 3)
    assert expected in str(info.value)


@pytest.mark.parametrize(("family", "offset", "count", "expected"), ABSURD)
def test_absurd_count_skip_counts(family: str, offset: int, count: int, expected: str) -> None:
    """Under the skip policy records with absurd counts are dropped and counted with the reason."""
    raw = host_record(256) + host_record(256) + host_record(256, magic=0)
    put(raw, offset, "I", count)
    out = get_codec(family).decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext(on_invalid="skip"))
    assert (out.batch.num_rows, out.dropped) == (1, 2)
    assert out.drop_reason == f"bad magic; {expected.replace('<=', '>')}"


@pytest.mark.parametrize("on_invalid", ["error", "skip"])
@pytest.mark.parametrize(("family", "offset", "width", "values", "count"), CUT)
def test_count_past_the_array_is_cut(
    family: str, offset: int, width: int, values: str, count: str, *, on_invalid: OnInvalid
) -> None:
    """A context id, fusion op or thread count past its fixed array keeps the record with the whole
    array, as msprof's C++ adapter copies it, under either policy; the cut is counted and said."""
    raw = host_record(256) + host_record(256)
    put(raw, 256 + offset, "I", 0xFFFFFFFF)
    out = get_codec(family).decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext(on_invalid=on_invalid))
    assert (out.batch.num_rows, out.dropped, out.replaced) == (2, 0, 1)
    assert out.replace_reason == f"{count} above {width}, cut to {width}"
    assert [len(v) for v in out.batch.column(values).to_pylist()] == [0, width]


def test_bad_magic_error_names_file_and_offset() -> None:
    """Under the error policy a wrong magic raises with the file, byte offset and record index."""
    raw = host_record(256, magic=0x0102)
    with pytest.raises(DecodeError) as info:
        get_codec("hccl_info").decode(
            np.frombuffer(bytes(raw), np.uint8), DecodeContext(path="p", offset=256)
        )
    assert (info.value.path, info.value.offset, info.value.record_index) == ("p", 256, 0)
    assert "0x102" in str(info.value)


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = bytes(host_record(256)) + b"\x5a\x5a" * 20
    out = get_codec("graph_id_map").decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert (out.batch.num_rows, out.consumed) == (1, 256)


def test_encode_rejects_overlong_lists() -> None:
    """A list longer than its record array cannot be encoded."""
    with pytest.raises(ValueError, match="at most 25"):
        get_codec("multi_thread").encode({"thread_ids": [list(range(26))]})


@given(st.data())
def test_list_columns_accept_sliced_arrow_input(data: st.DataObject) -> None:
    """encode() reads sliced Arrow list arrays at their offset."""
    n = data.draw(st.integers(2, 10))
    lists = _lists(data, n, U32, 55)
    whole = pa.array(lists, pa.list_(pa.uint32()))
    codec = get_codec("context_id_info")
    out = round_trip(codec, {"op_name_hash": data.draw(uint_column(n - 1, U64)), "ctx_ids": whole.slice(1)})
    assert out["ctx_ids"] == lists[1:]


KINDS = {
    "tensor_info": "tensor_info",
    "context_id_info": "context_id_info",
    "graph_id_map": "graph_id_map",
    "fusion_op_info": "fusion_op_info",
    "hccl_info": "hccl_info",
    "Multi_Thread": "multi_thread",
    "task_memory_info": "task_memory_info",
    "static_op_mem": "static_op_mem",
    "memory_application": "memory_application",
    "logic_stream_info": "logic_stream_info",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("aging", ["aging", "unaging"])
def test_file_names(kind: str, aging: str) -> None:
    """Every additional kind is found under both prefixes; the family is the kind in snake_case."""
    found = codec_for_file(f"{aging}.additional.{kind}.slice_0")
    assert found is not None
    assert found[0].family == KINDS[kind]
    assert (found[1]["aging"], found[1]["slice"]) == (aging, "0")


@pytest.mark.parametrize(
    "name", ["unaging.additional.multi_thread.slice_0", "unaging.additional.msproftx.slice_0"]
)
def test_names_that_are_not_these_kinds(name: str) -> None:
    """File kinds match exactly (case included); undecoded kinds are not claimed."""
    found = codec_for_file(name)
    assert found is None or found[0].family not in set(KINDS.values())
