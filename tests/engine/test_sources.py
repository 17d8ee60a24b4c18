"""StreamReader: slice order, straddling records, alignment, tails, tail mode, resume, bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from profstream import events
from profstream.codecs import StreamTraits, get_codec
from profstream.codecs._base import ByteBuffer, Codec, DecodeContext, Decoded, batch, named_patterns
from profstream.engine.sources import SliceFile, Stream, StreamOffsets, StreamReader, scan_data_dir
from profstream.errors import DecodeError
from tests.engine.profdirs import hwts_records, split

HWTS = get_codec("hwts")
TRAITS = StreamTraits(platform=1)


def _stream(data: Path, codec: Codec = HWTS, aging: bool | None = None) -> Stream:
    """The stream of ``codec`` in ``data`` (registry order), or an empty one to follow."""
    files = scan_data_dir(data, data.resolve(), TRAITS).slices.get((codec.family, aging), ())
    return Stream(codec, 0, aging, data, data.resolve(), files, TRAITS)


def _write_slices(data: Path, parts: list[bytes], numbers: list[int], stem: str = "hwts.data.0") -> None:
    data.mkdir(parents=True, exist_ok=True)
    for part, number in zip(parts, numbers, strict=True):
        (data / f"{stem}.slice_{number}").write_bytes(part)


def _tasks(batches: list[pa.RecordBatch]) -> list[int]:
    return [t for b in batches for t in b.column("task_id").to_pylist()]


@pytest.mark.parametrize("chunk", [1, 7, 64, 100, 1000, 8 * 1024 * 1024])
def test_slices_in_order_records_straddle(tmp_path: Path, chunk: int) -> None:
    """Records cut across slice_0/1/2/10 come back whole and in slice order, for any chunk size."""
    raw = hwts_records(20)
    _write_slices(tmp_path, split(raw, [100, 700, 1000]), [0, 1, 2, 10])
    reader = StreamReader(_stream(tmp_path), chunk_size=chunk)
    batches = list(reader)
    assert _tasks(batches) == list(range(20))
    assert reader.stats.records == 20
    assert reader.stats.bytes_read == len(raw)
    assert reader.stats.truncated_tails == 0
    assert reader.stats.lost == 0
    assert reader.offsets().carry == b""


def test_time_range_and_batches(tmp_path: Path) -> None:
    """The stream's syscnt range and batch count are tracked; one batch per chunk of whole records."""
    _write_slices(tmp_path, [hwts_records(10, syscnt0=5_000)], [0])
    reader = StreamReader(_stream(tmp_path), chunk_size=4 * 64)
    assert [b.num_rows for b in reader] == [4, 4, 2]
    assert (reader.stats.time_column, reader.stats.time_min, reader.stats.time_max) == (
        "syscnt",
        5_000,
        5_090,
    )


def test_counter_gaps_across_batches(tmp_path: Path) -> None:
    """Lost records are counted from the 4-bit counter across batch boundaries."""
    raw = hwts_records(3, first_cnt=0) + hwts_records(2, first_task=3, first_cnt=5)  # cnt 0,1,2,5,6
    _write_slices(tmp_path, [raw], [0])
    with capture_logs() as logs:
        reader = StreamReader(_stream(tmp_path), chunk_size=64)
        list(reader)
    assert reader.stats.lost == 2
    assert [e["count"] for e in logs if e["event"] == events.RECORDS_LOST] == [2]


def test_leading_bytes_dropped_on_aged_stream(tmp_path: Path) -> None:
    """An aged stream (first slice 3) drops total % 64 leading bytes, across files, and logs the count."""
    raw = b"\xee" * 10 + hwts_records(5)
    _write_slices(tmp_path, split(raw, [6, 40]), [3, 4, 5])
    with capture_logs() as logs:
        reader = StreamReader(_stream(tmp_path), chunk_size=64)
        batches = list(reader)
    assert _tasks(batches) == list(range(5))
    assert reader.stats.leading_bytes_dropped == 10
    dropped = [e for e in logs if e["event"] == events.LEADING_BYTES_DROPPED]
    assert [(e["count"], e["file"]) for e in dropped] == [(10, "hwts.data.0.slice_3")]


