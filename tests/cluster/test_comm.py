"""A rank's communication rows: the engine's comm_ops / comm_links rendered as the export renders them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from profstream import events
from profstream.cluster import comm
from profstream.errors import DecodeError
from profstream.sinks.communication_json import communication, communication_matrix
from tests.sinks.test_communication_json import links_table, ops_table, steps_table

REDUCE1, SEND, REDUCE3, REDUCE4 = (
    "hcom_allReduce__1_0_1",
    "hcom_send__1_1_1",
    "hcom_allReduce__1_2_1",
    "hcom_allReduce__1_3_1",
)
NO_STEPS = steps_table([])


def _analyse(steps: pa.Table = NO_STEPS) -> tuple[pa.Table, pa.Table]:
    return comm.analyse(ops_table(), links_table(), steps, 5_000_000)


def test_ops_are_the_export_entries() -> None:
    ops = _analyse()[0].sort_by("start_ns")  # rows come in document order: p2p before collective
    assert ops["op"].to_pylist() == [f"{n}@g" for n in (REDUCE1, SEND, REDUCE3, REDUCE4)]
    assert ops["kind"].to_pylist() == ["collective", "p2p", "collective", "collective"]
    assert set(ops["step"].to_pylist()) == {"step"} and set(ops["group"].to_pylist()) == {"g"}
    assert ops["start_ns"].to_pylist() == [5_001_000, 5_020_000, 5_040_000, 5_050_000]  # + wall offset
    doc = communication(ops_table(), links_table(), wall_offset_ns=5_000_000)
    assert json.loads(ops["info"][0].as_py()) == json.loads(
        json.dumps(doc["step"]["collective"][f"{REDUCE1}@g"])
    )
    time = json.loads(ops["info"][1].as_py())["Communication Time Info"]
    assert (time["Transit Time(ms)"], time["Wait Time(ms)"]) == (0.005, 0)  # 5000 ns; no Notify_Wait


def test_matrix_rows_rank_each_link_by_bandwidth() -> None:
    _, matrix = _analyse()
    rows = {(r["op"], r["src"], r["dst"]): r for r in matrix.to_pylist()}
    # link 0-1 of the all-reduces: 3 MB in 1 us (3000 GB/s), then 2 MB in 2 us twice (1000, op order)
    names = {
        label: rows[(f"allreduce-{label}@g", 0, 1)]["op_name"] for label in ("top1", "middle", "bottom1")
    }
    assert names == {"top1": REDUCE3, "middle": REDUCE1, "bottom1": REDUCE4}
    assert rows[("allreduce-bottom3@g", 0, 1)]["op_name"] == REDUCE3
    total = rows[("allreduce-total@g", 0, 1)]
    assert (total["size_mb"], total["time_ms"], total["bandwidth"], total["op_name"]) == (
        7.0,
        pytest.approx(0.005),
        1400.0,
        "",
    )
    assert rows[("allreduce-top1@g", 0, 0)]["transport"] == "LOCAL"
    send = rows[("send-top1@g", 0, 8)]
    assert (send["kind"], send["transport"], send["size_mb"], send["bandwidth"]) == (
        "p2p",
        "RDMA",
        4.0,
        800.0,
    )


def test_ops_outside_every_step_are_dropped() -> None:
    with capture_logs() as logs:
        ops, matrix = _analyse(steps_table([(2, 0, 15000), (3, 15001, 45000)]))
    assert [e["ops_outside_steps"] for e in logs if e["event"] == events.RECORDS_UNMATCHED] == [1]
    ops = ops.sort_by("start_ns")
    assert list(zip(ops["step"].to_pylist(), ops["op"].to_pylist(), strict=True)) == [
        ("step2", f"{REDUCE1}@g"),
        ("step3", f"{SEND}@g"),
        ("step3", f"{REDUCE3}@g"),
    ]
    assert REDUCE4 not in matrix["op_name"].to_pylist()


def test_no_ops_no_rows() -> None:
    ops, matrix = comm.analyse(ops_table()[:0], links_table(), NO_STEPS, 0)
    assert ops.num_rows == matrix.num_rows == 0


def test_exported_files_read_back_as_analysed(tmp_path: Path) -> None:
    assert comm.read_exported(tmp_path) is None
    steps = steps_table([(2, 0, 15000), (3, 15001, 45000)])
    doc = communication(ops_table(), links_table(), steps, wall_offset_ns=5_000_000)
    (tmp_path / "communication.json").write_text(json.dumps(doc))
    (tmp_path / "communication_matrix.json").write_text(
        json.dumps(communication_matrix(ops_table(), links_table(), steps))
    )
    found = comm.read_exported(tmp_path)
    assert found is not None
    ops, matrix = _analyse(steps)
    assert found[0].equals(ops) and found[1].equals(matrix)


def test_malformed_export_is_a_decode_error(tmp_path: Path) -> None:
    (tmp_path / "communication.json").write_text('{"step": ["not", "a", "dict"]}')
    with pytest.raises(DecodeError, match="step -> p2p/collective"):
        comm.read_exported(tmp_path)
