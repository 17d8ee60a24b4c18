"""Steps and FrameworkSteps: hand-built tag sequences, msprof's batch algorithm as an oracle, snapshots.

The oracle (:func:`msprof_rows`) is the one-shot algorithm of msprof's step-trace tables, written the
obvious way: sort, reorder with a queue that is only released by a tag 1 or the end of the data,
run the state machine with one FP/BP/all-reduce collector per index (cleared when the index starts),
drop the last open index, then compute Data Aug Bound over all rows sorted by end
(msprof_outputs.md §4b). The operator releases reorder entries early and streams; the property test
checks it gives the same rows for any tag sequence and any batch / watermark split.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream.engine.operators.steps import FRAMEWORK_STEPS, FrameworkSteps, Steps
from profstream.engine.runtime import DONE, START, Operator, Pipeline, at
from profstream.engine.schema import TABLES, conform
from tests.engine.operators.truth_inputs import (
    comm_ops,
    launched_tasks,
    profiler_steps,
    simulated,
    ts_track_feed,
)

Tag = tuple[int, int, int, int, int]  # time, tag id, model id, stream id, index id

STEPS = at("steps", 0)
TS = at("ts_track", 0)
#: connection ids of hand-built tasks: one per task across batches (one id is one launching API)
_CONNECTIONS = itertools.count()


def tag_batch(records: Sequence[Tag]) -> pa.RecordBatch:
    """ts_track rows of tag 10 (plus one flip record the operator must skip)."""
    time, tag_id, model, stream, index = (
        (list(c) for c in zip(*records, strict=True)) if records else ([],) * 5
    )
    n = len(time)
    return pa.record_batch(
        {
            "tag": pa.array([10] * n + [14], pa.uint8()),
            "tag_id": pa.array([*tag_id, None], pa.uint16()),
            "model_id": pa.array([*model, None], pa.uint64()),
            "index_id": pa.array([*index, None], pa.uint64()),
            "stream_id": pa.array([*stream, 3], pa.uint16()),
            "time_ns": pa.array([*time, 0], pa.int64()),
        }
    )


def legacy_batch(records: Sequence[tuple[int, int, int]]) -> pa.RecordBatch:
    time, tag_id, stream = zip(*records, strict=True)
    return pa.record_batch(
        {
            "tag_id": pa.array(tag_id, pa.uint64()),
            "task_id": pa.array([0] * len(time), pa.uint16()),
            "stream_id": pa.array(stream, pa.uint16()),
            "time_ns": pa.array(time, pa.int64()),
        }
    )


def drive(op: Operator, pushes: Iterable[tuple[str, pa.RecordBatch, int]]) -> list[dict[str, Any]]:
    """Push each batch, advance to its watermark, finish; every output row of ``op.outputs[0]``."""
    rows: list[dict[str, Any]] = []
    for stream, batch, watermark in pushes:
        op.push(stream, batch)
        rows += _rows(op.advance(watermark))
    return rows + _rows(op.finish())


def _rows(emits: list[tuple[str, pa.RecordBatch]]) -> list[dict[str, Any]]:
    out = []
    for _, batch in emits:
        assert batch.schema.equals(TABLES["steps"])
        out += batch.to_pylist()
    return out


def model_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("model_id", "iteration_id", "start_ns", "end_ns", "fp_ns", "bp_ns", "data_aug_ns")
    return sorted(tuple(r[k] for k in keys) for r in rows if r["kind"] == "model")


def run_tags(records: Sequence[Tag], **kwargs: Any) -> list[dict[str, Any]]:
    return drive(Steps(0, **kwargs), [(TS, tag_batch(records), DONE)])


def m(*pairs: tuple[int, int], model: int = 1, stream: int = 2) -> list[Tag]:
    """Tags (time, tag id) of one model on one stream, index id 0."""
    return [(t, tag, model, stream, 0) for t, tag in pairs]


# --------------------------------------------------------------------------- hand-built sequences


def test_loop_sink_iterations_end_at_tag_4_and_the_last_open_one_is_dropped() -> None:
    with capture_logs() as logs:
        rows = run_tags(m((10, 0), (20, 2), (50, 3), (100, 4), (120, 2), (150, 3), (200, 4), (210, 2)))
    assert model_rows(rows) == [
        (1, 1, 10, 100, 20, 50, None),  # nothing ended before the first FP
        (1, 2, 100, 200, 120, 150, 20),  # FP 120 - end 100 of iteration 1
    ]
    assert {"reason": "iteration still open at the end", "count": 1} in [
        {k: e.get(k) for k in ("reason", "count")} for e in logs
    ]


def test_model_end_after_iteration_end_is_ignored_and_model_start_reopens() -> None:
    # the simulator's shape: 0 FP BP 4 1 per step; the 4 opens an iteration the next 0 re-opens
    tags = m((10, 0), (20, 2), (40, 3), (50, 4), (55, 1), (60, 0), (70, 2), (90, 3), (100, 4), (105, 1))
    assert model_rows(run_tags(tags)) == [
        (1, 1, 10, 50, 20, 40, None),
        (1, 2, 60, 100, 70, 90, 20),  # re-opened at the tag 0 at 60, not at the tag 4 at 50
    ]


def test_model_end_closes_an_iteration_without_iteration_end() -> None:
    tags = m((10, 0), (20, 2), (40, 3), (50, 1), (60, 2), (70, 0), (80, 1))
    # the FP at 60 falls between iterations: collected for index 2 and cleared when 2 starts at 70
    assert model_rows(run_tags(tags)) == [(1, 1, 10, 50, 20, 40, None), (1, 2, 70, 80, None, None, None)]


def test_missing_fp_and_bp_are_null() -> None:
    rows = run_tags(m((10, 0), (50, 4), (60, 2), (90, 4)))
    assert model_rows(rows) == [(1, 1, 10, 50, None, None, None), (1, 2, 50, 90, 60, None, 10)]


def test_reduce_pairs_are_paired_per_stream_in_first_seen_stream_order() -> None:
    tags = [
        *m((10, 0), (20, 2)),
        (30, 10000, 1, 6, 0),
        (31, 10000, 1, 7, 0),  # stream 7 opens while stream 6 is open
        (40, 10001, 1, 6, 0),
        (45, 10002, 1, 6, 0),
        (50, 10001, 1, 7, 0),
        (60, 10003, 1, 6, 0),
        (65, 10005, 1, 8, 0),  # an end without a start on stream 8: counted, no pair
        (66, 10004, 1, 6, 0),  # a start whose end never comes
        *m((70, 3), (80, 4)),
    ]
    with capture_logs() as logs:
        rows = run_tags(tags)
    (row,) = [r for r in rows if r["kind"] == "model"]
    assert row["reduce_start_ns"] == [30, 45, 66, 31]
    assert row["reduce_end_ns"] == [40, 60, None, 50]
    assert any(e.get("reason") == "all-reduce end without a start" for e in logs)


def test_reduce_tags_outside_every_iteration_are_lost_as_msprof_loses_them() -> None:
    tags = [*m((10, 0), (20, 4)), (25, 10000, 1, 6, 0), (26, 10001, 1, 6, 0), *m((30, 4))]
    with capture_logs() as logs:
        rows = run_tags(tags)
    assert [r["reduce_start_ns"] for r in rows] == [[], []]
    assert [e["count"] for e in logs if e.get("reason") == "all-reduce tag outside every iteration"] == [2]


def test_data_aug_bound_uses_the_latest_end_of_any_model_and_of_step_rows() -> None:
    tags = [
        *m((10, 0), (15, 2), (50, 4), model=1),
        (55, 60000, 9, 2, 1),
        (58, 60001, 9, 2, 1),  # a step row ending at 58
        *m((40, 0), (60, 2), (90, 4), model=2),  # FP 60: latest end before it is 58 (the step row)
        *m((100, 2), (130, 4), model=1),  # FP 100: latest end before it is 90 (model 2)
    ]
    rows = run_tags(tags)
    assert model_rows(rows) == [
        (1, 1, 10, 50, 15, None, None),
        (1, 2, 50, 130, 100, None, 10),
        (2, 1, 40, 90, 60, None, 2),
    ]
    (step,) = [r for r in rows if r["kind"] == "step"]
    assert (step["model_id"], step["iteration_id"], step["start_ns"], step["end_ns"]) == (9, 1, 55, 58)
    assert step["fp_ns"] is None and step["data_aug_ns"] is None


def test_step_tags_pair_by_index_id() -> None:
    tags = [
        (5, 60000, 1, 2, 1),
        (7, 60000, 1, 2, 2),
        (300, 60001, 1, 2, 1),
        (400, 60001, 1, 2, 2),
        (500, 60001, 1, 2, 3),  # no start
        (600, 60000, 1, 2, 4),  # no end
    ]
    with capture_logs() as logs:
        rows = run_tags(tags)
    assert [(r["kind"], r["iteration_id"], r["start_ns"], r["end_ns"]) for r in rows] == [
        ("step", 1, 5, 300),
        ("step", 2, 7, 400),
    ]
    reasons = {e.get("reason") for e in logs}
    assert {"step end without a step start", "step start without a step end"} <= reasons


def test_pipelined_iterations_are_regrouped_before_the_state_machine() -> None:
    # two iterations in flight: A = 0@10 2@20 3@40 4@60, B = 0@30 2@50 3@70 4@80, then model end
    tags = m((10, 0), (20, 2), (30, 0), (40, 3), (50, 2), (60, 4), (70, 3), (80, 4), (90, 1))
    assert model_rows(run_tags(tags)) == model_rows(msprof_rows(tags))
    assert model_rows(run_tags(tags)) == [(1, 1, 10, 60, 20, 40, None), (1, 2, 30, 80, 50, 70, None)]


def test_an_iteration_with_start_equal_to_end_is_dropped_alone() -> None:
    with capture_logs() as logs:
        rows = run_tags(m((10, 0), (10, 4), (20, 2), (30, 4)))
    assert model_rows(rows) == [(1, 2, 10, 30, 20, None, None)]
    assert any(e.get("reason") == "iteration with start == end" for e in logs)


def test_a_record_repeated_exactly_counts_once() -> None:
    # msprof reads the step-trace table with select DISTINCT: the repeated tag 4 at 200 is one record,
    # so iteration 2 is 200..300 (not a dropped 200..200 that would make the next one iteration 3)
    tags = m((100, 0), (150, 2), (200, 4), (200, 4), (250, 2), (300, 4), (350, 2), (400, 4))
    with capture_logs() as logs:
        rows = run_tags(tags)
    assert model_rows(rows) == [
        (1, 1, 100, 200, 150, None, None),
        (1, 2, 200, 300, 250, None, 50),
        (1, 3, 300, 400, 350, None, 50),
    ]
    assert not any(e.get("reason") == "iteration with start == end" for e in logs)
    # the same tag on another stream is another record
    two = [*m((100, 0), (150, 10000), (200, 4)), (150, 10000, 1, 5, 0), *m((160, 10001), (300, 4))]
    (first, _) = sorted((r for r in run_tags(two) if r["kind"] == "model"), key=lambda r: r["end_ns"])
    assert sorted(first["reduce_start_ns"]) == [150, 150]


def test_rows_are_emitted_when_they_close_and_data_aug_waits_for_earlier_ends() -> None:
    op = Steps(0)
    op.push(TS, tag_batch(m((10, 0), (20, 2), (50, 4))))
    first = _rows(op.advance(60))
    assert [(r["iteration_id"], r["end_ns"]) for r in first] == [(1, 50)]
    op.push(TS, tag_batch(m((70, 2), (100, 4))))
    assert _rows(op.advance(80)) == []  # tag 4 at 100 not yet below the watermark
    (second,) = _rows(op.advance(101))
    assert (second["iteration_id"], second["data_aug_ns"]) == (2, 20)


def test_records_out_of_order_within_the_watermark_are_sorted() -> None:
    tags = m((10, 0), (20, 2), (40, 3), (50, 4), (60, 2), (80, 3), (100, 4))
    shuffled = [tags[i] for i in (2, 0, 1, 4, 3, 6, 5)]
    pushes = [(TS, tag_batch(shuffled[:3]), 45), (TS, tag_batch(shuffled[3:]), DONE)]
    assert model_rows(drive(Steps(0), pushes)) == model_rows(run_tags(tags))


def test_legacy_training_trace_follows_mindinsight() -> None:
    records = [
        (0, 300, 1),  # step tag (job id)
        (10, 1, 1),  # FP
        (20, 5, 3),
        (30, 6, 3),  # all-reduce points on stream 3: one pair
        (35, 7, 4),  # stream 4 has an odd count: skipped
        (40, 2, 1),  # BP
        (50, 255, 1),  # iteration end
        (55, 300, 1),
        (60, 1, 1),
        (80, 2, 1),
        (100, 255, 1),
        (105, 300, 1),
        (110, 255, 1),  # no FP/BP: no row, but the iteration number advances
    ]
    op = Steps(0, sources=("training_trace",))
    with capture_logs() as logs:
        rows = drive(op, [(at("training_trace", 0), legacy_batch(records), DONE)])
    got = [
        (r["model_id"], r["iteration_id"], r["start_ns"], r["end_ns"], r["fp_ns"], r["bp_ns"]) for r in rows
    ]
    assert got == [(None, 1, 10, 50, 10, 40), (None, 2, 50, 100, 60, 80)]
    assert [(r["reduce_start_ns"], r["reduce_end_ns"], r["data_aug_ns"]) for r in rows] == [
        ([20], [30], None),
        ([], [], 10),
    ]
    reasons = {e.get("reason") for e in logs}
    assert "legacy all-reduce stream with an odd number of points" in reasons
    assert "legacy iteration without FP or BP" in reasons


def test_unknown_source_is_refused() -> None:
    with pytest.raises(ValueError, match="sources"):
        Steps(0, sources=("hwts",))


# --------------------------------------------------------------------------- the oracle


def msprof_rows(records: Sequence[Tag], step_records: Sequence[Tag] = ()) -> list[dict[str, Any]]:
    """msprof's one-shot step-trace tables for ``records`` (tags 0..4 and all-reduce) of any models."""
    rows: list[dict[str, Any]] = []
    records = list(dict.fromkeys(records))  # select DISTINCT
    for model in sorted({r[2] for r in records}):
        mine = sorted((r for r in records if r[2] == model), key=lambda r: r[0])
        rows += _machine(model, _reorder(mine))
    for index in sorted({r[4] for r in step_records}):
        pair = sorted((r for r in step_records if r[4] == index), key=lambda r: r[1])
        rows.append({"kind": "step", "model_id": pair[0][2], "iteration_id": index, "start_ns": pair[0][0]})
        rows[-1] |= {"end_ns": pair[1][0], "fp_ns": None, "bp_ns": None, "data_aug_ns": None}
    by_end = sorted(rows, key=lambda r: r["end_ns"])
    for i, row in enumerate(by_end):
        if row["fp_ns"] is None:
            continue
        j = i - 1
        while j >= 0 and not row["fp_ns"] > by_end[j]["end_ns"]:
            j -= 1
        row["data_aug_ns"] = row["fp_ns"] - by_end[j]["end_ns"] if j >= 0 else None
    return rows


