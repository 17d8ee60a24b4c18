"""lpmFreqConv codec: 888-byte records, filled slots only, counts past the array, file names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from profstream.codecs import codec_for_file, lpm_freq
from profstream.codecs._base import DecodeContext, OnInvalid
from tests.strategies import columns


@given(columns({"syscnt": (np.uint64, None), "freq_mhz": (np.uint32, None)}, max_rows=130))
def test_round_trip(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x; rows fill records 55 at a time."""
    raw = lpm_freq.encode(cols)
    assert len(raw) == 888 * -(-len(cols["syscnt"]) // 55)
    out = lpm_freq.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def record(count: int, slots: dict[int, tuple[int, int]]) -> bytearray:
    """One record: u32 count at 0, slot i at 8 + 16 i = u64 sysCnt, u32 freq (MHz) at +8."""
    raw = bytearray(888)
    raw[0:4] = count.to_bytes(4, "little")
    raw[4:8] = b"\xff" * 4  # reserved
    for i, (syscnt, freq) in slots.items():
        raw[8 + 16 * i : 16 + 16 * i] = syscnt.to_bytes(8, "little")
        raw[16 + 16 * i : 20 + 16 * i] = freq.to_bytes(4, "little")
        raw[20 + 16 * i : 24 + 16 * i] = b"\xff" * 4  # reserved
    return raw


def test_byte_layout_matches_spec() -> None:
    """Only the first `count` slots become rows, in record then slot order."""
    raw = record(2, {0: (1000, 1800), 1: (2000, 1200), 2: (9999, 9999)}) + record(
        55, {i: (3000 + i, 1000 + i) for i in range(55)}
    )
    out = lpm_freq.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext())
    assert out.batch.num_rows == 57
    assert out.batch.column("syscnt").to_pylist()[:3] == [1000, 2000, 3000]
    assert out.batch.column("freq_mhz").to_pylist()[:3] == [1800, 1200, 1000]
    assert out.batch.column("syscnt").to_pylist()[-1] == 3054


@pytest.mark.parametrize("on_invalid", ["error", "skip"])
def test_count_above_55_is_cut_to_55(on_invalid: OnInvalid) -> None:
    """A count above 55 keeps the record with its 55 slots, as msprof's current C++ parser does
    (FreqLpmParseItem bounds the count), under either policy; the cut is counted and said."""
    raw = (
        record(1, {0: (1, 2)})
        + record(0xFFFFFFFF, {i: (10 + i, 20) for i in range(55)})
        + record(1, {0: (5, 6)})
    )
    out = lpm_freq.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext(on_invalid=on_invalid))
    assert (out.dropped, out.replaced, out.replace_reason) == (0, 1, "count above 55, cut to 55")
    assert out.batch.column("syscnt").to_pylist() == [1, *range(10, 65), 5]


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = bytes(record(1, {0: (1, 2)}) + record(1, {0: (3, 4)})[:500])
    out = lpm_freq.decode(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert out.consumed == 888
    assert out.batch.column("syscnt").to_pylist() == [1]


def test_file_names() -> None:
    """lpmFreqConv slices are recognised with their device id; .done markers are not data."""
    found = codec_for_file("lpmFreqConv.data.3.slice_1")
    assert found is not None
    assert found[0].family == "lpm_freq"
    assert found[1]["dev"] == "3"
    assert codec_for_file("lpmFreqConv.data.3.slice_1.done") is None
