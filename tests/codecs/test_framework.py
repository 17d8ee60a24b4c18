"""torch_npu FRAMEWORK codecs: every §1.5 layout generation built by hand, round trips, bad input, names."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import codec_for_file, framework, get_codec
from profstream.codecs._base import DecodeContext, Decoded
from profstream.codecs._tlv import Generation, TlvLayout
from profstream.codecs.framework import MASTER, V5_0_RC3, V6_0_RC1, V6_0_RC3, FixedLayout
from profstream.errors import DecodeError

TLV_LAYOUTS = (
    framework.OP_RANGE,
    framework.OP_MARK,
    framework.MEMORY_USAGE,
    framework.PYTHON_TRACER_HASH,
    framework.PARAM_TENSOR_INFO,
    framework.PYTHON_FUNC_CALL,
    framework.PYTHON_MODULE_CALL,
)
GENERATIONS = [
    pytest.param(layout, gen, id=f"{layout.family}-{gen.name}")
    for layout in TLV_LAYOUTS
    for gen in layout.generations
]
TEXT = st.text(st.characters(codec="utf-8"), max_size=30)


def tlv(kind: int, value: bytes) -> bytes:
    """One TLV element built by hand: u16 type, u32 length (little-endian), value."""
    return struct.pack("<HI", kind, len(value)) + value


def fields(*pairs: tuple[int, str]) -> bytes:
    return b"".join(tlv(kind, text.encode()) for kind, text in pairs)


def decode(layout: TlvLayout | FixedLayout, raw: bytes, **ctx: Any) -> Decoded:
    return layout.decode(np.frombuffer(raw, np.uint8), DecodeContext(**ctx))


def rows(layout: TlvLayout | FixedLayout, raw: bytes) -> list[dict[str, Any]]:
    out = decode(layout, raw)
    assert out.consumed == len(raw)
    assert out.dropped == 0
    return out.batch.to_pylist()


# --------------------------------------------------------------------------- torch.op_range

OP_RANGE_FIXED = (-5, 10, 42, 1001, 11, 12, 13)  # start, end, sequence, pid, start/end/forward tid


def test_op_range_v5_0_rc3_layout() -> None:
    """v2.1.0-5.0.rc3/6.0.rc1: <3q4Q? (57 B, no scope), ids 3 name .. 8 flops."""
    value = struct.pack("<3q4Q?", *OP_RANGE_FIXED, True) + fields(
        (3, "aten::mm"),
        (4, "float;float"),
        (5, "2,3;3,4"),
        (6, "a.py(1): f"),
        (7, "nn.Module: Net"),
        (8, "flops:12"),
    )
    [row] = rows(framework.OP_RANGE, tlv(1, value))
    assert row == {
        "start_ns": -5,
        "end_ns": 10,
        "sequence_number": 42,
        "process_id": 1001,
        "start_thread_id": 11,
        "end_thread_id": 12,
        "forward_thread_id": 13,
        "scope": None,
        "is_async": True,
        "name": "aten::mm",
        "input_dtypes": "float;float",
        "input_shapes": "2,3;3,4",
        "input_tensors": None,
        "input_tensor_lists": None,
        "input_scalars": None,
        "call_stack": "a.py(1): f",
        "module_hierarchy": "nn.Module: Net",
        "extra_args": "flops:12",
    }


def test_op_range_v6_0_rc3_layout() -> None:
    """v2.1.0-6.0.rc3: <3q4QB? (58 B, scope), ids 3 name, 4 dtypes, 5 shapes, 6 tensors, 7 scalars, 8 stack,
    9 hierarchy, 10 flops."""
    value = struct.pack("<3q4QB?", *OP_RANGE_FIXED, 1, False) + fields(
        (3, "n"), (4, "d"), (5, "s"), (6, "t"), (7, "sc"), (8, "st"), (9, "h"), (10, "f")
    )
    [row] = rows(framework.OP_RANGE, tlv(1, value))
    assert (row["scope"], row["is_async"], row["forward_thread_id"]) == (1, False, 13)
    texts = {name: row[name] for name in framework.OP_RANGE.texts}
    assert texts == {
        "name": "n",
        "input_dtypes": "d",
        "input_shapes": "s",
        "input_tensors": "t",
        "input_tensor_lists": None,
        "input_scalars": "sc",
        "call_stack": "st",
        "module_hierarchy": "h",
        "extra_args": "f",
    }


def test_op_range_master_layout() -> None:
    """master (v2.3.1-6.0.0+): <3q4QB?, ids 2 name .. 10 extra args, record type 1."""
    value = struct.pack("<3q4QB?", *OP_RANGE_FIXED, 2, True) + fields(
        (2, "n"), (3, "d"), (4, "s"), (5, "t"), (6, "tl"), (7, "sc"), (8, "st"), (9, "h"), (10, "e")
    )
    [row] = rows(framework.OP_RANGE, tlv(1, value))
    assert (row["start_ns"], row["scope"], row["is_async"]) == (-5, 2, True)
    assert [row[name] for name in framework.OP_RANGE.texts] == [
        "n",
        "d",
        "s",
        "t",
        "tl",
        "sc",
        "st",
        "h",
        "e",
    ]


def test_op_range_name_only_records_tell_rc3_from_master() -> None:
    """58-byte records naming ops in field 3 are v2.1.0-6.0.rc3 (in master field 3 holds dtypes)."""
    value = struct.pack("<3q4QB?", *OP_RANGE_FIXED, 0, False) + fields((3, "aten::add"))
    [row] = rows(framework.OP_RANGE, tlv(1, value))
    assert (row["name"], row["input_dtypes"]) == ("aten::add", None)


# --------------------------------------------------------------------------- torch.op_mark


@pytest.mark.parametrize(("name_id", "record_type"), [(2, 1), (1, 2)], ids=["v5_0_rc3", "master"])
def test_op_mark_layouts(name_id: int, record_type: int) -> None:
    """<q4Q (40 B): time, category, correlation id, tid, pid; the name is field 2 (old) or 1 (master)."""
    value = struct.pack("<q4Q", 123456789, framework.DEQUEUE_END, 77, 5, 6) + fields((name_id, "aten::add"))
    assert rows(framework.OP_MARK, tlv(record_type, value)) == [
        {
            "time_ns": 123456789,
            "category": 3,
            "correlation_id": 77,
            "thread_id": 5,
            "process_id": 6,
            "name": "aten::add",
        }
    ]


# --------------------------------------------------------------------------- torch.memory_usage

MEMORY_COMMON = (0x7F00, 999, -4096, 1 << 40, 1 << 41)  # ptr, time, alloc size, total allocated, reserved


@pytest.mark.parametrize(
    ("fmt", "tail", "expected"),
    [
        pytest.param(
            "<5qbB2Q",
            (20, 200, 31, 32),
            {"device_index": 200, "total_active": None, "stream_ptr": None, "data_type": None},
            id="58B-v5_0_rc3",
        ),
        pytest.param(
            "<7qb2B2Q",
            (5000, 3, 20, 3, framework.FREE, 31, 32),
            {
                "total_active": 5000,
                "stream_ptr": 3,
                "device_index": 3,
                "data_type": 1,
                "allocator_type": None,
            },
            id="75B-v6_0_rc1",
        ),
        pytest.param(
            "<7q2b2B2Q",
            (5000, -1, 20, -1, framework.BLOCK_FREE, framework.EXTERNAL_ALLOCATOR, 31, 32),
            {
                "stream_ptr": -1,
                "device_index": -1,
                "data_type": 2,
                "allocator_type": 1,
                "component_type": None,
            },
            id="76B-v6_0_rc3",
        ),
        pytest.param(
            "<7q2b3B2Q",
            (5000, 9, 20, 7, framework.WORKSPACE_ALLOCATOR, framework.MALLOC, 0, 31, 32),
            {"device_index": 7, "component_type": 1, "data_type": 0, "allocator_type": 0},
            id="77B-master",
        ),
    ],
)
def test_memory_usage_layouts(fmt: str, tail: tuple[int, ...], expected: dict[str, Any]) -> None:
    """Every memory_usage fixed part (58/75/76/77 B) decodes onto one schema; missing columns are null."""
    value = struct.pack(fmt, *MEMORY_COMMON, *tail)
    assert len(value) == struct.calcsize(fmt)
    [row] = rows(framework.MEMORY_USAGE, tlv(3, value))
    assert (row["ptr"], row["time_ns"], row["alloc_size"]) == (0x7F00, 999, -4096)
    assert (row["total_allocated"], row["total_reserved"]) == (1 << 40, 1 << 41)
    assert row["device_type"] == framework.NPU_DEVICE_TYPE
    assert (row["thread_id"], row["process_id"]) == (31, 32)
    assert {name: row[name] for name in expected} == expected


def test_memory_usage_unknown_size_is_invalid() -> None:
    """A memory value of none of the known sizes is an invalid record (error names the offset)."""
    good = tlv(3, struct.pack("<7q2b3B2Q", *MEMORY_COMMON, 1, 2, 20, 0, 0, 0, 0, 3, 4))
    raw = good + tlv(3, b"\x00" * 80)
    with pytest.raises(DecodeError) as info:
        decode(framework.MEMORY_USAGE, raw, path="torch.memory_usage")
    assert info.value.offset == len(good)
    assert "77-byte value" in str(info.value)
    assert decode(framework.MEMORY_USAGE, raw, on_invalid="skip").dropped == 1


# --------------------------------------------------------------------------- Python tracer, params


@pytest.mark.parametrize(("value_id", "record_type"), [(2, 1), (1, 4)], ids=["v6_0_rc3", "master"])
def test_python_tracer_hash_layouts(value_id: int, record_type: int) -> None:
    """<Q hash key + the function/module string in field 2 (v2.1.0-6.0.rc3) or 1 (master)."""
    raw = tlv(record_type, struct.pack("<Q", 2**64 - 1) + fields((value_id, "x.py(12): forward")))
    assert rows(framework.PYTHON_TRACER_HASH, raw) == [{"key_hash": 2**64 - 1, "value": "x.py(12): forward"}]


@pytest.mark.parametrize(("module_id", "optimizer_id"), [(2, 3), (1, 2)], ids=["v6_0_rc3", "master"])
def test_param_tensor_info_layouts(module_id: int, optimizer_id: int) -> None:
    """<Q key + module params (field 2 old, 1 master) or optimizer params (3 old, 2 master)."""
    raw = tlv(5, struct.pack("<Q", 1) + fields((module_id, "w)t)g}b)t)"))) + tlv(
        5, struct.pack("<Q", 2) + fields((optimizer_id, "t)g)exp_avg>t]}"))
    )
    assert rows(framework.PARAM_TENSOR_INFO, raw) == [
        {"key": 1, "module_params": "w)t)g}b)t)", "optimizer_params": None},
        {"key": 2, "module_params": None, "optimizer_params": "t)g)exp_avg>t]}"},
    ]


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("layer.weight)0x5;0x7;float;4;2,2;2,1;20;0)}bias)0x6;0x8;float;4;2;1;20;0)", "module_params"),
        (
            "0x5;0x7;float;4;2,2;2,1;20;0)0x9;;float;4;2,2;2,1;20;0)exp_avg>0x1;0x2;float;4;2;1;20;0]",
            "optimizer_params",
        ),
        ("", "optimizer_params"),
    ],
    ids=["module-v6_0_rc3", "optimizer-master", "empty-current"],
)
def test_param_tensor_info_field_2_only(text: str, column: str) -> None:
    """Only field-2 records: a name before the first ')' means module params (old), tensor metadata
    optimizer params (master); all-empty values read as the current layout."""
    raw = tlv(5, struct.pack("<Q", 1) + fields((2, ""))) + tlv(5, struct.pack("<Q", 2) + fields((2, text)))
    [_, row] = rows(framework.PARAM_TENSOR_INFO, raw)
    assert row[column] == text
    other = {"module_params", "optimizer_params"} - {column}
    assert row[other.pop()] is None


def test_python_func_call_layout() -> None:
    """v2.1.0-6.0.rc1 torch.python_func_call: <3QB (25 B) start, tid, pid, trace tag + field 2 name."""
    raw = tlv(1, struct.pack("<3QB", 7, 8, 9, 1) + fields((2, "forward")))
    assert rows(framework.PYTHON_FUNC_CALL, raw) == [
        {"start_ns": 7, "thread_id": 8, "process_id": 9, "trace_tag": 1, "name": "forward"}
    ]


def test_python_module_call_layout() -> None:
    """v2.1.0-6.0.rc1 torch.python_module_call: <3Q (24 B) idx, tid, pid + field 2 uid, 3 name."""
    raw = tlv(1, struct.pack("<3Q", 4, 8, 9) + fields((2, "nn.Module_0"), (3, "Linear")))
    assert rows(framework.PYTHON_MODULE_CALL, raw) == [
        {"idx": 4, "thread_id": 8, "process_id": 9, "module_uid": "nn.Module_0", "module_name": "Linear"}
    ]


def test_python_tracer_func_layout() -> None:
    """<4QB (33 B): ts, tid, pid, hash key, tag; no TLV framing."""
    raw = struct.pack("<4QB", 100, 2, 3, 2**63, framework.C_RETURN) + struct.pack("<4QB", 101, 2, 3, 5, 0)
    assert rows(framework.PYTHON_TRACER_FUNC, raw) == [
        {"ts": 100, "thread_id": 2, "process_id": 3, "key_hash": 2**63, "tag": 3},
        {"ts": 101, "thread_id": 2, "process_id": 3, "key_hash": 5, "tag": 0},
    ]


def test_gc_record_layout() -> None:
    """<3Q (24 B): pid, start, end."""
    raw = struct.pack("<3Q", 1234, 50, 80)
    assert rows(framework.GC_RECORD, raw) == [{"process_id": 1234, "start_ns": 50, "end_ns": 80}]


@pytest.mark.parametrize(
    "layout", [framework.PYTHON_TRACER_FUNC, framework.GC_RECORD], ids=lambda x: x.family
)
def test_fixed_size_partial_chunk(layout: FixedLayout) -> None:
    """A trailing partial chunk is carried before the end, an error at the end, or dropped and counted."""
    size = layout.dtype.itemsize
    raw = bytes(range(size)) * 2 + b"\x01" * 7
    assert decode(layout, raw, final=False).consumed == 2 * size
    with pytest.raises(DecodeError) as info:
        decode(layout, raw, path="torch.x", offset=10, record_index=3)
    assert (info.value.offset, info.value.record_index) == (10 + 2 * size, 5)
    assert f"{size}-byte record" in str(info.value)
    out = decode(layout, raw, on_invalid="skip")
    assert (out.batch.num_rows, out.consumed, out.dropped) == (2, len(raw), 1)


# --------------------------------------------------------------------------- round trips


#: param texts as the writer shapes them (name first vs tensor metadata first), which detection reads.
SHAPED_TEXT = {
    "module_params": st.builds("{}){}".format, st.text("abc.", min_size=1), TEXT),
    "optimizer_params": st.builds("0x5;{}".format, TEXT),
}


@st.composite
def generation_columns(draw: st.DrawFn, gen: Generation) -> dict[str, Any]:
    """Random columns for one generation: full-range numbers, unicode text, nulls where optional."""
    n = draw(st.integers(0, 25))
    cols: dict[str, Any] = {name: draw(hnp.arrays(gen.fixed[name], n)) for name in gen.fixed.names or ()}
    for kind, name in gen.fields.items():
        text = SHAPED_TEXT.get(name, TEXT)
        cols[name] = draw(
            st.lists(text if kind in gen.required else st.none() | text, min_size=n, max_size=n)
        )
    return cols


@pytest.mark.parametrize(("layout", "gen"), GENERATIONS)
@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_round_trip_every_generation(layout: TlvLayout, gen: Generation, data: st.DataObject) -> None:
    """decode(encode(x, generation)) == x; columns the generation lacks are null; one schema for all."""
    cols = data.draw(generation_columns(gen))
    n = len(next(iter(cols.values()))) if cols else 0
    out = decode(layout, layout.encode(cols, generation=gen.name))
    assert out.batch.schema == get_codec(layout.family).schema
    assert out.batch.num_rows == n
    for name in layout.numbers:
        got = out.batch.column(name)
        if name in cols:
            np.testing.assert_array_equal(got.to_numpy(zero_copy_only=False), cols[name], err_msg=name)
        else:
            assert got.null_count == n, name
    for name in layout.texts:
        got = out.batch.column(name)
        assert got.to_pylist() == cols.get(name, [None] * n), name


@pytest.mark.parametrize(
    "layout", [framework.PYTHON_TRACER_FUNC, framework.GC_RECORD], ids=lambda x: x.family
)
@settings(deadline=None)
@given(data=st.data())
def test_round_trip_fixed_size(layout: FixedLayout, data: st.DataObject) -> None:
    """decode(encode(x)) == x for the fixed-size files."""
    n = data.draw(st.integers(0, 40))
    cols = {name: data.draw(hnp.arrays(layout.dtype[name], n)) for name in layout.dtype.names or ()}
    raw = layout.encode(cols)
    assert len(raw) == n * layout.dtype.itemsize
    out = decode(layout, raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def test_encode_writes_the_current_layout_by_default() -> None:
    """Default encode is master: 58-byte op_range with name in field 2, 77-byte memory, record types 1-5."""
    raw = framework.OP_RANGE.encode({"name": ["aten::add"], "scope": [1]})
    kind, length = struct.unpack_from("<HI", raw)
    assert (kind, length) == (1, 58 + 6 + 9)
    assert struct.unpack_from("<HI", raw, 6 + 58) == (2, 9)
    mem = framework.MEMORY_USAGE.encode({"ptr": [1]})
    assert struct.unpack_from("<HI", mem) == (3, 77)
    assert struct.unpack_from("<H", framework.OP_MARK.encode({"name": ["x"]}))[0] == 2
    assert struct.unpack_from("<H", framework.PYTHON_TRACER_HASH.encode({"value": ["x"]}))[0] == 4
    assert struct.unpack_from("<H", framework.PARAM_TENSOR_INFO.encode({"module_params": ["x"]}))[0] == 5


def test_generation_names() -> None:
    """Each file lists the generations of §1.5, oldest first, ending with the current writer's."""
    names = {layout.family: [gen.name for gen in layout.generations] for layout in TLV_LAYOUTS}
    assert names == {
        "torch_op_range": [V5_0_RC3, V6_0_RC3, MASTER],
        "torch_op_mark": [V5_0_RC3, MASTER],
        "torch_memory_usage": [V5_0_RC3, V6_0_RC1, V6_0_RC3, MASTER],
        "torch_python_tracer_hash": [V6_0_RC3, MASTER],
        "torch_param_tensor_info": [V6_0_RC3, MASTER],
        "torch_python_func_call": [V6_0_RC1],
        "torch_python_module_call": [V6_0_RC1],
    }


# --------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("torch.op_range", "torch_op_range"),
        ("torch.op_mark", "torch_op_mark"),
        ("torch.memory_usage", "torch_memory_usage"),
        ("torch.python_tracer_func", "torch_python_tracer_func"),
        ("torch.python_tracer_hash", "torch_python_tracer_hash"),
        ("torch.param_tensor_info", "torch_param_tensor_info"),
        ("torch.gc_record", "torch_gc_record"),
        ("torch.python_func_call", "torch_python_func_call"),
        ("torch.python_module_call", "torch_python_module_call"),
        ("torch.op_range.done", None),
        ("xtorch.op_mark", None),
    ],
)
def test_file_names(name: str, family: str | None) -> None:
    """FRAMEWORK files are named exactly by tag (matched by prefix); markers and other tags are not."""
    found = codec_for_file(name)
    assert (found[0].family if found else None) == family
    if found:
        assert found[0].side == "framework"
