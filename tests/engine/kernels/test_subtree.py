"""subtree_folds: per-node float sums in a given order, as torch_npu's ``sum([float(kernel.dur) ...])``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels.subtree import subtree_folds


def _left_fold(values: list[float]) -> float | None:
    """Python's ``sum`` before 3.12: 0, then each value added in turn; None for an empty list."""
    if not values:
        return None
    total: float = 0
    for value in values:
        total = total + value
    return total


def _nan_to_none(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


def test_the_residue_of_adding_one_kernel_at_a_time() -> None:
    """23.74 + 172.763 + 14.5 is 211.00300000000001 in Python floats; a parent adds its children's items
    one by one in the order given, not their sums: (23.74 + 14.5) + 172.763 is 211.003, 23.74 +
    (14.5 + 172.763) is not."""
    own, _ = subtree_folds([-1], [0, 0, 0], [23.74, 172.763, 14.5])
    assert repr(float(own[0])) == "211.00300000000001"
    own, total = subtree_folds([-1, 0], [0, 1, 1], [23.74, 14.5, 172.763])
    assert (own[0], own[1], total[1]) == (23.74, 14.5 + 172.763, 14.5 + 172.763)
    assert repr(float(total[0])) == "211.003"
    assert repr(23.74 + float(own[1])) == "211.00300000000001"


@given(
    st.lists(st.integers(-1, 30), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 10**7)), max_size=40),
)
def test_folds_match_python_sums_in_order(links: list[int], items: list[tuple[int, int]]) -> None:
    parents = [p if p < i else -1 for i, p in enumerate(links)]
    items = [(node % len(parents), ns) for node, ns in items]
    nodes = [node for node, _ in items]
    values = [ns / 1000 for _, ns in items]
    own, total = subtree_folds(parents, nodes, values)

    def inside(node: int, root: int) -> bool:
        while node >= 0 and node != root:
            node = parents[node]
        return node == root

    for root in range(len(parents)):
        assert _nan_to_none(own)[root] == _left_fold(
            [v for n, v in zip(nodes, values, strict=True) if n == root]
        )
        assert _nan_to_none(total)[root] == _left_fold(
            [v for n, v in zip(nodes, values, strict=True) if inside(n, root)]
        )


def test_refuses_bad_nodes_and_parents() -> None:
    with pytest.raises(ValueError, match="nodes"):
        subtree_folds([-1], [1], [1.0])
    with pytest.raises(ValueError, match="parents"):
        subtree_folds([1, -1], [0], [1.0])
    with pytest.raises(ValueError, match="values"):
        subtree_folds([-1], [0], [1.0, 2.0])
