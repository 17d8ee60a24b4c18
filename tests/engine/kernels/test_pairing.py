"""Task start/end pairing: msprof's one-shot rules, batch independence, snapshots, the table."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels import pairing
from profstream.engine.kernels._dispatch import NO_SEQ, NULL
from profstream.engine.kernels._table import CHUNK, KeyedState, Table, find, put, remove
from tests.engine.kernels.reference import COMPARISONS, Inputs, pair_rows

PAIRERS = {
    "hwts": (pairing.pair_hwts, pairing.pair_state),
    "acsq": (pairing.pair_acsq, pairing.pair_state),
    "ffts": (pairing.pair_ffts, pairing.FifoState.new),
}


@st.composite
def task_logs(draw: st.DrawFn, key_width: int = 2, time_order: bool = False) -> Inputs:
    """Start/end records on a few keys: lost, duplicated and reordered records, time ties.

    With ``time_order`` the records are put in ``acsq_order`` (what ACSQ/FFTS+ wrappers require).
    """
    n = draw(st.integers(0, 40))
    keys = [
        np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
        for _ in range(key_width)
    ]
    times = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), np.int64)
    is_end = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    payload = [np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.int64)]
    if time_order:
        order = pairing.acsq_order(times, is_end)
        keys, times, is_end, payload = (
            [k[order] for k in keys],
            times[order],
            is_end[order],
            [payload[0][order]],
        )
    return {"keys": keys, "is_end": is_end, "times": times, "payload": payload}


def _slice(inputs: Inputs, lo: int, hi: int) -> Inputs:
    return {
        "keys": [k[lo:hi] for k in inputs["keys"]],
        "is_end": inputs["is_end"][lo:hi],
        "times": inputs["times"][lo:hi],
        "payload": [p[lo:hi] for p in inputs["payload"]],
    }


def run_batches(name: str, inputs: Inputs, bounds: list[int], snapshot_at: int = -1) -> tuple[Any, ...]:
    """Feed ``inputs`` cut at ``bounds``; rebuild the state from its entries after batch ``snapshot_at``."""
    pair, new = PAIRERS[name]
    state = new(len(inputs["keys"]), 1)
    rows = []
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        part = _slice(inputs, lo, hi)
        rows += pair_rows(
            pair(part["keys"], part["is_end"], part["times"], state=state, payload=part["payload"], base=lo)
        )
        if k == snapshot_at and isinstance(state, KeyedState):
            state = KeyedState(Table.from_entries(*state.table.entries()), state.counts.copy())
    return rows, state.counts.tolist(), pair_rows(pairing.open_starts(state))


@st.composite
def cuts(draw: st.DrawFn, n: int) -> list[int]:
    """Batch boundaries, empty batches included."""
    return [0, *sorted(draw(st.lists(st.integers(0, n), max_size=5))), n]


@given(task_logs())
def test_hwts_matches_msprof_rule(inputs: Inputs) -> None:
    """HWTS pairs, lone ends, counters and open starts equal the file-order dict algorithm's."""
    cmp = COMPARISONS["hwts"]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(task_logs(time_order=True))
def test_acsq_matches_msprof_rule(inputs: Inputs) -> None:
    """The streaming ACSQ kernel equals msprof's deque look-ahead algorithm (get_task_time)."""
    cmp = COMPARISONS["acsq"]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(task_logs(key_width=4, time_order=True))
def test_ffts_matches_msprof_rule(inputs: Inputs) -> None:
    """The FFTS+ FIFO kernel equals msprof's get_subtask_time on (stream, task, subtask, thread) keys."""
    cmp = COMPARISONS["ffts"]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@pytest.mark.parametrize("name", list(PAIRERS))
