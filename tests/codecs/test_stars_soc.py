"""STARS SoC log codec (specs §2.4): ACSQ and FFTS+ layouts, V6 form, ids, magic policy, names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import codec_for_file, stars_soc
from profstream.codecs._base import DecodeContext, StreamTraits
from profstream.codecs._ids import reconstruct_ids, unique_ids
from profstream.errors import DecodeError
from tests.strategies import columns

MAGIC = (0x6BD3).to_bytes(2, "little")
SPEC = {
    "cnt": (np.uint8, 15),
    "sqe_type": (np.uint8, 63),
    "stream_raw": (np.uint16, None),
    "task_raw": (np.uint16, None),
    "syscnt": (np.uint64, None),
    "acc_id": (np.uint8, 63),
    "acsq_id": (np.uint8, 127),
    "subtask_type": (np.uint8, None),
    "subtask_id": (np.uint16, None),
    "ffts_type": (np.uint8, 7),
    "thread_id": (np.uint16, None),
}
FUNC_TYPES = [0, 1, 34, 35, 24, 25, 36, 37, 22, 2, 63]


@st.composite
def records(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """Encode() input: any field values, func types drawn from parsed and unparsed ones."""
    cols = draw(columns(SPEC))
    n = len(cols["cnt"])
    cols["func_type"] = draw(hnp.arrays(np.uint8, n, elements=st.sampled_from(FUNC_TYPES)))
    return cols


def header(func: int, cnt: int = 0, sqe: int = 0) -> bytes:
    return (func | cnt << 6 | sqe << 10).to_bytes(2, "little")


def decode(raw: bytes | bytearray, ctx: DecodeContext | None = None, *, v6: bool = False) -> Any:
    fn = stars_soc.decode_v6 if v6 else stars_soc.decode
    return fn(np.frombuffer(bytes(raw), np.uint8), ctx or DecodeContext())


def check_round_trip(cols: dict[str, np.ndarray], v6: bool, traits: StreamTraits) -> None:
    enc = stars_soc.encode_v6 if v6 else stars_soc.encode
    raw = enc(cols)
    assert len(raw) == (32 if v6 else 64) * len(cols["cnt"])
    out = decode(raw, DecodeContext(traits=traits), v6=v6)
    assert out.consumed == len(raw)
    got = {name: out.batch.column(name).to_numpy() for name in out.batch.schema.names}
    func = cols["func_type"]
    acsq = func <= 1
    ffts = np.isin(func, (34, 35)) & (not v6)
    for name in ("func_type", "cnt", "sqe_type", "stream_raw", "task_raw", "syscnt"):
        np.testing.assert_array_equal(got[name], cols[name], err_msg=name)
    for name, applies in [("acc_id", acsq), ("acsq_id", acsq)] + [
        (name, ffts) for name in ("subtask_type", "subtask_id", "ffts_type", "thread_id")
    ]:
        np.testing.assert_array_equal(got[name], np.where(applies, cols[name], 0), err_msg=name)
    if v6:
        stream, task = unique_ids(cols["stream_raw"], cols["task_raw"])
    else:
        stream, task = reconstruct_ids(cols["stream_raw"], cols["task_raw"], traits, cols["sqe_type"])
    fusion = np.isin(func, (22, 23))
    whole = cols["task_raw"].astype(np.uint32) << 16 | cols["stream_raw"]
    np.testing.assert_array_equal(got["stream_id"], np.where(acsq | ffts, stream, 0))
    np.testing.assert_array_equal(got["task_id"], np.where(acsq | ffts, task, np.where(fusion, whole, 0)))
    again = decode(enc(got), DecodeContext(traits=traits), v6=v6).batch
    assert again.equals(out.batch)


@given(records(), st.booleans())
def test_round_trip(cols: dict[str, np.ndarray], expand: bool) -> None:
    """decode(encode(x)) keeps every applicable field and re-encodes to the same batch (64-byte form)."""
    check_round_trip(cols, v6=False, traits=StreamTraits(platform=5, stream_expand=expand))


@given(records())
def test_round_trip_v6(cols: dict[str, np.ndarray]) -> None:
    """The same for the 32-byte V6 form, whose ids are the unique id."""
    check_round_trip(cols, v6=True, traits=StreamTraits(platform=15))


def test_acsq_start_layout() -> None:
    """ACSQ start: header bits, stream 4, task 6, syscnt 8, acc_id/acsq_id in the u16 at 16."""
    raw = bytearray(64)
    raw[0:2] = header(stars_soc.ACSQ_START, cnt=5, sqe=2)
    raw[2:4] = MAGIC
    raw[4:6] = (7).to_bytes(2, "little")
    raw[6:8] = (0x0123).to_bytes(2, "little")
    raw[8:16] = (0x0102030405060708).to_bytes(8, "little")
    raw[16:18] = (0xE000 | 0x45 << 6 | 5).to_bytes(
        2, "little"
    )  # bits 13-15 are outside the 7 valid acsq bits
    raw[18:24] = b"\xff" * 6  # FFTS+ words: must not leak into an ACSQ row
    rec = decode(raw).batch.to_pylist()[0]
    assert rec == {
        "func_type": 0,
        "cnt": 5,
        "sqe_type": 2,
        "stream_raw": 7,
        "task_raw": 0x0123,
        "stream_id": 7,
        "task_id": 0x0123,
        "syscnt": 0x0102030405060708,
        "acc_id": 5,
        "acsq_id": 0x45,
        "subtask_type": 0,
        "subtask_id": 0,
        "ffts_type": 0,
        "thread_id": 0,
    }


def test_acsq_end_layout_with_packed_ids() -> None:
    """ACSQ end: funcType 1; bit 12 of the raw stream packs the task id (§2.0)."""
    raw = bytearray(64)
    raw[0:2] = header(stars_soc.ACSQ_END, cnt=15, sqe=0x3F)
    raw[2:4] = MAGIC
    raw[4:6] = (0x5009).to_bytes(2, "little")
    raw[6:8] = (0x2ABC).to_bytes(2, "little")
    raw[8:16] = (99).to_bytes(8, "little")
    rec = decode(raw, DecodeContext(traits=StreamTraits(platform=5))).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"], rec["sqe_type"]) == (1, 15, 63)
    assert (rec["stream_id"], rec["task_id"]) == (9, 0x4ABC)
    assert (rec["stream_raw"], rec["task_raw"], rec["syscnt"]) == (0x5009, 0x2ABC, 99)


@pytest.mark.parametrize("func", [stars_soc.FFTS_LOG_START, stars_soc.FFTS_LOG_END])
def test_ffts_plus_layout(func: int) -> None:
    """FFTS+ start/end: subtask type 16 (bits 0-7), subtask id 18, ffts type 20 (bits 13-15), thread 22."""
    raw = bytearray(64)
    raw[0:2] = header(func, cnt=3, sqe=0)
    raw[2:4] = MAGIC
    raw[4:6] = (3).to_bytes(2, "little")
    raw[6:8] = (10).to_bytes(2, "little")
    raw[8:16] = (123456789).to_bytes(8, "little")
    raw[16:18] = (0x0A06).to_bytes(2, "little")  # subtask type 6 (MIX_AIC), high byte not part of it
    raw[18:20] = (17).to_bytes(2, "little")
    raw[20:22] = (4 << 13 | 0x0123).to_bytes(2, "little")  # ffts type 4 (FFTS+), low bits not part of it
    raw[22:24] = (2).to_bytes(2, "little")
    rec = decode(raw).batch.to_pylist()[0]
    assert rec["func_type"] == func
    assert (rec["stream_id"], rec["task_id"], rec["syscnt"]) == (3, 10, 123456789)
    assert (rec["subtask_type"], rec["subtask_id"], rec["ffts_type"], rec["thread_id"]) == (6, 17, 4, 2)
    assert (rec["acc_id"], rec["acsq_id"]) == (0, 0)
    assert stars_soc.SUBTASK_TYPE_NAMES[rec["subtask_type"]] == "MIX_AIC"
    assert stars_soc.FFTS_TYPE_NAMES[rec["ffts_type"]] == "FFTS+"


def test_v6_acsq_layout() -> None:
    """V6 ACSQ (32 B): the u32 at 4 is the unique task id (task << 16 | stream), acc/acsq at 16."""
    raw = bytearray(32)
    raw[0:2] = header(stars_soc.ACSQ_END, cnt=2, sqe=1)
    raw[2:4] = MAGIC
    raw[4:8] = (0x03049102).to_bytes(4, "little")  # u16 stream 0x9102 at 4, u16 task 0x0304 at 6
    raw[8:16] = (555).to_bytes(8, "little")
    raw[16:18] = (9 << 6 | 33).to_bytes(2, "little")
    rec = decode(raw, v6=True).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"], rec["sqe_type"]) == (1, 2, 1)
    assert (rec["stream_id"], rec["task_id"]) == (0x9102, 0x03049102)
    assert (rec["stream_raw"], rec["task_raw"]) == (0x9102, 0x0304)
    assert (rec["syscnt"], rec["acc_id"], rec["acsq_id"]) == (555, 33, 9)


def test_v6_has_no_ffts_fields() -> None:
    """On V6 funcType 34 is not an FFTS+ log: sub-task columns and ids stay 0."""
    raw = bytearray(32)
    raw[0:2] = header(stars_soc.FFTS_LOG_START)
    raw[2:4] = MAGIC
    raw[4:8] = (0x00010002).to_bytes(4, "little")
    raw[16:24] = b"\xff" * 8
    rec = decode(raw, v6=True).batch.to_pylist()[0]
    assert (rec["subtask_type"], rec["subtask_id"], rec["ffts_type"], rec["thread_id"]) == (0, 0, 0, 0)
    assert (rec["stream_id"], rec["task_id"], rec["stream_raw"]) == (0, 0, 2)


@pytest.mark.parametrize(
    ("func", "v6", "traits"),
    [
        (stars_soc.FUSION_TASK_START, True, StreamTraits(platform=15)),
        (stars_soc.FUSION_TASK_END, True, StreamTraits(platform=16)),
        (stars_soc.FUSION_TASK_END, False, StreamTraits(platform=5)),
    ],
)
def test_fusion_task_ids(func: int, v6: bool, traits: StreamTraits) -> None:
    """Fusion task log ("HHLQHHLLL"): msprof's task id is the whole u32 at 4, its stream id 0.

    The raw stream word 0x3005 has bit 12 set, which would repack an ACSQ id on chip 5
    (§2.0); the fusion id ignores those rules, as FusionTaskBean does.
    """
    raw = bytearray(32 if v6 else 64)
    raw[0:2] = header(func, cnt=4, sqe=2)
    raw[2:4] = MAGIC
    raw[4:8] = (0x00073005).to_bytes(4, "little")  # u32 task id 0x00073005
    raw[8:16] = (777).to_bytes(8, "little")
    raw[16:18] = (3 << 5 | 0b00100).to_bytes(2, "little")  # mission 3, fusion type AICORE
    raw[18:20] = (9).to_bytes(2, "little")  # acc id
    rec = decode(raw, DecodeContext(traits=traits), v6=v6).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"], rec["sqe_type"], rec["syscnt"]) == (func, 4, 2, 777)
    assert (rec["stream_id"], rec["task_id"]) == (0, 0x00073005)
    assert (rec["stream_raw"], rec["task_raw"]) == (0x3005, 0x0007)
    assert (rec["acc_id"], rec["acsq_id"], rec["subtask_type"]) == (0, 0, 0)


def test_other_func_types_kept_unparsed() -> None:
    """A QoS record is kept with its func type, raw bytes 4-7 and syscnt; parsed columns are 0."""
    raw = bytearray(64)
    raw[0:2] = header(stars_soc.QOS, cnt=1)
    raw[2:4] = MAGIC
    raw[4:8] = (0xDEADBEEF).to_bytes(4, "little")
    raw[8:16] = (42).to_bytes(8, "little")
    raw[16:24] = b"\xff" * 8
    rec = decode(raw).batch.to_pylist()[0]
    assert (rec["func_type"], rec["cnt"], rec["syscnt"]) == (24, 1, 42)
    assert (rec["stream_raw"], rec["task_raw"]) == (0xBEEF, 0xDEAD)
    assert all(
        rec[k] == 0 for k in ("stream_id", "task_id", "acc_id", "acsq_id", "subtask_type", "thread_id")
    )


def test_stream_expand_uses_the_record_sqe_type() -> None:
    """With stream expand on, an ACSQ record of SQE type 3 keeps its ids; type 0 gets the 0x8000 swap."""
    raw = bytearray(128)
    for i, sqe in enumerate((3, 0)):
        rec = raw[i * 64 : (i + 1) * 64]
        rec[0:2] = header(stars_soc.ACSQ_START, sqe=sqe)
        rec[2:4] = MAGIC
        rec[4:6] = (0x8ABC).to_bytes(2, "little")
        rec[6:8] = (0x8123).to_bytes(2, "little")
        raw[i * 64 : (i + 1) * 64] = rec
    out = decode(raw, DecodeContext(traits=StreamTraits(platform=5, stream_expand=True))).batch
    assert out.column("stream_id").to_pylist() == [0x0ABC, 0x0123]
    assert out.column("task_id").to_pylist() == [0x8123, 0x8ABC]


def three_records(v6: bool = False) -> bytearray:
    cols = {name: np.arange(3, dtype=np.uint16) for name in ("task_raw", "stream_raw")}
    return bytearray((stars_soc.encode_v6 if v6 else stars_soc.encode)(cols))


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    out = decode(three_records() + b"\x00" * 40)
    assert (out.batch.num_rows, out.consumed) == (3, 192)


@pytest.mark.parametrize(("v6", "size"), [(False, 64), (True, 32)])
def test_bad_magic_error_names_file_and_offset(v6: bool, size: int) -> None:
    """Under the error policy a wrong magic raises with the file, byte offset and record index."""
    raw = three_records(v6)
    raw[size + 2] = 0
    ctx = DecodeContext(path="stars_soc.data.0.slice_2", offset=1000, record_index=7)
    with pytest.raises(DecodeError) as info:
        decode(raw, ctx, v6=v6)
    err = info.value
    assert (err.path, err.offset, err.record_index) == ("stars_soc.data.0.slice_2", 1000 + size, 8)
    assert "0x6bd3" in str(err)


@pytest.mark.parametrize("v6", [False, True])
def test_bad_magic_skip_counts(v6: bool) -> None:
    """Under the skip policy bad records are dropped and counted."""
    raw = three_records(v6)
    raw[3] = 0
    out = decode(raw, DecodeContext(on_invalid="skip"), v6=v6)
    assert (out.dropped, out.drop_reason) == (1, "bad magic")
    assert out.batch.column("task_raw").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    ("name", "traits", "family", "dev"),
    [
        ("stars_soc.data.0.slice_3", StreamTraits(platform=5), "stars_soc", "0"),
        ("stars_soc.data.3.slice_0", StreamTraits(), "stars_soc", "3"),
        ("stars_soc.data.1.slice_12", StreamTraits(platform=15), "stars_soc_v6", "1"),
        ("stars_soc.data.1.slice_12", StreamTraits(platform=16), "stars_soc_v6", "1"),
        ("stars_soc.data.0.slice_3.done", StreamTraits(), None, None),
        ("stars_soc_profile.data.0.slice_0", StreamTraits(), None, None),
    ],
)
def test_file_names_and_selection(
    name: str, traits: StreamTraits, family: str | None, dev: str | None
) -> None:
    """The 64-byte codec owns stars_soc.data on non-V6 chips, the 32-byte one on V6."""
    found = codec_for_file(name, traits)
    if family is None:
        assert found is None or found[0].family not in ("stars_soc", "stars_soc_v6")
    else:
        assert found is not None
        assert (found[0].family, found[1]["dev"]) == (family, dev)
        assert found[0].record_size == (32 if family.endswith("v6") else 64)
        assert found[0].counter == "cnt"
