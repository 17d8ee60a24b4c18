"""npu_mem (v1/v2 layouts) and npu_module_mem codecs: layouts, versions, size overflow, file names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from profstream.codecs import codec_for_file, npu_mem
from profstream.codecs._base import DecodeContext, StreamTraits
from tests.strategies import columns


def npu_mem_spec(timestamp_max: int | None) -> dict[str, tuple[type, int | None]]:
    return {
        "event": (np.uint32, None),
        "timestamp": (np.uint64, timestamp_max),
        "ddr": (np.uint64, None),
        "hbm": (np.uint64, None),
    }


def check_npu_mem_round_trip(cols: dict[str, np.ndarray], version: str | None) -> None:
    raw = npu_mem.encode_npu_mem(cols, version=version)
    assert len(raw) == 32 * len(cols["event"])
    ctx = DecodeContext(traits=StreamTraits(version=version))
    out = npu_mem.decode_npu_mem(np.frombuffer(raw, np.uint8), ctx)
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


@given(columns(npu_mem_spec(0xFFFFFFFF)))
def test_round_trip_v1(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x in the 1.0 layout (32-bit timestamps)."""
    check_npu_mem_round_trip(cols, "1.0")


@given(columns(npu_mem_spec(None)))
def test_round_trip_v2(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x in the 2.0 layout (64-bit timestamps)."""
    check_npu_mem_round_trip(cols, "2.0")


def npu_mem_bytes() -> bytes:
    """One 32-byte record with distinct values in every slot of both layouts."""
    raw = bytearray(32)
    raw[0:4] = (1111).to_bytes(4, "little")
    raw[4:8] = (npu_mem.EVENT_DEVICE).to_bytes(4, "little")
    raw[8:16] = (2222).to_bytes(8, "little")
    raw[16:24] = (3333).to_bytes(8, "little")
    raw[24:32] = (4444).to_bytes(8, "little")
    return bytes(raw)


@pytest.mark.parametrize(
    ("version", "timestamp"),
    [("1.0", 1111), ("2.0", 2222), (None, 1111), ("3.0", 1111)],
)
def test_npu_mem_layout_by_version(version: str | None, timestamp: int) -> None:
    """1.0: u32 timestamp at 0; 2.0: u64 timestamp at 8; event at 4, ddr 16, hbm 24; others read as 1.0."""
    ctx = DecodeContext(traits=StreamTraits(version=version))
    row = npu_mem.decode_npu_mem(np.frombuffer(npu_mem_bytes(), np.uint8), ctx).batch.to_pylist()[0]
    assert row == {"event": 1, "timestamp": timestamp, "ddr": 3333, "hbm": 4444}


def test_npu_mem_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = npu_mem_bytes() * 2 + b"\x00" * 31
    out = npu_mem.decode_npu_mem(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert (out.consumed, out.batch.num_rows) == (64, 2)


@given(
    st.integers(0, 30).flatmap(
        lambda n: st.fixed_dictionaries(
            {
                "module_id": hnp.arrays(np.uint32, n),
                "cpu_cycle_count": hnp.arrays(np.uint64, n),
                "total_size": hnp.arrays(np.int64, n, elements=st.integers(-1, np.iinfo(np.int64).max)),
            }
        )
    )
)
def test_module_mem_round_trip(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for module memory records, -1 sizes included."""
    raw = npu_mem.encode_module_mem(cols)
    assert len(raw) == 24 * len(cols["module_id"])
    out = npu_mem.decode_module_mem(np.frombuffer(raw, np.uint8), DecodeContext())
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


@pytest.mark.parametrize(
    ("raw_size", "size"),
    [(4096, 4096), (2**63 - 1, 2**63 - 1), (2**63, -1), (2**64 - 1, -1)],
)
def test_module_mem_layout(raw_size: int, size: int) -> None:
    """u32 module_id at 0, u64 cpu_cycle_count at 8, u64 total_size at 16 (> int64 max -> -1)."""
    raw = bytearray(24)
    raw[0:4] = (7).to_bytes(4, "little")
    raw[4:8] = b"\xff" * 4  # reserved
    raw[8:16] = (123456789).to_bytes(8, "little")
    raw[16:24] = raw_size.to_bytes(8, "little")
    row = npu_mem.decode_module_mem(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch.to_pylist()[0]
    assert row == {"module_id": 7, "cpu_cycle_count": 123456789, "total_size": size}


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("npu_mem.data.0.slice_0", "npu_mem"),
        ("npu_mem.app.1.slice_2", "npu_mem_app"),
        ("npu_module_mem.data.5.slice_0", "npu_module_mem"),
        ("npu_mem.data.0.slice_0.done", None),
    ],
)
def test_file_names(name: str, family: str | None) -> None:
    """npu_mem.data, npu_mem.app and npu_module_mem.data map to their families."""
    found = codec_for_file(name)
    assert (found[0].family if found else None) == family
