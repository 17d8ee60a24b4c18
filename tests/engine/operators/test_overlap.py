"""Overlap: msprof's lanes against plain-Python references, torch_npu's per-step sums, snapshots.

Lane references are the interval oracles of ``tests/engine/kernels/reference.py``; the per-step
reference is torch_npu's ``count_time`` loop written out (first step in start order whose
``[start, end)`` holds the event's start; framework_outputs.md §4a (2)).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream.engine.kernels.overlap import SetOp
from profstream.engine.operators.overlap import Overlap, StepSource
from profstream.engine.operators.steps import Steps
from profstream.engine.runtime import DONE, START, Emit, Feed, Pipeline, at
from profstream.engine.schema import TABLES, conform
from tests.engine.kernels.reference import combine_ref, gaps_ref, union_ref
from tests.engine.operators.truth_inputs import comm_batches, simulated, task_batches, ts_track_feed

Span = tuple[int, int]
TASKS, COMM, FSTEPS = at("tasks", 0), at("comm", 0), at("framework_steps", 0)
LANES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")


def tasks(rows: Sequence[tuple[int, int, str | None, str | None, str | None, int]]) -> pa.RecordBatch:
    """Task rows (start, end, GE task type, host task type, op name, stream); op type by :func:`op_type`."""
    start, end, ge, host, name, stream = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 6
    return conform(
        TABLES["tasks"],
        {
            "device_id": pa.array([0] * len(start), pa.int32()),
            "stream_id": pa.array(stream, pa.int32()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "task_type": pa.array(ge, pa.string()),
            "host_task_type": pa.array(host, pa.string()),
            "op_name": pa.array(name, pa.string()),
            "op_type": pa.array(
                [op_type(g, h, n) for g, h, n in zip(ge, host, name, strict=True)], pa.string()
            ),
        },
    )


def op_type(ge: str | None, host: str | None, name: str | None) -> str | None:
    """What the host join gives: the op's type with node info, ``N/A`` for a kernel without (Level0)."""
    if ge is not None:
        return name
    return "N/A" if host is not None and host.startswith("KERNEL") else None


def kernel(start: int, end: int, name: str = "op", stream: int = 2) -> tuple[int, int, str, str, str, int]:
    return (start, end, "AI_CORE", "KERNEL_AICORE", name, stream)


def memcpy(start: int, end: int) -> tuple[int, int, None, str, str, int]:
    return (start, end, None, "MEMCPY_ASYNC", "copy", 2)


