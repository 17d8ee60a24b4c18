"""ts_track codec: per-tag layouts, the bufSize walk, id rules, invalid headers, file names."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs import codec_for_file, ts_track
from profstream.codecs._base import DecodeContext, StreamTraits
from profstream.errors import DecodeError
from tests.strategies import uint_column

#: the tags each tag-specific column belongs to (spec §2.6).
COLUMN_TAGS = {
    "index_id": {10},
    "model_id": {10},
    "tag_id": {10},
    "task_status": {3, 11, 12},
    "task_type": {3, 12},
    "flip_num": {14},
    "block_num": {15},
    "thread_id": {3},
    "device_id": {3},
}
#: generated ranges: what every layout holding the column can store.
COLUMN_SPEC: dict[str, tuple[Any, int | None]] = {
    "mode": (np.uint8, 1),
    "syscnt": (np.uint64, None),
    "stream_id": (np.uint16, 2047),
    "task_id": (np.uint32, 0xFFFF),
    "index_id": (np.uint64, None),
    "model_id": (np.uint64, None),
    "tag_id": (np.uint16, None),
    "task_status": (np.uint16, 0xFF),
    "task_type": (np.uint16, None),
    "flip_num": (np.uint16, None),
    "block_num": (np.uint32, None),
    "thread_id": (np.uint32, None),
    "device_id": (np.uint32, None),
}


@st.composite
def ts_rows(
    draw: st.DrawFn, tags: tuple[int, ...], spec: dict[str, tuple[Any, int | None]]
) -> dict[str, Any]:
    """Columns of ``n`` records whose tags are drawn from ``tags``."""
    n = draw(st.integers(0, 40))
    cols: dict[str, Any] = {
        "tag": np.array(draw(st.lists(st.sampled_from(tags), min_size=n, max_size=n)), np.uint8)
    }
    cols.update({name: draw(uint_column(n, dtype, top)) for name, (dtype, top) in spec.items()})
    return cols


def expected_rows(cols: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows decode should give: tag-specific columns null on rows of other tags."""
    rows = []
    for i, tag in enumerate(cols["tag"].tolist()):
        row = {name: int(values[i]) for name, values in cols.items()}
        rows.append({k: (None if tag not in COLUMN_TAGS.get(k, {tag}) else v) for k, v in row.items()})
    return rows


def decoded_rows(raw: bytes, traits: StreamTraits | None = None) -> list[dict[str, Any]]:
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext(traits=traits or StreamTraits()))
    assert out.consumed == len(raw)
    assert out.dropped == 0
    return [{k: row[k] for k in ("tag", *COLUMN_SPEC)} for row in out.batch.to_pylist()]


@given(ts_rows((3, 10, 11, 12, 14, 15), COLUMN_SPEC))
def test_round_trip(cols: dict[str, Any]) -> None:
    """decode(encode(x)) == x for a mix of every decoded tag, 32- and 40-byte records alike."""
    raw = ts_track.encode(cols)
    assert len(raw) == sum(32 if tag == 3 else 40 for tag in cols["tag"].tolist())
    assert decoded_rows(raw) == expected_rows(cols)


@given(ts_rows((10, 11, 14), {**COLUMN_SPEC, "stream_id": (np.uint16, None), "task_id": (np.uint32, None)}))
def test_round_trip_v6(cols: dict[str, Any]) -> None:
    """On chip V6 step-trace ids are raw (u16 stream, u32 task); other tags keep their 11-bit streams."""
    narrow = cols["tag"] != 10
    cols["stream_id"] = np.where(narrow, cols["stream_id"] & 0x7FF, cols["stream_id"]).astype(np.uint16)
    cols["task_id"] = np.where(narrow, cols["task_id"] & 0xFFFF, cols["task_id"]).astype(np.uint32)
    raw = ts_track.encode(cols, v6=True)
    assert decoded_rows(raw, StreamTraits(platform=15)) == expected_rows(cols)


def put(raw: bytearray, offset: int, value: int, size: int) -> None:
    raw[offset : offset + size] = value.to_bytes(size, "little")


def header(tag: int, size: int, mode: int = 1) -> bytearray:
    """A record of ``size`` zero bytes with the 8-byte header of §2.6 filled in."""
    raw = bytearray(size)
    raw[0], raw[1] = mode, tag
    put(raw, 2, size, 2)
    return raw


def decode_one(raw: bytearray, traits: StreamTraits | None = None) -> dict[str, Any]:
    out = ts_track.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext(traits=traits or StreamTraits()))
    assert out.consumed == len(raw)
    assert out.batch.num_rows == 1
    row: dict[str, Any] = out.batch.to_pylist()[0]
    return row


