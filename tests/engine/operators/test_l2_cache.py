"""L2Cache: msprof's per-chip hit and victim rates of every record, and when it computes none."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from profstream.codecs import l2_cache as codec
from profstream.codecs._base import DecodeContext
from profstream.engine.operators.l2_cache import L2Cache, configured_events, counter_terms
from profstream.engine.runtime import DONE
from tests.engine.operators.harness import check_snapshot, drive, table

EVENTS_910B = "0xF6,0xFB,0xFC,0xBF,0x90,0x91,0x9C,0x9D"
EVENTS_910A = "0x5b,0x59,0x5c,0x7d,0x7e,0x71,0x79,0x7c"
RAW = "l2_cache_raw@0"


def records(*counters: list[int], stream: int = 2) -> pa.RecordBatch:
    """Decoded records of stream ``stream``, task ids 1.., with the given counters (up to 8 each)."""
    n = len(counters)
    columns = {"stream_id": np.full(n, stream), "task_id": np.arange(1, n + 1)}
    for i in range(codec.EVENTS):
        columns[f"event_{i}"] = np.array([c[i] if i < len(c) else 0 for c in counters], np.uint64)
    raw = codec.encode(columns)
    return codec.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch


def rates(chip: int, events: str, batch: pa.RecordBatch) -> list[tuple[float, float]]:
    out = table(drive(L2Cache(0, chip, events), [(RAW, batch, DONE)]))
    assert out is not None
    return list(zip(out.column("hit_rate").to_pylist(), out.column("victim_rate").to_pylist(), strict=True))


def test_910b_rates_sum_the_two_request_and_hit_events() -> None:
    # events 0xf6 0xfb 0xfc 0xbf 0x90 0x91 0x9c 0x9d: requests 0xfb + 0xfc, hits 0x90 + 0x91, victims 0x9c
    got = rates(5, EVENTS_910B, records([99, 600, 400, 99, 300, 200, 70, 99], [1, 2, 1, 1, 1, 0, 1, 1]))
    assert got == [(0.5, 0.07), (round(1 / 3, 6), round(1 / 3, 6))]


def test_910a_rates_follow_the_cloud_events() -> None:
    # 0x5b hits, 0x59 requests, 0x5c victims
    assert rates(1, EVENTS_910A, records([3, 7, 1], [0, 0, 0])) == [
        (round(3 / 7, 6), round(1 / 7, 6)),
        (0, 0),
    ]


def test_v6_hits_subtract_the_miss_events() -> None:
    events = "0x00,0x81,0x82,0x83,0x74,0x75"
    # requests 0x00; hits 0x00 - 0x81 - 0x82 - 0x83 - 0x74 - 0x75; victims 0x74 + 0x75
    assert rates(15, events, records([1000, 100, 50, 25, 200, 25])) == [(0.6, 0.225)]


def test_events_are_read_as_msprof_reads_them() -> None:
    assert configured_events(" 0xF6, 0xfb ,,0x9C ") == ["0xf6", "0xfb", "0x9c"]
    terms = counter_terms(5, EVENTS_910B)
    assert terms == ([(1, 1), (2, 1)], [(4, 1), (5, 1)], [(6, 1)])


@pytest.mark.parametrize(
    ("chip", "events", "reason"),
    [
        (5, "0xf6,0xfb,0x90,0x91,0x9c", "event 0xfc"),  # an event of the formula is missing
        (6, EVENTS_910B, "no L2 cache formula for chip 6"),
        (5, EVENTS_910B + ",0x1", "9 events configured"),
    ],
)
def test_no_rows_when_msprof_would_compute_none(chip: int, events: str, reason: str) -> None:
    with capture_logs() as logs:
        out = drive(L2Cache(0, chip, events), [(RAW, records([1, 2, 3, 4, 5, 6, 7, 8]), DONE)])
    assert out == []
    [warning] = [e for e in logs if e["event"] == "l2_cache_not_computed"]
    assert warning["records"] == 1
    assert reason in warning["reason"]


def test_rows_keep_record_order_and_ids() -> None:
    batch = records([9, 1, 1, 0, 1, 0, 0, 0], [9, 1, 3, 0, 1, 0, 1, 0], stream=7)
    raw = "l2_cache_raw@3"
    out = table(drive(L2Cache(3, 5, EVENTS_910B), [(raw, batch, 10), (raw, batch, DONE)]))
    assert out is not None
    assert out.column("device_id").to_pylist() == [3] * 4
    assert out.column("stream_id").to_pylist() == [7] * 4
    assert out.column("task_id").to_pylist() == [1, 2, 1, 2]
    assert out.column("victim_rate").to_pylist() == [0.0, 0.25, 0.0, 0.25]


def test_snapshot_round_trip() -> None:
    steps = [
        (RAW, records([5, 1, 2, 0, 1, 1, 1, 0]), 10),
        (RAW, None, 20),
        (RAW, records([0, 3, 1, 0, 2]), DONE),
    ]
    for cut in range(len(steps) + 1):
        check_snapshot(lambda: L2Cache(0, 5, EVENTS_910B), steps, cut)
