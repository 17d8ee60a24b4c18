"""FrameworkOps: task-queue pairing, the op tree, flows, the reorder bound, snapshots, a simulated run."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import profstream
from profstream import events
from profstream.engine.feeds import FeedSet
from profstream.engine.operators import framework_ops
from profstream.engine.operators.framework_ops import FrameworkOps
from profstream.engine.runtime import DONE, Feed, Pipeline, at
from profstream.engine.schema import conform, tasks_schema
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.framework_inputs import (
    PID,
    Step,
    comm_ops,
    drive,
    drive_resumed,
    one_kernel_per_flow_id_steps,
    op_mark,
    op_range,
    queue_event,
    tasks,
)

OPS, MARKS = "torch_op_range", "torch_op_mark"


def brief(rows: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in rows]


def unmatched(logs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    (entry,) = [e for e in logs if e["event"] == events.RECORDS_UNMATCHED]
    return entry


# ----------------------------------------------------------------------------- the op tree


def test_ops_arriving_in_end_order_nest_in_start_order() -> None:
    """Records come when ops end; ids follow starts and parents follow containment."""
    batch = op_range([("C", 20, 30), ("B", 10, 40), ("D", 50, 60), ("A", 0, 100)])
    out = drive(FrameworkOps(), [(OPS, batch), 1000])
    assert brief(out["ops"], "op_id", "name", "parent_id", "kind") == [
        (0, "A", None, "cpu_op"),
        (1, "B", 0, "cpu_op"),
        (2, "C", 1, "cpu_op"),
        (3, "D", 0, "cpu_op"),
    ]
    assert out["ops"][2]["input_shapes"] == "C,1" and out["ops"][0]["pid"] == PID
    assert out["ops"][0]["sequence_number"] is None and out["ops"][0]["fwd_thread_id"] == 0


def test_an_ops_flops_text_is_carried_as_torch_npu_reads_it() -> None:
    """With ``with_flops`` torch_npu writes an op's extra args as field 10 (``key:value;...``, only when
    there are some: ``OpRangeData::encode``) and puts that text as is in its trace_view.json args as
    ``flops`` (``TorchOpBean.get_args``, ``Constant.FLOPS``): the ops table keeps it, null where absent."""
    batch = op_range([("A", 0, 10), ("B", 20, 30)]).append_column(
        "extra_args", pa.array(["flops:1048576;", None], pa.string())
    )
    out = drive(FrameworkOps(), [(OPS, batch), 1000])
    assert brief(out["ops"], "name", "flops") == [("A", "flops:1048576;"), ("B", None)]


def test_ops_wait_until_the_horizon_passes_their_start() -> None:
    """With max_op_ns = 100, watermark W emits the ops that start before W - 100, parents intact."""
    op = FrameworkOps(max_op_ns=100)
    assert op.output_watermark(150) == 50 and op.output_watermark(DONE) == DONE
    op.push(OPS, op_range([("C", 20, 30), ("B", 10, 40)]))
    assert op.advance(45) == []
    op.push(OPS, op_range([("D", 50, 60), ("A", 0, 100)]))
    first = op.advance(105)  # horizon 5: only A
    second = op.advance(125)  # horizon 25: B and C
    last = op.finish()
    rows = [r for emits in (first, second, last) for name, b in emits if name == "ops" for r in b.to_pylist()]
    assert brief(rows, "op_id", "name", "parent_id") == [
        (0, "A", None),
        (1, "B", 0),
        (2, "C", 1),
        (3, "D", 0),
    ]
    assert [len(e) for e in (first, second)] == [1, 1]


def test_output_watermark_holds_for_flow_sources() -> None:
    """A live op may still be a flow source: the outputs promise no later than its start."""
    op = FrameworkOps(max_op_ns=100)
    op.push(OPS, op_range([("short", 10, 20), ("ProfilerStep#1", 5, 2000)]))
    op.advance(1000)
    assert op.output_watermark(1000) == 5  # the step still runs at the horizon (900)
    op.advance(2200)  # before any kernel came, launch targets are kept max_op_ns longer
    assert op.output_watermark(2200) == 5
    op.advance(2300)
    assert op.output_watermark(2300) == 2200


def test_late_op_is_emitted_and_counted() -> None:
    """An op that arrives after the horizon passed its start still comes out, counted as late."""
    op = FrameworkOps(max_op_ns=10)
    op.push(OPS, op_range([("A", 0, 5)]))
    op.advance(100)
    op.push(OPS, op_range([("late", 1, 3)]))
    with capture_logs() as logs:
        rows = [r for _, b in op.finish() for r in b.to_pylist()]
    assert brief(rows, "op_id", "name") == [(1, "late")]
    assert unmatched(logs)["late_ops"] == 1 and unmatched(logs)["log_level"] == "warning"


def test_step_longer_than_the_window_is_a_root_and_parents_what_follows() -> None:
    """A ProfilerStep longer than max_op_ns arrives (at its end) after its first ops left: it is
    counted apart from late ops, logged at debug level, stays a root, and the ops still to come
    nest under it."""
    op = FrameworkOps(max_op_ns=10)
    op.push(OPS, op_range([("aten::a", 5, 8)]))
    first = op.advance(100)
    op.push(OPS, op_range([("aten::b", 95, 99), ("ProfilerStep#1", 0, 120)]))
    middle = op.advance(130)
    op.push(OPS, op_range([("aten::c", 121, 125)]))
    with capture_logs() as logs:
        last = op.finish()
    rows = [r for emits in (first, middle, last) for name, b in emits if name == "ops" for r in b.to_pylist()]
    assert brief(rows, "op_id", "name", "parent_id") == [
        (0, "aten::a", None),
        (1, "ProfilerStep#1", None),
        (2, "aten::b", 1),
        (3, "aten::c", None),
    ]
    counts = unmatched(logs)
    assert counts["late_steps"] == 1 and counts["late_ops"] == 0 and counts["log_level"] == "debug"


def test_profiler_steps_are_kept_as_roots() -> None:
    """ProfilerStep#<n> ops are ordinary roots; a parent that starts with its child comes first."""
    batch = op_range([("aten::add", 0, 10), ("ProfilerStep#1", 0, 50), ("aten::mul", 20, 30)])
    out = drive(FrameworkOps(), [(OPS, batch)])
    assert brief(out["ops"], "name", "parent_id") == [
        ("ProfilerStep#1", None),
        ("aten::add", 0),
        ("aten::mul", 0),
    ]