def test_step_trace_layout() -> None:
    """Tag 10: ts 8, index 16, model 24, streamId:11 at 32, task 34, tagId 36."""
    raw = header(10, 40)
    put(raw, 8, 0x1122334455, 8)
    put(raw, 16, 7, 8)
    put(raw, 24, 3, 8)
    put(raw, 32, 0xF800 | 513, 2)  # the 5 reserved high bits are not part of the stream id
    put(raw, 34, 4242, 2)
    put(raw, 36, ts_track.STEP_END_TAG, 2)
    row = decode_one(raw)
    assert row["tag"] == ts_track.TAG_STEP_TRACE
    assert row["mode"] == 1
    assert (row["syscnt"], row["index_id"], row["model_id"]) == (0x1122334455, 7, 3)
    assert (row["stream_id"], row["task_id"], row["tag_id"]) == (513, 4242, 60001)
    assert row["flip_num"] is None
    assert row["task_status"] is None


def test_step_trace_v6_layout() -> None:
    """Tag 10 on chip V6: tagId 32, u16 streamId 34 (not masked), u32 taskId 36."""
    raw = header(10, 40)
    put(raw, 8, 99, 8)
    put(raw, 32, ts_track.FP_START_TAG, 2)
    put(raw, 34, 3000, 2)
    put(raw, 36, 0x00012345, 4)
    row = decode_one(raw, StreamTraits(platform=16))
    assert (row["tag_id"], row["stream_id"], row["task_id"]) == (2, 3000, 0x12345)


def test_ts_memcpy_layout() -> None:
    """Tag 11: ts 8, stream 16, task 18, u8 taskStatus 20."""
    raw = header(11, 40, mode=0)
    put(raw, 8, 5, 8)
    put(raw, 16, 2048 + 9, 2)
    put(raw, 18, 77, 2)
    raw[20] = 2
    row = decode_one(raw)
    assert (row["mode"], row["syscnt"], row["stream_id"], row["task_id"], row["task_status"]) == (
        0,
        5,
        9,
        77,
        2,
    )
    assert row["task_type"] is None


def test_task_type_layout() -> None:
    """Tag 12: ts 8, stream 16, task 18, u16 taskType 20, u8 taskStatus 22."""
    raw = header(12, 40)
    put(raw, 8, 6, 8)
    put(raw, 16, 10, 2)
    put(raw, 18, 11, 2)
    put(raw, 20, 0x0102, 2)
    raw[22] = 3
    row = decode_one(raw)
    assert (row["syscnt"], row["stream_id"], row["task_id"]) == (6, 10, 11)
    assert (row["task_type"], row["task_status"]) == (0x0102, 3)


def test_task_flip_layout() -> None:
    """Tag 14: ts 8, stream 16 (the whole u16, as msprof's TaskFlipBean reads it: a flip of an
    expanded stream keeps its id), flipNum 18, taskId 22 (20-21 reserved)."""
    raw = header(14, 40)
    put(raw, 8, 8, 8)
    put(raw, 16, 2048 + 12, 2)
    put(raw, 18, ts_track.FLIP_STREAM_DESTROYED, 2)
    put(raw, 20, 0xFFFF, 2)
    put(raw, 22, 13, 2)
    row = decode_one(raw)
    assert (row["syscnt"], row["stream_id"], row["flip_num"], row["task_id"]) == (8, 2060, 65535, 13)


def test_block_num_layout_and_stars_ids() -> None:
    """Tag 15: ts 8, raw stream 16, task 18, u32 blockNum 20; ids rebuilt by the §2.0 0x1000 rule."""
    raw = header(15, 40)
    put(raw, 8, 9, 8)
    put(raw, 16, 0x3005, 2)  # bit 12 set: task = (task & 0x1FFF) | (stream & 0xE000), stream % 2048
    put(raw, 18, 0x0123, 2)
    put(raw, 20, 0x00010020, 4)
    row = decode_one(raw)
    assert (row["stream_id"], row["task_id"], row["block_num"]) == (5, 0x2123, 0x10020)
    v6 = decode_one(raw, StreamTraits(platform=15))
    assert (v6["stream_id"], v6["task_id"]) == (0x3005, (0x0123 << 16) | 0x3005)


def test_timeline_layout() -> None:
    """Tag 3 (32 B): taskType 8, taskState 10, stream 12, task 14, ts 16, thread 24, deviceId 28; the
    stream id modulo 2048, as msprof's TimeLineData takes it (``Utils.get_stream_id``)."""
    raw = header(3, 32)
    put(raw, 8, 1, 2)
    put(raw, 10, ts_track.TIMELINE_AIC_END, 2)
    put(raw, 12, 4000, 2)
    put(raw, 14, 14, 2)
    put(raw, 16, 123456, 8)
    put(raw, 24, 777, 4)
    put(raw, 28, 2, 4)
    row = decode_one(raw)
    assert (row["task_type"], row["task_status"], row["stream_id"], row["task_id"]) == (1, 8, 4000 % 2048, 14)
    assert (row["syscnt"], row["thread_id"], row["device_id"]) == (123456, 777, 2)
    assert row["block_num"] is None