def test_msprof_alignment_drops_even_at_slice_0(tmp_path: Path) -> None:
    """alignment='msprof' applies OffsetCalculator's rule to a slice-0 stream too; 'auto' does not."""
    _write_slices(tmp_path, [b"\xee" * 10 + hwts_records(3)], [0])
    reader = StreamReader(_stream(tmp_path), alignment="msprof")
    assert _tasks(list(reader)) == [0, 1, 2]
    assert reader.stats.leading_bytes_dropped == 10
    with pytest.raises(DecodeError, match="magic"):
        list(StreamReader(_stream(tmp_path)))


def test_truncated_final_record_reported(tmp_path: Path) -> None:
    """A slice-0 stream ending in half a record: the whole ones decode, the tail is logged and counted."""
    raw = hwts_records(4)
    _write_slices(tmp_path, [raw[:100], raw[100 : 3 * 64 + 10]], [0, 1])
    with capture_logs() as logs:
        reader = StreamReader(_stream(tmp_path))
        batches = list(reader)
    assert _tasks(batches) == [0, 1, 2]
    assert (reader.stats.truncated_tails, reader.stats.truncated_bytes) == (1, 10)
    (tail,) = [e for e in logs if e["event"] == events.TRUNCATED_TAIL]
    assert tail["bytes"] == 10
    assert tail["file"].endswith("hwts.data.0.slice_1")
    assert tail["offset"] == 3 * 64 - 100


def test_decode_error_names_the_actual_slice(tmp_path: Path) -> None:
    """A bad record in slice_2 is reported in slice_2, at its offset inside that file."""
    raw = bytearray(hwts_records(20))
    raw[13 * 64 + 2] = 0  # record 13 (bytes 832-895) lies in slice_2 = stream bytes 700-999
    _write_slices(tmp_path, split(bytes(raw), [100, 700, 1000]), [0, 1, 2, 10])
    with pytest.raises(DecodeError) as info:
        list(StreamReader(_stream(tmp_path), chunk_size=256))
    err = info.value
    assert err.path is not None
    assert err.path.endswith("hwts.data.0.slice_2")
    assert (err.offset, err.record_index) == (13 * 64 - 700, 13)


def test_zero_length_and_zero_filled(tmp_path: Path) -> None:
    """Empty slices are fine; zero-filled ones fail the magic check ("error") or are counted ("skip")."""
    _write_slices(tmp_path, [b"", hwts_records(2), b""], [0, 1, 2])
    assert _tasks(list(StreamReader(_stream(tmp_path)))) == [0, 1]
    zero = tmp_path / "zero"
    _write_slices(zero, [b"\0" * 128], [0])
    with pytest.raises(DecodeError) as info:
        list(StreamReader(_stream(zero)))
    assert info.value.path is not None
    assert info.value.path.endswith("hwts.data.0.slice_0")
    assert (info.value.offset, info.value.record_index) == (0, 0)
    with capture_logs() as logs:
        reader = StreamReader(_stream(zero), on_invalid="skip")
        assert list(reader) == []
    assert reader.stats.dropped == {"bad magic": 2}
    assert [e["count"] for e in logs if e["event"] == events.RECORDS_DROPPED] == [2]


def test_only_empty_files(tmp_path: Path) -> None:
    """A stream of one zero-length slice yields nothing and reports nothing."""
    _write_slices(tmp_path, [b""], [0])
    reader = StreamReader(_stream(tmp_path))
    assert list(reader) == []
    assert reader.stats.records == reader.stats.truncated_tails == 0


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_tail_mode_growing_file_and_resume(tmp_path: Path) -> None:
    """Follow a growing slice: half a record waits; the rest completes it; a new slice continues it."""
    data = tmp_path / "data"
    data.mkdir()
    raw = hwts_records(8)
    reader = StreamReader(_stream(data), follow=True)
    assert reader.poll() == []  # nothing written yet
    first = data / "hwts.data.0.slice_0"
    first.write_bytes(raw[:128])
    assert _tasks(reader.poll()) == [0, 1]
    _append(first, raw[128:160])  # half of record 2
    assert reader.poll() == []
    snapshot = reader.offsets()
    assert (snapshot.file, snapshot.offset, len(snapshot.carry)) == ("hwts.data.0.slice_0", 160, 32)
    _append(first, raw[160:256])  # rest of record 2, record 3
    assert _tasks(reader.read_available()) == [2, 3]
    _append(first, raw[256:300])  # record 4 straddles into slice_1
    (data / "hwts.data.0.slice_1").write_bytes(raw[300:448])
    assert _tasks(reader.poll()) == [4, 5, 6]
    # a reader restarted from the snapshot emits exactly what came after it
    resumed = StreamReader(_stream(data), follow=True, resume=snapshot)
    assert _tasks(resumed.poll()) == [2, 3, 4, 5, 6]
    assert resumed.offsets().record_index == reader.offsets().record_index == 7
    _append(data / "hwts.data.0.slice_1", raw[448:480])  # half of record 7, then the writer stops
    with capture_logs() as logs:
        assert reader.finish() == []
    assert reader.stats.truncated_bytes == 32
    assert [e["bytes"] for e in logs if e["event"] == events.TRUNCATED_TAIL] == [32]