# ----------------------------------------------------------------------------- task queue


def test_enqueue_attaches_only_on_its_own_thread() -> None:
    """Same-thread enqueue -> parent op; other thread or no open op -> no parent; dequeues outside."""
    marks = [
        *queue_event("enqueue", 1, 1, "aten::add", (10, 12)),
        *queue_event("enqueue", 2, 2, "aten::mul", (20, 22)),
        *queue_event("dequeue", 1, 3, "aten::add", (30, 40)),
        *queue_event("enqueue", 3, 1, "aten::neg", (200, 201)),
    ]
    marks.sort()
    out = drive(FrameworkOps(), [(OPS, op_range([("A", 0, 100)])), (MARKS, op_mark(marks))])
    assert brief(out["ops"], "op_id", "kind", "name", "tid", "parent_id", "correlation_id") == [
        (0, "cpu_op", "A", 1, None, None),
        (1, "enqueue", "Enqueue", 1, 0, 1),
        (2, "enqueue", "Enqueue", 2, None, 2),
        (3, "dequeue", "Dequeue@aten::add", 3, None, 1),
        (4, "enqueue", "Enqueue", 1, None, 3),
    ]
    assert brief(
        out["flows"], "kind", "flow_id", "src_tid", "src_ns", "dst_tid", "dst_ns", "dst_device_id"
    ) == [("async_task_queue", 1, 1, 10, 3, 30, None)]


