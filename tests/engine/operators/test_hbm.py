"""HbmBandwidth against a line-by-line reading of msprof's HbmModel on random runs, and its edge cases."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream import events
from profstream.engine.operators.hbm import SCALE, HbmBandwidth
from profstream.engine.runtime import DONE
from tests.engine.operators.harness import check_snapshot, drive, table

RAW = "hbm_raw@0"
Record = tuple[int, int, int, int]  # time ns, count, event, hbm id


def raw(records: list[Record]) -> pa.RecordBatch:
    """Feed rows (times already converted to ns)."""
    time, count, event, unit = zip(*records, strict=True) if records else ((), (), (), ())
    return pa.RecordBatch.from_pydict(
        {
            "timestamp": pa.array(time, pa.uint64()),
            "count": pa.array(count, pa.uint64()),
            "event": pa.array(event, pa.uint32()),
            "hbm_id": pa.array(unit, pa.uint32()),
            "time_ns": pa.array(time, pa.int64()),
        }
    )


def msprof_rows(records: list[Record]) -> list[tuple[int, int, str, float]]:
    """HbmModel.insert_bw_data as msprof writes it, on Python lists: GROUP BY (time, type, id, count),
    rows of each time in the timelines' order (id, reads first), the most common rows-per-time kept
    (ties: the larger), then row i against row i - n (a negative index wraps)."""
    grouped = sorted({(t, "read" if e == 0 else "write", h, c) for t, c, e, h in records})
    bw_data = sorted(grouped, key=lambda r: (r[0], r[2], r[1], r[3]))
    ts_counts = Counter(row[0] for row in bw_data)
    count_freq = Counter(ts_counts.values())
    max_freq = max(count_freq.values())
    check_len = max(cnt for cnt, freq in count_freq.items() if freq == max_freq)
    bw_data = [row for row in bw_data if ts_counts[row[0]] == check_len]
    out = []
    for i, row in enumerate(bw_data):
        dur = row[0] - bw_data[i - check_len][0]
        bandwidth = max(row[3] * SCALE / dur * 1e9, 0) if dur else float(row[3])
        out.append((row[0], row[2], row[1], float(bandwidth)))
    return out


def rows_of(records: list[Record], pushes: int = 1, events_text: str = "read,write") -> list[tuple]:
    step = max(1, -(-len(records) // pushes))
    steps = [(RAW, raw(records[i : i + step]), DONE) for i in range(0, len(records), step)]
    out = table(drive(HbmBandwidth(0, events_text), steps))
    if out is None:
        return []
    columns = [out.column(n).to_pylist() for n in ("time_ns", "hbm_id", "event", "bandwidth")]
    return list(zip(*columns, strict=True))


@st.composite
def runs(draw: st.DrawFn) -> list[Record]:
    """Samples of 1-4 HBM units in one or both directions, some records lost, some written twice."""
    units = draw(st.integers(1, 4))
    directions = draw(st.sampled_from([(0,), (1,), (0, 1), (0, 2)]))  # any non-zero event is a write
    samples = draw(st.integers(1, 12))
    times = sorted(draw(st.lists(st.integers(0, 10**9), min_size=samples, max_size=samples, unique=True)))
    records = [
        (t, draw(st.integers(0, 2**40)), e, h) for t in times for h in range(units) for e in directions
    ]
    lost = draw(st.lists(st.integers(0, len(records) - 1), max_size=3, unique=True))
    kept = [r for i, r in enumerate(records) if i not in lost]
    twice = draw(st.lists(st.sampled_from(kept), max_size=3)) if kept else []
    return draw(st.permutations(kept + twice))


@settings(max_examples=200, deadline=None)
@given(records=runs(), pushes=st.integers(1, 4))
def test_random_runs_equal_msprofs_reading(records: list[Record], pushes: int) -> None:
    if not records:
        assert rows_of(records) == []
        return
    assert rows_of(records, pushes) == msprof_rows(records)


def test_bandwidth_is_the_count_over_the_time_since_the_units_previous_sample() -> None:
    # two units, reads and writes, sampled every 20 ms; one count is 32 bytes (2**-15 MB)
    records = [
        (t, 1000 * (t // 20_000_000 + 1) + 10 * h + e, e, h)
        for t in (0, 20_000_000)
        for h in (0, 1)
        for e in (0, 1)
    ]
    rows = rows_of(records)
    assert [r[:3] for r in rows] == [
        (t, h, d) for t in (0, 20_000_000) for h in (0, 1) for d in ("read", "write")
    ]
    assert [r[3] for r in rows[:4]] == [0.0] * 4  # the first sample: paired with the last, so 0
    assert rows[5][3] == 2001 * 2**-15 / 20_000_000 * 1e9  # unit 0 write at 20 ms: count 2001


def test_a_sample_that_lost_a_record_is_left_out_and_the_next_spans_the_gap() -> None:
    records = [(t, 3200, e, h) for t in (0, 10, 20, 30) for h in (0, 1) for e in (0, 1)]
    del records[9]  # the sample at time 20 lost one of its four records
    with capture_logs() as logs:
        rows = rows_of(records)
    assert sorted({r[0] for r in rows}) == [0, 10, 30]
    assert {r[3] for r in rows if r[0] == 30} == {3200 * SCALE / 20 * 1e9}
    assert any(log["event"] == events.RECORDS_UNMATCHED and log["incomplete_samples"] == 3 for log in logs)


def test_a_single_sample_keeps_its_raw_counts() -> None:
    assert [r[3] for r in rows_of([(5, 700, 0, 0), (5, 900, 1, 0)])] == [700.0, 900.0]


def test_three_configured_events_compute_nothing() -> None:
    with capture_logs() as logs:
        assert rows_of([(5, 700, 0, 0), (6, 900, 0, 0)], events_text="read,write,other") == []
    assert [log["not_computed"] for log in logs if log["event"] == events.RECORDS_UNMATCHED] == [2]


def test_nothing_leaves_before_the_end_and_snapshots_round_trip() -> None:
    records = [(t, 100 + t, e, h) for t in range(0, 50, 10) for h in (0, 1, 2) for e in (0, 1)]
    steps = [(RAW, raw(records[i : i + 7]), i) for i in range(0, len(records), 7)]
    op = HbmBandwidth(0, "")
    assert drive(op, steps, finish=False) == []
    assert op.output_watermark(100) < 0  # held rows: nothing is promised
    assert table(op.finish()) is not None
    check_snapshot(lambda: HbmBandwidth(0, ""), steps, cut=2)