def test_benchmark_inputs_match_reference(name: str) -> None:
    """Each pairing kernel agrees with its oracle on the benchmark's realistic inputs."""
    cmp = COMPARISONS[name]
    inputs = cmp.make(np.random.default_rng(3), 2_000)
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@pytest.mark.parametrize("name", list(PAIRERS))
@given(data=st.data())
def test_batches_equal_one_call(name: str, data: st.DataObject) -> None:
    """Any batch split (with base offsets) gives the same pairs, order, counters and open starts."""
    inputs = data.draw(task_logs(key_width=4 if name == "ffts" else 2, time_order=name != "hwts"))
    n = inputs["times"].size
    one = run_batches(name, inputs, [0, n])
    assert run_batches(name, inputs, data.draw(cuts(n))) == one
    assert [row[3] for row in one[0]] == sorted(row[3] for row in one[0])  # in end-record order


@pytest.mark.parametrize("name", ["hwts", "acsq"])
@given(data=st.data())
def test_state_rebuilt_from_entries_resumes(name: str, data: st.DataObject) -> None:
    """A state serialised as entries and rebuilt mid-stream continues exactly like the live one."""
    inputs = data.draw(task_logs(time_order=name == "acsq"))
    n = inputs["times"].size
    bounds = data.draw(cuts(n))
    snap = data.draw(st.integers(0, len(bounds) - 2))
    assert run_batches(name, inputs, bounds, snapshot_at=snap) == run_batches(name, inputs, [0, n])


def test_many_open_starts_grow_the_table() -> None:
    """Far more open keys than one chunk reserves: growth keeps every start findable."""
    n = 3 * CHUNK
    keys = [np.zeros(2 * n, np.int64), np.concatenate((np.arange(n), np.arange(n)[::-1]))]
    is_end = np.repeat([False, True], n)
    state = pairing.pair_state(2)
    pairs = pairing.pair_hwts(keys, is_end, np.arange(2 * n), state=state)
    assert state.counts.tolist() == [n, 0, 0]
    assert state.table.size == 0
    np.testing.assert_array_equal(pairs.start_seq, np.arange(n)[::-1])
    assert state.table.used.size >= 2 * n  # grew past the first reservation


# --------------------------------------------------------------------------- worked examples


def test_hwts_example() -> None:
    """§2.1: a second start overwrites the first; an end pairs and removes; a lone end keeps start INVALID."""
    keys = [[3, 3, 3, 3, 4], [7, 7, 7, 7, 9]]  # (stream, task)
    state = pairing.pair_state(2, 1)
    pairs = pairing.pair_hwts(
        keys, [0, 0, 1, 1, 1], [100, 110, 150, 160, 170], state=state, payload=[[1, 2, 3, 4, 5]]
    )
    assert pair_rows(pairs) == [
        (110, 150, 1, 2, (3, 7), (2,)),
        (None, 160, None, 3, (3, 7), (0,)),
        (None, 170, None, 4, (4, 9), (0,)),
    ]
    assert state.counts.tolist() == [1, 2, 1]  # paired, ends without start, overwritten starts


def test_acsq_example() -> None:
    """§2.4: an end before the head start is dropped; a start superseded before any end is an orphan."""
    # key (task 5, stream 1): end@5 (mismatched), start@10, start@20 (orphans @10), end@25, start@30 (kept)
    times = [5, 10, 20, 25, 30]
    is_end = [1, 0, 0, 1, 0]
    state = pairing.pair_state(2)
    pairs = pairing.pair_acsq([[5] * 5, [1] * 5], is_end, times, state=state)
    assert pair_rows(pairs) == [(20, 25, 2, 3, (5, 1), ())]
    assert state.counts.tolist() == [1, 1, 1]
    assert pair_rows(pairing.open_starts(state)) == [(30, None, 4, None, (5, 1), ())]