def test_marks_pair_the_last_start_and_count_the_rest() -> None:
    """An end pops the newest start of its (thread, name) and drops the older; lone marks are counted."""
    marks = [
        (5, 1, 9, 1, "x"),  # end without a start
        (10, 0, 1, 1, "x"),  # replaced by the next start
        (12, 0, 2, 1, "x"),
        (13, 0, 3, 1, "y"),  # another name: its own key
        (14, 1, 3, 1, "y"),
        (15, 1, 2, 1, "x"),
        (50, 0, 4, 1, "x"),  # never ends
    ]
    with capture_logs() as logs:
        out = drive(FrameworkOps(), [(MARKS, op_mark(marks))])
    assert brief(out["ops"], "name", "start_ns", "end_ns", "correlation_id") == [
        ("Enqueue", 12, 15, 2),
        ("Enqueue", 13, 14, 3),
    ]
    entry = unmatched(logs)
    assert (entry["marks_without_start"], entry["starts_replaced"], entry["starts_never_ended"]) == (1, 1, 1)
    assert entry["log_level"] == "warning"


def test_marks_split_over_batches_still_pair() -> None:
    """A start in one batch pairs with its end in the next; the event keeps the end's correlation id."""
    first, second = op_mark([(10, 2, 7, 3, "op")]), op_mark([(20, 3, 8, 3, "op")])
    out = drive(FrameworkOps(), [(MARKS, first), 15, (MARKS, second)])
    assert brief(out["ops"], "kind", "start_ns", "end_ns", "correlation_id") == [("dequeue", 10, 20, 8)]


# ----------------------------------------------------------------------------- flows


def test_fwdbwd_links_the_latest_forward_and_backward_ops() -> None:
    """Per sequence number: latest forward (fwd tid 0) -> latest backward, only across threads."""
    batch = op_range(
        [
            ("fwd", 10, 11, 1, 5, 0),
            ("fwd again", 20, 21, 1, 5, 0),
            ("bwd", 300, 301, 2, 5, 1),
            ("bwd again", 400, 401, 2, 5, 1),
            ("same thread fwd", 30, 31, 1, 6, 0),
            ("same thread bwd", 500, 501, 1, 6, 1),
            ("bwd alone", 600, 601, 2, 7, 1),
        ]
    )
    with capture_logs() as logs:
        out = drive(FrameworkOps(), [(OPS, batch)])
    assert brief(out["flows"], "kind", "flow_id", "src_tid", "src_ns", "dst_tid", "dst_ns") == [
        ("fwdbwd", 5, 1, 20, 2, 400)
    ]
    assert unmatched(logs)["backward_without_forward"] == 1


def test_fwdbwd_waits_for_the_backward_ops() -> None:
    """A sequence number closes only max_op_ns after its forward op left the window."""
    op = FrameworkOps(max_op_ns=100)
    op.push(OPS, op_range([("fwd", 10, 11, 1, 5, 0)]))
    assert [n for n, _ in op.advance(150)] == ["ops"]  # horizon 50: the op, but no flow yet
    op.push(OPS, op_range([("bwd", 120, 121, 2, 5, 1)]))
    emitted = op.advance(300)  # horizon 200, flows close forward ops before 100
    flows = [r for n, b in emitted if n == "flows" for r in b.to_pylist()]
    assert brief(flows, "flow_id", "src_ns", "dst_ns") == [(5, 10, 120)]


def npu_scenario() -> list[Step]:
    """Op A (thread 1) enqueues corr 7; its dequeue (thread 9) runs [200, 300]; kernels launch around it."""
    marks = sorted(
        [
            *queue_event("enqueue", 7, 1, "aten::add", (10, 12)),
            *queue_event("dequeue", 7, 9, "aten::add", (200, 300)),
        ]
    )
    launches = tasks([(0, 2, 1000, 250), (0, 2, 1100, 199), (0, 2, 1200, 350), (0, 3, 1300, None)])
    other = tasks([(1, 5, 1150, 300)])
    return [
        (OPS, op_range([("B", 20, 30), ("A", 0, 100)])),
        (MARKS, op_mark(marks)),
        (at("tasks", 0), launches),
        (at("tasks", 1), other),
    ]


