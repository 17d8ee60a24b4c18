"""Exports of simulated runs against the simulator's ground truth, and the export's guarantees."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

import profstream
from profstream.config import ExportSettings
from profstream.engine import plan
from profstream.engine.operators import overlap
from profstream.engine.schema import NO_ID
from profstream.errors import DecodeError
from profstream.export import IterationError, Selection, clear_caches, export
from profstream.simulate import SimulationConfig, simulate
from tests.export.conftest import Run


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def one(directory: Path, pattern: str) -> Path:
    """The newest file of a module: msprof's output dir keeps every export's timestamped files."""
    found = sorted(directory.glob(pattern))
    assert found, pattern
    return found[-1]


def micros(ns: int) -> Decimal:
    return Decimal(ns) / 1000


def truth_tasks(run: Run) -> list[dict[str, object]]:
    """The tasks op_summary lists: those with GE compute-task info (HCCL tasks and the runtime's own
    memcpy, GE task type ``-``, have none; msprof_outputs.md §2.1)."""
    tasks = pq.read_table(run.truth / "tasks.parquet")
    return [t for t in tasks.to_pylist() if t["ge_task_type"] not in ("HCCL", "-")]


def test_op_summary_lists_every_matched_task_with_its_duration(graph_run: Run) -> None:
    graph_run.export("msprof", "summary")
    out = graph_run.out / "msprof" / "mindstudio_profiler_output"
    everything = rows(one(out, "op_summary_*.csv"))
    written = [r for r in everything if r["Task ID"] != "N/A"]
    expected = truth_tasks(graph_run)
    assert len(written) == len(expected)
    # one row per communication op (§2.1), none per HCCL task
    ops = [r for r in everything if r["Task ID"] == "N/A"]
    comm = profstream.open(graph_run.raw).table("comm").read_all()
    assert sorted(r["Op Name"] for r in ops) == sorted(comm.column("op_name").to_pylist())
    assert {r["Task Type"] for r in ops} == {"COMMUNICATION"}
    assert sorted(Decimal(r["Task Duration(us)"]) for r in ops) == sorted(
        micros(e - s)
        for s, e in zip(comm.column("start_ns").to_pylist(), comm.column("end_ns").to_pylist(), strict=True)
    )
    by_key = {(t["device_id"], t["stream_id"], t["task_id"], t["start_ns"]): t for t in expected}
    offset = None
    for row in written:
        start = Decimal(row["Task Start Time(us)"].rstrip("\t"))
        assert row["Task Start Time(us)"].endswith("\t")
        match = [
            t
            for (d, s, k, _), t in by_key.items()
            if (d, s, k) == (int(row["Device_id"]), int(row["Stream ID"]), int(row["Task ID"]))
        ]
        assert match, row
        task = min(match, key=lambda t: abs(micros(t["start_ns"]) + (offset or 0) - start))  # type: ignore[arg-type]
        if offset is None:
            offset = start - micros(task["start_ns"])  # type: ignore[arg-type]
        assert start - offset == micros(task["start_ns"])  # type: ignore[arg-type]
        assert Decimal(row["Task Duration(us)"]) == micros(task["end_ns"] - task["start_ns"])  # type: ignore[operator]
        assert row["Op Name"] == task["op_name"]
        assert row["OP Type"] == task["op_type"]
    # msprof's order: device by device, start times rising within each, communication rows merged in
    devices = [int(r["Device_id"]) for r in everything]
    assert devices == sorted(devices)
    for device in set(devices):
        starts = [
            Decimal(r["Task Start Time(us)"].rstrip("\t"))
            for r in everything
            if int(r["Device_id"]) == device
        ]
        assert starts == sorted(starts)
    assert "Context ID" not in written[0]  # no STARS on 910A (msprof_outputs.md §2.1)


def test_task_wait_time_is_the_gap_to_the_previous_task_of_the_device(graph_run: Run) -> None:
    graph_run.export("msprof", "summary")
    written = rows(one(graph_run.out / "msprof" / "mindstudio_profiler_output", "op_summary_*.csv"))
    previous: dict[str, Decimal] = {}
    for row in written:
        start = Decimal(row["Task Start Time(us)"].rstrip("\t"))
        expected = max(Decimal(0), start - previous[row["Device_id"]]) if row["Device_id"] in previous else 0
        assert Decimal(row["Task Wait Time(us)"]) == expected
        previous[row["Device_id"]] = start + Decimal(row["Task Duration(us)"])


def test_step_trace_time_equals_the_per_step_truth(torch_run: Run) -> None:
    """The lanes bucketed by step equal the truth; Free differs by design (tests/engine/test_plan.py)."""
    torch_run.export("torch_npu", "summary")
    out = torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT"
    written = {int(r["Step"]): r for r in rows(out / "step_trace_time.csv")}
    truth = pq.read_table(torch_run.truth / "steps.parquet").to_pylist()
    assert sorted(written) == sorted(s["iteration"] for s in truth)
    columns = {
        "Computing": "computing_ns",
        "Communication": "communication_ns",
        "Communication(Not Overlapped)": "comm_not_overlapped_ns",
        "Overlapped": "overlapped_ns",
    }
    for step in truth:
        row = written[step["iteration"]]
        for header, column in columns.items():
            assert Decimal(row[header]) == micros(step[column]), header


def test_operator_memory_lists_pytorch_rows_then_cann_prefixed_ge_rows(torch_run: Run) -> None:
    """torch_npu appends CANN's operator memory after its own rows, names prefixed ``cann::``; its own
    rows are sorted by allocation time (§4b), CANN's come in release-time order with CANN's Duration cell
    (the real files in shared/realdata)."""
    torch_run.export("torch_npu", "summary")
    written = rows(torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv")
    memory = profstream.open(torch_run.raw).table("memory").read_all().to_pylist()
    ge = sorted(f"cann::{r['name']}" for r in memory if r["source"] == "GE")
    pta = sorted(r["name"] for r in memory if r["source"] == "PTA")
    assert ge and pta
    is_ge = [r["Name"].startswith("cann::") for r in written]
    assert is_ge == [False] * len(pta) + [True] * len(ge)
    assert sorted(r["Name"] for r in written[: len(pta)]) == pta
    assert sorted(r["Name"] for r in written[len(pta) :]) == ge
    # CANN's rows of allocations never released come last, with msprof's 0.0 Duration, and torch_npu
    # reads their Release Time as the allocation time plus that (GeOpMemoryBean.release_time)
    cann = written[len(pta) :]
    released = [r for r in cann if r["Duration(us)"] != "0.0"]
    assert all(r["Release Time(us)"] == r["Allocation Time(us)"] for r in cann[len(released) :])
    for part, when in ((written[: len(pta)], "Allocation"), (released, "Release")):
        times = [Decimal(r[f"{when} Time(us)"].rstrip("\t")) for r in part if r[f"{when} Time(us)"]]
        assert times == sorted(times)
        assert all(r[f"{when} Time(us)"] for r in part[: len(times)])  # rows without one come last
    pta_durations = {r["Duration(us)"][-1:] for r in written[: len(pta)] if r["Duration(us)"]}
    assert pta_durations == {"\t"}  # torch_npu's own format: three decimals and a TAB
    ge_durations = [r["Duration(us)"] for r in written[len(pta) :] if r["Duration(us)"]]
    assert ge_durations
    for duration in ge_durations:  # CANN's cell: µs as msprof prints them, no TAB
        assert not duration.endswith("\t") and Decimal(duration) == round(Decimal(duration), 3)


def test_msprof_operator_memory_lists_releases_in_order_then_what_was_never_released(
    graph_run: Run, tmp_path: Path
) -> None:
    """msprof's Python calculator appends a row at each release record, then the allocations never
    released (``NpuOpMemCalculator._calc_operator_memory``); the order must not depend on how the
    pipeline batches its input."""
    files = {}
    for name, options in (("default", {}), ("small", {"chunk_bytes": 4096, "advance_bytes": 0})):
        export(graph_run.raw, kind="summary", output=tmp_path / name, **options)  # type: ignore[arg-type]
        files[name] = one(tmp_path / name / "mindstudio_profiler_output", "operator_memory_*.csv")
    assert files["default"].read_bytes() == files["small"].read_bytes()
    table = rows(files["default"])
    assert all(r["Allocation Time(us)"] != "N/A" for r in table)  # a release alone makes no row
    for device in {r["Device_id"] for r in table}:
        mine = [r for r in table if r["Device_id"] == device]
        released = [r for r in mine if r["Duration(us)"] != "0.0"]
        unreleased = [r for r in mine if r["Duration(us)"] == "0.0"]  # msprof's 0 (NULL_NUMBER)
        assert released and unreleased
        assert {(r["Release Total Allocated(KB)"], r["Release Total Reserved(KB)"]) for r in unreleased} == {
            ("0.0", "0.0")
        }
        ends = [Decimal(r["Allocation Time(us)"].rstrip("\t")) + Decimal(r["Duration(us)"]) for r in released]
        assert ends == sorted(ends)
        assert mine[-len(unreleased) :] == unreleased


def test_kernel_details_step_ids_follow_the_framework_steps(torch_run: Run) -> None:
    torch_run.export("torch_npu", "summary")
    everything = rows(torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    written = [r for r in everything if r["Task ID"] != "N/A"]
    expected = Counter(t["iteration"] for t in truth_tasks(torch_run))
    assert Counter(int(r["Step Id"]) for r in written) == expected
    ops = [r for r in everything if r["Task ID"] == "N/A"]  # the all-reduce of each step, as HCCL
    assert Counter(int(r["Step Id"]) for r in ops) == Counter(expected.keys())
    assert {(r["Accelerator Core"], r["Block Dim"], r["Mix Block Dim"]) for r in ops} == {
        ("HCCL", "0", "N/A")
    }
    written = everything
    raw = (torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").read_bytes()
    assert raw.count(b"\r\n") == len(written) + 1  # csv.writer's line ends, as torch_npu writes


def test_timeline_has_every_task_and_its_launch_flow(torch_run: Run) -> None:
    torch_run.export("torch_npu", "timeline")
    events = json.loads(
        (torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text()
    )
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    hardware = [
        e for e in events if e["ph"] == "X" and names.get(e["pid"]) == "Ascend Hardware" and e["tid"] < 70000
    ]
    tasks = pq.read_table(torch_run.truth / "tasks.parquet")
    assert len(hardware) == tasks.num_rows
    assert all(isinstance(e["ts"], str) and len(e["ts"].split(".")[1]) == 3 for e in hardware)
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "HostToDevice"}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "HostToDevice"}
    assert starts.keys() == ends.keys() and starts
    assert all(Decimal(starts[i]["ts"]) <= Decimal(ends[i]["ts"]) for i in starts)
    assert Counter(names.values())["Python"] == 1
    comm = [e for e in events if e["ph"] == "X" and names.get(e["pid"]) == "Communication"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    ops = profstream.open(torch_run.raw).table("comm").read_all()
    on_group = [e for e in comm if threads[e["pid"], e["tid"]].startswith("Group ")]
    assert sorted(e["name"] for e in on_group) == sorted(ops.column("op_name").to_pylist())
    assert all(threads[e["pid"], e["tid"]].startswith(("Group ", "Plane ")) for e in comm)
    # flows end where msprof's C++ ends them: a task with an op name that is not an HCCL task, every
    # MEMCPY_ASYNC task, and each communication op on its group thread (never on an HCCL task's plane)
    table = profstream.open(torch_run.raw).table("tasks").read_all().to_pylist()
    split = {(t["stream_id"], t["task_id"], t["batch_id"]) for t in table if t["context_id"] != NO_ID}
    drawn = [
        t
        for t in table
        if t["context_id"] != NO_ID or (t["stream_id"], t["task_id"], t["batch_id"]) not in split
    ]
    flowed = [
        t
        for t in drawn  # a task drawn by its contexts is not drawn itself
        if t["connection_id"] is not None
        and t["launch_ns"] is not None
        and (
            (t["op_name"] is not None and t["task_type"] not in ("HCCL", "HCCL_AI_CPU"))
            or t["host_task_type"] == "MEMCPY_ASYNC"
        )
    ]
    flow_ends = [e for e in events if e["ph"] == "f" and e["cat"] == "HostToDevice"]
    at_ops = [e for e in flow_ends if names[e["pid"]] == "Communication"]
    assert all(threads[e["pid"], e["tid"]].startswith("Group ") for e in at_ops)
    assert len(at_ops) == len(on_group) == ops.num_rows > 0
    assert len(flow_ends) - len(at_ops) == len(flowed) > 0
    # torch_npu's kernels are those ends (as in the real traces, tests/golden/test_realdata.py): every
    # torch_to_npu arrow ends on one, communication ops included, and no two arrows on the same event
    torch_to_npu = [
        (e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "f" and e["cat"] == "async_npu"
    ]
    assert set(torch_to_npu) <= {(e["pid"], e["tid"], e["ts"]) for e in flow_ends}
    assert len(set(torch_to_npu)) == len(torch_to_npu)
    assert 0 < sum(1 for pid, _, _ in torch_to_npu if names[pid] == "Communication") <= len(at_ops)
    # each HCCL task: its size over its duration (no RDMA payloads here) and its op's model id
    on_planes = [e for e in comm if threads[e["pid"], e["tid"]].startswith("Plane ")]
    assert on_planes
    for task in on_planes:
        args, nanoseconds = task["args"], Decimal(str(task["dur"])) * 1000
        assert args["bandwidth(GB/s)"] == pytest.approx(float(args["size(Byte)"] / nanoseconds), rel=1e-12)
        op = next(
            o
            for o in on_group
            if Decimal(o["ts"]) <= Decimal(task["ts"]) <= Decimal(o["ts"]) + Decimal(str(o["dur"]))
        )
        assert args["model id"] == op["args"]["model id"]


def test_parquet_layout_round_trips_every_table(torch_run: Run) -> None:
    torch_run.export("parquet")
    for name in ("tasks", "api", "ops", "memory_record", "step_time"):
        written = ds.dataset(torch_run.out / "parquet" / "parquet" / name, partitioning="hive").to_table()
        direct = profstream.open(torch_run.raw).table(name).read_all()
        assert written.num_rows == direct.num_rows > 0, name
        assert sorted(
            written.column(
                "start_ns" if "start_ns" in direct.column_names else direct.column_names[1]
            ).to_pylist(),
            key=str,
        ) == sorted(
            direct.column(
                "start_ns" if "start_ns" in direct.column_names else direct.column_names[1]
            ).to_pylist(),
            key=str,
        ), name


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with its columns in name order, dictionaries decoded, and its rows sorted."""
    columns = {}
    for name in sorted(table.column_names):
        values = table.column(name)
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        columns[name] = values.cast(pa.string()) if pa.types.is_large_string(values.type) else values
    plain = pa.table(columns)
    keys = [name for name in plain.column_names if not pa.types.is_nested(plain.schema.field(name).type)]
    return plain.sort_by([(name, "ascending") for name in keys])


