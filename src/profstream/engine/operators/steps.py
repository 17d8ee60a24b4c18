"""Iterations and steps: msprof's step-trace state machine and torch_npu's ProfilerStep ranges.

:class:`Steps` turns one device's step-trace tags into ``steps`` rows (the ``step_trace`` csv and the
Step Trace timeline layer, msprof_outputs.md §2.4, §3.6, §4b); :class:`FrameworkSteps` turns the
top-level ``ProfilerStep#<n>`` torch ops and the device tasks they launched into ``framework_steps``
rows, torch_npu's device step ranges (framework_outputs.md §4c). Both streams have the ``steps``
schema (:data:`~profstream.engine.schema.TABLES`).

**Tags** (ts_track tag 10, cann_raw_formats.md §2.6; msprof ``common_func/step_trace_constant.py``):
0 model start, 1 model end, 2 FP start, 3 BP end, 4 iteration end, 10000..19999 all-reduce (even
start, odd end, paired per stream), 60000/60001 step start/end. Rows of ``kind``:

* ``model``: the iterations of each model id, from msprof's reorder + state machine (AM
  ``mscalculate/step_trace/create_step_table.py`` ``StepTracePreProcess``,
  ``tag_handler/state_machine/iter_state.py``, ``tag_handler/iter_info_handler.py``). A record repeated
  exactly (time, tag, model, index and stream id) counts once, as msprof reads the table with ``select
  DISTINCT``. Per model, records in time order pass a reorder queue that regroups the interleaved tags of
  pipelined iterations: a tag 0 opens an entry; tags 2, 3, 4 join the first entry whose last tag is smaller
  (else open one); an all-reduce tag joins the first entry not yet closed by a 4 (else it is lost); a tag 1
  releases the entries up to the second one headed by a tag 0, then itself. The released records drive the
  machine: from "model end" (the initial state) a 0 opens an iteration; from "model start" a 1 closes it and
  a 4 closes it and opens the next at the same time (loop sink); from "iteration end" a 4 does the same and
  a 0 re-opens the current iteration at its own time (dropping what the loop-sink opening collected); every
  other transition is ignored (a 1 after a 4 does nothing). Iteration ids count from 1 per model; FP / BP
  are the last tag 2 / 3 of the iteration; all-reduce pairs are listed stream by stream in first-seen order.
* ``step``: one row per ``index_id`` from its 60000 and 60001 records (msprof ``CreateStepTime``),
  iteration id = index id, no FP/BP.
* ``model`` rows with a null model id from legacy ``training_trace`` records (MindInsight's
  ``step_trace_parser.py``, the only reader of that format; codec :mod:`profstream.codecs.training_trace`):
  255 ends an iteration, 0 or a tag above 255 resets FP/BP/all-reduce, 1 FP, 2 BP, every other tag an
  all-reduce point paired in order per stream (a stream with an odd count is skipped); an iteration
  starts at the previous end (the first one at its FP) and needs FP and BP.

**Data Aug Bound** = FP - the end of the row (any kind, any model) with the latest end before FP
(msprof ``CreateTrainingTrace.update_data_aug``, which also sees the ``step`` rows); null without FP
or without such a row.

Streaming: records are processed in time order once the watermark passes them (a reorder window).
An iteration is complete when it closes, but its Data Aug Bound is final only when no row can still
end before its FP: rows are held until every record still in a reorder queue, and every record yet
to come, is at or after their FP. State: the unprocessed records, the reorder queue and the open
iteration of each model, the open 60000 of each index id, the held rows, and the row ends that a
held or future FP can still need (the latest end below the lowest such FP and everything after).

Choices where msprof is odd or unbounded, documented here and tested:

* msprof aborts the whole table when one iteration has start == end (``check_timestamp`` raises
  inside the extraction loop); here only that iteration is dropped (counted).
* The last open iteration of each model is dropped at the end, as msprof's ``get_data`` does;
  counted.
* A ``step`` row pairs an index id's first 60000 with the next 60001 of that id; a second 60000
  while it is open is skipped (counted). msprof (``CreateStepTime.extract_data``) makes a row only of
  an index id with exactly two distinct records in the whole run, its earlier as start and later as
  end, which needs the end of the data to know. The two agree when an id has one of each.
* GetNext tags (20000..59999) are not kept: the ``steps`` schema has no column for them and they do
  not influence iterations in msprof. mstx marks (tag 11) and undocumented tags are skipped: msprof
  queues a tag 11 as a reorder entry that can swallow every later all-reduce tag of its model, and
  the machine ignores both.
* A reorder entry closed by a 4 at the head of the queue can no longer change, so it is released at
  once (msprof waits for a tag 1 or the end of the data); the entries msprof would still hold are
  remembered by count, which is all the tag-1 release rule needs, so the output is the same. A
  queue that grows past ``max_queue`` entries (a model that never closes an entry) releases its head
  early (counted).
* Data Aug Bound ignores a row whose end equals the iteration's own end when FP lies after it
  (msprof's tie order there depends on a sort's stability).
* For legacy data, MindInsight re-emits an iteration for every record between a 255 and the next
  step tag; here a 255 closes the iteration and opens the next one (as a tag 4 does), and records
  between a 255 and the following step tag are dropped by that step tag (counted).

:class:`FrameworkSteps` (framework_outputs.md §4c; torch_npu ``_fwk_cann_relation_parser.py``
``get_step_range``, the path without a task queue): the kernels (torch_npu's acl-to-npu flow ends,
:mod:`~profstream.engine.operators.launches`: tasks, and communication ops from ``comm@<d>``) whose
launch (``launch_ns``, the start of the launching API, i.e. the flow's start) lies in ``[host start,
host end]`` of a
top-level ``ProfilerStep#<n>`` op belong to step n; the earliest launch gives ``start_ns`` = its
tasks' earliest start, the latest launch gives the device end = its tasks' latest end; the row
spans ``[device start (host start if none), max(device end, host end)]``. With a task queue
(``task_queue``) torch_npu goes through the correlation ids instead: a kernel belongs to the step
whose op subtree enqueued the correlation id of the dequeue window it was launched in, and the
smallest and largest such ids of a step give its first and last kernels. Here that is the kernel's
``async_npu`` flow (``flows``): it starts at the op the enqueue was attached to, a descendant of the
step exactly when it starts inside the step's host range (FrameworkOps nests torch ops of every thread
by time), and carries the window's ``correlation_id``, which orders the kernels in place of the launch
time. A kernel without such a flow (its enqueue under no op) counts for no step, as in torch_npu.
torch_npu drops every step when one step launched nothing; here such a step gets its host range
(counted). A step is final once
the watermark is ``settle_ns`` past its host end, plus how far behind their launch kernels come
(:class:`~profstream.engine.operators._state.KernelReach`); a task arriving for a step already
emitted is counted as late.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs import training_trace as legacy_codec
from profstream.codecs import ts_track
from profstream.engine.operators._state import KernelReach, ints
from profstream.engine.operators.launches import FirstKernels, claim_kernels
from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform
from profstream.events import RECORDS_UNMATCHED, get_logger

I64 = npt.NDArray[np.int64]

#: the stream of torch_npu device step ranges; it has the ``steps`` schema
FRAMEWORK_STEPS = "framework_steps"
STEPS_SCHEMA = TABLES["steps"]

SOURCES = ("ts_track", "training_trace")
_TS_TRACK, _LEGACY = 0, 1
# buffered records: one int64 row per field
_TIME, _SOURCE, _TAG, _MODEL, _INDEX, _STREAM = range(6)
_FIELDS = 6

MODEL_START = ts_track.MODEL_START_TAG
MODEL_END = ts_track.MODEL_END_TAG
FP_TAG = ts_track.FP_START_TAG
BP_TAG = ts_track.BP_END_TAG
ITERATION_END = ts_track.ITERATION_END_TAG
REDUCE_TAGS = ts_track.ALL_REDUCE_TAGS
STEP_START = ts_track.STEP_START_TAG
STEP_END = ts_track.STEP_END_TAG
#: the tags the model state machine reads; everything else in tag 10 records is skipped
_MACHINE_TAGS = (MODEL_START, MODEL_END, FP_TAG, BP_TAG, ITERATION_END)


# --------------------------------------------------------------------------- state


class _Open(msgspec.Struct, array_like=True):
    """The open iteration of a model (or of the legacy stream, whose first one has no start)."""

    start: int | None
    fp: int | None = None
    bp: int | None = None
    # all-reduce: [stream, [[start, end or None], ...]] in first-seen stream order
    reduce: list[tuple[int, list[list[int | None]]]] = []

    def add_reduce(self, stream: int, time: int, *, opens: bool) -> bool:
        """msprof ``AllReduceTagHandler``: an even tag opens a pair, an odd one ends the last pair."""
        pairs = next((p for s, p in self.reduce if s == stream), None)
        if pairs is None:
            pairs = []
            self.reduce.append((stream, pairs))
        if opens:
            pairs.append([time, None])
            return True
        if not pairs:
            return False
        pairs[-1][1] = time
        return True


class _Entry(msgspec.Struct, array_like=True):
    """One reorder entry: its machine tags in order and its records ``(time, tag, stream)``."""

    tags: list[int]
    records: list[tuple[int, int, int]]


class _Model(msgspec.Struct, array_like=True):
    """Reorder queue and state machine of one model id."""

    model_id: int
    state: int = MODEL_END  # the tag that put the machine in its state
    index: int = 1
    open: _Open | None = None
    queue: list[_Entry] = []
    held_starts: int = 0  # released entries headed by a tag 0 that msprof would still hold


class _Legacy(msgspec.Struct, array_like=True):
    """MindInsight's legacy step-trace parser state."""

    index: int = 0
    open: _Open = msgspec.field(default_factory=lambda: _Open(None))
    ended: bool = False  # an iteration end came after the last step tag


