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
start order in any number of batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import BoolArray, Int64Array, flag_column, int_column, kernel

#: the parent of a root op, or of an enqueue event attached to no op
NO_PARENT = -1


@dataclass(frozen=True, slots=True)
class Stack:
    """The chain of open ops, outermost first: their ids, ends and thread ids."""

    ids: Int64Array
    ends: Int64Array
    tids: Int64Array

    @classmethod
    def empty(cls) -> Stack:
        """No op open."""
        none = np.empty(0, np.int64)
        return cls(none, none.copy(), none.copy())


@kernel
def _nest(
    starts: Int64Array,
    ends: Int64Array,
    tids: Int64Array,
    is_op: BoolArray,
    ids: Int64Array,
    s_ids: Int64Array,
    s_ends: Int64Array,
    s_tids: Int64Array,
    depth: int,
    parents: Int64Array,
) -> int:
    """Parents of start-sorted events; the chain (capacity ``depth + n``) is updated in place."""
    for i in range(starts.size):
        while depth > 0 and starts[i] > s_ends[depth - 1]:
            depth -= 1
        top = s_ids[depth - 1] if depth > 0 else NO_PARENT
        if is_op[i]:
            parents[i] = top
            s_ids[depth] = ids[i]
            s_ends[depth] = ends[i]
            s_tids[depth] = tids[i]
            depth += 1
        elif depth > 0 and s_tids[depth - 1] == tids[i]:
            parents[i] = top
        else:
            parents[i] = NO_PARENT
    return depth


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
    is attached to, or :data:`NO_PARENT`. ``ids`` name the ops for their children.
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
    cap = depth + n
    s_ids, s_ends, s_tids = (np.empty(cap, np.int64) for _ in range(3))
    s_ids[:depth], s_ends[:depth], s_tids[:depth] = stack.ids, stack.ends, stack.tids
    parents = np.empty(n, np.int64)
    depth = _nest(s, e, t, flags, i, s_ids, s_ends, s_tids, depth, parents)
    return parents, Stack(s_ids[:depth].copy(), s_ends[:depth].copy(), s_tids[:depth].copy())


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
