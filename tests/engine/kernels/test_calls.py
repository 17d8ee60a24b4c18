"""The call-stack replay against torch_npu's step-by-step replay, whole and cut into batches."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels import calls
from profstream.engine.kernels._dispatch import NULL
from tests.engine.kernels.reference import COMPARISONS, Inputs, calls_ref, closed_calls

records = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 4)), max_size=60)


def inputs_of(rows: list[tuple[int, int, int]]) -> Inputs:
    """(thread, key, tag) rows, one per ns."""
    return {
        "thread": [r[0] for r in rows],
        "time": list(range(len(rows))),
        "key": [r[1] for r in rows],
        "tag": [r[2] for r in rows],
    }


@given(records)
def test_replay_matches_the_reference(rows: list[tuple[int, int, int]]) -> None:
    cmp = COMPARISONS["calls"]
    inputs = inputs_of(rows)
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(records, st.integers(0, 60))
def test_open_frames_carried_between_batches(rows: list[tuple[int, int, int]], cut: int) -> None:
    """Two batches, the open frames of the first carried into the second, close what one batch does."""
    inputs = inputs_of(rows)
    threads = calls.Threads(np.zeros(3, np.int64), np.zeros(3, np.int64), np.full(3, -1, np.int64))
    frames = {name: np.empty(0, np.int64) for name in calls.FRAME_COLUMNS}
    got: list[Any] = []
    counts = np.zeros(2, np.int64)
    for part in (slice(0, cut), slice(cut, None)):
        piece = {name: np.asarray(values[part], np.int64) for name, values in inputs.items()}
        n = piece["thread"].size
        piece |= {"pid": np.zeros(n, np.int64), "module": np.full(n, NULL, np.int64)}
        out = calls.replay(piece, threads, frames)
        closed, part_counts = closed_calls(out)
        got += closed
        counts += part_counts
        frames, top = calls.still_open(out.pool, threads.top)
        threads = threads._replace(top=top)
        assert np.all(frames["below"] < np.arange(frames["below"].size))  # a frame sits on an earlier one
    assert (got, counts.tolist()) == calls_ref(inputs)
