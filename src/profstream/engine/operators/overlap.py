"""Overlap Analysis lanes of one device and torch_npu's per-step sums (``step_trace_time.csv``).

**Lanes** (``overlap`` stream; msprof_outputs.md §4a, framework_outputs.md §4a (1); msprof C++
``analysis/csrc/domain/data_process/ai_task/overlap_analysis_processor.cpp``):

* Computing = union of the device tasks with an op type (``N/A`` at prof level 0) whose GE task type
  (if any) is none of the communication ones (HCCL, HCCL_AI_CPU, COMMUNICATION) nor WRITE_BACK /
  INVALID, i.e. the tasks op_summary lists as operators, except ops whose name ends with
  ``AicpuKernel`` / ``AivKernel`` and tasks on the MC2 AI-CPU KFC streams (``kfc_streams``, from the
  MC2 communication info). msprof's C++ takes every compute-task-info task without looking at its
  type; its older Python path kept only AI_CORE, AI_CPU, AI_VECTOR_CORE, MIX_AIV and MIX_AIC
  (``viewer/pipeline_overlap_viewer.py``). The real exports in shared/realdata follow the C++: their
  Computing lanes are the union of every kernel_details operator row, the DSA_SQE tasks
  (DSAGenBitMask) included as lanes of their own, and at Level0 the kernels whose type is ``N/A``;
* Communication = union of the communication op intervals (``comm``);
* Communication(Not Overlapped) = Communication minus Computing;
* Free = ``[begin, end]`` minus (Computing union Communication), where begin / end are the earliest start
  and latest end of the compute tasks, the communication ops and every device task whose host task
  type is not a kernel type (KERNEL_AICORE, KERNEL_AIVEC, FFTS_PLUS, KERNEL_MIX_AIC, KERNEL_MIX_AIV,
  PROFILING_ENABLE, PROFILING_DISABLE; a task with an unknown host type is left out, as msprof's
  Python path does).

Touching intervals merge; pieces have positive length (the kernels' canonical sets,
:mod:`profstream.engine.kernels.overlap`).

**Per-step sums** (``step_time`` stream). Three formulas exist (framework_outputs.md §4a): torch_npu's
text path (2) buckets each lane piece whole into the step whose ``[start, end)`` holds the piece's
*start*, with no clipping; torch_npu's DB path (3) recomputes lanes per step from the raw tasks and
counts only the free gaps between covered intervals; msprof-analyze (4) sums whole runs with
``Stage = Free + Computing + Not Overlapped - Bubble``. This operator implements (2), because it is
what torch_npu's ``step_trace_time.csv`` text output contains (``_trace_step_time_parser.py``):
Computing, Communication, Communication(Not Overlapped) and Free sum the lane pieces bucketed by
start; Bubble sums the ``hcom_receive*`` communication ops the same way; Overlapped = Communication -
Not Overlapped; Stage = (last end - first start over every counted piece, Bubble included) - Bubble;
Communication(Not Overlapped and Exclude Receive) = max(Not Overlapped - Bubble, 0); Preparing = first
Computing/Communication start - host step start (null without a host start or without such a piece;
the row carries the host start, from which torch_npu's CSV prints ``-1 - start`` in µs for a row
without such a piece: ``get_prepare_time`` subtracts from ``FIRST_TASK_TS``, still its ``-1``).
Only steps that received a piece get a row. Without a step stream (or when it never delivers a step)
one row with a null step sums everything, as torch_npu does without steps; with framework steps its
Preparing is the first Computing/Communication start minus the earliest torch op's start (the ``ops``
input; 0 without any torch op), as torch_npu's ``get_prepare_time`` computes it for the step-less row
(``FwkFileParser.get_first_fwk_op``). When steps overlap, the earlier one wins the shared time
(torch_npu takes the first step in start order).

Choices where versions differ (the real exports in shared/realdata cannot tell, or tell the older one):

* Exclude Receive is clamped at 0: torch_npu added the clamp in 2026 (framework_outputs.md §4a (2)
  step 4); the ``_trace_step_time_parser.py`` versions in the code index subtract without it. The real
  files have Bubble 0, where both agree.
* The Free window reaches back to the earliest non-kernel task, as msprof's current C++ does; the
  CANN 8.0 msprof behind the real files started it at the first Computing/Communication interval
  (tests/golden ``test_overlap_analysis_lanes_recomputed_to_within_one_ns``).
* Sums are exact ns, printed as µs once; torch_npu adds Python floats of µs and subtracts absolute
  float times for Stage and Preparing, so its cells can differ in the last digits (``8827.472999999998``
  for ``8827.473``) and Stage / Preparing by up to 0.25 µs near 1.7e15 µs.

Streaming: inputs are buffered until the watermark, less ``lateness_ns``, passes their start. The
operators upstream promise the start of the rows they still hold (a task still running, a task whose
launch API has not ended, an op instance still collecting its tasks), so the watermark alone orders
the inputs and ``lateness_ns`` is only a margin. Each lane is then extended by the union / combine /
gaps kernels, which emit a piece as soon as no later input can change it. A piece that would belong
to a step not yet seen waits (one step's worth: step rows arrive when the step ends); a step's row is
emitted once no lane can still produce a piece starting inside it. An input that arrives later than
the lateness allows is clipped to what was not yet emitted (counted, a warning), never allowed to
overlap an emitted piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.kernels import overlap as kernels
from profstream.engine.kernels._dispatch import FLUSH, NULL
from profstream.engine.kernels.overlap import _CURSOR, _OPEN_START, _PIECE, CombineState, Intervals, SetOp
from profstream.engine.operators._state import ints
from profstream.engine.operators.statistics import COMMUNICATION_TASK_TYPES, HIDDEN_CORE_TYPES
from profstream.engine.operators.steps import FRAMEWORK_STEPS, count, report
from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

I64 = npt.NDArray[np.int64]

#: GE task types that are not Computing (op_summary leaves them out too)
NOT_COMPUTE_TASK_TYPES = tuple(sorted(COMMUNICATION_TASK_TYPES | HIDDEN_CORE_TYPES))
KERNEL_HOST_TYPES = (
    "KERNEL_AICORE",
    "KERNEL_AIVEC",
    "FFTS_PLUS",
    "KERNEL_MIX_AIC",
    "KERNEL_MIX_AIV",
    "PROFILING_ENABLE",
    "PROFILING_DISABLE",
    "UNKNOWN",
)
EXCLUDED_OP_SUFFIXES = ("AicpuKernel", "AivKernel")
RECEIVE_PREFIX = "hcom_receive"
DEFAULT_LATENESS_NS = 1_000_000_000
#: the reason counted for an input that came later than ``lateness_ns`` allows: its lanes lose the part
#: already emitted (a device task or communication op longer than that, for one)
CLIPPED = "interval later than the lateness allows (clipped)"

COMPUTING = "Computing"
COMMUNICATION = "Communication"
NOT_OVERLAPPED = "Communication(Not Overlapped)"
FREE = "Free"

# lanes of the per-step sums (row index in the accumulators); the rest of an accumulator column
_COMPUTE, _NOT_OVERLAPPED, _COMM, _FREE, _BUBBLE = range(5)
_FIRST, _LAST, _FIRST_TASK, _HIT = range(5, 9)
_ACC_ROWS = 9
# known steps: step number, window start (clipped after the previous step), window end, host start
_KEY, _START, _END, _HOST = range(4)


@dataclass(frozen=True, slots=True)
class StepSource:
    """Which step rows bound the per-step sums: a stream (``steps`` or ``framework_steps``), a kind
    (``framework``, ``step`` or ``model``) and, for ``model`` rows, optionally one model id."""

    stream: str = FRAMEWORK_STEPS
    kind: str = "framework"
    model_id: int | None = None


def _empty(rows: int) -> I64:
    return np.empty((rows, 0), np.int64)


def _column(batch: pa.RecordBatch, name: str) -> I64:
    return ints(batch.column(name))


def _strings(batch: pa.RecordBatch, name: str) -> pa.Array:
    column = batch.column(name)
    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column


class Overlap(Operator):
    """Overlap Analysis lanes and per-step sums of device ``device_id``; see the module docstring.

    Inputs ``tasks@d``, ``comm@d`` and, with ``steps``, ``<steps.stream>@d`` (and ``ops`` for framework
    steps: the step-less row's Preparing); outputs ``overlap@d`` and ``step_time@d``. ``kfc_streams``:
    the MC2 AI-CPU KFC stream ids whose tasks are not Computing; ``lateness_ns``: how long before the
    watermark an input row may still start.
    """

    def __init__(
        self,
        device_id: int,
        steps: StepSource | None = StepSource(),
        *,
        kfc_streams: frozenset[int] = frozenset(),
        lateness_ns: int = DEFAULT_LATENESS_NS,
    ) -> None:
        self.device_id = device_id
        self.steps = steps
        self.kfc_streams = kfc_streams
        self.lateness_ns = lateness_ns
        self._tasks, self._comm = at("tasks", device_id), at("comm", device_id)
        self._step_stream = None if steps is None else at(steps.stream, device_id)
        step_inputs = () if self._step_stream is None else (self._step_stream,)
        self._ops = "ops" if steps is not None and steps.kind == "framework" else None
        self.inputs = (self._tasks, self._comm, *step_inputs, *(() if self._ops is None else (self._ops,)))
        self.outputs = (at("overlap", device_id), at("step_time", device_id))
        # inputs not yet released: (start, end) rows
        self._compute = _empty(2)
        self._communication = _empty(2)
        self._receive = _empty(2)
        self._limit = NULL  # inputs starting before it have been released
        self._lo, self._hi = NULL, NULL  # the Free window so far
        self._compute_union = kernels.union_state()
        self._comm_union = kernels.union_state()
        self._not_overlapped = CombineState.new()
        self._busy = CombineState.new()
        self._gaps: I64 | None = None
        # per-step sums
        self._known = _empty(4)
        self._acc = _empty(_ACC_ROWS)
        self._outside = _new_acc(1)
        self._held = _empty(3)  # lane, start, end of pieces waiting for their step
        self._steps_end = NULL  # end of the latest step seen
        self._first_op = NULL  # start of the earliest torch op (framework steps)
        self._counts: dict[str, int] = {}

    # -- input

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == self._step_stream:
            self._add_steps(batch)
            return
        if stream == self._ops:
            torch_ops = batch.filter(pc.fill_null(pc.equal(_strings(batch, "kind"), "cpu_op"), False))
            first = pc.min(torch_ops.column("start_ns")).as_py()
            if first is not None and (self._first_op == NULL or first < self._first_op):
                self._first_op = first
            return
        batch = self._valid(batch)
        start, end = _column(batch, "start_ns"), _column(batch, "end_ns")
        if stream == self._comm:
            self._widen(start, end)
            self._communication = np.concatenate([self._communication, np.stack([start, end])], axis=1)
            names = _strings(batch, "op_name")
            receive = pc.fill_null(pc.starts_with(names, RECEIVE_PREFIX), False).to_numpy(
                zero_copy_only=False
            )
            self._receive = np.concatenate([self._receive, np.stack([start[receive], end[receive]])], axis=1)
            return
        compute = self._is_compute(batch)
        host = _strings(batch, "host_task_type")
        bounds = pc.and_(pc.is_valid(host), pc.invert(pc.is_in(host, pa.array(KERNEL_HOST_TYPES))))
        window = compute | bounds.to_numpy(zero_copy_only=False)
        self._widen(start[window], end[window])
        self._compute = np.concatenate([self._compute, np.stack([start[compute], end[compute]])], axis=1)

    def _valid(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        start, end = batch.column("start_ns"), batch.column("end_ns")
        ok = pc.fill_null(pc.greater_equal(end, start), False)
        kept = batch.filter(ok)
        count(
            self._counts, "interval without times or ending before it starts", batch.num_rows - kept.num_rows
        )
        return kept

    def _is_compute(self, batch: pa.RecordBatch) -> npt.NDArray[np.bool_]:
        other = pc.fill_null(pc.is_in(_strings(batch, "task_type"), pa.array(NOT_COMPUTE_TASK_TYPES)), False)
        keep = pc.and_(pc.is_valid(_strings(batch, "op_type")), pc.invert(other))
        names = _strings(batch, "op_name")
        for suffix in EXCLUDED_OP_SUFFIXES:
            keep = pc.and_(keep, pc.invert(pc.fill_null(pc.ends_with(names, suffix), False)))
        if self.kfc_streams:
            kfc = pc.is_in(batch.column("stream_id"), pa.array(sorted(self.kfc_streams), pa.int32()))
            keep = pc.and_(keep, pc.invert(pc.fill_null(kfc, False)))
        result: npt.NDArray[np.bool_] = keep.to_numpy(zero_copy_only=False)
        return result

    def _widen(self, start: I64, end: I64) -> None:
        if start.size:
            low, high = int(start.min()), int(end.max())
            self._lo = low if self._lo == NULL else min(self._lo, low)
            self._hi = max(self._hi, high)

    def _add_steps(self, batch: pa.RecordBatch) -> None:
        source = self.steps
        assert source is not None  # only a configured step stream is an input
        keep = pc.equal(_strings(batch, "kind"), source.kind)
        if source.model_id is not None:
            keep = pc.and_(keep, pc.equal(batch.column("model_id"), source.model_id))
        rows = batch.filter(pc.fill_null(keep, False))
        if not rows.num_rows:
            return
        host = rows.column("host_start_ns").fill_null(NULL)
        new = np.stack(
            [
                _column(rows, "iteration_id"),
                _column(rows, "start_ns"),
                _column(rows, "end_ns"),
                ints(host),
            ]
        )
        new = new[:, np.argsort(new[_START], kind="stable")]
        for column in new.T:
            start = int(column[_START])
            if start < self._steps_end:
                count(self._counts, "step starting inside an earlier step (the earlier one wins)")
                column[_START] = self._steps_end
            if column[_END] <= column[_START]:
                continue
            self._known = np.concatenate([self._known, column[:, None]], axis=1)
            self._acc = np.concatenate([self._acc, _new_acc(1)], axis=1)
            self._steps_end = int(column[_END])
        self._assign(_empty(3))

    # -- lanes

    def advance(self, watermark: int) -> list[Emit]:
        limit = max(self._limit, watermark - self.lateness_ns) if watermark != DONE else FLUSH
        return self._run(limit, final=False)

    def finish(self) -> list[Emit]:
        out = self._run(FLUSH, final=True)
        report("overlap", self.device_id, self._counts, serious=(CLIPPED,))
        return out

    def _release(self, pending: I64, limit: int) -> tuple[I64, I64]:
        """The inputs starting before ``limit``, sorted, late ones clipped; and the rest."""
        ready = pending[0] < limit
        out, rest = pending[:, ready], pending[:, ~ready]
        late = out[0] < self._limit
        if late.any():
            count(self._counts, CLIPPED, int(late.sum()))
            out[0] = np.maximum(out[0], self._limit)
            out = out[:, out[1] > out[0]]
        return out[:, np.argsort(out[0], kind="stable")], rest

    def _run(self, limit: int, *, final: bool) -> list[Emit]:
        compute, self._compute = self._release(self._compute, limit)
        comm, self._communication = self._release(self._communication, limit)
        receive, self._receive = self._release(self._receive, limit)
        self._limit = max(self._limit, limit)
        computing = kernels.union(compute[0], compute[1], self._compute_union, limit)
        communication = kernels.union(comm[0], comm[1], self._comm_union, limit)
        sweep = (
            FLUSH
            if final
            else min(_union_frontier(self._compute_union, limit), _union_frontier(self._comm_union, limit))
        )
        not_overlapped = kernels.combine(
            SetOp.DIFFERENCE, communication, computing, self._not_overlapped, sweep
        )
        busy = kernels.combine(SetOp.UNION, computing, communication, self._busy, sweep)
        free = self._free(busy, final=final)
        lanes = (
            (_COMPUTE, computing),
            (_COMM, communication),
            (_NOT_OVERLAPPED, not_overlapped),
            (_FREE, free),
        )
        out = self._lane_batch(lanes)
        pieces = [np.stack([np.full(p.starts.size, lane), p.starts, p.ends]) for lane, p in lanes]
        pieces.append(np.stack([np.full(receive.shape[1], _BUBBLE), receive[0], receive[1]]))
        self._assign(np.concatenate(pieces, axis=1), final=final)
        frontier = DONE if final else self._frontier(sweep, limit)
        out += self._step_rows(frontier, final=final)
        return out

    def _free(self, busy: Intervals, *, final: bool) -> Intervals:
        if self._gaps is None and self._lo != NULL and (busy.starts.size or final):
            self._gaps = kernels.gaps_state(self._lo)
        if self._gaps is None:
            return Intervals(np.empty(0, np.int64), np.empty(0, np.int64))
        return kernels.gaps(busy.starts, busy.ends, self._gaps, self._hi if final else None)

    def _frontier(self, sweep: int, limit: int) -> int:
        """No lane (nor Bubble) can still emit a piece starting before this time."""
        piece = int(self._not_overlapped.cursor[_PIECE])
        combined = sweep if piece == NULL else min(sweep, piece)
        if self._gaps is not None:
            free = int(self._gaps[_CURSOR])
        else:
            free = limit if self._lo == NULL else min(self._lo, limit)
        busy_piece = int(self._busy.cursor[_PIECE])
        if busy_piece != NULL:
            combined = min(combined, busy_piece)
        return min(combined, free, limit)

    def _lane_batch(self, lanes: Sequence[tuple[int, Intervals]]) -> list[Emit]:
        names = {_COMPUTE: COMPUTING, _COMM: COMMUNICATION, _NOT_OVERLAPPED: NOT_OVERLAPPED, _FREE: FREE}
        sizes = [p.starts.size for _, p in lanes]
        if not sum(sizes):
            return []
        codes = np.repeat(np.arange(len(lanes), dtype=np.int32), sizes)
        kinds = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([names[lane] for lane, _ in lanes]))
        batch = conform(
            TABLES["overlap"],
            {
                "device_id": pa.array(np.full(codes.size, self.device_id, np.int32)),
                "kind": kinds,
                "start_ns": pa.array(np.concatenate([p.starts for _, p in lanes])),
                "end_ns": pa.array(np.concatenate([p.ends for _, p in lanes])),
            },
        )
        return [(self.outputs[0], batch)]

    # -- per-step sums

    def _assign(self, pieces: I64, *, final: bool = False) -> None:
        """Credit pieces (lane, start, end) to the known steps or the outside slot, or keep them waiting.

        A piece starting after every known step waits: the step holding it may not have arrived yet
        (at the end, none will).
        """
        pieces = np.concatenate([self._held, pieces], axis=1)
        waiting = self.steps is not None and not final
        wait = pieces[1] >= self._steps_end if waiting else np.zeros(pieces.shape[1], np.bool_)
        self._held = pieces[:, wait]
        acc = np.concatenate([self._acc, self._outside], axis=1)
        _credit(pieces[:, ~wait], self._known, acc)
        self._acc, self._outside = acc[:, :-1], acc[:, -1:]

    def _step_rows(self, frontier: int, *, final: bool) -> list[Emit]:
        done = self._known[_END] <= frontier
        keys, acc = self._known[:, done], self._acc[:, done]
        self._known, self._acc = self._known[:, ~done], self._acc[:, ~done]
        if final and self._steps_end == NULL:  # no step at all: torch_npu's single step-less row
            first_op = self._first_op if self._first_op != NULL else self._outside[_FIRST_TASK, 0]
            keys = np.array([[NULL], [NULL], [NULL], [NULL if self._ops is None else first_op]], np.int64)
            acc = self._outside
        hit = acc[_HIT] == 1
        keys, acc = keys[:, hit], acc[:, hit]
        if not hit.any():
            return []
        bubble, not_overlapped = acc[_BUBBLE], acc[_NOT_OVERLAPPED]
        preparing = acc[_FIRST_TASK] - keys[_HOST]
        batch = conform(
            TABLES["step_time"],
            {
                "device_id": pa.array(np.full(keys.shape[1], self.device_id, np.int32)),
                "step": pa.array(keys[_KEY], mask=keys[_KEY] == NULL),
                "computing_ns": pa.array(acc[_COMPUTE]),
                "communication_not_overlapped_ns": pa.array(not_overlapped),
                "overlapped_ns": pa.array(acc[_COMM] - not_overlapped),
                "communication_ns": pa.array(acc[_COMM]),
                "free_ns": pa.array(acc[_FREE]),
                "stage_ns": pa.array(acc[_LAST] - acc[_FIRST] - bubble),
                "bubble_ns": pa.array(bubble),
                "communication_not_overlapped_exclude_receive_ns": pa.array(
                    np.maximum(not_overlapped - bubble, 0)
                ),
                "preparing_ns": pa.array(preparing, mask=(acc[_FIRST_TASK] == NULL) | (keys[_HOST] == NULL)),
                "host_start_ns": pa.array(keys[_HOST], mask=keys[_HOST] == NULL),
            },
        )
        return [(self.outputs[1], batch)]

    # -- snapshots

    def snapshot(self) -> bytes:
        combine = {
            name: [state.cursor, *state.pending_a, *state.pending_b]
            for name, state in (("not_overlapped", self._not_overlapped), ("busy", self._busy))
        }
        return pack_state(
            {
                "pending": [self._compute, self._communication, self._receive],
                "marks": [self._limit, self._lo, self._hi, self._steps_end, self._first_op],
                "unions": [self._compute_union, self._comm_union],
                "combine": combine,
                "gaps": self._gaps if self._gaps is not None else np.empty(0, np.int64),
                "steps": [self._known, self._acc, self._outside, self._held],
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._compute, self._communication, self._receive = doc["pending"]
        self._limit, self._lo, self._hi, self._steps_end, self._first_op = doc["marks"]
        self._compute_union, self._comm_union = doc["unions"]
        states = []
        for name in ("not_overlapped", "busy"):
            cursor, a_s, a_e, b_s, b_e = doc["combine"][name]
            states.append(CombineState(cursor, Intervals(a_s, a_e), Intervals(b_s, b_e)))
        self._not_overlapped, self._busy = states
        self._gaps = doc["gaps"] if doc["gaps"].size else None
        self._known, self._acc, self._outside, self._held = doc["steps"]
        self._counts = doc["counts"]


def _new_acc(n: int) -> I64:
    acc = np.zeros((_ACC_ROWS, n), np.int64)
    acc[[_FIRST, _LAST, _FIRST_TASK]] = NULL
    return acc


def _credit(pieces: I64, steps: I64, acc: I64) -> None:
    """Add each lane's pieces to ``acc`` (a column per step, then the outside slot) by their start."""
    for lane in (_COMPUTE, _NOT_OVERLAPPED, _COMM, _FREE, _BUBBLE):
        mine = pieces[:, pieces[0] == lane]
        if not mine.shape[1]:
            continue
        totals = kernels.step_totals(
            mine[1],
            mine[2],
            steps[_START],
            steps[_END],
            mode=kernels.BY_START,
            acc=kernels.step_accumulators(steps.shape[1]),
        )
        acc[lane] += totals.total
        acc[_FIRST] = _min(acc[_FIRST], totals.first)
        acc[_LAST] = np.maximum(acc[_LAST], totals.last)
        if lane in (_COMPUTE, _COMM):
            acc[_FIRST_TASK] = _min(acc[_FIRST_TASK], totals.first)
        acc[_HIT] |= totals.first != NULL


def _min(a: I64, b: I64) -> I64:
    """Element-wise minimum where :data:`NULL` means absent."""
    return np.where(a == NULL, b, np.where(b == NULL, a, np.minimum(a, b)))


def _union_frontier(state: I64, limit: int) -> int:
    """Where the next merged piece of a :func:`~profstream.engine.kernels.overlap.union` can start."""
    open_start = int(state[_OPEN_START])
    return limit if open_start == NULL else min(open_start, limit)
