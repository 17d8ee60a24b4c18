"""Searching rows sorted by (group, time): the latest row of a group before a time.

The host joins ask this of thousands of queries per batch against state that is already sorted
(API intervals by thread and start). A binary search per query over the sorted rows costs
``O(m log n)``, where sorting rows and queries together again on every call (what a numpy-only
version does) costs ``O((n + m) log(n + m))`` each time, with the state being the large side.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import Int64Array, inline, int_column, kernel


@inline
def _last_row_before(groups: Int64Array, times: Int64Array, g: int, t: int) -> int:
    low, high = 0, groups.size  # first row with (group, time) >= (g, t)
    while low < high:
        mid = (low + high) // 2
        if groups[mid] < g or (groups[mid] == g and times[mid] < t):
            low = mid + 1
        else:
            high = mid
    return low - 1 if low > 0 and groups[low - 1] == g else -1


@kernel
def _last_before(
    groups: Int64Array, times: Int64Array, query_groups: Int64Array, query_times: Int64Array, out: Int64Array
) -> None:
    for q in range(query_groups.size):
        out[q] = _last_row_before(groups, times, query_groups[q], query_times[q])


@kernel
def _innermost(
    groups: Int64Array,
    starts: Int64Array,
    ends: Int64Array,
    parents: Int64Array,
    query_groups: Int64Array,
    query_times: Int64Array,
    out: Int64Array,
) -> None:
    for q in range(query_groups.size):
        t = query_times[q]
        at = _last_row_before(groups, starts, query_groups[q], t)
        while at >= 0 and ends[at] < t:  # it ended before: the enclosing one may not have
            at = parents[at]
        out[q] = at


def last_before(
    groups: npt.ArrayLike, times: npt.ArrayLike, query_groups: npt.ArrayLike, query_times: npt.ArrayLike
) -> Int64Array:
    """For each query, the last row (in the given order) of its group with ``time < query time``, or -1.

    The rows must be sorted by (group, time); among rows of equal group and time the last one wins.
    """
    g = int_column("groups", groups)
    t = int_column("times", times, g.size)
    qg = int_column("query_groups", query_groups)
    qt = int_column("query_times", query_times, qg.size)
    out = np.empty(qg.size, np.int64)
    _last_before(g, t, qg, qt, out)
    return out


def innermost(
    groups: npt.ArrayLike,
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    parents: npt.ArrayLike,
    query_groups: npt.ArrayLike,
    query_times: npt.ArrayLike,
) -> Int64Array:
    """For each query, the innermost interval ``(start, end]`` of its group holding its time, or -1.

    The intervals must be sorted by (group, start, end descending), ``parents`` giving each one's
    nearest enclosing earlier interval of its group (-1 for none): the last interval starting before
    the time, or the first of its enclosing ones that does not end before it.
    """
    g = int_column("groups", groups)
    s = int_column("starts", starts, g.size)
    e = int_column("ends", ends, g.size)
    p = int_column("parents", parents, g.size)
    qg = int_column("query_groups", query_groups)
    qt = int_column("query_times", query_times, qg.size)
    out = np.empty(qg.size, np.int64)
    _innermost(g, s, e, p, qg, qt, out)
    return out
