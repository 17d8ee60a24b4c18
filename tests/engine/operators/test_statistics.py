"""Aggregation operators against hand-derived tables (msprof_outputs.md §2.1, §4d, §4e)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream import events
from profstream.engine import schema
from profstream.engine.operators.statistics import (
    ApiStatistic,
    CommStatistic,
    OpStatistic,
    TaskWaitTime,
    sub_task_parents,
    task_time_groups,
)
from profstream.engine.runtime import DONE, Feed, Operator, Pipeline, at

DEVICE = 2
TASKS = at("tasks", DEVICE)


def _tasks(rows: list[tuple[str | None, str | None, int | None, int | None]]) -> pa.RecordBatch:
    """Tasks batch from (op_type, task_type, start_ns, end_ns) rows."""
    op_type, task_type, start, end = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [], [])
    return schema.conform(
        schema.TABLES["tasks"],
        {
            "device_id": pa.array([DEVICE] * len(rows), pa.int32()),
            "op_type": pa.array(op_type, pa.string()),
            "task_type": pa.array(task_type, pa.string()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
        },
    )


def _run(op: Operator, batches: list[tuple[str, pa.RecordBatch]]) -> list[dict[str, Any]]:
    for stream, batch in batches:
        op.push(stream, batch)
        assert op.advance(DONE - 1) == []  # a statistic is final only at the end
    [(name, table)] = op.finish()
    assert name == op.outputs[0]
    return table.to_pylist()


def test_op_statistic_groups_filters_and_ratios_by_the_spec() -> None:
    """§4d: group by (op type, core type); N/A and WRITE_BACK count in the ratio but are not shown;
    communication tasks count nowhere; sorted by total, ties in key order."""
    batch = _tasks(
        [
            ("MatMul", "AI_CORE", 0, 100),
            ("MatMul", "AI_CORE", 200, 500),  # MatMul: 2 tasks, 400 ns, min 100, max 300
            ("Add", "AI_VECTOR_CORE", 600, 800),  # Add: 200 ns
            ("Cast", "AI_VECTOR_CORE", 900, 1100),  # Cast: 200 ns, ties with Add
            ("N/A", "AI_CORE", 0, 100),  # hidden, in the denominator
            (None, "AI_CORE", 0, 50),  # unknown op type: like N/A
            ("Memset", "WRITE_BACK", 0, 50),  # hidden, in the denominator
            ("hcom_allReduce_", "HCCL", 0, 10_000),  # communication: nowhere
            ("AllReduce", "COMMUNICATION", 0, 10_000),
        ]
    )
    rows = _run(OpStatistic(DEVICE), [(TASKS, batch)])
    denominator = 400 + 200 + 200 + 100 + 50 + 50
    assert [(r["op_type"], r["core_type"]) for r in rows] == [
        ("MatMul", "AI_CORE"),
        ("Add", "AI_VECTOR_CORE"),
        ("Cast", "AI_VECTOR_CORE"),
    ]
    matmul = rows[0]
    assert (matmul["count"], matmul["total_ns"], matmul["min_ns"], matmul["max_ns"]) == (2, 400, 100, 300)
    assert matmul["avg_ns"] == 200.0
    assert matmul["ratio"] == pytest.approx(400 * 100 / denominator)
    assert rows[1]["ratio"] == pytest.approx(200 * 100 / denominator)
    assert all(r["device_id"] == DEVICE for r in rows)


def test_op_statistic_drops_tasks_before_the_collection_start_and_counts_untimed_rows() -> None:
    """Tasks starting at or before ``start_ns`` are left out (msprof: ``start_time > S``); rows
    without times are counted and logged."""
    batch = _tasks(
        [
            ("Add", "AI_CORE", 90, 100),
            ("Add", "AI_CORE", 100, 130),
            ("Add", "AI_CORE", 101, 131),
            ("Add", "AI_CORE", None, 5),
        ]
    )
    with capture_logs() as logs:
        rows = _run(OpStatistic(DEVICE, start_ns=100), [(TASKS, batch)])
    assert [(r["count"], r["total_ns"]) for r in rows] == [(1, 30)]
    dropped = [e for e in logs if e["event"] == events.RECORDS_DROPPED]
    assert [e["count"] for e in dropped] == [1]


def test_op_statistic_of_nothing_is_an_empty_table() -> None:
    """No tasks: an empty op_statistic, not an error (and no division by zero)."""
    rows = _run(OpStatistic(DEVICE), [(TASKS, _tasks([]))])
    assert rows == []


def _op_oracle(rows: list[tuple[str | None, str | None, int | None, int | None]]) -> list[tuple[Any, ...]]:
    """§4d by plain Python: dicts of lists, then the msprof rules."""
    groups: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for op_type, core, start, end in rows:
        if start is None or end is None or core in ("HCCL", "COMMUNICATION", "HCCL_AI_CPU"):
            continue
        groups[(op_type, core)].append(end - start)
    denominator = sum(sum(v) for v in groups.values())
    shown = [
        (k, v)
        for k, v in groups.items()
        if k[0] not in (None, "N/A") and k[1] not in ("WRITE_BACK", "INVALID")
    ]
    shown.sort(
        key=lambda kv: ((kv[0][0] is not None, kv[0][0] or ""), (kv[0][1] is not None, kv[0][1] or ""))
    )
    shown.sort(key=lambda kv: -sum(kv[1]))
    return [
        (k[0], k[1], len(v), sum(v), min(v), max(v), sum(v) * 100 / denominator if denominator else 0.0)
        for k, v in shown
    ]


_task_rows = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "C", "N/A", None]),
        st.sampled_from(["AI_CORE", "AI_VECTOR_CORE", "WRITE_BACK", "HCCL", None]),
        st.integers(0, 10**12),
        st.integers(0, 10**9),
    ).map(lambda r: (r[0], r[1], r[2], r[2] + r[3])),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(rows=_task_rows, cuts=st.lists(st.integers(0, 60), max_size=4))
def test_op_statistic_matches_a_plain_oracle_whatever_the_batches(
    rows: list[tuple[str | None, str | None, int | None, int | None]], cuts: list[int]
) -> None:
    """Any rows, any batch boundaries: the plain-Python §4d oracle's table."""
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    batches = [(TASKS, _tasks(rows[a:b])) for a, b in itertools.pairwise(bounds)]
    out = _run(OpStatistic(DEVICE), batches)
    got = [
        (r["op_type"], r["core_type"], r["count"], r["total_ns"], r["min_ns"], r["max_ns"], r["ratio"])
        for r in out
    ]
    expected = _op_oracle(rows)
    assert [g[:6] for g in got] == [e[:6] for e in expected]
    assert [g[6] for g in got] == pytest.approx([e[6] for e in expected])


