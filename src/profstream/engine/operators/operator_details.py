"""torch_npu's ``operator_details.csv`` rows: ``ops`` + ``flows`` + ``tasks@<d>`` (+ ``comm@<d>``) ->
``operator_details``.

Rules (framework_outputs.md §3.3; torch_npu ``prof_view/_operator_view_parser.py``,
``prof_bean/_torch_op_node.py``, ``prof_common_func/_tree_builder.py``): one row per torch op of the op
tree (``ops`` rows of kind ``cpu_op``) except ``ProfilerStep#*`` ops, in op order.

* Host total = the op's duration; host self = duration - Σ durations of its child ops (enqueue
  events are not tree nodes, so they do not count).
* Device self = Σ durations of the kernels reached through the op's ``corr_id_self``, device total
  = through ``corr_id_total`` (the op's subtree, itself included). The ``async_npu`` flows of
  :class:`~profstream.engine.operators.framework_ops.FrameworkOps` already carry that attribution:
  with the task queue a kernel's flow starts at the op its enqueue was attached to (the op whose
  ``corr_id_self`` holds the correlation id, every ancestor then holding it in ``corr_id_total``);
  without it, at the deepest op around the launch (``TreeBuilder.update_tree_node_info`` gives the
  deepest matched node ``corr_id_self`` and every matched node ``corr_id_total``). So device self sums
  the kernels of the op's own flows and device total sums device self over the subtree
  (:func:`~profstream.engine.kernels.subtree.subtree_sums`). "With AICore" counts only kernels whose
  task type is ``AI_CORE`` (the trace's ``Task Type`` under the current msprof rule, see
  :mod:`~profstream.engine.layouts.timeline`; the CANN 8.0-era trace typed 910B vector kernels by
  their device type ``AI_CORE``, so the real operator_details.csv counts them). The kernels are msprof's
  HostToDevice flow ends (:mod:`~profstream.engine.operators.launches`), as in FrameworkOps: a
  communication op counts once, with its own duration (torch_npu sums the X event on its group's
  thread), not its HCCL tasks.
* The CSV's device cells are torch_npu's float sums: µs per kernel added one at a time
  (``OperatorViewParser.generate_view``: ``sum([float(kernel.dur) ...])``), so the printed value keeps
  the float residue (``23.74 + 172.763 + 14.5`` prints ``211.00300000000001``) and is the integer
  ``0`` when no kernel was added (``sum([])``; "With AICore" adds ``0`` for other kernels, which
  changes nothing). The ``*_us`` columns carry these sums beside the exact int64 ns ones. torch_npu's
  list is the kernels of the op's correlation ids in enqueue order; we add them in kernel start
  order (:func:`~profstream.engine.kernels.subtree.subtree_folds`), which reproduces every device
  cell of the six real operator_details.csv files in shared/realdata from their trace_view.json
  (tests/golden). Choice: Python's own left-to-right ``sum``, as the real files' Python 3.9 adds;
  from Python 3.12 ``sum`` of floats compensates its rounding, and torch_npu run there would print
  the exact decimal more often.
* A flow names its source by (pid, tid, start) and its kernel by (device, stream, start), a
  communication op's stream being null: a flow is
  joined to a held task of that key (several flows of one key take distinct tasks, in order) and to
  the pending op of that key; when a parent and its child start at the same ns on one thread the
  key is ambiguous and the deeper op (the later one) is taken.
* ``device_id``: the collection's device when there is one, else the lowest device of the op's own
  kernels (null without any).

Streaming and memory: ops arrive in op order (start order), flows after their op and after their
kernel's task (FrameworkOps reads the same tasks). With watermark ``W`` (no input delivers anything
older): no flow will start before ``W``, and a kernel starts after its launch inside the source op,
so held tasks starting before ``W`` will get no flow and are dropped. A root op (and so its whole
subtree) is final once it ended before ``W``: every descendant started before the root's end, and so
did every flow from it. Rows are emitted in op order up to the first op whose root is not final, so
the operator holds the ops of the open root subtrees (in a training loop, the current
``ProfilerStep`` — about one step of ops, bounded by FrameworkOps' reorder bound), the tasks
whose flows are not known yet and the kernels linked to held ops (for the float sums). Ops whose
parent was already emitted (late ops, which FrameworkOps counts too), flows without a task or a
pending op are counted and logged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.engine.kernels._dispatch import NULL, FloatArray, Int64Array
from profstream.engine.kernels.subtree import subtree_folds, subtree_sums
from profstream.engine.operators._state import (
    concat,
    empty_columns,
    find,
    ints,
    nullable,
    rows,
    take,
)
from profstream.engine.operators.api import dense_ids
from profstream.engine.operators.launches import FirstKernels, claim_kernels
from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: ops whose rows operator_details leaves out (``TorchOpNode.is_profiler_step``)
PROFILER_STEP = "ProfilerStep#"
AI_CORE = "AI_CORE"
_OPS = ("id", "parent", "pid", "tid", "start", "end", "self", "self_aicore", "device")
_TASKS = ("device", "stream", "start", "dur", "aicore")
#: kernels linked to a held op (by op id), kept for the float sums
_LINKED = ("op", "start", "dur", "aicore")
_TEXTS = pa.schema([("name", pa.string()), ("input_shapes", pa.string()), ("call_stack", pa.string())])
_COUNTERS = ("late_ops", "flows_without_task", "flows_without_op", "tasks_without_flow")
_NO_DEVICE = np.iinfo(np.int64).max


def _float_sums(values: FloatArray) -> pa.Array:
    return pa.array(values, pa.float64(), mask=np.isnan(values))


def _strings(batch: pa.RecordBatch, name: str) -> pa.Array:
    return batch.column(name).cast(pa.string())


class OperatorDetails(Operator):
    """``ops``, ``flows``, ``tasks@<d>``, ``comm@<d>`` -> ``operator_details`` (see the module docstring).

    ``devices``: the devices whose ``tasks`` the flows point into; ``communication``: those whose
    communication ops they do.
    """

    def __init__(self, devices: Sequence[int], communication: Sequence[int] = ()) -> None:
        self.devices = tuple(devices)
        self._task_streams = tuple(at("tasks", d) for d in self.devices)
        self._comm_streams = tuple(at("comm", d) for d in communication)
        self.inputs = ("ops", "flows", *self._task_streams, *self._comm_streams)
        self.outputs = ("operator_details",)
        self._log = events.get_logger(component="operator_details")
        self._inbox: dict[str, list[pa.RecordBatch]] = {"ops": [], "flows": [], "tasks": [], "comm": []}
        self._ops = empty_columns(_OPS)
        self._texts = _TEXTS.empty_table()
        self._tasks = empty_columns(_TASKS)
        self._linked = empty_columns(_LINKED)
        self._first = FirstKernels()
        self._counts = dict.fromkeys(_COUNTERS, 0)

    # ------------------------------------------------------------------ operator protocol

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream in ("ops", "flows"):
            self._inbox[stream].append(batch)
        elif stream in self._task_streams:
            self._inbox["tasks"].append(batch)
        elif stream in self._comm_streams:
            self._inbox["comm"].append(batch)
        else:
            raise self.unknown_input(stream)

    def advance(self, watermark: int) -> list[Emit]:
        for batch in self._inbox["ops"]:
            self._add_ops(batch)
        for batch in self._inbox["tasks"]:
            self._add_kernels(*self._first.rows(batch, ops=False))
        for batch in self._inbox["comm"]:
            self._add_kernels(*self._first.rows(batch, ops=True))
        for batch in self._inbox["flows"]:
            self._add_flows(batch)
        self._inbox = {"ops": [], "flows": [], "tasks": [], "comm": []}
        stale = self._tasks["start"] < watermark
        self._counts["tasks_without_flow"] += int(stale.sum())
        self._tasks = take(self._tasks, ~stale)
        return self._emit(watermark)

    def finish(self) -> list[Emit]:
        out = self.advance(DONE)
        counts = dict(self._counts)
        level = self._log.warning if any(counts[k] for k in _COUNTERS[:3]) else self._log.debug
        level(events.RECORDS_UNMATCHED, **counts)
        return out

    # ------------------------------------------------------------------ inputs

    def _add_ops(self, batch: pa.RecordBatch) -> None:
        cpu = pc.equal(batch.column("kind").cast(pa.string()), "cpu_op").fill_null(False)
        batch = batch.filter(cpu)
        if not batch.num_rows:
            return
        ids, parents = ints(batch.column("op_id")), ints(batch.column("parent_id"))
        known = np.r_[self._ops["id"], ids]
        late = (parents != NULL) & (find(np.sort(known), parents) < 0)
        self._counts["late_ops"] += int(late.sum())
        n = batch.num_rows
        zeros = np.zeros(n, np.int64)
        new = {
            "id": ids,
            "parent": np.where(late, NULL, parents),
            "pid": ints(batch.column("pid")),
            "tid": ints(batch.column("tid")),
            "start": ints(batch.column("start_ns")),
            "end": ints(batch.column("end_ns")),
            "self": zeros,
            "self_aicore": zeros.copy(),
            "device": np.full(n, _NO_DEVICE, np.int64),
        }
        texts = pa.table({name: _strings(batch, name) for name in _TEXTS.names}, schema=_TEXTS)
        self._ops, self._texts = concat(self._ops, new), pa.concat_tables([self._texts, texts])
        if np.any(np.diff(self._ops["id"]) < 0):  # ops come in op order: a reorder is the exception
            order = np.argsort(self._ops["id"], kind="stable")
            self._ops = take(self._ops, order)
            self._texts = self._texts.take(pa.array(order, pa.int64()))

    def _add_kernels(self, batch: pa.RecordBatch, stream: Int64Array) -> None:
        """Kernels (:func:`~profstream.engine.operators.launches.kernel_rows`): device tasks, or
        communication ops (no stream, no task type: never AI_CORE)."""
        start = ints(batch.column("start_ns"))
        if "task_type" in batch.schema.names:
            aicore = pc.equal(batch.column("task_type").cast(pa.string()), AI_CORE).fill_null(False)
        else:
            aicore = pa.array(np.zeros(batch.num_rows, np.bool_))
        new = {
            "device": ints(batch.column("device_id")),
            "stream": stream,
            "start": start,
            "dur": ints(batch.column("end_ns")) - start,
            "aicore": np.asarray(aicore.to_numpy(zero_copy_only=False), np.int64),
        }
        self._tasks = concat(self._tasks, new)

    def _add_flows(self, batch: pa.RecordBatch) -> None:
        npu = pc.equal(batch.column("kind").cast(pa.string()), "async_npu").fill_null(False)
        flows = batch.filter(npu)
        if not flows.num_rows:
            return
        held = (self._tasks["device"], self._tasks["stream"], self._tasks["start"])
        task = claim_kernels(
            held, tuple(ints(flows.column(c)) for c in ("dst_device_id", "dst_tid", "dst_ns"))
        )
        linked = task >= 0
        self._counts["flows_without_task"] += int((~linked).sum())
        tasks = take(self._tasks, task[linked])
        unclaimed = np.ones(rows(self._tasks), np.bool_)
        unclaimed[task[linked]] = False
        self._tasks = take(self._tasks, unclaimed)
        src = (ints(flows.column(c))[linked] for c in ("src_pid", "src_tid", "src_ns"))
        op = self._find_ops(*src)
        found = op >= 0
        self._counts["flows_without_op"] += int((~found).sum())
        op, dur, aicore, device = (
            op[found],
            tasks["dur"][found],
            tasks["aicore"][found],
            tasks["device"][found],
        )
        np.add.at(self._ops["self"], op, dur)
        np.add.at(self._ops["self_aicore"], op, dur * aicore)
        np.minimum.at(self._ops["device"], op, device)
        kernels = {"op": self._ops["id"][op], "start": tasks["start"][found], "dur": dur, "aicore": aicore}
        self._linked = concat(self._linked, kernels)

    def _find_ops(self, pid: Int64Array, tid: Int64Array, start: Int64Array) -> Int64Array:
        """The pending op (row) of each flow source, the deepest of equal keys; -1 if none."""
        ops = self._ops
        held = rows(ops)
        ids = dense_ids(np.r_[ops["pid"], pid], np.r_[ops["tid"], tid], np.r_[ops["start"], start])
        op_keys = ids[:held]
        deepest = np.full(int(ids.max(initial=-1)) + 1, -1, np.int64)
        np.maximum.at(deepest, op_keys, np.arange(held))  # rows are in op order: the later is deeper
        return deepest[ids[held:]] if held else np.full(pid.size, -1, np.int64)

    # ------------------------------------------------------------------ emission

    def _emit(self, watermark: int) -> list[Emit]:
        ops = self._ops
        n = rows(ops)
        if n == 0:
            return []
        parent = find(ops["id"], ops["parent"])  # -1: a root here (or its parent was emitted)
        root = np.where(parent < 0, np.arange(n), parent)
        while True:  # pointer jumping: parents come before children
            up = root[root]
            if np.array_equal(up, root):
                break
            root = up
        final = ops["end"][root] < watermark
        cut = n if final.all() else int(np.argmin(final))
        if cut == 0:
            return []
        durations = ops["end"] - ops["start"]
        children = np.zeros(n, np.int64)
        np.add.at(children, parent[parent >= 0], durations[parent >= 0])
        totals = subtree_sums(parent, np.stack([ops["self"], ops["self_aicore"]]))
        micros = self._micros(parent)
        head = np.arange(cut)
        texts = self._texts.slice(0, cut)
        device = np.full(cut, self.devices[0], np.int64) if len(self.devices) == 1 else ops["device"][head]
        keep = pc.invert(pc.match_substring(texts.column("name"), PROFILER_STEP).fill_null(False))
        batch = conform(
            TABLES["operator_details"],
            {
                "device_id": nullable(np.where(device == _NO_DEVICE, NULL, device)),
                "op_id": ops["id"][head],
                "name": texts.column("name"),
                "input_shapes": texts.column("input_shapes"),
                "call_stack": texts.column("call_stack"),
                "host_self_ns": durations[head] - children[head],
                "host_total_ns": durations[head],
                "device_self_ns": ops["self"][head],
                "device_total_ns": totals[0, head],
                "device_self_aicore_ns": ops["self_aicore"][head],
                "device_total_aicore_ns": totals[1, head],
                **{name: _float_sums(values[head]) for name, values in micros.items()},
            },
        ).filter(keep)
        self._ops = take(ops, slice(cut, None))
        self._linked = take(self._linked, find(ops["id"], self._linked["op"]) >= cut)
        self._texts = self._texts.slice(cut)
        return [("operator_details", batch)] if batch.num_rows else []

    def _micros(self, parent: Int64Array) -> dict[str, FloatArray]:
        """torch_npu's float µs sums of the held ops (module docstring), NaN where nothing was added."""
        linked = self._linked
        order = np.argsort(linked["start"], kind="stable")
        node = find(self._ops["id"], linked["op"])[order]
        micros = linked["dur"][order] / 1000.0
        aicore = linked["aicore"][order] == 1
        own, total = subtree_folds(parent, node, micros)
        own_aicore, total_aicore = subtree_folds(parent, node[aicore], micros[aicore])
        return {
            "device_self_us": own,
            "device_total_us": total,
            "device_self_aicore_us": own_aicore,
            "device_total_aicore_us": total_aicore,
        }

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        inbox = {k: pa.Table.from_batches(v) if v else None for k, v in self._inbox.items()}
        return pack_state(
            {
                "inbox": inbox,
                "ops": self._ops,
                "texts": self._texts.combine_chunks(),
                "tasks": self._tasks,
                "linked": self._linked,
                "first": self._first.state(),
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._inbox = {k: [] if v is None else v.to_batches() for k, v in doc["inbox"].items()}
        self._ops, self._tasks, self._linked = doc["ops"], doc["tasks"], doc["linked"]
        self._texts, self._first = doc["texts"], FirstKernels(doc["first"])
        self._counts = dict(doc["counts"])
