"""l2_cache in both layouts: every record's rates, named after the last launch of its (stream, task)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from profstream.codecs import l2_cache
from profstream.codecs._base import DecodeContext
from profstream.engine.layouts import Context
from profstream.engine.layouts.msprof import L2CacheRows
from profstream.engine.schema import TABLES
from profstream.export import export
from profstream.simulate import SimulationConfig, simulate
from tests.export.conftest import Run

#: per chip, the counters (by position in the simulated sample.json's event list) msprof sums into
#: requests, hits and victims (specs/msprof_outputs.md §4c; 910A events 0x5b,0x59,0x5c,...,
#: 910B events 0xf6,0xfb,0xfc,0xbf,0x90,0x91,0x9c,0x9d)
FORMULA = {"910A": ((1,), (0,), (2,)), "910B": ((1, 2), (4, 5), (6,))}


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def records(raw: Path, device: int) -> list[dict[str, int]]:
    """The simulated device's L2 cache records, in file then record order."""
    [data] = raw.rglob(f"device_{device}/data")
    files = [f for f in data.glob(f"l2_cache.data.{device}.slice_*") if not f.name.endswith(".done")]
    files.sort(key=lambda p: int(p.name.rsplit("_", 1)[1]))
    out = []
    for path in files:
        batch = l2_cache.decode(np.frombuffer(path.read_bytes(), np.uint8), DecodeContext()).batch
        out += batch.to_pylist()
    return out


def last_named_op(truth: Path) -> dict[tuple[int, int], str]:
    """Per (stream, task id) the op of its last task (by start) that GE describes (msprof's TaskInfo)."""
    tasks = pq.read_table(truth / "tasks.parquet").sort_by("start_ns").to_pylist()
    return {(t["stream_id"], t["task_id"]): t["op_name"] for t in tasks if t["ge_task_type"] != "-"}


@pytest.mark.parametrize("chip", ["910A", "910B"])
def test_every_record_is_a_row_with_msprofs_rates_and_name(tmp_path: Path, chip: str) -> None:
    config = SimulationConfig(
        chip=chip, steps=3, ops_per_step=24, framework="torch_npu", l2_cache=True, seed=5
    )
    simulate(config, tmp_path / "raw", truth_dir=tmp_path / "truth")
    export(tmp_path / "raw", kind="summary", layout="msprof", output=tmp_path / "msprof")
    export(tmp_path / "raw", kind="summary", layout="torch_npu", output=tmp_path / "torch_npu")
    [msprof_file] = (tmp_path / "msprof").rglob("mindstudio_profiler_output/l2_cache_*.csv")
    [torch_file] = (tmp_path / "torch_npu").rglob("ASCEND_PROFILER_OUTPUT/l2_cache.csv")
    msprof_rows, torch_rows = csv_rows(msprof_file), csv_rows(torch_file)
    assert msprof_rows[0] == ["Device_id", "Stream Id", "Task Id", "Hit Rate", "Victim Rate", "Op Name"]
    assert torch_rows[0] == msprof_rows[0][1:]
    assert [row[1:] for row in msprof_rows[1:]] == torch_rows[1:]
    assert torch_file.read_bytes().endswith(b"\r\n")

    names = last_named_op(tmp_path / "truth")
    raw = records(tmp_path / "raw", 0)
    assert len(raw) == len(msprof_rows) - 1 > 50
    requests, hits, victims = FORMULA[chip]
    for record, row in zip(raw, msprof_rows[1:], strict=True):
        counters = [record[f"event_{i}"] for i in range(8)]
        total = sum(counters[i] for i in requests)
        assert row[:3] == ["0", str(record["stream_id"]), str(record["task_id"])]
        assert row[5] == names.get((record["stream_id"], record["task_id"]), "N/A")
        assert float(row[4]) == pytest.approx(sum(counters[i] for i in victims) / total, abs=5e-7)
        if chip == "910B":  # a STARS chip: msprof prints no hit rate
            assert row[3] == "N/A"
        else:
            assert float(row[3]) == pytest.approx(sum(counters[i] for i in hits) / total, abs=5e-7)
    assert len({row[5] for row in msprof_rows[1:]}) > 5


def test_no_l2_cache_file_without_records(graph_run: Run) -> None:
    graph_run.export("msprof", "summary")
    assert not list((graph_run.out / "msprof").rglob("l2_cache*"))


def test_a_row_takes_the_op_of_the_last_named_launch_of_its_task_over_the_whole_run(tmp_path: Path) -> None:
    """msprof's op dictionary (``DataManager.get_op_dict``) is built at the end: the last task record of
    a (task id, stream id) names every L2 row of it, also rows recorded before that task ran."""
    context = Context(
        out_dir=tmp_path, timestamp="1", wall_offset_ns=0, devices=(0,), metric_columns=(), stars=False,
        process_id=0, l2_cache=True,
    )  # fmt: skip
    output = L2CacheRows(context, "l2.csv", device_column=False)
    l2 = pa.RecordBatch.from_pydict(
        {"device_id": [0, 0, 0], "stream_id": [2, 2, 5], "task_id": [7, 8, 7], "task_type": [0, 0, 0],
         "hit_rate": [0.5, 0.25, 0.0], "victim_rate": [0.1, 0.2, 0.3]},
        schema=TABLES["l2_cache"],
    )  # fmt: skip

    def tasks(start: int, task: int, name: str, state: str | None) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {"device_id": [0], "stream_id": [2], "task_id": [task], "start_ns": [start], "op_name": [name],
             "op_state": [state]},
        )  # fmt: skip

    output.write("tasks", tasks(10, 7, "Conv", "static"))
    output.write("l2_cache", l2)
    output.write("tasks", tasks(20, 7, "MatMul", "dynamic"))
    output.write("tasks", tasks(30, 7, "memcpy", None))  # no node info: not a GE task record
    output.write("tasks", tasks(40, 8, "kernel_only", None))
    output.close()
    assert csv_rows(tmp_path / "l2.csv") == [
        ["Stream Id", "Task Id", "Hit Rate", "Victim Rate", "Op Name"],
        ["2", "7", "0.5", "0.1", "MatMul"],
        ["2", "8", "0.25", "0.2", "N/A"],
        ["5", "7", "0.0", "0.3", "N/A"],
    ]


def test_records_of_a_device_without_a_task_log_are_written_unnamed(tmp_path: Path) -> None:
    """The feed follows the task log, and a device without one still gets its rows (no op to name them)."""
    simulate(SimulationConfig(chip="910A", steps=2, ops_per_step=16, l2_cache=True, seed=2), tmp_path / "raw")
    for log in (tmp_path / "raw").rglob("hwts.data.*"):
        log.unlink()
    export(tmp_path / "raw", kind="summary", layout="msprof", output=tmp_path / "out")
    [path] = (tmp_path / "out").rglob("l2_cache_*.csv")
    written = csv_rows(path)[1:]
    assert len(written) == len(records(tmp_path / "raw", 0)) > 0
    assert {row[5] for row in written} == {"N/A"}
