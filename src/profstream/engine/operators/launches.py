"""Where a host launch's HostToDevice flow ends: on which device rows, and so which rows are an op's kernels.

msprof's C++ timeline ends a HostToDevice flow (msprof_outputs.md §3.7; ``AscendHardwareAssembler::
GenerateTaskConnectionTrace``, ``GenerateMemcpyAsyncConnectionTrace``, the hccl assembler) on

* a device task with a row in the compute-task info (ge_info ``TaskInfo``, where the assembler looks
  up op names): a task with an op name that is not an HCCL task other than a kernel
  (:func:`hccl_non_kernels`). An HCCL kernel, a ``KERNEL*`` or ``STARS_COMMON`` launch inside a
  communication API, has a row (``TreeAnalyzer::IsComputeTask`` counts it,
  ``UpdateComputeDescForHcclSituation`` names it after its communication op,
  ``CANNTraceDBDumper::DumpOpDesc`` writes it), so its flow ends on it as well as on its op; the
  Python path agrees (``HostToDevice.add_task_connection_data`` ends a flow on every task whose
  stream, task and batch ids the ``TaskInfo`` table has);
* every MEMCPY_ASYNC task;
* each communication op, at its start on its group's thread;

always from a launching API with a connection id. Only drawn rows can be flow ends: a MIX or FFTS+
task's whole-task row, which the timeline leaves out for its sub-task rows
(:func:`~profstream.engine.operators.statistics.sub_task_parents`), is not one.

torch_npu takes an op's kernels from these ends (``CANNFileParser.combine_acl_to_npu`` reads the
flows of msprof's json; ``FwkCANNRelationParser`` links them to torch ops), so the framework operators
select their kernels with the same functions the msprof timeline draws the flows with
(:func:`kernel_rows`), and find the kernel an ``async_npu`` flow ends on with :func:`claim_kernels`.
``combine_acl_to_npu`` keeps one ``f`` per flow id (``setdefault``), the first in msprof's json. The
flow id is the launch's connection id (C++ ``connection_id << 32``, the form the timeline writes,
:mod:`~profstream.engine.layouts.timeline`), so an op gets one kernel per connection id
(:class:`FirstKernels`): of two MEMCPY_ASYNC copies one API launched, or the contexts of a MIX task,
only the first. The first is the earliest start (then stream, task id): in the 910B
trace_view.json files in shared/realdata, an API that launched two copies (five in each file) has its
``async_npu`` flow on the earlier copy, which is also the first ``f`` in the file. Choice: those
files were written by msprof's Python path, whose flow id is the connection id for a copy but one
per task for a kernel (``(device<<80)+(stream<<64)+(task<<48)+(batch<<32)+context``), where two
kernels of one launch would both be linked; no launch there has two kernel ends, and the C++ path,
which the timeline follows, shares the id.
Choice where torch_npu's rule leaves room: a communication op's flow id is also that of its HCCL
tasks (kernels and MEMCPY_ASYNC copies inside it), and which of them comes first depends on how
msprof orders its layers in the file. Kernels here leave every HCCL task out (:func:`hccl_tasks`),
so the op's flow goes to the communication op (the same trace_view.json files link every
communication op). An HCCL-typed task outside any communication API, the only ``f`` of its flow id,
is left out as well: the tasks table does not tell it from one inside.
Not reproduced: the first kernel of a flow id is found within a ``tasks`` batch and among the ids
kept in the :data:`FLOW_ID_SPAN_NS` before the newest kernel of its device; a later kernel of the id
outside that span, or one that starts before a kernel of the id kept from an earlier batch, is
linked as well.
Flows to ACL record/wait-event tasks (C++ ``aclEvent_``) are not drawn: the tasks table does not say
which API launched a task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.kernels._dispatch import NULL, Int64Array
from profstream.engine.operators._state import Columns, concat, empty_columns, ints, take
from profstream.engine.operators.api import dense_ids
from profstream.engine.operators.host_join import MEMCPY_ASYNC
from profstream.engine.operators.statistics import sub_task_parents

#: GE task types of HCCL tasks (the host join gives them their communication op's name)
HCCL_TASK_TYPES = ("HCCL", "HCCL_AI_CPU")


def _launched(rows: pa.RecordBatch) -> pa.Array:
    return pc.and_(pc.is_valid(rows.column("connection_id")), pc.is_valid(rows.column("launch_ns")))


def hccl_tasks(rows: pa.RecordBatch) -> pa.Array:
    """Which rows are HCCL tasks (:data:`HCCL_TASK_TYPES`)."""
    task_type = rows.column("task_type").cast(pa.string())
    return pc.is_in(task_type, value_set=pa.array(HCCL_TASK_TYPES)).fill_null(False)


def kernel_launches(rows: pa.RecordBatch) -> pa.Array:
    """Which tasks were launched as kernels: runtime type ``KERNEL*`` or ``STARS_COMMON`` (msprof's
    C++ ``TreeAnalyzer::IsComputeTask``, Python ``TaskGear.is_kernel_task``, which also count an
    ``FFTS_PLUS`` task, but not inside a communication API, where this is asked)."""
    host = rows.column("host_task_type").cast(pa.string())
    return pc.or_(pc.starts_with(host, "KERNEL"), pc.equal(host, "STARS_COMMON")).fill_null(False)


def hccl_non_kernels(rows: pa.RecordBatch) -> pa.Array:
    """HCCL tasks that are no kernel: the notify, copy, reduce and event tasks of a communication op,
    and the FFTS+ tasks (with their contexts) it launches. msprof's compute-task info, where its
    timeline and task_time look up a task's op name and GE task type, has no row of them (C++
    ``IsComputeTask`` feeds ``computeTasks_``, which ``CANNTraceDBDumper::DumpOpDesc`` writes to
    ge_info ``TaskInfo``; Python ``TaskGear`` appends ``task_info`` only in ``add_kernel_task``)."""
    return pc.and_(hccl_tasks(rows), pc.invert(kernel_launches(rows)))


def task_flow_ends(tasks: pa.RecordBatch) -> pa.Array:
    """Which ``tasks`` rows a HostToDevice flow ends on (module docstring)."""
    compute = pc.and_kleene(pc.is_valid(tasks.column("op_name")), pc.invert(hccl_non_kernels(tasks)))
    memcpy = pc.equal(tasks.column("host_task_type").cast(pa.string()), MEMCPY_ASYNC)
    ends = pc.and_(_launched(tasks), pc.fill_null(pc.or_kleene(compute, memcpy), False))
    return pc.and_(ends, pc.invert(sub_task_parents(tasks)))


def op_flow_ends(comm: pa.RecordBatch) -> pa.Array:
    """Which ``comm`` rows (communication ops) a HostToDevice flow ends on: those with a launch."""
    return _launched(comm)


#: the columns of a kernel row (:func:`kernel_rows`) that those who join kernels read
KERNEL_COLUMNS = (
    "device_id",
    "stream_id",
    "task_id",
    "start_ns",
    "end_ns",
    "launch_ns",
    "connection_id",
    "task_type",
    "group_name",
)
#: how long after the first kernel of a flow id a later one may start and still be known as later
#: (module docstring): one API's kernels run one after the other on its stream
FLOW_ID_SPAN_NS = 1_000_000_000


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
    is null there too). A ``tasks`` batch's kernels are its flow ends but HCCL tasks (module
    docstring), every one of them (:class:`FirstKernels` then keeps the first of each flow id). The
    arrays are shared with the next caller asking about the same batch: read them, do not change them."""
    if _LastKernels.batch is batch and _LastKernels.ops == ops and _LastKernels.answer is not None:
        return _LastKernels.answer
    kept = batch.select([name for name in KERNEL_COLUMNS if name in batch.schema.names])
    ends = op_flow_ends(batch) if ops else pc.and_(task_flow_ends(batch), pc.invert(hccl_tasks(batch)))
    rows = kept.filter(ends)
    stream = np.full(rows.num_rows, NULL, np.int64) if ops else ints(rows.column("stream_id"))
    _LastKernels.batch, _LastKernels.ops, _LastKernels.answer = batch, ops, (rows, stream)
    return rows, stream


