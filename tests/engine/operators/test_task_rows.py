"""TaskRowMerge: device tasks and communication op rows merged in start order, as the watermarks allow.

The reference is the spool-and-sort op_summary did before the merge streamed: every task and op row,
sorted by start time, tasks before op rows that start with them, ties in arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.engine.operators.task_rows import TaskRowMerge, is_op_row
from profstream.engine.runtime import DONE, at
from profstream.engine.schema import TABLES, conform
from tests.engine.operators.harness import Step, check_snapshot, drive

TASKS, COMM, ROWS = at("tasks", 0), at("comm", 0), at("task_rows", 0)


def tasks(starts: Sequence[int], first_id: int, stream: int = 5) -> pa.RecordBatch:
    n = len(starts)
    return conform(
        TABLES["tasks"],
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([stream] * n, pa.int32()),
            "task_id": pa.array(range(first_id, first_id + n), pa.int32()),
            "start_ns": pa.array(starts, pa.int64()),
            "end_ns": pa.array([s + 7 for s in starts], pa.int64()),
            "task_type": pa.array(["AI_CORE"] * n).dictionary_encode(),
            "op_name": pa.array([f"task{first_id + i}" for i in range(n)]).dictionary_encode(),
        },
    )


def ops(starts: Sequence[int], first_id: int) -> pa.RecordBatch:
    n = len(starts)
    return conform(
        TABLES["comm"],
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "start_ns": pa.array(starts, pa.int64()),
            "end_ns": pa.array([s + 30 for s in starts], pa.int64()),
            "op_name": pa.array([f"hcom_allReduce__{first_id + i}" for i in range(n)]),
            "op_type": pa.array(["hcom_allReduce_"] * n),
            "model_id": pa.array([4] * n, pa.int64()),
        },
    )


def rows_of(batches: Sequence[pa.RecordBatch]) -> list[tuple[int, str]]:
    """(start, op name) of every row, in order."""
    out: list[tuple[int, str]] = []
    for batch in batches:
        names = batch.column("op_name").cast(pa.string()).to_pylist()
        out += zip(batch.column("start_ns").to_pylist(), names, strict=True)
    return out


def test_op_rows_take_the_task_schema_and_follow_tasks_that_start_with_them() -> None:
    op = TaskRowMerge(0)
    out = drive(op, [(TASKS, tasks([10, 20], 0), 15), (COMM, ops([20, 5], 0), 25)])
    assert [name for name, _ in out] == [ROWS]  # at 15 the task batch was not wholly final
    merged = pa.Table.from_batches([b for _, b in out])
    assert rows_of(merged.to_batches()) == [
        (5, "hcom_allReduce__1"),
        (10, "task0"),
        (20, "task1"),
        (20, "hcom_allReduce__0"),
    ]
    assert is_op_row(merged.combine_chunks().to_batches()[0]).to_pylist() == [True, False, False, True]
    op_rows = merged.filter(is_op_row(merged.combine_chunks().to_batches()[0]))
    assert op_rows.column("block_dim").to_pylist() == [0, 0]
    assert op_rows.column("task_type").null_count == 2  # the layout names them
    assert op_rows.column("end_ns").to_pylist() == [35, 50]
    assert op_rows.column("model_id").to_pylist() == [4, 4]


def test_a_task_batch_is_held_until_the_watermark_passes_its_last_row() -> None:
    op = TaskRowMerge(0)
    op.push(TASKS, tasks([10, 30], 0))
    assert op.advance(20) == []  # its first row alone is final: the batch stays whole
    op.push(COMM, ops([15], 0))
    assert op.advance(25) == []  # the op row waits behind the held task that starts before it
    (emit,) = op.advance(31)
    assert rows_of([emit[1]]) == [(10, "task0"), (15, "hcom_allReduce__0"), (30, "task1")]


def test_without_communication_the_rows_are_the_tasks() -> None:
    op = TaskRowMerge(0, comm=False)
    assert op.inputs == (TASKS,)
    out = drive(op, [(TASKS, tasks([1, 2], 0), 3)])
    assert rows_of([b for _, b in out]) == [(1, "task0"), (2, "task1")]
    with pytest.raises(KeyError, match="comm@0"):
        op.push(COMM, ops([1], 0))


@st.composite
def arrivals(draw: st.DrawFn) -> dict[str, Any]:
    """Task batches in start order and op batches in any order, interleaved, each push followed by
    the tightest watermark the inputs may promise, less a random slack."""
    task_starts = sorted(draw(st.lists(st.integers(0, 200), max_size=40)))
    cuts = sorted(draw(st.lists(st.integers(0, len(task_starts)), max_size=6)))
    task_batches = [task_starts[a:b] for a, b in zip([0, *cuts], [*cuts, len(task_starts)], strict=True)]
    task_batches = [b for b in task_batches if b]
    op_starts = draw(st.lists(st.integers(0, 200), max_size=12))
    op_batches = [op_starts[i : i + 3] for i in range(0, len(op_starts), 3)]
    order = draw(st.permutations([TASKS] * len(task_batches) + [COMM] * len(op_batches)))
    slack = draw(st.lists(st.integers(0, 30), min_size=len(order), max_size=len(order)))
    return {"tasks": task_batches, "ops": op_batches, "order": order, "slack": slack}


def steps_of(work: dict[str, Any]) -> list[Step]:
    pending = {TASKS: list(work["tasks"]), COMM: list(work["ops"])}
    ids = {TASKS: 0, COMM: 0}
    steps: list[Step] = []
    for stream, slack in zip(work["order"], work["slack"], strict=True):
        starts = pending[stream].pop(0)
        batch = tasks(starts, ids[stream]) if stream == TASKS else ops(starts, ids[stream])
        ids[stream] += len(starts)
        # tasks promise their next batch's first start; comm the earliest start still to come
        future = [b[0] for b in pending[TASKS][:1]] + [s for b in pending[COMM] for s in b]
        steps.append((stream, batch, min(future, default=DONE) - (slack if future else 0)))
    return steps


def reference(work: dict[str, Any]) -> list[tuple[int, str]]:
    rows = [(s, 0, i, f"task{i}") for i, s in enumerate(s for b in work["tasks"] for s in b)]
    rows += [(s, 1, i, f"hcom_allReduce__{i}") for i, s in enumerate(s for b in work["ops"] for s in b)]
    return [(start, name) for start, _, _, name in sorted(rows)]


@settings(max_examples=200, deadline=None)
@given(arrivals())
def test_merged_rows_equal_sorting_everything_at_the_end(work: dict[str, Any]) -> None:
    out = drive(TaskRowMerge(0), steps_of(work))
    assert rows_of([b for _, b in out]) == reference(work)
    # every task batch comes out whole, in one emitted batch (op_summary finds sub-task parents there)
    emitted = [set(b.column("op_name").cast(pa.string()).to_pylist()) for _, b in out]
    first = 0
    for batch in work["tasks"]:
        names = {f"task{i}" for i in range(first, first + len(batch))}
        first += len(batch)
        assert sum(1 for e in emitted if names & e) == 1


@settings(max_examples=50, deadline=None)
@given(arrivals(), st.data())
def test_snapshot_restore_continues_like_an_uninterrupted_run(
    work: dict[str, Any], data: st.DataObject
) -> None:
    steps = steps_of(work)
    check_snapshot(lambda: TaskRowMerge(0), steps, data.draw(st.integers(0, len(steps))))
