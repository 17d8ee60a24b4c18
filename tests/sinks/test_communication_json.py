"""communication.json / communication_matrix.json: hand-derived values and the structure of real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine.layouts import Context
from profstream.engine.layouts.torch_npu import Communication
from profstream.engine.schema import TABLES, conform
from profstream.sinks.communication_json import (
    CommunicationJsonSink,
    _assign,
    communication,
    communication_matrix,
)

REAL = Path("/work/shared/realdata")
TORCH = REAL / "msinsight-torchnpu-910b/test/data/pytorch/text/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
CLUSTER = REAL / "msprof-analyze-advisor-fixtures/test/resource/advisor/cluster_analysis_output"

OPS = [  # name, start, end, transit, wait, sync
    ("hcom_allReduce__1_0_1", 1000, 11000, 2000, 3000, 2000),
    ("hcom_send__1_1_1", 20000, 30000, 5000, None, None),
    ("hcom_allReduce__1_2_1", 40000, 41000, 10, 0, 0),
    ("hcom_allReduce__1_3_1", 50000, 51000, 10, 0, 0),
]
LINKS = [  # op, src, dst, transport, bytes, ns, sizes, counts, times
    ("hcom_allReduce__1_0_1", 0, 1, "HCCS", 2_000_000, 2000, [2_000_000], [1], [2000]),
    ("hcom_allReduce__1_0_1", 0, 0, "LOCAL", 1_000_000, 500, [1_000_000], [1], [500]),
    ("hcom_allReduce__1_0_1", 0, 2, "HCCS", 2_000_000, 1000, [2_000_000], [1], [1000]),
    ("hcom_send__1_1_1", 0, 8, "RDMA", 4_000_000, 5000, [4_000_000], [1], [5000]),
    ("hcom_allReduce__1_2_1", 0, 1, "HCCS", 3_000_000, 1000, [3_000_000], [1], [1000]),
    ("hcom_allReduce__1_3_1", 0, 1, "HCCS", 2_000_000, 2000, [1_000_000], [2], [2000]),
]


def ops_table(rows: list[tuple[Any, ...]] = OPS) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    return pa.Table.from_batches(
        [
            conform(
                TABLES["comm_ops"],
                {
                    "device_id": pa.array([0] * n, pa.int32()),
                    "op_name": pa.array(cols[0], pa.string()),
                    "group_name": pa.array(["g"] * n, pa.string()),
                    "start_ns": pa.array(cols[1], pa.int64()),
                    "end_ns": pa.array(cols[2], pa.int64()),
                    "transit_ns": pa.array(cols[3], pa.int64()),
                    "wait_ns": pa.array(cols[4], pa.int64()),
                    "synchronization_ns": pa.array(cols[5], pa.int64()),
                },
            )
        ]
    )


def links_table() -> pa.Table:
    cols = list(zip(*LINKS, strict=True))
    n = len(LINKS)
    return pa.Table.from_batches(
        [
            conform(
                TABLES["comm_links"],
                {
                    "device_id": pa.array([0] * n, pa.int32()),
                    "op_name": pa.array(cols[0], pa.string()),
                    "group_name": pa.array(["g"] * n, pa.string()),
                    "src_rank": pa.array(cols[1], pa.int64()),
                    "dst_rank": pa.array(cols[2], pa.int64()),
                    "transport_type": pa.array(cols[3], pa.string()),
                    "size_bytes": pa.array(cols[4], pa.int64()),
                    "transit_ns": pa.array(cols[5], pa.int64()),
                    "packet_sizes": pa.array(cols[6], pa.list_(pa.int64())),
                    "packet_counts": pa.array(cols[7], pa.list_(pa.int64())),
                    "packet_transit_ns": pa.array(cols[8], pa.list_(pa.int64())),
                },
            )
        ]
    )


def steps_table(spans: list[tuple[int, int, int]]) -> pa.Table:
    cols = list(zip(*spans, strict=True)) if spans else [[], [], []]
    return pa.Table.from_batches(
        [
            conform(
                TABLES["framework_steps"],
                {
                    "device_id": pa.array([0] * len(spans), pa.int32()),
                    "iteration_id": pa.array(cols[0], pa.int64()),
                    "start_ns": pa.array(cols[1], pa.int64()),
                    "end_ns": pa.array(cols[2], pa.int64()),
                },
            )
        ]
    )


def test_op_time_and_bandwidth_info() -> None:
    doc = communication(ops_table(), links_table(), wall_offset_ns=1_000_000)
    reduce = doc["step"]["collective"]["hcom_allReduce__1_0_1@g"]
    time = reduce["Communication Time Info"]
    assert time["Start Timestamp(us)"] == 1001.0
    assert (time["Elapse Time(ms)"], time["Transit Time(ms)"], time["Wait Time(ms)"]) == (0.01, 0.002, 0.003)
    assert time["Idle Time(ms)"] == pytest.approx(0.005)
    assert (time["Wait Time Ratio"], time["Synchronization Time Ratio"]) == (0.6, 0.5)
    bandwidth = reduce["Communication Bandwidth Info"]
    assert list(bandwidth) == ["RDMA", "HCCS", "PCIE", "SDMA", "SIO"]
    hccs = bandwidth["HCCS"]  # two 2 MB copies in 3 us; the LOCAL copy counts nowhere
    assert (hccs["Transit Size(MB)"], hccs["Transit Time(ms)"], hccs["Bandwidth(GB/s)"]) == (
        4.0,
        0.003,
        1333.3333,
    )
    assert hccs["Large Packet Ratio"] == 0.0
    assert hccs["Size Distribution"] == {2.0: [2, 0.003]}
    sdma = bandwidth["SDMA"]  # SDMA = HCCS + PCIE + SIO, no distribution, no large packet ratio
    assert (sdma["Transit Size(MB)"], sdma["Bandwidth(GB/s)"], sdma["Large Packet Ratio"]) == (
        4.0,
        1333.3333,
        0,
    )
    assert sdma["Size Distribution"] == {}
    assert bandwidth["RDMA"] == {
        "Transit Size(MB)": 0,
        "Transit Time(ms)": 0,
        "Bandwidth(GB/s)": 0,
        "Large Packet Ratio": 0,
        "Size Distribution": {},
    }
    send = doc["step"]["p2p"]["hcom_send__1_1_1@g"]
    assert send["Communication Time Info"]["Wait Time(ms)"] == 0  # no Notify_Wait: the integer 0
    assert send["Communication Bandwidth Info"]["RDMA"]["Large Packet Ratio"] == 1.0  # 4 MB > 0.5 MB


def test_total_op_info() -> None:
    doc = communication(ops_table(), links_table())
    total = doc["step"]["collective"]["Total Op Info"]
    time = total["Communication Time Info"]
    assert list(time) == [
        "Elapse Time(ms)",
        "Transit Time(ms)",
        "Wait Time(ms)",
        "Synchronization Time(ms)",
        "Idle Time(ms)",
        "Wait Time Ratio",
        "Synchronization Time Ratio",
    ]
    assert time["Elapse Time(ms)"] == pytest.approx(0.012)
    assert time["Wait Time Ratio"] == round(0.003 / (0.003 + 0.00202), 4)
    hccs = total["Communication Bandwidth Info"]["HCCS"]
    assert list(hccs) == ["Transit Time(ms)", "Transit Size(MB)", "Size Distribution"]
    assert hccs["Transit Size(MB)"] == pytest.approx(9.0)
    assert hccs["Size Distribution"] == {2.0: [2, 0.003], 3.0: [1, 0.001], 1.0: [2, 0.002]}
    assert "Total Op Info" in doc["step"]["p2p"]


def test_steps_split_and_drop_ops() -> None:
    steps = steps_table([(2, 0, 15000), (3, 15001, 45000)])
    doc = communication(ops_table(), links_table(), steps)
    assert list(doc) == ["step2", "step3"]
    assert list(doc["step2"]["collective"]) == ["hcom_allReduce__1_0_1@g", "Total Op Info"]
    assert list(doc["step3"]["p2p"]) == ["hcom_send__1_1_1@g", "Total Op Info"]
    assert "hcom_allReduce__1_3_1@g" not in json.dumps(doc)  # starts after every step
    one = communication(ops_table(), links_table(), steps_table([(7, 0, 10)]))
    assert len(one["step7"]["collective"]) == 4  # one step takes every op
    empty = communication(ops_table(OPS[:1]), links_table(), None)
    assert empty["step"]["p2p"] == {}


def test_matrix_summaries() -> None:
    doc = communication_matrix(ops_table(), links_table())
    collective = doc["step"]["collective"]
    assert list(collective)[:4] == [
        "allreduce-top1@g",
        "allreduce-middle@g",
        "allreduce-bottom1@g",
        "allreduce-total@g",
    ]
    # link 0-1: bandwidths 1000 (op 0), 3000 (op 2), 1000 (op 3): sorted 3000, 1000, 1000 (stable)
    assert collective["allreduce-top1@g"]["0-1"]["Op Name"] == "hcom_allReduce__1_2_1"
    assert collective["allreduce-middle@g"]["0-1"]["Op Name"] == "hcom_allReduce__1_0_1"
    assert collective["allreduce-bottom1@g"]["0-1"]["Op Name"] == "hcom_allReduce__1_3_1"
    assert collective["allreduce-bottom3@g"]["0-1"]["Op Name"] == "hcom_allReduce__1_2_1"
    total = collective["allreduce-total@g"]["0-1"]
    assert (total["Transit Size(MB)"], total["Transit Time(ms)"], total["Bandwidth(GB/s)"]) == (
        7.0,
        0.005,
        1400.0,
    )
    assert collective["allreduce-top1@g"]["0-0"]["Transport Type"] == "LOCAL"
    assert "allreduce-bottom2@g" in collective
    assert list(doc["step"]["p2p"]) == ["send-top1@g", "send-middle@g", "send-bottom1@g", "send-total@g"]


def test_a_repeated_step_keeps_its_first_place_and_its_last_ops() -> None:
    """torch_npu builds both files as dicts keyed by step: a step id seen twice sits where it was
    first seen and holds what the later step wrote (communication.json); the matrix puts each op
    in the first step that lists it, under that step's name."""
    steps = steps_table([(2, 0, 15000), (3, 15001, 45000), (2, 45001, 60000)])
    doc = communication(ops_table(), links_table(), steps)
    assert list(doc) == ["step2", "step3"]
    assert list(doc["step2"]["collective"]) == ["hcom_allReduce__1_3_1@g", "Total Op Info"]
    matrix = communication_matrix(ops_table(), links_table(), steps)
    assert list(matrix) == ["step2", "step3"]
    assert matrix["step2"]["collective"]["allreduce-total@g"]["0-1"]["Transit Size(MB)"] == 4.0  # ops 0 and 3
    assert matrix["step3"]["collective"]["allreduce-top1@g"]["0-1"]["Op Name"] == "hcom_allReduce__1_2_1"