def test_tail_mode_gap_when_slice_ages_away(tmp_path: Path) -> None:
    """A slice deleted before it was read to the end is a GAP; reading re-aligns on the next slice."""
    data = tmp_path / "data"
    raw = hwts_records(6)
    _write_slices(data, [raw[:160]], [0])  # records 0, 1 and half of 2
    reader = StreamReader(_stream(data), follow=True)
    assert _tasks(reader.poll()) == [0, 1]
    (data / "hwts.data.0.slice_0").unlink()
    (data / "hwts.data.0.slice_1").write_bytes(raw[160:384])  # rest of 2, then 3, 4, 5
    with capture_logs() as logs:
        assert _tasks(reader.poll()) == [3, 4, 5]
    assert reader.stats.gaps == 1
    assert [e["file"] for e in logs if e["event"] == events.GAP] == ["hwts.data.0.slice_0"]
    assert reader.stats.leading_bytes_dropped == 32


def test_tail_mode_gap_on_last_slice_does_not_reread(tmp_path: Path) -> None:
    """The slice being read vanishes with none after it: later slices are read, older ones not again."""
    data = tmp_path / "data"
    raw = hwts_records(8)
    _write_slices(data, [raw[:128], raw[128:288]], [0, 1])  # records 0-1 | 2-3 and half of 4
    reader = StreamReader(_stream(data), follow=True)
    assert _tasks(reader.poll()) == [0, 1, 2, 3]
    (data / "hwts.data.0.slice_1").unlink()
    assert reader.poll() == []
    assert reader.offsets().file is None
    assert reader.offsets().slice == 1
    (data / "hwts.data.0.slice_2").write_bytes(raw[288:512])  # rest of 4, then 5, 6, 7
    assert _tasks(reader.poll()) == [5, 6, 7]
    assert reader.stats.gaps == 1


def test_offsets_survive_a_json_checkpoint(tmp_path: Path) -> None:
    """offsets() encodes to JSON and back unchanged (the daemon checkpoints it)."""
    _write_slices(tmp_path, [hwts_records(3)[:150]], [0])
    reader = StreamReader(_stream(tmp_path), follow=True)
    reader.poll()
    state = reader.offsets()
    assert len(state.carry) == 150 - 128
    assert msgspec.json.decode(msgspec.json.encode(state), type=StreamOffsets) == state


def test_read_available_budget(tmp_path: Path) -> None:
    """read_available(max_bytes) stops after about that many bytes; the next call continues."""
    _write_slices(tmp_path, [hwts_records(10)], [0])
    reader = StreamReader(_stream(tmp_path), follow=True, chunk_size=128)
    assert _tasks(reader.read_available(max_bytes=200)) == [0, 1, 2, 3]
    assert _tasks(reader.read_available()) == [4, 5, 6, 7, 8, 9]


def _fixed8_decode(buf: ByteBuffer, _: DecodeContext) -> Decoded:
    count = len(buf) // 8
    values = buf[: count * 8].view("<u8")
    return Decoded(batch({"timestamp": values.copy()}), count * 8)


FIXED8 = Codec(
    family="fixed8",
    side="host",
    patterns=named_patterns(r"^(?P<aging>aging|unaging)\.fixed8\.slice_(?P<slice>\d+)$"),
    decode=_fixed8_decode,
    encode=lambda cols: np.asarray(cols["timestamp"], "<u8").tobytes(),
    record_size=8,
)