_SEEN = ("device", "connection", "start")


class FirstKernels:
    """The kernels an op gets (:func:`kernel_rows`), only the first of each flow id among a device's
    ``tasks`` kernels (module docstring). State: the flow ids kept in the last :data:`FLOW_ID_SPAN_NS`
    of each device's kernels, one row each. Each operator that links kernels holds its own and asks
    about every ``tasks`` batch, in order."""

    def __init__(self, state: Columns | None = None) -> None:
        self._seen = empty_columns(_SEEN) if state is None else state

    def state(self) -> Columns:
        return self._seen

    def rows(self, batch: pa.RecordBatch, *, ops: bool) -> tuple[pa.RecordBatch, Int64Array]:
        """:func:`kernel_rows` of ``batch`` (a communication op has a flow id of its own), a ``tasks``
        batch's without the later kernels of a flow id."""
        rows, stream = kernel_rows(batch, ops=ops)
        if ops or not rows.num_rows:
            return rows, stream
        new = {
            name: ints(rows.column(c))
            for name, c in zip(_SEEN, ("device_id", "connection_id", "start_ns"), strict=True)
        }
        order = np.lexsort(
            (ints(rows.column("task_id")), stream, new["start"], new["connection"], new["device"])
        )
        device, connection = new["device"][order], new["connection"][order]
        first = np.ones(order.size, np.bool_)
        first[1:] = (device[1:] != device[:-1]) | (connection[1:] != connection[:-1])
        keep = np.zeros(order.size, np.bool_)
        keep[order[first]] = True
        held = self._seen
        ids = dense_ids(np.r_[held["device"], new["device"]], np.r_[held["connection"], new["connection"]])
        keep &= ~np.isin(ids[held["device"].size :], ids[: held["device"].size])
        kept = take(new, keep)
        seen = concat(held, kept)
        latest = {int(d): int(new["start"][new["device"] == d].max()) for d in np.unique(new["device"])}
        stale = np.zeros(seen["start"].size, np.bool_)
        for d, newest in latest.items():
            stale |= (seen["device"] == d) & (seen["start"] < newest - FLOW_ID_SPAN_NS)
        self._seen = take(seen, ~stale)
        return rows.filter(pa.array(keep)), stream[keep]


