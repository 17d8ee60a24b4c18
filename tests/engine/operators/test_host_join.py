"""HostJoin: hand-built launches, APIs and node records for each rule, then the simulator's truth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine import schema
from profstream.engine.operators import host_join
from profstream.engine.operators.api import (
    ACL_LEVEL,
    COMMUNICATION_LEVEL,
    MODEL_LEVEL,
    NODE_LEVEL,
    RUNTIME_LEVEL,
    ApiEvents,
)
from profstream.engine.operators.host_join import HostJoin
from profstream.engine.runtime import DONE, Feed, Operator, Pipeline
from profstream.simulate.records import MEMCPY_BYTES
from tests.engine.operators.harness import Step, check_snapshot, table
from tests.engine.operators.host_batches import (
    Recorder,
    Simulated,
    apis,
    device_tasks,
    dictionaries,
    event_records,
    launches,
    memcpy_infos,
    node_info,
    rows,
    tensor_info,
)

T = 1  # the launching thread
OP_A, OP_B, TYPE_ADD, TYPE_MM, KERNEL, HCOM, UNKNOWN = 101, 102, 201, 202, 301, 401, 999
AICORE, AIVEC, AICPU, MEMCPY, NOTIFY_WAIT, UNNAMED_TYPE = 0, 66, 1, 5, 14, 4444
NAMES = dictionaries(
    {
        OP_A: "layer/Add_1",
        OP_B: "layer/MatMul_2",
        TYPE_ADD: "Add",
        TYPE_MM: "MatMulV3",
        KERNEL: "Add_kernel_1",
        HCOM: "hcom_allReduce_0",
    },
    [
        (RUNTIME_LEVEL, AICORE, "KERNEL_AICORE"),
        (RUNTIME_LEVEL, AIVEC, "KERNEL_AIVEC"),
        (RUNTIME_LEVEL, AICPU, "KERNEL_AICPU"),
        (RUNTIME_LEVEL, MEMCPY, "MEMCPY_ASYNC"),
        (RUNTIME_LEVEL, NOTIFY_WAIT, "NOTIFY_WAIT"),
        (NODE_LEVEL, 5, "launch"),
        (COMMUNICATION_LEVEL, 0x10001, "master"),
        (MODEL_LEVEL, 1, "ModelExecute"),
        (ACL_LEVEL, 0x50001, "aclnnAdd"),
    ],
)
HOST = ("op_name", "op_type", "task_type", "host_task_type")


def _join(*steps: Step, **options: Any) -> tuple[pa.Table | None, HostJoin]:
    """ApiEvents feeding a HostJoin of device 0, driven by ``steps`` (api_event batches go to ApiEvents)."""
    names = ApiEvents(NAMES)
    join = HostJoin(0, NAMES, **options)
    out = []
    for stream, batch, watermark in steps:
        if batch is not None and stream == "api_event":
            names.push(stream, batch)
        elif batch is not None:
            join.push(stream, batch)
        for name, api in names.advance(watermark):
            join.push(name, api)
        out += join.advance(watermark)
    for name, api in names.finish():
        join.push(name, api)
    return table(out + join.finish(), "tasks@0"), join


def _node(start: int, end: int, item: int) -> tuple[int, int, int, int, int, int]:
    return (NODE_LEVEL, 5, T, start, end, item)


def test_wrapped_task_ids_join_the_latest_launch_before_the_device_start() -> None:
    host = [
        ("api_event", apis([_node(100, 200, OP_A), _node(1000, 1100, OP_B), _node(2000, 2100, OP_A)]), 0),
        (
            "task_track",
            launches([(T, 150, 2, 5, 0, AIVEC), (T, 1050, 2, 5, 0, AICORE), (T, 2050, 2, 5, 1, AIVEC)]),
            0,
        ),
        (
            "node_basic_info",
            node_info(
                [(T, 200, OP_A, 2, TYPE_ADD), (T, 1100, OP_B, 0, TYPE_MM), (T, 2100, OP_A, 2, TYPE_ADD)]
            ),
            0,
        ),
    ]
    device = device_tasks(
        [(2, 5, 0, 500, 600), (2, 5, 0, 1500, 1600), (2, 5, 1, 2500, 2600), (2, 5, 0, 3000, 3100)]
    )
    tasks, join = _join(*host, ("device_tasks@0", device, DONE))
    assert rows(tasks, "start_ns", "batch_id", *HOST) == [
        (500, 0, "layer/Add_1", "Add", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
        (1500, 0, "layer/MatMul_2", "MatMulV3", "AI_CORE", "KERNEL_AICORE"),
        (2500, 1, "layer/Add_1", "Add", "AI_VECTOR_CORE", "KERNEL_AIVEC"),
        (3000, 0, "layer/MatMul_2", "MatMulV3", "AI_CORE", "KERNEL_AICORE"),
    ]
    assert join.counts["unjoined_tasks"] == 0


def _acl(start: int, end: int) -> tuple[int, int, int, int, int, int]:
    return (ACL_LEVEL, 0x50001, T, start, end, 0)


MEMCPY_COLUMNS = ("task_id", "memcpy_size", "memcpy_operation")


def test_a_copy_launch_takes_the_memcpy_info_of_its_thread_and_time() -> None:
    # msprof's C++ MemcpyInfoDumper keys memcpy_info by (thread, time stamp) and looks a
    # MEMCPY_ASYNC task_track row up by its own; direction 1 is "host to device"
    tasks, _ = _join(
        ("api_event", apis([_acl(100, 200)]), 0),
        ("task_track", launches([(T, 150, 3, 7, 0, MEMCPY), (T, 160, 3, 9, 0, MEMCPY)]), 0),
        ("memcpy_info", memcpy_infos([(T, 150, 19267584, 64 << 20, 1), (T + 1, 160, 256, 64 << 20, 1)]), 0),
        ("device_tasks@0", device_tasks([(3, 7, 0, 1000, 1800), (3, 9, 0, 1900, 1950)]), DONE),
    )
    assert rows(tasks, *MEMCPY_COLUMNS) == [(7, 19267584, "host to device"), (9, None, None)]


def test_a_copy_split_into_tasks_takes_max_size_chunks_in_batch_and_task_order() -> None:
    # GenerateMemcpyRecordByTimestamp: the tasks of one key, ordered by (batch, task id), take
    # max_size each of what is left, the last the rest, any further one 0 bytes and no direction;
    # of two records of one key the last read wins; a direction above 7 is "other"
    launched = [(T, 150, 3, task, batch, MEMCPY) for task, batch in ((12, 0), (10, 1), (11, 0), (13, 0))]
    launched += [(T, 300, 3, 20, 0, MEMCPY), (T, 400, 3, 30, 0, MEMCPY), (T, 400, 3, 31, 0, MEMCPY)]
    records = [(T, 150, 100, 64, 1), (T, 150, 150, 64, 6), (T, 300, 10, 20, 9), (T, 400, 500, 0, 2)]
    device = [
        (3, task, batch, 1000 + 10 * i, 1005 + 10 * i) for i, (_, _, _, task, batch, _) in enumerate(launched)
    ]
    tasks, _ = _join(
        ("api_event", apis([_acl(100, 500)]), 0),
        ("task_track", launches(launched), 0),
        ("memcpy_info", memcpy_infos(records), 0),
        ("device_tasks@0", device_tasks(device), DONE),
    )
    assert rows(tasks, *MEMCPY_COLUMNS) == [
        (12, 64, "host to device ex"),
        (10, 0, "other"),
        (11, 64, "host to device ex"),
        (13, 22, "host to device ex"),
        (20, 10, "other"),
        # an old-layout record (no max_size): its first task copies all of it (module docstring)
        (30, 500, "device to host"),
        (31, 0, "other"),
    ]


def test_a_device_task_never_joins_a_launch_at_or_after_its_start() -> None:
    tasks, join = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 5, 0, AIVEC)]), 0),
        ("node_basic_info", node_info([(T, 200, OP_A, 2, TYPE_ADD)]), 0),
        ("device_tasks@0", device_tasks([(2, 5, 0, 150, 160), (2, 6, 0, 170, 180)]), DONE),
    )
    assert rows(tasks, "start_ns", "op_name", "host_task_type", "connection_id") == [
        (150, None, None, None),
        (170, None, None, None),
    ]
    assert join.counts["unjoined_tasks"] == 2


def test_op_state_is_static_for_unaging_and_dynamic_for_aging_node_info() -> None:
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A), _node(300, 400, OP_B)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AIVEC), (T, 350, 2, 2, 0, AICORE)]), 0),
        ("node_basic_info", node_info([(T, 200, OP_A, 2, TYPE_ADD)], aging=False), 0),
        ("node_basic_info", node_info([(T, 400, OP_B, 0, TYPE_MM)], aging=True), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510), (2, 2, 0, 520, 530)]), DONE),
    )
    assert rows(tasks, "op_name", "op_state") == [("layer/Add_1", "static"), ("layer/MatMul_2", "dynamic")]


def test_unaging_node_info_given_up_front_is_placed_like_streamed_records() -> None:
    static = pa.Table.from_batches([node_info([(T, 200, OP_A, 2, TYPE_ADD)], aging=False)])
    tensors = pa.Table.from_batches([tensor_info([(T, 200, OP_A, [(0, 2, 0, 1, [4, 4])])], aging=False)])
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AIVEC)]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510)]), DONE),
        streamed=("api",),
        node_info=static,
        tensor_info=tensors,
    )
    assert rows(tasks, "op_name", "op_state", "input_shapes") == [("layer/Add_1", "static", "4,4")]


def test_block_dims_and_hf32_come_from_node_basic_info() -> None:
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A), _node(300, 400, OP_B)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AIVEC), (T, 350, 2, 2, 0, AICORE)]), 0),
        (
            "node_basic_info",
            node_info(
                [(T, 200, OP_A, 4, TYPE_ADD), (T, 400, OP_B, 0, TYPE_MM)],
                block=[(24, 2), (8, 0)],
                op_flag=[1, 0],
            ),
            0,
        ),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510), (2, 2, 0, 520, 530)]), DONE),
    )
    assert rows(tasks, "task_type", "block_dim", "mix_block_dim", "hf32_eligible") == [
        ("MIX_AIC", 24, 48, "YES"),
        ("AI_CORE", 8, 0, "NO"),
    ]


def test_tensor_records_of_one_op_are_concatenated_and_printed_as_msprof_does() -> None:
    seven = [
        (0, 2, 0, 1, [8, 1024, 1]),  # ND, FLOAT16
        (0, 4, 3, 0, [16, 0, 9]),  # FRACTAL_Z with sub-format 3; dims stop at the first 0
        (0, 0xFF, 0xFFFF, 999, [1]),  # the undefined format; an unknown data type prints as its number
        (1, 29, 0, 27, [2, 2]),  # an output: FRACTAL_NZ, DT_BF16
        (0, 0, 0, 12, []),  # a scalar: no dims
        (1, 2, 0, 1, [8]),
        (0, 1, 0, 3, [3, 3]),
    ]
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AIVEC)]), 0),
        ("node_basic_info", node_info([(T, 200, OP_A, 2, TYPE_ADD)]), 0),
        # five then two tensors with equal (op, timestamp, thread); another op's record is not this op's
        ("tensor_info", tensor_info([(T, 200, OP_A, seven[:5]), (T, 200, OP_B, [(0, 2, 0, 1, [7])])]), 0),
        ("tensor_info", tensor_info([(T, 200, OP_A, seven[5:])]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510)]), DONE),
    )
    assert rows(tasks, "input_shapes", "input_formats", "input_data_types") == [
        ("8,1024,1;16;1;;3,3", "ND;FRACTAL_Z:3;UNDEFINED;NCHW;NHWC", "FLOAT16;FLOAT;999;BOOL;INT32")
    ]
    assert rows(tasks, "output_shapes", "output_formats", "output_data_types") == [
        ("2,2;8", "FRACTAL_NZ;ND", "DT_BF16;FLOAT16")
    ]


def test_unknown_hashes_and_types_print_as_numbers() -> None:
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, UNKNOWN)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AICORE), (T, 300, 2, 2, 0, UNNAMED_TYPE)]), 0),
        ("node_basic_info", node_info([(T, 200, UNKNOWN, 0, UNKNOWN + 1)]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510), (2, 2, 0, 520, 530)]), DONE),
    )
    assert rows(tasks, *HOST) == [
        ("999", "1000", "AI_CORE", "KERNEL_AICORE"),
        (None, None, None, "4444"),
    ]


def test_without_node_basic_info_the_op_is_named_after_the_node_api() -> None:
    """Prof level 0: the real Level0 kernel_details (shared/realdata) lists such kernels with Type and
    Accelerator Core ``N/A`` and Block Dim ``0`` (its db: COMPUTE_TASK_INFO opType ``N/A``, blockDim 0)."""
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AICORE)]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510)]), DONE),
    )
    assert rows(tasks, *HOST, "op_state", "block_dim") == [
        ("layer/Add_1", "N/A", None, "KERNEL_AICORE", None, 0)
    ]


def test_an_ffts_plus_placeholder_record_does_not_name_the_op() -> None:
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AICORE)]), 0),
        ("node_basic_info", node_info([(T, 190, OP_B, 0, TYPE_MM), (T, 200, OP_A, 6, TYPE_ADD)]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510)]), DONE),
    )
    assert rows(tasks, "op_name", "task_type") == [("layer/MatMul_2", "AI_CORE")]


def test_tasks_in_a_communication_api_are_hccl_tasks_named_after_it() -> None:
    tasks, _ = _join(
        ("api_event", apis([_node(100, 400, HCOM), (COMMUNICATION_LEVEL, 0x10001, T, 110, 390, HCOM)]), 0),
        ("task_track", launches([(T, 150, 6, 1, 0, NOTIFY_WAIT), (T, 160, 6, 2, 0, AICPU)]), 0),
        ("device_tasks@0", device_tasks([(6, 1, 0, 500, 510), (6, 2, 0, 520, 530)]), DONE),
    )
    assert rows(tasks, *HOST, "connection_id") == [
        ("hcom_allReduce_0", None, "HCCL", "NOTIFY_WAIT", 0),
        ("hcom_allReduce_0", None, "HCCL_AI_CPU", "KERNEL_AICPU", 0),
    ]


def test_kernels_outside_node_apis_are_named_after_the_kernel_and_others_stay_unnamed() -> None:
    acl = (ACL_LEVEL, 0x50001, T, 100, 400, 0)
    tasks, _ = _join(
        ("api_event", apis([acl]), 0),
        (
            "task_track",
            launches([(T, 150, 2, 1, 0, AICORE), (T, 160, 2, 2, 0, MEMCPY)], kernel=[KERNEL, 0]),
            0,
        ),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510), (2, 2, 0, 520, 530)]), DONE),
    )
    assert rows(tasks, *HOST, "connection_id", "launch_ns", "launch_thread_id", "launch_level") == [
        ("Add_kernel_1", "Add_kernel_1", "AI_CORE", "KERNEL_AICORE", 0, 100, T, "acl"),
        (None, None, None, "MEMCPY_ASYNC", 0, 100, T, "acl"),
    ]


def test_model_id_and_connection_come_from_the_enclosing_apis() -> None:
    tasks, _ = _join(
        ("api_event", event_records([(MODEL_LEVEL, 1, T, 3, 50, 9), (MODEL_LEVEL, 1, T, 3, 1000, 9)]), 0),
        ("api_event", apis([(ACL_LEVEL, 0x50001, T, 90, 300, 0), _node(100, 200, OP_A)]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AICORE), (T, 2000, 2, 2, 0, AICORE)]), 0),
        ("node_basic_info", node_info([(T, 200, OP_A, 0, TYPE_ADD)]), 0),
        ("device_tasks@0", device_tasks([(2, 1, 0, 500, 510), (2, 2, 0, 2500, 2530)]), DONE),
    )
    # connection ids in (start, level descending) order: model 0, acl 1, node 2
    assert rows(tasks, "model_id", "connection_id", "launch_ns", "launch_level") == [
        (9, 2, 100, "node"),
        (schema.NO_ID, None, None, None),
    ]


def test_node_records_outside_every_node_api_are_counted() -> None:
    _, join = _join(
        ("api_event", apis([_node(100, 200, OP_A)]), 0),
        ("node_basic_info", node_info([(T, 200, OP_A, 0, TYPE_ADD), (T, 250, OP_B, 0, TYPE_MM)]), 0),
        ("tensor_info", tensor_info([(T, 90, OP_A, [(0, 2, 0, 1, [1])])]), 0),
        ("task_track", launches([(T, 150, 2, 1, 0, AICORE)]), DONE),
    )
    assert join.counts["node_info_outside_apis"] == 1
    assert join.counts["tensor_info_outside_apis"] == 1


def test_a_device_task_waits_until_its_launch_api_has_ended() -> None:
    names, join = ApiEvents(NAMES), HostJoin(0, NAMES, metric_columns=["aic_mac_ratio"])
    names.push("api_event", apis([_node(100, 700, OP_A)]))
    for name, api in names.advance(600):
        join.push(name, api)
    join.push("task_track", launches([(T, 150, 2, 1, 0, AICORE)]))
    join.push("device_tasks@0", device_tasks([(2, 1, 0, 500, 510)], metrics={"aic_mac_ratio": [0.25]}))
    assert join.advance(600) == []  # the node API may still get node records until 700
    assert join.output_watermark(600) == 500  # the waiting task's row is still to come
    join.push("node_basic_info", node_info([(T, 700, OP_A, 0, TYPE_ADD)]))
    done = table(join.advance(800), "tasks@0")
    assert rows(done, "op_name", "op_type", "aic_mac_ratio") == [("layer/Add_1", "Add", 0.25)]
    assert join.output_watermark(800) == 800


def test_a_task_row_goes_out_in_one_batch_with_its_sub_task_rows() -> None:
    """A MIX task's whole-task row (context NO_ID) and its context rows leave together, whatever the
    watermark: op_summary drops the whole-task row only when a batch holds both."""
    join = HostJoin(0, NAMES, streamed=("node_basic_info",))
    join.push("task_track", launches([(T, 100, 2, 7, 0, AICORE), (T, 110, 2, 8, 0, AICORE)]))
    mix = [(2, 7, 0, 500, 600), (2, 7, 0, 520, 560), (2, 7, 0, 540, 590), (2, 8, 0, 610, 620)]
    join.push("device_tasks@0", device_tasks(mix, contexts=[schema.NO_ID, 0, 1, schema.NO_ID]))
    assert join.advance(530) == []  # the second context starts at 540: the task waits, and what follows
    assert join.output_watermark(530) == 500
    first = table(join.advance(605), "tasks@0")
    assert rows(first, "start_ns", "context_id") == [(500, schema.NO_ID), (520, 0), (540, 1)]
    assert rows(table(join.advance(DONE), "tasks@0"), "start_ns") == [(610,)]


def test_state_stays_bounded_to_one_launch_per_task_id() -> None:
    join = HostJoin(0, NAMES, streamed=("node_basic_info",))
    for step in range(5):
        base = 10_000 * step
        join.push("task_track", launches([(T, base + 10 * k, 2, k, step, AICORE) for k in range(50)]))
        join.push(
            "device_tasks@0",
            device_tasks([(2, k, step, base + 10 * k + 5, base + 10 * k + 8) for k in range(50)]),
        )
        assert table(join.advance(base + 9_000), "tasks@0").num_rows == 50
    assert join._described.num_rows + join._settled.live().num_rows <= 50


def test_snapshot_round_trip() -> None:
    steps: list[Step] = [
        (
            "task_track",
            launches([(T, 150, 2, 5, 0, AIVEC), (T, 1050, 2, 5, 0, AICORE), (T, 1300, 2, 9, 0, MEMCPY)]),
            0,
        ),
        *_api_steps([_node(100, 200, OP_A), _node(1000, 1100, OP_B)], 120),
        ("node_basic_info", node_info([(T, 200, OP_A, 2, TYPE_ADD)], aging=False), 300),
        ("tensor_info", tensor_info([(T, 200, OP_A, [(0, 2, 0, 1, [4, 4])])]), 400),
        ("device_tasks@0", device_tasks([(2, 5, 0, 500, 600)]), 700),
        ("node_basic_info", node_info([(T, 1100, OP_B, 0, TYPE_MM)]), 1200),
        ("memcpy_info", memcpy_infos([(T, 1300, 4096, 1 << 20, 1)]), 1250),
        ("device_tasks@0", device_tasks([(2, 5, 0, 1500, 1600), (2, 9, 0, 1700, 1800)]), 2000),
    ]
    for cut in range(1, len(steps)):
        check_snapshot(lambda: HostJoin(0, NAMES), steps, cut)


def _api_steps(records: list[tuple[int, int, int, int, int, int]], watermark: int) -> list[Step]:
    """The ``api`` and ``api_progress`` batches ApiEvents makes of ``records``, as steps."""
    names = ApiEvents(NAMES)
    names.push("api_event", apis(records))
    return [(stream, batch, watermark) for stream, batch in names.finish()]


# -- end to end on the simulator ---------------------------------------------------------------------

HOST_FAMILIES = ("api_event", "task_track", "node_basic_info", "tensor_info", "memcpy_info")


def host_join_pipeline(
    sim: Simulated, device_feeds: list[Feed], device_operators: Sequence[Operator] = (), wrap: Any = None
) -> Pipeline:
    """api_event -> ApiEvents -> HostJoin per device, unaging node info given up front."""
    joins = [
        HostJoin(d, sim.names, node_info=sim.static("node_basic_info"), tensor_info=sim.static("tensor_info"))
        for d in sim.devices
    ]
    operators: list[Operator] = [
        ApiEvents(sim.names),
        *device_operators,
        *(wrap(j) if wrap else j for j in joins),
    ]
    return Pipeline([*sim.feeds(HOST_FAMILIES), *device_feeds], operators)


@pytest.fixture(scope="module", params=["910A", "910B"])
def simulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Simulated:
    return Simulated(tmp_path_factory.mktemp(request.param), request.param)


def _tasks(pipeline: Pipeline) -> pa.Table:
    found = table([(n, b) for n, b in pipeline.run() if n.startswith("tasks@")])
    assert found is not None
    return found.sort_by([("device_id", "ascending"), ("start_ns", "ascending")])


def _joins(pipeline: Pipeline) -> list[HostJoin]:
    return [
        op if isinstance(op, HostJoin) else op.inner
        for op in pipeline.operators
        if op.outputs[0].startswith("tasks@")
    ]


def test_every_simulated_task_gets_the_op_the_truth_says(simulated: Simulated) -> None:
    pipeline = host_join_pipeline(simulated, simulated.truth_feeds())
    tasks = _tasks(pipeline)
    truth = simulated.truth.sort_by([("device_id", "ascending"), ("start_ns", "ascending")])
    assert tasks.num_rows == truth.num_rows
    for name in ("device_id", "stream_id", "task_id", "batch_id", "start_ns"):
        assert tasks[name].to_pylist() == truth[name].to_pylist()
    got = {
        n: tasks[n].to_pylist()
        for n in (
            *HOST,
            "op_state",
            "model_id",
            "input_formats",
            "output_data_types",
            "memcpy_size",
            "memcpy_operation",
        )
    }
    want = {
        n: truth[n].cast(pa.string()).to_pylist()
        for n in ("op_name", "op_type", "task_type", "ge_task_type", "category")
    }
    assert got["host_task_type"] == want["task_type"]
    for i, category in enumerate(want["category"]):
        if category == "compute":
            assert (got["op_name"][i], got["op_type"][i], got["task_type"][i]) == (
                want["op_name"][i],
                want["op_type"][i],
                want["ge_task_type"][i],
            )
            assert got["op_state"][i] in ("static", "dynamic")
            assert (got["input_formats"][i], got["output_data_types"][i]) == ("ND;ND", "FLOAT16")
        elif category == "communication":
            # op name from the HCCL API, op type from the all-reduce's node info
            assert (got["op_name"][i], got["op_type"][i], got["task_type"][i]) == (
                want["op_name"][i],
                want["op_type"][i],
                "HCCL",
            )
        else:  # the H2D copy: launched by aclrtMemcpyAsync outside any node API, so it has no op name
            assert (got["op_name"][i], got["task_type"][i]) == (None, None)
            # its API's memcpy_info, at its task_track's thread and time, gives it all its bytes
            assert (got["memcpy_size"][i], got["memcpy_operation"][i]) == (MEMCPY_BYTES, "host to device")
        if category != "other":  # the simulated runtime reports no memcpy_info for HCCL's copies
            assert (got["memcpy_size"][i], got["memcpy_operation"][i]) == (None, None)
    assert set(got["model_id"]) == {1}  # every launch lies inside the ModelExecute event pair
    for join in _joins(pipeline):
        assert join.counts == {
            "unjoined_tasks": 0,
            "node_info_outside_apis": 0,
            "tensor_info_outside_apis": 0,
        }


def test_op_state_follows_the_file_group_of_each_ops_node_info(simulated: Simulated) -> None:
    tasks = _tasks(host_join_pipeline(simulated, simulated.truth_feeds()))
    dynamic = set(
        simulated.names.names(
            simulated.node_info.filter(simulated.node_info["aging"])["op_name_hash"].combine_chunks()
        ).to_pylist()
    )
    for name, state in rows(tasks.filter(pc.is_valid(tasks["op_state"])), "op_name", "op_state"):
        assert state == ("dynamic" if name in dynamic else "static")


def test_snapshot_round_trip_on_a_simulated_run(simulated: Simulated) -> None:
    recorders: list[Recorder] = []

    def record(join: HostJoin) -> Recorder:
        recorders.append(Recorder(join))
        return recorders[-1]

    list(host_join_pipeline(simulated, simulated.truth_feeds(), wrap=record).run())
    steps = recorders[0].steps
    check_snapshot(
        lambda: HostJoin(
            0,
            simulated.names,
            node_info=simulated.static("node_basic_info"),
            tensor_info=simulated.static("tensor_info"),
        ),
        steps,
        len(steps) // 2,
    )


def test_with_the_device_tasks_operator(simulated: Simulated) -> None:
    device_tasks = pytest.importorskip(
        "profstream.engine.operators.device_tasks",
        reason="DeviceTasks (operators/device_tasks.py) is not there yet",
    )
    from tests.engine.operators.harness import device_feeds

    feeds, operators = [], []
    for device in simulated.collection.devices:
        assert device.metadata is not None
        present = {s.family for s in device.streams}
        families = present & {"hwts", "aicore", "stars_soc", "ffts_profile", "ts_track"}
        leader = "hwts" if "hwts" in present else "stars_soc"
        feeds += device_feeds(simulated.collection, device, families, leader=leader)
        operators.append(device_tasks.DeviceTasks(device.device_id, device.metadata, present))
    tasks = _tasks(host_join_pipeline(simulated, feeds, operators))
    truth = simulated.truth
    found = {
        (d, s, t, b, n)
        for d, s, t, b, n, c in rows(
            tasks, "device_id", "stream_id", "task_id", "batch_id", "op_name", "context_id"
        )
        if c == schema.NO_ID
    }
    expected = {
        (d, s, t, b, n if cat != "other" else None)
        for d, s, t, b, n, cat in rows(
            truth, "device_id", "stream_id", "task_id", "batch_id", "op_name", "category"
        )
    }
    assert found == expected


TENSOR = st.tuples(
    st.sampled_from([0, 1]),  # input / output
    st.sampled_from([0, 2, 3, 29, 0xFF]),
    st.sampled_from([0, 3, 0xFFFF]),
    st.sampled_from([0, 1, 27, 999]),
    st.lists(st.integers(0, 5), max_size=8),
)


@given(st.lists(st.lists(TENSOR, min_size=1, max_size=5), min_size=1, max_size=12))
def test_tensor_texts_are_each_tensors_own(records: list[list[Any]]) -> None:
    """Descriptions repeat within a batch and are formatted once each: every record still gets the
    texts of its own tensors, in slot order, null for a side without one."""
    rows = host_join.tensor_records(tensor_info([(T, 200 + i, OP_A, r) for i, r in enumerate(records)]), 0)
    for k, record in enumerate(records):
        for side, prefix in ((0, "input"), (1, "output")):
            own = [
                host_join.tensor_descriptions(
                    np.array([dims + [0] * (8 - len(dims))]), np.array([f]), np.array([s]), np.array([d])
                )
                for kind, f, s, d, dims in record
                if kind == side
            ]
            for field, name in (("shape", "shapes"), ("data_type", "data_types"), ("format", "formats")):
                expected = ";".join(o[field][0].as_py() for o in own) if own else None
                assert rows.column(f"{prefix}_{name}")[k].as_py() == expected


def test_repeated_tensor_descriptions_print_like_the_first_one() -> None:
    same = (0, 2, 0, 1, [8, 1024, 1])
    other = (1, 29, 0, 27, [2, 2])
    rows = host_join.tensor_records(
        tensor_info([(T, 200, OP_A, [same, other, same]), (T, 300, OP_B, [other, same])]), 0
    )
    assert rows.column("input_shapes").to_pylist() == ["8,1024,1;8,1024,1", "8,1024,1"]
    assert rows.column("output_formats").to_pylist() == ["FRACTAL_NZ", "FRACTAL_NZ"]
    assert rows.column("input_data_types").to_pylist() == ["FLOAT16;FLOAT16", "FLOAT16"]
    assert rows.column("tensors").to_pylist() == [3, 2]


def test_every_launch_keeps_its_own_kernel_name_when_hash_dic_holds_it() -> None:
    """msprof's task_track parser names a launch's kernel through hash_dic and stores ``N/A`` for a hash
    it does not find, 0 included (``TaskTrackParser.format_task_track_data``): null here. The op name
    of a described launch stays the node's."""
    tasks, _ = _join(
        ("api_event", apis([_node(100, 200, OP_A), _node(300, 400, OP_A), _node(500, 600, OP_A)]), 0),
        (
            "task_track",
            launches(
                [(T, 150, 2, 1, 0, AICORE), (T, 350, 2, 2, 0, AICORE), (T, 550, 2, 3, 0, AICORE)],
                kernel=[KERNEL, UNKNOWN, 0],
            ),
            0,
        ),
        (
            "node_basic_info",
            node_info(
                [(T, 200, OP_A, 0, TYPE_ADD), (T, 400, OP_A, 0, TYPE_ADD), (T, 600, OP_A, 0, TYPE_ADD)]
            ),
            0,
        ),
        (
            "device_tasks@0",
            device_tasks([(2, 1, 0, 700, 710), (2, 2, 0, 720, 730), (2, 3, 0, 740, 750)]),
            DONE,
        ),
    )
    assert rows(tasks, "op_name", "kernel_name") == [
        ("layer/Add_1", "Add_kernel_1"),
        ("layer/Add_1", None),
        ("layer/Add_1", None),
    ]
