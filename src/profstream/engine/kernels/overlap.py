"""Interval kernels of the Overlap Analysis and of ``step_trace_time``.

Sources: msprof "Overlap Analysis" (specs/msprof_outputs.md §4a; C++
``analysis/csrc/domain/data_process/ai_task/overlap_analysis_processor.cpp``) gives the per-device
intervals Computing, Communication, Communication(Not Overlapped) and Free; torch_npu's and
MindSpore's ``step_trace_time.csv`` (specs/framework_outputs.md §4a, §5.5) sum them per step and
derive Overlapped, Stage, Bubble, Communication(Not Overlapped and Exclude Receive) and Preparing.
The derivations are arithmetic on the sums; the kernels here are the four interval passes:

* :func:`union` — merge a start-sorted stream of intervals (Computing, Communication);
* :func:`combine` — difference (Communication(Not Overlapped) = Communication - Computing),
  intersection (Overlapped) or union of two merged streams;
* :func:`gaps` — Free: a window minus the union of everything;
* :func:`step_totals` — per-step sums, first start and last end.

Semantics (chosen; the implementations differ at the edges, framework_outputs.md §7):

* All times are int64 ns (any one clock). ``[s, e]`` covers the half-open ``[s, e)``: a zero-length
  interval covers nothing, and touching intervals merge (msprof's ``UnionOneSet`` merges when
  ``next.start <= cur.end``).
* Every set-valued output is *canonical*: sorted, each piece of positive length, consecutive pieces
  separated by a positive gap. msprof drops empty pieces when it writes events (``AppendEvents``);
  here they are never produced.
* Difference and intersection are exact set operations. msprof's C++ ``GetDifferenceSet`` is not
  exact when the last subtracted interval spans a gap of the first set (A = [0,10] [12,20], B = [5,15]
  gives [0,5] [12,20] instead of [0,5] [15,20]) and splits a piece at a zero-length subtrahend; the
  set operation is what "Communication minus Computing" means, and what msprof gets in all other
  cases. A zero-length task likewise never splits a Free piece here (msprof's would).
* Free is cut from a window ``[lo, hi]`` the caller picks: msprof's is the earliest start / latest
  end over non-kernel tasks widened to the compute and communication intervals (head and tail free
  included); torch_npu's DB path wants only the gaps between covered intervals (``lo`` = first start,
  ``hi`` = last end).
* Per-step sums either clip each interval to the steps it overlaps (:data:`CLIP`, pieces straddling
  a boundary are split exactly; what MindSpore does for Free) or credit the whole interval to the step
  whose half-open window ``[start, end)`` holds its start (:data:`BY_START`, torch_npu's text path).

Streaming: each kernel is called batch by batch with a small state it updates in place, and emits
only what no later input can change. A *watermark* ``w`` is the caller's promise that every interval
still to come starts at or after ``w``; :data:`~profstream.engine.kernels._dispatch.FLUSH` ends the
stream. Sortedness of each input stream already gives the kernels an implicit watermark, so outputs
are the same whatever the batch boundaries — a property the tests check.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import (
    FLUSH,
    NULL,
    Int64Array,
    inline,
    int_column,
    kernel,
    require_intervals,
    require_sorted,
    require_times,
)


class SetOp(IntEnum):
    """How :func:`combine` joins two merged interval streams A and B."""

    UNION = 0
    DIFFERENCE = 1  # A minus B
    INTERSECTION = 2


#: :func:`step_totals` modes
CLIP = 0
BY_START = 1

# union state: the open merged interval and the last start seen
_OPEN_START, _OPEN_END, _LAST_START = range(3)
# combine state: end of the active A / B interval, start of the open output piece, last A / B end seen
_A_END, _B_END, _PIECE, _LAST_A, _LAST_B = range(5)
# gaps state: end of coverage so far, last start seen
_CURSOR, _GAP_LAST = range(2)


class Intervals(NamedTuple):
    """Intervals as two int64 columns."""

    starts: Int64Array
    ends: Int64Array


class StepTotals(NamedTuple):
    """Accumulators of :func:`step_totals`: one slot per step plus a last slot for time outside every step.

    ``first``/``last`` are the earliest start and latest end credited to the slot (:data:`NULL` if
    none yet).
    """

    total: Int64Array
    first: Int64Array
    last: Int64Array


# --------------------------------------------------------------------------- kernels


@kernel
def _union_kernel(
    starts: Int64Array, ends: Int64Array, state: Int64Array, limit: int, out_s: Int64Array, out_e: Int64Array
) -> int:
    """Merge start-sorted intervals into ``out``; the open one is emitted once it ends before ``limit``."""
    n = 0
    open_s = state[_OPEN_START]
    open_e = state[_OPEN_END]
    for i in range(starts.size):
        s = starts[i]
        e = ends[i]
        if e <= s:
            continue
        if open_s != NULL and s <= open_e:
            open_e = max(open_e, e)
            continue
        if open_s != NULL:
            out_s[n] = open_s
            out_e[n] = open_e
            n += 1
        open_s = s
        open_e = e
    if open_s != NULL and open_e < limit:
        out_s[n] = open_s
        out_e[n] = open_e
        n += 1
        open_s = NULL
        open_e = NULL
    state[_OPEN_START] = open_s
    state[_OPEN_END] = open_e
    return n


@kernel
def _combine_kernel(
    op: int,
    a_s: Int64Array,
    a_e: Int64Array,
    b_s: Int64Array,
    b_e: Int64Array,
    limit: int,
    state: Int64Array,
    out_s: Int64Array,
    out_e: Int64Array,
) -> int:
    """Sweep the boundaries of two canonical sets below ``limit``; every given interval starts below it.

    Between boundaries the membership in A and B is constant; an output piece opens where ``op`` of
    the memberships becomes true and is emitted where it becomes false.
    """
    n = 0
    i = 0
    j = 0
    a_end = state[_A_END]
    b_end = state[_B_END]
    piece = state[_PIECE]
    while True:
        t = FLUSH
        if a_end != NULL:
            t = min(t, a_end)
        elif i < a_s.size:
            t = min(t, a_s[i])
        if b_end != NULL:
            t = min(t, b_end)
        elif j < b_s.size:
            t = min(t, b_s[j])
        if t >= limit:
            break
        if a_end == t:
            a_end = NULL
        elif a_end == NULL and i < a_s.size and a_s[i] == t:
            a_end = a_e[i]
            i += 1
        if b_end == t:
            b_end = NULL
        elif b_end == NULL and j < b_s.size and b_s[j] == t:
            b_end = b_e[j]
            j += 1
        in_a = a_end != NULL
        in_b = b_end != NULL
        if op == 0:
            inside = in_a or in_b
        elif op == 1:
            inside = in_a and not in_b
        else:
            inside = in_a and in_b
        if inside and piece == NULL:
            piece = t
        elif not inside and piece != NULL:
            out_s[n] = piece
            out_e[n] = t
            n += 1
            piece = NULL
    state[_A_END] = a_end
    state[_B_END] = b_end
    state[_PIECE] = piece
    return n


@kernel
def _gaps_kernel(
    starts: Int64Array, ends: Int64Array, state: Int64Array, hi: int, out_s: Int64Array, out_e: Int64Array
) -> int:
    """Emit the gaps between start-sorted intervals after the cursor; with ``hi`` set, the tail up to it."""
    n = 0
    cursor = state[_CURSOR]
    for i in range(starts.size):
        s = starts[i]
        e = ends[i]
        if e <= s:
            continue
        if s > cursor:
            out_s[n] = cursor
            out_e[n] = s
            n += 1
        cursor = max(cursor, e)
    if hi != NULL and hi > cursor:
        out_s[n] = cursor
        out_e[n] = hi
        n += 1
        cursor = hi
    state[_CURSOR] = cursor
    return n


@inline
def _credit(total: Int64Array, first: Int64Array, last: Int64Array, k: int, s: int, e: int) -> None:
    """Add ``[s, e)`` to slot ``k``."""
    total[k] += e - s
    if first[k] == NULL or s < first[k]:
        first[k] = s
    if last[k] == NULL or e > last[k]:
        last[k] = e


@kernel
def _step_kernel(
    starts: Int64Array,
    ends: Int64Array,
    step_s: Int64Array,
    step_e: Int64Array,
    mode: int,
    total: Int64Array,
    first: Int64Array,
    last: Int64Array,
) -> None:
    """Credit each interval to the steps (sorted disjoint windows) per ``mode``, the rest to the last slot."""
    outside = step_s.size
    for i in range(starts.size):
        s = starts[i]
        e = ends[i]
        if mode == BY_START:
            k = np.searchsorted(step_s, s, side="right") - 1
            if k < 0 or s >= step_e[k]:
                k = outside
            _credit(total, first, last, k, s, e)
            continue
        if e <= s:
            continue
        k = np.searchsorted(step_e, s, side="right")
        cursor = s
        while k < outside and step_s[k] < e:
            lo = max(s, step_s[k])
            hi = min(e, step_e[k])
            if lo > cursor:
                _credit(total, first, last, outside, cursor, lo)
            if hi > lo:
                _credit(total, first, last, k, lo, hi)
                cursor = hi
            k += 1
        if e > cursor:
            _credit(total, first, last, outside, cursor, e)


# --------------------------------------------------------------------------- wrappers


def union_state() -> Int64Array:
    """The state of :func:`union` before the first batch."""
    return np.full(3, NULL, np.int64)


def union(starts: npt.ArrayLike, ends: npt.ArrayLike, state: Int64Array, watermark: int = NULL) -> Intervals:
    """Merge one batch of a start-sorted interval stream (msprof_outputs.md §4a step 3).

    Emits the merged intervals that no later input can extend; the one still open stays in ``state``
    (updated in place). Pass ``watermark=FLUSH`` with the last batch. Zero-length intervals cover
    nothing and are skipped.
    """
    s = int_column("starts", starts)
    e = int_column("ends", ends, s.size)
    require_times("starts", s)
    require_times("ends", e)
    require_intervals("starts", s, e)
    require_sorted("starts", s, int(state[_LAST_START]))
    if s.size:
        state[_LAST_START] = s[-1]
    limit = max(watermark, int(state[_LAST_START]))
    out_s = np.empty(s.size + 1, np.int64)
    out_e = np.empty(s.size + 1, np.int64)
    n = _union_kernel(s, e, state, limit, out_s, out_e)
    return Intervals(out_s[:n], out_e[:n])


@dataclass(slots=True)
class CombineState:
    """State of :func:`combine`: the sweep cursor plus the inputs not yet below the watermark."""

    cursor: Int64Array
    pending_a: Intervals
    pending_b: Intervals

    @classmethod
    def new(cls) -> CombineState:
        """The state before the first batch."""
        empty = Intervals(np.empty(0, np.int64), np.empty(0, np.int64))
        return cls(np.full(5, NULL, np.int64), empty, empty)

    def copy(self) -> CombineState:
        """An independent snapshot."""
        a, b = self.pending_a, self.pending_b
        return CombineState(
            self.cursor.copy(),
            Intervals(a.starts.copy(), a.ends.copy()),
            Intervals(b.starts.copy(), b.ends.copy()),
        )


def _canonical(name: str, starts: npt.ArrayLike, ends: npt.ArrayLike, last_end: int) -> Intervals:
    """Validate a batch of a merged stream: positive lengths, separated pieces, after ``last_end``."""
    s = int_column(f"{name}.starts", starts)
    e = int_column(f"{name}.ends", ends, s.size)
    require_times(f"{name}.starts", s)
    require_times(f"{name}.ends", e)
    bad = np.flatnonzero(e <= s)
    if bad.size:
        i = int(bad[0])
        msg = f"{name}: expected merged intervals of positive length, got [{s[i]}, {e[i]}] at index {i}"
        raise ValueError(msg)
    if s.size and last_end != NULL and s[0] <= last_end:
        msg = f"{name}: expected a start after the previous batch's last end {last_end}, got {s[0]}"
        raise ValueError(msg)
    bad = np.flatnonzero(s[1:] <= e[:-1])
    if bad.size:
        i = int(bad[0])
        msg = f"{name}: expected merged intervals, got [{s[i]}, {e[i]}] then [{s[i + 1]}, {e[i + 1]}]"
        raise ValueError(msg)
    return Intervals(s, e)


def _split(pending: Intervals, batch: Intervals, limit: int) -> tuple[Intervals, Intervals]:
    """Pending + batch cut into what starts below ``limit`` and the rest."""
    s = np.concatenate((pending.starts, batch.starts))
    e = np.concatenate((pending.ends, batch.ends))
    k = int(np.searchsorted(s, limit, side="left"))
    return Intervals(s[:k], e[:k]), Intervals(s[k:], e[k:])


def combine(
    op: SetOp,
    a: tuple[npt.ArrayLike, npt.ArrayLike],
    b: tuple[npt.ArrayLike, npt.ArrayLike],
    state: CombineState,
    watermark: int = NULL,
) -> Intervals:
    """One batch of ``A op B`` for two merged streams (e.g. outputs of :func:`union`).

    ``a`` and ``b`` are ``(starts, ends)`` of the next intervals of each stream (either may be empty).
    Pieces are emitted once no later input can change them; the kernel can only sweep up to the
    earlier of the two streams' last ends (or ``watermark`` if later), the rest waits in ``state``.
    A stream that stays silent therefore holds the other one back until a watermark says it has
    nothing earlier: pass watermarks, and ``FLUSH`` with the last batch.
    """
    cur = state.cursor
    new_a = _canonical("a", a[0], a[1], int(cur[_LAST_A]))
    new_b = _canonical("b", b[0], b[1], int(cur[_LAST_B]))
    if new_a.starts.size:
        cur[_LAST_A] = new_a.ends[-1]
    if new_b.starts.size:
        cur[_LAST_B] = new_b.ends[-1]
    # a stream that has given nothing yet promises nothing beyond the caller's watermark
    implicit = (
        NULL if NULL in (int(cur[_LAST_A]), int(cur[_LAST_B])) else min(int(cur[_LAST_A]), int(cur[_LAST_B]))
    )
    limit = max(watermark, implicit)
    ready_a, state.pending_a = _split(state.pending_a, new_a, limit)
    ready_b, state.pending_b = _split(state.pending_b, new_b, limit)
    size = ready_a.starts.size + ready_b.starts.size + 2
    out_s = np.empty(size, np.int64)
    out_e = np.empty(size, np.int64)
    n = _combine_kernel(
        int(op), ready_a.starts, ready_a.ends, ready_b.starts, ready_b.ends, limit, cur, out_s, out_e
    )
    return Intervals(out_s[:n], out_e[:n])


def gaps_state(lo: int) -> Int64Array:
    """The state of :func:`gaps` for a window starting at ``lo``."""
    state = np.full(2, NULL, np.int64)
    state[_CURSOR] = lo
    return state


def gaps(starts: npt.ArrayLike, ends: npt.ArrayLike, state: Int64Array, hi: int | None = None) -> Intervals:
    """One batch of Free: the window minus the union of start-sorted intervals (msprof_outputs.md §4a step 5).

    Gaps are emitted as soon as the interval that closes them arrives; give ``hi`` (the window end)
    with the last batch to emit the tail. The window must cover every start (``hi`` at or after the
    last one); coverage before ``lo`` is ignored.
    """
    s = int_column("starts", starts)
    e = int_column("ends", ends, s.size)
    require_times("starts", s)
    require_times("ends", e)
    require_intervals("starts", s, e)
    require_sorted("starts", s, int(state[_GAP_LAST]))
    if s.size:
        state[_GAP_LAST] = s[-1]
    if hi is not None and state[_GAP_LAST] != NULL and hi < state[_GAP_LAST]:
        msg = f"hi: expected a window end at or after the last start {state[_GAP_LAST]}, got {hi}"
        raise ValueError(msg)
    out_s = np.empty(s.size + 1, np.int64)
    out_e = np.empty(s.size + 1, np.int64)
    n = _gaps_kernel(s, e, state, NULL if hi is None else hi, out_s, out_e)
    return Intervals(out_s[:n], out_e[:n])


def step_accumulators(steps: int) -> StepTotals:
    """Empty :func:`step_totals` accumulators for ``steps`` steps (plus the outside slot)."""
    return StepTotals(
        np.zeros(steps + 1, np.int64), np.full(steps + 1, NULL, np.int64), np.full(steps + 1, NULL, np.int64)
    )


def step_totals(
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    step_starts: npt.ArrayLike,
    step_ends: npt.ArrayLike,
    *,
    mode: int,
    acc: StepTotals,
) -> StepTotals:
    """Add one batch of intervals (any order) to per-step accumulators (framework_outputs.md §4a).

    Steps are the half-open windows ``[step_starts[k], step_ends[k])``, sorted and disjoint (touching is
    fine). :data:`CLIP` splits intervals exactly at step boundaries, time outside every step going to
    the last slot; :data:`BY_START` credits whole intervals to the step holding their start. ``acc``
    is updated in place and returned.
    """
    s = int_column("starts", starts)
    e = int_column("ends", ends, s.size)
    ss = int_column("step_starts", step_starts)
    se = int_column("step_ends", step_ends, ss.size)
    require_times("starts", s)
    require_times("ends", e)
    require_intervals("starts", s, e)
    bad = np.flatnonzero(se <= ss)
    if bad.size:
        i = int(bad[0])
        msg = f"step_starts: step {i} is empty or reversed: [{ss[i]}, {se[i]})"
        raise ValueError(msg)
    bad = np.flatnonzero(ss[1:] < se[:-1])
    if bad.size:
        i = int(bad[0])
        msg = f"step_starts: expected sorted disjoint steps, got [{ss[i]}, {se[i]}) before {ss[i + 1]}"
        raise ValueError(msg)
    if mode not in (CLIP, BY_START):
        msg = f"mode: expected CLIP ({CLIP}) or BY_START ({BY_START}), got {mode}"
        raise ValueError(msg)
    if any(a.size != ss.size + 1 for a in acc):
        msg = f"acc: expected accumulators of {ss.size + 1} slots, got {acc.total.size}"
        raise ValueError(msg)
    _step_kernel(s, e, ss, se, mode, acc.total, acc.first, acc.last)
    return acc
