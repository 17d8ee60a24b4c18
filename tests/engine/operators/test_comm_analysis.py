"""CommAnalysis: msprof's per-op communication time info and link transfers (hand-derived values)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import profstream
from profstream.engine.operators.comm_analysis import CommAnalysis
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.comm_inputs import ALL_REDUCE, SEND, comm_ops, comm_tasks
from tests.engine.operators.harness import Step, check_snapshot, drive, table


def _run(tasks: pa.RecordBatch, ops: pa.RecordBatch) -> tuple[list[dict], list[dict]]:
    out = drive(CommAnalysis(0), [("comm_tasks@0", tasks, 5), ("comm@0", ops, 10)])
    op_rows, links = table(out, "comm_ops@0"), table(out, "comm_links@0")
    assert op_rows is not None and links is not None
    return op_rows.to_pylist(), links.to_pylist()


def test_time_info_follows_msprof_rules() -> None:
    ops, _ = _run(comm_tasks(), comm_ops())
    reduce, send = ops
    # all-reduce, master tasks only: wait 2000 (before the first copy: sync) + 1000; transit = the
    # HCCS copy 2000 (the on-chip copy and the plane-1 copy do not count); idle = 10000 - 2000 - 3000
    assert (reduce["transit_ns"], reduce["wait_ns"], reduce["synchronization_ns"]) == (2000, 3000, 2000)
    assert reduce["idle_ns"] == 5000
    # send: one payload group of two payloads closed by RDMASend + Notify_Wait (jump 3): 20000..25000;
    # the Notify_Wait inside the group is no wait
    assert (send["transit_ns"], send["wait_ns"], send["synchronization_ns"]) == (5000, None, None)
    assert send["idle_ns"] == 5000


def test_null_master_flags_count_as_master_tasks() -> None:
    ops, _ = _run(comm_tasks(master=False), comm_ops())
    assert ops[0]["transit_ns"] == 3000  # the plane-1 copy counts now
    assert ops[0]["idle_ns"] == 4000


def test_links_per_transport_in_first_transfer_order() -> None:
    _, links = _run(comm_tasks(), comm_ops())
    got = [(r["op_name"], r["src_rank"], r["dst_rank"], r["transport_type"]) for r in links]
    assert got == [
        (ALL_REDUCE, 0, 1, "HCCS"),
        (ALL_REDUCE, 0, 0, "LOCAL"),  # on chip; remote 0xffffffff is the local rank
        (ALL_REDUCE, 0, 2, "HCCS"),  # plane 1 comes after plane 0
        (SEND, 0, 8, "RDMA"),
    ]
    hccs, local, _, rdma = links
    assert (hccs["size_bytes"], hccs["transit_ns"], hccs["bandwidth_gbps"]) == (2_000_000, 2000, 1000.0)
    assert (hccs["packets"], hccs["large_packets"]) == (1, 0)  # 2 MB is not above HCCS's 32 MB
    assert local["large_packets"] == 1  # LOCAL has no threshold: every transfer is large
    assert (rdma["size_bytes"], rdma["transit_ns"], rdma["large_packets"]) == (4_000_000, 5000, 1)
    assert (rdma["packet_sizes"], rdma["packet_counts"], rdma["packet_transit_ns"]) == (
        [4_000_000],
        [1],
        [5000],
    )


def test_rdma_type_column_decides_payloads() -> None:
    payload = ["RDMASendPayload", "RDMASendNotify", "RDMASendNotify", "RDMASendNotify"]
    ops, links = _run(comm_tasks((SEND,), rdma_type=payload), comm_ops((SEND,)))
    # one payload: the group closes at the third task (20300); the Notify_Wait after it is a wait,
    # not a synchronization (a transit came first)
    assert (ops[0]["transit_ns"], ops[0]["wait_ns"], ops[0]["synchronization_ns"]) == (300, 4700, None)
    assert (links[0]["size_bytes"], links[0]["transit_ns"]) == (3_000_000, 300)


def test_payload_group_without_closing_tasks_is_skipped() -> None:
    # two payloads, no closing RDMASend/Notify_Wait
    tasks = comm_tasks((SEND,), rdma_type=["RDMASendPayload"] * 2 + [None] * 2).slice(0, 2)
    ops, links = _run(tasks, comm_ops((SEND,)))
    assert ops[0]["transit_ns"] is None
    assert links == []


def test_tasks_without_an_op_are_dropped_and_counted() -> None:
    op = CommAnalysis(0)
    out = drive(op, [("comm_tasks@0", comm_tasks(), 5), ("comm@0", comm_ops((SEND,)), 10)])
    links = table(out, "comm_links@0")
    assert links is not None
    assert set(links.column("op_name").to_pylist()) == {SEND}
    assert op._counts["tasks_without_op"] == 5


def test_ops_wait_for_the_task_batch_that_follows_them() -> None:
    # Communication emits an op batch, then its tasks; a last stage in the writer may advance between
    # the two messages, and the ops must not go out without their tasks
    together = drive(CommAnalysis(0), [("comm@0", comm_ops(), 10), ("comm_tasks@0", comm_tasks(), 10)])
    op = CommAnalysis(0)
    first = op.push("comm@0", comm_ops()) or op.advance(10)
    assert first == []  # no task batch came after the ops yet
    split = drive(op, [("comm_tasks@0", comm_tasks(), 10)], finish=False)
    assert op._counts["tasks_without_op"] == 0
    for stream in ("comm_ops@0", "comm_links@0"):
        assert table(split, stream) == table(together, stream)
    ops = table(split, "comm_ops@0")
    assert ops is not None
    assert ops.column("transit_ns").to_pylist() == [2000, 5000]
    assert op.finish() == []


def test_tasks_wait_for_an_op_batch_after_them_and_an_op_without_tasks_goes_out_after_a_task_batch() -> None:
    op = CommAnalysis(0)
    drive(op, [("comm_tasks@0", comm_tasks((ALL_REDUCE,)), 5)], finish=False)
    assert op._counts["tasks_without_op"] == 0  # its op may still come
    out = drive(op, [("comm@0", comm_ops((SEND,)), 10)], finish=False)
    assert out == []  # SEND waits for a task batch; ALL_REDUCE's tasks saw an op batch without their op
    assert op._counts["tasks_without_op"] == 5
    out = drive(op, [("comm_tasks@0", comm_tasks((SEND,)).slice(0, 0), 12)], finish=False)
    assert out == []  # an empty batch is no batch: the pipeline routes none
    out = drive(op, [("comm_tasks@0", comm_tasks((ALL_REDUCE,)), 15)], finish=False)
    ops = table(out, "comm_ops@0")
    assert ops is not None
    assert ops.to_pylist()[0]["op_name"] == SEND
    assert ops.to_pylist()[0]["transit_ns"] is None  # a task batch came after it with none of its tasks
    drive(op, [], finish=True)
    assert op._counts["tasks_without_op"] == 10  # the second ALL_REDUCE batch never got its op


def test_snapshot_round_trip() -> None:
    steps: list[Step] = [
        ("comm_tasks@0", comm_tasks((ALL_REDUCE,)), 5),
        ("comm@0", comm_ops((ALL_REDUCE,)), 10),
        ("comm_tasks@0", comm_tasks((SEND,)), 15),
        ("comm@0", comm_ops((SEND,)), 20),
    ]
    for cut in range(len(steps) + 1):
        check_snapshot(lambda: CommAnalysis(0), steps, cut, ("comm_ops@0", "comm_links@0"))


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate(SimulationConfig(chip="910B", steps=3, framework="torch_npu"), out / "prof", out / "truth")
    return next((out / "prof").iterdir())


def test_simulated_ops_match_their_tasks(simulated: Path) -> None:
    handle = profstream.open(simulated)
    ops = handle.table("comm_ops").read_all()
    links = handle.table("comm_links").read_all()
    tasks = handle.table("comm_tasks").read_all()
    assert ops.num_rows > 0
    for op in ops.to_pylist():
        own = tasks.filter(pc.equal(tasks.column("op_name"), op["op_name"]))
        dur = pc.subtract(own.column("end_ns"), own.column("start_ns"))
        names = own.column("name").cast(pa.string())
        copies = pc.sum(dur.filter(pc.equal(names, "Memcpy"))).as_py() or None
        waits = own.filter(pc.equal(names, "Notify_Wait"))
        first_copy = pc.min(own.filter(pc.equal(names, "Memcpy")).column("start_ns")).as_py()
        assert op["transit_ns"] == copies
        assert op["wait_ns"] == (pc.sum(dur.filter(pc.equal(names, "Notify_Wait"))).as_py() or None)
        before = waits.filter(pc.less(waits.column("start_ns"), first_copy))
        expected_sync = pc.sum(pc.subtract(before.column("end_ns"), before.column("start_ns"))).as_py()
        assert op["synchronization_ns"] == expected_sync
        assert op["idle_ns"] == op["end_ns"] - op["start_ns"] - (copies or 0) - (op["wait_ns"] or 0)
        mine = links.filter(pc.equal(links.column("op_name"), op["op_name"]))
        sizes = own.filter(pc.equal(names, "Memcpy")).column("size_bytes")
        assert pc.sum(mine.column("size_bytes")).as_py() == pc.sum(sizes).as_py()
