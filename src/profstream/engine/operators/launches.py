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
kernels with the same two functions the msprof timeline draws the flows with. Flows to ACL
record/wait-event tasks (C++ ``aclEvent_``) are not drawn: the tasks table does not say which API
launched a task.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.operators.statistics import sub_task_parents

#: GE task types of HCCL tasks (the host join gives them their communication op's name)
HCCL_TASK_TYPES = ("HCCL", "HCCL_AI_CPU")
MEMCPY_ASYNC = "MEMCPY_ASYNC"


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
