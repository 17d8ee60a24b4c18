"""SettledLaunches against a plain dict of the newest row per (stream, task), across storage blocks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.engine.operators import settled
from profstream.engine.operators.host_join import task_key
from profstream.engine.operators.settled import SettledLaunches
from profstream.engine.runtime import pack_state, unpack_state

DESCRIBED = pa.schema(
    [
        ("key", pa.int64()),
        ("stream_id", pa.int64()),
        ("task_id", pa.int64()),
        ("time_ns", pa.int64()),
        ("op_name", pa.string()),
        ("block_dim", pa.int64()),
        ("master", pa.bool_()),
        ("duration_us", pa.float64()),
    ]
)
WORDS = [None, "MatMul", "Add", "hcom_allReduce_", "a;b,c"]

launch = st.tuples(
    st.integers(0, 3),  # stream
    st.integers(0, 40),  # task
    st.integers(0, 1),  # batch
    st.sampled_from(WORDS),
    st.one_of(st.none(), st.integers(-5, 1 << 40)),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
)


def described(rows: list[tuple[Any, ...]], first_ns: int) -> pa.Table:
    stream = np.array([r[0] for r in rows], np.int64)
    task = np.array([r[1] for r in rows], np.int64)
    batch = np.array([r[2] for r in rows], np.int64)
    columns = [
        pa.array(task_key(stream, task, batch)),
        pa.array(stream),
        pa.array(task),
        pa.array(first_ns + np.arange(len(rows), dtype=np.int64)),
        *(
            pa.array([r[i] for r in rows], f.type)
            for i, f in zip(range(3, 7), list(DESCRIBED)[4:], strict=True)
        ),
    ]
    return pa.Table.from_arrays(columns, schema=DESCRIBED)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 8 slots, so a few dozen pairs span several of them; unused words forgotten past 2."""
    monkeypatch.setattr(settled, "SLOT_BLOCK_BITS", 3)
    monkeypatch.setattr(settled, "SLOT_BLOCK", 8)
    monkeypatch.setattr(settled, "WORDS_KEPT", 2)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(launch, max_size=30), max_size=6),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 45))),
)
def test_keeps_the_newest_row_per_pair_like_a_dict(
    batches: list[list[tuple[Any, ...]]], queries: list[tuple[int, int]]
) -> None:
    store = SettledLaunches(DESCRIBED)
    newest: dict[tuple[int, int], dict[str, Any]] = {}
    time_ns = 0
    for rows in batches:
        added = described(rows, time_ns)
        time_ns += len(rows)
        store.add(added)
        for row in added.to_pylist():  # in time order: a later row replaces an earlier one
            newest[(row["stream_id"], row["task_id"])] = row
    expected = [newest[pair] for pair in sorted(newest)]
    assert store.live().to_pylist() == expected
    assert store.live().schema == DESCRIBED
    assert len(store) == len(newest)

    stream = np.array([q[0] for q in queries], np.int64)
    task = np.array([q[1] for q in queries], np.int64)
    for batch in (0, 1):
        keys = task_key(stream, task, np.full(len(queries), batch))
        slots = store.find(stream, task, keys)
        rows = store.take(slots).cast(DESCRIBED).to_pylist()
        for (s, t), key, slot, row in zip(queries, keys, slots, rows, strict=True):
            kept = newest.get((s, t))
            if kept is None or kept["key"] != key:  # another batch id is not this launch
                assert slot == -1
                assert set(row.values()) == {None}
            else:
                assert row == kept

    again = SettledLaunches(DESCRIBED)  # its rows added to a new store give the same rows back
    again.add(store.live())
    assert again.live().equals(store.live())

    state = pack_state({"settled": store.state()})  # a snapshot restores the same store, byte for byte
    restored = SettledLaunches.restored(DESCRIBED, unpack_state(state)["settled"])
    assert pack_state({"settled": restored.state()}) == state
    assert restored.live().equals(store.live())
    later = described(batches[0] if batches else [], time_ns)
    store.add(later)  # and both go on alike
    restored.add(later)
    assert restored.live().equals(store.live())


def test_values_reads_numeric_columns_of_every_pair_or_of_some_slots() -> None:
    store = SettledLaunches(DESCRIBED)
    rows = [(0, task, 0, "Add", task * 10, True, 0.5) for task in range(20)]  # three blocks of 8
    store.add(described(rows, 0))
    store.add(described([(0, 3, 0, "MatMul", None, False, 1.5)], 100))
    assert store.values("block_dim").tolist() == [t * 10 if t != 3 else 0 for t in range(20)]
    slots = store.find(
        np.array([0, 0]), np.array([19, 3]), task_key(np.array([0, 0]), np.array([19, 3]), [0, 0])
    )
    assert store.values("time_ns", slots).tolist() == [19, 100]
    assert store.take(slots).column("block_dim").to_pylist() == [190, None]
    assert store.take(slots).column("op_name").to_pylist() == ["Add", "MatMul"]


def test_words_no_kept_row_uses_are_forgotten() -> None:
    store = SettledLaunches(DESCRIBED)
    for time_ns, word in enumerate(["Add", "Mul", "Sub", "Div", "Exp", "Log"]):
        store.add(described([(0, 1, 0, word, None, None, None)], time_ns))  # one pair, overwritten
    names = store.take(np.array([0])).column("op_name").chunk(0)
    assert names.to_pylist() == ["Log"]
    assert len(names.dictionary) <= 3  # not all six: the limit (2) doubles from the words in use


def test_columns_are_held_at_the_width_their_values_need() -> None:
    store = SettledLaunches(DESCRIBED)
    store.add(described([(1, task, 0, "Add", 7, True, 0.5) for task in range(10)], 0))
    held = store.state()
    assert held["values"]["block_dim"].dtype == np.int8  # small ids and dims take a byte a row
    assert held["values"]["stream_id"].dtype == np.int8
    assert held["values"]["op_name"].dtype == np.int8  # and so do the codes of a few words
    assert held["valid"] == {}  # no column has held a null yet
    assert held["values"]["key"].dtype == np.int64

    store.add(described([(1, 3, 0, "Add", 1 << 40, None, 0.5), (1, 4, 0, "Add", -300, True, 0.5)], 10))
    held = store.state()
    assert held["values"]["block_dim"].dtype == np.int64  # widened once a value needs it
    assert list(held["valid"]) == ["master"]  # validity only where a null came
    rows = store.live().to_pylist()
    assert [r["block_dim"] for r in rows] == [7, 7, 7, 1 << 40, -300, 7, 7, 7, 7, 7]
    assert [r["master"] for r in rows] == [True, True, True, None, True, True, True, True, True, True]