class _Row(msgspec.Struct, array_like=True):
    """A closed ``steps`` row; its Data Aug Bound is computed when it is emitted."""

    kind: str
    model_id: int | None
    iteration: int
    start: int
    end: int
    fp: int | None = None
    bp: int | None = None
    reduce_starts: list[int | None] = []
    reduce_ends: list[int | None] = []


class _State(msgspec.Struct, array_like=True):
    """Everything :class:`Steps` keeps between batches except the numpy arrays."""

    cutoff: int = int(np.iinfo(np.int64).min)  # records below it have been processed
    models: dict[int, _Model] = {}
    legacy: _Legacy = msgspec.field(default_factory=_Legacy)
    step_open: dict[int, tuple[int, int]] = {}  # index id -> (model id, 60000 time)
    held: list[_Row] = []  # closed rows waiting for their Data Aug Bound
    counts: dict[str, int] = {}


def count(counts: dict[str, int], reason: str, n: int = 1) -> None:
    """Add ``n`` to the counter of ``reason`` (reported by :func:`report`)."""
    counts[reason] = counts.get(reason, 0) + n


def report(
    component: str, device_id: int | None, counts: dict[str, int], serious: Collection[str] = ()
) -> None:
    """Log what never matched, once per reason, at the end; ``serious`` reasons (the output lost or
    changed something) as warnings."""
    log = get_logger(component=component, device=device_id)
    for reason, n in sorted(counts.items()):
        if n:
            (log.warning if reason in serious else log.info)(RECORDS_UNMATCHED, reason=reason, count=n)


