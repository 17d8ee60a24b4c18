"""The ground truth of a simulation, as Parquet, computed from the workload and not from the bytes.

Files written to the truth directory:

- ``tasks.parquet``: one row per device task (device, stream, task id, batch =
  number of task-id wraps before it, start/end ns on the host monotonic clock,
  op name and type, runtime task type, GE task type, category, iteration);
- ``steps.parquet``: one row per step and device: the step window [step start
  tag 60000, step end tag 60001], the model/FP/BP/iteration-end tag times, and
  the expected overlap sums of the step (msprof_outputs.md §4a), over the
  window: ``computing_ns`` = |union of compute tasks| (AI Core, AI Vector,
  MIX_AIC, AI CPU kernels), ``communication_ns`` = |union of all-reduce op
  intervals| (first task start to last task end of each all-reduce),
  ``comm_not_overlapped_ns`` = |communication minus computing|,
  ``overlapped_ns`` = communication - not overlapped, ``free_ns`` = window -
  |computing union communication|. Touching intervals merge (msprof's rule,
  which does not change lengths). Every task of a step lies inside its window
  by construction, so no clipping is needed;
- ``python_calls.parquet``: the ``python_function`` events torch_npu draws from
  the Python tracer's files (torch_npu runs with ``with_stack``; empty
  otherwise): pid, tid, start/end ns on the host monotonic clock, name as
  printed (module calls as ``nn.Module: <class>_<n>``), kind (python, module,
  c), Python id, parent id, module id (null unless a module call). Computed
  from the call model's fixed step structure
  (:mod:`profstream.simulate.python_tracer`), not by replaying the records;
- ``gc.parquet``: the GC records (pid, tid = pid as torch_npu gives it,
  start/end ns);
- ``counts.parquet``: records and bytes written per rank, device (-1 for host
  and framework files), family and aging group; decoding the files must give
  these record counts.

The interval arithmetic is :func:`union_length`, deliberately simple: sort by
start, carry the furthest end seen, start a new piece wherever an interval
begins after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from profstream.simulate.python_tracer import CALLS_SCHEMA, GC_SCHEMA
from profstream.simulate.workload import (
    GE_TYPE_NAMES,
    TAG_BP_END,
    TAG_FP_START,
    TAG_ITER_END,
    TAG_MODEL_END,
    TAG_MODEL_START,
    TAG_STEP_END,
    TAG_STEP_START,
    TASK_KINDS,
    Chunk,
    Template,
)

I64 = npt.NDArray[np.int64]

STEP_TAGS = {
    "step_start_ns": TAG_STEP_START,
    "step_end_ns": TAG_STEP_END,
    "model_start_ns": TAG_MODEL_START,
    "fp_start_ns": TAG_FP_START,
    "bp_end_ns": TAG_BP_END,
    "iter_end_ns": TAG_ITER_END,
    "model_end_ns": TAG_MODEL_END,
}
OVERLAP = ("computing_ns", "communication_ns", "comm_not_overlapped_ns", "overlapped_ns", "free_ns")

TASKS_SCHEMA = pa.schema(
    [
        ("device_id", pa.uint16()),
        ("stream_id", pa.uint16()),
        ("task_id", pa.uint16()),
        ("batch_id", pa.uint16()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("op_name", pa.dictionary(pa.int32(), pa.string())),
        ("op_type", pa.dictionary(pa.int32(), pa.string())),
        ("task_type", pa.dictionary(pa.int32(), pa.string())),
        ("ge_task_type", pa.dictionary(pa.int32(), pa.string())),
        ("category", pa.dictionary(pa.int32(), pa.string())),
        ("iteration", pa.uint32()),
    ]
)
STEPS_SCHEMA = pa.schema(
    [("device_id", pa.uint16()), ("iteration", pa.uint32())]
    + [(name, pa.int64()) for name in (*STEP_TAGS, *OVERLAP)]
)
COUNTS_SCHEMA = pa.schema(
    [
        ("rank", pa.uint16()),
        ("device_id", pa.int16()),
        ("family", pa.string()),
        ("aging", pa.string()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
    ]
)


def union_length(start: npt.ArrayLike, end: npt.ArrayLike) -> int:
    """Total length covered by intervals ``[start, end]`` (overlapping or touching ones merge)."""
    s, e = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if not len(s):
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)  # furthest end of the intervals so far
    opens = np.ones(len(s), np.bool_)
    opens[1:] = s[1:] > reach[:-1]  # a gap before this interval starts a new piece
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, len(s) - 1)
    return int((reach[last] - s[first]).sum())


def overlap_sums(compute: tuple[I64, I64], comm: tuple[I64, I64], window: int) -> dict[str, int]:
    """The step's overlap sums (see the module docstring) from its compute and communication intervals."""
    computing = union_length(*compute)
    communication = union_length(*comm)
    busy = union_length(np.concatenate([compute[0], comm[0]]), np.concatenate([compute[1], comm[1]]))
    not_overlapped = busy - computing
    return {
        "computing_ns": computing,
        "communication_ns": communication,
        "comm_not_overlapped_ns": not_overlapped,
        "overlapped_ns": communication - not_overlapped,
        "free_ns": window - busy,
    }


