"""AI Core / AI Vector PMU codecs (specs §2.2, §2.3): task-based and sample-based layouts, names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import codec_for_file, get_codec
from profstream.codecs._base import Codec, DecodeContext, StreamTraits
from profstream.codecs.aicore import pmu_names
from tests.strategies import columns

TASK = {"cnt": (np.uint8, 15), "stream_id": (np.uint16, 2047), "task_id": (np.uint16, None)}
SAMPLE = {
    "mode": (np.uint8, None),
    "task_cyc": (np.uint64, None),
    "count_num": (np.uint8, None),
    "core_id": (np.uint8, None),
}


def put(raw: bytearray, offset: int, value: int, size: int = 8) -> None:
    raw[offset : offset + size] = value.to_bytes(size, "little", signed=value < 0)


def run(codec: Codec | str, raw: bytes | bytearray) -> Any:
    codec = get_codec(codec) if isinstance(codec, str) else codec
    return codec.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext())


def assert_round_trip(family: str, cols: dict[str, np.ndarray], size: int) -> None:
    codec = get_codec(family)
    raw = codec.encode(cols)
    assert len(raw) == size * len(cols["task_id" if "task_id" in cols else "mode"])
    out = run(codec, raw)
    assert (out.consumed, out.dropped) == (len(raw), 0)
    assert set(out.batch.schema.names) == set(cols)
    for name, values in cols.items():
        got = out.batch.column(name).to_numpy()
        assert got.dtype == values.dtype, name
        np.testing.assert_array_equal(got, values, err_msg=name)


@given(columns({**TASK, "total_cycle": (np.uint64, None), **{n: (np.uint64, None) for n in pmu_names(8)}}))
def test_round_trip_aicore(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for task-based AI Core records (unsigned counters)."""
    assert_round_trip("aicore", cols, 128)


@st.composite
def aiv_columns(draw: st.DrawFn) -> dict[str, np.ndarray]:
    cols = draw(columns(TASK))
    n = len(cols["cnt"])
    for name in ("total_cycle", *pmu_names(8)):
        cols[name] = draw(hnp.arrays(np.int64, n))
    return cols


