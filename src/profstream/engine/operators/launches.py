"""Where a host launch's HostToDevice flow ends: on which device rows, and so which rows are an op's kernels.

msprof's C++ timeline ends a HostToDevice flow (msprof_outputs.md §3.7; ``AscendHardwareAssembler::
GenerateTaskConnectionTrace``, ``GenerateMemcpyAsyncConnectionTrace``, the hccl assembler) on

* a device task with an op name from its compute-task info that is not an HCCL task (HCCL tasks carry
  their communication op's name; their op's flow ends on the Communication layer instead);
* every MEMCPY_ASYNC task;
* each communication op, at its start on its group's thread;

always from a launching API with a connection id. Only drawn rows can be flow ends: a MIX or FFTS+
task's whole-task row, which the timeline leaves out for its sub-task rows
(:func:`~profstream.engine.operators.statistics.sub_task_parents`), is not one.

torch_npu takes an op's kernels from exactly these ends (``CANNFileParser`` reads the flows of msprof's
json; ``FwkCANNRelationParser`` links them to torch ops), so the framework operators select their
kernels with the same two functions the msprof timeline draws the flows with (:func:`kernel_rows`),
and find the kernel an ``async_npu`` flow ends on with :func:`claim_kernels`. Flows to ACL
record/wait-event tasks (C++ ``aclEvent_``) are not drawn: the tasks table does not say which API
launched a task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.kernels._dispatch import NULL, Int64Array
from profstream.engine.operators._state import find, ints
from profstream.engine.operators.api import dense_ids
from profstream.engine.operators.host_join import MEMCPY_ASYNC
from profstream.engine.operators.statistics import sub_task_parents

#: GE task types of HCCL tasks (the host join gives them their communication op's name)
HCCL_TASK_TYPES = ("HCCL", "HCCL_AI_CPU")


def _launched(rows: pa.RecordBatch) -> pa.Array:
    return pc.and_(pc.is_valid(rows.column("connection_id")), pc.is_valid(rows.column("launch_ns")))


def task_flow_ends(tasks: pa.RecordBatch) -> pa.Array:
    """Which ``tasks`` rows a HostToDevice flow ends on (module docstring)."""
    task_type = tasks.column("task_type").cast(pa.string())
    compute = pc.and_kleene(
        pc.is_valid(tasks.column("op_name")),
        pc.invert(pc.is_in(task_type, value_set=pa.array(HCCL_TASK_TYPES))),
    )
    memcpy = pc.equal(tasks.column("host_task_type").cast(pa.string()), MEMCPY_ASYNC)
    ends = pc.and_(_launched(tasks), pc.fill_null(pc.or_kleene(compute, memcpy), False))
    return pc.and_(ends, pc.invert(sub_task_parents(tasks)))


def op_flow_ends(comm: pa.RecordBatch) -> pa.Array:
    """Which ``comm`` rows (communication ops) a HostToDevice flow ends on: those with a launch."""
    return _launched(comm)


#: the columns of a kernel row (:func:`kernel_rows`) that those who join kernels read
KERNEL_COLUMNS = ("device_id", "stream_id", "start_ns", "end_ns", "launch_ns", "task_type", "group_name")


class _LastKernels:
    """The answer for the last batch :func:`kernel_rows` was asked about: FrameworkOps and
    FrameworkSteps both ask about every ``tasks`` batch of a pipeline, one after the other. The batch
    is held, so its identity cannot be taken by another one."""

    batch: pa.RecordBatch | None = None
    ops = False
    answer: tuple[pa.RecordBatch, Int64Array] | None = None


def kernel_rows(batch: pa.RecordBatch, *, ops: bool) -> tuple[pa.RecordBatch, Int64Array]:
    """The rows of a ``tasks`` batch (``ops`` False) or a ``comm`` batch (``ops`` True) that are kernels,
    with the :data:`KERNEL_COLUMNS` the batch has (a ``tasks`` batch has some forty others), and each
    one's stream id: NULL for a communication op, which has none (an ``async_npu`` flow's ``dst_tid``
    is null there too). The arrays are shared with the next caller asking about the same batch: read
    them, do not change them."""
    if _LastKernels.batch is batch and _LastKernels.ops == ops and _LastKernels.answer is not None:
        return _LastKernels.answer
    kept = batch.select([name for name in KERNEL_COLUMNS if name in batch.schema.names])
    rows = kept.filter(op_flow_ends(batch) if ops else task_flow_ends(batch))
    stream = np.full(rows.num_rows, NULL, np.int64) if ops else ints(rows.column("stream_id"))
    _LastKernels.batch, _LastKernels.ops, _LastKernels.answer = batch, ops, (rows, stream)
    return rows, stream


def claim_kernels(held: tuple[Int64Array, ...], flows: tuple[Int64Array, ...]) -> Int64Array:
    """The held kernel (row) each flow ends on, -1 if none: the row whose key columns (``held``, e.g.
    device, stream, start) equal the flow's (``flows``, the same columns). Flows of one key take
    distinct kernels of it, in order (a MIX task's contexts may share a stream and a start)."""
    n = held[0].size
    if n == 0:
        return np.full(flows[0].size, -1, np.int64)
    ids = dense_ids(*(np.r_[h, f] for h, f in zip(held, flows, strict=True)))
    ranked = dense_ids(ids, np.r_[_rank_within(ids[:n]), _rank_within(ids[n:])])
    kernel_keys, flow_keys = ranked[:n], ranked[n:]
    order = np.argsort(kernel_keys, kind="stable")
    at = find(kernel_keys[order], flow_keys)
    return np.where(at >= 0, order[np.maximum(at, 0)], -1).astype(np.int64)


def _rank_within(keys: Int64Array) -> Int64Array:
    """The rank of each row among the rows of its key, in row order."""
    order = np.lexsort((np.arange(keys.size), keys))
    sorted_keys = keys[order]
    first = (
        np.r_[0, np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1] if keys.size else np.zeros(0, int)
    )
    starts = np.repeat(first, np.diff(np.r_[first, keys.size]))
    rank = np.empty(keys.size, np.int64)
    rank[order] = np.arange(keys.size) - starts
    return rank
