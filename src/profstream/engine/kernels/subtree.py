"""Sums over the subtrees of a tree whose nodes are listed parents first (the torch op tree).

torch_npu's ``operator_details.csv`` (framework_outputs.md §3.3; ``prof_bean/_torch_op_node.py``)
needs, per op, the sum over its subtree (device total durations) and the sum over its direct
children (host self = duration - Σ children durations). With parents listed before their children
(op ids are given in start order, and a child starts within its parent) one backward sweep adds
every node into its parent.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import Int64Array, int_column, kernel


@kernel
def _sweep(parents: Int64Array, totals: Int64Array) -> None:
    for i in range(parents.size - 1, -1, -1):
        p = parents[i]
        if p >= 0:
            for c in range(totals.shape[0]):
                totals[c, p] += totals[c, i]


def subtree_sums(parents: npt.ArrayLike, values: npt.ArrayLike) -> Int64Array:
    """``values`` (shape (columns, nodes)) summed over each node's subtree, itself included.

    ``parents[i]`` is the index of node ``i``'s parent (``-1`` for a root) and must be below ``i``.
    """
    p = int_column("parents", parents)
    totals = np.array(values, np.int64, ndmin=2, copy=True)
    if totals.shape[1] != p.size:
        msg = f"values: expected {p.size} nodes per column, got shape {totals.shape}"
        raise ValueError(msg)
    if np.any(p >= np.arange(p.size)):
        msg = "parents: every parent must come before its children"
        raise ValueError(msg)
    _sweep(p, totals)
    return totals
