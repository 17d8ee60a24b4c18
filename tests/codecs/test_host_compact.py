"""Host compact record codecs (64 B): per-kind layouts, bit fields, memcpy layouts, policy, file names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs import codec_for_file, compact, get_codec
from profstream.codecs._base import DecodeContext
from profstream.errors import DecodeError
from tests.codecs.host_bytes import HOST_MAGIC, assert_header, decode_one, host_record, put, round_trip
from tests.strategies import columns

HEADER_SPEC = {
    "level": (np.uint16, None),
    "type": (np.uint32, None),
    "thread_id": (np.uint32, None),
    "data_len": (np.uint32, None),
    "timestamp": (np.uint64, None),
}
U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64


def _same(cols: dict[str, Any]) -> dict[str, Any]:
    return cols


def _task_track(cols: dict[str, Any]) -> dict[str, Any]:
    return {**cols, "task_id_raw": cols["task_id"].astype(U32) | (cols["batch_id"].astype(U32) << 16)}


def _node_basic(cols: dict[str, Any]) -> dict[str, Any]:
    return {**cols, "mix_block_dim": cols["block_dim"].astype(U32) * cols["mix_ratio"]}


def _memcpy(cols: dict[str, Any]) -> dict[str, Any]:
    # max_size 1..7 with direction 0 is read as the old layout (see compact's docstring)
    return {**cols, "max_size": cols["max_size"] | U64(8)}


def _bools(cols: dict[str, Any]) -> dict[str, Any]:
    return {**cols, "relay": cols["relay"].astype(bool), "retry": cols["retry"].astype(bool)}


TASK_TRACK_FIELDS = {
    "device_id": (U16, 0xFFF),
    "dev_type": (U8, 0xF),
    "stream_id": (U16, None),
    "task_id": (U16, None),
    "batch_id": (U16, None),
    "task_type": (U64, None),
    "kernel_name_hash": (U64, None),
    "num_blocks": (U16, None),
    "args_size": (U16, None),
    "ratio": (U8, 7),
    "sched_mode": (U8, 3),
}

PAYLOADS: dict[str, tuple[dict[str, tuple[Any, int | None]], Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "task_track": (TASK_TRACK_FIELDS, _task_track),
    # V2: the same columns, 32-bit stream ids and types
    "task_track_v2": ({**TASK_TRACK_FIELDS, "stream_id": (U32, None), "task_type": (U32, None)}, _task_track),
    "node_basic_info": (
        {
            "op_name_hash": (U64, None),
            "task_type": (U32, None),
            "op_type_hash": (U64, None),
            "block_dim": (U16, None),
            "mix_ratio": (U16, None),
            "op_flag": (U32, None),
            "op_state": (U8, None),
        },
        _node_basic,
    ),
    "node_attr_info": (
        {"op_name_hash": (U64, None), "attr_type": (U32, None), "attr_hash": (U64, None)},
        _same,
    ),
    "memcpy_info": ({"data_size": (U64, None), "max_size": (U64, None), "direction": (U16, None)}, _memcpy),
    "hccl_op_info": (
        {
            "relay": (U8, 1),
            "retry": (U8, 1),
            "data_type": (U8, None),
            "alg_type_hash": (U64, None),
            "count": (U64, None),
            "group_name_hash": (U64, None),
        },
        _bools,
    ),
    "capture_stream_info": (
        {
            "capture_status": (U16, None),
            "model_stream_id": (U16, None),
            "original_stream_id": (U16, None),
            "model_id": (U16, None),
            "device_id": (U16, None),
        },
        _same,
    ),
    "expand_stream_spec": ({"expand_status": (U8, None)}, _same),
    "dpu_track": (
        {
            "device_id": (U16, 0xFFF),
            "dev_type": (U8, 0xF),
            "stream_id": (U16, None),
            "task_id": (U32, None),
            "task_type": (U32, None),
            "start_time": (U64, None),
        },
        _same,
    ),
}


@pytest.mark.parametrize("family", sorted(PAYLOADS))
@given(data=st.data())
def test_round_trip(family: str, data: st.DataObject) -> None:
    """decode(encode(x)) == x for every compact kind, derived columns included."""
    spec, expect = PAYLOADS[family]
    cols = expect(data.draw(columns({**HEADER_SPEC, **spec})))
    codec = get_codec(family)
    out = round_trip(codec, cols)
    assert set(out) == set(cols)
    for name, values in cols.items():
        assert out[name] == values.tolist(), name


def test_schemas_put_header_first() -> None:
    """Every compact family starts with the shared header columns."""
    for family in PAYLOADS:
        assert get_codec(family).schema.names[:5] == list(HEADER_SPEC), family


def test_task_track_layout() -> None:
    """24 device word (id bits 0-11, type 12-15), 26 stream, 28 task u32, 32 type, 40 kernel, 48 extInfo."""
    raw = host_record(64)
    put(raw, 24, "HHI", (1 << 12) | 0x7AB, 513, (3 << 16) | 65000)
    put(raw, 32, "QQ", 98, 0x1122334455667788)
    put(raw, 48, "HHB", 40, 256, (2 << 3) | 5)  # numBlocks, argsSize, {ratio:3 = 5, schedMode:2 = 2}
    row = decode_one(get_codec("task_track"), raw)
    assert_header(row)
    assert (row["device_id"], row["dev_type"]) == (0x7AB, compact.DEV_TYPE_DPU)
    assert row["stream_id"] == 513
    assert (row["task_id"], row["batch_id"], row["task_id_raw"]) == (65000, 3, (3 << 16) | 65000)
    assert row["task_type"] == 98
    assert row["kernel_name_hash"] == 0x1122334455667788
    assert (row["num_blocks"], row["args_size"], row["ratio"], row["sched_mode"]) == (40, 256, 5, 2)


def test_task_track_v2_layout() -> None:
    """MsprofRuntimeTrackV2: 24 device word, 26 reserved, 28 stream u32, 32 task word, 36 type u32, 40
    kernel, 48 extInfo; the columns are task_track's."""
    raw = host_record(64)
    put(raw, 24, "HHIIIQ", (1 << 12) | 0x7AB, 0xFFFF, 70000, (3 << 16) | 65000, 98, 0x1122334455667788)
    put(raw, 48, "HHB", 40, 256, (2 << 3) | 5)
    row = decode_one(get_codec("task_track_v2"), raw)
    assert_header(row)
    assert (row["device_id"], row["dev_type"]) == (0x7AB, compact.DEV_TYPE_DPU)
    assert row["stream_id"] == 70000  # above a V1 stream id's 16 bits
    assert (row["task_id"], row["batch_id"]) == (65000, 3)
    assert row["task_id_raw"] == (3 << 16) | 65000  # the task id on V6 chips (batch id 0)
    assert row["task_type"] == 98
    assert row["kernel_name_hash"] == 0x1122334455667788
    assert (row["num_blocks"], row["args_size"], row["ratio"], row["sched_mode"]) == (40, 256, 5, 2)
    assert get_codec("task_track_v2").schema.names == get_codec("task_track").schema.names