def test_async_npu_with_task_queue_follows_the_dequeue_window() -> None:
    """Launches inside corr 7's dequeue window link to the op that enqueued corr 7; others do not."""
    with capture_logs() as logs:
        out = drive(FrameworkOps([0, 1]), npu_scenario())
    npu = [f for f in out["flows"] if f["kind"] == "async_npu"]
    assert brief(
        npu, "flow_id", "src_pid", "src_tid", "src_ns", "dst_device_id", "dst_pid", "dst_tid", "dst_ns"
    ) == [
        (1, PID, 1, 0, 0, None, 2, 1000),
        (2, PID, 1, 0, 1, None, 5, 1150),  # the window includes its end
    ]
    entry = unmatched(logs)
    assert (entry["kernels_without_op"], entry["tasks_without_launch"]) == (2, 1)


def test_async_npu_takes_the_dequeue_window_that_ends_first() -> None:
    """torch_npu's cursor walks the dequeue events in the order their end marks come
    (``FwkCANNRelationParser.combine_kernel_dict`` over ``get_dequeue_data``): of two overlapping
    windows of two dequeue threads, a launch inside both goes to the one ending first, corr 8 here,
    whose enqueue op C starts at 50 (in start order corr 7's window, op A at 0, would come first)."""
    marks = sorted(
        [
            *queue_event("enqueue", 7, 1, "aten::add", (10, 12)),
            *queue_event("enqueue", 8, 2, "aten::mul", (60, 62)),
            *queue_event("dequeue", 7, 9, "aten::add", (200, 400)),
            *queue_event("dequeue", 8, 8, "aten::mul", (210, 300)),
        ]
    )
    steps: list[Step] = [
        (OPS, op_range([("A", 0, 40, 1), ("C", 50, 90, 2)])),
        (MARKS, op_mark(marks)),
        (at("tasks", 0), tasks([(0, 2, 1000, 250), (0, 2, 1100, 350)])),
    ]
    out = drive(FrameworkOps([0]), steps)
    npu = [f for f in out["flows"] if f["kind"] == "async_npu"]
    assert brief(npu, "src_tid", "src_ns", "dst_ns", "correlation_id") == [(2, 50, 1000, 8), (1, 0, 1100, 7)]


def test_without_flows_the_ops_are_the_same_and_no_flow_state_is_kept() -> None:
    """PTA memory's plan wants ops alone: FrameworkOps(flows=False) makes the same ops, no flows,
    and keeps no enqueue, dequeue, live-op or forward-op state for them."""
    queue = [step for step in npu_scenario() if isinstance(step, int) or step[0] in (OPS, MARKS)]
    with_flows = drive(FrameworkOps(), queue)
    lean = FrameworkOps(flows=False)
    assert lean.outputs == ("ops",)
    with capture_logs() as logs:
        without = drive(lean, queue)
    assert without == {"ops": with_flows["ops"]}
    assert with_flows["flows"]  # the scenario has queue flows to leave out
    assert all(
        not column.size for held in (lean._enq, lean._deq, lean._live, lean._fwd) for column in held.values()
    )
    assert "enqueue_without_dequeue" not in unmatched(logs)
    with pytest.raises(ValueError, match="flows=True"):
        FrameworkOps([0], flows=False)


def test_async_npu_without_task_queue_links_the_deepest_op() -> None:
    """Without op_mark data the deepest op around the launch links to the kernel."""
    op = FrameworkOps([0], task_queue=False)
    assert op.inputs == (OPS, at("tasks", 0))
    steps: list[Step] = [
        (OPS, op_range([("B", 10, 50), ("A", 0, 100)])),
        (at("tasks", 0), tasks([(0, 2, 500, 20), (0, 2, 510, 60), (0, 2, 520, 150)])),
    ]
    out = drive(op, steps)
    assert brief(out["flows"], "kind", "src_ns", "dst_ns") == [("async_npu", 10, 500), ("async_npu", 0, 510)]