@given(aiv_columns())
def test_round_trip_aiv(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for task-based AIV records, whose counters are signed."""
    assert_round_trip("aiv", cols, 128)


@st.composite
def sample_columns(draw: st.DrawFn, counters: int, time_field: str) -> dict[str, np.ndarray]:
    spec: dict[str, tuple[Any, int | None]] = {
        **SAMPLE,
        time_field: (np.uint64, None),
        **{n: (np.uint64, None) for n in pmu_names(counters)},
    }
    cols = draw(columns(spec))
    cols["mode"] = cols["mode"] | np.uint8(1)  # a zero mode ends the data
    return cols


@given(sample_columns(8, "timestamp"))
def test_round_trip_sample(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for 96-byte sample records."""
    assert_round_trip("aicore_sample", cols, 96)
    assert_round_trip("aiv_sample", cols, 96)


@given(sample_columns(10, "syscnt"))
def test_round_trip_sample_v6(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for 112-byte V6 sample records."""
    assert_round_trip("aicore_sample_v6", cols, 112)
    assert_round_trip("ffts_profile_sample_v6", cols, 112)


def task_record() -> bytearray:
    raw = bytearray(b"\xee" * 128)  # unknown bytes set, so a field read from them would show
    raw[0] = 9 << 4 | 0x7  # cnt 9; the low nibble is unused
    put(raw, 6, 0x1234, 2)
    put(raw, 96, 2048 + 13, 4)  # stream id % 2048
    return raw


def test_aicore_task_layout() -> None:
    """aicore: cnt byte 0 bits 4-7, task 6, total_cycle 16, pmu 32.., stream 96 (% 2048)."""
    raw = task_record()
    put(raw, 16, 0xFEDCBA9876543210)
    for i in range(8):
        put(raw, 32 + 8 * i, 2**63 + i)
    rec = run("aicore", raw).batch.to_pylist()[0]
    assert (rec["cnt"], rec["task_id"], rec["stream_id"]) == (9, 0x1234, 13)
    assert rec["total_cycle"] == 0xFEDCBA9876543210
    assert [rec[f"pmu_{i}"] for i in range(8)] == [2**63 + i for i in range(8)]


def test_aiv_task_layout() -> None:
    """aiv: same offsets as aicore, total_cycle and counters read as int64."""
    raw = task_record()
    put(raw, 16, 5000)
    for i in range(8):
        put(raw, 32 + 8 * i, -1 - i)
    rec = run("aiv", raw).batch.to_pylist()[0]
    assert (rec["cnt"], rec["task_id"], rec["stream_id"], rec["total_cycle"]) == (9, 0x1234, 13, 5000)
    assert [rec[f"pmu_{i}"] for i in range(8)] == [-1 - i for i in range(8)]


def test_sample_96_layout() -> None:
    """96-byte sample: mode 0, counters 8.., task_cyc 72, timestamp 80, count_num 88, core_id 89."""
    raw = bytearray(b"\xee" * 96)
    raw[0] = 1
    for i in range(8):
        put(raw, 8 + 8 * i, 100 + i)
    put(raw, 72, 777)
    put(raw, 80, 1_700_000_000_123)
    raw[88] = 6
    raw[89] = 31
    rec = run("aicore_sample", raw).batch.to_pylist()[0]
    assert (rec["mode"], rec["task_cyc"], rec["timestamp"]) == (1, 777, 1_700_000_000_123)
    assert (rec["count_num"], rec["core_id"]) == (6, 31)
    assert [rec[f"pmu_{i}"] for i in range(8)] == [100 + i for i in range(8)]


def test_sample_112_layout() -> None:
    """112-byte V6 sample: ten counters 8.., task_cyc 88, syscnt 96, count_num 104, core_id 105."""
    raw = bytearray(b"\xee" * 112)
    raw[0] = 2
    for i in range(10):
        put(raw, 8 + 8 * i, 200 + i)
    put(raw, 88, 888)
    put(raw, 96, 123456789)
    raw[104] = 10
    raw[105] = 7
    rec = run("aicore_sample_v6", raw).batch.to_pylist()[0]
    assert (rec["mode"], rec["task_cyc"], rec["syscnt"], rec["count_num"], rec["core_id"]) == (
        2,
        888,
        123456789,
        10,
        7,
    )
    assert [rec[f"pmu_{i}"] for i in range(10)] == [200 + i for i in range(10)]


def test_zero_mode_ends_sample_data() -> None:
    """Records from the first zero mode byte on are consumed, not returned, and counted."""
    cols = {"mode": np.array([1, 1, 0, 1], np.uint8), "core_id": np.arange(4, dtype=np.uint8)}
    raw = get_codec("aicore_sample").encode(cols) + b"\x01" * 50
    out = run("aicore_sample", raw)
    assert out.batch.column("core_id").to_pylist() == [0, 1]
    assert (out.consumed, out.dropped) == (4 * 96, 2)
    assert "zero mode" in out.drop_reason


@pytest.mark.parametrize(("family", "size"), [("aicore", 128), ("aiv", 128), ("aicore_sample", 96)])
def test_partial_record_is_not_consumed(family: str, size: int) -> None:
    """A trailing partial record is left for the next buffer."""
    codec = get_codec(family)
    raw = codec.encode({"mode": np.ones(2, np.uint8), "task_id": np.ones(2, np.uint16)}) + b"\x01" * 10
    out = run(codec, raw)
    assert (out.batch.num_rows, out.consumed) == (2, 2 * size)


@pytest.mark.parametrize(
    ("name", "traits", "family", "dev", "slice_"),
    [
        ("aicore.data.0.slice_2", StreamTraits(platform=1), "aicore", "0", "2"),
        ("aiVectorCore.data.1.slice_0", StreamTraits(platform=4), "aiv", "1", "0"),
        ("aicore.data.7.dev.profiler_default_tag.1.slice_3", StreamTraits(), "aicore", "1", "3"),
        ("aicore.data.7.2.3", StreamTraits(), "aicore", "2", "3"),
        ("aicore.data.0.slice_2", StreamTraits(platform=4, sample_based=True), "aicore_sample", "0", "2"),
        ("aiVectorCore.data.1.slice_0", StreamTraits(aiv_sample_based=True), "aiv_sample", "1", "0"),
        # each file by its own mode (sample.json ai_core_profiling_mode / aiv_profiling_mode)
        ("aiVectorCore.data.1.slice_0", StreamTraits(sample_based=True), "aiv", "1", "0"),
        ("aicore.data.1.slice_0", StreamTraits(aiv_sample_based=True), "aicore", "1", "0"),
        ("aiVectorCore.data.7.2.3", StreamTraits(), "aiv", "2", "3"),
        ("aicore.data.7.2.3", StreamTraits(sample_based=True), "aicore_sample", "2", "3"),
        ("aicore.data.0.slice_2", StreamTraits(platform=15, sample_based=True), "aicore_sample_v6", "0", "2"),
        (
            "aiVectorCore.data.0.slice_0",
            StreamTraits(platform=16, aiv_sample_based=True),
            "aiv_sample_v6",
            "0",
            "0",
        ),
        ("aicore.data.0.slice_2.done", StreamTraits(), None, None, None),
    ],
)
def test_file_names_and_selection(
    name: str, traits: StreamTraits, family: str | None, dev: str | None, slice_: str | None
) -> None:
    """Current and legacy names are recognised; task- vs sample-based and V6 come from the traits."""
    found = codec_for_file(name, traits)
    if family is None:
        assert found is None
        return
    assert found is not None
    assert (found[0].family, found[1]["dev"], found[1]["slice"]) == (family, dev, slice_)
    assert found[0].counter == ("cnt" if family in ("aicore", "aiv") else None)
