"""STARS/FFTS PMU codec (specs §2.5): context, block and V6 PMU layouts, ids, selection by traits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import codec_for_file, ffts_profile, get_codec
from profstream.codecs._base import DecodeContext, StreamTraits
from profstream.codecs._ids import reconstruct_ids
from tests.strategies import columns

COMMON = {
    "cnt": (np.uint8, 15),
    "stream_raw": (np.uint16, None),
    "task_raw": (np.uint16, None),
    "core_id": (np.uint8, None),
    "sub_block_id": (np.uint16, None),
    "block_id": (np.uint16, None),
    "total_cycle": (np.uint64, None),
    "start_syscnt": (np.uint64, None),
    "end_syscnt": (np.uint64, None),
}
SPEC = {
    **COMMON,
    "core_id": (np.uint8, 127),
    "core_type": (np.uint8, 1),
    "subtask_type": (np.uint8, None),
    "subtask_id": (np.uint16, None),
    "ffts_type": (np.uint8, 7),
    "ov_flag": (np.uint8, 1),
    **{name: (np.uint64, None) for name in ffts_profile.PMU},
}
SPEC_V6 = {
    **COMMON,
    "core_type": (np.uint8, 1),
    "ctx_type": (np.uint8, None),
    "mst": (np.uint8, 1),
    "mix": (np.uint8, 1),
    "ov_flag": (np.uint8, 1),
    **{name: (np.uint64, None) for name in ffts_profile.PMU_V6},
}


def with_func_types(spec: dict[str, Any], funcs: list[int]) -> st.SearchStrategy[dict[str, np.ndarray]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, np.ndarray]:
        cols = draw(columns(spec))
        cols["func_type"] = draw(hnp.arrays(np.uint8, len(cols["cnt"]), elements=st.sampled_from(funcs)))
        return cols

    return build()


def pmu_record(func: int, cnt: int = 0) -> bytearray:
    raw = bytearray(128)
    raw[0:2] = (func | cnt << 6).to_bytes(2, "little")
    raw[2:4] = b"\x12\x34"  # not a magic: never checked
    return raw


def put(raw: bytearray, offset: int, value: int, size: int) -> None:
    raw[offset : offset + size] = value.to_bytes(size, "little")


def decode(raw: bytes | bytearray, traits: StreamTraits | None = None, *, v6: bool = False) -> Any:
    fn = ffts_profile.decode_v6 if v6 else ffts_profile.decode
    return fn(np.frombuffer(bytes(raw), np.uint8), DecodeContext(traits=traits or StreamTraits(platform=5)))


@given(with_func_types(SPEC, [40, 41]), st.booleans())
def test_round_trip(cols: dict[str, np.ndarray], expand: bool) -> None:
    """decode(encode(x)) == x for context and block records, with type-specific fields masked."""
    traits = StreamTraits(platform=5, stream_expand=expand)
    raw = ffts_profile.encode(cols)
    assert len(raw) == 128 * len(cols["cnt"])
    out = decode(raw, traits)
    assert out.consumed == len(raw)
    context, block = cols["func_type"] == 40, cols["func_type"] == 41
    masks = {"ov_flag": context, **dict.fromkeys(("core_type", "core_id", "sub_block_id", "block_id"), block)}
    for name, values in cols.items():
        expected = np.where(masks[name], values, 0) if name in masks else values
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), expected, err_msg=name)
    stream, task = reconstruct_ids(cols["stream_raw"], cols["task_raw"], traits)
    np.testing.assert_array_equal(out.batch.column("stream_id").to_numpy(), stream)
    np.testing.assert_array_equal(out.batch.column("task_id").to_numpy(), task)
    again = ffts_profile.encode(dict(zip(out.batch.schema.names, out.batch.columns, strict=True)))
    assert decode(again, traits).batch.equals(out.batch)


@given(with_func_types(SPEC_V6, [41, 42]))
def test_round_trip_v6(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for V6 PMU records."""
    raw = ffts_profile.encode_v6(cols)
    out = decode(raw, StreamTraits(platform=15), v6=True)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)
    task = (cols["task_raw"].astype(np.uint32) << 16) | cols["stream_raw"]
    np.testing.assert_array_equal(out.batch.column("task_id").to_numpy(), task)