def claim_kernels(held: tuple[Int64Array, ...], flows: tuple[Int64Array, ...]) -> Int64Array:
    """The held kernel (row) each flow ends on, -1 if none: the row whose key columns (``held``, e.g.
    device, stream, start) equal the flow's (``flows``, the same columns). Flows of one key take
    distinct kernels of it, in order (a MIX task's contexts may share a stream and a start)."""
    n, m = held[0].size, flows[0].size
    if n == 0:
        return np.full(m, -1, np.int64)
    keys = [np.r_[h, f] for h, f in zip(held, flows, strict=True)]
    is_flow = np.r_[np.zeros(n, np.bool_), np.ones(m, np.bool_)]
    # one sort: per key its kernels, then its flows, each in row order; the r-th flow of a key takes
    # the r-th kernel of it
    order = np.lexsort((is_flow, *reversed(keys)))
    new_key = np.zeros(n + m, np.bool_)
    new_key[0] = True
    for column in keys:
        ordered = column[order]
        new_key[1:] |= ordered[1:] != ordered[:-1]
    side = is_flow[order]
    new_side = new_key.copy()
    new_side[1:] |= side[1:] != side[:-1]
    position = np.arange(n + m)
    key_start = np.maximum.accumulate(np.where(new_key, position, 0))
    side_start = np.maximum.accumulate(np.where(new_side, position, 0))
    rank = position - side_start  # a flow's place among its key's flows
    kernels = side_start - key_start  # a flow's key's kernels (they sort before it)
    claimed = np.full(m, -1, np.int64)
    hit = side & (rank < kernels)
    claimed[order[hit] - n] = order[(key_start + rank)[hit]]
    return claimed
