"""Sums over the subtrees of a tree whose nodes are listed parents first (the torch op tree).

torch_npu's ``operator_details.csv`` (framework_outputs.md §3.3; ``prof_bean/_torch_op_node.py``)
needs, per op, the sum over its subtree (device total durations) and the sum over its direct
children (host self = duration - Σ children durations). With parents listed before their children
(op ids are given in start order, and a child starts within its parent) one backward sweep adds
every node into its parent.

torch_npu prints its device sums as Python floats added one kernel at a time
(``sum([float(kernel.dur) ...])`` of µs, ``prof_view/_operator_view_parser.py``
``OperatorViewParser.generate_view``), so their last digits depend on the order of the additions:
:func:`subtree_folds` adds values in a given order, each into its own node and every ancestor.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import FloatArray, Int64Array, int_column, kernel


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


@kernel
def _fold(
    parents: Int64Array, nodes: Int64Array, values: FloatArray, own: FloatArray, total: FloatArray
) -> None:
    for i in range(nodes.size):
        node, value = nodes[i], values[i]
        own[node] = value if np.isnan(own[node]) else own[node] + value
        while node >= 0:
            total[node] = value if np.isnan(total[node]) else total[node] + value
            node = parents[node]


def subtree_folds(
    parents: npt.ArrayLike, nodes: npt.ArrayLike, values: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Float sums per node of ``values`` (item ``i`` belongs to node ``nodes[i]``), each item added in
    the order given, as Python's ``sum`` of a list in that order adds them (left to right, no
    compensation): (the node's own items, the items of its subtree). NaN where no item was added
    (Python's ``sum([])`` is the integer ``0``, printed without a decimal).

    ``parents`` as for :func:`subtree_sums`.
    """
    p = int_column("parents", parents)
    at = int_column("nodes", nodes)
    v = np.ascontiguousarray(values, np.float64)
    if v.shape != at.shape:
        msg = f"values: expected {at.size} values, got shape {v.shape}"
        raise ValueError(msg)
    if at.size and (at.min() < 0 or at.max() >= p.size):
        msg = f"nodes: every node must be in [0, {p.size})"
        raise ValueError(msg)
    if np.any(p >= np.arange(p.size)):
        msg = "parents: every parent must come before its children"
        raise ValueError(msg)
    own, total = np.full(p.size, np.nan), np.full(p.size, np.nan)
    _fold(p, at, v, own, total)
    return own, total