@pytest.mark.parametrize("fetch_rows", [1, 2, 4096])
def test_files_written_a_step_at_a_time_equal_the_whole_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fetch_rows: int
) -> None:
    """Streaming the members (any number of ops fetched at once) writes json.dumps of the dicts."""
    steps = steps_table([(1, 0, 15000), (2, 15001, 35000), (1, 35001, 45000), (4, 45001, 60000)])
    whole = communication(ops_table(), links_table(), steps, wall_offset_ns=7)
    whole_matrix = communication_matrix(ops_table(), links_table(), steps)
    monkeypatch.setattr("profstream.sinks.communication_json.FETCH_ROWS", fetch_rows)
    with CommunicationJsonSink(tmp_path, wall_offset_ns=7) as sink:
        for batch in ops_table().to_batches(max_chunksize=1):  # one chunk per row, as batches arrive
            sink.write("comm_ops", batch)
        sink.write("comm_links", links_table().to_batches()[0])
        sink.write("framework_steps", steps.to_batches()[0])
    assert (tmp_path / "communication.json").read_text() == json.dumps(whole)
    assert (tmp_path / "communication_matrix.json").read_text() == json.dumps(whole_matrix)


def test_sink_writes_both_files(tmp_path: Path) -> None:
    with CommunicationJsonSink(tmp_path, device_id=0) as sink:
        sink.write("comm_ops", ops_table().to_batches()[0])
        sink.write("comm_links", links_table().to_batches()[0])
        assert not (tmp_path / "communication.json").exists()  # written at close
    assert json.loads((tmp_path / "communication.json").read_text())["step"]["p2p"]
    assert json.loads((tmp_path / "communication_matrix.json").read_text())["step"]["collective"]
    aborted = CommunicationJsonSink(tmp_path / "x")
    aborted.write("comm_ops", ops_table().to_batches()[0])
    aborted.abort()
    assert not (tmp_path / "x").exists() or not list((tmp_path / "x").iterdir())