# --------------------------------------------------------------------------- Steps


class Steps(Operator):
    """Iterations (``model``), framework-marked steps (``step``) of one device; see the module docstring.

    ``sources`` picks the inputs: ``ts_track`` (current collections) and/or ``training_trace``
    (pre-2021 collections); ``max_queue`` bounds each model's reorder queue.
    """

    def __init__(
        self, device_id: int, *, sources: Sequence[str] = ("ts_track",), max_queue: int = 64
    ) -> None:
        unknown = [s for s in sources if s not in SOURCES]
        if unknown or not sources:
            msg = f"sources: expected some of {SOURCES}, got {tuple(sources)}"
            raise ValueError(msg)
        self.device_id = device_id
        self.max_queue = max_queue
        self._source_of = {at(s, device_id): SOURCES.index(s) for s in sources}
        self.inputs = tuple(self._source_of)
        self.outputs = (at("steps", device_id),)
        self._buffer: I64 = np.empty((_FIELDS, 0), np.int64)
        self._ends: I64 = np.empty(0, np.int64)  # sorted ends of closed rows still needed
        self._state = _State()

    # -- input

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        source = self._source_of[stream]
        records = _ts_track_records(batch) if source == _TS_TRACK else _legacy_records(batch)
        if records.shape[1]:
            self._buffer = np.concatenate([self._buffer, records], axis=1)

    def advance(self, watermark: int) -> list[Emit]:
        ready = self._buffer[_TIME] < watermark
        self._process(self._buffer[:, ready])
        self._buffer = self._buffer[:, ~ready]
        self._state.cutoff = max(self._state.cutoff, watermark)
        return self._emit(self._floor())

    def finish(self) -> list[Emit]:
        state = self._state
        self._process(self._buffer)
        self._buffer = self._buffer[:, :0]
        for model in state.models.values():
            released: list[tuple[int, int, int]] = []
            for entry in model.queue:
                released.extend(entry.records)
            model.queue = []
            self._run_machine(model, released)
            if model.open is not None:
                count(state.counts, "iteration still open at the end")
        if state.legacy.open.fp is not None or state.legacy.open.reduce:
            count(state.counts, "legacy iteration without an end")
        count(state.counts, "step start without a step end", len(state.step_open))
        state.cutoff = DONE
        out = self._emit(DONE)
        report("steps", self.device_id, state.counts)
        return out

    # -- record processing

    def _process(self, records: I64) -> None:
        if not records.shape[1]:
            return
        records = _distinct(records[:, np.argsort(records[_TIME], kind="stable")])
        for time, source, tag, model_id, index, stream in records.T.tolist():
            if source == _LEGACY:
                self._legacy(time, tag, stream)
            elif tag >= STEP_START:
                self._step_tag(time, tag, model_id, index)
            else:
                model = self._state.models.get(model_id)
                if model is None:
                    model = self._state.models[model_id] = _Model(model_id)
                released: list[tuple[int, int, int]] = []
                self._reorder(model, (time, tag, stream), released)
                self._run_machine(model, released)

    def _reorder(self, model: _Model, record: tuple[int, int, int], out: list[tuple[int, int, int]]) -> None:
        """msprof ``StepTracePreProcess`` for one record, releasing what can no longer change."""
        queue = model.queue
        tag = record[1]
        if tag == MODEL_START:
            queue.append(_Entry([tag], [record]))
        elif tag == MODEL_END:
            if model.held_starts >= 2:
                model.held_starts -= 1  # msprof stops at the second held entry: nothing queued moves
            else:
                seen, model.held_starts = model.held_starts, 0
                while queue:
                    if queue[0].tags[0] == MODEL_START:
                        seen += 1
                        if seen == 2:
                            break
                    out.extend(queue.pop(0).records)
            out.append(record)
        elif tag in REDUCE_TAGS:
            entry = next((e for e in queue if e.tags[-1] != ITERATION_END), None)
            if entry is None:
                count(self._state.counts, "all-reduce tag outside every iteration")
                return
            entry.records.append(record)
        else:
            entry = next((e for e in queue if e.tags[-1] < tag), None)
            if entry is None:
                queue.append(_Entry([tag], [record]))
            else:
                entry.tags.append(tag)
                entry.records.append(record)
        while queue and (queue[0].tags[-1] == ITERATION_END or len(queue) > self.max_queue):
            if queue[0].tags[-1] != ITERATION_END:
                count(self._state.counts, "reorder entry released early (queue full)")
            entry = queue.pop(0)
            model.held_starts += entry.tags[0] == MODEL_START
            out.extend(entry.records)

    def _run_machine(self, model: _Model, records: list[tuple[int, int, int]]) -> None:
        """msprof's ``IndexTracker`` states, then the per-iteration FP/BP/all-reduce handlers."""
        for time, tag, stream in records:
            if tag == MODEL_START:
                if model.state != MODEL_START:
                    model.open = _Open(time)
                    model.state = MODEL_START
            elif tag == MODEL_END:
                if model.state == MODEL_START:
                    self._close_model(model, time)
                    model.state = MODEL_END
            elif tag == ITERATION_END:
                if model.state != MODEL_END:
                    self._close_model(model, time)
                    model.open = _Open(time)
                    model.state = ITERATION_END
            elif model.open is not None:
                _collect(model.open, time, tag, stream, self._state.counts)

    def _close_model(self, model: _Model, end: int) -> None:
        it = model.open
        # the states that close an iteration have one open, and a model iteration opens at a tag time
        assert it is not None and it.start is not None
        iteration, model.index, model.open = model.index, model.index + 1, None
        if it.start == end:
            count(self._state.counts, "iteration with start == end")
            return
        pairs = [pair for _, stream_pairs in it.reduce for pair in stream_pairs]
        self._close(
            _Row(
                "model",
                model.model_id,
                iteration,
                it.start,
                end,
                it.fp,
                it.bp,
                [p[0] for p in pairs],
                [p[1] for p in pairs],
            )
        )

    def _step_tag(self, time: int, tag: int, model_id: int, index: int) -> None:
        """msprof ``CreateStepTime``: one ``step`` row per index id from its 60000 and 60001."""
        opened = self._state.step_open
        if tag == STEP_START:
            if index in opened:
                count(self._state.counts, "second step start for one index id")
            else:
                opened[index] = (model_id, time)
        elif tag == STEP_END:
            start = opened.pop(index, None)
            if start is None:
                count(self._state.counts, "step end without a step start")
            else:
                self._close(_Row("step", start[0], index, start[1], time))

    def _legacy(self, time: int, tag: int, stream: int) -> None:
        """MindInsight's ``_construct_event_info`` for one legacy record (see the module docstring)."""
        legacy = self._state.legacy
        it = legacy.open
        if tag == legacy_codec.ITERATION_END_TAG:
            legacy.index += 1
            if it.fp is None or it.bp is None:
                count(self._state.counts, "legacy iteration without FP or BP")
            else:
                starts, ends = self._legacy_pairs(it)
                start = it.fp if it.start is None else it.start
                self._close(_Row("model", None, legacy.index, start, time, it.fp, it.bp, starts, ends))
            legacy.open, legacy.ended = _Open(time), True
        elif tag == 0 or tag > legacy_codec.ITERATION_END_TAG:
            if legacy.ended and (it.fp is not None or it.bp is not None or it.reduce):
                count(self._state.counts, "legacy record between an iteration end and a step tag")
            legacy.open = _Open(it.start if legacy.ended else None)
            legacy.ended = False
        elif tag == legacy_codec.FP_START_TAG:
            it.fp = time
        elif tag == legacy_codec.BP_END_TAG:
            it.bp = time
        else:
            pairs = next((p for s, p in it.reduce if s == stream), None)
            if pairs is None:
                it.reduce.append((stream, [[time]]))
            else:
                pairs.append([time])

    def _legacy_pairs(self, it: _Open) -> tuple[list[int | None], list[int | None]]:
        """Consecutive points per stream; a stream with an odd count is skipped, as MindInsight does."""
        starts: list[int | None] = []
        ends: list[int | None] = []
        for _, points in it.reduce:
            flat = [p[0] for p in points]
            if len(flat) % 2:
                count(self._state.counts, "legacy all-reduce stream with an odd number of points")
                continue
            starts.extend(flat[0::2])
            ends.extend(flat[1::2])
        return starts, ends

    # -- Data Aug Bound and emission

    def _close(self, row: _Row) -> None:
        k = int(np.searchsorted(self._ends, row.end, side="right"))
        self._ends = np.insert(self._ends, k, row.end)
        self._state.held.append(row)

    def _floor(self) -> int:
        """No row can still close with an end below this: processed time and every queued record."""
        queued = [r[0] for m in self._state.models.values() for e in m.queue for r in e.records]
        return min([self._state.cutoff, *queued])

    def _emit(self, floor: int) -> list[Emit]:
        state = self._state
        ready = [r for r in state.held if r.fp is None or r.fp <= floor]
        state.held = [r for r in state.held if not (r.fp is None or r.fp <= floor)]
        aug: list[int | None] = []
        for row in ready:
            if row.fp is None:
                aug.append(None)
                continue
            k = int(np.searchsorted(self._ends, min(row.fp, row.end), side="left")) - 1
            aug.append(None if k < 0 else row.fp - int(self._ends[k]))
        self._prune(floor)
        if not ready:
            return []
        order = sorted(range(len(ready)), key=lambda i: (ready[i].end, ready[i].kind, ready[i].iteration))
        rows = [ready[i] for i in order]
        batch = conform(
            STEPS_SCHEMA,
            {
                "device_id": pa.array([self.device_id] * len(rows), pa.int32()),
                "kind": pa.array([r.kind for r in rows], pa.string()),
                "model_id": pa.array([r.model_id for r in rows], pa.int64()),
                "iteration_id": pa.array([r.iteration for r in rows], pa.int64()),
                "start_ns": pa.array([r.start for r in rows], pa.int64()),
                "end_ns": pa.array([r.end for r in rows], pa.int64()),
                "fp_ns": pa.array([r.fp for r in rows], pa.int64()),
                "bp_ns": pa.array([r.bp for r in rows], pa.int64()),
                "data_aug_ns": pa.array([aug[i] for i in order], pa.int64()),
                "reduce_start_ns": pa.array([r.reduce_starts for r in rows], pa.list_(pa.int64())),
                "reduce_end_ns": pa.array([r.reduce_ends for r in rows], pa.list_(pa.int64())),
            },
        )
        return [(self.outputs[0], batch)]

    def _prune(self, floor: int) -> None:
        """Keep the ends a future query (an FP at or after the lowest pending one) can still pick."""
        state = self._state
        fps = [r.fp for r in state.held if r.fp is not None]
        fps += [m.open.fp for m in state.models.values() if m.open is not None and m.open.fp is not None]
        if state.legacy.open.fp is not None:
            fps.append(state.legacy.open.fp)
        lowest = min([floor, *fps])
        k = int(np.searchsorted(self._ends, lowest, side="left"))
        self._ends = self._ends[max(k - 1, 0) :]

    # -- snapshots

    def snapshot(self) -> bytes:
        return pack_state(
            {"buffer": self._buffer, "ends": self._ends, "state": msgspec.msgpack.encode(self._state)}
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._buffer, self._ends = doc["buffer"], doc["ends"]
        self._state = msgspec.msgpack.decode(doc["state"], type=_State)


def _collect(it: _Open, time: int, tag: int, stream: int, counts: dict[str, int]) -> None:
    """FP / BP / all-reduce of the open iteration (msprof ``DispatchIterInfoHandler``)."""
    if tag == FP_TAG:
        it.fp = time
    elif tag == BP_TAG:
        it.bp = time
    elif tag in REDUCE_TAGS and not it.add_reduce(stream, time, opens=tag % 2 == 0):
        count(counts, "all-reduce end without a start")


def _distinct(records: I64) -> I64:
    """``records`` without repeats of an earlier ts_track record (every field equal): msprof reads the
    step-trace table with ``select DISTINCT`` (``StepTableBuilder._get_step_data``,
    ``TsTrackModel.get_step_trace_with_tag``). Legacy records are all kept."""
    ts = np.flatnonzero(records[_SOURCE] == _TS_TRACK)
    _, first = np.unique(records[:, ts], axis=1, return_index=True)
    keep = records[_SOURCE] != _TS_TRACK
    keep[ts[first]] = True
    return records if keep.all() else records[:, keep]


def _stack(columns: Sequence[Any], n: int) -> I64:
    out = np.empty((_FIELDS, n), np.int64)
    for row, values in enumerate(columns):
        out[row] = values
    return out


def _ts_track_records(batch: pa.RecordBatch) -> I64:
    """The step-trace (tag 10) records the operator reads, as buffered int64 rows."""
    tag_id = batch.column("tag_id")
    keep = pc.and_(
        pc.equal(batch.column("tag"), ts_track.TAG_STEP_TRACE),
        pc.or_(
            pc.or_(
                pc.is_in(tag_id, pa.array(_MACHINE_TAGS, tag_id.type)),
                pc.and_(pc.greater_equal(tag_id, REDUCE_TAGS.start), pc.less(tag_id, REDUCE_TAGS.stop)),
            ),
            pc.is_in(tag_id, pa.array([STEP_START, STEP_END], tag_id.type)),
        ),
    )
    kept = batch.filter(pc.fill_null(keep, False))
    n = kept.num_rows

    def col(name: str) -> I64:
        return ints(kept.column(name))

    return _stack(
        [
            col("time_ns"),
            np.full(n, _TS_TRACK),
            col("tag_id"),
            col("model_id"),
            col("index_id"),
            col("stream_id"),
        ],
        n,
    )


def _legacy_records(batch: pa.RecordBatch) -> I64:
    n = batch.num_rows

    def col(name: str) -> I64:
        return ints(batch.column(name))

    return _stack(
        [col("time_ns"), np.full(n, _LEGACY), col("tag_id"), np.zeros(n), np.zeros(n), col("stream_id")], n
    )


# --------------------------------------------------------------------------- FrameworkSteps

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# accumulator rows per (device, step): first launch, its earliest start, last launch, its latest end
_FIRST_LAUNCH, _FIRST_START, _LAST_LAUNCH, _LAST_END = range(4)
_NULL = int(np.iinfo(np.int64).min)
# known steps: number, host start, host end
_NUMBER, _HOST_START, _HOST_END = range(3)


class FrameworkSteps(Operator):
    """torch_npu's device step ranges (``kind`` framework) per device; see the module docstring.

    Inputs ``ops`` and ``tasks@<d>`` for each of ``device_ids`` (and ``comm@<d>`` for each of
    ``communication``; ``flows`` with ``task_queue``); outputs ``framework_steps@<d>``.
    ``max_pending`` bounds the tasks kept per device while their step has not been seen (the oldest
    are dropped, counted).
    """

    def __init__(
        self,
        device_ids: Sequence[int],
        *,
        communication: Sequence[int] = (),
        task_queue: bool = False,
        settle_ns: int = 1_000_000_000,
        max_pending: int = 1 << 20,
    ) -> None:
        self.device_ids = tuple(device_ids)
        self.task_queue = task_queue
        self.settle_ns = settle_ns
        self.max_pending = max_pending
        self._device_of = {at("tasks", d): k for k, d in enumerate(self.device_ids)}
        self._comm_of = {at("comm", d): self.device_ids.index(d) for d in communication}
        self.inputs = ("ops", *self._device_of, *self._comm_of, *(("flows",) if task_queue else ()))
        self.outputs = tuple(at(FRAMEWORK_STEPS, d) for d in self.device_ids)
        n = len(self.device_ids)
        self._steps: I64 = np.empty((3, 0), np.int64)
        self._acc: I64 = np.empty((n, 4, 0), np.int64)
        # per device, rows (time that finds the step, order within it, start, end): launch, launch,
        # start, end without a task queue; flow source, correlation id, start, end with it
        self._pending: list[I64] = [np.empty((4, 0), np.int64) for _ in range(n)]
        # task queue: kernels (stream, NULL for a communication op; start; end) waiting for their flow
        self._kernels: list[I64] = [np.empty((3, 0), np.int64) for _ in range(n)]
        self._first = FirstKernels()
        self._last_end = _NULL  # host end of the latest step seen
        self._reach = KernelReach()
        self._counts: dict[str, int] = {}

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == "ops":
            self._add_steps(batch)
            for k in range(len(self.device_ids)):
                self._assign(k)
            return
        if stream == "flows":
            self._add_flows(batch)
            return
        ops = stream in self._comm_of
        k = self._comm_of[stream] if ops else self._device_of[stream]
        count(self._counts, "task without a launch time", batch.column("launch_ns").null_count)
        rows, stream_id = self._first.rows(batch, ops=ops)
        spans = pc.and_(pc.is_valid(rows["start_ns"]), pc.is_valid(rows["end_ns"])).to_numpy(
            zero_copy_only=False
        )
        kept, stream_id = rows.filter(pa.array(spans)), stream_id[spans]
        launch, start, end = (ints(kept.column(c)) for c in ("launch_ns", "start_ns", "end_ns"))
        self._reach.saw(launch)
        if self.task_queue:
            self._kernels[k] = np.concatenate([self._kernels[k], np.stack([stream_id, start, end])], axis=1)
            return
        self._pending[k] = np.concatenate([self._pending[k], np.stack([launch, launch, start, end])], axis=1)
        self._assign(k)

    def _add_flows(self, batch: pa.RecordBatch) -> None:
        """Kernels whose ``async_npu`` flow came: credited by its source and correlation id."""
        kind = batch.column("kind")  # dictionary-encoded: its few values are compared, not every row's
        is_npu = pc.take(pc.equal(kind.dictionary, "async_npu"), kind.indices)
        npu = pc.and_(is_npu, pc.is_valid(batch["correlation_id"]))
        flows = batch.filter(pc.fill_null(npu, False))
        device = ints(flows.column("dst_device_id"))
        for k, device_id in enumerate(self.device_ids):
            mine = flows.filter(pa.array(device == device_id))
            if not mine.num_rows:
                continue
            held = self._kernels[k]
            found = claim_kernels(
                (held[0], held[1]), (ints(mine.column("dst_tid")), ints(mine.column("dst_ns")))
            )
            hit = found >= 0
            count(self._counts, "flow without its kernel", int((~hit).sum()))
            row = found[hit]
            rows = np.stack([ints(mine.column("src_ns"))[hit], ints(mine.column("correlation_id"))[hit]])
            rows = np.concatenate([rows, held[1:, row]])
            self._kernels[k] = np.delete(held, row, axis=1)
            self._pending[k] = np.concatenate([self._pending[k], rows], axis=1)
            self._assign(k)

    def _add_steps(self, batch: pa.RecordBatch) -> None:
        names = batch.column("name")
        is_step = pc.and_(
            pc.is_null(batch.column("parent_id")), pc.starts_with(names.cast(pa.string()), "ProfilerStep#")
        )
        found = batch.filter(pc.fill_null(is_step, False))
        rows = []
        for name, start, end in zip(
            found.column("name").to_pylist(),
            found.column("start_ns").to_pylist(),
            found.column("end_ns").to_pylist(),
            strict=True,
        ):
            match = _STEP_NAME.match(name)
            if match is None or start is None or end is None:
                count(self._counts, "ProfilerStep op without a number or times")
                continue
            rows.append((int(match.group(1)), start, end))
        if not rows:
            return
        new = np.array(rows, np.int64).T
        steps = np.concatenate([self._steps, new], axis=1)
        order = np.argsort(steps[_HOST_START], kind="stable")
        acc = np.concatenate(
            [self._acc, np.full((len(self.device_ids), 4, new.shape[1]), _NULL, np.int64)], axis=2
        )
        self._steps, self._acc = steps[:, order], acc[:, :, order]
        self._last_end = max(self._last_end, int(new[_HOST_END].max()))

    def _assign(self, k: int) -> None:
        """Credit device ``k``'s pending kernels to the known steps whose host range holds their launch
        (with a task queue: their flow's source)."""
        tasks = self._pending[k]
        if not tasks.shape[1]:
            return
        launch = tasks[0]
        # the first step (in start order) whose end is at or after the launch; torch_npu gives a
        # launch on a shared boundary to the earlier step
        step = np.searchsorted(self._steps[_HOST_END], launch, side="left")
        inside = step < self._steps.shape[1]
        inside[inside] &= self._steps[_HOST_START][step[inside]] <= launch[inside]
        if inside.any():
            self._credit(k, step[inside], tasks[1:, inside])
        # a task launched before the latest known step's end and outside every step can never match
        outside = ~inside & (launch <= self._last_end)
        count(self._counts, "task launched outside every open ProfilerStep", int(outside.sum()))
        rest = tasks[:, ~inside & ~outside]
        overflow = rest.shape[1] - self.max_pending
        if overflow > 0:
            count(self._counts, "task dropped: too many waiting for their ProfilerStep", overflow)
            rest = rest[:, overflow:]
        self._pending[k] = rest

    def _credit(self, k: int, step: I64, tasks: I64) -> None:
        """Kernels (order, start, end) of each ``step``: the first in order gives the device start, the
        last the device end (the launch time, or the correlation id with a task queue)."""
        acc = self._acc[k]
        launch, start, end = tasks
        first = np.lexsort((start, launch, step))  # per step: earliest launch, then its earliest start
        head = np.r_[True, step[first][1:] != step[first][:-1]]
        for j, lau, st in zip(step[first][head], launch[first][head], start[first][head], strict=True):
            if acc[_FIRST_LAUNCH, j] == _NULL or lau < acc[_FIRST_LAUNCH, j]:
                acc[_FIRST_LAUNCH, j], acc[_FIRST_START, j] = lau, st
            elif lau == acc[_FIRST_LAUNCH, j]:
                acc[_FIRST_START, j] = min(acc[_FIRST_START, j], st)
        last = np.lexsort((-end, -launch, step))  # per step: latest launch, then its latest end
        head = np.r_[True, step[last][1:] != step[last][:-1]]
        for j, lau, en in zip(step[last][head], launch[last][head], end[last][head], strict=True):
            if acc[_LAST_LAUNCH, j] == _NULL or lau > acc[_LAST_LAUNCH, j]:
                acc[_LAST_LAUNCH, j], acc[_LAST_END, j] = lau, en
            elif lau == acc[_LAST_LAUNCH, j]:
                acc[_LAST_END, j] = max(acc[_LAST_END, j], en)

    def advance(self, watermark: int) -> list[Emit]:
        self._reach.advance(watermark)
        for k, held in enumerate(self._kernels):  # no flow can still come to a kernel started before
            stale = held[1] < watermark  # the flows' watermark: its source op started before its launch
            count(self._counts, "kernel without an async_npu flow", int(stale.sum()))
            self._kernels[k] = held[:, ~stale]
        limit = watermark - self.settle_ns - self._reach.reach(unknown=0) if watermark != DONE else DONE
        return self._emit(self._steps[_HOST_END] <= limit)

    def finish(self) -> list[Emit]:
        for k, tasks in enumerate(self._pending):
            count(self._counts, "task launched outside every ProfilerStep", tasks.shape[1])
            self._pending[k] = tasks[:, :0]
        for k, held in enumerate(self._kernels):
            count(self._counts, "kernel without an async_npu flow", held.shape[1])
            self._kernels[k] = held[:, :0]
        out = self._emit(np.ones(self._steps.shape[1], np.bool_))
        report("framework_steps", None, self._counts)
        return out

    def _emit(self, final: npt.NDArray[np.bool_]) -> list[Emit]:
        if not final.any():
            return []
        steps, acc = self._steps[:, final], self._acc[:, :, final]
        self._steps, self._acc = self._steps[:, ~final], self._acc[:, :, ~final]
        out: list[Emit] = []
        n = steps.shape[1]
        for k, device_id in enumerate(self.device_ids):
            first, last = acc[k, _FIRST_START], acc[k, _LAST_END]
            count(self._counts, "ProfilerStep without a kernel launched inside", int((first == _NULL).sum()))
            start = np.where(first == _NULL, steps[_HOST_START], first)
            end = np.maximum(np.where(last == _NULL, steps[_HOST_END], last), steps[_HOST_END])
            batch = conform(
                STEPS_SCHEMA,
                {
                    "device_id": pa.array(np.full(n, device_id, np.int32)),
                    "kind": pa.array(["framework"] * n, pa.string()),
                    "iteration_id": pa.array(steps[_NUMBER]),
                    "start_ns": pa.array(start),
                    "end_ns": pa.array(end),
                    "host_start_ns": pa.array(steps[_HOST_START]),
                    "host_end_ns": pa.array(steps[_HOST_END]),
                },
            )
            out.append((self.outputs[k], batch))
        return out

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "steps": self._steps,
                "acc": self._acc,
                "pending": self._pending,
                "kernels": self._kernels,
                "first": self._first.state(),
                "last_end": self._last_end,
                "reach": self._reach.state(),
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._steps, self._acc, self._pending = doc["steps"], doc["acc"], doc["pending"]
        self._kernels, self._first = doc["kernels"], FirstKernels(doc["first"])
        self._last_end, self._counts = doc["last_end"], doc["counts"]
        self._reach = KernelReach(doc["reach"])