def _snapshot_round_trip(make: Any, batches: list[tuple[str, pa.RecordBatch]]) -> None:
    """Half the input, snapshot, restore into a fresh operator, the rest: same output, same bytes."""
    whole = make()
    for stream, batch in batches:
        whole.push(stream, batch)
    first = make()
    half = len(batches) // 2
    for stream, batch in batches[:half]:
        first.push(stream, batch)
    blob = first.snapshot()
    resumed = make()
    resumed.restore(blob)
    assert resumed.snapshot() == blob
    for stream, batch in batches[half:]:
        resumed.push(stream, batch)
    assert resumed.snapshot() == whole.snapshot()
    [(_, expected)] = whole.finish()
    [(_, got)] = resumed.finish()
    assert got.equals(expected)


def test_op_statistic_snapshot_round_trips() -> None:
    """Snapshot/restore mid-stream changes nothing, byte for byte."""
    rng = np.random.default_rng(7)
    batches = []
    for _ in range(6):
        starts = rng.integers(0, 10**9, 40)
        rows = [
            (str(rng.choice(["A", "B", "N/A"])), "AI_CORE", int(s), int(s + rng.integers(1, 10**6)))
            for s in starts
        ]
        batches.append((TASKS, _tasks(rows)))
    _snapshot_round_trip(lambda: OpStatistic(DEVICE), batches)