def test_kernels_are_the_host_to_device_flow_ends() -> None:
    """Kernels are where msprof's HostToDevice flows end: compute tasks, MEMCPY_ASYNC tasks and
    communication ops (on their group thread), not HCCL tasks nor unnamed tasks of other types."""
    op = FrameworkOps([0], communication=[0], task_queue=False)
    assert op.inputs == (OPS, at("tasks", 0), at("comm", 0))
    launches = [(0, 2, 500, 10, "compute"), (0, 3, 510, 20, "hccl"), (0, 2, 520, 30, "unnamed")]
    launches += [(0, 2, 530, 40, "memcpy"), (0, 2, 540, None, "compute")]
    steps: list[Step] = [
        (OPS, op_range([("A", 0, 100)])),
        (at("tasks", 0), tasks(launches)),
        (at("comm", 0), comm_ops([(0, "group_a", 600, 50), (0, None, 700, 60), (0, "group_a", 800, None)])),
    ]
    with capture_logs() as logs:
        out = drive(op, steps)
    npu = brief(out["flows"], "kind", "src_ns", "dst_device_id", "dst_tid", "dst_ns", "dst_group")
    assert sorted(npu, key=lambda f: f[4]) == [
        ("async_npu", 0, 0, 2, 500, None),
        ("async_npu", 0, 0, 2, 530, None),
        ("async_npu", 0, 0, None, 600, "group_a"),
        ("async_npu", 0, 0, None, 700, "N/A"),  # no group: the Communication layer's "N/A" thread
    ]
    assert unmatched(logs)["tasks_without_launch"] == 2


def test_one_kernel_per_flow_id() -> None:
    """torch_npu's combine_acl_to_npu keeps the first ``f`` of each HostToDevice flow id: of one
    API's copies only the earliest gets an async_npu flow, even in a later batch or a snapshot apart,
    and a communication op's id goes to the op, not to the HCCL copy inside it."""
    steps = one_kernel_per_flow_id_steps()
    expected = [(500, 2), (530, 2), (570, 2), (600, None)]
    for cut in (None, 2, 3):
        make = lambda: FrameworkOps([0], communication=[0], task_queue=False)  # noqa: E731
        out = drive(make(), steps) if cut is None else drive_resumed(make, steps, cut)
        assert sorted(brief(out["flows"], "dst_ns", "dst_tid")) == expected


def test_kernels_wait_for_the_ops_before_their_launch() -> None:
    """A kernel whose launch is past the horizon waits; its op comes later in another batch."""
    op = FrameworkOps([0], task_queue=False, max_op_ns=100)
    op.push(at("tasks", 0), tasks([(0, 2, 500, 150)]))
    op.push(OPS, op_range([("early", 0, 10)]))
    assert all(name != "flows" for name, _ in op.advance(200))  # horizon 100 < launch 150
    op.push(OPS, op_range([("owner", 140, 160)]))
    flows = [r for name, b in op.advance(400) if name == "flows" for r in b.to_pylist()]
    assert brief(flows, "src_ns", "dst_ns") == [(140, 500)]


def test_kernels_far_behind_their_launch_keep_their_ops() -> None:
    """The host may run ahead of the device by more than max_op_ns: once a kernel shows that wait,
    launch targets are kept that much longer, so the kernels that wait as long still link."""
    op = FrameworkOps([0], task_queue=False, max_op_ns=100)
    op.push(OPS, op_range([("a", 0, 10), ("b", 20, 30), ("c", 40, 50)]))
    op.push(at("tasks", 0), tasks([(0, 2, 505, 5)]))  # starts 500 after its launch
    flows = [r for name, b in op.advance(520) if name == "flows" for r in b.to_pylist()]
    op.push(at("tasks", 0), tasks([(0, 2, 625, 25), (0, 2, 745, 45)]))
    flows += [r for name, b in op.advance(800) if name == "flows" for r in b.to_pylist()]
    with capture_logs() as logs:
        flows += [r for name, b in op.finish() if name == "flows" for r in b.to_pylist()]
    assert brief(flows, "src_ns", "dst_ns") == [(0, 505), (20, 625), (40, 745)]
    assert unmatched(logs)["kernels_without_op"] == 0


