"""Communication: HCCL ops and tasks from hand-built records, then the simulated all-reduces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from profstream.engine import schema
from profstream.engine.operators import comm as comm_module
from profstream.engine.operators.api import COMMUNICATION_LEVEL, NODE_LEVEL, RUNTIME_LEVEL, ApiEvents
from profstream.engine.operators.comm import Communication
from profstream.engine.operators.host_join import HostJoin
from profstream.engine.runtime import DONE, Operator, Pipeline
from tests.engine.operators.harness import Step, check_snapshot, table
from tests.engine.operators.host_batches import (
    OneOutput,
    Recorder,
    Simulated,
    apis,
    dictionaries,
    hccl_infos,
    hccl_op_infos,
    launches,
    rows,
)

T = 1
OP_A, OP_B, GROUP, ALG, WAIT, COPY, RECORD = 401, 402, 501, 502, 601, 602, 603
NOTIFY_WAIT, MEMCPY, NOTIFY_RECORD = 14, 5, 15
MASTER, SLAVE = 0x10001, 0x10002
NAMES = dictionaries(
    {
        OP_A: "hcom_allReduce_0",
        OP_B: "hcom_broadcast_1",
        GROUP: "hccl_world_group",
        ALG: "RING-NHR",
        WAIT: "Notify_Wait",
        COPY: "Memcpy",
        RECORD: "Notify_Record",
    },
    [
        (RUNTIME_LEVEL, NOTIFY_WAIT, "NOTIFY_WAIT"),
        (RUNTIME_LEVEL, MEMCPY, "MEMCPY_ASYNC"),
        (RUNTIME_LEVEL, NOTIFY_RECORD, "NOTIFY_RECORD"),
        (NODE_LEVEL, 5, "launch"),
        (COMMUNICATION_LEVEL, MASTER, "master"),
        (COMMUNICATION_LEVEL, SLAVE, "slave"),
    ],
)
ALL_ONES = 0xFFFF_FFFF_FFFF_FFFF


def tasks(
    rows_: Sequence[tuple[int, int, int, int, int]], connection: int, op_type: str | None = None
) -> pa.RecordBatch:
    """``tasks@0`` rows (stream, task, batch, start, end) of one HCCL op."""
    stream, task, batch, start, end = (list(c) for c in zip(*rows_, strict=True))
    n = len(rows_)
    return schema.conform(
        schema.tasks_schema(),
        {
            "device_id": pa.array(np.zeros(n, np.int32)),
            "stream_id": pa.array(stream),
            "task_id": pa.array(task),
            "batch_id": pa.array(batch),
            "context_id": pa.array(np.full(n, schema.NO_ID)),
            "start_ns": pa.array(start),
            "end_ns": pa.array(end),
            "task_type": pa.array(["HCCL"] * n),
            "op_type": pa.array([op_type] * n, pa.string()),
            "model_id": pa.array(np.full(n, 7)),
            "connection_id": pa.array(np.full(n, connection)),
        },
    )


def info(time: int, item: int, **fields: int) -> dict[str, int]:
    return {
        "thread_id": T,
        "time": time,
        "item_hash": item,
        "group_name_hash": GROUP,
        "rank_size": 8,
        **fields,
    }


def _comm(*steps: Step, **options: Any) -> tuple[pa.Table | None, pa.Table | None, Communication]:
    """ApiEvents feeding Communication of device 0 (api_event batches go to ApiEvents)."""
    names, comm = ApiEvents(NAMES), Communication(0, NAMES, **options)
    out = []
    for stream, batch, watermark in steps:
        if batch is not None:
            (names if stream == "api_event" else comm).push(stream, batch)
        for name, api in names.advance(watermark):
            comm.push(name, api)
        out += comm.advance(watermark)
    for name, api in names.finish():
        comm.push(name, api)
    out += comm.finish()
    return table(out, "comm@0"), table(out, "comm_tasks@0"), comm


def _op_a(node_start: int = 100) -> list[Step]:
    """Op A: three tasks on a master plane and one on a slave plane, with their infos and op info."""
    t = node_start
    return [
        (
            "api_event",
            apis(
                [
                    (NODE_LEVEL, 5, T, t, t + 400, OP_A),
                    (COMMUNICATION_LEVEL, MASTER, T, t + 10, t + 200, OP_A),
                    (COMMUNICATION_LEVEL, SLAVE, T, t + 210, t + 390, OP_A),
                ]
            ),
            0,
        ),
        (
            "task_track",
            launches(
                [
                    (T, t + 50, 6, 1, 0, NOTIFY_WAIT),
                    (T, t + 100, 6, 2, 0, MEMCPY),
                    (T, t + 150, 6, 3, 0, NOTIFY_RECORD),
                    (T, t + 250, 7, 1, 0, NOTIFY_WAIT),
                ]
            ),
            0,
        ),
        (
            "hccl_info",
            hccl_infos(
                [
                    info(t + 50, WAIT, plane_id=0, notify_id=0x1001, local_rank=2, remote_rank=3),
                    info(
                        t + 100,
                        COPY,
                        notify_id=ALL_ONES,
                        data_size=1024,
                        transport_type=1,
                        link_type=3,
                        rdma_type=1,
                        data_type=4,
                        duration_estimated=5,
                    ),
                    info(t + 150, RECORD, notify_id=0x1002),
                    info(t + 250, WAIT, plane_id=1, rank_size=4),
                ]
            ),
            0,
        ),
        ("hccl_op_info", hccl_op_infos([(T, t + 5, True, False, 3, ALG, 1000, GROUP)]), 0),
    ]


def test_an_op_spans_its_master_tasks_and_its_tasks_carry_their_infos() -> None:
    device = tasks(
        [(7, 1, 0, 900, 1500), (6, 1, 0, 1000, 1100), (6, 2, 0, 1100, 1400), (6, 3, 0, 1400, 1410)],
        0,
        "HcomAllReduce",
    )
    ops, task_rows, comm = _comm(*_op_a(), ("tasks@0", device, DONE))
    # connection ids in start order: node 0, master 1, slave 2
    assert rows(
        ops, "op_name", "op_type", "group_name", "start_ns", "end_ns", "connection_id", "rank_size"
    ) == [("hcom_allReduce_0_oup_0_1", "HcomAllReduce", "hccl_world_group", 1000, 1410, 0, 8)]
    assert rows(ops, "data_type", "alg_type", "count", "relay", "retry", "model_id") == [
        ("FP16", "RING-NHR", 1000, True, False, 7)
    ]
    assert rows(
        task_rows, "name", "plane_id", "start_ns", "stream_id", "task_id", "notify_id", "src_rank"
    ) == [
        ("Notify_Wait", 1, 900, 7, 1, 0, 0),
        ("Notify_Wait", 0, 1000, 6, 1, 0x1001, 2),
        ("Memcpy", 0, 1100, 6, 2, None, 0),
        ("Notify_Record", 0, 1400, 6, 3, 0x1002, 0),
    ]
    assert rows(task_rows, "dst_rank", "transport_type", "size_bytes", "data_type", "link_type")[:3] == [
        (0, "SDMA", 0, "INT8", "OnChip"),
        (3, "SDMA", 0, "INT8", "OnChip"),
        (0, "RDMA", 1024, "FP32", "RoCE"),
    ]
    assert set(rows(task_rows, "op_name", "group_name")) == {("hcom_allReduce_0_oup_0_1", "hccl_world_group")}
    assert rows(task_rows, "duration_estimated_us")[2] == (5.0,)
    # the slave-plane wait is no master task; rdma_type prints through HCCL_RDMA_TYPES (0 = notify)
    assert rows(task_rows, "master", "rdma_type") == [
        (False, "RDMASendNotify"),
        (True, "RDMASendNotify"),
        (True, "RDMASendPayload"),
        (True, "RDMASendNotify"),
    ]
    assert comm.counts["incomplete_ops"] == 0


def test_the_index_counts_ops_per_group_and_an_unresolved_group_prints_its_digits() -> None:
    other_group = 987654321
    second = [
        (
            "api_event",
            apis([(NODE_LEVEL, 5, T, 600, 700, OP_B), (COMMUNICATION_LEVEL, MASTER, T, 610, 690, OP_B)]),
            0,
        ),
        ("task_track", launches([(T, 650, 6, 4, 0, NOTIFY_WAIT)]), 0),
        ("hccl_info", hccl_infos([info(650, WAIT)]), 0),
        ("hccl_op_info", hccl_op_infos([(T, 605, False, False, 4, ALG, 1, GROUP)]), 0),
    ]
    third = [
        (
            "api_event",
            apis([(NODE_LEVEL, 5, T, 800, 900, OP_B), (COMMUNICATION_LEVEL, MASTER, T, 810, 890, OP_B)]),
            0,
        ),
        ("task_track", launches([(T, 850, 6, 5, 0, NOTIFY_WAIT)]), 0),
        ("hccl_op_info", hccl_op_infos([(T, 805, False, False, 4, ALG, 1, other_group)]), 0),
    ]
    device = [
        ("tasks@0", tasks([(6, 1, 0, 1000, 1100), (6, 2, 0, 1100, 1400), (6, 3, 0, 1400, 1410)], 0), 0),
        ("tasks@0", tasks([(7, 1, 0, 1420, 1500)], 0), 0),
        ("tasks@0", tasks([(6, 4, 0, 1600, 1700)], 3), 0),
        ("tasks@0", tasks([(6, 5, 0, 1800, 1900)], 5), DONE),
    ]
    ops, _, _ = _comm(*_op_a(), *second, *third, *device)
    assert rows(ops, "op_name", "group_name") == [
        ("hcom_allReduce_0_oup_0_1", "hccl_world_group"),
        ("hcom_broadcast_1_oup_1_1", "hccl_world_group"),
        ("hcom_broadcast_1_321_0_1", "987654321"),
    ]


def test_an_op_launched_once_and_run_twice_gets_two_iterations_with_one_index() -> None:
    host = [
        (
            "api_event",
            apis([(NODE_LEVEL, 5, T, 100, 300, OP_A), (COMMUNICATION_LEVEL, MASTER, T, 110, 290, OP_A)]),
            0,
        ),
        ("task_track", launches([(T, 150, 6, 1, 0, NOTIFY_WAIT), (T, 200, 6, 2, 0, NOTIFY_RECORD)]), 0),
        ("hccl_info", hccl_infos([info(150, WAIT), info(200, RECORD)]), 0),
    ]
    device = tasks(
        [(6, 1, 0, 1000, 1010), (6, 2, 0, 1020, 1030), (6, 1, 0, 2000, 2010), (6, 2, 0, 2020, 2040)], 0
    )
    ops, task_rows, _ = _comm(*host, ("tasks@0", device, DONE), op_info=False)
    assert rows(ops, "op_name", "start_ns", "end_ns") == [
        ("hcom_allReduce_0_oup_0_1", 1000, 1030),
        ("hcom_allReduce_0_oup_0_2", 2000, 2040),
    ]
    assert [r[0] for r in rows(task_rows, "op_name")] == ["hcom_allReduce_0_oup_0_1"] * 2 + [
        "hcom_allReduce_0_oup_0_2"
    ] * 2


def test_an_op_without_master_tasks_has_tasks_but_no_op_row() -> None:
    host = [
        (
            "api_event",
            apis([(NODE_LEVEL, 5, T, 100, 300, OP_A), (COMMUNICATION_LEVEL, SLAVE, T, 110, 290, OP_A)]),
            0,
        ),
        ("task_track", launches([(T, 150, 6, 1, 0, NOTIFY_WAIT)]), 0),
    ]
    ops, task_rows, comm = _comm(*host, ("tasks@0", tasks([(6, 1, 0, 1000, 1010)], 0), DONE), op_info=False)
    assert ops is None or ops.num_rows == 0
    assert rows(task_rows, "op_name", "name") == [("hcom_allReduce_0_N/A_0_1", None)]
    assert comm.counts["ops_without_master"] == 1


def test_an_op_is_emitted_once_a_later_task_on_its_stream_shows_its_missing_task_will_not_come() -> None:
    names, comm = ApiEvents(NAMES), Communication(0, NAMES, op_info=False)
    for stream, batch, _ in _op_a():
        if stream != "hccl_op_info":
            (names if stream == "api_event" else comm).push(stream, batch)
    names.push(
        "api_event",
        apis([(NODE_LEVEL, 5, T, 600, 700, OP_B), (COMMUNICATION_LEVEL, MASTER, T, 610, 690, OP_B)]),
    )
    comm.push("task_track", launches([(T, 650, 6, 4, 0, NOTIFY_WAIT)]))
    for name, api in names.advance(800):
        comm.push(name, api)
    # op A's last task on stream 6, (6, 3), never runs; a later task on that stream says it will not
    comm.push("tasks@0", tasks([(6, 1, 0, 1000, 1100), (6, 2, 0, 1100, 1400), (7, 1, 0, 1420, 1500)], 0))
    assert table(comm.advance(1500), "comm@0") is None  # (6, 3) could still come
    # so its row, from 1000, is still to come: nothing downstream may pass that start; an instance none
    # of whose tasks ended in the last HOLD_NS stops holding
    assert comm.output_watermark(1500) == 1000
    assert comm.output_watermark(1500 + comm_module.HOLD_NS) == 1000
    assert comm.output_watermark(1501 + comm_module.HOLD_NS) == 1501 + comm_module.HOLD_NS
    comm.push("tasks@0", tasks([(6, 4, 0, 1600, 1700)], 3))
    emitted = table(comm.advance(1800), "comm@0")
    assert comm.output_watermark(1800) == 1800
    assert rows(emitted, "op_name", "start_ns", "end_ns") == [
        ("hcom_allReduce_0_oup_0_1", 1000, 1400),
        ("hcom_broadcast_1_N/A_0_1", 1600, 1700),  # no info, no op info: msprof's N/A group
    ]
    assert comm.counts["incomplete_ops"] == 0


def test_an_op_row_is_pruned_once_its_host_tasks_are_superseded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Op A launched three times on the same (stream, task) ids: each launch supersedes the last one's
    host tasks, so the earlier op rows can go; the last launch runs once more, long after its host
    tasks settled, so its op row must stay. Pruning as early as possible changes no output."""
    device = [(6, 1, 0, 1000, 1010), (6, 2, 0, 1020, 1030), (6, 3, 0, 1040, 1050), (7, 1, 0, 1060, 1070)]

    def run() -> tuple[pa.Table | None, pa.Table | None, Communication]:
        steps: list[Step] = []
        for k, start in enumerate((100, 5000, 10000)):
            steps += [(stream, batch, start - 100) for stream, batch, _ in _op_a(start)]
            runs = [(s, t, b, a + start, e + start) for s, t, b, a, e in device]
            steps.append(("tasks@0", tasks(runs, k), start + 2000))
        again = [(s, t, b, a + 20000, e + 20000) for s, t, b, a, e in device]
        steps.append(("tasks@0", tasks(again, 2), DONE))
        return _comm(*steps)

    ops, task_rows, batched = run()
    monkeypatch.setattr(comm_module, "OPS_SLACK", 0)
    pruned_ops, pruned_tasks, eager = run()
    assert ops is not None and task_rows is not None
    assert [name.rsplit("_", 2)[1:] for (name,) in rows(ops, "op_name")] == [
        ["0", "1"],
        ["1", "1"],
        ["2", "1"],
        ["2", "2"],
    ]
    assert pruned_ops is not None and pruned_ops.equals(ops)
    assert pruned_tasks is not None and pruned_tasks.equals(task_rows)
    assert batched._ops.num_rows == 3  # the state under test: op rows kept
    assert eager._ops.num_rows < 3


