"""Memory matching: the adapter's group walk and msprof's GE pairing, batch independence, examples."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.kernels import memory
from tests.engine.kernels.reference import COMPARISONS, Inputs, ge_rows, pta_rows

M, F, B = memory.MALLOC, memory.FREE, memory.BLOCK_FREE


@st.composite
def pta_records(draw: st.DrawFn) -> Inputs:
    """MALLOC/FREE/BLOCK_FREE in any order on a few (process, ptr) keys: lone frees, never-freed mallocs."""
    n = draw(st.integers(0, 40))
    ints = lambda hi: np.array(draw(st.lists(st.integers(0, hi), min_size=n, max_size=n)), np.int64)  # noqa: E731
    return {
        "keys": [ints(1), ints(3)],
        "kinds": ints(2),
        "times": np.sort(ints(25)),
        "payload": [ints(9), ints(9)],
    }


@st.composite
def ge_records(draw: st.DrawFn) -> Inputs:
    """Signed sizes (zero included) on a few (operator, addr, device type) keys."""
    n = draw(st.integers(0, 40))
    ints = lambda lo, hi: np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), np.int64)  # noqa: E731
    return {
        "keys": [ints(0, 1), ints(0, 2), ints(0, 1)],
        "sizes": ints(-3, 3),
        "times": np.sort(ints(0, 25)),
        "payload": [ints(0, 9)],
    }


@st.composite
def cuts(draw: st.DrawFn, n: int) -> list[int]:
    """Batch boundaries, empty batches included."""
    return [0, *sorted(draw(st.lists(st.integers(0, n), max_size=5)))]


def run_batches(name: str, inputs: Inputs, bounds: list[int]) -> tuple[list[Any], list[int]]:
    """Feed ``inputs`` in batches ending at ``bounds`` plus a final one."""
    n = inputs["times"].size
    width = len(inputs["payload"])
    if name == "pta":
        state, match, values, render = memory.pta_state(width), memory.match_pta, "kinds", pta_rows
    else:
        state, match, values, render = memory.ge_state(width), memory.match_ge, "sizes", ge_rows
    rows: list[Any] = []
    for lo, hi in itertools.pairwise([*bounds, n]):
        cols = {k: [c[lo:hi] for c in inputs[k]] for k in ("keys", "payload")}
        out = match(
            cols["keys"], inputs[values][lo:hi], inputs["times"][lo:hi],
            state=state, payload=cols["payload"], base=lo, final=hi == n and lo == bounds[-1],
        )  # fmt: skip
        rows += render(out)
    return rows, state.counts.tolist()


@given(pta_records())
def test_pta_matches_adapter(inputs: Inputs) -> None:
    """Rows and counters equal torch_npu's _get_valid_record_entry walk and rendering."""
    cmp = COMPARISONS["pta"]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(ge_records())
def test_ge_matches_msprof(inputs: Inputs) -> None:
    """Rows and counters equal msprof's dict pairing per (operator, addr, device type)."""
    cmp = COMPARISONS["ge"]
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@pytest.mark.parametrize("name", ["pta", "ge"])
def test_benchmark_inputs_match_reference(name: str) -> None:
    """Both kernels agree with their oracles on the benchmark's realistic inputs."""
    cmp = COMPARISONS[name]
    inputs = cmp.make(np.random.default_rng(5), 3_000)
    assert cmp.normalise(cmp.run(inputs)) == cmp.reference(inputs)


@given(pta_records(), st.data())
def test_pta_batches_equal_one_call(inputs: Inputs, data: st.DataObject) -> None:
    """Any batch split, final on the last, emits the rows and counters of one call, in the same order."""
    n = inputs["times"].size
    assert run_batches("pta", inputs, data.draw(cuts(n))) == run_batches("pta", inputs, [0])


@given(ge_records(), st.data())
def test_ge_batches_equal_one_call(inputs: Inputs, data: st.DataObject) -> None:
    """Any batch split, final on the last, emits the rows and counters of one call, in the same order."""
    n = inputs["times"].size
    assert run_batches("ge", inputs, data.draw(cuts(n))) == run_batches("ge", inputs, [0])


# --------------------------------------------------------------------------- worked examples


def test_block_free_before_free() -> None:
    """§1.3: BLOCK_FREE may precede FREE; both fill their columns and release totals come from FREE."""
    state = memory.pta_state(1)
    out = memory.match_pta(
        [[1, 1, 1], [64, 64, 64]], [M, B, F], [100, 105, 107], state=state, payload=[[11, 22, 33]]
    )
    assert pta_rows(out) == [(100, 107, 105, 7, 5, 0, 2, 1, (1, 64), (11,), (33,))]
    assert state.counts.tolist() == [1, 0, 0]
    assert state.table.size == 0


