"""PythonTracer against a plain reading of torch_npu's replay (``_python_trace_parser.py``)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.codecs.framework import C_CALL, C_RETURN, PY_CALL, PY_RETURN
from profstream.engine.operators.python_tracer import CALLS, OPS, GcRecords, PythonTracer, prelude_length
from profstream.engine.runtime import DONE

NAMES = {1: "a.py(1): f", 2: "b.py(2): g", 3: "Linear######77", 4: "Linear######78", 5: "<built-in len>"}


def reference(
    records: list[tuple[int, int, int, int]], names: dict[int, str], torch_tids: set[int]
) -> list[Any]:
    """torch_npu's algorithm read literally: (ts, tid, key, tag) records -> closed calls, thread by thread
    in first-seen order, each thread's in the order the replay closes them."""
    by_tid: dict[int, list[tuple[int, int, int, int]]] = {}
    for record in records:
        if record[1] in torch_tids:
            by_tid.setdefault(record[1], []).append(record)
    out = []
    for tid, unsorted in by_tid.items():
        rows = sorted(unsorted, key=lambda r: r[0])
        stack: list[list[Any]] = []
        closed = []
        counter: dict[str, int] = {}
        uids: dict[str, int] = {}
        latest = 0
        for index, (ts, _, key, tag) in enumerate(rows):
            name = str(names.get(key, key))
            parent = stack[-1][0] if stack else 0
            if tag == PY_CALL and "######" in name:
                cls, uid = name.split("######")
                if uid not in uids:
                    uids[uid] = counter.get(cls, 0)
                    counter[cls] = uids[uid] + 1
                stack.append([index, parent, ts, f"nn.Module: {cls}_{uids[uid]}", uids[uid]])
            elif tag in (PY_CALL, C_CALL):
                stack.append([index, parent, ts, name, None])
            elif tag in (PY_RETURN, C_RETURN) and stack:
                closed.append((*stack.pop(), ts))
            latest = max(latest, ts)
        while stack:
            closed.append((*stack.pop(), latest))
        ids = {frame[0] for frame in closed}
        for python_id, parent, start, name, module, end in closed:
            out.append((tid, start, end, name, python_id, parent if parent in ids else 0, module))
    return out


def batch(records: list[tuple[int, int, int, int]]) -> pa.RecordBatch:
    ts, tid, key, tag = (list(c) for c in zip(*records, strict=True)) if records else ([], [], [], [])
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(ts, pa.int64()),
            "thread_id": pa.array(tid, pa.uint64()),
            "process_id": pa.array([9] * len(ts), pa.uint64()),
            "key_hash": pa.array(key, pa.uint64()),
            "tag": pa.array(tag, pa.uint8()),
        }
    )


def ops(tids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"tid": pa.array(tids, pa.int64())})


def rows_of(emitted: list[Any]) -> list[Any]:
    out = []
    for _, b in emitted:
        d = b.to_pydict()
        out += list(
            zip(
                d["tid"],
                d["start_ns"],
                d["end_ns"],
                d["name"],
                d["python_id"],
                d["parent_id"],
                d["module_id"],
                strict=True,
            )
        )
    return out


def per_thread(rows: list[Any]) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    return grouped


record = st.tuples(
    st.integers(0, 60), st.sampled_from([7, 8, 9]), st.sampled_from([1, 2, 3, 4, 5, 6]), st.integers(0, 3)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, max_size=60), st.integers(1, 7), st.booleans())
def test_streamed_replay_matches_the_reference(records: list[Any], pieces: int, snapshot: bool) -> None:
    """Records in time order (as the tracer writes them), pushed in pieces with advances between them,
    give each thread's calls of the reference, in its order; thread 9 has no torch op."""
    records = sorted(records, key=lambda r: r[0])
    op = PythonTracer(NAMES, hold_rows=1000)
    op.push(OPS, ops([7, 8]))
    out = []
    bounds = np.linspace(0, len(records), pieces + 1).astype(int)
    for low, high in itertools.pairwise(bounds):
        op.push(CALLS, batch(records[low:high]))
        if snapshot:
            again = PythonTracer(NAMES, hold_rows=1000)
            again.restore(op.snapshot())
            assert again.snapshot() == op.snapshot()
            op = again
        out += op.advance(records[high - 1][0] if high > low else 0)
    out += op.finish()
    assert per_thread(rows_of(out)) == per_thread(reference(records, NAMES, {7, 8}))


@settings(max_examples=100, deadline=None)
@given(st.lists(record, min_size=1, max_size=40), st.integers(0, 5))
def test_start_frames_at_the_end_of_the_file_sort_first(records: list[Any], starts: int) -> None:
    """The calls the tracer appends at stop, timed before everything, are found and replayed first."""
    records = sorted(((t + 100, tid, key, tag) for t, tid, key, tag in records), key=lambda r: r[0])
    prelude = [(10 + i, 7, 1 + i % 2, PY_CALL) for i in range(starts)]
    file = records + prelude
    tail = np.array([r[0] for r in file]), np.array([r[3] for r in file])
    assert prelude_length(*tail, first_time=file[0][0]) == starts
    columns = {
        "time": np.array([r[0] for r in prelude], np.int64),
        "tid": np.array([r[1] for r in prelude], np.int64),
        "pid": np.full(starts, 9, np.int64),
        "key": np.array([r[2] for r in prelude], np.int64),
        "tag": np.array([r[3] for r in prelude], np.int64),
    }
    op = PythonTracer(NAMES, columns, len(records))
    op.push(OPS, ops([7, 8, 9]))
    op.push(CALLS, batch(file))
    out = op.advance(DONE) + op.finish()
    assert per_thread(rows_of(out)) == per_thread(reference(file, NAMES, {7, 8, 9}))


def test_a_thread_waits_for_its_first_op_and_one_without_ops_is_dropped() -> None:
    op = PythonTracer(NAMES, hold_rows=2)
    op.push(
        CALLS, batch([(1, 7, 1, PY_CALL), (2, 7, 1, PY_RETURN), (3, 9, 2, PY_CALL), (4, 9, 2, PY_RETURN)])
    )
    assert op.advance(10) == []
    assert op.output_watermark(10) == 1  # held calls promise nothing later than their start
    op.push(OPS, ops([7]))
    assert [r[3] for r in rows_of(op.advance(10))] == ["a.py(1): f"]
    assert op.finish() == []


def test_unnamed_keys_unmatched_returns_and_open_frames() -> None:
    op = PythonTracer({})
    op.push(OPS, ops([7]))
    op.push(
        CALLS,
        batch([(1, 7, 42, PY_RETURN), (2, 7, 2**63 + 5, C_CALL), (3, 7, 1, PY_CALL), (9, 7, 1, PY_RETURN)]),
    )
    rows = rows_of(op.finish())
    assert rows == [(7, 3, 9, "1", 2, 1, None), (7, 2, 9, str(2**63 + 5), 1, 0, None)]


def test_gc_records_keep_the_pid_as_tid() -> None:
    op = GcRecords()
    op.push(
        "torch_gc_record",
        pa.RecordBatch.from_pydict(
            {"process_id": pa.array([5], pa.uint64()), "start_ns": [10], "end_ns": [30]}
        ),
    )
    [(name, rows)] = op.finish()
    assert name == "gc" and rows.to_pylist() == [{"pid": 5, "tid": 5, "start_ns": 10, "end_ns": 30}]
