"""OperatorDetails: host/device self and total durations of the torch op tree (hand-built and simulated)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import profstream
from profstream.engine.operators.framework_ops import FrameworkOps
from profstream.engine.operators.operator_details import OperatorDetails
from profstream.engine.runtime import DONE
from profstream.engine.schema import TABLES, conform
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.framework_inputs import one_kernel_per_flow_id_steps
from tests.engine.operators.harness import Step, check_snapshot, drive, table

# (op_id, parent_id, kind, name, start, end): a step with ops A (child B) and C; an enqueue under B
OPS: list[tuple[Any, ...]] = [
    (0, None, "cpu_op", "ProfilerStep#1", 0, 1000),
    (1, 0, "cpu_op", "A", 10, 500),
    (2, 1, "cpu_op", "B", 20, 100),
    (3, 2, "enqueue", "Enqueue", 30, 40),
    (4, 0, "cpu_op", "C", 600, 900),
    (5, None, "cpu_op", "D", 2000, 2100),
]
# (device, stream, start, end, task type): k1 k2 k3 k4 (k3, k4 share a key)
TASKS = [
    (0, 1, 150, 200, "AI_CORE"),
    (0, 1, 200, 230, "AI_VECTOR_CORE"),
    (0, 2, 700, 720, "AI_CORE"),
    (0, 2, 700, 720, "AI_CPU"),
    (0, 1, 5000, 5100, "AI_CORE"),  # never flowed
    (0, 3, 650, 660, "HCCL"),  # an HCCL task: not a kernel (its communication op is)
]
# a communication op of device 0: (start, end)
COMM_OP = (640, 690)
# (src op start, task index, or None for the communication op)
FLOWS: list[tuple[int, int | None]] = [(20, 0), (10, 1), (600, 2), (600, 3), (600, None)]


def ops_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    return conform(
        TABLES["ops"],
        {
            "op_id": pa.array(cols[0], pa.int64()),
            "parent_id": pa.array(cols[1], pa.int64()),
            "kind": pa.array(cols[2], pa.string()),
            "name": pa.array(cols[3], pa.string()),
            "pid": [7] * n,
            "tid": [8] * n,
            "start_ns": pa.array(cols[4], pa.int64()),
            "end_ns": pa.array(cols[5], pa.int64()),
            "input_shapes": pa.array([f"{i},2" for i in cols[0]], pa.string()),
        },
    )


def tasks_batch() -> pa.RecordBatch:
    cols = list(zip(*TASKS, strict=True))
    return conform(
        TABLES["tasks"],
        {
            "device_id": pa.array(cols[0], pa.int32()),
            "stream_id": pa.array(cols[1], pa.int32()),
            "start_ns": pa.array(cols[2], pa.int64()),
            "end_ns": pa.array(cols[3], pa.int64()),
            "task_type": pa.array(cols[4], pa.string()),
            "op_name": pa.array([f"op{i}" for i in range(len(TASKS))], pa.string()),
            "connection_id": pa.array(range(len(TASKS)), pa.int64()),
            "launch_ns": pa.array([start - 100 for start in cols[2]], pa.int64()),
        },
    )


def comm_batch() -> pa.RecordBatch:
    return conform(
        TABLES["comm"],
        {
            "device_id": pa.array([0], pa.int32()),
            "op_name": ["hcom_allReduce__1"],
            "group_name": ["g"],
            "start_ns": [COMM_OP[0]],
            "end_ns": [COMM_OP[1]],
            "connection_id": [99],
            "launch_ns": [600],
        },
    )


def flows_batch() -> pa.RecordBatch:
    n = len(FLOWS)
    return conform(
        TABLES["flows"],
        {
            "kind": pa.array(["async_npu"] * n, pa.string()),
            "flow_id": list(range(n)),
            "src_pid": [7] * n,
            "src_tid": [8] * n,
            "src_ns": [s for s, _ in FLOWS],
            "dst_device_id": pa.array([0] * n, pa.int32()),
            "dst_tid": pa.array([None if t is None else TASKS[t][1] for _, t in FLOWS], pa.int64()),
            "dst_ns": [COMM_OP[0] if t is None else TASKS[t][2] for _, t in FLOWS],
            "dst_group": pa.array(["g" if t is None else None for _, t in FLOWS], pa.string()),
        },
    )


STEPS: list[Step] = [
    ("tasks@0", tasks_batch(), 0),
    ("comm@0", comm_batch(), 0),
    ("ops", ops_batch(OPS), 0),
    ("flows", flows_batch(), 500),
    ("flows", None, 1001),
    ("flows", None, 2101),
]


def test_hand_built_tree() -> None:
    op = OperatorDetails([0], communication=[0])
    out = drive(op, STEPS)
    assert op._counts["tasks_without_flow"] == 1  # the unflowed AI_CORE task; the HCCL task is no kernel
    got = table(out)
    assert got is not None
    rows = {r["name"]: r for r in got.to_pylist()}
    assert list(rows) == ["A", "B", "C", "D"]  # op order, ProfilerStep left out
    a, b, c, d = (rows[k] for k in "ABCD")
    assert (a["host_total_ns"], a["host_self_ns"]) == (490, 410)  # minus B (80); the enqueue is no child
    assert (a["device_self_ns"], a["device_total_ns"]) == (30, 80)
    assert (a["device_self_aicore_ns"], a["device_total_aicore_ns"]) == (0, 50)
    assert (b["device_self_ns"], b["device_total_ns"], b["device_total_aicore_ns"]) == (50, 50, 50)
    # both tasks of one key, and the communication op once with its own duration
    assert (c["device_self_ns"], c["device_self_aicore_ns"]) == (40 + 50, 20)
    assert (d["device_total_ns"], d["host_self_ns"]) == (0, 100)
    assert {r["device_id"] for r in rows.values()} == {0}
    assert a["input_shapes"] == "1,2"
    # torch_npu's float µs sums, kernel by kernel in start order: the communication op (640) before k3
    # and k4 (700), and Python's 0.05 + 0.02 + 0.02 leaves a residue that 0.02 + 0.02 + 0.05 does not
    assert repr(c["device_self_us"]) == "0.09000000000000001"
    assert (c["device_self_aicore_us"], a["device_self_us"], a["device_total_us"]) == (
        0.02,
        0.03,
        0.05 + 0.03,
    )
    assert (a["device_self_aicore_us"], a["device_total_aicore_us"]) == (None, 0.05)  # sum([]) is 0
    assert (d["device_self_us"], d["device_total_us"]) == (None, None)


def test_subtree_waits_for_its_root_to_end() -> None:
    op = OperatorDetails([0], [0])
    assert drive(op, STEPS[:3], finish=False) == []  # the step root ends at 1000
    first = table(op.advance(1001))
    assert first is not None
    assert first.column("name").to_pylist() == ["A", "B", "C"]
    assert table(op.advance(2101)) is not None
    assert op.finish() == []


def test_unmatched_flows_and_late_ops_are_counted() -> None:
    op = OperatorDetails([0], [0])
    late = ops_batch([(9, 0, "cpu_op", "late", 300, 310)])
    drive(op, [*STEPS, ("ops", late, DONE)])
    assert op._counts["late_ops"] == 1
    stray = flows_batch().slice(0, 1)
    op = OperatorDetails([0], [0])
    drive(op, [("flows", stray, 10)])
    assert op._counts["flows_without_task"] == 1


def test_snapshot_round_trip() -> None:
    for cut in range(len(STEPS) + 1):
        check_snapshot(lambda: OperatorDetails([0], [0]), STEPS, cut)


def test_one_kernel_per_flow_id() -> None:
    """An op's device time counts the first kernel of each flow id (torch_npu's combine_acl_to_npu keeps
    the first ``f``), and a communication op, not the HCCL copy with its id: copies 500, 530, 570
    (5 ns each) and the op (50 ns), not the later copies 520, 580 nor the HCCL copy 540."""
    inputs = one_kernel_per_flow_id_steps()
    framework = FrameworkOps([0], communication=[0], task_queue=False)
    for stream, batch in inputs:
        framework.push(stream, batch)
    pushes: list[Step] = [(s, b, 0) for s, b in inputs if s != "torch_op_range"]
    pushes += [(name, batch, 0) for name, batch in framework.finish()]
    got = table(drive(OperatorDetails([0], [0]), pushes))
    assert got is not None
    (row,) = got.to_pylist()
    assert (row["name"], row["device_self_ns"], row["device_self_us"]) == (
        "A",
        65,
        0.005 + 0.005 + 0.005 + 0.05,
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate(SimulationConfig(chip="910B", steps=3, framework="torch_npu"), out / "prof", out / "truth")
    return next((out / "prof").iterdir())


def test_simulated_totals_match_the_flows(simulated: Path) -> None:
    handle = profstream.open(simulated)
    ops = [o for o in handle.table("ops").read_all().to_pylist() if o["kind"] == "cpu_op"]
    flows = [f for f in handle.table("flows").read_all().to_pylist() if f["kind"] == "async_npu"]
    tasks = handle.table("tasks").read_all().to_pylist()
    details = {r["op_id"]: r for r in handle.table("operator_details").read_all().to_pylist()}
    comm = handle.table("comm").read_all().to_pylist()
    kernels = {(t["device_id"], t["stream_id"], t["start_ns"]): t for t in tasks}
    kernels |= {(c["device_id"], None, c["start_ns"]): c for c in comm}  # a communication op: no stream
    by_source = {(o["pid"], o["tid"], o["start_ns"]): o["op_id"] for o in ops}  # later (deeper) wins
    own: dict[int, int] = defaultdict(int)
    own_kernels: dict[int, list[tuple[int, int]]] = defaultdict(list)  # (start, duration)
    for flow in flows:
        task = kernels[flow["dst_device_id"], flow["dst_tid"], flow["dst_ns"]]
        source = by_source[flow["src_pid"], flow["src_tid"], flow["src_ns"]]
        own[source] += task["end_ns"] - task["start_ns"]
        own_kernels[source].append((task["start_ns"], task["end_ns"] - task["start_ns"]))
    children: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for o in ops:
        children[o["parent_id"]].append(o)

    def subtree(op_id: int) -> int:
        return own[op_id] + sum(subtree(c["op_id"]) for c in children[op_id])

    def subtree_kernels(op_id: int) -> list[tuple[int, int]]:
        return own_kernels[op_id] + [k for c in children[op_id] for k in subtree_kernels(c["op_id"])]

    def float_sum(listed: list[tuple[int, int]]) -> float | None:
        """torch_npu's ``sum([float(kernel.dur) ...])`` of µs in start order (None: ``sum([])``)."""
        total = None
        for _, ns in sorted(listed, key=lambda k: k[0]):
            total = ns / 1000 if total is None else total + ns / 1000
        return total

    assert flows and len(details) == sum(1 for o in ops if "ProfilerStep#" not in o["name"])
    for o in ops:
        if "ProfilerStep#" in o["name"]:
            assert o["op_id"] not in details
            continue
        row = details[o["op_id"]]
        duration = o["end_ns"] - o["start_ns"]
        assert row["host_total_ns"] == duration
        assert row["host_self_ns"] == duration - sum(
            c["end_ns"] - c["start_ns"] for c in children[o["op_id"]]
        )
        assert row["device_self_ns"] == own[o["op_id"]]
        assert row["device_total_ns"] == subtree(o["op_id"])
        assert row["device_self_us"] == float_sum(own_kernels[o["op_id"]])
        assert row["device_total_us"] == float_sum(subtree_kernels(o["op_id"]))
    roots = [o for o in ops if o["parent_id"] is None and "ProfilerStep#" not in o["name"]]
    assert all(details[r["op_id"]]["device_total_ns"] == subtree(r["op_id"]) for r in roots)
    assert sum(own.values()) > 0
    # the kernels are msprof's HostToDevice flow ends but HCCL tasks (a communication op's flow goes to
    # the op), and communication ops (once each)
    targets = [kernels[f["dst_device_id"], f["dst_tid"], f["dst_ns"]] for f in flows]
    assert not [t for t in targets if t.get("task_type") in ("HCCL", "HCCL_AI_CPU")]
    assert 0 < sum(1 for f in flows if f["dst_tid"] is None) <= len(comm)
