"""The torch op tree: nesting ops by time containment, and finding the deepest op around a time.

**Nesting** (specs/framework_outputs.md §1.6 "Op tree"; torch_npu
``prof_common_func/_tree_builder.py`` ``TreeBuilder.build_tree``): torch ops and enqueue events of
every thread, sorted by start, walk down one chain of open ops. Before each event the chain drops
every op the event starts *after* (``start > op end``: an event starting exactly at an op's end
still nests); the op left on top is the event's parent (none at the root). A torch op then becomes
the top of the chain. An enqueue event is not a node: it is attached to the top op — its correlation
id becomes that op's ``corr_id_self`` — only when the top op runs on the enqueue's own thread (the
spec's rule; the version of ``_tree_builder.py`` read attaches to any top op, and to the root).
Nothing checks that the event also *ends* inside its parent, so an op of another thread that
overlaps the top op partially is nested under it, as torch_npu does.

**Deepest op** (§3.1 "Without task queue"; ``TreeBuilder.match_self_torch_op``): torch_npu descends
from the root, at each level taking the child with the latest start at or before ``t`` and stopping
when that child ended at or before ``t``. When children lie inside their parent and do not overlap
each other (one thread's call stack), that finds the op with ``start <= t < end`` that is latest in
start order, which is what :func:`stab` returns, in one sweep over ops and sorted times. One
difference remains: an op that starts exactly at its sibling's end is nested under that sibling by
the tree rule, so torch_npu's descent finds no op at that instant; :func:`stab` finds the new op.

Streaming: the chain of open ops is the whole state of :func:`nest` (:class:`Stack`); ops come in
start order in any number of batches. A *late* event starts before the latest start already nested
(a ``ProfilerStep`` longer than the operator's reorder window: torch_npu writes an op when it ends).
It takes the deepest chain op that contains it (starts at or before it and ends at or after its end)
as parent, instead of the top, and a late op that is still open at the latest start is inserted
into the chain at that depth, so the events still to come nest under it. The events nested before
it arrived keep their parents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import BoolArray, Int64Array, flag_column, int_column, kernel

#: the parent of a root op, or of an enqueue event attached to no op
NO_PARENT = -1
#: :attr:`Stack.latest` before any event
NO_START = int(np.iinfo(np.int64).min)


@dataclass(frozen=True, slots=True)
class Stack:
    """The chain of open ops, outermost first: their ids, starts, ends and thread ids; and the latest
    start nested so far (:data:`NO_START` before the first event)."""

    ids: Int64Array
    starts: Int64Array
    ends: Int64Array
    tids: Int64Array
    latest: int = NO_START

    @classmethod
    def empty(cls) -> Stack:
        """No op open."""
        none = np.empty(0, np.int64)
        return cls(none, none.copy(), none.copy(), none.copy())


@kernel
def _nest(
    starts: Int64Array,
    ends: Int64Array,
    tids: Int64Array,
    is_op: BoolArray,
    ids: Int64Array,
    chain: Int64Array,
    depth: int,
    latest: int,
    parents: Int64Array,
) -> tuple[int, int]:
    """Parents of start-sorted events; the chain (rows id, start, end, tid; capacity ``depth + n``)
    is updated in place. Returns the new depth and latest start."""
    s_ids, s_starts, s_ends, s_tids = chain[0], chain[1], chain[2], chain[3]
    for i in range(starts.size):
        if starts[i] < latest:
            late = _nest_late(starts[i], ends[i], tids[i], is_op[i], ids[i], chain, depth, latest)
            parents[i], depth = late
            continue
        latest = starts[i]
        while depth > 0 and starts[i] > s_ends[depth - 1]:
            depth -= 1
        top = s_ids[depth - 1] if depth > 0 else NO_PARENT
        if is_op[i]:
            parents[i] = top
            s_ids[depth] = ids[i]
            s_starts[depth] = starts[i]
            s_ends[depth] = ends[i]
            s_tids[depth] = tids[i]
            depth += 1
        elif depth > 0 and s_tids[depth - 1] == tids[i]:
            parents[i] = top
        else:
            parents[i] = NO_PARENT
    return depth, latest


@kernel
def _nest_late(
    start: int, end: int, tid: int, is_op: bool, op_id: int, chain: Int64Array, depth: int, latest: int
) -> tuple[int, int]:
    """A late event (module docstring): its parent is the deepest chain op containing it; a late op
    still open at ``latest`` goes into the chain at that depth. Returns the parent and new depth."""
    place = 0
    while place < depth and chain[1, place] <= start and chain[2, place] >= end:
        place += 1
    top = chain[0, place - 1] if place > 0 else NO_PARENT
    if not is_op:
        return (top if place > 0 and chain[3, place - 1] == tid else NO_PARENT), depth
    if end < latest:
        return top, depth
    for j in range(depth, place, -1):
        chain[:, j] = chain[:, j - 1]
    chain[0, place], chain[1, place], chain[2, place], chain[3, place] = op_id, start, end, tid
    return top, depth + 1


def nest(
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    tids: npt.ArrayLike,
    is_op: npt.ArrayLike,
    ids: npt.ArrayLike,
    stack: Stack,
) -> tuple[Int64Array, Stack]:
    """Parent ids of start-sorted torch ops (``is_op``) and enqueue events, and the new chain.

    An op's parent is the id of the op it nests in, or :data:`NO_PARENT`; an enqueue's is the op it
    is attached to, or :data:`NO_PARENT`. ``ids`` name the ops for their children. Events that start
    before ``stack.latest`` are late (module docstring).
    """
    s = int_column("starts", starts)
    n = s.size
    e = int_column("ends", ends, n)
    t = int_column("tids", tids, n, bits=True)
    i = int_column("ids", ids, n)
    flags = flag_column("is_op", is_op, n)
    bad = np.flatnonzero(s[1:] < s[:-1])
    if bad.size:
        k = int(bad[0]) + 1
        msg = f"starts: expected start order, got {s[k]} after {s[k - 1]} at index {k}"
        raise ValueError(msg)
    depth = stack.ids.size
    chain = np.empty((4, depth + n), np.int64)
    chain[:, :depth] = stack.ids, stack.starts, stack.ends, stack.tids
    parents = np.empty(n, np.int64)
    depth, latest = _nest(s, e, t, flags, i, chain, depth, stack.latest, parents)
    kept = chain[:, :depth].copy()
    return parents, Stack(kept[0], kept[1], kept[2], kept[3], latest)


@kernel
def _stab(starts: Int64Array, ends: Int64Array, times: Int64Array, out: Int64Array) -> None:
    """For sorted ``times``, the latest op (index) with ``start <= t < end``, else -1."""
    chain = np.empty(starts.size, np.int64)
    depth = 0
    j = 0
    for q in range(times.size):
        t = times[q]
        while j < starts.size and starts[j] <= t:
            chain[depth] = j
            depth += 1
            j += 1
        while depth > 0 and ends[chain[depth - 1]] <= t:
            depth -= 1
        out[q] = chain[depth - 1] if depth > 0 else -1


def stab(starts: npt.ArrayLike, ends: npt.ArrayLike, times: npt.ArrayLike) -> Int64Array:
    """For each time, the index of the deepest op around it (see the module docstring), else -1.

    ``starts``/``ends`` are ops in start order (a parent before its children); ``times`` any order.
    """
    s = int_column("starts", starts)
    e = int_column("ends", ends, s.size)
    t = int_column("times", times)
    if np.any(s[1:] < s[:-1]):
        msg = "starts: expected ops in start order"
        raise ValueError(msg)
    order = np.argsort(t, kind="stable")
    found = np.empty(t.size, np.int64)
    _stab(s, e, t[order], found)
    out = np.empty(t.size, np.int64)
    out[order] = found
    return out