def test_parquet_tables_do_not_depend_on_where_the_stages_advance(torch_run: Run, tmp_path: Path) -> None:
    """The writer's last stage reads each batch the rest emitted as a message of its own, so it may
    advance between two batches of one emit (CommAnalysis once analysed the ops of an emit before their
    tasks came, leaving their times null and dropping the tasks). Advancing after every message must
    give the same tables, and the communication tables those of one pipeline."""
    roots = {}
    for name, options in (("default", {}), ("every", {"chunk_bytes": 4096, "advance_bytes": 0})):
        export(torch_run.raw, kind="summary", layout="parquet", output=tmp_path / name, **options)  # type: ignore[arg-type]
        roots[name] = tmp_path / name / "parquet"
    names = sorted(p.name for p in roots["default"].iterdir())
    assert names == sorted(p.name for p in roots["every"].iterdir())
    assert "comm_ops" in names and "comm_links" in names
    for table in names:
        default, every = (ds.dataset(root / table, partitioning="hive").to_table() for root in roots.values())
        assert _plain(default) == _plain(every), table
    for table in ("comm_ops", "comm_links"):
        written = ds.dataset(roots["every"] / table, partitioning="hive").to_table()
        direct = profstream.open(torch_run.raw).table(table).read_all()
        kept = [c for c in direct.column_names if c != "device_id"]
        assert written.num_rows == direct.num_rows > 0
        assert _plain(written.select(kept)) == _plain(direct.select(kept)), table