def _reorder(records: list[Tag]) -> list[Tag]:
    out: list[Tag] = []
    queue: list[tuple[list[int], list[Tag]]] = []
    for record in records:
        tag = record[1]
        if tag == 0:
            queue.append(([tag], [record]))
        elif tag == 1:
            heads = 0
            while queue:
                if queue[0][0][0] == 0:
                    heads += 1
                    if heads == 2:
                        break
                out += queue.pop(0)[1]
            out.append(record)
        elif tag >= 10000:
            for tags, recs in queue:
                if tags[-1] != 4:
                    recs.append(record)
                    break
        else:
            for tags, recs in queue:
                if tags[-1] < tag:
                    tags.append(tag)
                    recs.append(record)
                    break
            else:
                queue.append(([tag], [record]))
    for _, recs in queue:
        out += recs
    return out


def _machine(model: int, records: list[Tag]) -> list[dict[str, Any]]:
    state, index = "model end", 1
    bounds: dict[int, dict[str, int]] = {}
    collected: dict[int, dict[str, Any]] = {}

    def fresh(i: int, time: int) -> None:
        bounds[i] = {"start": time}
        collected[i] = {"fp": None, "bp": None, "reduce": {}}

    for time, tag, _, stream, _ in records:
        if tag == 0 and state in ("model end", "iter end"):
            fresh(index, time)
            state = "model start"
        elif tag == 1 and state == "model start":
            bounds[index]["end"] = time
            index, state = index + 1, "model end"
        elif tag == 4 and state in ("model start", "iter end"):
            bounds[index]["end"] = time
            index, state = index + 1, "iter end"
            fresh(index, time)
        got = collected.setdefault(index, {"fp": None, "bp": None, "reduce": {}})
        if tag == 2:
            got["fp"] = time
        elif tag == 3:
            got["bp"] = time
        elif tag >= 10000:
            pairs = got["reduce"].setdefault(stream, [])
            if tag % 2 == 0:
                pairs.append([time, None])
            elif pairs:
                pairs[-1][1] = time
    bounds.pop(index, None)  # get_data drops the index still being collected
    rows = []
    for i, b in sorted(bounds.items()):
        pairs = [p for ps in collected[i]["reduce"].values() for p in ps]
        rows.append(
            {
                "kind": "model",
                "model_id": model,
                "iteration_id": i,
                "start_ns": b["start"],
                "end_ns": b["end"],
                "fp_ns": collected[i]["fp"],
                "bp_ns": collected[i]["bp"],
                "data_aug_ns": None,
                "reduce_start_ns": [p[0] for p in pairs],
                "reduce_end_ns": [p[1] for p in pairs],
            }
        )
    return rows


