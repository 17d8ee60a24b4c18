"""Interval kernels: oracle agreement, batch independence, the msprof / step_trace_time examples."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels import overlap
from profstream.engine.kernels._dispatch import FLUSH, NULL
from tests.engine.kernels.reference import COMPARISONS, Span, combine_ref, spans

Arr = np.ndarray


@st.composite
def intervals(draw: st.DrawFn, max_size: int = 30) -> tuple[Arr, Arr]:
    """Start-sorted intervals with ties, nesting, touching and zero-length ones."""
    n = draw(st.integers(0, max_size))
    starts = np.cumsum(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))).astype(np.int64)
    ends = starts + np.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), np.int64)
    return starts, ends


@st.composite
def merged(draw: st.DrawFn, max_size: int = 15) -> tuple[Arr, Arr]:
    """A canonical set: positive lengths, positive gaps."""
    n = draw(st.integers(0, max_size))
    steps = draw(st.lists(st.integers(1, 6), min_size=2 * n, max_size=2 * n))
    edges = np.cumsum([draw(st.integers(0, 3)), *steps[1:]]).astype(np.int64) if n else np.empty(0, np.int64)
    return edges[0::2], edges[1::2]


@st.composite
def cuts(draw: st.DrawFn, n: int) -> list[int]:
    """Batch boundaries ``0 = c0 <= c1 <= ... <= ck = n`` (empty batches included)."""
    inner = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    return [0, *inner, n]


def check(name: str, inputs: dict[str, Any]) -> None:
    """The wrapper agrees with the oracle of ``name``."""
    cmp = COMPARISONS[name]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(intervals())
def test_union_matches_reference(iv: tuple[Arr, Arr]) -> None:
    """Union equals the elementary-segment union for any start-sorted input."""
    check("union", {"starts": iv[0], "ends": iv[1]})


@given(merged(), merged(), st.sampled_from(list(overlap.SetOp)))
def test_combine_matches_reference(a: tuple[Arr, Arr], b: tuple[Arr, Arr], op: overlap.SetOp) -> None:
    """Difference, intersection and union of two merged sets equal the oracle's."""
    check(f"combine_{op.name.lower()}", {"a": a, "b": b})


@given(intervals(), st.integers(-3, 20), st.integers(0, 30))
def test_gaps_match_reference(iv: tuple[Arr, Arr], lo: int, extra: int) -> None:
    """Free equals the window minus the union, head and tail included."""
    hi = (int(iv[0][-1]) if iv[0].size else lo) + extra
    check("gaps", {"starts": iv[0], "ends": iv[1], "lo": lo, "hi": hi})


@st.composite
def steps(draw: st.DrawFn) -> list[Span]:
    """Sorted disjoint (possibly touching) half-open step windows."""
    out: list[Span] = []
    end = draw(st.integers(-2, 6))
    for _ in range(draw(st.integers(0, 5))):
        start = end + draw(st.integers(0, 4))
        end = start + draw(st.integers(1, 12))
        out.append((start, end))
    return out


@given(intervals(), steps(), st.sampled_from([overlap.CLIP, overlap.BY_START]), st.randoms())
def test_step_totals_match_reference(iv: tuple[Arr, Arr], windows: list[Span], mode: int, rnd: Any) -> None:
    """Per-step totals, first starts and last ends equal the oracle's, in any input order."""
    order = list(range(iv[0].size))
    rnd.shuffle(order)
    name = "steps_clip" if mode == overlap.CLIP else "steps_by_start"
    check(name, {"starts": iv[0][order], "ends": iv[1][order], "steps": windows, "mode": mode})


@pytest.mark.parametrize(
    "name", [n for n in COMPARISONS if n.startswith(("union", "combine", "gaps", "steps"))]
)
def test_benchmark_inputs_match_reference(name: str) -> None:
    """Every interval kernel agrees with its oracle on the benchmark's own (realistic) inputs."""
    check(name, COMPARISONS[name].make(np.random.default_rng(7), 300))