def test_finish_renders_both_files_hidden_and_close_renames_them(tmp_path: Path) -> None:
    with CommunicationJsonSink(tmp_path / "whole", device_id=0) as whole:
        whole.write("comm_ops", ops_table().to_batches()[0])
    sink = CommunicationJsonSink(tmp_path / "two", device_id=0)
    sink.write("comm_ops", ops_table().to_batches()[0])
    sink.finish()
    assert not sink._batches["comm_ops"]  # rendered: the tables are let go
    hidden = sorted((p.name, p.stat().st_size) for p in (tmp_path / "two").iterdir())
    assert len(hidden) == 2 and all(name.startswith(".") for name, _ in hidden)
    sink.close()
    assert sorted(size for _, size in hidden) == sorted(p.stat().st_size for p in sink.paths)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "communication.json",
        "communication_matrix.json",
    ]
    for path in sink.paths:
        assert path.read_bytes() == (tmp_path / "whole" / path.name).read_bytes()


def _shape(value: Any, depth: int) -> Any:
    """Key structure of nested dicts, ``depth`` levels down (op names and links collapsed)."""
    if not isinstance(value, dict) or depth == 0:
        return type(value).__name__ if not isinstance(value, int | float) else "number"
    return {k: _shape(v, depth - 1) for k, v in value.items()}


