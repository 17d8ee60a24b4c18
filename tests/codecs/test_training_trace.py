"""Legacy training_trace codec: 20-byte layout, partial records, file names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from profstream.codecs import codec_for_file, training_trace
from profstream.codecs._base import DecodeContext
from tests.strategies import columns

SPEC = {
    "tag_id": (np.uint64, None),
    "task_id": (np.uint16, None),
    "stream_id": (np.uint16, None),
    "syscnt": (np.uint64, None),
}


@given(columns(SPEC))
def test_round_trip(cols: dict[str, np.ndarray]) -> None:
    """decode(encode(x)) == x for every column."""
    raw = training_trace.encode(cols)
    assert len(raw) == 20 * len(cols["syscnt"])
    out = training_trace.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    for name, values in cols.items():
        np.testing.assert_array_equal(out.batch.column(name).to_numpy(), values, err_msg=name)


def test_byte_layout_matches_spec() -> None:
    """'=QHHQ': tag_id u64 at 0, task_id u16 at 8, stream_id u16 at 10, syscnt u64 at 12."""
    raw = bytearray(40)
    raw[20:28] = (training_trace.ITERATION_END_TAG).to_bytes(8, "little")
    raw[28:30] = (513).to_bytes(2, "little")
    raw[30:32] = (2048 + 3).to_bytes(2, "little")  # kept raw: MindInsight does not mask it
    raw[32:40] = (0x0102030405060708).to_bytes(8, "little")
    rows = training_trace.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch.to_pylist()
    assert rows[0] == {"tag_id": 0, "task_id": 0, "stream_id": 0, "syscnt": 0}
    assert rows[1] == {"tag_id": 255, "task_id": 513, "stream_id": 2051, "syscnt": 0x0102030405060708}


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = training_trace.encode({"syscnt": np.arange(3, dtype=np.uint64)}) + b"\x01" * 19
    out = training_trace.decode(np.frombuffer(raw, np.uint8), DecodeContext(final=False))
    assert out.consumed == 60
    assert out.batch.column("syscnt").to_pylist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("name", "dev", "slice_"),
    [
        ("training_trace.46.dev.profiler_default_tag.1.slice_0", "1", "0"),
        ("training_trace.46.dev.profiler_default_tag.10.slice_7", "10", "7"),
    ],
)
def test_legacy_file_names(name: str, dev: str, slice_: str) -> None:
    """The pre-2021 name is recognised with its device id and slice number."""
    found = codec_for_file(name)
    assert found is not None
    assert found[0].family == "training_trace"
    assert (found[1]["dev"], found[1]["slice"]) == (dev, slice_)


def test_done_marker_is_not_data() -> None:
    """The .done marker next to a legacy slice is not a training_trace file."""
    assert codec_for_file("training_trace.46.dev.profiler_default_tag.1.slice_0.done") is None