@pytest.mark.parametrize("layout", ["msprof", "torch_npu"])
def test_summaries_do_not_depend_on_where_the_stages_advance(
    layout: str, torch_run: Run, tmp_path: Path
) -> None:
    """The summary files, byte for byte, whether the stages advance every 16 MB or after every message
    (msprof's file names carry the export's time: it is left out of the comparison)."""
    files = {}
    for name, options in (("default", {}), ("every", {"chunk_bytes": 4096, "advance_bytes": 0})):
        out = tmp_path / name
        export(torch_run.raw, kind="summary", layout=layout, output=out, **options)  # type: ignore[arg-type]
        written = (p for p in sorted(out.rglob("*")) if p.suffix in (".csv", ".json"))
        files[name] = {re.sub(r"_\d{14}", "", p.relative_to(out).as_posix()): p.read_bytes() for p in written}
    assert len(files["default"]) > 5
    assert files["default"] == files["every"]


def _summaries(raw: Path, layout: str, out: Path) -> dict[str, bytes]:
    """The summary files of an export, by path without msprof's export time."""
    export(raw, kind="summary", layout=layout, output=out)  # type: ignore[arg-type]
    written = (p for p in sorted(out.rglob("*")) if p.suffix in (".csv", ".json"))
    return {re.sub(r"_\d{14}", "", p.relative_to(out).as_posix()): p.read_bytes() for p in written}


def _as_task_track_v2(v1: bytes) -> bytes:
    """task_track records moved by hand into MsprofRuntimeTrackV2's layout (msprof ``prof_struct.h``):
    header and device word stay, the u16 stream id at 26 becomes a u32 at 28, the task word moves from
    28 to 32, the u64 type at 32 becomes a u32 at 36; kernel name and extInfo stay at 40."""
    old = np.frombuffer(v1, np.uint8).reshape(-1, 64)
    assert not old[:, 36:40].any()  # the types fit 32 bits
    new = np.zeros_like(old)
    new[:, :26], new[:, 28:30], new[:, 32:40], new[:, 40:] = (
        old[:, :26],
        old[:, 26:28],
        old[:, 28:36],
        old[:, 40:],
    )
    return new.tobytes()


@pytest.mark.parametrize("layout", ["msprof", "torch_npu"])
def test_task_track_v2_files_give_the_summaries_of_their_v1_records(
    layout: str, torch_run: Run, tmp_path: Path
) -> None:
    """A host with task_track_v2 files and no task_track file exports as its V1 twin does; next to a V1
    file (even of the other aging group) V2 files are not read, as msprof's TaskTrackParser chooses."""
    only_v2, both = tmp_path / "v2", tmp_path / "both"
    shutil.copytree(torch_run.raw, only_v2)
    shutil.copytree(torch_run.raw, both)
    tracks = sorted(only_v2.rglob("host/data/*.compact.task_track.slice_*[0-9]"))
    assert tracks
    for track in tracks:
        track.with_name(track.name.replace("task_track", "task_track_v2")).write_bytes(
            _as_task_track_v2(track.read_bytes())
        )
        track.unlink()
    [host_data] = {t.parent for t in both.rglob("host/data/*.compact.task_track.slice_*[0-9]")}
    assert not list(host_data.glob("unaging.compact.task_track.*"))
    (host_data / "unaging.compact.task_track_v2.slice_0").write_bytes(bytes(64))  # bad magic: fails if read

    expected = _summaries(torch_run.raw, layout, tmp_path / "out_v1")
    assert len(expected) > 5
    assert _summaries(only_v2, layout, tmp_path / "out_v2") == expected
    assert _summaries(both, layout, tmp_path / "out_both") == expected


def test_parquet_layout_reads_the_same_in_pyarrow_duckdb_and_polars(graph_run: Run) -> None:
    """Issue #5: every table's dataset (two device partitions) reads as it is in DuckDB and Polars."""
    graph_run.export("parquet")
    root = graph_run.out / "parquet" / "parquet"
    tables = sorted(path for path in root.iterdir() if path.is_dir())
    assert len(tables) >= 10
    for directory in tables:
        by_pyarrow = _plain(ds.dataset(directory, partitioning="hive").to_table())
        files = str(directory / "**" / "*.parquet")
        query = f"select * from read_parquet('{files}', hive_partitioning=true)"
        by_duckdb = _plain(duckdb.sql(query).to_arrow_table())
        by_polars = _plain(pl.scan_parquet(files, hive_partitioning=True).collect().to_arrow())
        for name, back in (("duckdb", by_duckdb), ("polars", by_polars)):
            assert back.column_names == by_pyarrow.column_names, (directory.name, name)
            assert back.num_rows == by_pyarrow.num_rows, (directory.name, name)
            for column in back.column_names:
                want = by_pyarrow.column(column)
                assert back.column(column).cast(want.type).equals(want), (directory.name, name, column)
    devices = ds.dataset(root / "tasks", partitioning="hive").to_table().column("device_id")
    assert set(devices.to_pylist()) == {0, 1}


def test_json_summaries_have_the_csv_headers_as_keys(graph_run: Run) -> None:
    """The keys are the per-device headers: msprof copies each device's JSON as it is, without the
    ``Device_id`` its CSV merge adds (``MsprofOutputSummary._copy_summary_data``)."""
    graph_run.export("msprof", "summary", fmt="json")
    out = graph_run.out / "msprof" / "mindstudio_profiler_output"
    data = json.loads(one(out, "op_statistic_*.json").read_text())
    assert list(data[0]) == [
        "OP Type",
        "Core Type",
        "Count",
        "Total Time(us)",
        "Min Time(us)",
        "Avg Time(us)",
        "Max Time(us)",
        "Ratio(%)",
    ]
    assert sum(r["Count"] for r in data) == len(truth_tasks(graph_run))