@pytest.mark.skipif(not TORCH.exists(), reason="realdata not available")
def test_structure_matches_real_torch_npu_files() -> None:
    real = json.loads((TORCH / "communication.json").read_text())
    ours = communication(ops_table(), links_table(), steps_table([(50, 0, 10**9)]))
    real_step, our_step = next(iter(real.values())), ours["step50"]
    assert list(real_step) == list(our_step) == ["p2p", "collective"]
    real_ops, our_ops = real_step["collective"], our_step["collective"]
    real_op = next(v for k, v in real_ops.items() if k != "Total Op Info")
    our_op = our_ops["hcom_allReduce__1_0_1@g"]
    for part in ("Communication Time Info", "Communication Bandwidth Info"):
        assert _shape(our_op[part], 2) == _shape(real_op[part], 2)
    real_total, our_total = real_ops["Total Op Info"], our_ops["Total Op Info"]
    assert list(our_total["Communication Time Info"]) == list(real_total["Communication Time Info"])
    for transport in real_total["Communication Bandwidth Info"]:
        assert list(our_total["Communication Bandwidth Info"][transport]) == list(
            real_total["Communication Bandwidth Info"][transport]
        )
    assert set(real_ops) - {"Total Op Info"} <= {k for k in real_ops if "@" in k}

    real_matrix = json.loads((TORCH / "communication_matrix.json").read_text())
    ours_matrix = communication_matrix(ops_table(), links_table(), steps_table([(50, 0, 10**9)]))
    real_groups = next(iter(real_matrix.values()))
    assert list(real_groups) == list(ours_matrix["step50"]) == ["p2p", "collective"]
    suffixes = {k.split("@")[0].split("-")[-1] for k in real_groups["collective"]}
    assert suffixes == {k.split("@")[0].split("-")[-1] for k in ours_matrix["step50"]["collective"]}
    for name, links in real_groups["collective"].items():
        real_entry = next(iter(links.values()))
        summary = name.split("@")[0].split("-")[-1]  # top1, middle, ..., total
        our_entry = next(iter(ours_matrix["step50"]["collective"][f"allreduce-{summary}@g"].values()))
        assert list(our_entry) == list(real_entry)