def comm(rows: Sequence[tuple[int, int, str]]) -> pa.RecordBatch:
    start, end, name = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 3
    return conform(
        TABLES["comm"],
        {
            "device_id": pa.array([0] * len(start), pa.int32()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "op_name": pa.array(name, pa.string()),
        },
    )


def framework_steps(rows: Sequence[tuple[int, int, int, int | None]]) -> pa.RecordBatch:
    """Framework step rows (number, start, end, host start)."""
    key, start, end, host = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 4
    return conform(
        TABLES["steps"],
        {
            "device_id": pa.array([0] * len(key), pa.int32()),
            "kind": pa.array(["framework"] * len(key), pa.string()),
            "iteration_id": pa.array(key, pa.int64()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "host_start_ns": pa.array(host, pa.int64()),
        },
    )


def torch_ops(rows: Sequence[tuple[str, int]]) -> pa.RecordBatch:
    """``ops`` rows (name, start): torch ops, and an enqueue for the name ``Enqueue``."""
    return conform(
        TABLES["ops"],
        {
            "kind": pa.array(["enqueue" if n == "Enqueue" else "cpu_op" for n, _ in rows], pa.string()),
            "name": pa.array([n for n, _ in rows], pa.string()),
            "start_ns": pa.array([t for _, t in rows], pa.int64()),
            "end_ns": pa.array([t + 1 for _, t in rows], pa.int64()),
        },
    )


def drive(op: Overlap, pushes: Iterable[tuple[str, pa.RecordBatch, int]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in op.outputs}

    def take(emits: list[Emit]) -> None:
        for name, batch in emits:
            expected = TABLES["overlap"] if name.startswith("overlap") else TABLES["step_time"]
            assert batch.schema.equals(expected)
            out[name] += batch.to_pylist()

    for stream, batch, mark in pushes:
        op.push(stream, batch)
        take(op.advance(mark))
    take(op.finish())
    return out


def lanes(rows: list[dict[str, Any]]) -> dict[str, list[Span]]:
    got: dict[str, list[Span]] = {lane: [] for lane in LANES}
    for row in rows:
        got[row["kind"]].append((row["start_ns"], row["end_ns"]))
    return {lane: sorted(spans) for lane, spans in got.items()}


# --------------------------------------------------------------------------- hand-built


def test_lanes_follow_msprof_rules() -> None:
    pushes = [
        (
            TASKS,
            tasks(
                [
                    kernel(0, 10),
                    kernel(5, 15),
                    kernel(15, 18),  # touching: merges
                    kernel(20, 30),
                    kernel(31, 33, name="MyAicpuKernel"),  # excluded by name
                    kernel(34, 36, stream=9),  # MC2 KFC stream: excluded
                    (37, 38, "AI_CORE", None, "x", 2),  # compute, unknown host type: still compute
                    memcpy(40, 45),  # not a kernel: widens the Free window
                    (50, 60, None, None, "x", 2),  # unknown host type: does not widen it
                ]
            ),
            START,  # the comm input has delivered nothing yet
        ),
        (COMM, comm([(12, 25, "hcom_allReduce_0"), (24, 26, "hcom_receive_1")]), DONE),
    ]
    out = drive(Overlap(0, None, kfc_streams=frozenset({9}), lateness_ns=0), pushes)
    assert lanes(out[at("overlap", 0)]) == {
        "Computing": [(0, 18), (20, 30), (37, 38)],
        "Communication": [(12, 26)],
        "Communication(Not Overlapped)": [(18, 20)],
        "Free": [(30, 37), (38, 45)],
    }


def test_computing_counts_every_operator_task_type_but_communication() -> None:
    """The real exports in shared/realdata draw each DSAGenBitMask task (GE type DSA_SQE, alone on
    its stream) as a Computing lane of its own, e.g. [1736408883714269.685, +3.4 us] in level1 rank 0:
    msprof's C++ takes every compute-task-info task (``OverlapAnalysisProcessor::SepOneTask`` checks
    only the KFC streams and the name), so are the Level0 kernels of type ``N/A``, which the real
    Level0 exports count as Computing. Communication tasks are no operators (op_summary drops them)."""
    pushes = [
        (
            TASKS,
            tasks(
                [
                    kernel(0, 10),
                    (12, 15, "DSA_SQE", "STARS_COMMON", "DSAGenBitMask", 3),
                    (16, 18, "HCCL", "KERNEL_AICORE", "allreduce", 4),
                    (19, 20, "WRITE_BACK", "KERNEL_AICORE", "wb", 2),
                    kernel(21, 30),
                    (31, 33, None, "KERNEL_AIVEC", "level0_op", 2),  # Level0: op type N/A, no GE type
                ]
            ),
            DONE,
        ),
    ]
    out = drive(Overlap(0, None, lateness_ns=0), pushes)
    assert lanes(out[at("overlap", 0)])["Computing"] == [(0, 10), (12, 15), (21, 30), (31, 33)]


def test_step_time_buckets_by_start_without_clipping() -> None:
    pushes = [
        (TASKS, tasks([kernel(0, 15), kernel(20, 30), memcpy(40, 45)]), START),
        (COMM, comm([(12, 25, "hcom_allReduce_0"), (22, 24, "hcom_receive_1")]), 100),
        (FSTEPS, framework_steps([(1, 0, 20, -10), (2, 20, 50, 18)]), DONE),
    ]
    out = drive(Overlap(0, lateness_ns=0), pushes)
    assert lanes(out[at("overlap", 0)]) == {
        "Computing": [(0, 15), (20, 30)],
        "Communication": [(12, 25)],
        "Communication(Not Overlapped)": [(15, 20)],
        "Free": [(30, 45)],
    }
    rows = out[at("step_time", 0)]
    cols = (
        "step",
        "computing_ns",
        "communication_not_overlapped_ns",
        "overlapped_ns",
        "communication_ns",
        "free_ns",
        "stage_ns",
        "bubble_ns",
        "communication_not_overlapped_exclude_receive_ns",
        "preparing_ns",
    )
    assert [tuple(r[c] for c in cols) for r in rows] == [
        # all of Communication [12, 25] counts in step 1 (its start), even past the step end 20;
        # stage = last end 25 - first start 0; preparing = first compute start 0 - host start -10
        (1, 15, 5, 8, 13, 0, 25, 0, 5, 10),
        # bubble: hcom_receive [22, 24]; stage = 45 - 20 - 2; exclude receive = max(0 - 2, 0)
        (2, 10, 0, 0, 0, 15, 23, 2, 0, 2),
    ]
    assert [r["host_start_ns"] for r in rows] == [-10, 18]  # torch_npu's CSV needs it without a first task


def test_without_steps_one_row_sums_the_run() -> None:
    pushes = [(TASKS, tasks([kernel(0, 10), memcpy(20, 30)]), START), (COMM, comm([(5, 15, "hcom_x")]), DONE)]
    (row,) = drive(Overlap(0, None, lateness_ns=0), pushes)[at("step_time", 0)]
    assert row["step"] is None and row["preparing_ns"] is None and row["host_start_ns"] is None
    assert (row["computing_ns"], row["communication_ns"], row["communication_not_overlapped_ns"]) == (
        10,
        10,
        5,
    )
    assert (row["free_ns"], row["stage_ns"]) == (15, 30)


def test_steps_that_receive_nothing_have_no_row_and_overlapping_steps_keep_first_match() -> None:
    pushes = [
        (TASKS, tasks([kernel(0, 10), kernel(25, 30)]), 100),
        (COMM, comm([]), 100),
        # step 2 overlaps step 1: the shared [15, 20) stays step 1's; step 3 gets nothing
        (FSTEPS, framework_steps([(1, 0, 20, None), (2, 15, 40, None), (3, 60, 70, None)]), DONE),
    ]
    with capture_logs() as logs:
        rows = drive(Overlap(0, lateness_ns=0), pushes)[at("step_time", 0)]
    assert [(r["step"], r["computing_ns"], r["free_ns"], r["preparing_ns"]) for r in rows] == [
        (1, 10, 15, None),  # Free [10, 25] starts in step 1
        (2, 5, 0, None),
    ]
    assert any("earlier step" in str(e.get("reason")) for e in logs)


def test_input_later_than_the_lateness_is_clipped_and_counted() -> None:
    op = Overlap(0, None, lateness_ns=0)
    op.push(TASKS, tasks([kernel(0, 10)]))
    op.advance(20)  # [0, 10] is final and emitted
    op.push(TASKS, tasks([kernel(5, 25)]))  # started before the watermark it was promised after
    with capture_logs() as logs:
        out = drive(op, [])
    assert lanes(out[at("overlap", 0)])["Computing"] == [(20, 25)]
    (clipped,) = [e for e in logs if "lateness" in str(e.get("reason"))]
    assert clipped["log_level"] == "warning" and clipped["count"] == 1


def test_model_step_source_filters_kind_and_model() -> None:
    steps = conform(
        TABLES["steps"],
        {
            "kind": pa.array(["model", "model", "step"], pa.string()),
            "model_id": pa.array([1, 2, 1], pa.int64()),
            "iteration_id": pa.array([7, 8, 9], pa.int64()),
            "start_ns": pa.array([0, 0, 0], pa.int64()),
            "end_ns": pa.array([50, 50, 50], pa.int64()),
        },
    )
    op = Overlap(0, StepSource("steps", "model", model_id=2), lateness_ns=0)
    assert op.inputs == (TASKS, COMM, at("steps", 0))
    rows = drive(
        op, [(TASKS, tasks([kernel(0, 10)]), 100), (COMM, comm([]), 100), (at("steps", 0), steps, DONE)]
    )
    assert [r["step"] for r in rows[at("step_time", 0)]] == [8]


# --------------------------------------------------------------------------- properties


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    def spans(max_size: int) -> list[Span]:
        n = draw(st.integers(0, max_size))
        starts = draw(st.lists(st.integers(0, 200), min_size=n, max_size=n))
        return [(s, s + draw(st.integers(0, 30))) for s in starts]

    edges = sorted(draw(st.lists(st.integers(0, 250), min_size=0, max_size=8)))
    steps = [
        (k + 1, a, a + draw(st.integers(1, 60)), draw(st.one_of(st.none(), st.integers(-20, 250))))
        for k, a in enumerate(edges)
    ]
    return {
        "compute": spans(25),
        "comm": [(s, e, draw(st.sampled_from(["hcom_allReduce_", "hcom_receive_"]))) for s, e in spans(10)],
        "other": spans(4),
        "steps": steps,
        "first_op": draw(st.one_of(st.none(), st.integers(-20, 250))),  # the earliest torch op's start
        "cuts": sorted(draw(st.lists(st.integers(0, 40), max_size=5))),
        "snapshot_at": draw(st.integers(0, 6)),
    }


def pushes_of(work: dict[str, Any], *, with_steps: bool) -> list[tuple[str, pa.RecordBatch, int]]:
    """Inputs in start order, cut into batches; each batch's watermark is the next input's start."""
    items = sorted(
        [(s, e, "c", None) for s, e in work["compute"]]
        + [(s, e, "m", name) for s, e, name in work["comm"]]
        + [(s, e, "o", None) for s, e in work["other"]]
    )
    out: list[tuple[str, pa.RecordBatch, int]] = []
    bounds = [0, *[min(c, len(items)) for c in work["cuts"]], len(items)]
    previous = START
    for lo, hi in itertools.pairwise(bounds):
        part = items[lo:hi]
        mark = items[hi][0] if hi < len(items) else DONE
        task_rows = [kernel(s, e) if k == "c" else memcpy(s, e) for s, e, k, _ in part if k != "m"]
        # the comm input has not delivered this part yet: the watermark moves after both did
        out.append((TASKS, tasks(task_rows), previous))
        out.append((COMM, comm([(s, e, name) for s, e, k, name in part if k == "m"]), mark))
        previous = mark
    if with_steps:
        if work.get("first_op") is not None:  # the ops come before the steps (steps_first moves these)
            first = work["first_op"]
            ops = torch_ops([("aten::add", first + 5), ("Enqueue", first - 1), ("aten::mm", first)])
            out.append(("ops", ops, DONE))
        out.append((FSTEPS, framework_steps(work["steps"]), DONE))
    return out


def reference_lanes(work: dict[str, Any]) -> dict[str, list[Span]]:
    cs, ce = zip(*work["compute"], strict=True) if work["compute"] else ((), ())
    ms, me = zip(*[(s, e) for s, e, _ in work["comm"]], strict=True) if work["comm"] else ((), ())
    computing = union_ref(cs, ce)
    communication = union_ref(ms, me)
    everything = [*work["compute"], *[(s, e) for s, e, _ in work["comm"]], *work["other"]]
    free: list[Span] = []
    if everything:
        lo, hi = min(s for s, _ in everything), max(e for _, e in everything)
        busy = union_ref([*cs, *ms], [*ce, *me])
        free = gaps_ref([s for s, _ in busy], [e for _, e in busy], lo, hi)
    return {
        "Computing": computing,
        "Communication": communication,
        "Communication(Not Overlapped)": combine_ref(SetOp.DIFFERENCE, communication, computing),
        "Free": free,
    }


def reference_step_time(work: dict[str, Any], got_lanes: dict[str, list[Span]]) -> list[tuple[Any, ...]]:
    """torch_npu ``create_step_file`` over the lane events and the hcom_receive ops."""
    events = [(lane, s, e) for lane, spans in got_lanes.items() for s, e in spans]
    events += [("bubble", s, e) for s, e, name in work["comm"] if name.startswith("hcom_receive")]
    steps = sorted(work["steps"], key=lambda r: r[1])
    if not steps:  # no step range: one step-less bucket holds everything, prepared since the first op
        first_op = work.get("first_op")
        steps = [(None, -(2**62), 2**62, "first task" if first_op is None else first_op)]
    acc: dict[int | None, dict[str, Any]] = {}
    for lane, s, e in events:
        key = next((k for k, ss, se, _ in steps if ss <= s < se), -1)
        if key == -1:
            continue
        a = acc.setdefault(key, {"first": s, "last": e, "task": None} | dict.fromkeys([*LANES, "bubble"], 0))
        a[lane] += e - s
        a["first"], a["last"] = min(a["first"], s), max(a["last"], e)
        if lane in ("Computing", "Communication"):
            a["task"] = s if a["task"] is None else min(a["task"], s)
    host = {k: h for k, _, _, h in steps}
    rows = []
    for key, a in sorted(acc.items(), key=lambda item: item[0] or 0):
        cno = a["Communication(Not Overlapped)"]
        start = a["task"] if host[key] == "first task" else host[key]  # no torch op: torch_npu's 0
        preparing = None if a["task"] is None or start is None else a["task"] - start
        rows.append(
            (
                key,
                a["Computing"],
                cno,
                a["Communication"] - cno,
                a["Communication"],
                a["Free"],
                a["last"] - a["first"] - a["bubble"],
                a["bubble"],
                max(cno - a["bubble"], 0),
                preparing,
            )
        )
    return rows


STEP_COLUMNS = (
    "step",
    "computing_ns",
    "communication_not_overlapped_ns",
    "overlapped_ns",
    "communication_ns",
    "free_ns",
    "stage_ns",
    "bubble_ns",
    "communication_not_overlapped_exclude_receive_ns",
    "preparing_ns",
)


def _length(spans: Iterable[Span]) -> int:
    return sum(e - s for s, e in spans)


@settings(max_examples=200, deadline=None)
@given(workloads())
def test_lanes_match_the_references_and_partition_the_window(work: dict[str, Any]) -> None:
    got = lanes(drive(Overlap(0, None, lateness_ns=0), pushes_of(work, with_steps=False))[at("overlap", 0)])
    assert got == reference_lanes(work)
    for spans in got.values():  # canonical: sorted, positive, separated
        assert all(s < e for s, e in spans)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    computing, communication = got["Computing"], got["Communication"]
    busy = union_ref(*zip(*(computing + communication), strict=True)) if computing + communication else []
    everything = [*work["compute"], *[(s, e) for s, e, _ in work["comm"]], *work["other"]]
    if everything:
        lo, hi = min(s for s, _ in everything), max(e for _, e in everything)
        # Computing, Communication and Free cover [lo, hi] exactly, Free disjoint from the rest
        assert _length(busy) + _length(got["Free"]) == hi - lo
        assert combine_ref(SetOp.INTERSECTION, got["Free"], busy) == []
    # Not Overlapped inside Communication, disjoint from Computing
    assert combine_ref(SetOp.DIFFERENCE, got["Communication(Not Overlapped)"], communication) == []
    assert combine_ref(SetOp.INTERSECTION, got["Communication(Not Overlapped)"], computing) == []


@settings(max_examples=200, deadline=None)
@given(workloads(), st.booleans())
def test_step_time_matches_torch_npu_count_time(work: dict[str, Any], steps_first: bool) -> None:
    pushes = pushes_of(work, with_steps=True)
    if steps_first:  # the step rows come before anything else (the other inputs hold the watermark)
        pushes = [(pushes[-1][0], pushes[-1][1], START), *pushes[:-2], (*pushes[-2][:2], DONE)]
    out = drive(Overlap(0, lateness_ns=0), pushes)
    rows = [tuple(r[c] for c in STEP_COLUMNS) for r in out[at("step_time", 0)]]
    assert rows == reference_step_time(work, lanes(out[at("overlap", 0)]))


@settings(max_examples=100, deadline=None)
@given(workloads())
def test_snapshot_restore_continues_like_an_uninterrupted_run(work: dict[str, Any]) -> None:
    pushes = pushes_of(work, with_steps=True)
    cut = min(work["snapshot_at"], len(pushes))

    def run(op: Overlap, part: Sequence[tuple[str, pa.RecordBatch, int]]) -> list[Emit]:
        emits: list[Emit] = []
        for stream, batch, mark in part:
            op.push(stream, batch)
            emits += op.advance(mark)
        return emits

    whole_op = Overlap(0, lateness_ns=5)
    whole = run(whole_op, pushes) + whole_op.finish()
    first = Overlap(0, lateness_ns=5)
    head = run(first, pushes[:cut])
    blob = first.snapshot()
    second = Overlap(0, lateness_ns=5)
    second.restore(blob)
    assert second.snapshot() == blob
    tail = run(second, pushes[cut:]) + second.finish()
    as_rows = [(name, batch.to_pylist()) for name, batch in head + tail]
    assert as_rows == [(name, batch.to_pylist()) for name, batch in whole]


def test_an_unknown_step_kind_is_just_ignored() -> None:
    op = Overlap(0, StepSource("framework_steps", "model"), lateness_ns=0)
    rows = drive(
        op,
        [
            (TASKS, tasks([kernel(0, 10)]), 20),
            (COMM, comm([]), 20),
            (FSTEPS, framework_steps([(1, 0, 50, 0)]), DONE),
        ],
    )
    # no step of the wanted kind ever arrived: torch_npu's single step-less row
    assert [(r["step"], r["computing_ns"]) for r in rows[at("step_time", 0)]] == [(None, 10)]


@pytest.mark.parametrize("lateness", [0, 1_000_000_000])
def test_lateness_does_not_change_the_result_of_ordered_input(lateness: int) -> None:
    work = {
        "compute": [(0, 10), (5, 30), (40, 50)],
        "comm": [(8, 45, "hcom_allReduce_0")],
        "other": [(60, 70)],
        "steps": [(1, 0, 35, 0), (2, 35, 80, 30)],
        "cuts": [1, 2, 3],
    }
    out = drive(Overlap(0, lateness_ns=lateness), pushes_of(work, with_steps=True))
    assert lanes(out[at("overlap", 0)]) == reference_lanes(work)
    rows = [tuple(r[c] for c in STEP_COLUMNS) for r in out[at("step_time", 0)]]
    assert rows == reference_step_time(work, reference_lanes(work))


# --------------------------------------------------------------------------- the simulator


def _clipped(spans: Sequence[Span], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in spans)


def test_simulated_overlap_equals_the_truth(tmp_path: Path) -> None:
    """Lanes clipped to each step window equal truth exactly; torch_npu's sums differ only in Free.

    Truth (``simulate/truth.py``) measures each lane inside ``[step start, step end]``: the clipped
    (MindSpore-style) definition. Every task of a step lies inside its window, so the Computing,
    Communication and Not Overlapped pieces never cross a step boundary and torch_npu's
    bucket-by-start sums equal truth too; a Free gap that crosses from one step into the next is
    credited whole to the step where it starts, so the text path's Free differs.
    """
    sim = simulated(tmp_path)
    feeds = [
        ts_track_feed(sim),
        Feed(TASKS, iter(task_batches(sim)), "start_ns"),
        Feed(COMM, iter(comm_batches(sim)), "start_ns"),
    ]
    operators = [Steps(0), Overlap(0, StepSource("steps", "step"), lateness_ns=0)]
    out: dict[str, list[dict[str, Any]]] = {at("overlap", 0): [], at("step_time", 0): []}
    for name, batch in Pipeline(feeds, operators).run(out):
        out[name] += batch.to_pylist()
    got = lanes(out[at("overlap", 0)])
    truth = sim.steps.to_pylist()
    names = {
        "computing_ns": "Computing",
        "communication_ns": "Communication",
        "comm_not_overlapped_ns": "Communication(Not Overlapped)",
        "free_ns": "Free",
    }
    for t in truth:
        window = (t["step_start_ns"], t["step_end_ns"])
        clipped = {column: _clipped(got[lane], *window) for column, lane in names.items()}
        assert clipped == {column: t[column] for column in names}
        assert clipped["communication_ns"] - clipped["comm_not_overlapped_ns"] == t["overlapped_ns"]
    rows = out[at("step_time", 0)]
    assert [r["step"] for r in rows] == [t["iteration"] for t in truth]
    for row, t in zip(rows, truth, strict=True):
        assert (row["computing_ns"], row["communication_ns"]) == (t["computing_ns"], t["communication_ns"])
        assert row["communication_not_overlapped_ns"] == t["comm_not_overlapped_ns"]
        assert row["overlapped_ns"] == t["overlapped_ns"]
        assert row["preparing_ns"] is None  # step-trace steps have no host start
    windows = [(t["step_start_ns"], t["step_end_ns"]) for t in truth]
    by_start = [sum(e - s for s, e in got["Free"] if a <= s < b) for a, b in windows]
    assert [r["free_ns"] for r in rows] == by_start
    assert by_start != [t["free_ns"] for t in truth]