def test_adapter_group_rules() -> None:
    """§4b: a repeated MALLOC closes a 1-record group; a repeated FREE is dropped; a lone FREE is dropped.

    ptr 8: M@1, M@2 (closes [M@1]), F@3 (joins M@2), F@4 (closes [M@2, F@3], then dropped).
    ptr 9: F@5 with no MALLOC (dropped), M@6 never freed.
    """
    keys = [[1] * 6, [8, 8, 8, 8, 9, 9]]
    state = memory.pta_state(1)
    out = memory.match_pta(
        keys, [M, M, F, F, F, M], [1, 2, 3, 4, 5, 6], state=state, payload=[[10, 20, 30, 40, 50, 60]]
    )
    assert pta_rows(out) == [
        (1, None, None, None, None, 0, None, None, (1, 8), (10,), (0,)),
        (2, 3, None, 1, None, 1, 2, None, (1, 8), (20,), (30,)),
    ]
    left = memory.match_pta([[], []], [], [], state=state, payload=[[]], base=6, final=True)
    assert pta_rows(left) == [(6, None, None, None, None, 5, None, None, (1, 9), (60,), (0,))]
    # rows, dropped (F@4, F@5), incomplete (+2 +1 +2)
    assert state.counts.tolist() == [3, 2, 5]


def test_two_record_block_free_group_takes_release_totals_from_it() -> None:
    """[MALLOC, BLOCK_FREE]: Active columns filled, Release empty, release totals from the BLOCK_FREE."""
    state = memory.pta_state(1)
    out = memory.match_pta([[2, 2], [7, 7]], [M, B], [10, 13], state=state, payload=[[1, 2]], final=True)
    assert pta_rows(out) == [(10, None, 13, None, 3, 0, None, 1, (2, 7), (1,), (2,))]
    assert state.counts.tolist() == [1, 0, 1]


def test_ge_example() -> None:
    """§2.9: alloc + release pair; a newer alloc replaces a pending one; a lone release keeps its size < 0."""
    keys = [[5] * 5, [0xA0] * 4 + [0xB0], [0] * 5]
    state = memory.ge_state()
    out = memory.match_ge(keys, [512, 1024, -1024, 0, -256], [1, 2, 4, 5, 6], state=state, final=True)
    assert ge_rows(out) == [
        (2, 4, 2, 1024, 1, 2, (5, 0xA0, 0), (), ()),
        (None, 6, None, -256, None, 4, (5, 0xB0, 0), (), ()),
    ]
    # paired, no allocation, replaced, zero size, never freed
    assert state.counts.tolist() == [1, 1, 1, 1, 0]


def test_ge_never_freed_rows_come_last_in_allocation_order() -> None:
    """Allocations still pending at the end come out with empty release columns, oldest first."""
    state = memory.ge_state()
    out = memory.match_ge([[1, 2], [0, 0], [0, 0]], [300, 200], [5, 3], state=state, final=True)
    assert ge_rows(out) == [
        (5, None, None, 300, 0, None, (1, 0, 0), (), ()),
        (3, None, None, 200, 1, None, (2, 0, 0), (), ()),
    ]
    assert state.counts.tolist()[memory.GE_NEVER_FREED] == 2


def test_uint64_ids_keep_their_bits() -> None:
    """uint64 pointers and hashes above 2**63 are keys and payload as they are (int64 bit patterns)."""
    big = np.array([2**64 - 16, 2**64 - 16], np.uint64)
    state = memory.pta_state(1)
    out = memory.match_pta(
        [np.ones(2, np.int64), big], [M, F], [1, 2], state=state, payload=[big], final=True
    )
    assert out.keys[1].view(np.uint64).tolist() == [2**64 - 16]
    assert out.alloc_payload[0].view(np.uint64).tolist() == [2**64 - 16]
    state = memory.ge_state()
    out = memory.match_ge([big, big, np.zeros(2, np.int64)], [8, -8], [1, 2], state=state)
    assert out.keys.view(np.uint64)[:, 0].tolist() == [2**64 - 16, 2**64 - 16, 0]
    assert state.counts.tolist()[memory.GE_PAIRED] == 1