def test_node_basic_info_layout() -> None:
    """pack(1): 24 name, 32 task type, 36 op type, 44 block word (dim | ratio << 16), 48 flag, 52 state."""
    raw = host_record(64)
    put(raw, 24, "QIQIIB", 0xAAAA, 4, 0xBBBB, (2 << 16) | 24, 0x5, 1)
    row = decode_one(get_codec("node_basic_info"), raw)
    assert_header(row)
    assert (row["op_name_hash"], row["op_type_hash"]) == (0xAAAA, 0xBBBB)
    assert compact.GE_TASK_TYPES[row["task_type"]] == "MIX_AIC"
    assert (row["block_dim"], row["mix_ratio"], row["mix_block_dim"]) == (24, 2, 48)
    assert (row["op_flag"], row["op_state"]) == (5, 1)


def test_node_attr_info_layout() -> None:
    """24 op name hash, 32 attr type, 36 attribute hash (unaligned)."""
    raw = host_record(64)
    put(raw, 24, "QIQ", 7, compact.OP_ATTR, 0xFEDCBA9876543210)
    row = decode_one(get_codec("node_attr_info"), raw)
    assert (row["op_name_hash"], row["attr_type"], row["attr_hash"]) == (7, 0, 0xFEDCBA9876543210)


def test_memcpy_info_new_layout() -> None:
    """Current header: 24 data size, 32 max size, 40 direction."""
    raw = host_record(64)
    put(raw, 24, "QQH", 1 << 20, 64 << 20, 2)
    row = decode_one(get_codec("memcpy_info"), raw)
    assert (row["data_size"], row["max_size"], row["direction"]) == (1 << 20, 64 << 20, 2)


