"""The op-tree kernels against torch_npu's TreeBuilder, step by step, on random op sets."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.engine.kernels.tree import NO_PARENT, Stack, nest, stab


@dataclass
class _Node:
    """torch_npu's TorchOpNode, reduced to what the rules read."""

    index: int
    start: int
    end: int
    tid: int
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)


def build_tree_ref(events: list[tuple[int, int, int, bool]]) -> list[int]:
    """torch_npu ``TreeBuilder.build_tree`` over start-sorted (start, end, tid, is_op) events.

    Returns each event's parent index (an enqueue's: the op it is attached to, same thread only).
    """
    root = _Node(-1, 0, 0, -1)
    last = root
    parents = []
    for i, (start, end, tid, is_op) in enumerate(events):
        while last is not root and start > last.end:
            assert last.parent is not None
            last = last.parent
        if is_op:
            node = _Node(i, start, end, tid, last)
            last.children.append(node)
            parents.append(last.index)
            last = node
        else:
            parents.append(last.index if last is not root and last.tid == tid else NO_PARENT)
    return parents


def deepest_ref(ops: list[tuple[int, int]], t: int) -> int:
    """torch_npu ``match_self_torch_op``: descend by the child with the latest start <= t."""
    root = _Node(-1, 0, 0, 0)
    last = root
    for i, (start, end) in enumerate(ops):
        while last is not root and start > last.end:
            assert last.parent is not None
            last = last.parent
        node = _Node(i, start, end, 0, last)
        last.children.append(node)
        last = node
    found = -1
    node = root
    while True:
        before = [c for c in node.children if c.start <= t]
        if not before or before[-1].end <= t:
            return found
        node = before[-1]
        found = node.index


@st.composite
def events(draw: st.DrawFn) -> list[tuple[int, int, int, bool]]:
    """Start-sorted ops and enqueues on two threads, any overlap (partial, nested, touching)."""
    n = draw(st.integers(0, 30))
    rows = []
    for _ in range(n):
        start = draw(st.integers(0, 60))
        rows.append((start, start + draw(st.integers(0, 30)), draw(st.integers(1, 2)), draw(st.booleans())))
    return sorted(rows, key=lambda r: r[0])


@st.composite
def nested_ops(draw: st.DrawFn, lo: int = 0, hi: int = 200, depth: int = 0) -> list[tuple[int, int]]:
    """Properly nested ops in start order (one thread's call stack); siblings do not touch."""
    out: list[tuple[int, int]] = []
    at = lo
    for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
        if hi - at < 4:
            break
        start = draw(st.integers(at, hi - 2))
        end = draw(st.integers(start + 1, hi))
        out.append((start, end))
        out += draw(nested_ops(start, end, depth + 1))
        at = end + 1
    return out


@settings(deadline=None)  # the first example compiles the kernel
@given(events(), st.integers(0, 30))
def test_nest_matches_tree_builder_in_any_batches(rows: list[tuple[int, int, int, bool]], cut: int) -> None:
    """Parents equal torch_npu's, however the events are split into batches."""
    expected = build_tree_ref(rows)
    cut = min(cut, len(rows))
    stack = Stack.empty()
    got: list[int] = []
    for part in (rows[:cut], rows[cut:]):
        cols = np.array(part, np.int64).reshape(-1, 4).T
        ids = np.arange(len(got), len(got) + len(part))
        parents, stack = nest(cols[0], cols[1], cols[2], cols[3].astype(bool), ids, stack)
        got += parents.tolist()
    assert got == expected


@settings(max_examples=200, deadline=None)
@given(nested_ops(), st.lists(st.integers(-5, 210), max_size=20))
def test_stab_matches_descent_on_nested_ops(ops: list[tuple[int, int]], times: list[int]) -> None:
    """On one thread's properly nested ops, the latest op around t is torch_npu's deepest op."""
    cols = np.array(ops, np.int64).reshape(-1, 2).T
    got = stab(cols[0], cols[1], np.array(times, np.int64))
    assert got.tolist() == [deepest_ref(ops, t) for t in times]