def _dictionary(indices: I64, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(values, pa.string()))


@dataclass
class Truth:
    """Incremental writer of the truth tables (one row group per chunk and device)."""

    directory: Path
    template: Template

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._tasks = pq.ParquetWriter(self.directory / "tasks.parquet", TASKS_SCHEMA)
        self._steps = pq.ParquetWriter(self.directory / "steps.parquet", STEPS_SCHEMA)
        self._calls = pq.ParquetWriter(self.directory / "python_calls.parquet", CALLS_SCHEMA)
        self._gc = pq.ParquetWriter(self.directory / "gc.parquet", GC_SCHEMA)
        t = self.template
        self._task_ix = np.flatnonzero(t.slot_kind >= 0)
        kinds = t.slot_kind[self._task_ix]
        self._kind_names = sorted({k.name for k in TASK_KINDS})
        self._kind_index = np.array([self._kind_names.index(TASK_KINDS[k].name) for k in kinds])
        self._categories = ["communication", "compute", "other"]
        self._category = np.array([self._categories.index(TASK_KINDS[k].category) for k in kinds])
        self._ge_names = [*GE_TYPE_NAMES.values(), "-"]
        ge = [TASK_KINDS[k].ge_type for k in kinds]
        self._ge = np.array([self._ge_names.index(GE_TYPE_NAMES.get(g, "-")) for g in ge])
        self._op = t.item_op[t.slot_item[self._task_ix]]
        self._compute = self._task_ix[self._category == self._categories.index("compute")]
        hccl = np.flatnonzero(t.slot_hccl >= 0)
        self._hccl = hccl.reshape(-1, 3)  # the three tasks of each all-reduce, in launch order
        self._tags = {name: int(np.flatnonzero(t.slot_tag == tag)[0]) for name, tag in STEP_TAGS.items()}

    def add(self, chunk: Chunk, device_id: int) -> None:
        t, steps = self.template, chunk.steps
        ix = self._task_ix
        n = len(ix)
        tile = np.tile
        columns: dict[str, Any] = {
            "device_id": np.full(steps * n, device_id, np.uint16),
            "stream_id": tile(t.slot_stream[ix], steps).astype(np.uint16),
            "task_id": chunk.slot_task_id[:, ix].ravel().astype(np.uint16),
            "batch_id": chunk.slot_batch[:, ix].ravel().astype(np.uint16),
            "start_ns": chunk.slot_start[:, ix].ravel(),
            "end_ns": chunk.slot_end[:, ix].ravel(),
            "op_name": _dictionary(tile(self._op, steps), list(t.op_name)),
            "op_type": _dictionary(tile(self._op, steps), list(t.op_type)),
            "task_type": _dictionary(tile(self._kind_index, steps), self._kind_names),
            "ge_task_type": _dictionary(tile(self._ge, steps), self._ge_names),
            "category": _dictionary(tile(self._category, steps), self._categories),
            "iteration": np.repeat(chunk.first_step + 1 + np.arange(steps), n).astype(np.uint32),
        }
        self._tasks.write_table(pa.table(columns, schema=TASKS_SCHEMA))
        rows: dict[str, list[int]] = {name: [] for name in STEPS_SCHEMA.names}
        for s in range(steps):
            times = {name: int(chunk.slot_start[s, j]) for name, j in self._tags.items()}
            compute = (chunk.slot_start[s, self._compute], chunk.slot_end[s, self._compute])
            comm = (chunk.slot_start[s, self._hccl].min(axis=1), chunk.slot_end[s, self._hccl].max(axis=1))
            window = times["step_end_ns"] - times["step_start_ns"]
            values = {"device_id": device_id, "iteration": chunk.first_step + 1 + s, **times}
            values |= overlap_sums(compute, comm, window)
            for name, value in values.items():
                rows[name].append(value)
        self._steps.write_table(pa.table(rows, schema=STEPS_SCHEMA))

    def add_python_calls(self, columns: dict[str, Any]) -> None:
        """Rows of ``python_calls.parquet`` (:meth:`~profstream.simulate.python_tracer.ThreadTracer.rows`)."""
        self._calls.write_table(pa.table(columns, schema=CALLS_SCHEMA))

    def add_gc(self, columns: dict[str, Any]) -> None:
        """Rows of ``gc.parquet``."""
        self._gc.write_table(pa.table(columns, schema=GC_SCHEMA))

    def close(self, counts: list[dict[str, Any]]) -> None:
        """Finish the task, step, call and GC files and write the record counts."""
        for writer in (self._tasks, self._steps, self._calls, self._gc):
            writer.close()
        table = pa.Table.from_pylist(counts, schema=COUNTS_SCHEMA)
        pq.write_table(table, self.directory / "counts.parquet")