def test_memcpy_info_old_layout() -> None:
    """Pre-2024-12 files: direction u16 at 32 and zeros after it read as direction, max size 0."""
    raw = host_record(64)
    put(raw, 24, "QH", 4096, 3)
    row = decode_one(get_codec("memcpy_info"), raw)
    assert (row["data_size"], row["max_size"], row["direction"]) == (4096, 0, 3)


def test_hccl_op_info_layout() -> None:
    """pack(1): 24 flags (relay bit 0, retry bit 1), 25 data type, 26 alg hash, 34 count, 42 group hash."""
    raw = host_record(64)
    put(raw, 24, "BBQQQ", 0b10, 4, 0xA1, 1 << 33, 0xC3)
    row = decode_one(get_codec("hccl_op_info"), raw)
    assert (row["relay"], row["retry"]) == (False, True)
    assert (row["data_type"], row["alg_type_hash"], row["count"], row["group_name_hash"]) == (
        4,
        0xA1,
        1 << 33,
        0xC3,
    )


def test_capture_stream_info_layout() -> None:
    """24 status, 26 model stream, 28 original stream, 30 model id, 32 device id (all u16)."""
    raw = host_record(64)
    put(raw, 24, "HHHHH", compact.CAPTURE_DESTROYED, 0xFFFF, 0xFFFF, 12, 0x0103)
    row = decode_one(get_codec("capture_stream_info"), raw)
    assert row["capture_status"] == 1
    assert (row["model_stream_id"], row["original_stream_id"], row["model_id"]) == (0xFFFF, 0xFFFF, 12)
    assert row["device_id"] == 0x0103


def test_expand_stream_spec_layout() -> None:
    """The expand status is the u8 at 24; the bytes after it are reserved."""
    raw = host_record(64)
    put(raw, 24, "B", compact.STREAM_EXPANDED)
    raw[25:64] = b"\xff" * 39
    row = decode_one(get_codec("expand_stream_spec"), raw)
    assert row["expand_status"] == 1
    assert set(row) == {"level", "type", "thread_id", "data_len", "timestamp", "expand_status"}


def test_dpu_track_layout() -> None:
    """24 device word, 26 stream, 28 task u32, 32 task type u32, 40 start time u64."""
    raw = host_record(64)
    put(raw, 24, "HHII", (1 << 12) | 5, 9, 0x12345678, 3)
    put(raw, 36, "I", 0xFFFFFFFF)  # reserved
    put(raw, 40, "Q", 987654321)
    row = decode_one(get_codec("dpu_track"), raw)
    assert (row["device_id"], row["dev_type"], row["stream_id"]) == (5, 1, 9)
    assert (row["task_id"], row["task_type"], row["start_time"]) == (0x12345678, 3, 987654321)


def test_runtime_track_layout() -> None:
    """Legacy track: 2 tag, 4 thread, 8 timestamp, 16 char[32] type, 48 task word, 52 stream."""
    raw = bytearray(64)
    put(raw, 0, "HHIQ", HOST_MAGIC, compact.RUNTIME_TRACK_TAG, 31, 555)
    raw[16:48] = b"KERNEL_AICORE\x00garbage-after-nul"[:32].ljust(32, b"\x00")
    put(raw, 48, "HHH", 700, 2, 1030)
    row = decode_one(get_codec("runtime_track"), raw)
    assert (row["data_tag"], row["thread_id"], row["timestamp"]) == (41, 31, 555)
    assert row["task_type"] == "KERNEL_AICORE"
    assert (row["task_id"], row["batch_id"], row["stream_id"]) == (700, 2, 1030)