def test_stab_touching_siblings() -> None:
    """An op starting at its sibling's end is found at that time (torch_npu nests it and finds none)."""
    assert stab(np.array([0, 181]), np.array([181, 182]), np.array([181, 180, 182])).tolist() == [1, 0, -1]
    assert deepest_ref([(0, 181), (181, 182)], 181) == -1


def test_nest_examples() -> None:
    """A touching op still nests; an enqueue on another thread attaches to nothing."""
    starts, ends = np.array([0, 10, 20, 30, 40]), np.array([30, 20, 25, 35, 50])
    tids, is_op = np.array([1, 1, 2, 1, 1]), np.array([True, True, False, True, False])
    parents, stack = nest(starts, ends, tids, is_op, np.arange(5), Stack.empty())
    # 20 starts at B's end (still inside B), but the enqueue is on thread 2; 30 starts at A's end
    # (nests under A); 40 is after both: the enqueue at 40 sees only the root, and the chain is empty
    assert parents.tolist() == [NO_PARENT, 0, NO_PARENT, 0, NO_PARENT]
    assert stack.ids.size == 0
    parents, stack = nest(starts[:4], ends[:4], tids[:4], is_op[:4], np.arange(4), Stack.empty())
    assert stack.ids.tolist() == [0, 3] and stack.ends.tolist() == [30, 35]


def test_nest_refuses_unsorted_starts() -> None:
    """Events must come in start order."""
    with pytest.raises(ValueError, match="start order"):
        nest(
            np.array([5, 1]),
            np.array([6, 2]),
            np.zeros(2, int),
            np.ones(2, bool),
            np.arange(2),
            Stack.empty(),
        )


def _nest_rows(
    rows: list[tuple[int, int, int, bool]], first_id: int, stack: Stack
) -> tuple[list[int], Stack]:
    cols = np.array(rows, np.int64).reshape(-1, 4).T
    ids = np.arange(first_id, first_id + len(rows))
    parents, stack = nest(cols[0], cols[1], cols[2], cols[3].astype(bool), ids, stack)
    return parents.tolist(), stack


def test_late_op_goes_in_at_its_depth() -> None:
    """A late op takes the deepest op around it as parent and, still open, parents what follows."""
    # A(0,100) > B(10,20), then C(30,40): the chain is [A, C] and the latest start 30
    parents, stack = _nest_rows([(0, 100, 1, True), (10, 20, 1, True), (30, 40, 1, True)], 0, Stack.empty())
    assert parents == [NO_PARENT, 0, 0] and stack.ids.tolist() == [0, 2] and stack.latest == 30
    # L(5,60) arrives late: inside A only (C started after it); it goes in between A and C
    parents, stack = _nest_rows([(5, 60, 1, True), (45, 50, 1, True), (70, 80, 1, True)], 3, stack)
    # D(45,50) pops C and nests under L; E(70,80) is past L and nests under A
    assert parents == [0, 3, 0]
    assert stack.ids.tolist() == [0, 5] and stack.latest == 70


def test_late_events_that_end_early_do_not_enter_the_chain() -> None:
    """A late op over before the latest start parents nothing to come; a late enqueue attaches to the
    deepest op around it on its own thread only."""
    parents, stack = _nest_rows([(0, 100, 1, True), (50, 60, 1, True)], 0, Stack.empty())
    late = [(10, 20, 1, True), (12, 14, 1, False), (15, 16, 2, False)]
    parents, stack = _nest_rows(late, 2, stack)
    assert parents == [0, 0, NO_PARENT]
    assert stack.ids.tolist() == [0, 1] and stack.latest == 50
    # a late root (nothing around it) with nothing open: parent none, and it holds what comes next
    parents, stack = _nest_rows([(200, 210, 1, True)], 5, stack)
    parents, stack = _nest_rows([(150, 300, 1, True), (250, 260, 1, True)], 6, stack)
    assert parents == [NO_PARENT, 6]