@st.composite
def end_ordered_ops(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Ops of two threads' call stacks (nested, never longer than 100), as recorded: by end."""
    rows = []
    for tid in (1, 2):
        at_ = draw(st.integers(0, 20))
        for k in range(draw(st.integers(0, 6))):
            length = draw(st.integers(2, 100))
            rows.append((f"t{tid}op{k}", at_, at_ + length, tid))
            inner = at_ + draw(st.integers(0, length // 2))
            if draw(st.booleans()):
                rows.append(
                    (f"t{tid}op{k}child", inner, inner + draw(st.integers(0, length - (inner - at_))), tid)
                )
            at_ += length + draw(st.integers(0, 30))
    return sorted(rows, key=lambda r: r[2])


@settings(max_examples=60, deadline=None)
@given(end_ordered_ops(), st.lists(st.integers(1, 5), max_size=6))
def test_any_batching_gives_the_one_shot_output(
    rows: list[tuple[str, int, int, int]], sizes: list[int]
) -> None:
    """Records in end order, cut anywhere, advanced to their latest end: the output of one batch."""
    one_shot = drive(FrameworkOps(max_op_ns=100), [(OPS, op_range(rows))] if rows else [])
    steps: list[Step] = []
    done = 0
    for size in [*sizes, len(rows)]:
        part = rows[done : done + size]
        if part:
            steps += [(OPS, op_range(part)), max(r[2] for r in part)]
        done += len(part)
    batched = drive(FrameworkOps(max_op_ns=100), steps)
    assert batched == one_shot


# ----------------------------------------------------------------------------- snapshots


def mixed_steps() -> list[Step]:
    """Several threads, queue events, kernels and sequence numbers, in batches with watermarks."""
    rng = np.random.default_rng(7)
    steps: list[Step] = []
    corr = 0
    for block in range(6):
        base = block * 1000
        ops, marks, launches = [], [], []
        for k in range(8):
            start = base + k * 110 + int(rng.integers(0, 20))
            end = start + 60 + int(rng.integers(0, 30))
            seq = block * 8 + k
            ops.append((f"aten::op{k % 3}", start, end, 1, seq, 0))
            ops.append((f"bwd{k}", start + 5, start + 20, 2, seq - 8, 1))
            marks += queue_event("enqueue", corr, 1, f"aten::op{k % 3}", (start + 30, start + 40))
            marks += queue_event("dequeue", corr, 9, f"aten::op{k % 3}", (start + 45, start + 95))
            launches.append((0, 2, start + 120, start + 50 + int(rng.integers(0, 50))))
            corr += 1
        ops.append((f"ProfilerStep#{block}", base, base + 990, 1, -1, 0))
        ops.sort(key=lambda r: r[2])  # records come at op end
        steps += [
            (OPS, op_range(ops)),
            (MARKS, op_mark(sorted(marks))),
            (at("tasks", 0), tasks(launches)),
            base + 500,
        ]
    return steps


@pytest.mark.parametrize("cut", [1, 4, 9, 14, 23])
def test_snapshot_round_trip(cut: int) -> None:
    """Snapshot after any step, restore into a fresh operator: the output is the uninterrupted one."""

    def make() -> Any:
        return FrameworkOps([0], max_op_ns=400)

    whole = drive(make(), mixed_steps())
    assert {f["kind"] for f in whole["flows"]} == {"async_task_queue", "async_npu", "fwdbwd"}
    assert drive_resumed(make, mixed_steps(), cut) == whole


def test_a_large_release_is_emitted_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """One emit step turns about ``EMIT_OPS`` ops into rows; slicing changes no op and no flow, only
    where the ops are cut into batches."""

    def make() -> Any:
        return FrameworkOps([0], max_op_ns=400)

    steps = [s for s in mixed_steps() if not isinstance(s, int)]  # all released at the end, at once
    whole, stepped = drive(make(), steps), drive(make(), mixed_steps())
    monkeypatch.setattr(framework_ops, "EMIT_OPS", 4)
    assert drive(make(), steps) == whole
    assert drive(make(), mixed_steps()) == stepped
    sliced = make()
    for step in steps:
        sliced.push(*step)
    batches = [b for name, b in sliced.finish() if name == "ops"]
    assert len(batches) > 20 and max(b.num_rows for b in batches) <= 4


# ----------------------------------------------------------------------------- a simulated run


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out, truth = tmp_path_factory.mktemp("sim"), tmp_path_factory.mktemp("truth")
    simulate(SimulationConfig(chip="910B", steps=3, framework="torch_npu"), out, truth)
    return out, truth


def truth_tasks(collection: Any, fs: FeedSet, truth: Path) -> pa.Table:
    """Device tasks with the launch time of their runtime task_track record (the tasks join's role)."""
    track = pa.Table.from_batches(list(fs.feed(collection.host, "task_track").batches))
    key = ["stream_id", "task_id", "batch_id"]
    track = track.select([*key, "time_ns"]).cast(
        pa.schema([(k, pa.int64()) for k in key] + [("time_ns", pa.int64())])
    )
    device = pq.read_table(truth / "tasks.parquet")
    texts = ("op_name", "task_type", "ge_task_type")
    device = device.select(["device_id", *key, "start_ns", "end_ns", *texts])
    device = device.cast(
        pa.schema(
            [("device_id", pa.int32())]
            + [(k, pa.int64()) for k in key]
            + [("start_ns", pa.int64()), ("end_ns", pa.int64())]
            + [(t, pa.string()) for t in texts]
        )
    )
    joined = device.join(track, key).sort_by("start_ns")
    return joined


def test_simulated_run(simulated: tuple[Path, Path]) -> None:
    """Ops = op_range records; each enqueue pairs with its dequeue; kernels link to their torch op."""
    out_dir, truth = simulated
    collection = profstream.open(out_dir).collections[0]
    assert collection.framework is not None and collection.host is not None
    fs = FeedSet(collection)
    joined = truth_tasks(collection, fs, truth)
    ge_type = joined.column("ge_task_type")
    task_batch = conform(
        tasks_schema(),
        {c: joined.column(c) for c in ("device_id", "stream_id", "task_id", "batch_id", "start_ns", "end_ns")}
        | {
            "launch_ns": joined.column("time_ns"),
            "connection_id": pa.array(np.arange(joined.num_rows) + 1),
            "op_name": joined.column("op_name"),
            "task_type": pc.if_else(pc.equal(ge_type, "-"), None, ge_type),
            "host_task_type": joined.column("task_type"),
        },
    )
    feeds = [
        fs.feed(collection.framework, OPS),
        fs.feed(collection.framework, MARKS),
        Feed(
            at("tasks", 0),
            iter(pa.Table.from_batches([task_batch]).to_batches(max_chunksize=100)),
            "start_ns",
        ),
    ]
    got: dict[str, list[pa.RecordBatch]] = collections.defaultdict(list)
    with capture_logs() as logs:
        for name, batch in Pipeline(feeds, [FrameworkOps([0])]).run(["ops", "flows"]):
            got[name].append(batch)
    ops = pa.Table.from_batches(got["ops"])
    flows = pa.Table.from_batches(got["flows"])
    counts = pq.read_table(truth / "counts.parquet").to_pylist()
    records = {r["family"]: r["records"] for r in counts if r["device_id"] == -1}
    kind = ops.column("kind").cast(pa.string()).to_pylist()
    assert kind.count("cpu_op") == records[OPS]
    assert kind.count("enqueue") == kind.count("dequeue") == records[MARKS] // 4
    assert ops.column("op_id").to_pylist() == list(range(ops.num_rows))
    assert pc.all(
        pc.greater_equal(pc.subtract(ops["start_ns"].slice(1), ops["start_ns"].slice(0, ops.num_rows - 1)), 0)
    ).as_py()

    rows = ops.to_pylist()
    by_id = {r["op_id"]: r for r in rows}
    steps = {r["op_id"] for r in rows if r["name"].startswith("ProfilerStep#")}
    assert len(steps) == 3
    for r in rows:
        if r["kind"] == "cpu_op" and r["op_id"] not in steps:
            assert r["parent_id"] in steps  # one level of ops under each step
        if r["kind"] == "enqueue":  # the op that enqueued it, on its thread
            parent = by_id[r["parent_id"]]
            assert r["name"] == "Enqueue" and parent["tid"] == r["tid"]
    queue = flows.filter(pc.equal(flows["kind"].cast(pa.string()), "async_task_queue"))
    enqueued = sorted(r["correlation_id"] for r in rows if r["kind"] == "enqueue")
    assert sorted(queue.column("flow_id").to_pylist()) == enqueued

    # every kernel launched inside a dequeue window links to the op whose enqueue has that window's id
    dequeues = sorted(
        (r["start_ns"], r["end_ns"], r["correlation_id"]) for r in rows if r["kind"] == "dequeue"
    )
    owner = {r["correlation_id"]: by_id[r["parent_id"]] for r in rows if r["kind"] == "enqueue"}
    expected = []
    for task in joined.to_pylist():  # msprof's HostToDevice ends but HCCL tasks: compute ops, MEMCPY_ASYNC
        hccl = task["ge_task_type"] in ("HCCL", "HCCL_AI_CPU")
        if hccl or not (task["op_name"] is not None or task["task_type"] == "MEMCPY_ASYNC"):
            continue
        inside = [c for s, e, c in dequeues if s <= task["time_ns"] <= e]
        if inside:
            expected.append((owner[inside[0]]["start_ns"], task["stream_id"], task["start_ns"]))
    npu = flows.filter(pc.equal(flows["kind"].cast(pa.string()), "async_npu")).to_pylist()
    assert sorted((f["src_ns"], f["dst_tid"], f["dst_ns"]) for f in npu) == sorted(expected)
    assert len(expected) > records[OPS] // 2
    entry = unmatched(logs)
    assert entry["marks_without_start"] == entry["starts_never_ended"] == entry["late_ops"] == 0


_SIDE = st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(0, 20)))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), _SIDE, _SIDE), max_size=30),
    st.lists(st.tuples(st.integers(0, 8), _SIDE, _SIDE), min_size=1, max_size=30),
)
def test_merging_sequences_equals_reducing_them_together(
    held_rows: list[tuple[int, Any, Any]], new_rows: list[tuple[int, Any, Any]]
) -> None:
    """The forward/backward op kept per sequence number: merging a batch into the held rows gives what
    reducing the held and new rows at once gives (later op wins, the first seen on a tie)."""

    def columns(rows: list[tuple[int, Any, Any]]) -> dict[str, np.ndarray]:
        out: dict[str, list[int]] = collections.defaultdict(list)
        for seq, *sides in rows:
            out["seq"].append(seq)
            for side, value in zip(("fwd", "bwd"), sides, strict=True):
                tid, ts = value if value is not None else (framework_ops.NULL, framework_ops.NULL)
                out[f"{side}_pid"].append(framework_ops.NULL if value is None else 1)
                out[f"{side}_tid"].append(tid)
                out[f"{side}_ts"].append(ts)
        return {name: np.asarray(out[name], np.int64) for name in framework_ops._FWD}

    held = framework_ops._latest_per_sequence(columns(held_rows))
    new = columns(new_rows)
    merged = framework_ops._merge_sequences(held, framework_ops._latest_per_sequence(new))
    expected = framework_ops._latest_per_sequence(columns(held_rows + new_rows))
    assert {k: v.tolist() for k, v in merged.items()} == {k: v.tolist() for k, v in expected.items()}