def test_op_statistic_runs_in_a_pipeline_and_emits_at_the_end() -> None:
    """Wired into a Pipeline, the table arrives once, after every feed is exhausted."""
    batches = [
        _tasks([("A", "AI_CORE", 0, 10)]),
        _tasks([("A", "AI_CORE", 20, 50), ("B", "AI_CORE", 60, 61)]),
    ]
    feed = Feed(TASKS, iter(batches), "start_ns")
    out = list(Pipeline([feed], [OpStatistic(DEVICE)]).run([at("op_statistic", DEVICE)]))
    assert len(out) == 1
    assert [(r["op_type"], r["count"], r["total_ns"]) for r in out[0][1].to_pylist()] == [
        ("A", 2, 40),
        ("B", 1, 1),
    ]


def _comm(rows: list[tuple[str, int, int]]) -> pa.RecordBatch:
    return schema.conform(
        schema.TABLES["comm"],
        {
            "op_type": pa.array([r[0] for r in rows], pa.string()),
            "start_ns": pa.array([r[1] for r in rows], pa.int64()),
            "end_ns": pa.array([r[2] for r in rows], pa.int64()),
        },
    )


def test_comm_statistic_per_op_type_with_ratio_over_all_ops() -> None:
    """§4e: per op type count/total/min/avg/max, ratio over every op instance, total descending."""
    comm = at("comm", DEVICE)
    batches = [
        (comm, _comm([("hcom_allReduce_", 0, 1000), ("hcom_broadcast_", 1000, 1500)])),
        (comm, _comm([("hcom_allReduce_", 2000, 5000), ("hcom_broadcast_", 10, 20)])),
    ]
    # the collection starts at 25: the op 10..20 ended before it; the op 0..1000 runs across it and
    # counts whole (generate_op_report_data / GenerateOpReportData skip only ops ending before it)
    rows = _run(CommStatistic(DEVICE, start_ns=25), batches)
    assert [(r["op_type"], r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in rows] == [
        ("hcom_allReduce_", 2, 4000, 1000, 3000),
        ("hcom_broadcast_", 1, 500, 500, 500),
    ]
    assert rows[0]["ratio"] == pytest.approx(4000 * 100 / 4500)
    assert rows[0]["device_id"] == DEVICE
    _snapshot_round_trip(lambda: CommStatistic(DEVICE), batches)


def test_comm_statistic_breaks_a_total_tie_by_max_time() -> None:
    """msprof's Python: the HcclOpReport table by Max descending (``HcclCalculator._create_report``),
    re-sorted stably by Total descending (``ReportHcclStatisticData.report_hccl_op``)."""
    comm = at("comm", DEVICE)
    batch = _comm(
        [
            ("hcom_allGather_", 0, 1500),
            ("hcom_allReduce_", 2000, 2500),
            ("hcom_allGather_", 3000, 4500),
            ("hcom_allReduce_", 5000, 7500),  # total 3000 as allGather's, but max 2500 > 1500
            ("hcom_send_", 8000, 8100),
        ]
    )
    rows = _run(CommStatistic(DEVICE), [(comm, batch)])
    assert [(r["op_type"], r["total_ns"], r["max_ns"]) for r in rows] == [
        ("hcom_allReduce_", 3000, 2500),
        ("hcom_allGather_", 3000, 1500),
        ("hcom_send_", 100, 100),
    ]


def _api(rows: list[tuple[str, str, str | None, int, int]]) -> pa.RecordBatch:
    """API batch from (level, name, struct_type, start, end)."""
    return schema.conform(
        schema.TABLES["api"],
        {
            "level": pa.array([r[0] for r in rows], pa.string()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "struct_type": pa.array([r[2] for r in rows], pa.string()),
            "start_ns": pa.array([r[3] for r in rows], pa.int64()),
            "end_ns": pa.array([r[4] for r in rows], pa.int64()),
        },
    )


def test_api_statistic_by_hand() -> None:
    """§4e, msprof's Python path (``ApiStatisticViewer._api_statistic_reformat``): µs rounded to 3
    decimals, Avg rounded, population variance against the rounded Avg; rows by API name, then level
    name."""
    batch = _api(
        [
            ("acl", "aclrtMemcpy", "ignored", 0, 1000),
            ("acl", "aclrtMemcpy", "ignored", 0, 2000),
            ("acl", "aclrtMemcpy", None, 0, 4000),  # durations 1, 2, 4 µs
            ("node", "ignored", "launch", 0, 1500),
            ("runtime", "ignored", "launch", 0, 2500),
            ("communication", "hcom_allReduce_1", "ignored", 0, 700),
            ("hccl", "Launch_Ffts", None, 0, 300),  # unknown level, no struct type: its name
        ]
    )
    rows = _run(ApiStatistic(), [("api", batch)])
    assert [(r["level"], r["name"]) for r in rows] == [
        ("hccl", "Launch_Ffts"),
        ("acl", "aclrtMemcpy"),
        ("communication", "hcom_allReduce_1"),
        ("node", "launch"),  # same name: by level name, as msprof's Python returns them
        ("runtime", "launch"),
    ]
    memcpy = rows[1]
    assert (memcpy["total_us"], memcpy["count"], memcpy["min_us"], memcpy["max_us"]) == (7.0, 3, 1.0, 4.0)
    assert memcpy["avg_us"] == 2.333  # 7/3 rounded
    # ((1 - 2.333)² + (2 - 2.333)² + (4 - 2.333)²) / 3 = 4.666667 / 3 = 1.555556
    assert memcpy["variance"] == 1.556


def test_api_statistic_variance_is_exact_for_long_calls() -> None:
    """Seconds-long calls: the integer-sum variance equals the two-pass decimal one (no cancellation)."""
    durations = [3 * 10**12 + d for d in (0, 1001, 3003, 4007)]  # 50 min: µs² sums near 4e19
    batch = _api([("acl", "aclrtSynchronizeStream", None, 0, d) for d in durations])
    [row] = _run(ApiStatistic(), [("api", batch)])
    us = [Decimal(d) / 1000 for d in durations]
    avg = (sum(us) / len(us)).quantize(Decimal("0.001"), ROUND_HALF_UP)
    variance = sum((u - avg) ** 2 for u in us) / len(us)
    assert row["avg_us"] == float(avg)
    assert row["variance"] == float(variance.quantize(Decimal("0.001"), ROUND_HALF_UP))
    # avg 3e9 + 2.003 µs; deviations -2.003, -1.002, 1.000, 2.004: 10.032029 / 4 = 2.50800725
    assert row["variance"] == 2.508


def test_api_statistic_filters_by_end_and_round_trips_snapshots() -> None:
    """APIs that end before ``start_ns`` are left out; snapshots resume exactly."""
    batches = [("api", _api([("acl", "a", None, 0, 10), ("acl", "a", None, 0, 30)])), ("api", _api([]))]
    batches.append(("api", _api([("acl", "b", None, 5, 25), ("node", "x", "launch", 1, 2)])))
    rows = _run(ApiStatistic(start_ns=20), batches)
    assert [(r["name"], r["count"]) for r in rows] == [("a", 1), ("b", 1)]
    _snapshot_round_trip(ApiStatistic, batches)


def test_task_wait_time_by_hand_across_batches_and_devices() -> None:
    """§2.1: max(0, start - previous end), 0 for each device's first row; state carries over."""
    wait = TaskWaitTime()
    first = wait(np.array([100, 150, 160]), np.array([140, 170, 200]), np.array([0, 0, 0]))
    assert first.tolist() == [0, 10, 0]  # 160 starts before 170: clamped
    blob = wait.snapshot()
    second = wait(np.array([230, 5, 9]), np.array([240, 8, 20]), np.array([0, 1, 1]))
    assert second.tolist() == [30, 0, 1]
    resumed = TaskWaitTime()
    resumed.restore(blob)
    assert resumed(np.array([230, 5, 9]), np.array([240, 8, 20]), np.array([0, 1, 1])).tolist() == [30, 0, 1]
    assert wait(np.zeros(0), np.zeros(0)).tolist() == []


def test_task_wait_time_refuses_mismatched_columns() -> None:
    """Columns of different lengths are an error naming them."""
    with pytest.raises(ValueError, match="start_ns, end_ns"):
        TaskWaitTime()(np.array([1, 2]), np.array([3]))


def _msprof_task_time_rows(rows: list[tuple[int, int, int, int]]) -> list[int]:
    """A literal reading of msprof's Python TaskOpViewer._reformat_task_info / operate_type: the
    indices of the (stream, task, batch, context) rows task_time keeps."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for i, (stream, task, batch, _) in enumerate(rows):
        groups.setdefault((stream, task, batch), []).append(i)
    kept = []
    for members in groups.values():
        contexts = [rows[i][3] for i in members]
        if len(members) > 1 and any(0 < c != schema.NO_ID for c in contexts):
            continue  # FFTS+
        mix = len(members) > 1 and 0 in contexts
        kept += [i for i in members if not mix or rows[i][3] == 0]
    return sorted(kept)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 1), st.integers(0, 3), st.integers(0, 1), st.sampled_from([schema.NO_ID, 0, 1, 2])
        ),
        max_size=30,
    )
)
def test_task_time_groups_as_msprofs_python(rows: list[tuple[int, int, int, int]]) -> None:
    """task_time keeps lone rows, drops FFTS+ groups whole, keeps a MIX group's context-0 rows and a
    static graph's repeats (msprof_outputs.md §4e), whatever the mix of groups in a batch."""
    columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    batch = pa.record_batch(
        {
            name: pa.array(values, pa.int64())
            for name, values in zip(("stream_id", "task_id", "batch_id", "context_id"), columns, strict=True)
        }
    )
    assert np.flatnonzero(task_time_groups(batch)).tolist() == _msprof_task_time_rows(rows)


_parent_rows = st.lists(
    st.tuples(
        st.integers(0, 2),  # stream
        st.integers(0, 3),  # task
        st.sampled_from([schema.NO_ID, schema.NO_ID, 0, 1, 2]),  # context: a whole task or a sub-task
        st.integers(0, 50),  # start
        st.integers(0, 20),  # duration
    ),
    max_size=40,
)


@given(rows=_parent_rows)
@settings(max_examples=200, deadline=None)
def test_sub_task_parents_are_the_task_rows_with_a_sub_task_starting_within_them(
    rows: list[tuple[int, int, int, int, int]],
) -> None:
    batch = pa.record_batch(
        {
            "stream_id": pa.array([r[0] for r in rows], pa.int64()),
            "task_id": pa.array([r[1] for r in rows], pa.int64()),
            "batch_id": pa.array([0] * len(rows), pa.int64()),
            "context_id": pa.array([r[2] for r in rows], pa.int64()),
            "start_ns": pa.array([r[3] for r in rows], pa.int64()),
            "end_ns": pa.array([r[3] + r[4] for r in rows], pa.int64()),
        }
    )
    expected = [
        context == schema.NO_ID
        and any(
            (s, t) == (stream, task) and c != schema.NO_ID and begin <= b <= begin + length
            for s, t, c, b, _ in rows
        )
        for stream, task, context, begin, length in rows
    ]
    assert sub_task_parents(batch).to_pylist() == expected