def test_device_tasks_of_other_types_or_without_a_launch_are_ignored_or_counted() -> None:
    compute = tasks([(2, 1, 0, 500, 600)], 9)
    compute = compute.set_column(
        compute.schema.get_field_index("task_type"), "task_type", pa.array(["AI_CORE"]).dictionary_encode()
    )
    _, task_rows, comm = _comm(
        *_op_a(), ("tasks@0", compute, 0), ("tasks@0", tasks([(6, 9, 0, 900, 910)], 0), DONE)
    )
    assert task_rows is None or task_rows.num_rows == 0
    assert comm.counts["unjoined_tasks"] == 1


def test_snapshot_round_trip() -> None:
    names = ApiEvents(NAMES)
    api_steps: list[Step] = []
    for stream, batch, _ in _op_a():
        if stream == "api_event":
            names.push(stream, batch)
    api_steps = [(name, batch, 120) for name, batch in names.finish()]
    host = [step for step in _op_a() if step[0] != "api_event"]
    steps: list[Step] = [
        host[0],
        *api_steps,
        (host[1][0], host[1][1], 300),
        (host[2][0], host[2][1], 600),
        ("tasks@0", tasks([(7, 1, 0, 900, 1500), (6, 1, 0, 1000, 1100)], 0), 1050),
        ("tasks@0", tasks([(6, 2, 0, 1100, 1400), (6, 3, 0, 1400, 1410)], 0), 2000),
    ]
    for cut in range(1, len(steps)):
        for stream in ("comm@0", "comm_tasks@0"):
            check_snapshot(lambda stream=stream: OneOutput(Communication(0, NAMES), stream), steps, cut)