# --------------------------------------------------------------------------- streaming


@given(intervals(), st.data())
def test_union_is_batch_independent(iv: tuple[Arr, Arr], data: st.DataObject) -> None:
    """Any batch split, with or without watermarks, emits exactly the one-call result."""
    starts, ends = iv
    bounds = data.draw(cuts(starts.size))
    state = overlap.union_state()
    got: list[Span] = []
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        last = k == len(bounds) - 2
        mark = FLUSH if last else (int(starts[hi]) if hi < starts.size and data.draw(st.booleans()) else NULL)
        got += spans(overlap.union(starts[lo:hi], ends[lo:hi], state, mark))
    assert got == spans(overlap.union(starts, ends, overlap.union_state(), FLUSH))


@given(merged(), merged(), st.sampled_from(list(overlap.SetOp)), st.data())
def test_combine_is_batch_independent(
    a: tuple[Arr, Arr], b: tuple[Arr, Arr], op: overlap.SetOp, data: st.DataObject
) -> None:
    """Both streams cut at unrelated points, watermarks at the next unseen start or none: same pieces."""
    ca, cb = data.draw(cuts(a[0].size)), data.draw(cuts(b[0].size))
    calls = max(len(ca), len(cb)) - 1
    ca += [ca[-1]] * (calls + 1 - len(ca))
    cb += [cb[-1]] * (calls + 1 - len(cb))
    state = overlap.CombineState.new()
    got: list[Span] = []
    for k in range(calls):
        batch_a = (a[0][ca[k] : ca[k + 1]], a[1][ca[k] : ca[k + 1]])
        batch_b = (b[0][cb[k] : cb[k + 1]], b[1][cb[k] : cb[k + 1]])
        upcoming = [int(x[0][c[k + 1]]) for x, c in ((a, ca), (b, cb)) if c[k + 1] < x[0].size]
        mark = FLUSH if k == calls - 1 else (min(upcoming) if upcoming and data.draw(st.booleans()) else NULL)
        got += spans(overlap.combine(op, batch_a, batch_b, state, mark))
    if calls == 0:
        got = spans(overlap.combine(op, a, b, state, FLUSH))
    assert got == spans(overlap.combine(op, a, b, overlap.CombineState.new(), FLUSH))


@given(intervals(), st.data())
def test_gaps_are_batch_independent(iv: tuple[Arr, Arr], data: st.DataObject) -> None:
    """Free cut into batches equals Free in one call."""
    starts, ends = iv
    hi = int(starts[-1]) + 5 if starts.size else 5
    bounds = data.draw(cuts(starts.size))
    state = overlap.gaps_state(-2)
    got: list[Span] = []
    for k, (lo, up) in enumerate(itertools.pairwise(bounds)):
        got += spans(overlap.gaps(starts[lo:up], ends[lo:up], state, hi=hi if k == len(bounds) - 2 else None))
    assert got == spans(overlap.gaps(starts, ends, overlap.gaps_state(-2), hi=hi))


@given(intervals(), steps(), st.data())
def test_step_totals_accumulate_over_batches(
    iv: tuple[Arr, Arr], windows: list[Span], data: st.DataObject
) -> None:
    """Accumulating batches gives the totals of one call."""
    starts, ends = iv
    ss, se = [s for s, _ in windows], [e for _, e in windows]
    acc = overlap.step_accumulators(len(windows))
    bounds = data.draw(cuts(starts.size))
    for lo, hi in itertools.pairwise(bounds):
        overlap.step_totals(starts[lo:hi], ends[lo:hi], ss, se, mode=overlap.CLIP, acc=acc)
    one = overlap.step_totals(
        starts, ends, ss, se, mode=overlap.CLIP, acc=overlap.step_accumulators(len(windows))
    )
    for got, want in zip(acc, one, strict=True):
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- worked examples