TAGS = [0, 1, 2, 3, 4, 10000, 10001, 10002, 10003]


@st.composite
def tag_sequences(draw: st.DrawFn) -> tuple[list[Tag], list[Tag], list[int]]:
    """Tags of two models with distinct times (a few repeated exactly), step tags, and cut points."""
    n = draw(st.integers(0, 40))
    times = np.cumsum(draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))).tolist()
    records = [
        (t, draw(st.sampled_from(TAGS)), draw(st.sampled_from([1, 2])), draw(st.sampled_from([5, 6])), 0)
        for t in times
    ]
    records += [records[i] for i in draw(st.lists(st.integers(0, n - 1), max_size=3))] if n else []
    steps: list[Tag] = []
    for index in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 200)) * 2 + 1  # odd times: never equal to a tag time
        steps += [
            (start, 60000, 7, 2, index + 1),
            (start + draw(st.integers(1, 50)) * 2, 60001, 7, 2, index + 1),
        ]
    cuts = sorted(draw(st.lists(st.integers(0, len(records) + len(steps)), max_size=4)))
    return records, steps, cuts


def _full(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("kind", "model_id", "iteration_id", "start_ns", "end_ns", "fp_ns", "bp_ns", "data_aug_ns")
    extra = ("reduce_start_ns", "reduce_end_ns")
    return sorted(tuple(r.get(k) for k in keys) + tuple(tuple(r.get(k) or ()) for k in extra) for r in rows)


@settings(max_examples=300, deadline=None)
@given(tag_sequences())
def test_streaming_rows_equal_msprof_batch_algorithm(case: tuple[list[Tag], list[Tag], list[int]]) -> None:
    records, steps, cuts = case
    expected = msprof_rows(records, steps)
    # step rows carry no reduce lists in the oracle: give them the operator's empty lists
    for row in expected:
        row.setdefault("reduce_start_ns", [])
        row.setdefault("reduce_end_ns", [])
    ordered = sorted(records + steps, key=lambda r: r[0])
    pushes = []
    for lo, hi in itertools.pairwise([0, *cuts, len(ordered)]):
        part = ordered[lo:hi]
        mark = ordered[hi][0] if hi < len(ordered) else DONE
        pushes.append((TS, tag_batch(part), mark))
    got = drive(Steps(0, max_queue=1000), pushes)
    assert _full(got) == _full(expected)


# --------------------------------------------------------------------------- snapshots


def _split_run(op_factory: Any, pushes: list[tuple[str, pa.RecordBatch, int]], cut: int) -> list[Any]:
    """Rows of an uninterrupted run and of a run snapshotted after ``cut`` pushes and restored."""
    whole = drive(op_factory(), pushes)
    first = op_factory()
    head: list[dict[str, Any]] = []
    for stream, batch, mark in pushes[:cut]:
        first.push(stream, batch)
        head += _rows_any(first.advance(mark))
    blob = first.snapshot()
    second = op_factory()
    second.restore(blob)
    assert second.snapshot() == blob
    tail = drive(second, pushes[cut:])
    assert head + tail == whole
    return whole


def _rows_any(emits: list[tuple[str, pa.RecordBatch]]) -> list[dict[str, Any]]:
    return [row for _, batch in emits for row in batch.to_pylist()]


def test_steps_snapshot_round_trips_mid_run() -> None:
    tags = [
        *m(
            (10, 0),
            (20, 2),
            (30, 0),
            (40, 3),
            (50, 2),
            (60, 4),
            (70, 3),
            (80, 4),
            (90, 1),
            (100, 0),
            (110, 2),
        ),
        (25, 10000, 1, 6, 0),
        (5, 60000, 1, 2, 1),
        (95, 60001, 1, 2, 1),
        *m((120, 3), (130, 4)),
    ]
    ordered = sorted(tags)
    pushes = [
        (TS, tag_batch(ordered[k : k + 3]), ordered[k + 3][0] if k + 3 < len(ordered) else DONE)
        for k in range(0, len(ordered), 3)
    ]
    for cut in range(len(pushes) + 1):
        rows = _split_run(lambda: Steps(0), pushes, cut)
    assert len(rows) >= 3


# --------------------------------------------------------------------------- FrameworkSteps


def ops_batch(rows: Sequence[tuple[str, int | None, int, int]]) -> pa.RecordBatch:
    name, parent, start, end = zip(*rows, strict=True)
    return pa.record_batch(
        {
            "name": pa.array(name, pa.string()).dictionary_encode(),
            "parent_id": pa.array(parent, pa.int64()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
        }
    )


def tasks_batch(rows: Sequence[tuple[int | None, int, int]]) -> pa.RecordBatch:
    """Compute tasks (launch, start, end), each with its op name and connection id."""
    launch, start, end = zip(*rows, strict=True)
    return conform(
        TABLES["tasks"],
        {
            "launch_ns": pa.array(launch, pa.int64()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "op_name": pa.array(["MatMul"] * len(rows), pa.string()),
            "task_type": pa.array(["AI_CORE"] * len(rows), pa.string()),
            "connection_id": pa.array([next(_CONNECTIONS) for _ in rows], pa.int64()),
        },
    )


def framework_pushes() -> list[tuple[str, pa.RecordBatch, int]]:
    tasks0 = tasks_batch(
        [
            (110, 150, 160),
            (110, 140, 170),  # same launch: the earliest start of the first launch counts
            (105, 180, 190),  # an earlier launch started later: it is the first launch
            (190, 250, 320),  # last launch: its end is past the host end
            (190, 240, 330),
            (50, 60, 70),  # before every step
            (None, 10, 20),  # no launch: counted
        ]
    )
    tasks1 = tasks_batch([(250, 260, 270), (210, 205, 215), (200, 195, 199)])  # launch 200: step 1
    ops = ops_batch(
        [
            ("ProfilerStep#1", None, 100, 200),
            ("aten::add", 7, 101, 102),
            ("ProfilerStep#9", 3, 120, 130),  # not top level
            ("ProfilerStep#2", None, 200, 300),
        ]
    )
    return [
        (at("tasks", 0), tasks0, 0),
        (at("tasks", 1), tasks1, 0),
        ("ops", ops, 0),
    ]


def _framework_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("device_id", "kind", "iteration_id", "start_ns", "end_ns", "host_start_ns", "host_end_ns")
    return sorted(tuple(r[k] for k in keys) for r in rows)


def test_framework_steps_take_the_first_and_last_launch_inside_the_host_step() -> None:
    op = FrameworkSteps([0, 1])
    assert op.outputs == (at(FRAMEWORK_STEPS, 0), at(FRAMEWORK_STEPS, 1))
    with capture_logs() as logs:
        rows = drive_all(op, framework_pushes())
    assert _framework_rows(rows) == [
        (0, "framework", 1, 180, 330, 100, 200),
        (0, "framework", 2, 200, 300, 200, 300),  # nothing launched inside: the host range
        (1, "framework", 1, 195, 200, 100, 200),
        (1, "framework", 2, 205, 300, 200, 300),
    ]
    reasons = {e.get("reason"): e.get("count") for e in logs}
    assert reasons["task without a launch time"] == 1
    assert reasons["ProfilerStep without a kernel launched inside"] == 1


def test_framework_steps_count_the_kernels_torch_npu_counts() -> None:
    """torch_npu's kernels are msprof's HostToDevice flow ends: an HCCL task is none (its
    communication op is one, with the op's own span), and neither is an unnamed event task."""
    op = FrameworkSteps([0], communication=[0])
    assert op.inputs == ("ops", at("tasks", 0), at("comm", 0))
    hccl, unnamed = tasks_batch([(105, 110, 500)]), tasks_batch([(106, 120, 600)])
    hccl = hccl.set_column(hccl.schema.get_field_index("task_type"), "task_type", pa.array(["HCCL"]))
    unnamed = unnamed.set_column(
        unnamed.schema.get_field_index("op_name"), "op_name", pa.nulls(1, pa.string())
    )
    comm = conform(
        TABLES["comm"],
        {
            "device_id": pa.array([0], pa.int32()),
            "start_ns": [300],
            "end_ns": [400],
            "launch_ns": [190],
            "connection_id": [9],
        },
    )
    pushes = [
        ("ops", ops_batch([("ProfilerStep#1", None, 100, 200)]), 0),
        (at("tasks", 0), hccl, 0),
        (at("tasks", 0), unnamed, 0),
        (at("tasks", 0), tasks_batch([(150, 160, 170)]), 0),
        (at("comm", 0), comm, 0),
    ]
    assert _framework_rows(drive_all(op, pushes)) == [(0, "framework", 1, 160, 400, 100, 200)]


def test_framework_steps_count_one_kernel_per_flow_id() -> None:
    """torch_npu links only the first HostToDevice ``f`` of a flow id (combine_acl_to_npu): the second
    copy one API launched, ending after the host step, does not stretch the step."""
    op = FrameworkSteps([0])
    copies = tasks_batch([(150, 160, 170), (150, 175, 260)])
    shared = pa.array([5001, 5001], pa.int64())
    copies = copies.set_column(copies.schema.get_field_index("connection_id"), "connection_id", shared)
    pushes = [("ops", ops_batch([("ProfilerStep#1", None, 100, 200)]), 0), (at("tasks", 0), copies, 0)]
    assert _framework_rows(drive_all(op, pushes)) == [(0, "framework", 1, 160, 200, 100, 200)]


def async_npu(rows: Sequence[tuple[int, int, int]]) -> pa.RecordBatch:
    """``async_npu`` flows (source op start, correlation id, kernel start) to stream-7 kernels of device 0,
    and one ``async_task_queue`` flow, which steps ignore."""
    return conform(
        TABLES["flows"],
        {
            "kind": pa.array(["async_npu"] * len(rows) + ["async_task_queue"], pa.string()),
            "src_ns": pa.array([r[0] for r in rows] + [0], pa.int64()),
            "correlation_id": pa.array([r[1] for r in rows] + [1], pa.int64()),
            "dst_device_id": pa.array([0] * len(rows) + [None], pa.int32()),
            "dst_tid": pa.array([7] * len(rows) + [9], pa.int64()),
            "dst_ns": pa.array([r[2] for r in rows] + [5], pa.int64()),
        },
    )


def test_framework_steps_with_a_task_queue_follow_the_correlation_ids() -> None:
    """With a task queue a kernel belongs to the step its enqueue's op is in (the flow's source), even
    when the dequeue thread launched it after the step ended; the smallest and largest correlation ids
    of a step give its first and last kernels, whatever their launch times."""
    op = FrameworkSteps([0], task_queue=True)
    assert op.inputs == ("ops", at("tasks", 0), "flows")
    kernels = tasks_batch(
        [(150, 160, 170), (120, 180, 185), (210, 230, 260), (250, 300, 330), (260, 400, 410)]
    )
    kernels = kernels.set_column(
        kernels.schema.get_field_index("stream_id"), "stream_id", pa.array([7] * 5, pa.int32())
    )
    flows = async_npu([(110, 12, 160), (105, 11, 180), (190, 13, 230), (205, 14, 300)])  # none to 400
    pushes = [
        ("ops", ops_batch([("ProfilerStep#1", None, 100, 200), ("ProfilerStep#2", None, 200, 300)]), 0),
        (at("tasks", 0), kernels, 0),
        ("flows", flows, 0),
    ]
    with capture_logs() as logs:
        rows = drive_all(op, pushes)
    assert _framework_rows(rows) == [
        (0, "framework", 1, 180, 260, 100, 200),  # ids 11..13: 11 starts it, 13 (launched at 210) ends it
        (0, "framework", 2, 300, 330, 200, 300),
    ]
    reasons = {e.get("reason"): e.get("count") for e in logs}
    assert reasons["kernel without an async_npu flow"] == 1
    for cut in range(len(pushes) + 1):
        _split_run(lambda: FrameworkSteps([0], task_queue=True), pushes, cut)


def test_framework_steps_flows_of_one_key_take_distinct_kernels() -> None:
    """Two kernels on one stream with one start (a MIX task's contexts) and a flow to each: each flow
    takes its own kernel, so the longer one ends the step and none is left without a flow."""
    op = FrameworkSteps([0], task_queue=True)
    kernels = tasks_batch([(150, 160, 250), (150, 160, 170)])
    stream = kernels.schema.get_field_index("stream_id")
    kernels = kernels.set_column(stream, "stream_id", pa.array([7, 7], pa.int32()))
    pushes = [
        ("ops", ops_batch([("ProfilerStep#1", None, 100, 200)]), 0),
        (at("tasks", 0), kernels, 0),
        ("flows", async_npu([(110, 11, 160), (110, 11, 160)]), 0),
    ]
    with capture_logs() as logs:
        rows = drive_all(op, pushes)
    assert _framework_rows(rows) == [(0, "framework", 1, 160, 250, 100, 200)]  # the longer context ends it
    reasons = {e.get("reason") for e in logs}
    assert "kernel without an async_npu flow" not in reasons and "flow without its kernel" not in reasons


def drive_all(op: Operator, pushes: Iterable[tuple[str, pa.RecordBatch, int]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for stream, batch, mark in pushes:
        op.push(stream, batch)
        rows += _rows(op.advance(mark))
    return rows + _rows(op.finish())


def test_framework_steps_wait_settle_ns_past_the_host_end() -> None:
    """settle_ns, plus how far behind the watermark a kernel's launch was when it came."""
    op = FrameworkSteps([0], settle_ns=1000)
    op.push("ops", ops_batch([("ProfilerStep#1", None, 100, 200)]))
    assert op.advance(180) == []
    op.push(at("tasks", 0), tasks_batch([(150, 160, 170)]))  # launched 30 before that watermark
    assert op.advance(1229) == []
    (emit,) = op.advance(1230)
    assert emit[1].to_pylist()[0]["start_ns"] == 160
    op.push(at("tasks", 0), tasks_batch([(180, 1300, 1400)]))  # the step is gone: counted
    with capture_logs() as logs:
        assert op.finish() == []
    assert any("outside every open ProfilerStep" in str(e.get("reason")) for e in logs)


def test_framework_steps_wait_as_long_as_kernels_lag_their_launch() -> None:
    """Kernels may come more than settle_ns after their launch (the host runs ahead of the device):
    a step then waits that much longer, so its kernels still count."""
    op = FrameworkSteps([0], settle_ns=100)
    op.push("ops", ops_batch([("ProfilerStep#1", None, 0, 100), ("ProfilerStep#2", None, 100, 200)]))
    op.push(at("tasks", 0), tasks_batch([(10, 1000, 1010)]))  # starts 990 after its launch
    assert op.advance(1020) == []  # without the wait, both steps would be final here
    op.push(at("tasks", 0), tasks_batch([(150, 1140, 1150)]))
    rows = _rows(op.advance(1300)) + _rows(op.finish())
    assert _framework_rows(rows) == [
        (0, "framework", 1, 1000, 1010, 0, 100),
        (0, "framework", 2, 1140, 1150, 100, 200),
    ]


def test_framework_steps_snapshot_round_trips() -> None:
    pushes = framework_pushes()
    for cut in range(len(pushes) + 1):
        _split_run(lambda: FrameworkSteps([0, 1]), pushes, cut)


# --------------------------------------------------------------------------- the simulator


@pytest.mark.parametrize("chip", ["910A", "910B"])
def test_simulated_steps_equal_the_truth(tmp_path: Path, chip: str) -> None:
    sim = simulated(tmp_path, chip)
    rows = [r for _, b in Pipeline([ts_track_feed(sim)], [Steps(0)]).run([STEPS]) for r in b.to_pylist()]
    truth = sim.steps.to_pylist()
    steps = sorted((r for r in rows if r["kind"] == "step"), key=lambda r: r["iteration_id"])
    assert [(r["iteration_id"], r["start_ns"], r["end_ns"]) for r in steps] == [
        (t["iteration"], t["step_start_ns"], t["step_end_ns"]) for t in truth
    ]
    models = sorted((r for r in rows if r["kind"] == "model"), key=lambda r: r["iteration_id"])
    # per step 0 FP ... BP 4 1: an iteration runs from the tag 0 to the tag 4; the tag 1 after a 4
    # does nothing; Data Aug Bound reaches back to the previous step row's end (60001)
    expected = [
        (1, t["iteration"], t["model_start_ns"], t["iter_end_ns"], t["fp_start_ns"], t["bp_end_ns"])
        for t in truth
    ]
    assert [
        (r["model_id"], r["iteration_id"], r["start_ns"], r["end_ns"], r["fp_ns"], r["bp_ns"]) for r in models
    ] == expected
    augs = [None] + [t["fp_start_ns"] - prev["step_end_ns"] for prev, t in itertools.pairwise(truth)]
    assert [r["data_aug_ns"] for r in models] == augs
    # every all-reduce of the step is bracketed by its tag pair
    ops = comm_ops(sim).to_pylist()
    for row in models:
        mine = [op for op in ops if op["iteration"] == row["iteration_id"]]
        assert len(row["reduce_start_ns"]) == len(mine) > 0
        for start, end, op in zip(row["reduce_start_ns"], row["reduce_end_ns"], mine, strict=True):
            assert start <= op["start_ns"] < op["end_ns"] <= end


def test_simulated_framework_steps_span_each_iteration(tmp_path: Path) -> None:
    sim = simulated(tmp_path, framework="torch_npu")
    ops, tasks = profiler_steps(sim), launched_tasks(sim)
    assert tasks.num_rows == sim.tasks.num_rows  # every device task found its launch
    op = FrameworkSteps([0])
    rows = drive(op, [(at("tasks", 0), tasks, START), ("ops", ops, DONE)])
    truth = sim.tasks
    expected = []
    for step in ops.to_pylist():
        number = int(step["name"].split("#")[1])
        mine = truth.filter(pc.equal(truth["iteration"], number))
        # the H2D copy is launched first and starts first; the host synchronises after the device
        expected.append((number, pc.min(mine["start_ns"]).as_py(), step["end_ns"], step["start_ns"]))
        assert pc.max(mine["end_ns"]).as_py() <= step["end_ns"]
    got = [(r["iteration_id"], r["start_ns"], r["end_ns"], r["host_start_ns"]) for r in rows]
    assert got == expected
