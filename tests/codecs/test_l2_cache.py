"""l2_cache codec: 72-byte records (u16 task type, stream, task, unused; eight u64 counters), file names."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from profstream.codecs import codec_for_file, l2_cache
from profstream.codecs._base import DecodeContext
from tests.strategies import columns

IDS = {name: (np.uint16, None) for name in ("task_type", "stream_id", "task_id")}
COUNTERS = {name: (np.uint64, None) for name in l2_cache.EVENT_COLUMNS}


@given(columns({**IDS, **COUNTERS}, max_rows=40))
def test_round_trip(cols: dict[str, np.ndarray]) -> None:
    raw = l2_cache.encode(cols)
    assert len(raw) == 72 * len(cols["task_id"])
    out = l2_cache.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def test_byte_layout_matches_msprof_struct() -> None:
    """struct "HHHH8Q": ids at 0, 2, 4, two unused bytes at 6, counter i at 8 + 8 i."""
    raw = bytearray(72)
    for offset, value in ((0, 3), (2, 7), (4, 65535), (6, 0xFFFF)):
        raw[offset : offset + 2] = value.to_bytes(2, "little")
    for i in range(8):
        raw[8 + 8 * i : 16 + 8 * i] = (2**63 + i).to_bytes(8, "little")
    out = l2_cache.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch
    assert out.column("task_type").to_pylist() == [3]
    assert out.column("stream_id").to_pylist() == [7]
    assert out.column("task_id").to_pylist() == [65535]
    assert [out.column(f"event_{i}")[0].as_py() for i in range(8)] == [2**63 + i for i in range(8)]


def test_partial_record_is_not_consumed() -> None:
    raw = l2_cache.encode({"task_id": np.array([1, 2], np.uint16)})[:100]
    out = l2_cache.decode(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert out.consumed == 72
    assert out.batch.column("task_id").to_pylist() == [1]


def test_file_names() -> None:
    found = codec_for_file("l2_cache.data.3.slice_12")
    assert found is not None
    codec, match = found
    assert codec.family == "l2_cache"
    assert (match["dev"], match["slice"]) == ("3", "12")
    assert codec_for_file("l2_cache.data.3.slice_12.done") is None
