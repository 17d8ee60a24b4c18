"""bandwidth_scan (the timeline's HCCL task bandwidth) against msprof's procedure written out plainly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels.hccl import JUMP_NO_BARRIER, JUMP_WITH_BARRIER, bandwidth_scan

Task = tuple[bool, int, int, int]  # payload, start, duration, size


def reference(group: list[Task], jump: int) -> list[float]:
    """``HcclCalculator::CalculateTaskBandwidth`` as msprof's C++ walks one (op, plane) list."""

    def own(i: int) -> float:
        _, _, duration, size = group[i]
        return size / duration if duration > 0 else 0.0

    out = [0.0] * len(group)
    idx = 0
    while idx < len(group):
        if not group[idx][0]:
            out[idx] = own(idx)
            idx += 1
            continue
        count = 0
        while idx + count < len(group) and group[idx + count][0]:
            count += 1
        close = idx + count + jump - 2
        if close >= len(group):  # missing closure tasks: this payload alone, then the next one
            out[idx] = own(idx)
            idx += 1
            continue
        _, first_start, _, _ = group[idx]
        _, close_start, close_duration, _ = group[close]
        time = close_start + close_duration - first_start
        total = sum(size for _, _, _, size in group[idx : idx + count])
        for k in range(idx, idx + count):
            out[k] = total / time if time > 0 else 0.0
        idx += count
    return out


task = st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 20), st.integers(0, 1000))


@given(
    st.lists(
        st.tuples(st.lists(task, max_size=12), st.sampled_from([JUMP_NO_BARRIER, JUMP_WITH_BARRIER])),
        max_size=6,
    )
)
def test_bandwidth_scan_matches_msprof_per_group(groups: list[tuple[list[Task], int]]) -> None:
    tasks = [t for group, _ in groups for t in group]
    offsets = np.cumsum([0] + [len(group) for group, _ in groups])
    starts = np.array([s for _, s, _, _ in tasks], np.int64)
    got = bandwidth_scan(
        offsets,
        np.array([jump for _, jump in groups], np.int64),
        np.array([p for p, _, _, _ in tasks], np.bool_),
        starts,
        starts + np.array([d for _, _, d, _ in tasks], np.int64),
        np.array([z for _, _, _, z in tasks], np.int64),
    )
    expected = [b for group, jump in groups for b in reference(group, jump)]
    assert got.tolist() == pytest.approx(expected, rel=1e-12)


def test_a_closed_payload_group_shares_its_bandwidth() -> None:
    # an all-reduce plane (jump 5): two payloads of 100 and 300 bytes from t=0, closed by the task
    # 0 + 2 + 5 - 2 = 5, which ends at 40 ns: both get 400 B / 40 ns; the others their own size / duration
    payload = [True, True, False, False, False, False]
    starts = np.array([0, 5, 10, 20, 25, 30], np.int64)
    ends = np.array([4, 9, 12, 22, 30, 40], np.int64)
    sizes = np.array([100, 300, 8, 0, 50, 4], np.int64)
    got = bandwidth_scan([0, 6], [JUMP_WITH_BARRIER], payload, starts, ends, sizes)
    assert got.tolist() == [10.0, 10.0, 4.0, 0.0, 10.0, 0.4]
    # the same plane of a send (jump 3) closes at task 3, which ends at 22 ns
    got = bandwidth_scan([0, 6], [JUMP_NO_BARRIER], payload, starts, ends, sizes)
    assert got.tolist() == pytest.approx([400 / 22, 400 / 22, 4.0, 0.0, 10.0, 0.4])
    # without its closing tasks, each payload keeps its own bandwidth
    got = bandwidth_scan([0, 3], [JUMP_WITH_BARRIER], payload[:3], starts[:3], ends[:3], sizes[:3])
    assert got.tolist() == [25.0, 75.0, 4.0]


def test_bandwidth_scan_rejects_bad_groups() -> None:
    with pytest.raises(ValueError, match="offsets"):
        bandwidth_scan([0, 2], [JUMP_WITH_BARRIER], [False], [0], [1], [1])
    with pytest.raises(ValueError, match="jumps"):
        bandwidth_scan([0, 1], [1], [False], [0], [1], [1])
