"""Per-rank torch_npu-layout directories from profstream's per-rank results, for msprof-analyze.

A stand-in for ``profstream export --layout torch_npu`` until that lands: it writes only what
msprof-analyze's cluster analysis reads (framework_outputs.md §4d; MPA
``cluster_data_preprocess/pytorch_data_preprocessor.py``, ``analysis/step_trace_time_analysis.py``,
``communication_group/base_communication_group.py``):

* ``<run>_ascend_pt/profiler_info_<rank>.json`` — how msprof-analyze finds the rank id;
* ``<run>_ascend_pt/ASCEND_PROFILER_OUTPUT/`` — the directory must exist for the rank to count;
* ``step_trace_time.csv`` — ``Device_id, Step, Computing, ..., Preparing`` in µs;
* ``communication.json`` — ``{step: {"p2p"|"collective": {op@group: info, "Total Op Info": ...}}}``;
* ``communication_matrix.json`` — ``{step: {"p2p"|"collective": {summary op@group: {"src-dst": link}}}}``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from profstream.cluster.outputs import add_op_info, finish_total
from profstream.cluster.rank import COMM_OPS_TABLE, STEP_COLUMNS, RankResult


def write_rank(result: RankResult, dataset: Path, dest: Path) -> Path:
    """``dest/rank<r>_ascend_pt`` for one analysed rank; returns that directory."""
    run = dest / f"rank{result.rank}_ascend_pt"
    output = run / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    (run / f"profiler_info_{result.rank}.json").write_text(json.dumps({"rank_id": result.rank}))
    with (output / "step_trace_time.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Device_id", "Step", *(name for name, _ in STEP_COLUMNS)])
        for row in result.steps.to_pylist():
            writer.writerow([result.rank, row["step"], *(row[name] for name, _ in STEP_COLUMNS)])
    ops = ds.dataset(dataset / COMM_OPS_TABLE, partitioning="hive").to_table(
        filter=pc.field("rank") == result.rank
    )
    communication: dict[str, dict[str, dict[str, Any]]] = {}
    for row in ops.sort_by("start_ns").to_pylist():
        kinds = communication.setdefault(row["step"], {"p2p": {}, "collective": {}})
        kinds[row["kind"]][row["op"]] = json.loads(row["info"])
    for kinds in communication.values():
        for op_dict in kinds.values():
            if op_dict:
                total: dict[str, Any] = {"Communication Time Info": {}, "Communication Bandwidth Info": {}}
                for info in op_dict.values():
                    add_op_info(total, info)
                finish_total(total)
                op_dict["Total Op Info"] = total
    (output / "communication.json").write_text(json.dumps(communication))
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for row in result.matrix.to_pylist():
        kinds = matrix.setdefault(row["step"], {"p2p": {}, "collective": {}})
        kinds[row["kind"]].setdefault(row["op"], {})[f"{row['src']}-{row['dst']}"] = {
            "Transport Type": row["transport"],
            "Transit Size(MB)": row["size_mb"],
            "Transit Time(ms)": row["time_ms"],
            "Bandwidth(GB/s)": row["bandwidth"],
            "Op Name": row["op_name"],
        }
    (output / "communication_matrix.json").write_text(json.dumps(matrix))
    return run