@pytest.mark.parametrize("aging", [True, False])
def test_aging_column_on_host_streams(tmp_path: Path, aging: bool) -> None:
    """Host streams of an aging group get a boolean 'aging' column (op_state dynamic/static downstream)."""
    path = tmp_path / ("aging" if aging else "unaging")
    path.mkdir()
    (path / "x.slice_0").write_bytes(np.arange(3, dtype="<u8").tobytes())
    stream = Stream(FIXED8, None, aging, path, path, (_slice(path / "x.slice_0"),))
    reader = StreamReader(stream)
    (out,) = list(reader)
    assert out.schema.names == ["timestamp", "aging"]
    assert out.column("aging").to_pylist() == [aging] * 3
    assert (reader.stats.time_column, reader.stats.time_min, reader.stats.time_max) == ("timestamp", 0, 2)


def _slice(path: Path, number: int = 0) -> SliceFile:
    return SliceFile(number, path.name, path.resolve())


def _length_prefixed(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    """A test-only variable-length framing: u8 length, then that many payload bytes."""
    lengths, pos = [], 0
    while pos < len(buf) and pos + 1 + int(buf[pos]) <= len(buf):
        lengths.append(int(buf[pos]))
        pos += 1 + int(buf[pos])
    return Decoded(batch({"length": np.array(lengths, np.uint8)}), pos)


VARLEN = Codec(
    family="varlen",
    side="framework",
    patterns=named_patterns(r"^varlen$"),
    decode=_length_prefixed,
    encode=lambda cols: b"",
    record_size=None,
)


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_variable_length_carry_and_truncated_tail(tmp_path: Path, chunk: int) -> None:
    """Variable-length records carry (Decoded.consumed) over chunks and slices; a partial one is reported."""
    records = b"".join(bytes([n]) + bytes(n) for n in (5, 0, 9, 2))
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(records[:4])
    second.write_bytes(records[4:] + b"\x07ab")  # a 7-byte record with only 2 bytes written
    stream = Stream(VARLEN, None, None, tmp_path, tmp_path, (_slice(first, 0), _slice(second, 1)))
    reader = StreamReader(stream, chunk_size=chunk)
    lengths = [n for b in reader for n in b.column("length").to_pylist()]
    assert lengths == [5, 0, 9, 2]
    assert (reader.stats.truncated_tails, reader.stats.truncated_bytes) == (1, 3)
    assert reader.stats.leading_bytes_dropped == 0


def test_bad_chunk_size(tmp_path: Path) -> None:
    """A chunk size below one byte is refused."""
    with pytest.raises(ValueError, match="chunk_size"):
        StreamReader(_stream(tmp_path), chunk_size=0)


#: HWTS as if its batches could view their input: read through the memory-mapped path.
HWTS_MAPPED = replace(HWTS, views_input=True)


@pytest.mark.parametrize("codec", [HWTS, HWTS_MAPPED], ids=["read", "mapped"])
@pytest.mark.parametrize("chunk", [1, 64, 100, 1000, 8 * 1024 * 1024])
def test_read_and_mapped_paths_agree(tmp_path: Path, codec: Codec, chunk: int) -> None:
    """Windows read across slices and windows mapped per slice give the same records and counts.

    The stream is aged (first slice 3) and starts 5 bytes into a record, and its slices end mid-record.
    """
    raw = hwts_records(30)
    _write_slices(tmp_path, split(raw[5:], [100, 700, 1000, 1001]), [3, 4, 5, 9, 10])
    reader = StreamReader(_stream(tmp_path, codec), chunk_size=chunk)
    batches = list(reader)
    assert _tasks(batches) == list(range(1, 30))
    assert (reader.stats.records, reader.stats.leading_bytes_dropped, reader.stats.lost) == (29, 59, 0)
    assert reader.stats.bytes_read == len(raw) - 5
    assert reader.offsets().carry == b""


def test_read_path_windows_span_slices(tmp_path: Path) -> None:
    """The read path fills each window across slice ends: one batch per chunk of records, not per slice."""
    assert not HWTS.views_input
    _write_slices(tmp_path, split(hwts_records(30), [650, 1300]), [0, 1, 2])
    reader = StreamReader(_stream(tmp_path), chunk_size=16 * 64)
    assert [b.num_rows for b in reader] == [16, 14]
    mapped = StreamReader(_stream(tmp_path, HWTS_MAPPED), chunk_size=16 * 64)
    assert [b.num_rows for b in mapped] == [10, 10, 10]


def test_decode_error_in_a_window_spanning_slices(tmp_path: Path) -> None:
    """A bad record in a window that began in an earlier slice is reported in its own slice."""
    raw = bytearray(hwts_records(20))
    raw[15 * 64 + 2] = 0  # record 15 (bytes 960-1023) lies in slice_1 = stream bytes 650-1279
    _write_slices(tmp_path, split(bytes(raw), [650]), [0, 1])
    with pytest.raises(DecodeError) as info:
        list(StreamReader(_stream(tmp_path), chunk_size=1024 * 64))
    err = info.value
    assert err.path is not None
    assert err.path.endswith("hwts.data.0.slice_1")
    assert (err.offset, err.record_index) == (15 * 64 - 650, 15)


def test_read_path_tail_mode_resume_across_slices(tmp_path: Path) -> None:
    """Tail mode on the read path: polls emit whole records only, and a resumed reader continues exactly."""
    raw = hwts_records(12)
    _write_slices(tmp_path, [raw[:300]], [0])
    reader = StreamReader(_stream(tmp_path), follow=True, chunk_size=4 * 64)
    assert _tasks(reader.poll()) == [0, 1, 2, 3]
    state = reader.offsets()
    assert state.carry == raw[256:300]
    _write_slices(tmp_path, [raw[300:700], raw[700:]], [1, 2])
    resumed = StreamReader(_stream(tmp_path), follow=True, chunk_size=4 * 64, resume=state)
    assert _tasks(resumed.poll() + resumed.finish()) == list(range(4, 12))
    assert resumed.stats.truncated_tails == 0


@pytest.mark.parametrize(
    ("codec", "cut", "chunk"), [(HWTS_MAPPED, 160, 1 << 20), (HWTS, 128, 128)], ids=["mapped", "read"]
)
def test_tail_mode_a_slice_read_to_its_end_may_age_without_a_gap(
    tmp_path: Path, codec: Codec, cut: int, chunk: int
) -> None:
    """The batch that ends a slice, with a later one listed, is handed over standing on the later
    slice: the finished slice then vanishes (aged) without a gap, its partial record carried."""
    data = tmp_path / "data"
    raw = hwts_records(8)
    _write_slices(data, [raw[:cut], raw[cut:]], [0, 1])
    reader = StreamReader(_stream(data, codec), follow=True, chunk_size=chunk)
    assert _tasks(reader.read_available(1)) == [0, 1]
    state = reader.offsets()
    assert (state.file, state.offset, state.carry) == ("hwts.data.0.slice_1", 0, raw[128:cut])
    (data / "hwts.data.0.slice_0").unlink()
    resumed = StreamReader(_stream(data, codec), follow=True, chunk_size=chunk, resume=state)
    with capture_logs() as logs:
        assert _tasks(reader.poll()) == _tasks(resumed.poll()) == list(range(2, 8))
    assert reader.stats.gaps == resumed.stats.gaps == 0
    assert not [e for e in logs if e["event"] in (events.GAP, events.LEADING_BYTES_DROPPED)]


def test_replaced_values_are_counted_and_logged(tmp_path: Path) -> None:
    """Values a codec keeps but replaces (here an lpmFreqConv count past its 55 slots, cut as msprof's
    C++ cuts it) are counted in the stats and logged with the codec's reason, not passed over."""
    codec = get_codec("lpm_freq")
    record = bytearray(codec.encode({"syscnt": np.arange(55, dtype=np.uint64), "freq_mhz": np.ones(55)}))
    record[0:4] = (56).to_bytes(4, "little")
    _write_slices(tmp_path, [bytes(record) * 2], [0], stem="lpmFreqConv.data.0")
    with capture_logs() as logs:
        reader = StreamReader(_stream(tmp_path, codec))
        rows = sum(b.num_rows for b in reader)
    assert (rows, reader.stats.replaced) == (110, 2)
    replaced = [e for e in logs if e["event"] == events.VALUES_REPLACED]
    assert [(e["count"], e["reason"]) for e in replaced] == [(2, "count above 55, cut to 55")]