def test_context_pmu_layout() -> None:
    """Context PMU (40): ids 4/6, subtask+ov 16, ctx id 18, ffts 20, cycles 32, pmu 48, times 112."""
    raw = pmu_record(ffts_profile.CONTEXT_PMU, cnt=3)
    put(raw, 4, 5, 2)
    put(raw, 6, 300, 2)
    put(raw, 8, 0xFFFFFFFFFFFFFFFF, 8)  # reserved
    put(raw, 16, 1 << 10 | 6, 2)
    put(raw, 18, 12, 2)
    put(raw, 20, 4 << 13 | 0x33, 2)  # low byte would be core type/id on a block record
    put(raw, 28, 0xFFFFFFFF, 4)  # sub block / block on a block record, reserved here
    put(raw, 32, 123456, 8)
    for i in range(8):
        put(raw, 48 + 8 * i, 1000 + i, 8)
    put(raw, 112, 7000, 8)
    put(raw, 120, 7100, 8)
    rec = decode(raw).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"]) == (40, 3)
    assert (rec["stream_id"], rec["task_id"]) == (5, 300)
    assert (rec["subtask_type"], rec["ov_flag"], rec["subtask_id"], rec["ffts_type"]) == (6, 1, 12, 4)
    assert (rec["core_type"], rec["core_id"], rec["sub_block_id"], rec["block_id"]) == (0, 0, 0, 0)
    assert rec["total_cycle"] == 123456
    assert [rec[f"pmu_{i}"] for i in range(8)] == [1000 + i for i in range(8)]
    assert (rec["start_syscnt"], rec["end_syscnt"]) == (7000, 7100)


def test_block_pmu_layout() -> None:
    """Block PMU (41): core type/id byte 20, ffts type byte 21 bits 5-7, sub block 28, block 30."""
    raw = pmu_record(ffts_profile.BLOCK_PMU, cnt=9)
    put(raw, 4, 0x2123, 2)  # bit 13: low 12 bits of stream and task swapped (§2.0)
    put(raw, 6, 0x7456, 2)
    put(raw, 16, 1 << 10 | 7, 2)  # bit 10 is reserved on block records
    put(raw, 18, 3, 2)
    raw[20] = 25 << 1 | 1  # core id 25, AIV
    raw[21] = 5 << 5 | 0x1F
    put(raw, 28, 2, 2)
    put(raw, 30, 17, 2)
    put(raw, 32, 999, 8)
    put(raw, 48 + 8 * 7, 77, 8)
    put(raw, 120, 8000, 8)
    rec = decode(raw).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"]) == (41, 9)
    assert (rec["stream_id"], rec["task_id"]) == (0x456, 0x7123)
    assert (rec["stream_raw"], rec["task_raw"]) == (0x2123, 0x7456)
    assert (rec["subtask_type"], rec["ov_flag"], rec["subtask_id"], rec["ffts_type"]) == (7, 0, 3, 5)
    assert (rec["core_type"], rec["core_id"], rec["sub_block_id"], rec["block_id"]) == (1, 25, 2, 17)
    assert (rec["total_cycle"], rec["pmu_7"], rec["end_syscnt"]) == (999, 77, 8000)


def test_pmu_ids_use_sqe_type_zero() -> None:
    """With stream expand on, PMU ids always get the 0x8000 rule (the parsers pass SQE type 0)."""
    raw = pmu_record(ffts_profile.CONTEXT_PMU)
    raw[1] |= 3 << 2  # header bits 10-15 = 3 would exempt a STARS log record
    put(raw, 4, 0x8ABC, 2)
    put(raw, 6, 0x8123, 2)
    rec = decode(raw, StreamTraits(platform=5, stream_expand=True)).batch.to_pylist()[0]
    assert (rec["stream_id"], rec["task_id"]) == (0x0123, 0x8ABC)