def _latest(devices: int) -> np.ndarray:
    latest = np.full((2, 5, devices), memory.NULL, np.int64)
    latest[:, memory.L_FOUND] = 0
    return latest


def test_memory_records_companions() -> None:
    """Each PTA and GE record is followed by its PTA+GE row: its totals plus the other's latest."""
    n = memory.NULL
    component = [memory.PTA, memory.GE, memory.APP, memory.PTA, memory.WORKSPACE, memory.GE]
    times = [5, 1, 1, 7, 6, 9]
    totals = [[10, 100, n, 20, 30, 200], [11, 101, 50, 21, 31, 201], [3, n, n, 4, 5, n], [0, n, n, 8, 9, n]]
    latest = _latest(1)
    out = memory.memory_records([2, 1, 0, 4, 3, 5], component, [0] * 6, times, totals, latest)
    assert out.T.tolist() == [
        [memory.APP, 0, 1, n, 50, n, n],
        [memory.GE, 0, 1, 100, 101, n, n],
        [memory.PTA_GE, 0, 1, 100, 101, 0, n],  # no PTA yet; a GE record's active total counts as 0
        [memory.PTA, 0, 5, 10, 11, 3, 0],
        [memory.PTA_GE, 0, 5, 110, 112, 3, n],  # stream 0: the GE record's (none)
        [memory.WORKSPACE, 0, 6, 30, 31, 5, 9],  # no companion, not the latest PTA
        [memory.PTA, 0, 7, 20, 21, 4, 8],
        [memory.PTA_GE, 0, 7, 120, 122, 4, 8],
        [memory.GE, 0, 9, 200, 201, n, n],
        [memory.PTA_GE, 0, 9, 220, 222, 4, 8],  # the latest PTA's active total and stream
    ]
    assert latest[:, :, 0].tolist() == [[1, 20, 21, 4, 8], [1, 200, 201, n, n]]


def test_memory_records_carry_latest_across_batches_per_device() -> None:
    """The latest totals of a device carry into the next batch; another device's do not mix in."""
    n = memory.NULL
    latest = _latest(2)
    memory.memory_records([0], [memory.GE], [1], [1], [[7], [8], [n], [n]], latest)
    out = memory.memory_records(
        [0, 1], [memory.PTA] * 2, [0, 1], [2, 3], [[1, 1], [2, 2], [3, 3], [4, 4]], latest
    )
    assert out[memory.R_ALLOCATED].tolist() == [1, 1, 1, 8]
    assert out[memory.R_RESERVED].tolist() == [2, 2, 2, 10]


# --------------------------------------------------------------------------- bad input


def test_bad_pta_input_is_refused() -> None:
    """Unknown data types, time going back and a wrong payload width are ValueErrors naming the value."""
    state = memory.pta_state(1)
    with pytest.raises(ValueError, match=r"kinds: expected 0 .* got 5 at index 1"):
        memory.match_pta([[1, 1], [2, 2]], [M, 5], [1, 2], state=state, payload=[[0, 0]])
    with pytest.raises(ValueError, match="times: expected ascending times, got 1 after 2 at index 1"):
        memory.match_pta([[1, 1], [2, 2]], [M, F], [2, 1], state=state, payload=[[0, 0]])
    with pytest.raises(ValueError, match="payload: expected 1 columns"):
        memory.match_pta([[1], [2]], [M], [1], state=state)


def test_bad_ge_input_is_refused() -> None:
    """uint64 values beyond int64 and mismatched column lengths are ValueErrors."""
    state = memory.ge_state()
    with pytest.raises(ValueError, match="does not fit int64"):
        memory.match_ge([[1], [2], [3]], np.array([2**63], np.uint64), [1], state=state)
    with pytest.raises(ValueError, match="sizes: expected 2 values, got 1"):
        memory.match_ge([[1, 1], [2, 2], [3, 3]], [5], [1, 2], state=state)


def test_bad_memory_records_input_is_refused() -> None:
    """Orders and device slots out of range and a badly shaped ``latest`` are ValueErrors."""
    totals = [[0], [0], [0], [0]]
    with pytest.raises(ValueError, match="order: expected record indices below 1"):
        memory.memory_records([1], [memory.PTA], [0], [1], totals, _latest(1))
    with pytest.raises(ValueError, match="device: expected slots below 1"):
        memory.memory_records([0], [memory.PTA], [1], [1], totals, _latest(1))
    with pytest.raises(ValueError, match="latest: expected a"):
        memory.memory_records([0], [memory.PTA], [0], [1], totals, np.zeros((2, 4, 1), np.int64))