def stamped(tag: int, size: int, syscnt: int) -> bytearray:
    """A record with only its header and syscnt (at 8, or 16 for the timeline) set."""
    raw = header(tag, size)
    put(raw, 16 if tag == 3 else 8, syscnt, 8)
    return raw


def test_walk_mixed_sizes_in_order() -> None:
    """32- and 40-byte records are walked by bufSize, and rows keep stream order."""
    tags = [10] * 100 + [3] + [14] * 50 + [3, 3, 15, 3, 11] + [12] * 30
    raw = b"".join(stamped(tag, 32 if tag == 3 else 40, i) for i, tag in enumerate(tags))
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    assert out.batch.column("tag").to_pylist() == tags
    assert out.batch.column("syscnt").to_pylist() == list(range(len(tags)))


@pytest.mark.parametrize("cut", [3, 20, 39])
def test_straddling_record_is_not_consumed(cut: int) -> None:
    """A record (or header) cut by the buffer end is left for the next buffer."""
    raw = bytes(stamped(10, 40, 1) + stamped(3, 32, 2) + stamped(14, 40, 3)[:cut])
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert out.consumed == 72
    assert out.batch.column("syscnt").to_pylist() == [1, 2]


@pytest.mark.parametrize(("tag", "size"), [(10, 0), (10, 65535), (10, 32), (3, 40), (99, 4), (99, 4096)])
def test_bad_bufsize_error_names_file_and_offset(tag: int, size: int) -> None:
    """An absurd bufSize, or one that does not fit the tag, raises with file, byte offset and record index."""
    bad = header(tag, 40)
    put(bad, 2, size, 2)
    raw = bytes(stamped(10, 40, 1) + stamped(3, 32, 2) + bad)
    ctx = DecodeContext(path="ts_track.data.0.slice_0", offset=4000, record_index=100)
    with pytest.raises(DecodeError) as info:
        ts_track.decode(np.frombuffer(raw, np.uint8), ctx)
    assert info.value.path == "ts_track.data.0.slice_0"
    assert info.value.offset == 4072
    assert info.value.record_index == 102
    assert f"found {size}" in str(info.value)


def test_bad_bufsize_skip_resyncs_without_allocating() -> None:
    """Under skip a bufSize of 65535 counts one drop; decoding resumes at the next plausible header."""
    bad = stamped(10, 40, 0)
    put(bad, 2, 0xFFFF, 2)
    tail = [stamped(14, 40, 1), stamped(3, 32, 2), stamped(10, 40, 3)]
    raw = bytes(bad + b"".join(tail))
    ts_track.decode(
        np.frombuffer(raw, np.uint8), DecodeContext(on_invalid="skip")
    )  # lazy imports happen here
    tracemalloc.start()
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext(on_invalid="skip"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32_000  # far below the 64 KiB the bad bufSize announces
    assert out.dropped == 1
    assert out.drop_reason == "bad bufSize"
    assert out.consumed == len(raw)
    assert out.batch.column("syscnt").to_pylist() == [1, 2, 3]


def test_bad_bufsize_skip_without_plausible_header_keeps_last_bytes() -> None:
    """When no plausible header follows, all but the last 3 bytes (a possible header start) are consumed."""
    raw = bytes(stamped(10, 40, 1) + bytearray([1, 10, 0, 0]) + bytearray(30))
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext(on_invalid="skip", final=False))
    assert out.dropped == 1
    assert out.consumed == len(raw) - 3
    assert out.batch.column("syscnt").to_pylist() == [1]


def test_undocumented_tags_are_stepped_over_and_counted() -> None:
    """Tags without a documented layout are walked by bufSize and counted, even under the error policy."""
    raw = bytes(stamped(10, 40, 1) + header(7, 24) + header(4, 112) + header(13, 40) + stamped(3, 32, 2))
    out = ts_track.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    assert out.dropped == 3
    assert out.drop_reason == "tag without a documented layout"
    assert out.batch.column("syscnt").to_pylist() == [1, 2]


def test_encode_rejects_tags_without_layout() -> None:
    """encode refuses a tag it has no layout for instead of writing a guess."""
    with pytest.raises(ValueError, match="tag 7"):
        ts_track.encode({"tag": np.array([10, 7], np.uint8)})


@pytest.mark.parametrize(
    ("name", "family", "dev"),
    [
        ("ts_track.data.0.slice_0", "ts_track", "0"),
        ("ts_track.aiv_data.3.slice_12", "ts_track_aiv", "3"),
        ("ts_track.data.46.dev.profiler_default_tag.1.slice_0", "ts_track", "1"),
        ("ts_track.data.46.2.5", "ts_track", "2"),
        ("ts_track.data.0.slice_0.done", None, None),
    ],
)
def test_file_names(name: str, family: str | None, dev: str | None) -> None:
    """Current and legacy ts_track names are recognised; .done markers are not data."""
    found = codec_for_file(name)
    if family is None:
        assert found is None
    else:
        assert found is not None
        assert found[0].family == family
        assert found[0].record_size is None
        assert found[1]["dev"] == dev
