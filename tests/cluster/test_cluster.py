"""A simulated 3-rank run end to end: in-process Dask equals the sequential run, and the truth."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from profstream.cli import main
from profstream.cluster import analyse_cluster, find_ranks
from profstream.cluster.command import EXTRA_MESSAGE
from profstream.cluster.rank import COMM_OPS_TABLE
from profstream.simulate import SimulationConfig, simulate

FILES = (
    "cluster_step_trace_time.csv",
    "cluster_communication.json",
    "cluster_communication_matrix.json",
    "communication_group.json",
    "slow_rank.json",
)
RANKS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cluster")
    config = SimulationConfig(
        chip="910B", steps=2, ops_per_step=16, framework="torch_npu", ranks=RANKS, seed=3
    )
    simulate(config, base / "run", base / "truth")
    return base / "run", base / "truth"


@pytest.fixture(scope="module")
def sequential(run: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sequential")
    analyse_cluster(run[0], out)
    return out


def test_dask_in_process_equals_the_sequential_run(
    run: tuple[Path, Path], sequential: Path, tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        report = analyse_cluster(run[0], tmp_path, client=client, fan_in=2)
    assert [r.rank for r in report.ranks] == list(range(RANKS))
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (sequential / name).read_bytes(), name
    for table in ("tasks", "step_time", COMM_OPS_TABLE):
        ours = ds.dataset(tmp_path / "parquet" / table, partitioning="hive").to_table()
        theirs = ds.dataset(sequential / "parquet" / table, partitioning="hive").to_table()
        assert ours.sort_by("rank").equals(theirs.sort_by("rank"))


def test_step_trace_matches_the_simulation_truth(run: tuple[Path, Path], sequential: Path) -> None:
    truth = {(r["device_id"], r["iteration"]): r for r in pq.read_table(run[1] / "steps.parquet").to_pylist()}
    with (sequential / FILES[0]).open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(truth) == RANKS * 2
    for row in rows:
        expected = truth[(int(row["Index"]), int(row["Step"]))]  # one device per rank: device id == rank
        assert row["Type"] == "rank"
        assert float(row["Computing"]) == expected["computing_ns"] / 1000
        assert float(row["Communication(Not Overlapped)"]) == expected["comm_not_overlapped_ns"] / 1000
        assert float(row["Overlapped"]) == expected["overlapped_ns"] / 1000


def test_communication_files_cover_every_rank(sequential: Path) -> None:
    communication = json.loads((sequential / FILES[1]).read_text())
    world = str(tuple(range(RANKS)))
    assert list(communication) == [world]
    for step in communication[world].values():
        ops = [op for op in step if not op.startswith("Total")]
        assert ops and all(sorted(step[op]) == [str(r) for r in range(RANKS)] for op in ops)
    matrix = json.loads((sequential / FILES[2]).read_text())
    links = {link for step in matrix[world].values() for op in step.values() for link in op}
    assert links == {f"{r}-{(r + 1) % RANKS}" for r in range(RANKS)}  # the simulator's ring
    groups = json.loads((sequential / "communication_group.json").read_text())
    assert (groups["collective"], groups["p2p"]) == ([list(range(RANKS))], [])  # no p2p group: no stage rows
    assert [(g["group_name"], g["pg_name"]) for g in groups["comm_group_parallel_info"]] == [
        ("hccl_world_group", "")
    ]


def test_dataset_has_a_rank_column(sequential: Path) -> None:
    tasks = ds.dataset(sequential / "parquet" / "tasks", partitioning="hive").to_table(
        columns=["rank", "device_id"]
    )
    assert sorted(set(tasks["rank"].to_pylist())) == list(range(RANKS))
    assert tasks["rank"].to_pylist() == tasks["device_id"].to_pylist()


def test_missing_dask_is_a_usage_error_naming_the_extra(
    run: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    assert main(["cluster", str(run[0]), "--output", str(tmp_path)]) == 2
    assert EXTRA_MESSAGE in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_layout_exports_every_rank_beside_the_cluster_files(run: tuple[Path, Path], tmp_path: Path) -> None:
    """``--layout torch_npu``: each rank's ASCEND_PROFILER_OUTPUT, as ``profstream export`` writes it."""
    analyse_cluster(run[0], tmp_path, layout="torch_npu")
    ranks = find_ranks(run[0])
    for rank in ranks:
        out = tmp_path / "ranks" / f"rank{rank.rank}" / "ASCEND_PROFILER_OUTPUT"
        assert (out / "kernel_details.csv").is_file() and (out / "trace_view.json").is_file()
        assert (out / "step_trace_time.csv").read_text().startswith("Step,Computing")
    assert (tmp_path / "cluster_step_trace_time.csv").is_file()
