"""``tasks@d``, ``comm@d`` -> :class:`TaskRowMerge` -> ``task_rows@d``: op_summary's rows in start order.

msprof's op_summary (and torch_npu's kernel_details) list the device tasks and, merged in by start
time, one row per communication op (msprof_outputs.md §2.1 "communication rows"), and the Task Wait
Time runs over both. Op rows settle later than the tasks around them (Communication emits an op when
its instance is complete), so this operator holds the tasks until the communication watermark has
passed them and emits both, merged and in start order, as they become final: the outputs can then
render op_summary while the pipeline runs, instead of spooling every task and sorting at the end.

An op row has the task schema with no stream or task id (which every device task has; that is how
an output tells the two apart), its op name, type, start, end and model id, Block Dim 0, no context
id, and no task type: the layout names it (``COMMUNICATION`` in op_summary, ``HCCL`` in
kernel_details). At equal start times a task comes before an op row.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import NO_ID, conform, tasks_schema

#: the columns of a ``comm`` row an op row keeps
OP_COLUMNS = ("device_id", "start_ns", "end_ns", "op_name", "op_type", "model_id")


def is_op_row(rows: pa.RecordBatch | pa.Table) -> pa.Array | pa.ChunkedArray:
    """Which rows of ``task_rows`` are communication op rows (no stream id)."""
    return rows.column("stream_id").is_null()


class TaskRowMerge(Operator):
    """Device tasks and communication op rows of one device, merged in start order (module docstring).

    Holds the task batches not wholly below the lower of the two input watermarks, and the op rows
    not below them: about one Communication hold (``comm.HOLD_NS``) of tasks. Without ``comm`` (no
    HCCL data) the rows are the tasks alone.
    """

    def __init__(self, device_id: int, metric_columns: Iterable[str] = (), *, comm: bool = True) -> None:
        self._tasks_in, self._comm_in = at("tasks", device_id), at("comm", device_id)
        self.inputs = (self._tasks_in, self._comm_in) if comm else (self._tasks_in,)
        self.outputs = (at("task_rows", device_id),)
        self.schema = tasks_schema(metric_columns)
        # HostJoin's batches, each kept whole: a MIX or FFTS+ task's rows come in one batch, and
        # op_summary finds the whole-task rows it leaves out within a batch (sub_task_parents)
        self._tasks: list[pa.RecordBatch] = []
        self._ops: list[pa.RecordBatch] = []  # in settling order

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == self._tasks_in:
            self._tasks.append(batch)
        elif stream == self._comm_in and stream in self.inputs:
            self._ops.append(self._op_rows(batch))
        else:
            raise self.unknown_input(stream)

    def _op_rows(self, comm: pa.RecordBatch) -> pa.RecordBatch:
        n = comm.num_rows
        return conform(
            self.schema,
            {
                **{name: comm.column(name).cast(self.schema.field(name).type) for name in OP_COLUMNS},
                "block_dim": pa.array(np.zeros(n, np.int32)),
                "context_id": pa.array(np.full(n, NO_ID, np.int64)),
            },
        )

    def advance(self, watermark: int) -> list[Emit]:
        # task batches come in start order: the whole ones below the watermark are final, and op
        # rows are final below both the watermark and the first task still held
        done = 0
        while done < len(self._tasks) and _last_start(self._tasks[done]) < watermark:
            done += 1
        tasks, self._tasks = self._tasks[:done], self._tasks[done:]
        cut = min(watermark, _first_start(self._tasks[0])) if self._tasks else watermark
        ops: list[pa.RecordBatch] = []
        if self._ops:
            held = pa.Table.from_batches(self._ops, self.schema)
            due = held.column("start_ns").to_numpy() < cut
            ops = held.filter(pa.array(due)).to_batches()
            self._ops = held.filter(pa.array(~due)).to_batches()
        if not tasks and not ops:
            return []
        rows = pa.Table.from_batches(tasks + ops, self.schema).unify_dictionaries()
        # a stable sort by start, tasks before op rows that start with them
        op_row = is_op_row(rows).to_numpy(zero_copy_only=False)
        order = np.lexsort((op_row, rows.column("start_ns").to_numpy()))
        return [(self.outputs[0], rows.take(pa.array(order)).combine_chunks().to_batches()[0])]

    def finish(self) -> list[Emit]:
        return self.advance(DONE)

    def snapshot(self) -> bytes:
        return pack_state({"tasks": self._tasks, "ops": self._ops})

    def restore(self, state: bytes) -> None:
        values = unpack_state(state)
        self._tasks = [_one_batch(table) for table in values["tasks"]]
        self._ops = [_one_batch(table) for table in values["ops"]]


def _first_start(batch: pa.RecordBatch) -> int:
    return int(pc.min(batch.column("start_ns")).as_py())


def _last_start(batch: pa.RecordBatch) -> int:
    return int(pc.max(batch.column("start_ns")).as_py())


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    return table.combine_chunks().to_batches()[0]