def test_runtime_track_full_width_and_invalid_utf8_names() -> None:
    """A 32-byte name has no NUL; bytes that are not UTF-8 become '?'."""
    raw = bytearray(128)
    put(raw, 0, "H", HOST_MAGIC)
    put(raw, 64, "H", HOST_MAGIC)
    raw[16:48] = b"A" * 32
    raw[80:85] = b"ab\xffc\x00"
    rows = get_codec("runtime_track").decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch
    assert rows.column("task_type").to_pylist() == ["A" * 32, "ab?c"]


def test_runtime_track_round_trip() -> None:
    """Legacy task type names, task and batch ids survive encode/decode."""
    cols = {
        "task_type": ["KERNEL_AICORE", "", "X" * 32],
        "task_id": np.array([1, 2, 3], np.uint16),
        "batch_id": np.array([0, 65535, 7], np.uint16),
    }
    out = round_trip(get_codec("runtime_track"), cols)
    assert out["task_type"] == cols["task_type"]
    assert out["batch_id"] == [0, 65535, 7]


def test_bad_magic_error_names_file_and_offset() -> None:
    """Under the error policy a wrong magic raises with the file, byte offset and record index."""
    raw = host_record(64) + host_record(64, magic=0x5A5B)
    ctx = DecodeContext(path="aging.compact.task_track.slice_2", offset=6400, record_index=100)
    with pytest.raises(DecodeError) as info:
        get_codec("task_track").decode(np.frombuffer(bytes(raw), np.uint8), ctx)
    assert (info.value.path, info.value.offset, info.value.record_index) == (ctx.path, 6464, 101)
    assert "0x5a5b" in str(info.value)


def test_bad_magic_skip_counts() -> None:
    """Under the skip policy bad records are dropped and counted; the rest decode."""
    raw = host_record(64, magic=0) + host_record(64) + host_record(64, magic=0xFFFF)
    out = get_codec("node_basic_info").decode(
        np.frombuffer(bytes(raw), np.uint8), DecodeContext(on_invalid="skip")
    )
    assert (out.batch.num_rows, out.dropped, out.drop_reason) == (1, 2, "bad magic")


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = bytes(host_record(64) * 2) + b"\x5a" * 63
    out = get_codec("memcpy_info").decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert (out.batch.num_rows, out.consumed) == (2, 128)


KINDS = [
    "task_track",
    "task_track_v2",
    "node_basic_info",
    "node_attr_info",
    "memcpy_info",
    "hccl_op_info",
    "capture_stream_info",
    "dpu_track",
    "expand_stream_spec",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("aging", ["aging", "unaging"])
def test_file_names(kind: str, aging: str) -> None:
    """Every compact kind is found under both aging prefixes, with the aging and slice groups."""
    found = codec_for_file(f"{aging}.compact.{kind}.slice_7")
    assert found is not None
    assert found[0].family == kind
    assert (found[1]["aging"], found[1]["slice"]) == (aging, "7")


@pytest.mark.parametrize(
    ("name", "dev"),
    [
        ("Runtime.task_track.0.slice_3", "0"),
        ("runtime.task_track.5.slice_0", "5"),
        ("Runtime.host.runtime.1.slice_2", "1"),
        ("Runtime.runtime.3.4", "3"),
    ],
)
def test_legacy_task_track_names(name: str, dev: str) -> None:
    """Old runtime task-track names go to the legacy runtime_track layout, with their device."""
    found = codec_for_file(name)
    assert found is not None
    assert found[0].family == "runtime_track"
    assert found[1]["dev"] == dev


@pytest.mark.parametrize(
    "name",
    [
        "aging.compact.task_track.slice_0.done",
        "aging.compact.capture_stream_info_v2.slice_0",
        "stale.compact.task_track.slice_0",
        "R|untime.task_track.0.slice_0",
    ],
)
def test_names_that_are_not_compact(name: str) -> None:
    """Markers, unknown variants and msprof's '[r|R]' regex slip are not compact data."""
    found = codec_for_file(name)
    assert found is None or found[0].family not in {*KINDS, "runtime_track"}