@pytest.mark.parametrize("func", [ffts_profile.V6_PMU, ffts_profile.BLOCK_PMU])
def test_v6_pmu_layout(func: int) -> None:
    """V6 PMU (42 task, 41 block): cycles 8, ctx type 16, flags 17, core 20/21, blocks 24/26, 10 pmu 32."""
    raw = pmu_record(func, cnt=12)
    put(raw, 4, 0x03049102, 4)  # u16 stream 0x9102, u16 task 0x0304
    put(raw, 8, 4242, 8)
    raw[16] = 1
    raw[17] = 0b110  # mix, ov_flag, not main core
    raw[20] = 0xFF  # only bit 0 is core type
    raw[21] = 40
    put(raw, 24, 1, 2)
    put(raw, 26, 33, 2)
    for i in range(10):
        put(raw, 32 + 8 * i, 10 * i + 1, 8)
    put(raw, 112, 5, 8)
    put(raw, 120, 6, 8)
    rec = decode(raw, StreamTraits(platform=15), v6=True).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"]) == (func, 12)
    assert (rec["stream_id"], rec["task_id"]) == (0x9102, 0x03049102)
    assert (rec["total_cycle"], rec["ctx_type"]) == (4242, 1)
    assert (rec["mst"], rec["mix"], rec["ov_flag"]) == (0, 1, 1)
    assert (rec["core_type"], rec["core_id"], rec["sub_block_id"], rec["block_id"]) == (1, 40, 1, 33)
    assert [rec[f"pmu_{i}"] for i in range(10)] == [10 * i + 1 for i in range(10)]
    assert (rec["start_syscnt"], rec["end_syscnt"]) == (5, 6)


def test_bytes_2_3_are_not_checked_and_partial_record_is_kept() -> None:
    """No magic in PMU records; a trailing partial record is left for the next buffer."""
    raw = pmu_record(ffts_profile.CONTEXT_PMU) + pmu_record(ffts_profile.BLOCK_PMU)[:100]
    out = decode(raw)
    assert (out.batch.num_rows, out.consumed, out.dropped) == (1, 128, 0)


def test_sample_form_in_ffts_profile() -> None:
    """Sample-based ffts_profile uses the 96-byte sample record of §2.3 (timestamp at 80)."""
    codec = get_codec("ffts_profile_sample")
    raw = bytearray(96)
    raw[0] = 1
    put(raw, 80, 31337, 8)
    raw[89] = 30
    rec = codec.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch.to_pylist()[0]
    assert (rec["timestamp"], rec["core_id"]) == (31337, 30)
    assert get_codec("ffts_profile_sample_v6").record_size == 112


@pytest.mark.parametrize(
    ("traits", "family"),
    [
        (StreamTraits(platform=5), "ffts_profile"),
        (StreamTraits(), "ffts_profile"),
        (StreamTraits(platform=15), "ffts_profile_v6"),
        (StreamTraits(platform=16, stream_expand=True), "ffts_profile_v6"),
        (StreamTraits(platform=5, sample_based=True), "ffts_profile_sample"),
        (StreamTraits(platform=16, sample_based=True), "ffts_profile_sample_v6"),
        # msprof reads neither form when only the AI Vector cores were sampled
        (StreamTraits(platform=5, aiv_sample_based=True), None),
        (StreamTraits(platform=5, sample_based=True, aiv_sample_based=True), "ffts_profile_sample"),
    ],
)
def test_selection_by_traits(traits: StreamTraits, family: str | None) -> None:
    """codec_for_file picks the task-based / sample-based, V6 / non-V6 form from the traits."""
    found = codec_for_file("ffts_profile.data.2.slice_5", traits)
    if family is None:
        assert found is None
        return
    assert found is not None
    assert (found[0].family, found[1]["dev"], found[1]["slice"]) == (family, "2", "5")
    assert codec_for_file("ffts_profile.data.2.slice_5.done", traits) is None
