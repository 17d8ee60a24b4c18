"""last_before (binary search on sorted rows) against a plain-Python scan on random inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels.search import last_before

small = st.integers(0, 6)


def reference(groups: list[int], times: list[int], qg: list[int], qt: list[int]) -> list[int]:
    out = []
    for g, t in zip(qg, qt, strict=True):
        found = -1
        for i, (rg, rt) in enumerate(zip(groups, times, strict=True)):
            if rg == g and rt < t:
                found = i  # the last in order wins, equal times included
        out.append(found)
    return out


@given(
    st.lists(st.tuples(small, small), max_size=40),
    st.lists(st.tuples(small, st.integers(-1, 8)), max_size=40),
)
def test_last_before_matches_a_scan(rows: list[tuple[int, int]], queries: list[tuple[int, int]]) -> None:
    rows = sorted(rows)  # the kernel's precondition: sorted by (group, time)
    groups, times = [g for g, _ in rows], [t for _, t in rows]
    qg, qt = [g for g, _ in queries], [t for _, t in queries]
    got = last_before(
        np.array(groups, np.int64), np.array(times, np.int64), np.array(qg, np.int64), np.array(qt, np.int64)
    )
    assert got.tolist() == reference(groups, times, qg, qt)
