"""msprof-analyze's slow-rank rule on hand-built step rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from profstream.cluster.rank import STEP_COLUMNS, STEP_SCHEMA
from profstream.cluster.slow_rank import render, slow_ranks


def _steps(rows: list[tuple[int, int, float, float, float]]) -> pa.Table:
    """(rank, step, computing, communication not overlapped, free) rows; other columns 0."""
    columns: dict[str, list[float | int]] = {"rank": [r[0] for r in rows], "step": [r[1] for r in rows]}
    for name, _ in STEP_COLUMNS:
        columns[name] = [0.0] * len(rows)
    columns["Computing"] = [r[2] for r in rows]
    columns["Communication(Not Overlapped)"] = [r[3] for r in rows]
    columns["Free"] = [r[4] for r in rows]
    return pa.table(columns, schema=STEP_SCHEMA)


def test_a_dimension_is_flagged_past_five_percent_of_the_mean_total() -> None:
    # totals 1000, 1000, 1000, 1200 -> mean 1050; threshold 52.5 us
    steps = _steps(
        [(0, 1, 800, 100, 100), (1, 1, 800, 100, 100), (0, 2, 800, 150, 50), (1, 2, 1000, 100, 100)]
    )
    report = slow_ranks(steps)
    assert report["mean_total_us"] == 1050
    computing = report["dimensions"]["Computing"]
    assert computing["flagged"] and computing["gap_us"] == 200
    assert computing["gap_ms"] == 0.2
    assert computing["maximum"] == {"rank": 1, "step": 2}
    assert computing["minimum"] == {"rank": 0, "step": 1}  # the first minimum, as list.index
    assert computing["outliers"] == [{"rank": 1, "step": 2, "excess_us": 200.0}]
    communication = report["dimensions"]["Communication"]
    assert communication["gap_us"] == 50 and not communication["flagged"]  # 50 < 52.5
    assert report["dimensions"]["Free"]["ratio"] == pytest.approx(50 / 1050)
    assert "Computing differs by 0.2 ms" in render(report)


def test_exactly_five_percent_is_not_flagged() -> None:
    steps = _steps([(0, 1, 975, 0, 0), (1, 1, 1025, 0, 0)])  # gap 50 == 5 % of 1000
    assert not slow_ranks(steps)["dimensions"]["Computing"]["flagged"]
    assert "none" in render(slow_ranks(steps))


def test_no_rows() -> None:
    assert slow_ranks(STEP_SCHEMA.empty_table())["dimensions"] == {}