def test_touching_intervals_merge() -> None:
    """msprof merges when next.start <= cur.end (UnionOneSet); zero-length tasks vanish."""
    out = overlap.union([0, 3, 3, 7, 12], [3, 5, 3, 7, 13], overlap.union_state(), FLUSH)
    assert spans(out) == [(0, 5), (12, 13)]


def test_open_interval_waits_for_watermark() -> None:
    """The last merged interval stays open until a watermark passes its end."""
    state = overlap.union_state()
    assert spans(overlap.union([0, 2], [4, 6], state)) == []
    assert spans(overlap.union([], [], state, 6)) == []  # a start at 6 would still touch it
    assert spans(overlap.union([], [], state, 7)) == [(0, 6)]


def test_difference_is_exact_where_msprof_cpp_is_not() -> None:
    """A = [0,10] [12,20], B = [5,15]: A - B is [0,5] [15,20]; msprof C++ GetDifferenceSet gives [12,20]."""
    a = (np.array([0, 12]), np.array([10, 20]))
    b = (np.array([5]), np.array([15]))
    out = overlap.combine(overlap.SetOp.DIFFERENCE, a, b, overlap.CombineState.new(), FLUSH)
    assert spans(out) == [(0, 5), (15, 20)]


def test_step_trace_time_example() -> None:
    """Hand-worked step_trace_time: two steps, compute and communication with one straddling op.

    Compute [0,40] [50,70]; communication [30,60] [90,120]; steps [0,60) [60,130).
    Not Overlapped = [40,50] [90,120]; Overlapped = [30,40] [50,60]; Free in [0,130] = [70,90] [120,130].
    Clipped per step: Computing 40+10 | 10, Communication 30 | 30, Not Overlapped 10 | 30,
    Overlapped = Communication - Not Overlapped = 20 | 0, Free 0 | 30.
    """
    comp = overlap.union([0, 10, 50], [40, 30, 70], overlap.union_state(), FLUSH)
    comm = overlap.union([30, 90], [60, 120], overlap.union_state(), FLUSH)
    pair = (comm.starts, comm.ends), (comp.starts, comp.ends)
    alone = overlap.combine(overlap.SetOp.DIFFERENCE, *pair, overlap.CombineState.new(), FLUSH)
    both = overlap.combine(overlap.SetOp.INTERSECTION, *pair, overlap.CombineState.new(), FLUSH)
    every = overlap.combine(overlap.SetOp.UNION, *pair, overlap.CombineState.new(), FLUSH)
    free = overlap.gaps(every.starts, every.ends, overlap.gaps_state(0), hi=130)
    assert spans(alone) == [(40, 50), (90, 120)]
    assert spans(both) == [(30, 40), (50, 60)]
    assert spans(free) == [(70, 90), (120, 130)]

    def per_step(iv: overlap.Intervals) -> list[int]:
        acc = overlap.step_totals(
            iv.starts, iv.ends, [0, 60], [60, 130], mode=overlap.CLIP, acc=overlap.step_accumulators(2)
        )
        return acc.total.tolist()

    assert per_step(comp) == [50, 10, 0]
    assert per_step(comm) == [30, 30, 0]
    assert per_step(alone) == [10, 30, 0]
    assert [c - n for c, n in zip(per_step(comm), per_step(alone), strict=True)] == per_step(both)
    assert per_step(free) == [0, 30, 0]


def test_by_start_credits_whole_interval() -> None:
    """torch_npu's text path: an event counts in the step holding its start, unclipped (start <= ts < end)."""
    acc = overlap.step_totals(
        [55, 60, 200],
        [80, 61, 210],
        [0, 60],
        [60, 130],
        mode=overlap.BY_START,
        acc=overlap.step_accumulators(2),
    )
    assert acc.total.tolist() == [25, 1, 10]
    assert acc.first.tolist() == [55, 60, 200]
    assert acc.last.tolist() == [80, 61, 210]


