"""Hand-built framework and task batches for the operator tests, in the shapes the feeds deliver."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from profstream.engine.runtime import Emit, Operator, at
from profstream.engine.schema import TABLES, conform, tasks_schema

PID = 100
#: connection ids: one per launched task across every batch built here (one id is one launching API)
_CONNECTIONS = itertools.count(1)


def op_range(rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """torch_op_range records: (name, start, end[, tid[, seq[, fwd tid]]])."""
    full = [(*r, *(1, -1, 0)[len(r) - 3 :]) for r in rows]
    return pa.RecordBatch.from_pydict(
        {
            "start_ns": pa.array([r[1] for r in full], pa.int64()),
            "end_ns": pa.array([r[2] for r in full], pa.int64()),
            "sequence_number": pa.array([r[4] for r in full], pa.int64()),
            "process_id": pa.array([PID] * len(full), pa.uint64()),
            "start_thread_id": pa.array([r[3] for r in full], pa.uint64()),
            "end_thread_id": pa.array([r[3] for r in full], pa.uint64()),
            "forward_thread_id": pa.array([r[5] for r in full], pa.uint64()),
            "name": pa.array([r[0] for r in full], pa.string()),
            "input_shapes": pa.array([f"{r[0]},1" for r in full], pa.string()),
            "input_dtypes": pa.nulls(len(full), pa.string()),
            "call_stack": pa.nulls(len(full), pa.string()),
            "module_hierarchy": pa.nulls(len(full), pa.string()),
        }
    )


def op_mark(rows: Sequence[tuple[int, int, int, int, str]]) -> pa.RecordBatch:
    """torch_op_mark records: (time, category, correlation id, tid, op name)."""
    return pa.RecordBatch.from_pydict(
        {
            "time_ns": pa.array([r[0] for r in rows], pa.int64()),
            "category": pa.array([r[1] for r in rows], pa.uint64()),
            "correlation_id": pa.array([r[2] for r in rows], pa.uint64()),
            "thread_id": pa.array([r[3] for r in rows], pa.uint64()),
            "process_id": pa.array([PID] * len(rows), pa.uint64()),
            "name": pa.array([r[4] for r in rows], pa.string()),
        }
    )


def queue_event(queue: str, corr: int, tid: int, name: str, span: tuple[int, int]) -> list[tuple[Any, ...]]:
    """The start and end marks of one enqueue or dequeue event over ``span``."""
    first = 0 if queue == "enqueue" else 2
    return [(span[0], first, corr, tid, name), (span[1], first + 1, corr, tid, name)]


#: (op name, GE task type, host task type) of the task kinds ``tasks`` builds
TASK_KINDS = {
    "compute": ("MatMul", "AI_CORE", "KERNEL_AICORE"),
    "hccl": ("hcom_allReduce_", "HCCL", "NOTIFY_WAIT"),  # an HCCL task: its op's flow is elsewhere
    "hccl_copy": ("hcom_allReduce_", "HCCL", "MEMCPY_ASYNC"),  # a copy inside a communication op
    "memcpy": (None, None, "MEMCPY_ASYNC"),
    "unnamed": (None, None, "EVENT_RECORD"),
}


def tasks(rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """tasks rows: (device, stream, start, launch or None[, kind of TASK_KINDS, "compute" if left out
    [, connection id]]); a launched task has a connection id of its own unless given one (one API's
    tasks share it)."""
    kinds = [TASK_KINDS[r[4] if len(r) > 4 else "compute"] for r in rows]
    return conform(
        tasks_schema(),
        {
            "device_id": pa.array([r[0] for r in rows], pa.int32()),
            "stream_id": pa.array([r[1] for r in rows], pa.int32()),
            "task_id": pa.array(np.arange(len(rows)), pa.int32()),
            "start_ns": pa.array([r[2] for r in rows], pa.int64()),
            "end_ns": pa.array([r[2] + 5 for r in rows], pa.int64()),
            "launch_ns": pa.array([r[3] for r in rows], pa.int64()),
            "connection_id": pa.array(
                [None if r[3] is None else r[5] if len(r) > 5 else next(_CONNECTIONS) for r in rows],
                pa.int64(),
            ),
            "op_name": pa.array([k[0] for k in kinds], pa.string()),
            "task_type": pa.array([k[1] for k in kinds], pa.string()),
            "host_task_type": pa.array([k[2] for k in kinds], pa.string()),
        },
    )


def comm_ops(rows: Sequence[tuple[int, str | None, int, int | None]]) -> pa.RecordBatch:
    """comm rows: (device, group name, start, launch or None); each lasts 50 ns."""
    return conform(
        TABLES["comm"],
        {
            "device_id": pa.array([r[0] for r in rows], pa.int32()),
            "op_name": pa.array([f"hcom_allReduce__{i}" for i in range(len(rows))], pa.string()),
            "group_name": pa.array([r[1] for r in rows], pa.string()),
            "start_ns": pa.array([r[2] for r in rows], pa.int64()),
            "end_ns": pa.array([r[2] + 50 for r in rows], pa.int64()),
            "launch_ns": pa.array([r[3] for r in rows], pa.int64()),
            "connection_id": pa.array(
                [None if r[3] is None else 100 + i for i, r in enumerate(rows)], pa.int64()
            ),
        },
    )


Step = tuple[str, pa.RecordBatch] | int  # a batch to push, or a watermark to advance to


def one_kernel_per_flow_id_steps() -> list[Step]:
    """Copies that share their API's flow id (9001, 9002, across two batches; 9003 listed late first)
    and an HCCL copy with its communication op's id (100)."""
    first = [(0, 2, 500, 10, "memcpy", 9001), (0, 4, 540, 20, "hccl_copy", 100)]
    second = [(0, 2, 520, 10, "memcpy", 9001), (0, 2, 530, 30, "memcpy", 9002)]
    second += [(0, 2, 580, 40, "memcpy", 9003), (0, 2, 570, 40, "memcpy", 9003)]
    return [
        ("torch_op_range", op_range([("A", 0, 100)])),
        (at("tasks", 0), tasks(first)),
        (at("comm", 0), comm_ops([(0, "group_a", 600, 20)])),
        (at("tasks", 0), tasks(second)),
    ]


def collect(emits: Iterable[Emit], into: dict[str, list[pa.RecordBatch]]) -> None:
    for name, batch in emits:
        into[name].append(batch)


def drive(op: Operator, steps: Sequence[Step]) -> dict[str, list[dict[str, Any]]]:
    """Push and advance as ``steps`` say, then finish; every output as rows."""
    out: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    for step in steps:
        if isinstance(step, int):
            collect(op.advance(step), out)
        else:
            op.push(*step)
    collect(op.finish(), out)
    return {name: pa.Table.from_batches(b).to_pylist() for name, b in out.items()}


def drive_resumed(make: Any, steps: Sequence[Step], cut: int) -> dict[str, list[dict[str, Any]]]:
    """Like :func:`drive`, but snapshot after ``cut`` steps and continue in a fresh operator."""
    first = make()
    out: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    for step in steps[:cut]:
        if isinstance(step, int):
            collect(first.advance(step), out)
        else:
            first.push(*step)
    blob = first.snapshot()
    second = make()
    second.restore(blob)
    assert second.snapshot() == blob, "a restored state must snapshot to the same bytes"
    for step in steps[cut:]:
        if isinstance(step, int):
            collect(second.advance(step), out)
        else:
            second.push(*step)
    collect(second.finish(), out)
    return {name: pa.Table.from_batches(b).to_pylist() for name, b in out.items()}