@pytest.mark.skipif(not CLUSTER.exists(), reason="realdata not available")
def test_op_entries_match_cluster_communication() -> None:
    cluster = json.loads((CLUSTER / "cluster_communication.json").read_text())
    ranks = next(iter(next(iter(cluster.values())).values()))
    real_op = next(iter(next(iter(ranks.values())).values()))
    ours = communication(ops_table(), links_table())["step"]["collective"]["hcom_allReduce__1_0_1@g"]
    assert list(ours) == list(real_op)
    assert list(ours["Communication Time Info"]) == list(real_op["Communication Time Info"])
    for transport, entry in real_op["Communication Bandwidth Info"].items():
        assert list(ours["Communication Bandwidth Info"][transport]) == list(entry)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=2, max_size=8),
    st.lists(st.integers(-5, 80), max_size=30),
)
def test_ops_go_to_the_first_step_that_contains_them(spans: list[tuple[int, int]], times: list[int]) -> None:
    """torch_npu's split_comm_op_by_step: the first step in start order with start <= t <= end."""
    steps = sorted((float(a), float(a + d)) for a, d in spans)
    expected = []
    for t in times:
        found = [index for index, (start, end) in enumerate(steps) if start <= t <= end]
        expected.append(found[0] if found else -1)
    starts, ends = (np.array(column, np.float64) for column in zip(*steps, strict=True))
    assert _assign(np.array(times, np.float64), starts, ends).tolist() == expected


def test_torch_npu_output_spools_rows_until_close_and_writes_the_sinks_files(tmp_path: Path) -> None:
    steps = steps_table([(1, 0, 35000), (2, 35000, 60000)])
    direct = tmp_path / "direct"
    tables = {"comm_ops": ops_table(), "comm_links": links_table(), "framework_steps": steps}
    with CommunicationJsonSink(direct) as sink:
        for name, table in tables.items():
            sink.write(name, table.to_batches()[0])
    context = Context(tmp_path / "out", "20260101000000", 0, (0,), [], stars=False, process_id=0)
    output = Communication(context)
    for batch in links_table().to_batches(max_chunksize=2):
        output.write("comm_links", batch)
    for batch in ops_table().to_batches(max_chunksize=1):
        output.write("comm_ops", batch)
    output.write("framework_steps", steps.to_batches()[0])  # the steps close after their ops
    assert not output.sink._batches["comm_ops"]  # held on disk, not in the sink
    assert [p.name for p in context.out_dir.iterdir()] == [output._spool_dir.name]
    paths = output.close()
    assert sorted(p.name for p in paths) == ["communication.json", "communication_matrix.json"]
    for path in paths:
        assert path.read_bytes() == (direct / path.name).read_bytes()
    assert not list(context.out_dir.glob(".spool-*"))
    aborted = Communication(context)
    aborted.write("comm_ops", ops_table().to_batches()[0])
    aborted.abort()
    assert not list(context.out_dir.glob(".spool-*"))
