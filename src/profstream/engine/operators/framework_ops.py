"""torch_npu framework ops and their flows: ``torch.op_range`` + ``torch.op_mark`` -> ``ops``, ``flows``.

Rules (specs/framework_outputs.md; torch_npu ``prof_parse/_fwk_file_parser.py``,
``prof_common_func/_tree_builder.py``, ``_trace_event_manager.py``,
``prof_parse/_fwk_cann_relation_parser.py``, ``prof_view/_trace_view_parser.py``):

* **Task queue** (§1.6): op_mark records in time order; a start mark is kept per (enqueue or
  dequeue, thread, op name), a newer start replacing (and dropping) an older one; an end mark pairs
  with the kept start into an event from the start's time to the end's, taking the end mark's
  correlation id, process and thread (:func:`~profstream.engine.kernels.pairing.pair_acsq` keeps
  exactly one open start per key). Ends without a start and dropped starts are counted and logged.
  At equal times a start goes before an end (torch_npu keeps file order there). Dequeue events are
  named ``Dequeue@<op>`` and every enqueue event ``Enqueue``, as torch_npu's ``OpMarkBean.name``
  names them and as every enqueue of the real traces in shared/realdata is named (the spec's
  ``Enqueue@<op>`` for an enqueue whose correlation id a dequeue has is in neither).
* **Op tree** (§1.6, :mod:`~profstream.engine.kernels.tree`): torch ops and enqueue events of all
  threads in start order nest by time containment (``parent_id``); an enqueue is attached to the
  enclosing op only on the same thread (the spec's rule; every stored version of ``_tree_builder.py``
  attaches it to any enclosing op, and the DB path's ``FwkApiDbParser``
  ``get_torch_op_connection_ids_with_enqueue`` ignores threads too; the real traces in shared/realdata
  fit both, no enqueue there starting inside another thread's op). Dequeue events are not part of the
  tree. ``op_id`` counts the events of every kind in the order they are emitted, which is start order.
  Ties at equal starts: torch ops, then enqueues, then dequeues (torch_npu sorts its op list with the
  enqueues appended, stably); among torch ops the longer first, so a parent precedes a child that starts
  with it (torch_npu keeps file order there, which nests the parent under the child).
  ``ProfilerStep#<n>`` ops are ordinary ops here; the steps operator uses them.
* **Flows** (§3.1): ``async_task_queue`` from each enqueue to the dequeue with its correlation id
  (id = correlation id); ``fwdbwd`` per sequence number from the latest forward op (``Fwd thread
  id`` 0) to the latest backward op, only when their threads differ (id = sequence number);
  ``async_npu`` from a torch op to each NPU kernel it launched (``correlation_id``: that of the
  dequeue window the kernel was launched in, with the task queue; id = a running counter, a key of
  the table: trace_view.json writes torch_npu's id, the kernel's start in ns, which collides,
  :class:`~profstream.engine.layouts.timeline.TorchFlows`). A kernel is what torch_npu takes
  from msprof's HostToDevice flow ends (:mod:`~profstream.engine.operators.launches`): a device task
  with a compute op name that is not an HCCL task, a MEMCPY_ASYNC task, or a communication op (from
  ``comm@<d>``, its flow ending at the op's start on its group's thread: ``dst_tid`` null,
  ``dst_group`` the group). With the task
  queue, a kernel's launch (``tasks.launch_ns``) is assigned to the dequeue window around it —
  the first dequeue, in end order, that ends at or after the launch, if it started at or before
  it (torch_npu's forward-only cursor in ``FwkCANNRelationParser.combine_kernel_dict`` walks the
  dequeue events in the order their end marks come, ``FwkFileParser.get_dequeue_data``; threads are
  not compared, so overlapping windows of two dequeue threads go to the one ending first) — and the
  torch op the enqueue of that correlation id was attached to links to it. Without the task queue the
  deepest torch op
  around the launch links to it (:func:`~profstream.engine.kernels.tree.stab`). Launches come from
  the ``tasks`` table, which already carries the start of the launching node API: the host ``api``
  table adds nothing. Flow rows: a host destination has a null ``dst_device_id``; a kernel has its
  device, ``dst_tid`` = its stream id and a null ``dst_pid`` (sinks format the device pid).

**The reorder bound** ``max_op_ns``. op_range records are written when an op *ends*, so an op's
parent — at the top of a thread's stack, a ``ProfilerStep#<n>`` — arrives after all its children,
and no record says it is still running. Only a bound on how long anything lasts makes an op final:
every op, enqueue and dequeue is assumed to last at most ``max_op_ns``, a kernel to start at most
that long after its launch, a dequeue to end that long after its enqueue started, and the backward
ops of a sequence number to start that long after its forward op. Launch targets (ops, enqueues,
dequeue windows) are kept longer again, by how far behind their launch kernels come
(:class:`~profstream.engine.operators._state.KernelReach`; ``max_op_ns`` before the first kernel)
plus the longest enqueue-to-dequeue wait seen so far. With watermark ``W`` (no input
will deliver anything older), every event that starts before the horizon ``H = W - max_op_ns``
has arrived, so events are emitted in start order up to ``H``: the window holds about
``max_op_ns`` of ops (the plan's ``FRAMEWORK_REORDER_NS``). Anything that breaks the bound is still
emitted, late, and counted: it takes the deepest emitted op still open around it as parent and, if
it is still open, the events to come nest under it (:mod:`~profstream.engine.kernels.tree`); the
events emitted before it arrived do not. A ``ProfilerStep#<n>`` longer than the bound is the usual
case (``late_steps``, logged at debug level): no output reads it as a parent (operator_details leaves
steps out, memory owners are ``aten``/``npu`` ops, flows start at torch ops), and the steps
operator takes it whenever it comes. Any other late op (``late_ops``) may miss children, and a late
enqueue gets no ``async_npu`` flows. The outputs therefore lag the inputs:
:meth:`FrameworkOps.output_watermark` promises the horizon, or the start of an op or enqueue that a
flow still to come may start from, whichever is older.

State: the reorder window (op_range records and paired marks not yet emitted), open marks, the
chain of open ops, dequeue windows and enqueue owners still reachable by a launch, emitted ops that
still end after ``H`` (parents and launch targets), tasks whose launch is not yet final, and the
per-sequence-number forward/backward ops within ``2 * max_op_ns``, and the flow ids of the last
second of kernels (:class:`~profstream.engine.operators.launches.FirstKernels`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.engine.kernels import pairing
from profstream.engine.kernels._dispatch import NULL, BoolArray, Int64Array
from profstream.engine.kernels.tree import NO_PARENT, Stack, nest, stab
from profstream.engine.operators._state import (
    Columns,
    KernelReach,
    concat,
    empty_columns,
    find,
    gather,
    horizon,
    ints,
    nullable,
    pack_keyed,
    slice_starts,
    take,
    unpack_keyed,
)
from profstream.engine.operators.comm import NA
from profstream.engine.operators.launches import FirstKernels
from profstream.engine.runtime import DONE, START, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: how long any op, queue event or launch-to-kernel delay may last (see the module docstring)
DEFAULT_MAX_OP_NS = 60_000_000_000
#: ops one emit step turns into rows, about: the end of a run releases the whole reorder window at
#: once (96,000 ops and +30 MB of peak RSS in one step, 1 GB torch_npu simulation)
EMIT_OPS = 16_384
#: ``ops.kind`` values, in their tie order at equal starts
KINDS = ("cpu_op", "enqueue", "dequeue")
CPU_OP, ENQUEUE, DEQUEUE = range(3)
#: ``flows.kind`` values of this operator
FLOW_KINDS = ("async_task_queue", "async_npu", "fwdbwd")
ASYNC_TASK_QUEUE, ASYNC_NPU, FWDBWD = range(3)
#: op_mark categories (framework_outputs.md §1.3): 0/1 enqueue start/end, 2/3 dequeue start/end
_QUEUE_OF_CATEGORY = 2  # category // 2: 0 enqueue, 1 dequeue; category % 2: 1 = end mark

#: the reorder window: op_range records and paired queue events not yet emitted
_PENDING = pa.schema(
    [
        ("rank", pa.int64()),  # CPU_OP, ENQUEUE, DEQUEUE
        ("name", pa.string()),  # enqueue: the op name (the emitted name is decided at emission)
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("sequence_number", pa.int64()),
        ("fwd_thread_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("input_shapes", pa.string()),
        ("input_dtypes", pa.string()),
        ("call_stack", pa.string()),
        ("module_hierarchy", pa.string()),
        ("flops", pa.string()),
        ("arrival", pa.int64()),
    ]
)
_ENQ = ("corr", "pid", "tid", "start", "op_pid", "op_tid", "op_start", "flowed")
_DEQ = ("corr", "pid", "tid", "start", "end", "flowed")
_LIVE = ("id", "pid", "tid", "start", "end")
_TASKS = ("device_id", "stream_id", "start", "launch", "group")
_FWD = ("seq", "fwd_pid", "fwd_tid", "fwd_ts", "bwd_pid", "bwd_tid", "bwd_ts")
_COUNTERS = (
    "late_ops",
    "late_steps",
    "tasks_without_launch",
    "kernels_without_op",
    "enqueue_without_dequeue",
    "dequeue_without_enqueue",
    "backward_without_forward",
)
#: the counters of flow matching, which an operator without flows does not keep
_FLOW_COUNTERS = (
    "tasks_without_launch",
    "kernels_without_op",
    "enqueue_without_dequeue",
    "dequeue_without_enqueue",
    "backward_without_forward",
)


def _texts(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A string column of a decoded batch, or nulls if the generation has none."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.string())
    return batch.column(index).cast(pa.string())


def _start_order(starts: Int64Array) -> Int64Array:
    """The stable order of window events by start: a window batch is kept in it, so the events an emit
    takes from the batch are a prefix."""
    return np.argsort(starts, kind="stable")


def _first_start(batch: pa.RecordBatch) -> int:
    """The earliest start of window events sorted by start."""
    return int(batch.column("start_ns")[0].as_py())


def _stack_flows(parts: list[Columns], groups: Sequence[str]) -> pa.RecordBatch:
    """One ``flows`` batch from the flow columns of each kind; ``dst_group`` codes index ``groups``."""
    joined = parts[0]
    for part in parts[1:]:
        joined = concat(joined, part)
    kind, group = joined.pop("kind"), joined.pop("dst_group")
    return conform(
        TABLES["flows"],
        {
            "kind": pa.DictionaryArray.from_arrays(kind.astype(np.int32), pa.array(FLOW_KINDS)),
            "dst_device_id": nullable(joined.pop("dst_device_id")),
            "dst_pid": nullable(joined.pop("dst_pid")),
            "dst_tid": nullable(joined.pop("dst_tid")),
            "correlation_id": nullable(joined.pop("correlation_id")),
            "dst_group": pa.DictionaryArray.from_arrays(
                pa.array(group.astype(np.int32), mask=group == NULL), pa.array(groups, pa.string())
            ),
            **joined,
        },
    )


def _upsert(table: Columns, new: Columns) -> Columns:
    """Rows of both keyed by ``corr``, a new row replacing an old one; sorted by corr."""
    corr = new["corr"]
    after = not table["corr"].size or (corr.size and corr[0] > table["corr"][-1])
    if after and bool(np.all(corr[1:] > corr[:-1])):  # ids only grow, as a run's correlation ids do
        return concat(table, new)
    joined = concat(table, new)
    keys = joined["corr"][::-1]
    _, last = np.unique(keys, return_index=True)  # first in reversed order = last written
    return take(joined, keys.size - 1 - last)


def _latest_per_sequence(ops: Columns) -> Columns:
    """One row per sequence number (sorted), with each side's latest op (absent last); at equal times
    the first seen, as torch_npu replaces only on a later ts."""
    merged: Columns = {}
    for side in ("fwd", "bwd"):
        ts = ops[f"{side}_ts"]
        later_first = np.where(ts == NULL, np.iinfo(np.int64).max, -ts)
        order = np.lexsort((np.arange(ts.size), later_first, ops["seq"]))
        first = np.ones(order.size, np.bool_)
        first[1:] = ops["seq"][order][1:] != ops["seq"][order][:-1]
        firsts = order[first]
        for col in ("pid", "tid", "ts"):
            merged[f"{side}_{col}"] = ops[f"{side}_{col}"][firsts]
        merged["seq"] = ops["seq"][firsts]
    return {name: merged[name] for name in _FWD}


def _merge_sequences(held: Columns, new: Columns) -> Columns:
    """:func:`_latest_per_sequence` of ``held`` and then ``new`` (both already one row per sequence
    number): a new side's op replaces a held one only when it is later, and new sequence numbers are
    inserted in order. The held rows are not sorted again (tens of thousands wait for their backward ops)."""
    at = np.searchsorted(held["seq"], new["seq"])
    known = at < held["seq"].size
    known[known] = held["seq"][at[known]] == new["seq"][known]
    inserted = at[~known]  # sorted, as the sequence numbers are
    merged = {name: np.insert(held[name], inserted, new[name][~known]) for name in _FWD}
    # a held row moves down by the rows inserted before it
    rows = at[known] + np.searchsorted(inserted, at[known], side="right")
    updates = {name: values[known] for name, values in new.items()}
    for side in ("fwd", "bwd"):
        ts, held_ts = updates[f"{side}_ts"], merged[f"{side}_ts"][rows]
        later = (ts != NULL) & ((held_ts == NULL) | (ts > held_ts))
        for col in ("pid", "tid", "ts"):
            merged[f"{side}_{col}"][rows[later]] = updates[f"{side}_{col}"][later]
    return merged


class FrameworkOps(Operator):
    """``torch_op_range`` (+ ``torch_op_mark``, ``tasks@<d>``, ``comm@<d>``) -> ``ops`` and ``flows``.

    ``devices``: the device ids whose ``tasks`` give ``async_npu`` flows, ``communication`` those whose
    communication ops (``comm``) do too; ``task_queue``: whether the
    collection has op_mark data (torch_npu's switch between the two ``async_npu`` rules; without it
    the ``torch_op_mark`` input is not read); ``max_op_ns``: the reorder bound (module docstring).
    ``flows`` False makes only ``ops`` (what PTA memory's op tree reads) and keeps none of the state
    flows need; ``devices`` and ``communication`` then give nothing and must be empty.
    """

    def __init__(
        self,
        devices: Sequence[int] = (),
        *,
        communication: Sequence[int] = (),
        task_queue: bool = True,
        max_op_ns: int = DEFAULT_MAX_OP_NS,
        flows: bool = True,
    ) -> None:
        if max_op_ns <= 0:
            msg = f"max_op_ns: expected a positive duration in ns, got {max_op_ns}"
            raise ValueError(msg)
        if not flows and (devices or communication):
            msg = "devices and communication give async_npu flows: they need flows=True"
            raise ValueError(msg)
        self.flows = flows
        self.devices = tuple(devices)
        self.task_queue = task_queue
        self.max_op_ns = max_op_ns
        self._tasks_streams = {at("tasks", d): d for d in self.devices}
        self._comm_streams = {at("comm", d): d for d in communication}
        marks = ("torch_op_mark",) if task_queue else ()
        self.inputs = ("torch_op_range", *marks, *self._tasks_streams, *self._comm_streams)
        self.outputs = ("ops", "flows") if flows else ("ops",)
        self._log = events.get_logger(component="framework_ops")
        self._reset()

    def _reset(self) -> None:
        self._pending: list[pa.RecordBatch] = []
        self._pending_min = DONE  # earliest start in the window
        self._arrivals = 0
        self._names: dict[str, int] = {}
        self._groups: dict[str, int] = {}  # communication group names of flow destinations
        self._marks = pairing.pair_state(3)
        self._marks_seen = 0
        self._stack = Stack.empty()
        self._next_op = 0
        self._next_flow = 1
        self._emitted_to = START  # every event starting before this was emitted
        self._enq = empty_columns(_ENQ)
        self._deq = empty_columns(_DEQ)
        self._live = empty_columns(_LIVE)
        self._tasks = empty_columns(_TASKS)
        self._first = FirstKernels()
        self._fwd = empty_columns(_FWD)
        self._reach = KernelReach()
        self._queue_lag = 0  # the longest wait seen from an enqueue's start to its dequeue's start
        self._counts = dict.fromkeys(_COUNTERS, 0)
        # not state: a shortcut for advances that cannot emit anything
        self._advanced_to, self._pushed = START, True

    # ------------------------------------------------------------------ operator protocol

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._pushed = True
        if stream == "torch_op_range":
            self._add_ops(batch)
        elif stream == "torch_op_mark":
            self._add_marks(batch)
        elif stream in self._tasks_streams or stream in self._comm_streams:
            self._add_kernels(batch, ops=stream in self._comm_streams)
        else:
            raise self.unknown_input(stream)

    def advance(self, watermark: int) -> list[Emit]:
        self._reach.advance(watermark)
        until = horizon(watermark, self.max_op_ns)
        if until == self._advanced_to and not self._pushed:
            return []  # nothing new: emitting again would give nothing
        self._advanced_to, self._pushed = until, False
        return self._emit(until)

    def finish(self) -> list[Emit]:
        out = self._emit(DONE)
        self._report()
        return out

    def output_watermark(self, watermark: int) -> int:
        """The horizon, or the oldest start a held flow may still come from (an op still live, an
        enqueue not yet flowed or owning a dequeue window, a forward op waiting for its backward)."""
        until = horizon(watermark, self.max_op_ns)
        enq = self._enq
        held = [
            self._live["start"],
            enq["start"][enq["flowed"] == 0],
            enq["op_start"][enq["op_start"] != NULL],
            self._fwd["fwd_ts"][self._fwd["fwd_ts"] != NULL],
        ]
        return min([until, *(int(h.min()) for h in held if h.size)])

    # ------------------------------------------------------------------ inputs

    def _add_ops(self, batch: pa.RecordBatch) -> None:
        start = ints(batch.column("start_ns"))
        order = _start_order(start)
        rows = pa.array(order)
        seq = ints(batch.column("sequence_number"))[order]

        def ids(name: str) -> Int64Array:
            return ints(batch.column(name))[order]

        def texts(name: str) -> pa.Array:
            return _texts(batch, name).take(rows)

        self._add_pending(
            {
                "rank": np.full(order.size, CPU_OP, np.int64),
                "name": texts("name"),
                "pid": ids("process_id"),
                "tid": ids("start_thread_id"),
                "start_ns": start[order],
                "end_ns": ids("end_ns"),
                "sequence_number": np.where(seq < 0, NULL, seq),
                "fwd_thread_id": ids("forward_thread_id"),
                "correlation_id": np.full(order.size, NULL, np.int64),
                "input_shapes": texts("input_shapes"),
                "input_dtypes": texts("input_dtypes"),
                "call_stack": texts("call_stack"),
                "module_hierarchy": texts("module_hierarchy"),
                "flops": texts("extra_args"),
            },
            order,
        )

    def _add_pending(self, events: dict[str, pa.Array | Int64Array], order: Int64Array) -> None:
        """Events join the window: ``events`` (every :data:`_PENDING` column but ``arrival``) in start
        order, the ``order[i]``-th event of its input at row ``i``. That place, after the events of every
        earlier input, is the event's arrival (the last tie breaker of the emission order)."""
        if not order.size:
            return
        batch = pa.RecordBatch.from_pydict({**events, "arrival": self._arrivals + order}, schema=_PENDING)
        self._arrivals += order.size
        self._pending.append(batch)
        self._pending_min = min(self._pending_min, _first_start(batch))

    def _name_codes(self, names: pa.Array) -> Int64Array:
        """Stable integer codes of op names (the pairing key needs integers)."""
        encoded = pc.dictionary_encode(names.fill_null(""))
        codes = [self._names.setdefault(str(s), len(self._names)) for s in encoded.dictionary.to_pylist()]
        index = encoded.indices.to_numpy(zero_copy_only=False)
        return np.asarray(np.asarray(codes, np.int64)[index], np.int64)

    def _add_marks(self, batch: pa.RecordBatch) -> None:
        """Pair start/end marks (per queue, thread, name); queue events join the window."""
        times = ints(batch.column("time_ns"))
        category = ints(batch.column("category"))
        is_end = category % 2 == 1
        order = pairing.acsq_order(times, is_end)  # the batch is taken from only at the pairs' ends
        names = _texts(batch, "name")
        tids = ints(batch.column("thread_id"))
        keys = np.stack([category // _QUEUE_OF_CATEGORY, tids, self._name_codes(names)])
        pairs = pairing.pair_acsq(
            keys[:, order], is_end[order], times[order], state=self._marks, base=self._marks_seen
        )
        self._marks_seen += times.size
        end = order[pairs.end_seq - (self._marks_seen - times.size)]
        queue = pairs.keys[0]
        corr = ints(batch.column("correlation_id"))[end]
        pid = ints(batch.column("process_id"))[end]
        tid = pairs.keys[1]
        dequeue = queue == 1
        n = end.size
        by_start = _start_order(pairs.start)
        origin = names.take(pa.array(end[by_start]))
        dequeued = dequeue[by_start]
        name = pc.if_else(pa.array(dequeued), pc.binary_join_element_wise("Dequeue@", origin, ""), origin)
        self._add_pending(
            {
                "rank": np.where(dequeued, DEQUEUE, ENQUEUE).astype(np.int64),
                "name": name,
                "pid": pid[by_start],
                "tid": tid[by_start],
                "start_ns": pairs.start[by_start],
                "end_ns": pairs.end[by_start],
                "sequence_number": np.full(n, NULL, np.int64),
                "fwd_thread_id": np.full(n, NULL, np.int64),
                "correlation_id": corr[by_start],
                "input_shapes": pa.nulls(n, pa.string()),
                "input_dtypes": pa.nulls(n, pa.string()),
                "call_stack": pa.nulls(n, pa.string()),
                "module_hierarchy": pa.nulls(n, pa.string()),
                "flops": pa.nulls(n, pa.string()),
            },
            by_start,
        )
        new = {
            "corr": corr[dequeue],
            "pid": pid[dequeue],
            "tid": tid[dequeue],
            "start": pairs.start[dequeue],
            "end": pairs.end[dequeue],
            "flowed": np.zeros(int(dequeue.sum()), np.int64),
        }
        if self.flows:
            self._deq = _upsert(self._deq, new)

    def _add_kernels(self, batch: pa.RecordBatch, *, ops: bool) -> None:
        """The kernels of a ``tasks`` batch, or of a ``comm`` batch (``ops``: communication ops, on
        their group's thread)."""
        self._counts["tasks_without_launch"] += batch.column("launch_ns").null_count
        rows, stream = self._first.rows(batch, ops=ops)
        group = np.full(rows.num_rows, NULL, np.int64)
        if ops:
            names = rows.column("group_name").cast(pa.string()).fill_null(NA).to_pylist()
            group = np.array([self._groups.setdefault(g, len(self._groups)) for g in names], np.int64)
        new = {
            "device_id": ints(rows.column("device_id")),
            "stream_id": stream,
            "start": ints(rows.column("start_ns")),
            "launch": ints(rows.column("launch_ns")),
            "group": group,
        }
        self._reach.saw(new["launch"])
        self._tasks = concat(self._tasks, new)

    # ------------------------------------------------------------------ emission

    def _emit(self, until: int) -> list[Emit]:
        out: list[Emit] = [("ops", self._emit_ops(bound)) for bound in self._slices(until)]
        if self._pending_min < until:
            out.append(("ops", self._emit_ops(until)))
        if self.flows:
            parts = [self._queue_flows(), self._npu_flows(until), self._fwdbwd_flows(until)]
            flows = _stack_flows(parts, list(self._groups))
            if flows.num_rows:
                out.append(("flows", flows))
        # before the first kernel shows how far behind kernels come, assume max_op_ns
        reach = self._reach.reach(unknown=self.max_op_ns)
        self._prune(until if until >= DONE else until - reach - self._queue_lag)
        return out

    def _slices(self, until: int) -> list[int]:
        """Starts that cut the ops ready before ``until`` into slices of about :data:`EMIT_OPS`:
        emitting them slice by slice is what smaller watermark steps would have done with the ops
        (the flows still wait for ``until``)."""
        if self._pending_min >= until:
            return []
        starts = np.concatenate([b.column("start_ns").to_numpy() for b in self._pending])
        return slice_starts(starts[starts < until], EMIT_OPS)

    def _take_ready(self, until: int) -> pa.Table:
        """Remove and return the window's events that start before ``until``, in emission order."""
        # each batch is sorted by start: its ready events are a prefix, split off as a slice, so an emit
        # copies the events it takes, not the whole reorder window
        kept: list[pa.RecordBatch] = []
        taken: list[pa.RecordBatch] = []
        for batch in self._pending:
            cut = int(np.searchsorted(batch.column("start_ns").to_numpy(), until, side="left"))
            if cut:
                taken.append(batch.slice(0, cut))
            if cut < batch.num_rows:
                kept.append(batch.slice(cut))
        self._pending = kept
        self._pending_min = min(map(_first_start, kept), default=DONE)
        picked = pa.Table.from_batches(taken, _PENDING).combine_chunks()
        order = np.lexsort(
            (
                picked.column("arrival").to_numpy(),
                -picked.column("end_ns").to_numpy(),
                picked.column("rank").to_numpy(),
                picked.column("start_ns").to_numpy(),
            )
        )
        return picked.take(pa.array(order))

    def _emit_ops(self, until: int) -> pa.RecordBatch:
        ready = self._take_ready(until)
        n = ready.num_rows
        rank = ready.column("rank").to_numpy()
        start = ready.column("start_ns").to_numpy()
        end = ready.column("end_ns").to_numpy()
        tid = ready.column("tid").to_numpy()
        pid = ready.column("pid").to_numpy()
        corr = ready.column("correlation_id").to_numpy()
        ids = self._next_op + np.arange(n, dtype=np.int64)
        self._next_op += n
        self._count_late(ready, start < self._emitted_to)
        self._emitted_to = max(self._emitted_to, until)

        parents = np.full(n, NO_PARENT, np.int64)
        in_tree = np.flatnonzero(rank != DEQUEUE)
        parents[in_tree], self._stack = nest(
            start[in_tree], end[in_tree], tid[in_tree], rank[in_tree] == CPU_OP, ids[in_tree], self._stack
        )
        if self.flows:
            is_op = rank == CPU_OP
            live = {"id": ids, "pid": pid, "tid": tid, "start": start, "end": end}
            self._live = concat(self._live, take(live, is_op))
            enqueue = rank == ENQUEUE
            self._track_enqueues(take(live, enqueue), corr[enqueue], parents[enqueue])
            self._track_sequences(ready, is_op)

        names = pc.if_else(pa.array(rank == ENQUEUE), "Enqueue", ready.column("name").combine_chunks())
        return conform(
            TABLES["ops"],
            {
                "op_id": ids,
                "parent_id": nullable(np.where(parents == NO_PARENT, NULL, parents)),
                "kind": pa.DictionaryArray.from_arrays(rank.astype(np.int32), pa.array(KINDS)),
                "name": names,
                "pid": pid,
                "tid": tid,
                "start_ns": start,
                "end_ns": end,
                "sequence_number": nullable(ready.column("sequence_number").to_numpy()),
                "fwd_thread_id": nullable(ready.column("fwd_thread_id").to_numpy()),
                "correlation_id": nullable(corr),
                "input_shapes": ready.column("input_shapes"),
                "input_dtypes": ready.column("input_dtypes"),
                "call_stack": ready.column("call_stack"),
                "module_hierarchy": ready.column("module_hierarchy"),
                "flops": ready.column("flops"),
            },
        )

    def _owner(self, parent_ids: Int64Array) -> tuple[Int64Array, ...]:
        """pid, tid and start of live ops by id (NULL where the op is no longer live)."""
        index = np.where(parent_ids == NO_PARENT, -1, find(self._live["id"], parent_ids))
        return gather(self._live, index, ("pid", "tid", "start"))

    def _track_enqueues(self, enqueues: Columns, corr: Int64Array, parents: Int64Array) -> None:
        """Remember each emitted enqueue and the op it is attached to (its ``corr_id_self`` owner)."""
        op_pid, op_tid, op_start = self._owner(parents)
        new = {
            "corr": corr,
            "pid": enqueues["pid"],
            "tid": enqueues["tid"],
            "start": enqueues["start"],
            "op_pid": op_pid,
            "op_tid": op_tid,
            "op_start": op_start,
            "flowed": np.zeros(corr.size, np.int64),
        }
        self._enq = _upsert(self._enq, new)

    def _track_sequences(self, ready: pa.Table, is_op: BoolArray) -> None:
        """Keep, per sequence number, the latest forward op and the latest backward op."""
        seq = ready.column("sequence_number").to_numpy()
        mask = is_op & (seq != NULL)
        if not mask.any():
            return
        fwd_tid = ready.column("fwd_thread_id").to_numpy()[mask]
        forward = fwd_tid == 0
        pid = ready.column("pid").to_numpy()[mask]
        tid = ready.column("tid").to_numpy()[mask]
        ts = ready.column("start_ns").to_numpy()[mask]
        none = np.full(forward.size, NULL, np.int64)
        new = {
            "seq": seq[mask],
            "fwd_pid": np.where(forward, pid, none),
            "fwd_tid": np.where(forward, tid, none),
            "fwd_ts": np.where(forward, ts, none),
            "bwd_pid": np.where(forward, none, pid),
            "bwd_tid": np.where(forward, none, tid),
            "bwd_ts": np.where(forward, none, ts),
        }
        self._fwd = _merge_sequences(self._fwd, _latest_per_sequence(new))

    # ------------------------------------------------------------------ flows

    @staticmethod
    def _flows(kind: int, flow_id: Int64Array, src: tuple[Int64Array, ...], dst: Columns) -> Columns:
        """Flow rows of one kind as int64 columns (``dst_device_id`` NULL for a host destination)."""
        n = flow_id.size
        none = np.full(n, NULL, np.int64)
        return {
            "kind": np.full(n, kind, np.int64),
            "flow_id": flow_id,
            "src_pid": src[0],
            "src_tid": src[1],
            "src_ns": src[2],
            "dst_device_id": dst.get("dst_device_id", none),
            "dst_pid": dst.get("dst_pid", none),
            "dst_tid": dst["dst_tid"],
            "dst_ns": dst["dst_ns"],
            "dst_group": dst.get("dst_group", none),
            "correlation_id": dst.get("correlation_id", none),
        }

    def _queue_flows(self) -> Columns:
        """``async_task_queue``: every enqueue whose dequeue is known, once."""
        enq, deq = self._enq, self._deq
        _, ei, di = np.intersect1d(enq["corr"], deq["corr"], assume_unique=True, return_indices=True)
        fresh = (enq["flowed"][ei] == 0) & (deq["flowed"][di] == 0)
        ei, di = ei[fresh], di[fresh]
        order = np.argsort(enq["start"][ei], kind="stable")
        ei, di = ei[order], di[order]
        enq["flowed"][ei] = 1
        deq["flowed"][di] = 1
        if ei.size:
            self._queue_lag = max(self._queue_lag, int((deq["start"][di] - enq["start"][ei]).max()))
        return self._flows(
            ASYNC_TASK_QUEUE,
            enq["corr"][ei],
            (enq["pid"][ei], enq["tid"][ei], enq["start"][ei]),
            {
                "dst_pid": deq["pid"][di],
                "dst_tid": deq["tid"][di],
                "dst_ns": deq["start"][di],
                "correlation_id": enq["corr"][ei],
            },
        )

    def _npu_flows(self, until: int) -> Columns:
        """``async_npu``: kernels whose launch is before the horizon, linked to their torch op."""
        tasks = self._tasks
        ready = tasks["launch"] < until
        done = take(tasks, ready)
        self._tasks = take(tasks, ~ready)
        order = np.lexsort((done["start"], done["device_id"], done["launch"]))
        done = take(done, order)
        launch = done["launch"]
        if self.task_queue:
            *src, corr = self._owner_of_launch(launch)
        else:
            hit = stab(self._live["start"], self._live["end"], launch)
            src, corr = list(gather(self._live, hit, ("pid", "tid", "start"))), np.full(launch.size, NULL)
        linked = src[2] != NULL
        self._counts["kernels_without_op"] += int((~linked).sum())
        ids = self._next_flow + np.arange(int(linked.sum()), dtype=np.int64)
        self._next_flow += ids.size
        return self._flows(
            ASYNC_NPU,
            ids,
            tuple(s[linked] for s in src),
            {
                "dst_device_id": done["device_id"][linked],
                "dst_tid": done["stream_id"][linked],
                "dst_ns": done["start"][linked],
                "dst_group": done["group"][linked],
                "correlation_id": corr[linked],
            },
        )

    def _owner_of_launch(self, launch: Int64Array) -> tuple[Int64Array, ...]:
        """pid, tid, start of the op owning the dequeue window around each launch, and the window's
        correlation id (NULL if none)."""
        deq = self._deq
        by_end = np.argsort(deq["end"], kind="stable")
        starts, corrs = deq["start"][by_end], deq["corr"][by_end]
        first = np.searchsorted(deq["end"][by_end], launch, side="left")  # the first ending at or after it
        inside = first < starts.size
        inside[inside] = starts[first[inside]] <= launch[inside]
        window = np.where(inside, first, -1)
        (corr,) = gather({"corr": corrs}, window, ("corr",))
        owner = np.where(window >= 0, find(self._enq["corr"], corr), -1)
        pid, tid, start = gather(self._enq, owner, ("op_pid", "op_tid", "op_start"))
        return pid, tid, start, np.where(start != NULL, corr, NULL)

    def _fwdbwd_flows(self, until: int) -> Columns:
        """``fwdbwd`` for sequence numbers whose forward op is ``max_op_ns`` behind the horizon."""
        fwd = self._fwd
        final = horizon(until, self.max_op_ns)
        has_fwd = fwd["fwd_ts"] != NULL
        has_bwd = fwd["bwd_ts"] != NULL
        closed = np.where(has_fwd, fwd["fwd_ts"] < final, fwd["bwd_ts"] < final)
        if until >= DONE:
            closed[:] = True
        flow = closed & has_fwd & has_bwd & (fwd["fwd_tid"] != fwd["bwd_tid"])
        self._counts["backward_without_forward"] += int((closed & ~has_fwd).sum())
        self._fwd = take(fwd, ~closed)
        return self._flows(
            FWDBWD,
            fwd["seq"][flow],
            (fwd["fwd_pid"][flow], fwd["fwd_tid"][flow], fwd["fwd_ts"][flow]),
            {"dst_pid": fwd["bwd_pid"][flow], "dst_tid": fwd["bwd_tid"][flow], "dst_ns": fwd["bwd_ts"][flow]},
        )

    def _prune(self, until: int) -> None:
        """Forget what no later event, launch or dequeue can reach (see the module docstring)."""
        self._live = take(self._live, self._live["end"] >= until)
        deq = self._deq
        gone = deq["end"] < until
        self._counts["dequeue_without_enqueue"] += int((gone & (deq["flowed"] == 0)).sum())
        self._deq = take(deq, ~gone)
        enq = self._enq
        waiting = ~np.isin(enq["corr"], self._deq["corr"])
        stale = waiting & ((enq["flowed"] == 1) | (enq["start"] < horizon(until, self.max_op_ns)))
        if until >= DONE:
            stale = np.ones(enq["corr"].size, np.bool_)
        self._counts["enqueue_without_dequeue"] += int((stale & (enq["flowed"] == 0)).sum())
        self._enq = take(enq, ~stale)

    def _count_late(self, ready: pa.Table, late: BoolArray) -> None:
        """Late ProfilerSteps apart: a step longer than ``max_op_ns`` is ordinary, and nothing read
        from the tree misses it (they take no part in operator_details, memory owners or flows)."""
        if not late.any():
            return
        steps = pc.starts_with(ready.column("name").filter(pa.array(late)).cast(pa.string()), "ProfilerStep#")
        n_steps = int(pc.sum(steps.cast(pa.int64())).as_py() or 0)
        self._counts["late_steps"] += n_steps
        self._counts["late_ops"] += int(late.sum()) - n_steps

    def _report(self) -> None:
        """Log what never matched: unpaired marks, late ops, unlinked kernels, lone queue events."""
        counts = {k: v for k, v in self._counts.items() if self.flows or k not in _FLOW_COUNTERS}
        mark_counts = self._marks.counts
        counts["marks_without_start"] = int(mark_counts[pairing.NO_START])
        counts["starts_replaced"] = int(mark_counts[pairing.ORPHAN_START])
        counts["starts_never_ended"] = int(pairing.open_starts(self._marks).start.size)
        serious = ("marks_without_start", "starts_replaced", "starts_never_ended", "late_ops")
        level = self._log.warning if any(counts[k] for k in serious) else self._log.debug
        level(events.RECORDS_UNMATCHED, **counts)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        window = pa.Table.from_batches(self._pending, _PENDING).combine_chunks()
        # one batch sorted by start (then arrival: the batches are in arrival order), as restored
        window = window.take(pa.array(_start_order(window.column("start_ns").to_numpy())))
        return pack_state(
            {
                "pending": window,
                "arrivals": self._arrivals,
                "names": list(self._names),
                "groups": list(self._groups),
                "marks": pack_keyed(self._marks, 1),
                "marks_seen": self._marks_seen,
                "stack": [self._stack.ids, self._stack.starts, self._stack.ends, self._stack.tids],
                "stack_latest": self._stack.latest,
                "next_op": self._next_op,
                "next_flow": self._next_flow,
                "emitted_to": self._emitted_to,
                "reach": self._reach.state(),
                "queue_lag": self._queue_lag,
                "enq": self._enq,
                "deq": self._deq,
                "live": self._live,
                "tasks": self._tasks,
                "first": self._first.state(),
                "fwd": self._fwd,
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._reset()
        window: pa.Table = doc["pending"]
        self._pending = [b for b in window.to_batches() if b.num_rows]
        self._pending_min = min(map(_first_start, self._pending), default=DONE)
        self._arrivals = doc["arrivals"]
        self._names = {name: code for code, name in enumerate(doc["names"])}
        self._groups = {name: code for code, name in enumerate(doc["groups"])}
        self._marks = unpack_keyed(doc["marks"])
        self._marks_seen = doc["marks_seen"]
        ids, starts, ends, tids = (np.asarray(a, np.int64) for a in doc["stack"])
        self._stack = Stack(ids, starts, ends, tids, doc["stack_latest"])
        self._next_op = doc["next_op"]
        self._next_flow = doc["next_flow"]
        self._emitted_to = doc["emitted_to"]
        self._reach, self._queue_lag = KernelReach(doc["reach"]), doc["queue_lag"]
        self._enq, self._deq, self._live = doc["enq"], doc["deq"], doc["live"]
        self._tasks, self._fwd = doc["tasks"], doc["fwd"]
        self._first = FirstKernels(doc["first"])
        self._counts = dict(doc["counts"])
