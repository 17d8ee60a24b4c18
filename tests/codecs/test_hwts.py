"""HWTS log codec: layout, bit fields, magic policy, lost-record counter."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from profstream.codecs import codec_for_file, hwts
from profstream.codecs._base import DecodeContext, counter_gaps
from profstream.errors import DecodeError
from tests.strategies import columns

SPEC = {
    "log_type": (np.uint8, 7),
    "warn": (np.uint8, 1),
    "cnt": (np.uint8, 15),
    "core_id": (np.uint8, None),
    "block_id": (np.uint16, None),
    "task_id": (np.uint16, None),
    "stream_id": (np.uint16, 2047),
    "syscnt": (np.uint64, None),
    "warn_status": (np.uint64, None),
}


@given(columns(SPEC))
def test_round_trip(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for every column."""
    raw = hwts.encode(cols)
    assert len(raw) == 64 * len(cols["task_id"])
    out = hwts.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def test_byte_layout_matches_spec() -> None:
    """Fields sit at the documented offsets: type/cnt byte 0, magic 2-3, task 6, syscnt 8, stream 16."""
    raw = bytearray(64)
    raw[0] = 0x51  # cnt 5, warn 0, type 1 (end)
    raw[2:4] = (0x6BD3).to_bytes(2, "little")
    raw[6:8] = (513).to_bytes(2, "little")
    raw[8:16] = (123456789).to_bytes(8, "little")
    raw[16:20] = (2048 + 7).to_bytes(4, "little")  # masked to 7
    rec = hwts.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch.to_pylist()[0]
    assert rec["log_type"] == hwts.TASK_END
    assert rec["cnt"] == 5
    assert rec["task_id"] == 513
    assert rec["syscnt"] == 123456789
    assert rec["stream_id"] == 7


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = hwts.encode({"task_id": np.arange(3, dtype=np.uint16)}) + b"\x00" * 10
    out = hwts.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.batch.num_rows == 3
    assert out.consumed == 192


def test_bad_magic_error_names_file_and_offset() -> None:
    """Under the error policy a wrong magic raises with the file, byte offset and record index."""
    raw = bytearray(hwts.encode({"task_id": np.arange(4, dtype=np.uint16)}))
    raw[2 * 64 + 2] = 0
    ctx = DecodeContext(path="hwts.data.0.slice_0", offset=640, record_index=10)
    with pytest.raises(DecodeError) as info:
        hwts.decode(np.frombuffer(bytes(raw), np.uint8), ctx)
    err = info.value
    assert err.path == "hwts.data.0.slice_0"
    assert err.offset == 640 + 128
    assert err.record_index == 12
    assert "0x6bd3" in str(err)


def test_bad_magic_skip_counts() -> None:
    """Under the skip policy bad records are dropped and counted."""
    raw = bytearray(hwts.encode({"task_id": np.arange(4, dtype=np.uint16)}))
    raw[64 + 3] = 0
    out = hwts.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext(on_invalid="skip"))
    assert out.dropped == 1
    assert out.batch.column("task_id").to_pylist() == [0, 2, 3]


def test_counter_gaps() -> None:
    """Gaps in the 4-bit counter count lost records, including across batches and wraps."""
    assert counter_gaps(np.array([14, 15, 0, 1], np.uint8)) == 0
    assert counter_gaps(np.array([1, 4], np.uint8)) == 2
    assert counter_gaps(np.array([0], np.uint8), previous=13) == 2


@pytest.mark.parametrize(
    ("name", "family", "dev"),
    [
        ("hwts.data.0.slice_3", "hwts", "0"),
        ("hwts.aiv_data.2.slice_0", "hwts_aiv", "2"),
        ("hwts.log.data.45.dev.profiler_default_tag.1.slice_0", "hwts", "1"),
        ("hwts.log.data.45.4.7", "hwts", "4"),
        ("hwts.data.0.slice_3.done", None, None),
    ],
)
def test_file_names(name: str, family: str | None, dev: str | None) -> None:
    """Current and legacy names are recognised; .done markers are not data."""
    found = codec_for_file(name)
    if family is None:
        assert found is None
    else:
        assert found is not None
        assert found[0].family == family
        assert found[1]["dev"] == dev