def test_ffts_notify_wait_leftovers() -> None:
    """§2.4 end: FIFO per key; a leftover Notify Wait start becomes a zero-length pair, others are counted."""
    keys = [[1] * 4, [2] * 4, [0, 0, 1, 1], [0] * 4]  # stream, task, subtask, thread
    state = pairing.FifoState.new(4, 1)
    subtask_type = [0, 0, pairing.NOTIFY_WAIT, 0]
    pairs = pairing.pair_ffts(keys, [0, 1, 0, 0], [1, 2, 3, 4], state=state, payload=[subtask_type])
    assert pair_rows(pairs) == [(1, 2, 0, 1, (1, 2, 0, 0), (0,))]
    notify, others = pairing.ffts_leftovers(state, 0)
    assert pair_rows(notify) == [(3, 3, 2, None, (1, 2, 1, 0), (pairing.NOTIFY_WAIT,))]
    assert others == 1


def test_fifo_pairs_oldest_start_first() -> None:
    """Two open starts of one key: the first end takes the oldest (unlike HWTS, which keeps the newest)."""
    state = pairing.FifoState.new(1)
    pairs = pairing.pair_ffts([[0, 0, 0, 0]], [0, 0, 1, 1], [1, 2, 3, 4], state=state)
    assert pairs.start.tolist() == [1, 2]
    assert pairs.end.tolist() == [3, 4]


# --------------------------------------------------------------------------- bad input


def test_out_of_order_acsq_input_is_refused() -> None:
    """ACSQ needs (time, end flag) order: an end before a start at the same time is a ValueError."""
    state = pairing.pair_state(1)
    with pytest.raises(ValueError, match=r"times: expected \(time, end flag\) order"):
        pairing.pair_acsq([[1, 1]], [1, 0], [5, 5], state=state)
    with pytest.raises(ValueError, match="out of order"):
        pairing.pair_ffts([[1, 1, 1, 1]], [0, 0, 0, 0], [3, 2, 2, 2], state=pairing.FifoState.new(1))


def test_wrong_widths_are_refused() -> None:
    """Key and payload widths must match the state; flags must be 0/1."""
    state = pairing.pair_state(2, 1)
    with pytest.raises(ValueError, match="keys: expected 2 columns, got 1"):
        pairing.pair_hwts([[1]], [0], [1], state=state, payload=[[0]])
    with pytest.raises(ValueError, match="payload: expected 1 columns, got 0"):
        pairing.pair_hwts([[1], [2]], [0], [1], state=state)
    with pytest.raises(ValueError, match="is_end: expected 0/1 flags"):
        pairing.pair_hwts([[1], [2]], [2], [1], state=state, payload=[[0]])
    with pytest.raises(ValueError, match=r"keys\[1\]: expected 1 values, got 2"):
        pairing.pair_hwts([[1], [2, 3]], [0], [1], state=state, payload=[[0]])


# --------------------------------------------------------------------------- the table


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=60))
def test_table_behaves_like_a_dict(ops: list[tuple[bool, int]]) -> None:
    """Inserts and backward-shift deletes in a 16-slot table (wrap-around collisions) keep keys findable."""
    table = Table.empty(1, 1)
    model: dict[int, int] = {}
    for insert, key in ops:
        probe = np.array([[key]], np.int64)
        slot, found = find(table.keys, table.used, probe, 0)
        assert found == (key in model)
        if insert and not found and len(model) < 8:
            put(table.keys, table.used, probe, 0, slot)
            table.values[0, slot] = key * 10
            model[key] = key * 10
        elif not insert and found:
            remove(table.keys, table.values, table.used, slot)
            del model[key]
    assert int(table.used.sum()) == len(model)
    for key, value in model.items():
        slot, found = find(table.keys, table.used, np.array([[key]], np.int64), 0)
        assert found
        assert table.values[0, slot] == value


def test_open_starts_of_empty_state() -> None:
    """No open start: empty columns of the right widths."""
    left = pairing.open_starts(pairing.pair_state(2, 3))
    assert left.start.size == 0
    assert left.keys.shape == (2, 0)
    assert left.payload.shape == (3, 0)
    assert NULL != NO_SEQ