def test_combine_holds_a_stream_back_until_the_other_speaks() -> None:
    """With B silent, pieces of A are kept until a watermark vouches for B."""
    state = overlap.CombineState.new()
    a = (np.array([0]), np.array([10]))
    none = (np.empty(0, np.int64), np.empty(0, np.int64))
    assert spans(overlap.combine(overlap.SetOp.DIFFERENCE, a, none, state)) == []
    assert spans(overlap.combine(overlap.SetOp.DIFFERENCE, none, none, state, 11)) == [(0, 10)]


# --------------------------------------------------------------------------- bad input


def test_unsorted_starts_are_refused() -> None:
    """A start-sorted stream that goes back in time is a ValueError naming the column."""
    with pytest.raises(ValueError, match=r"starts: expected ascending values, got 5 then 3 at index 1"):
        overlap.union([5, 3], [6, 4], overlap.union_state())
    state = overlap.union_state()
    overlap.union([5], [6], state)
    with pytest.raises(ValueError, match="previous batch"):
        overlap.union([4], [9], state)


def test_unmerged_sets_are_refused() -> None:
    """combine() needs merged input: overlapping, touching or empty pieces are ValueErrors."""
    state = overlap.CombineState.new()
    with pytest.raises(ValueError, match="expected merged intervals"):
        overlap.combine(overlap.SetOp.UNION, ([0, 5], [5, 9]), ([], []), state)
    with pytest.raises(ValueError, match="positive length"):
        overlap.combine(overlap.SetOp.UNION, ([0], [0]), ([], []), state)


def test_float_and_reversed_inputs_are_refused() -> None:
    """Floats are never cast silently; an interval ending before it starts is named."""
    with pytest.raises(ValueError, match="starts: expected integers, got dtype float64"):
        overlap.union(np.array([1.5]), [2], overlap.union_state())
    with pytest.raises(ValueError, match=r"interval 0 ends before it starts: \[4, 2\]"):
        overlap.union([4], [2], overlap.union_state())
    with pytest.raises(ValueError, match="reserved sentinels"):
        overlap.union([FLUSH - 1], [FLUSH], overlap.union_state())


def test_gap_window_must_cover_the_starts() -> None:
    """hi before the last start would make earlier gaps wrong: refused."""
    state = overlap.gaps_state(0)
    with pytest.raises(ValueError, match="hi: expected a window end at or after the last start 10, got 5"):
        overlap.gaps([10], [12], state, hi=5)


def test_bad_steps_are_refused() -> None:
    """Overlapping steps, an unknown mode and accumulators of the wrong size are ValueErrors."""
    acc = overlap.step_accumulators(2)
    with pytest.raises(ValueError, match="sorted disjoint steps"):
        overlap.step_totals([], [], [0, 5], [10, 20], mode=overlap.CLIP, acc=acc)
    with pytest.raises(ValueError, match="mode"):
        overlap.step_totals([], [], [0, 10], [10, 20], mode=7, acc=acc)
    with pytest.raises(ValueError, match="acc: expected accumulators of 2 slots"):
        overlap.step_totals([], [], [0], [10], mode=overlap.CLIP, acc=acc)


def test_reference_difference_example_agrees() -> None:
    """The oracle itself gives the hand-computed difference (guards the oracle)."""
    assert combine_ref(overlap.SetOp.DIFFERENCE, [(0, 10), (12, 20)], [(5, 15)]) == [(0, 5), (15, 20)]


def test_arrow_columns_are_accepted_and_nulls_refused() -> None:
    """pyarrow columns without nulls go straight in; a null would need a cast, so it is refused."""
    out = overlap.union(
        pa.array([0, 2], pa.int64()), pa.array([3, 5], pa.int64()), overlap.union_state(), FLUSH
    )
    assert spans(out) == [(0, 5)]
    with pytest.raises(ValueError, match="ends: expected integers"):
        overlap.union(pa.array([0, 2], pa.int64()), pa.array([3, None], pa.int64()), overlap.union_state())
