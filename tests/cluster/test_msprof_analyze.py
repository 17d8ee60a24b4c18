"""Interoperability with msprof-analyze (the PyPI package) on per-rank torch_npu-layout directories.

msprof-analyze is not a dependency: the test runs it as a command, found in
``$PROFSTREAM_MSPROF_ANALYZE`` or on ``PATH`` (install it in its own venv, e.g.
``python -m venv /tmp/venv-msa && /tmp/venv-msa/bin/pip install msprof-analyze``), and skips otherwise.

What must agree (framework_outputs.md §4d): ``cluster_step_trace_time.csv`` row for row (msprof-analyze
orders the ranks as it lists the directories, profstream by rank, so rows are compared by
(Step, Type, Index)) and ``cluster_communication.json`` value for value. The matrix differs by design:
without ``i-i`` links or ``parallel_group_info`` msprof-analyze cannot map local ranks and drops every
link, where profstream maps local rank i to the i-th smallest rank of the group (cluster/outputs.py).
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


def test_msprof_analyze_agrees_with_profstream(tmp_path: Path) -> None:
    assert MSPROF_ANALYZE is not None
    config = SimulationConfig(chip="910B", steps=2, ops_per_step=16, framework="torch_npu", ranks=3, seed=5)
    simulate(config, tmp_path / "run", None)
    ours = tmp_path / "ours"
    analyse_cluster(tmp_path / "run", ours)
    layout = tmp_path / "torch_npu"
    for rank in find_ranks(tmp_path / "run"):  # profstream's own per-rank torch_npu export
        export(rank.path, kind="summary", layout="torch_npu", output=layout / rank.path.name)
    theirs = tmp_path / "theirs"
    subprocess.run(
        [MSPROF_ANALYZE, "cluster", "-d", str(layout), "-m", "all", "-o", str(theirs)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    output = theirs / "cluster_analysis_output"
    assert _rows(output / "cluster_step_trace_time.csv") == _rows(ours / "cluster_step_trace_time.csv")
    theirs_comm = json.loads((output / "cluster_communication.json").read_text())
    ours_comm = json.loads((ours / "cluster_communication.json").read_text())
    assert _rounded(theirs_comm) == _rounded(ours_comm)
