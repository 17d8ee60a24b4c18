"""Interoperability with msprof-analyze (the PyPI package) on per-rank torch_npu-layout directories.

msprof-analyze is not a dependency: the test runs it as a command, found in
``$PROFSTREAM_MSPROF_ANALYZE`` or on ``PATH`` (install it in its own venv, e.g.
``python -m venv /tmp/venv-msa && /tmp/venv-msa/bin/pip install msprof-analyze``), and skips otherwise.

What must agree (framework_outputs.md §4d): ``cluster_step_trace_time.csv`` row for row (msprof-analyze
orders the ranks as it lists the directories, profstream by rank, so rows are compared by
(Step, Type, Index)) and ``cluster_communication.json`` value for value. The matrix differs by design:
without ``i-i`` links or ``parallel_group_info`` msprof-analyze cannot map local ranks and drops every
link, where profstream maps local rank i to the i-th smallest rank of the group (cluster/outputs.py).

Pipeline stages (cluster/stages.py): the simulator runs one world all-reduce group and writes no
``profiler_metadata.json``, so the stage test rewrites the per-rank export as a tp=2 x pp=2 run would
have it: the all-reduces in the rank's tp group, a send per all-reduce in its pp group (groups named
as HCCL names them, the hash of the communicator id) and ``parallel_group_info`` naming them.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from profstream.cluster import analyse_cluster, find_ranks
from profstream.cluster.stages import COMMUNICATION_GROUP_JSON, METADATA_JSON, double_hash
from profstream.export import export
from profstream.simulate import SimulationConfig, simulate

MSPROF_ANALYZE = os.environ.get("PROFSTREAM_MSPROF_ANALYZE") or shutil.which("msprof-analyze")
pytestmark = pytest.mark.skipif(
    MSPROF_ANALYZE is None,
    reason="msprof-analyze not installed (set PROFSTREAM_MSPROF_ANALYZE or put it on PATH)",
)


def _rows(path: Path) -> dict[tuple[str, str, str], list[float]]:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = {(r[0], r[1], r[2]): [float(v) for v in r[3:]] for r in reader}
    assert header[:3] == ["Step", "Type", "Index"]
    return rows


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 9) if isinstance(value, float) else value


def _exported_run(tmp_path: Path, ranks: int) -> tuple[Path, dict[int, Path]]:
    """A simulated run and profstream's per-rank torch_npu export of it (rank -> export directory)."""
    config = SimulationConfig(
        chip="910B", steps=2, ops_per_step=16, framework="torch_npu", ranks=ranks, seed=5
    )
    simulate(config, tmp_path / "run", None)
    exports = {}
    for rank in find_ranks(tmp_path / "run"):
        exports[rank.rank] = tmp_path / "torch_npu" / rank.path.name
        export(rank.path, kind="summary", layout="torch_npu", output=exports[rank.rank])
    return tmp_path / "run", exports


def _msprof_analyze(ranks: Path, output: Path) -> Path:
    assert MSPROF_ANALYZE is not None
    subprocess.run(
        [MSPROF_ANALYZE, "cluster", "-d", str(ranks), "-m", "all", "-o", str(output)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return output / "cluster_analysis_output"


def _same_communication(theirs: Path, ours: Path) -> None:
    theirs_comm = json.loads((theirs / "cluster_communication.json").read_text())
    ours_comm = json.loads((ours / "cluster_communication.json").read_text())
    assert _rounded(theirs_comm) == _rounded(ours_comm)


def test_msprof_analyze_agrees_with_profstream(tmp_path: Path) -> None:
    run, exports = _exported_run(tmp_path, 3)
    ours = tmp_path / "ours"
    analyse_cluster(run, ours)
    theirs = _msprof_analyze(next(iter(exports.values())).parent, tmp_path / "theirs")
    assert _rows(theirs / "cluster_step_trace_time.csv") == _rows(ours / "cluster_step_trace_time.csv")
    _same_communication(theirs, ours)


def _communicator(name: str) -> str:
    return f"10.0.0.1%eth0_60000_0_{name}"


def _as_pipeline_rank(directory: Path, rank: int) -> None:
    """Rewrite one rank's export as rank ``rank`` of tp=2 x pp=2 on 4 ranks (see the module docstring)."""
    tp, pp = _communicator(f"tp{rank // 2}"), _communicator(f"pp{rank % 2}")
    output = directory / "ASCEND_PROFILER_OUTPUT"
    (output / "communication_matrix.json").unlink()  # its world-ring links fit no 2-rank group
    document = json.loads((output / "communication.json").read_text())
    for step in document.values():
        ops = {op.split("@")[0]: info for op, info in step["collective"].items() if "@" in op}
        step["collective"] = {f"{op}@{double_hash(tp)}": info for op, info in ops.items()}
        step["p2p"] = {
            f"{op.replace('allReduce', 'send')}@{double_hash(pp)}": info for op, info in ops.items()
        }
    (output / "communication.json").write_text(json.dumps(document))
    groups = {
        _communicator("world"): ("default_group", rank, [0, 1, 2, 3]),  # no op: in no communication group
        tp: ("tp", rank % 2, [rank // 2 * 2, rank // 2 * 2 + 1]),
        pp: ("pp", rank // 2, [rank % 2, rank % 2 + 2]),
    }
    info = {key: {"group_name": n, "group_rank": r, "global_ranks": g} for key, (n, r, g) in groups.items()}
    (directory / METADATA_JSON).write_text(json.dumps({"parallel_group_info": info}))


def test_msprof_analyze_finds_the_same_pipeline_stages(tmp_path: Path) -> None:
    _, exports = _exported_run(tmp_path, 4)
    for rank, directory in exports.items():
        _as_pipeline_rank(directory, rank)
    ranks = next(iter(exports.values())).parent
    ours = tmp_path / "ours"
    analyse_cluster(ranks, ours)  # exported ranks: profstream reads the same files
    theirs = _msprof_analyze(ranks, tmp_path / "theirs")
    rows = _rows(ours / "cluster_step_trace_time.csv")
    assert sorted(key for key in rows if key[1] == "stage") == [
        (step, "stage", stage) for step in ("1", "2") for stage in ("(0, 1)", "(2, 3)")
    ]
    assert _rows(theirs / "cluster_step_trace_time.csv") == rows
    _same_communication(theirs, ours)
    theirs_groups = json.loads((theirs / COMMUNICATION_GROUP_JSON).read_text())
    ours_groups = json.loads((ours / COMMUNICATION_GROUP_JSON).read_text())
    for kind, expected in (("collective", [[0, 1], [2, 3]]), ("p2p", [[0, 2], [1, 3]])):
        assert sorted(theirs_groups[kind]) == sorted(ours_groups[kind]) == expected
    described = "comm_group_parallel_info"
    assert sorted(theirs_groups[described], key=str) == sorted(ours_groups[described], key=str)
