"""Slow-rank detection, msprof-analyze's rule (framework_outputs.md §4d; MPA
``advisor/analyzer/cluster/slow_rank_analyzer.py``).

Each (step, rank) row of ``cluster_step_trace_time.csv`` gives three dimensions: ``Computing``,
``Communication`` (the ``Communication(Not Overlapped)`` column) and ``Free``, in µs. The mean total
is the mean over all rows of their sum. A dimension is flagged when ``max - min`` over all rows
exceeds 5 % of the mean total; msprof-analyze then reports the gap in ms (rounded to 3 digits) and
which (rank, step) holds the maximum and the minimum (``get_global_step_rank``).

Besides that, the report lists every (rank, step) of a flagged dimension whose value is more than
the threshold away from the minimum, with the excess in µs: "which ranks, and by how much".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

#: msprof-analyze ``SlowRankAnalyzer.RATIO_THRESHOLD``
RATIO_THRESHOLD = 0.05
#: dimension name -> cluster_step_trace_time column
DIMENSIONS = {"Computing": "Computing", "Communication": "Communication(Not Overlapped)", "Free": "Free"}


def slow_ranks(steps: pa.Table, threshold: float = RATIO_THRESHOLD) -> dict[str, Any]:
    """The slow-rank report of the rank rows ``steps`` (columns rank, step and the dimensions, µs)."""
    report: dict[str, Any] = {"threshold": threshold, "rows": steps.num_rows, "dimensions": {}}
    if steps.num_rows == 0:
        report["mean_total_us"] = 0.0
        return report
    ranks = steps["rank"].to_numpy()
    step_ids = steps["step"].to_numpy(zero_copy_only=False)
    values = {name: np.asarray(steps[column].to_numpy(), np.float64) for name, column in DIMENSIONS.items()}
    mean_total = float(np.mean(sum(values.values())))
    report["mean_total_us"] = mean_total
    for name, data in values.items():
        high, low = int(np.argmax(data)), int(np.argmin(data))  # first occurrence, as list.index
        gap = float(data[high] - data[low])
        ratio = 0.0 if mean_total == 0 else gap / mean_total
        flagged = ratio > threshold
        entry: dict[str, Any] = {
            "max_us": float(data[high]),
            "min_us": float(data[low]),
            "gap_us": gap,
            "gap_ms": round(ratio * mean_total / 1000, 3),
            "ratio": ratio,
            "flagged": flagged,
            "maximum": {"rank": int(ranks[high]), "step": _step(step_ids[high])},
            "minimum": {"rank": int(ranks[low]), "step": _step(step_ids[low])},
            "outliers": [],
        }
        if flagged:
            excess = data - data[low]
            for i in np.flatnonzero(excess > threshold * mean_total):
                entry["outliers"].append(
                    {"rank": int(ranks[i]), "step": _step(step_ids[i]), "excess_us": float(excess[i])}
                )
        report["dimensions"][name] = entry
    return report


def _step(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else int(value)


def render(report: dict[str, Any]) -> str:
    """Lines for people: each flagged dimension, its gap and where its extremes are."""
    flagged = {k: v for k, v in report["dimensions"].items() if v["flagged"]}
    if not flagged:
        return "slow rank: none (no dimension differs by more than 5% of the mean step time)"
    lines = []
    for name, entry in flagged.items():
        high, low = entry["maximum"], entry["minimum"]
        lines.append(
            f"slow rank: {name} differs by {entry['gap_ms']} ms ({entry['ratio']:.1%} of the mean step): "
            f"max on rank {high['rank']} step {high['step']}, min on rank {low['rank']} step {low['step']}"
        )
    return "\n".join(lines)