# -- end to end on the simulator ---------------------------------------------------------------------

HOST_FAMILIES = (
    "api_event",
    "task_track",
    "node_basic_info",
    "tensor_info",
    "hccl_info",
    "hccl_op_info",
    "memcpy_info",
)


def comm_pipeline(sim: Simulated, wrap: Any = None) -> Pipeline:
    operators: list[Operator] = [ApiEvents(sim.names)]
    for device in sim.devices:
        join = HostJoin(
            device, sim.names, node_info=sim.static("node_basic_info"), tensor_info=sim.static("tensor_info")
        )
        comm = Communication(device, sim.names)
        operators += [join, wrap(comm) if wrap else comm]
    return Pipeline([*sim.feeds(HOST_FAMILIES), *sim.truth_feeds()], operators)


@pytest.fixture(scope="module", params=["910A", "910B"])
def simulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Simulated:
    return Simulated(tmp_path_factory.mktemp(request.param), request.param)


def test_comm_ops_are_the_simulated_all_reduces(simulated: Simulated) -> None:
    pipeline = comm_pipeline(simulated)
    out = list(pipeline.run())
    ops = table([e for e in out if e[0].startswith("comm@")])
    task_rows = table([e for e in out if e[0].startswith("comm_tasks@")])
    assert ops is not None and task_rows is not None
    truth = simulated.truth.filter(pc.equal(simulated.truth["category"], "communication"))
    expected = {}
    for device, iteration, name, start, end in rows(
        truth, "device_id", "iteration", "op_name", "start_ns", "end_ns"
    ):
        low, high = expected.get((device, iteration, name), (start, end))
        expected[device, iteration, name] = (min(low, start), max(high, end))
    found = {}
    for device, name, start, end in rows(ops, "device_id", "op_name", "start_ns", "end_ns"):
        base, suffix, index, iteration = name.rsplit("_", 3)
        assert (suffix, iteration) == ("oup", "1")
        found.setdefault(device, []).append((start, base, end, int(index)))
    got = {(d, b, s, e) for d, items in found.items() for s, b, e, _ in items}
    assert got == {(d, n, s, e) for (d, _, n), (s, e) in expected.items()}
    for items in found.values():  # the index counts ops in start order
        assert [i for _, _, _, i in sorted(items)] == list(range(len(items)))
    assert task_rows.num_rows == truth.num_rows
    assert set(rows(task_rows, "name")) == {("Notify_Wait",), ("Memcpy",), ("Notify_Record",)}
    assert set(rows(ops, "group_name", "data_type", "alg_type")) == {
        ("hccl_world_group", "FP16", "RING-NHR-NONE-NONE")
    }
    for operator in pipeline.operators:
        if isinstance(operator, Communication):
            # the last all-reduce's step-trace end tag is launched inside it but never logged on the device
            assert {k: v for k, v in operator.counts.items() if v} == {"incomplete_ops": 1}


def test_snapshot_round_trip_on_a_simulated_run(simulated: Simulated) -> None:
    recorders: list[Recorder] = []

    def record(comm: Communication) -> Recorder:
        recorders.append(Recorder(comm))
        return recorders[-1]

    list(comm_pipeline(simulated, wrap=record).run())
    steps = recorders[0].steps
    for stream in ("comm@0", "comm_tasks@0"):
        make = lambda stream=stream: OneOutput(Communication(0, simulated.names), stream)  # noqa: E731
        check_snapshot(make, steps, len(steps) // 2)
