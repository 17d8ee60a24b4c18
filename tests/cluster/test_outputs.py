"""Cluster files from hand-built partials: totals, local-to-global ranks, the reduction itself."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pytest

from profstream.cluster import outputs
from profstream.cluster.rank import MATRIX_SCHEMA, STEP_COLUMNS, STEP_SCHEMA, RankResult
from profstream.cluster.reduce import from_rank, merge, tree


def _matrix(rank: int, rows: list[tuple[str, int, int, float, float, str]]) -> pa.Table:
    """(op, src, dst, size, time, op_name) rows of step1 / collective / group g."""
    columns = {
        "rank": [rank] * len(rows),
        "step": ["step1"] * len(rows),
        "kind": ["collective"] * len(rows),
        "op": [r[0] for r in rows],
        "group": ["g"] * len(rows),
        "src": [r[1] for r in rows],
        "dst": [r[2] for r in rows],
        "transport": ["HCCS"] * len(rows),
        "size_mb": [r[3] for r in rows],
        "time_ms": [r[4] for r in rows],
        "bandwidth": [0.0] * len(rows),
        "op_name": [r[5] for r in rows],
    }
    return pa.table(columns, schema=MATRIX_SCHEMA)


def _result(rank: int, matrix: list[tuple[str, int, int, float, float, str]], steps: int = 2) -> RankResult:
    columns: dict[str, list[float | int]] = {"rank": [rank] * steps, "step": list(range(1, steps + 1))}
    for i, (name, _) in enumerate(STEP_COLUMNS):
        columns[name] = [float(rank * 100 + i + s) for s in range(steps)]
    return RankResult(
        rank=rank,
        steps=pa.table(columns, schema=STEP_SCHEMA),
        matrix=_matrix(rank, matrix),
        groups=(("collective", "g"),),
        comm_ops=0,
    )


#: group g has ranks 4 and 9 (local ranks 0 and 1); rank 9 reports a self link 1-1
RANK4 = _result(4, [("allreduce-top1@g", 0, 1, 10.0, 2.0, "a1"), ("allreduce-total@g", 0, 1, 30.0, 5.0, "")])
RANK9 = _result(
    9,
    [
        ("allreduce-top1@g", 1, 0, 8.0, 4.0, "a2"),
        ("allreduce-top1@g", 0, 1, 2.0, 1.0, "a3"),
        ("allreduce-total@g", 1, 0, 8.0, 4.0, ""),
        ("allreduce-top1@g", 1, 1, 1.0, 1.0, "a4"),
    ],
)


def test_merge_sums_links_over_ranks_and_unions_groups() -> None:
    cluster = merge(from_rank(RANK9), from_rank(RANK4))
    assert cluster.ranks == (4, 9)
    assert cluster.groups == {("collective", "g"): frozenset({4, 9})}
    assert cluster.steps["rank"].to_pylist() == [4, 4, 9, 9]
    links = {(r["op"], r["src"], r["dst"]): r for r in cluster.matrix.to_pylist()}
    top = links[("allreduce-top1@g", 0, 1)]
    assert (top["size_mb"], top["time_ms"], top["op_name"]) == (12.0, 3.0, "a3")  # name of the last rank
    assert cluster.self_links.to_pylist() == [{"group": "g", "local": 1, "rank": 9}]


def test_tree_equals_one_merge_whatever_the_grouping() -> None:
    results = [_result(r, [("allreduce-top1@g", 0, 1, float(r), 1.0, f"o{r}")]) for r in range(7)]
    flat = merge(*(from_rank(r) for r in results))
    for fan_in in (2, 3, 8):
        deep = tree([from_rank(r) for r in results], merge, fan_in)
        assert deep.steps.equals(flat.steps)
        assert deep.matrix.equals(flat.matrix)
        assert deep.groups == flat.groups


def test_matrix_file_maps_local_ranks_and_sums_totals(tmp_path: Path) -> None:
    cluster = merge(from_rank(RANK4), from_rank(RANK9))
    body = json.loads(outputs.write_matrix(tmp_path, cluster).read_text())
    step = body["(4, 9)"]["step1"]
    # local 1 -> rank 9 (self link); local 0 -> the smallest rank of g, 4
    assert step["allreduce-top1@g"]["4-9"] == {
        "Transport Type": "HCCS",
        "Transit Time(ms)": 3.0,
        "Transit Size(MB)": 12.0,
        "Op Name": "a3",
        "Bandwidth(GB/s)": 4.0,
    }
    assert step["allreduce-top1@g"]["9-9"]["Transit Size(MB)"] == 1.0
    total = step["Total Op Info@g"]  # only -total@ entries are summed
    assert total["4-9"]["Transit Size(MB)"] == 30.0 and total["9-4"]["Transit Size(MB)"] == 8.0
    assert total["9-4"]["Bandwidth(GB/s)"] == 2.0
    assert "9-9" not in total


def test_unmappable_local_rank_is_dropped(tmp_path: Path) -> None:
    lonely = _result(
        3, [("allreduce-top1@g", 0, 5, 1.0, 1.0, "x"), ("allreduce-top1@g", 0, 0, 1.0, 1.0, "y")]
    )
    body = json.loads(outputs.write_matrix(tmp_path, from_rank(lonely)).read_text())
    assert list(body["(3,)"]["step1"]["allreduce-top1@g"]) == ["3-3"]


def test_summed_ops() -> None:
    assert outputs.summed_op("allreduce-total@g") and outputs.summed_op("hcom_allReduce__1@g")
    assert not outputs.summed_op("allreduce-top1@g") and not outputs.summed_op("allreduce-bottom2@g")


def test_communication_totals_sum_times_and_bandwidth() -> None:
    def info(transit: float, wait: float, sync: float, size: float) -> str:
        return json.dumps(
            {
                "Communication Time Info": {
                    "Start Timestamp(us)": 1.0,
                    "Elapse Time(ms)": transit + wait,
                    "Transit Time(ms)": transit,
                    "Wait Time(ms)": wait,
                    "Synchronization Time(ms)": sync,
                    "Idle Time(ms)": 0.0,
                    "Wait Time Ratio": 0.5,
                    "Synchronization Time Ratio": 0.5,
                },
                "Communication Bandwidth Info": {
                    "HCCS": {
                        "Transit Size(MB)": size,
                        "Transit Time(ms)": transit,
                        "Size Distribution": {"4.0": [1, transit]},
                    }
                },
            }
        )

    rows = pa.table(
        {
            "step": ["step1"] * 3,
            "op": ["a@g", "b@g", "a@g"],
            "rank": [0, 0, 1],
            "info": [info(1.0, 1.0, 0.5, 4.0), info(3.0, 0.0, 0.0, 4.0), info(2.0, 2.0, 2.0, 4.0)],
        }
    )
    body = outputs.communication_steps(rows)
    assert list(body["step1"]) == ["a@g", "b@g", "Total Op Info@g"]
    total = body["step1"]["Total Op Info@g"]["0"]
    times = total["Communication Time Info"]
    assert times["Transit Time(ms)"] == 4.0 and times["Wait Time(ms)"] == 1.0
    assert "Start Timestamp(us)" not in times
    assert times["Wait Time Ratio"] == round(1 / 5, 4)
    assert times["Synchronization Time Ratio"] == round(0.5 / 4.5, 4)
    hccs = total["Communication Bandwidth Info"]["HCCS"]
    assert hccs["Transit Size(MB)"] == 8.0 and hccs["Bandwidth(GB/s)"] == 2.0  # MB / ms
    assert hccs["Size Distribution"] == {"4.0": [2, 4.0]}
    assert body["step1"]["Total Op Info@g"]["1"]["Communication Time Info"]["Wait Time Ratio"] == 0.5


def test_step_trace_csv(tmp_path: Path) -> None:
    cluster = merge(from_rank(RANK4), from_rank(RANK9))
    with outputs.write_step_trace(tmp_path, cluster).open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Step", "Type", "Index", *(name for name, _ in STEP_COLUMNS)]
    assert rows[1][:4] == ["1", "rank", "4", "400.0"]
    assert [r[:3] for r in rows[1:]] == [
        ["1", "rank", "4"],
        ["2", "rank", "4"],
        ["1", "rank", "9"],
        ["2", "rank", "9"],
    ]
    assert float(rows[4][-1]) == pytest.approx(900 + len(STEP_COLUMNS) - 1 + 1)
