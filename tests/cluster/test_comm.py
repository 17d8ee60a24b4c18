"""Communication analysis of one rank on hand-built comm / comm_tasks rows (expected values by hand)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from profstream.cluster import comm
from profstream.cluster.comm import StepWindows
from profstream.engine.schema import TABLES, conform

MB = 1024 * 1024
OP1, OP2 = "hcom_allReduce__1_0_1", "hcom_allReduce__2_0_1"


def _comm(rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.Table.from_batches(
        [
            conform(
                TABLES["comm"],
                {
                    "device_id": [0] * len(rows),
                    "op_name": [r[0] for r in rows],
                    "group_name": ["g"] * len(rows),
                    "start_ns": [r[1] for r in rows],
                    "end_ns": [r[2] for r in rows],
                },
            )
        ]
    )


def _tasks(rows: list[tuple[str, int, str, int, int, str, str, int, int, int]]) -> pa.Table:
    names = ("op_name", "plane_id", "name", "start_ns", "end_ns", "transport_type", "link_type", "size_bytes")
    columns: dict[str, list[object]] = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    columns["src_rank"] = [r[8] for r in rows]
    columns["dst_rank"] = [r[9] for r in rows]
    columns["group_name"] = ["g"] * len(rows)
    columns["device_id"] = [0] * len(rows)
    return pa.Table.from_batches([conform(TABLES["comm_tasks"], columns)])


#: OP1 [1000, 2000): master plane waits 1000-1200 and 1600-1800, copies 64 MB over HCCS 1200-1700;
#: plane 1 copies 1 MB over PCIE 1300-1500 and waits 1000-1900 (not the master: no time counted).
#: OP2 [3000, 4000): 32 MB over HCCS 3000-4000 on the same link 0-1.
TASKS = [
    (OP1, 0, "Notify_Wait", 1000, 1200, "SDMA", "HCCS", 4, 0, 1),
    (OP1, 0, "Memcpy", 1200, 1700, "SDMA", "HCCS", 64 * MB, 0, 1),
    (OP1, 0, "Notify_Wait", 1600, 1800, "SDMA", "HCCS", 4, 0, 1),
    (OP1, 0, "Notify_Record", 1800, 1850, "SDMA", "HCCS", 4, 0, 1),
    (OP1, 1, "Notify_Wait", 1000, 1900, "SDMA", "PCIE", 4, 0, 2),
    (OP1, 1, "Memcpy", 1300, 1500, "SDMA", "PCIE", 1 * MB, 0, 2),
    (OP2, 0, "Memcpy", 3000, 4000, "SDMA", "HCCS", 32 * MB, 0, 1),
]


def _analyse(steps: StepWindows | None = None) -> tuple[pa.Table, pa.Table]:
    ops = _comm([(OP1, 1000, 2000), (OP2, 3000, 4000)])
    return comm.analyse_raw(ops, _tasks(TASKS), steps or StepWindows(), 5_000)


def test_time_info_follows_the_master_plane_rules() -> None:
    ops, _ = _analyse()
    info = json.loads(ops["info"][0].as_py())[comm.TIME_INFO]
    assert ops["op"][0].as_py() == f"{OP1}@g"
    assert info["Start Timestamp(us)"] == (1000 + 5_000) / 1000
    assert info["Elapse Time(ms)"] == pytest.approx(1000e-6)
    assert info["Transit Time(ms)"] == pytest.approx(500e-6)  # 1200-1700
    assert info["Wait Time(ms)"] == pytest.approx(300e-6)  # 1000-1200 and 1700-1800
    assert info["Synchronization Time(ms)"] == pytest.approx(200e-6)  # the wait before 1200
    assert info["Idle Time(ms)"] == pytest.approx(200e-6)  # 1000 - |1000-1800|
    assert info["Wait Time Ratio"] == round(300 / 800, 4)
    assert info["Synchronization Time Ratio"] == round(200 / 700, 4)


def test_bandwidth_info_per_transport_and_sdma_sum() -> None:
    ops, _ = _analyse()
    info = json.loads(ops["info"][0].as_py())[comm.BANDWIDTH_INFO]
    assert list(info) == list(comm.TRANSPORTS)
    hccs, pcie, sdma = info["HCCS"], info["PCIE"], info["SDMA"]
    assert (hccs["Transit Size(MB)"], hccs["Transit Time(ms)"]) == (64.0, pytest.approx(500e-6))
    assert hccs["Bandwidth(GB/s)"] == round((64 / 1024) / (500e-6 / 1000), 4)
    assert hccs["Large Packet Ratio"] == 1.0  # 64 MB > 32 MB
    assert hccs["Size Distribution"] == {"64.0": [1, pytest.approx(500e-6)]}
    assert pcie["Large Packet Ratio"] == 0.0
    assert sdma["Transit Size(MB)"] == 65.0
    assert sdma["Bandwidth(GB/s)"] == round((65 / 1024) / (700e-6 / 1000), 4)
    assert info["RDMA"]["Transit Size(MB)"] == 0


def test_matrix_keeps_top_middle_bottom_and_total_per_link() -> None:
    _, matrix = _analyse()
    rows = {(r["op"], r["src"], r["dst"]): r for r in matrix.to_pylist()}
    link = "allreduce-{}@g"
    assert rows[(link.format("top1"), 0, 1)]["op_name"] == OP1  # 64 MB in 500 ns beats 32 MB in 1000 ns
    assert rows[(link.format("middle"), 0, 1)]["op_name"] == OP2  # index 2 // 2
    assert rows[(link.format("bottom1"), 0, 1)]["op_name"] == OP2
    assert rows[(link.format("bottom2"), 0, 1)]["op_name"] == OP1
    assert (link.format("bottom3"), 0, 1) not in rows
    total = rows[(link.format("total"), 0, 1)]
    assert (total["size_mb"], total["time_ms"]) == (96.0, pytest.approx(1500e-6))
    assert total["bandwidth"] == round(96 / 1500e-6, 4)  # MB / ms, as torch_npu's total
    pcie = rows[(link.format("top1"), 0, 2)]
    assert (pcie["transport"], pcie["size_mb"]) == ("PCIE", 1.0)


def test_steps_assign_ops_by_their_start() -> None:
    starts = np.array([5, 15, 25], np.int64)
    assert StepWindows().assign(starts) == ["step"] * 3
    assert StepWindows((7,), (100,), (200,)).assign(starts) == ["step7"] * 3  # one step takes all
    two = StepWindows((1, 2), (0, 10), (10, 20))
    assert two.assign(starts) == ["step1", "step2", None]  # 10 belongs to the first step
    ops, _ = _analyse(StepWindows((1, 2), (0, 2500), (2500, 3500)))
    assert ops["step"].to_pylist() == ["step1", "step2"]
    ops, matrix = _analyse(StepWindows((1, 2), (0, 100), (100, 2500)))
    assert ops["step"].to_pylist() == ["step2"]  # OP2 starts after every step: dropped
    assert set(matrix["op_name"].to_pylist()) <= {OP1, ""}


def test_kinds_and_op_types() -> None:
    assert comm.kind_of("HCOM_Send__1@g") == "p2p"
    assert comm.kind_of("hcom_batchSendRecv__1@g") == "p2p"
    assert comm.kind_of("hcom_allGather__1@g") == "collective"
    assert comm.op_type("hcom_reduceScatter__4@g") == "reduce"  # alternation order: reduce first
    assert comm.op_type("hcom_allReduce__4@g") == "allreduce"
    assert comm.op_type("custom__9@g") == "custom"


def test_union_length() -> None:
    starts = np.array([0, 5, 10, 30, 40], np.int64)
    ends = np.array([10, 8, 20, 30, 45], np.int64)
    assert comm.union_length(starts, ends) == 20 + 5  # touching merge, empty ignored


def test_exported_files_read_back(tmp_path: object) -> None:
    from pathlib import Path

    out = Path(str(tmp_path))
    ops, matrix = _analyse()
    info = {row["op"]: json.loads(row["info"]) for row in ops.to_pylist()}
    (out / "communication.json").write_text(
        json.dumps({"step": {"collective": {**info, "Total Op Info": {}}, "p2p": {}}})
    )
    links: dict[str, dict[str, object]] = {}
    for row in matrix.to_pylist():
        links.setdefault(row["op"], {})[f"{row['src']}-{row['dst']}"] = {
            "Transport Type": row["transport"],
            "Transit Size(MB)": row["size_mb"],
            "Transit Time(ms)": row["time_ms"],
            "Bandwidth(GB/s)": row["bandwidth"],
            "Op Name": row["op_name"],
        }
    (out / "communication_matrix.json").write_text(json.dumps({"step": {"collective": links, "p2p": {}}}))
    found = comm.read_exported(out)
    assert found is not None
    read_ops, read_matrix = found
    assert read_ops["op"].to_pylist() == ops["op"].to_pylist()
    assert [json.loads(i) for i in read_ops["info"].to_pylist()] == list(info.values())
    assert (
        read_matrix.drop_columns(["kind"]).sort_by("op").equals(matrix.drop_columns(["kind"]).sort_by("op"))
    )
