"""Host MsprofApi/MsprofEvent codec: layout, Api/Event discrimination, magic policy, file names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs import codec_for_file, get_codec
from profstream.codecs._base import DecodeContext
from profstream.errors import DecodeError
from tests.codecs.host_bytes import decode_one, put, round_trip
from tests.strategies import columns, uint_column

CODEC = get_codec("api_event")
SPEC = {
    "level": (np.uint16, None),
    "type": (np.uint32, None),
    "thread_id": (np.uint32, None),
    "request_id": (np.uint32, None),
    "begin_time": (np.uint64, None),
    "end_time": (np.uint64, 2**64 - 2),  # all ones would be the Event flag
    "item_id": (np.uint64, None),
}


@given(st.data())
def test_round_trip(data: st.DataObject) -> None:
    """decode(encode(x)) == x for mixed Api and Event rows (Event end_time reads back 0)."""
    cols = data.draw(columns(SPEC))
    n = len(cols["level"])
    cols["is_event"] = data.draw(uint_column(n, np.uint8, 1)).astype(bool)
    cols["end_time"] = np.where(cols["is_event"], np.uint64(0), cols["end_time"])
    out = round_trip(CODEC, cols)
    for name, values in cols.items():
        assert out[name] == values.tolist(), name


def _raw(magic: int = 0x5A5A) -> bytearray:
    raw = bytearray(40)
    put(raw, 0, "HHIII", magic, 20000, 0x010005, 77, 9)  # magic, level, type, threadId, reserve
    put(raw, 16, "QQQ", 1_000, 2_500, 0xDEADBEEFCAFE)  # beginTime, endTime, itemId
    return raw


def test_api_layout() -> None:
    """Api fields sit at 2 level, 4 type, 8 thread, 12 reserve, 16 begin, 24 end, 32 item."""
    row = decode_one(CODEC, _raw())
    assert row == {
        "level": 20000,
        "type": 0x010005,
        "thread_id": 77,
        "request_id": 9,
        "begin_time": 1_000,
        "is_event": False,
        "end_time": 2_500,
        "item_id": 0xDEADBEEFCAFE,
    }


def test_event_layout() -> None:
    """Bytes 24-31 all ones make an Event: requestId at 12, timeStamp at 16, end_time 0."""
    raw = _raw()
    raw[24:32] = b"\xff" * 8
    row = decode_one(CODEC, raw)
    assert row["is_event"] is True
    assert row["request_id"] == 9
    assert row["begin_time"] == 1_000
    assert row["end_time"] == 0
    assert row["item_id"] == 0xDEADBEEFCAFE


def test_almost_all_ones_is_an_api() -> None:
    """Only all eight bytes set mark an Event."""
    raw = _raw()
    raw[24:32] = b"\xff" * 7 + b"\xfe"
    row = decode_one(CODEC, raw)
    assert row["is_event"] is False
    assert row["end_time"] == 0xFEFF_FFFF_FFFF_FFFF


def test_api_with_zero_begin_time_is_kept() -> None:
    """Dropping Api rows whose begin is 0 is an engine rule, not the codec's."""
    raw = _raw()
    put(raw, 16, "Q", 0)
    assert decode_one(CODEC, raw)["begin_time"] == 0


def test_partial_record_is_not_consumed() -> None:
    """A trailing partial record is left for the next buffer."""
    raw = bytes(_raw() * 2) + b"\x5a\x5a\x00"
    out = CODEC.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.batch.num_rows == 2
    assert out.consumed == 80


def test_bad_magic_error_names_file_and_offset() -> None:
    """Under the error policy a wrong magic raises with file, byte offset, record index and values."""
    raw = bytes(_raw() + _raw() + _raw(magic=0x1234))
    ctx = DecodeContext(path="unaging.api_event.data.slice_0", offset=400, record_index=10)
    with pytest.raises(DecodeError) as info:
        CODEC.decode(np.frombuffer(raw, np.uint8), ctx)
    err = info.value
    assert err.path == "unaging.api_event.data.slice_0"
    assert err.offset == 400 + 80
    assert err.record_index == 12
    assert "0x5a5a" in str(err)
    assert "0x1234" in str(err)


def test_bad_magic_skip_counts() -> None:
    """Under the skip policy bad records are dropped and counted."""
    raw = bytes(_raw(magic=0) + _raw() + _raw(magic=0xA5A5))
    out = CODEC.decode(np.frombuffer(raw, np.uint8), DecodeContext(on_invalid="skip"))
    assert out.batch.num_rows == 1
    assert out.dropped == 2
    assert out.drop_reason == "bad magic"


@pytest.mark.parametrize(
    ("name", "aging", "slice_"),
    [
        ("aging.api_event.data.slice_0", "aging", "0"),
        ("unaging.api_event.data.slice_12", "unaging", "12"),
    ],
)
def test_file_names(name: str, aging: str, slice_: str) -> None:
    """Aging and unaging API/event slices belong to api_event, with their groups."""
    found = codec_for_file(name)
    assert found is not None
    assert found[0].family == "api_event"
    assert found[1]["aging"] == aging
    assert found[1]["slice"] == slice_


@pytest.mark.parametrize(
    "name", ["aging.api_event.data.slice_0.done", "Runtime.api.0.slice_0", "other.api_event.data.slice_0"]
)
def test_other_names_are_not_api_event(name: str) -> None:
    """Markers, old API files of another layout and other prefixes are not api_event."""
    found = codec_for_file(name)
    assert found is None or found[0].family != "api_event"