def test_timeline_limit_is_never_exceeded_and_the_drop_report_is_exact(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    simulate(SimulationConfig(chip="910A", steps=16, ops_per_step=40, devices=2, seed=5), raw)
    full = export(raw, kind="timeline", output=tmp_path / "full")
    limited = export(
        raw, kind="timeline", output=tmp_path / "limited", settings=ExportSettings(timeline_limit_mb=1)
    )
    [main_full] = [f for f in full.collections[0].files if Path(f.path).name.startswith("msprof_")]
    assert main_full.bytes > 1 << 20, "the run must be larger than the limit for this test"

    def phases(report_files: list[str]) -> Counter[str]:
        counts: Counter[str] = Counter()
        for path in report_files:
            counts.update(e["ph"] for e in json.loads(Path(path).read_text()) if e["ph"] != "M")
        return counts

    mains = [f for f in limited.collections[0].files if Path(f.path).name.startswith("msprof_")]
    assert sum(f.bytes for f in mains) <= 1 << 20
    written = phases([f.path for f in mains])
    dropped = limited.collections[0].timeline_dropped
    assert dropped and sum(dropped.values()) > 0
    total = phases([main_full.path])
    assert {ph: written[ph] + dropped.get(ph, 0) for ph in total} == dict(total)


def test_a_framework_step_selects_only_its_tasks(torch_run: Run, tmp_path: Path) -> None:
    export(
        torch_run.raw,
        kind="summary",
        layout="torch_npu",
        output=tmp_path,
        selection=Selection(model_id=4294967295, iteration_id=2),
    )
    written = [
        r for r in rows(tmp_path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv") if r["Task ID"] != "N/A"
    ]
    expected = [t for t in truth_tasks(torch_run) if t["iteration"] == 2]
    assert {int(r["Step Id"]) for r in written} == {2}
    assert len(written) == len(expected)


def test_an_iteration_selection_keeps_every_iteration_in_step_trace(graph_run: Run, tmp_path: Path) -> None:
    """msprof's step_trace summary reads the whole training_trace table whatever the iteration
    (``MsProfExportDataUtils._get_step_trace_data``, ``StepTraceViewer.get_step_trace_summary``); the
    tasks are windowed to the iteration."""
    export(graph_run.raw, kind="summary", output=tmp_path, selection=Selection(model_id=1, iteration_id=2))
    out = tmp_path / "mindstudio_profiler_output"
    steps = rows(one(out, "step_trace_*.csv"))
    # each iteration, then the 60000/60001 step of the same index that ends just after it
    assert [(r["Device_id"], r["Iteration ID"], r["FP Start(us)"] == "N/A") for r in steps] == [
        (d, i, step) for d in ("0", "1") for i in ("1", "2", "3") for step in (False, True)
    ]
    export(graph_run.raw, kind="summary", output=tmp_path / "all")
    all_tasks = rows(one(tmp_path / "all" / "mindstudio_profiler_output", "op_summary_*.csv"))
    assert 0 < len(rows(one(out, "op_summary_*.csv"))) < len(all_tasks)


def test_an_iteration_the_data_lacks_is_a_clear_error(graph_run: Run, tmp_path: Path) -> None:
    with pytest.raises(IterationError, match=r"out of range; it has 1\.\.3"):
        export(
            graph_run.raw,
            kind="summary",
            output=tmp_path,
            selection=Selection(model_id=1, iteration_id=3, iteration_count=2),
        )
    with pytest.raises(IterationError, match="model 9 has no iterations"):
        export(
            graph_run.raw, kind="summary", output=tmp_path, selection=Selection(model_id=9, iteration_id=1)
        )


def test_corrupt_input_fails_and_leaves_no_complete_file(graph_run: Run, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    import shutil

    shutil.copytree(graph_run.raw, raw)
    victim = max(raw.rglob("device_0/data/hwts.data.*"), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[64:96] = b"\xff" * 32  # break two records' type and counter fields
    victim.write_bytes(bytes(data))
    with pytest.raises(DecodeError, match=victim.name):
        export(raw, kind="summary", output=tmp_path / "out")
    left = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert all(p.name.startswith(".") for p in left), left


def test_clear_removes_only_leftover_temporary_files(graph_run: Run, tmp_path: Path) -> None:
    report = export(graph_run.raw, kind="summary", output=tmp_path)
    out = Path(report.collections[0].output_dir)
    stale = out / ".op_summary_1.csv.0.123.abcd.part"
    stale.write_text("partial")
    before = sorted(p for p in graph_run.raw.rglob("*") if p.is_file())
    assert clear_caches(report) == [stale]
    assert not stale.exists()
    assert sorted(p for p in graph_run.raw.rglob("*") if p.is_file()) == before


def test_level0_trace_view_leaves_out_the_cann_layer(tmp_path: Path) -> None:
    """torch_npu prunes host API events at Level0 (framework_outputs.md §3.1 LEVEL_TRACE_PRUNE_CONFIG) and
    the CANN process's name with them; its labels, sort index and thread metadata stay, and the
    HostToDevice flows still start on it, as in the real Level0 trace_view.json files."""
    raw = tmp_path / "raw"
    simulate(SimulationConfig(chip="910B", steps=1, ops_per_step=8, framework="torch_npu", seed=3), raw)
    [info] = raw.glob("*_ascend_pt/profiler_info*.json")
    doc = json.loads(info.read_text())
    doc.setdefault("config", {}).setdefault("experimental_config", {})["_profiler_level"] = "Level0"
    info.write_text(json.dumps(doc))
    export(raw, kind="timeline", layout="torch_npu", output=tmp_path / "out")
    events = json.loads((tmp_path / "out" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert "CANN" not in processes and {"Python", "Ascend Hardware"} <= processes
    [cann] = {e["pid"] for e in events if e["name"] == "process_sort_index" and e["args"]["sort_index"] == 7}
    on_cann = [e for e in events if e["pid"] == cann]
    kinds = {e["name"] for e in on_cann if e["ph"] == "M"}
    assert kinds == {"process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
    assert not [e for e in on_cann if e["ph"] == "X"]
    assert {e["ph"] for e in on_cann if e["ph"] != "M"} == {"s"}  # HostToDevice flow starts
    flow_threads = {e["tid"] for e in on_cann if e["ph"] == "s"}
    assert flow_threads <= {e["tid"] for e in on_cann if e["name"] == "thread_name"}


def test_the_msprof_layout_reads_no_framework_files(torch_run: Run, tmp_path: Path) -> None:
    """msprof.py knows nothing of torch_npu's FRAMEWORK files: with them garbled its outputs are the same."""
    import re
    import shutil

    garbled = tmp_path / "raw"
    shutil.copytree(torch_run.raw, garbled)
    [framework] = list(garbled.rglob("FRAMEWORK"))
    for path in framework.rglob("*"):
        if path.is_file():
            path.write_bytes(b"\xff" * path.stat().st_size)

    def exported(raw: Path, out: Path) -> dict[str, bytes]:
        report = export(raw, kind="both", layout="msprof", output=out)
        files = [Path(f.path) for c in report.collections for f in c.files]
        return {re.sub(r"_\d{14}", "", p.name): p.read_bytes() for p in files}

    intact = exported(torch_run.raw, tmp_path / "intact")
    assert "memory_record.csv" in intact and "operator_memory.csv" in intact
    assert exported(garbled, tmp_path / "garbled") == intact
    with pytest.raises(DecodeError, match="FRAMEWORK"):  # the torch_npu layout does read them
        export(garbled, kind="summary", layout="torch_npu", output=tmp_path / "torch")


def test_communication_rows_are_merged_by_start_whatever_order_they_come_in(tmp_path: Path) -> None:
    """op_summary's communication rows arrive in settling order, several devices mixed, one device
    with no task at all; each device's merger (TaskRowMerge) puts them in start order as its
    watermark passes, and the output names them and writes devices in order."""
    import pyarrow as pa

    from profstream.engine.layouts._outputs import Cell, Context
    from profstream.engine.layouts.msprof import TaskRows
    from profstream.engine.operators.task_rows import TaskRowMerge
    from profstream.engine.runtime import DONE, at
    from profstream.engine.schema import conform, tasks_schema

    def tasks(device: int, starts: list[int]) -> pa.RecordBatch:
        n = len(starts)
        return conform(
            tasks_schema(),
            {
                "device_id": pa.array([device] * n, pa.int32()),
                "stream_id": pa.array([3] * n, pa.int32()),  # every device task has one; op rows none
                "start_ns": pa.array(starts),
                "end_ns": pa.array([s + 10 for s in starts]),
                "op_name": pa.array([f"task{s}" for s in starts]),
                "op_type": pa.array(["MatMul"] * n),
                "task_type": pa.array(["AI_CORE"] * n),
            },
        )

    def comm(rows: list[tuple[int, int]]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "device_id": pa.array([d for d, _ in rows], pa.int32()),
                "start_ns": pa.array([s for _, s in rows]),
                "end_ns": pa.array([s + 5 for _, s in rows]),
                "op_name": pa.array([f"op{s}" for _, s in rows]),
                "op_type": pa.array([None] * len(rows), pa.string()),
                "model_id": pa.array([1] * len(rows)),
            }
        )

    context = Context(tmp_path, "20260101000000", 0, (0, 1, 2), [], stars=False, process_id=0)
    cells = [Cell("Device_id", "device_id"), Cell("Op Name", "op_name"), Cell("Task Type", "task_type")]
    output = TaskRows(context, "op_summary.csv", cells, label="COMMUNICATION")
    mergers = {d: TaskRowMerge(d) for d in (0, 1, 2)}

    def push(table: str, batch: pa.RecordBatch, watermark: int) -> None:
        for device, merger in mergers.items():
            rows = batch.filter(pa.compute.equal(batch.column("device_id"), device))
            if rows.num_rows:
                merger.push(at(table, device), rows)
            for _, merged in merger.advance(watermark):
                output.write("task_rows", merged)

    push("comm", comm([(0, 350), (1, 150)]), 0)
    push("tasks", tasks(0, [100, 300]), 0)
    push("comm", comm([(0, 50), (2, 10), (0, 600)]), 320)
    push("tasks", tasks(1, [200, 400]), 320)
    push("tasks", tasks(0, [500]), 320)
    push("comm", comm([(1, 450)]), DONE)
    [path] = output.close()
    assert [(r["Device_id"], r["Op Name"], r["Task Type"]) for r in rows(path)] == [
        ("0", "op50", "COMMUNICATION"),
        ("0", "task100", "AI_CORE"),
        ("0", "task300", "AI_CORE"),
        ("0", "op350", "COMMUNICATION"),
        ("0", "task500", "AI_CORE"),
        ("0", "op600", "COMMUNICATION"),
        ("1", "op150", "COMMUNICATION"),
        ("1", "task200", "AI_CORE"),
        ("1", "task400", "AI_CORE"),
        ("1", "op450", "COMMUNICATION"),
        ("2", "op10", "COMMUNICATION"),
    ]
    assert not list(tmp_path.glob(".spool-*"))  # the spools are gone


def test_kept_communication_kernels_are_typed_like_communication_ops(tmp_path: Path) -> None:
    """An ``...AivKernel`` communication task that op_summary keeps prints msprof's communication
    type, as its op rows do: Python keeps it only as ``COMMUNICATION``
    (``AiCoreOpReport._union_task_ge_ai_core_data``), the C++ names GE task type 9 so
    (``NumberMapping`` ``geTaskTypeMap``)."""
    import pyarrow as pa

    from profstream.engine.layouts._outputs import Cell, Context
    from profstream.engine.layouts.msprof import TaskRows
    from profstream.engine.schema import conform, tasks_schema

    batch = conform(
        tasks_schema(),
        {
            "device_id": pa.array([0, 0, 0], pa.int32()),
            "stream_id": pa.array([3, 3, None], pa.int32()),
            "start_ns": pa.array([100, 200, 300]),
            "end_ns": pa.array([110, 210, 310]),
            "op_name": pa.array(["allreduceAivKernel", "MatMul_1", "hcom_allReduce_1"]),
            "op_type": pa.array(["HcomAllReduce", "MatMul", "HcomAllReduce"]),
            "task_type": pa.array(["HCCL", "AI_CORE", None]),
        },
    )
    context = Context(tmp_path, "20260101000000", 0, (0,), [], stars=False, process_id=0)
    cells = [Cell("Op Name", "op_name"), Cell("Task Type", "task_type")]
    output = TaskRows(context, "op_summary.csv", cells, label="COMMUNICATION")
    output.write("task_rows", batch)
    [path] = output.close()
    assert [(r["Op Name"], r["Task Type"]) for r in rows(path)] == [
        ("allreduceAivKernel", "COMMUNICATION"),
        ("MatMul_1", "AI_CORE"),
        ("hcom_allReduce_1", "COMMUNICATION"),
    ]


def test_csv_slice_rows_slices_msprof_csvs_and_torch_npu_csvs_stay_whole(
    torch_run: Run, tmp_path: Path
) -> None:
    """msprof's summaries slice at ``csv_slice_rows`` (settings) and keep every row; torch_npu's
    csv.writer files are never sliced, whatever their size (a plain file name used to be reused
    by every slice, so only the last slice's rows survived)."""
    settings = ExportSettings(csv_slice_rows=50)
    whole = export(torch_run.raw, kind="summary", output=tmp_path / "whole")
    sliced = export(torch_run.raw, kind="summary", output=tmp_path / "sliced", settings=settings)
    [before] = [
        Path(f.path) for f in whole.collections[0].files if Path(f.path).name.startswith("op_summary")
    ]
    parts = sorted(
        Path(f.path) for f in sliced.collections[0].files if Path(f.path).name.startswith("op_summary")
    )
    assert len(parts) > 1 and all("_slice_" in p.name for p in parts)
    header, *rows = before.read_text().splitlines()
    assert all(p.read_text().splitlines()[0] == header for p in parts)
    assert [line for p in parts for line in p.read_text().splitlines()[1:]] == rows

    small = export(
        torch_run.raw, kind="summary", layout="torch_npu", output=tmp_path / "t1", settings=settings
    )
    usual = export(torch_run.raw, kind="summary", layout="torch_npu", output=tmp_path / "t2")
    for name in ("kernel_details.csv", "operator_details.csv", "memory_record.csv"):
        [one] = [Path(f.path) for f in small.collections[0].files if Path(f.path).name == name]
        [two] = [Path(f.path) for f in usual.collections[0].files if Path(f.path).name == name]
        assert len(one.read_text().splitlines()) > 51  # more rows than a slice, all in the one file
        assert one.read_bytes() == two.read_bytes()


# ---------------------------------------------------------------- cells as msprof and torch_npu print them


def _device_info(run: Run, device: int) -> tuple[float, int]:
    """(aic_frequency MHz, ai_core_num) of a simulated device, from its info.json."""
    info = profstream.open(run.raw).collections[0].device(device).metadata.device_info  # type: ignore[union-attr]
    return float(info.aic_mhz), int(info.ai_core_num)


def _decimals(cell: str) -> int:
    return len(cell.partition(".")[2])


def test_op_summary_pmu_cells_are_computed_rounded_and_integral(graph_run: Run) -> None:
    """aicore_time from the cycles and the GE block dim (Python path: 2 decimals), the other PMU floats
    rounded to 3 decimals and cycle counts as integers (msprof_outputs.md §4c; msprof's
    ``AiCoreOpReport._get_ai_core_float_cols``)."""
    graph_run.export("msprof", "summary")
    out = graph_run.out / "msprof" / "mindstudio_profiler_output"
    written = [r for r in rows(one(out, "op_summary_*.csv")) if r["Task Type"] == "AI_CORE"]
    assert written
    for row in written:
        freq_mhz, cores = _device_info(graph_run, int(row["Device_id"]))
        cycles, block = row["total_cycles"], int(row["Block Num"])
        assert cycles.isdigit(), cycles
        expected = int(cycles) / freq_mhz / block * -(-block // cores)
        assert float(row["aicore_time(us)"]) == pytest.approx(expected, abs=0.0051)
        aicore = float(row["aicore_time(us)"])
        for ratio in ("vec", "mac", "scalar", "mte1", "mte2", "mte3"):
            time, share = float(row[f"{ratio}_time(us)"]), float(row[f"{ratio}_ratio"])
            assert time == pytest.approx(aicore * share, abs=0.0005 * aicore + 0.001)
        metrics = list(row)[list(row).index("aicore_time(us)") :]
        assert all(_decimals(row[name]) <= 3 for name in metrics if row[name] != "N/A"), row


def test_op_summary_quotes_shapes_and_starts_each_device_with_a_zero_wait(graph_run: Run) -> None:
    """msprof stores shapes wrapped in quotes, so the CSV shows three on each side, and prints a device's
    first Task Wait Time as the integer 0 (msprof_behaviour.md)."""
    graph_run.export("msprof", "summary")
    path = one(graph_run.out / "msprof" / "mindstudio_profiler_output", "op_summary_*.csv")
    written = rows(path)
    shapes = [r[name] for r in written for name in ("Input Shapes", "Output Shapes") if r[name] != "N/A"]
    assert shapes and all(s.startswith('"') and s.endswith('"') and s.count('"') == 2 for s in shapes)
    assert b'"""' in path.read_bytes()
    seen: set[str] = set()
    for row in written:
        wait = row["Task Wait Time(us)"]
        assert (wait == "0") if row["Device_id"] not in seen else ("." in wait), (row["Device_id"], wait)
        seen.add(row["Device_id"])


def test_communication_statistic_counts_each_typed_communication_op(graph_run: Run) -> None:
    """One row per op type and device, counting the communication ops (msprof's HcclOpReport); the
    all-reduces get their type from GE's node info (communication_statistic_rows: no file without)."""
    graph_run.export("msprof", "summary")
    written = rows(
        one(graph_run.out / "msprof" / "mindstudio_profiler_output", "communication_statistic_*.csv")
    )
    comm = profstream.open(graph_run.raw).table("comm").read_all().to_pylist()
    expected = Counter((str(c["device_id"]), c["op_type"]) for c in comm)
    assert None not in {t for _, t in expected}
    assert {(r["Device_id"], r["OP Type"]): int(r["Count"]) for r in written} == dict(expected)


def _with_experimental_config(raw: Path, **config: str) -> None:
    [info] = raw.glob("*_ascend_pt/profiler_info*.json")
    doc = json.loads(info.read_text())
    doc.setdefault("config", {}).setdefault("experimental_config", {}).update(config)
    info.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("level", "metrics", "statistics", "short"),
    [
        ("Level0", "ACL_AICORE_NONE", False, True),
        ("Level1", "ACL_AICORE_NONE", True, True),
        ("Level0", "ACL_AICORE_PIPE_UTILIZATION", False, False),
        ("Level2", "ACL_AICORE_PIPE_UTILIZATION", True, False),
    ],
)
def test_torch_npu_files_follow_the_level_and_the_ai_core_metrics(
    tmp_path: Path, level: str, metrics: str, statistics: bool, short: bool
) -> None:
    """op_statistic, api_statistic and the communication files only at Level1/Level2
    (``LEVEL_PARSER_CONFIG``; the real Level0 directory has none); kernel_details' short header when no
    AI Core metrics were collected (``is_all_kernel_headers``)."""
    raw = tmp_path / "raw"
    simulate(SimulationConfig(chip="910B", steps=2, ops_per_step=8, framework="torch_npu", seed=5), raw)
    _with_experimental_config(raw, _profiler_level=level, _aic_metrics=metrics)
    export(raw, kind="summary", layout="torch_npu", output=tmp_path / "out")
    out = tmp_path / "out" / "ASCEND_PROFILER_OUTPUT"
    names = {p.name for p in out.iterdir()}
    optional = {"op_statistic.csv", "api_statistic.csv", "communication.json", "communication_matrix.json"}
    assert (optional <= names) if statistics else not (optional & names)
    header = (out / "kernel_details.csv").read_text().split("\n", 1)[0].rstrip("\r").split(",")
    assert ("aicore_time(us)" not in header) is short
    assert {"Step Id", "Name", "Type", "Accelerator Core", "Duration(us)", "Block Dim"} <= set(header)


def _lines_after_each_semicolon(text: str) -> bool:
    return ";" not in text.replace(";\r\n", "")


def test_torch_op_args_and_operator_details_as_torch_npu_prints_them(torch_run: Run) -> None:
    """Every cpu_op has a Sequence number (-1 for none), and shapes, dtypes and call stacks break the
    line after each ``;`` (torch_npu's ``TorchOpBean``), in trace_view.json and operator_details.csv."""
    torch_run.export("torch_npu")
    out = torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT"
    events = json.loads((out / "trace_view.json").read_text())
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert ops and all("Sequence number" in e["args"] for e in ops)
    assert -1 in {e["args"]["Sequence number"] for e in ops}
    texts = [e["args"][k] for e in ops for k in ("Input Dims", "Input type", "Call stack") if k in e["args"]]
    assert any(";" in t for t in texts) and all(_lines_after_each_semicolon(t) for t in texts)
    details = rows(out / "operator_details.csv")
    shapes = [r["Input Shapes"] for r in details if ";" in r["Input Shapes"]]
    assert shapes and all(_lines_after_each_semicolon(s) for s in shapes)
    starts = [e for e in events if e.get("ph") == "s" and e.get("cat") in ("async_npu", "async_task_queue")]
    assert starts and all(e.get("bp") == "e" for e in starts)  # both flow ends bound, as torch_npu writes
    python = {e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == "Python"}
    sort = {
        e["tid"]: e["args"]["sort_index"]
        for e in events
        if e["name"] == "thread_sort_index" and e["pid"] in python
    }
    dequeue = {e["tid"] for e in events if e["name"].startswith("Dequeue@")}
    assert dequeue and sort  # the dequeue thread sorts after every thread (TraceEventManager.create_m_event)
    assert all(sort[t] == (max(sort) + 1 if t in dequeue else t) for t in sort)


def test_torch_to_npu_flow_ids_are_the_kernel_start_in_ns(torch_run: Run) -> None:
    """torch_npu's ``TraceEventManager.create_torch_to_npu_flow`` takes the kernel event's ts in ns
    as the id, an integer on both ends (``"id": 1736408883700059821`` at ``"ts":
    "1736408883700059.821"`` in the real traces of shared/realdata), not a counter."""
    torch_run.export("torch_npu", "timeline")
    events = json.loads(
        (torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text()
    )
    flows = [e for e in events if e.get("cat") == "async_npu"]
    ends = [e for e in flows if e["ph"] == "f"]
    assert len(ends) > 1
    assert all(type(e["id"]) is int and e["id"] == int(Decimal(e["ts"]) * 1000) for e in ends)
    assert Counter(e["id"] for e in flows if e["ph"] == "s") == Counter(e["id"] for e in ends)


def test_torch_npu_api_statistic_names_the_communication_level_hccl(torch_run: Run) -> None:
    """The real api_statistic.csv files of that CANN generation say ``hccl`` where msprof now says
    ``communication``."""
    torch_run.export("torch_npu", "summary")
    levels = {
        r["Level"] for r in rows(torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "api_statistic.csv")
    }
    assert "hccl" in levels and "communication" not in levels
    torch_run.export("msprof", "summary")
    msprof_levels = {
        r["Level"]
        for r in rows(one(torch_run.out / "msprof" / "mindstudio_profiler_output", "api_statistic_*.csv"))
    }
    assert "communication" in msprof_levels


def test_step_trace_events_as_msprof_python_path_writes_them(graph_run: Run) -> None:
    """Names and args of the Step Trace layer (``StepTraceViewer``, ``TimeLineJsonMaker``): times as
    3-decimal local µs strings, durations as numbers, Reduce_{iteration}_{k} with its own keys."""
    graph_run.export("msprof", "timeline")
    events = json.loads(
        one(graph_run.out / "msprof" / "mindstudio_profiler_output", "msprof_*.json").read_text()
    )
    keys = {
        "Iteration Time": ["Iteration ID", "FP Start", "BP End", "Iteration End", "Iteration Time(us)"],
        "FP_BP Time": ["Iteration ID", "FP Start", "BP End", "FP_BP Time(us)"],
        "Iteration Refresh": ["Iteration ID", "BP End", "Iteration End", "Iteration Refresh(us)"],
    }
    for category, expected in keys.items():
        found = [e for e in events if e.get("cat") == category]
        assert found and all(list(e["args"]) == expected for e in found), category
        for e in found:
            stamps = [
                v for k, v in e["args"].items() if k in ("FP Start", "BP End", "Iteration End") and v != "N/A"
            ]
            assert all(isinstance(v, str) and _decimals(v) == 3 for v in stamps)
            assert isinstance(e["args"][expected[-1]], float)
    # the 60000/60001 steps are iteration slices too, FP and BP N/A (StepTraceAssembler::GenerateTrainTrace)
    steps = [
        s for s in profstream.open(graph_run.raw).table("steps").read_all().to_pylist() if s["kind"] == "step"
    ]
    iterations = [e for e in events if e.get("cat") == "Iteration Time"]
    assert steps and len(iterations) == 2 * len(steps)
    assert sum(e["args"]["FP Start"] == "N/A" == e["args"]["BP End"] for e in iterations) == len(steps)
    reduces = [e for e in events if e.get("cat") == "Reduce"]
    assert reduces
    for e in reduces:
        iteration, k = e["name"].removeprefix("Reduce_").split("_")
        assert int(iteration) == e["args"]["Iteration ID"]
        assert list(e["args"]) == ["Iteration ID", f"Reduce Start {k}", f"Reduce End {k}"]
        assert e["args"][f"Reduce Start {k}"] == e["ts"]


def test_torch_npu_empty_sums_print_as_integer_zero(torch_run: Run) -> None:
    """torch_npu's sums start at the integer 0, so an empty one prints ``0`` (the real step_trace_time.csv
    and operator_details.csv's device cells never print ``0.0``; its host cells are floats)."""
    torch_run.export("torch_npu", "summary")
    out = torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT"
    steps, details = rows(out / "step_trace_time.csv"), rows(out / "operator_details.csv")
    cells = [v for r in steps for k, v in r.items() if k != "Step"]
    cells += [v for r in details for k, v in r.items() if k.startswith("Device")]
    assert all("." in v for r in details for k, v in r.items() if k.startswith("Host"))
    assert "0" in cells and "0.0" not in cells
    assert all(float(v) > 0 for v in cells if v != "0")


def _start_later(raw: Path, device: int, fraction: float) -> tuple[Decimal, int]:
    """Move ``device``'s collection start (its start_info ``clockMonotonicRaw``) ``fraction`` of the way
    into its tasks, just after a task's start so that task spans it; returns S as local µs and host ns."""
    starts = sorted(
        t["start_ns"]
        for t in profstream.open(raw).table("tasks").read_all().to_pylist()
        if t["device_id"] == device
    )
    start_ns = starts[int(len(starts) * fraction)] + 1
    collection = profstream.open(raw).collections[0]
    [info] = collection.device(device).path.glob("start_info.*[0-9]")
    doc = json.loads(info.read_text())
    doc["clockMonotonicRaw"] = str(start_ns)
    info.write_text(json.dumps(doc))
    return micros(start_ns + collection.wall_offset_ns), start_ns


def _kept(start: Decimal, end: Decimal, s: Decimal) -> bool:
    """``Utils.filter_data_by_start_time_condition``: after S, or spanning it."""
    return start > s or start < s < end


def test_msprof_outputs_leave_out_what_ran_before_each_devices_collection_start(
    graph_run: Run, tmp_path: Path
) -> None:
    """Per device, op_summary, task_time and step_trace keep the rows that start after the device's
    collection start S or span it, op_statistic counts tasks from S on, and the device's timeline layers
    draw nothing that ended before S (msprof_outputs.md §3.5 item 3). The waits are computed over every
    row and the first kept row's is 0. Device 1 keeps its own (earlier) start: its rows are unchanged."""
    graph_run.export("msprof")
    before = graph_run.out / "msprof" / "mindstudio_profiler_output"
    raw = tmp_path / "raw"
    shutil.copytree(graph_run.raw, raw)
    s_us, s_ns = _start_later(raw, 0, 0.4)
    export(raw, kind="both", layout="msprof", output=tmp_path / "out")
    after = tmp_path / "out" / "mindstudio_profiler_output"

    old, new = rows(one(before, "op_summary_*.csv")), rows(one(after, "op_summary_*.csv"))
    expected = []
    uncounted: Counter[str] = Counter()  # per group, its communication ops before S
    for row in old:
        start = Decimal(row["Task Start Time(us)"].rstrip("\t"))
        communication = row["Task Type"] == "COMMUNICATION"
        group, index, iteration = row["Op Name"].rsplit("_", 2) if communication else ("", "", "")
        if row["Device_id"] != "0" or _kept(start, start + Decimal(row["Task Duration(us)"]), s_us):
            if communication and row["Device_id"] == "0":  # counted from S on (update_op_name_by_group_name)
                row["Op Name"] = f"{group}_{int(index) - uncounted[group]}_{iteration}"
            expected.append(dict(row))
        elif communication:
            uncounted[group] += 1
    assert uncounted
    first = next(i for i, r in enumerate(expected) if r["Device_id"] == "0")
    assert expected[first]["Task Wait Time(us)"] != "0"  # a later row: its wait becomes 0
    expected[first]["Task Wait Time(us)"] = "0"
    assert 0 < sum(r["Device_id"] == "0" for r in new) < sum(r["Device_id"] == "0" for r in old)
    assert new == expected

    old_times, new_times = rows(one(before, "task_time_*.csv")), rows(one(after, "task_time_*.csv"))
    assert new_times == [
        r
        for r in old_times
        if r["Device_id"] != "0"
        or _kept(Decimal(r["task_start(us)"].rstrip("\t")), Decimal(r["task_stop(us)"].rstrip("\t")), s_us)
    ]
    assert len(new_times) < len(old_times)

    old_steps, new_steps = rows(one(before, "step_trace_*.csv")), rows(one(after, "step_trace_*.csv"))
    assert new_steps == [
        r
        for r in old_steps
        if r["Device_id"] != "0"
        or _kept(
            Decimal(r["Iteration End(us)"].rstrip("\t")) - Decimal(r["Iteration Time(us)"]),
            Decimal(r["Iteration End(us)"].rstrip("\t")),
            s_us,
        )
    ]
    assert len(new_steps) < len(old_steps)

    tasks = profstream.open(raw).table("tasks").read_all().to_pylist()
    counted = Counter(
        (t["op_type"], t["task_type"]) for t in tasks if t["device_id"] == 0 and t["start_ns"] >= s_ns
    )
    statistic = {
        (r["OP Type"], r["Core Type"]): int(r["Count"])
        for r in rows(one(after, "op_statistic_*.csv"))
        if r["Device_id"] == "0"
    }
    assert statistic and all(counted[key] == count for key, count in statistic.items())
    old_statistic = [r for r in rows(one(before, "op_statistic_*.csv")) if r["Device_id"] == "1"]
    assert [r for r in rows(one(after, "op_statistic_*.csv")) if r["Device_id"] == "1"] == old_statistic

    def device_events(directory: Path, device: int) -> list[dict[str, object]]:
        events = json.loads(one(directory, "msprof_*.json").read_text())
        return [e for e in events if e["ph"] in ("X", "C") and e["pid"] & 31 == device]

    drawn = device_events(after, 0)
    assert all(
        Decimal(e["ts"]) >= s_us or Decimal(e["ts"]) + Decimal(str(e.get("dur", 0))) > s_us for e in drawn
    )
    assert any(Decimal(e["ts"]) < s_us for e in device_events(before, 0))
    assert len(drawn) < len(device_events(before, 0))
    assert len(device_events(after, 1)) == len(device_events(before, 1))


def test_outputs_do_not_depend_on_the_framework_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The framework reorder window (plan.FRAMEWORK_REORDER_NS) shorter than a step and than the
    kernels' lag behind their launch changes no output: a ProfilerStep arriving (at its end) after
    its ops left is still a root and a step (its rows used to fall into one step-less row), and the
    launch targets are kept as long as kernels lag. The trace lists the late steps later."""
    config = SimulationConfig(chip="910B", steps=3, ops_per_step=3000, framework="torch_npu", seed=5)
    simulate(config, tmp_path / "raw")
    got = {}
    for window_ns in (40_000_000, 60_000_000_000):  # steps of about 68 ms, kernels up to 40 ms behind
        monkeypatch.setattr(plan, "FRAMEWORK_REORDER_NS", window_ns)
        out = tmp_path / str(window_ns)
        with capture_logs() as logs:
            export(
                tmp_path / "raw", layout="torch_npu", output=out, chunk_bytes=1 << 16, advance_bytes=1 << 16
            )
        counts = [e for e in logs if e.get("component") == "framework_ops"]
        # how many steps arrive late depends on when the ops' batches leave (the export's stages)
        late = sum(e["late_steps"] for e in counts)
        assert late > 0 if window_ns == 40_000_000 else late == 0
        assert {(e["late_ops"], e["kernels_without_op"]) for e in counts} == {(0, 0)}
        got[window_ns] = {p.name: p.read_bytes() for p in (out / "ASCEND_PROFILER_OUTPUT").iterdir()}
    short, whole = got.values()
    assert short.keys() == whole.keys()
    trace = "trace_view.json"
    assert {k: v for k, v in short.items() if k != trace} == {k: v for k, v in whole.items() if k != trace}
    events = [Counter(json.dumps(e, sort_keys=True) for e in json.loads(t[trace])) for t in (short, whole)]
    assert events[0] == events[1]
    steps = list(csv.DictReader(short["step_trace_time.csv"].decode().splitlines()))
    assert [row["Step"] for row in steps] == ["1", "2", "3"]


@pytest.mark.parametrize("run_name", ["graph_run", "torch_run"])
def test_operators_keep_their_watermark_promises(
    run_name: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No task or communication op reaches the overlap operator after the watermark it was promised
    (pairing, the host join and the communication op instances hold theirs back while they hold rows),
    so the overlap lanes need no lateness: without any, nothing is clipped and the lanes are the same."""
    run: Run = request.getfixturevalue(run_name)
    lanes = []
    for lateness in (0, overlap.DEFAULT_LATENESS_NS):
        monkeypatch.setitem(overlap.Overlap.__init__.__kwdefaults__, "lateness_ns", lateness)
        out = tmp_path / str(lateness)
        with capture_logs() as logs:
            export(
                run.raw, kind="timeline", layout="msprof", output=out, chunk_bytes=1 << 12, advance_bytes=0
            )
        assert not [e for e in logs if e.get("reason") == overlap.CLIPPED]
        events = [e for p in out.rglob("msprof_*.json") for e in json.loads(p.read_bytes())]
        pids = {
            e["pid"]
            for e in events
            if e.get("name") == "process_name" and e["args"]["name"] == "Overlap Analysis"
        }
        lanes.append(Counter(json.dumps(e, sort_keys=True) for e in events if e["pid"] in pids))
    assert lanes[0] == lanes[1] and sum(lanes[0].values()) > 10


def test_vector_kernels_are_typed_by_their_ge_task_type_in_the_trace_and_kernel_details(
    torch_run: Run,
) -> None:
    """A 910B vector kernel: runtime type KERNEL_AIVEC (host_task_type), GE type AI_VECTOR_CORE
    (node_basic_info) and SQE type AI_CORE (device), as the real 910B exports in shared/realdata have
    them. kernel_details' Accelerator Core is the GE type (op_summary's Task Type, C++
    ``OpSummaryAssembler::GenerateOneTaskRow``); the trace's Task Type too, the GE type coming before
    the host and device types (C++ ``AscendHardwareAssembler::GetTaskType``)."""
    torch_run.export("torch_npu", "both")
    output = torch_run.out / "torch_npu" / "ASCEND_PROFILER_OUTPUT"
    tasks = profstream.open(torch_run.raw).table("tasks").read_all().to_pylist()
    vector = [t for t in tasks if t["host_task_type"] == "KERNEL_AIVEC"]
    assert vector
    assert {(t["task_type"], t["device_task_type"]) for t in vector} == {("AI_VECTOR_CORE", "AI_CORE")}
    names = {t["op_name"] for t in vector}
    events = json.loads((output / "trace_view.json").read_text())
    hardware = {
        e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == "Ascend Hardware"
    }
    drawn = [e for e in events if e["ph"] == "X" and e["pid"] in hardware and e["name"] in names]
    assert drawn and {e["args"]["Task Type"] for e in drawn} == {"AI_VECTOR_CORE"}
    listed = [r for r in rows(output / "kernel_details.csv") if r["Name"] in names]
    assert listed and {r["Accelerator Core"] for r in listed} == {"AI_VECTOR_CORE"}


def test_memcpy_tasks_and_hccl_notify_ids_as_msprofs_cpp_timeline_writes_them(torch_run: Run) -> None:
    """A MEMCPY_ASYNC task is drawn named ``MEMCPY_ASYNC`` with its device task type as Task Type,
    also when an HCCL op launched it (C++ ``AscendHardwareAssembler::GenerateMemcpyAsyncTrace``; the
    real trace_view.json files in shared/realdata: ``MEMCPY_ASYNC`` typed ``PCIE_DMA_SQE`` /
    ``SDMA_SQE``). An HCCL task's ``notify_id`` is text (``CommunicationTaskData.notifyId``; real
    files: ``"0"``, ``"18446744073709551615"``)."""
    torch_run.export("msprof", "timeline")
    events = json.loads(
        one(torch_run.out / "msprof" / "mindstudio_profiler_output", "msprof_*.json").read_text()
    )
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    data = profstream.open(torch_run.raw)
    offset = data.collections[0].wall_offset_ns
    tasks = data.table("tasks").read_all().to_pylist()
    memcpy = {
        (t["stream_id"], t["task_id"], f"{micros(t['start_ns'] + offset):.3f}"): t["device_task_type"]
        for t in tasks
        if t["host_task_type"] == "MEMCPY_ASYNC"
    }
    drawn = {
        (e["args"]["Physic Stream Id"], e["args"]["Task Id"], e["ts"]): e
        for e in events
        if e["ph"] == "X" and names[e["pid"]] == "Ascend Hardware" and e["tid"] < 70000
    }
    assert memcpy and memcpy.keys() <= drawn.keys()
    assert any(t["op_name"] is not None for t in tasks if t["host_task_type"] == "MEMCPY_ASYNC")
    for key, device_type in memcpy.items():
        assert (drawn[key]["name"], drawn[key]["args"]["Task Type"]) == ("MEMCPY_ASYNC", device_type)
    notify_ids = Counter(t["notify_id"] for t in data.table("comm_tasks").read_all().to_pylist())
    on_planes = [e for e in events if e["ph"] == "X" and "notify_id" in e.get("args", {})]
    assert on_planes and Counter(e["args"]["notify_id"] for e in on_planes) == Counter(
        "18446744073709551615" if n is None else str(n) for n in notify_ids.elements()
    )


def test_step_trace_data_aug_flows(graph_run: Run) -> None:
    """``make_data_aug_dict0/1``: per iteration with FP and BP a ``t`` at FP named after the previous
    iteration and an ``s`` halfway from BP end to iteration end carrying its Data Aug Bound."""
    graph_run.export("msprof", "timeline")
    events = json.loads(
        one(graph_run.out / "msprof" / "mindstudio_profiler_output", "msprof_*.json").read_text()
    )
    flows = [e for e in events if e.get("cat") == "Data_aug Bound"]
    offset = profstream.open(graph_run.raw).collections[0].wall_offset_ns
    steps = profstream.open(graph_run.raw).table("steps").read_all().to_pylist()
    iterations = [
        s for s in steps if s["kind"] == "model" and s["fp_ns"] is not None and s["bp_ns"] is not None
    ]
    assert iterations and len(flows) == 2 * len(iterations)
    for step in iterations:
        fp = micros(step["fp_ns"] + offset)
        [pid] = [
            e["pid"]
            for e in events
            if e.get("cat") == "Iteration Time" and e["args"]["FP Start"] == f"{fp:.3f}"  # this device's
        ]
        [t] = [e for e in flows if e["ph"] == "t" and e["args"] == {"Iteration ID": step["iteration_id"]}
               and e["pid"] == pid]  # fmt: skip
        assert t["name"] == f"Data_aug Bound {step['iteration_id'] - 1}"
        assert Decimal(t["ts"]) == fp
        [s] = [e for e in flows if e["ph"] == "s" and e["name"] == f"Data_aug Bound {step['iteration_id']}"
               and e["pid"] == pid]  # fmt: skip
        assert s["id"] == t["id"] == f"Data_aug Bound {pid}_{t['tid']}"
        middle = micros(step["bp_ns"] + offset) + micros(step["end_ns"] - step["bp_ns"]) / 2
        assert abs(Decimal(s["ts"]) - middle) <= Decimal("0.001")
        # the first iteration has no earlier one: both msprof paths write a bound of 0 there (Python
        # CreateTrainingTrace.update_data_aug leaves its initial 0; the real 2023 msprof_0_2_1.json in
        # shared/realdata gives iteration 1 "Data_aug Bound(us)": 0)
        bound = 0 if step["data_aug_ns"] is None else step["data_aug_ns"]
        assert s["args"] == {"Data_aug Bound(us)": pytest.approx(bound / 1000)}


def test_devices_are_merged_in_msprofs_directory_name_order(tmp_path: Path) -> None:
    """msprof concatenates its per-device summaries by sub-directory name (device_10 before device_2),
    and its C++ sorts Device_id as text too (msprof_outputs.md §1.4)."""
    simulate(SimulationConfig(chip="910B", steps=2, ops_per_step=8, devices=11, seed=4), tmp_path / "raw")
    export(tmp_path / "raw", kind="summary", layout="msprof", output=tmp_path / "out")
    out = tmp_path / "out" / "mindstudio_profiler_output"
    expected = sorted(map(str, range(11)))
    assert expected[:3] == ["0", "1", "10"]
    for module in ("op_summary_*.csv", "task_time_*.csv", "op_statistic_*.csv", "npu_mem_*.csv"):
        devices = [r["Device_id"] for r in rows(one(out, module))]
        assert list(dict.fromkeys(devices)) == expected, module
        assert devices == sorted(devices, key=expected.index), module  # one block per device
