"""hbm codecs: the 24-byte (version 1.0) and 32-byte (2.0) layouts, chosen by info.json's version."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given

from profstream.codecs import Codec, StreamTraits, codec_for_file, hbm
from profstream.codecs._base import DecodeContext
from tests.strategies import columns

COLUMNS = {
    "timestamp": (np.uint64, None),
    "count": (np.uint64, None),
    "event": (np.uint32, None),
    "hbm_id": (np.uint32, None),
}


@pytest.mark.parametrize(("codec", "size"), [(hbm.HBM, 24), (hbm.HBM_V2, 32)])
@given(cols=columns(COLUMNS, max_rows=40))
def test_round_trip(codec: Codec, size: int, cols: dict[str, np.ndarray]) -> None:
    raw = codec.encode(cols)
    assert len(raw) == size * len(cols["count"])
    out = codec.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def test_version_1_is_msprof_struct_qqii() -> None:
    """ "QQII": u64 timestamp (µs), u64 count, u32 event, u32 hbm id."""
    raw = struct.pack("<QQII", 123_456, 2**63 + 5, 1, 3) + struct.pack("<QQII", 7, 8, 0, 2)
    out = hbm.HBM.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch.to_pydict()
    assert out == {"timestamp": [123_456, 7], "count": [2**63 + 5, 8], "event": [1, 0], "hbm_id": [3, 2]}


def test_version_2_is_msprof_struct_iiiiqq() -> None:
    """ "IIIIQQ": two unused words, u32 event, u32 hbm id, u64 count, u64 timestamp (ns)."""
    raw = struct.pack("<IIIIQQ", 0xDEAD, 0xBEEF, 0, 1, 4096, 1_736_408_883_574_037_920)
    out = hbm.HBM_V2.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch.to_pydict()
    assert out == {"timestamp": [1_736_408_883_574_037_920], "count": [4096], "event": [0], "hbm_id": [1]}


def test_partial_record_is_not_consumed() -> None:
    raw = hbm.HBM.encode({"count": np.array([1, 2], np.uint64)})[:40]
    out = hbm.HBM.decode(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert out.consumed == 24
    assert out.batch.column("count").to_pylist() == [1]


@pytest.mark.parametrize(
    ("version", "family"), [(None, "hbm"), ("1.0", "hbm"), ("N/A", "hbm"), ("2.0", "hbm_v2")]
)
def test_the_collection_version_picks_the_layout(version: str | None, family: str) -> None:
    """msprof reads any version but "2.0" (a missing one too) with the 1.0 layout."""
    found = codec_for_file("hbm.data.3.slice_12", StreamTraits(version=version))
    assert found is not None
    codec, match = found
    assert codec.family == family
    assert (match["dev"], match["slice"]) == ("3", "12")
    assert codec_for_file("hbm.data.3.slice_12.done", StreamTraits(version=version)) is None
