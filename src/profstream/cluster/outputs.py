"""The cluster files, with msprof-analyze's names, keys and units (framework_outputs.md §4d).

* ``cluster_step_trace_time.csv`` (MPA ``analysis/step_trace_time_analysis.py``): header ``Step,
  Type, Index`` + the step_trace_time columns without ``Step``/``Device_id``; one ``rank`` row per
  (rank, step), values in µs, then the ``stage`` rows (max over the ranks of a stage per step) of the
  stages :mod:`.stages` finds.
* ``communication_group.json`` (MPA ``communication_group/communication_json_group.py``): the ranks of
  each collective and p2p group and ``comm_group_parallel_info`` (:mod:`.stages`).
* ``cluster_communication.json`` (MPA ``analysis/communication_analysis.py``, ``base_analysis.py``):
  ``{"(r0, r1, ...)": {step: {op@group: {rank: info}, "Total Op Info@group": {rank: total}}}}`` where
  the key is the group's rank set; a total sums the time fields (ratios recomputed) and, per
  transport, size, time and size distribution, with ``Bandwidth(GB/s)`` = MB / ms rounded to 4 (what
  msprof-analyze computes there).
* ``cluster_communication_matrix.json`` (MPA ``analysis/comm_matrix_analysis.py``): per rank set,
  step and op, links ``"src-dst"`` in global ranks with ``Transport Type, Transit Time(ms), Transit
  Size(MB), Op Name, Bandwidth(GB/s)``; ``Total Op Info@group`` sums the ops whose name contains
  ``total`` or none of ``top/middle/bottom``.

Local to global ranks (matrix): a group's ``i-i`` links tell which rank is local rank ``i``
(msprof-analyze's only source besides ``parallel_group_info``). For a group with no such link,
profstream maps local rank ``i`` to the ``i``-th smallest rank of the group (HCCL numbers a group's
ranks in the order of their global ranks, which is what msprof-analyze assumes for
``parallel_group_info.global_ranks``); msprof-analyze would drop those links. A local rank that
cannot be mapped either way is dropped and counted.

JSON files are written group by group (rank set by rank set), reading the ``comm_op_info`` rows of one
rank set at a time from the Parquet dataset.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from profstream import events
from profstream.cluster.rank import COMM_OPS_TABLE, STEP_COLUMNS
from profstream.cluster.reduce import Partial
from profstream.cluster.stages import (
    COMMUNICATION_GROUP_JSON,
    comm_groups,
    communication_group_json,
    find_stages,
    stage_rows,
)
from profstream.sinks._base import StagedFile
from profstream.sinks.communication_json import (
    BANDWIDTH,
    BW,
    OP_NAME,
    SIZE,
    TOTAL,
    TRANSIT,
    TRANSPORT,
    total_op_info,
    total_ratio,
)

STEP_TRACE_CSV = "cluster_step_trace_time.csv"
COMMUNICATION_JSON = "cluster_communication.json"
MATRIX_JSON = "cluster_communication_matrix.json"


def write_step_trace(directory: Path, cluster: Partial) -> Path:
    """``cluster_step_trace_time.csv``: one ``rank`` row per (rank, step), then the ``stage`` rows."""
    staged = StagedFile(directory, STEP_TRACE_CSV)
    writer = csv.writer(_TextFile(staged), lineterminator="\n")
    writer.writerow(["Step", "Type", "Index", *(name for name, _ in STEP_COLUMNS)])
    stages = find_stages(comm_groups(cluster.groups, cluster.described()))
    for kind, rows in (("rank", cluster.steps), ("stage", stage_rows(cluster.steps, stages))):
        columns = [rows[name].to_pylist() for name, _ in STEP_COLUMNS]
        index = rows[kind if kind == "rank" else "index"].to_pylist()
        for i, step in enumerate(rows["step"].to_pylist()):
            writer.writerow(["" if step is None else step, kind, index[i], *(c[i] for c in columns)])
    return staged.commit(STEP_TRACE_CSV)


def write_communication_group(directory: Path, cluster: Partial) -> Path:
    """``communication_group.json``: the communication groups and their parallel_group_info names."""
    body = communication_group_json(comm_groups(cluster.groups, cluster.described()))
    staged = StagedFile(directory, COMMUNICATION_GROUP_JSON)
    staged.write(json.dumps(body).encode())
    return staged.commit(COMMUNICATION_GROUP_JSON)


class _TextFile:
    """A text ``write`` over a :class:`StagedFile` (what csv.writer needs)."""

    def __init__(self, staged: StagedFile) -> None:
        self.staged = staged

    def write(self, text: str) -> int:
        self.staged.write(text.encode())
        return len(text)


def rank_sets(cluster: Partial) -> dict[tuple[int, ...], list[tuple[str, str]]]:
    """Rank set -> the (kind, group) pairs whose ranks it is, in rank-set order."""
    found: dict[tuple[int, ...], list[tuple[str, str]]] = defaultdict(list)
    for key, members in cluster.groups.items():
        found[tuple(sorted(members))].append(key)
    return dict(sorted(found.items()))


def write_communication(directory: Path, cluster: Partial, dataset: Path) -> Path:
    """``cluster_communication.json``, one rank set at a time from the ``comm_op_info`` dataset."""
    staged = StagedFile(directory, COMMUNICATION_JSON)
    table_dir = dataset / COMM_OPS_TABLE
    source = ds.dataset(table_dir, format="parquet", partitioning="hive") if table_dir.is_dir() else None
    first = True
    staged.write(b"{")
    for members, keys in rank_sets(cluster).items():
        if source is None:
            break
        pairs = pa.table({"kind": [k for k, _ in keys], "group": [g for _, g in keys]})
        rows = source.to_table(filter=pc.field("group").isin(pairs["group"]))
        rows = rows.join(pairs, ["kind", "group"], join_type="inner").sort_by(
            [("step", "ascending"), ("rank", "ascending"), ("start_ns", "ascending"), ("op", "ascending")]
        )
        if rows.num_rows == 0:
            continue
        body = communication_steps(rows)
        staged.write(f"{'' if first else ', '}{json.dumps(str(members))}: {json.dumps(body)}".encode())
        first = False
    staged.write(b"}")
    return staged.commit(COMMUNICATION_JSON)


def communication_steps(rows: pa.Table) -> dict[str, dict[str, dict[str, Any]]]:
    """step -> op -> rank -> info, plus ``Total Op Info@group`` per step (rows of one rank set).

    ``rows`` come sorted by (step, rank, op start): ops appear in the order of the lowest rank that
    has them, ranks in ascending order, as msprof-analyze builds them from ranks in order.
    """
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for step, op, rank, info in zip(
        rows["step"].to_pylist(),
        rows["op"].to_pylist(),
        rows["rank"].to_pylist(),
        rows["info"].to_pylist(),
        strict=True,
    ):
        steps.setdefault(step, {}).setdefault(op, {}).setdefault(str(rank), json.loads(info))
    for ops in steps.values():
        infos: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for op, by_rank in ops.items():
            group = op.rsplit("@", 1)[-1]
            for rank, info in by_rank.items():
                infos.setdefault(group, {}).setdefault(rank, []).append(info)
        for group, by_rank in infos.items():
            ops[f"{TOTAL}@{group}"] = {rank: cluster_total(found) for rank, found in by_rank.items()}
    return steps


def cluster_total(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """msprof-analyze's total of a rank's ops in one group (MPA ``combine_time_info`` /
    ``combine_bandwidth_info``): torch_npu's ``Total Op Info`` plus each transport's MB/ms bandwidth."""
    total = total_op_info(infos)
    for record in total[BANDWIDTH].values():
        record[BW] = total_ratio(record[SIZE], record[TRANSIT])
    return total


def global_links(cluster: Partial) -> pa.Table:
    """The reduced matrix with src/dst mapped to global ranks (see the module docstring)."""
    explicit: dict[tuple[str, int], int] = {}
    for group, local, rank in zip(
        *(cluster.self_links[c].to_pylist() for c in ("group", "local", "rank")), strict=True
    ):
        explicit.setdefault((group, local), rank)
    members = {(kind, group): sorted(ranks) for (kind, group), ranks in cluster.groups.items()}
    matrix = cluster.matrix
    src, dst, keep = [], [], []
    for kind, group, s, d in zip(
        *(matrix[c].to_pylist() for c in ("kind", "group", "src", "dst")), strict=True
    ):
        ranks = members.get((kind, group), [])
        mapped = [explicit.get((group, x), ranks[x] if 0 <= x < len(ranks) else None) for x in (s, d)]
        keep.append(None not in mapped)
        src.append(mapped[0] if mapped[0] is not None else -1)
        dst.append(mapped[1] if mapped[1] is not None else -1)
    dropped = keep.count(False)
    if dropped:
        events.get_logger(component="cluster.matrix").warning(
            events.RECORDS_UNMATCHED,
            what="matrix links whose local rank maps to no global rank",
            count=dropped,
        )
    mapped_table = matrix.set_column(matrix.schema.get_field_index("src"), "src", pa.array(src, pa.int64()))
    mapped_table = mapped_table.set_column(
        mapped_table.schema.get_field_index("dst"), "dst", pa.array(dst, pa.int64())
    )
    return mapped_table.filter(pa.array(keep, pa.bool_()))


def write_matrix(directory: Path, cluster: Partial) -> Path:
    """``cluster_communication_matrix.json`` from the reduced, rank-mapped matrix."""
    links = global_links(cluster)
    sets = {key: str(members) for members, keys in rank_sets(cluster).items() for key in keys}
    body: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    columns = ("kind", "group", "step", "op", "src", "dst", "transport", "time_ms", "size_mb", "op_name")
    for kind, group, step, op, src, dst, transport, time, size, op_name in zip(
        *(links[c].to_pylist() for c in columns), strict=True
    ):
        ops = body.setdefault(sets[(kind, group)], {}).setdefault(step, {})
        ops.setdefault(op, {})[f"{src}-{dst}"] = _link(transport, time, size, op_name)
    for steps in body.values():
        for ops in steps.values():
            _add_matrix_totals(ops)
    staged = StagedFile(directory, MATRIX_JSON)
    staged.write(json.dumps(body).encode())
    return staged.commit(MATRIX_JSON)


def _link(transport: str, time: float, size: float, op_name: str) -> dict[str, Any]:
    return {TRANSPORT: transport, TRANSIT: time, SIZE: size, OP_NAME: op_name, BW: total_ratio(size, time)}


def summed_op(op: str) -> bool:
    """MPA ``check_add_op``: a total entry, or an op without top/middle/bottom in its name."""
    return "total" in op or not any(word in op for word in ("middle", "top", "bottom"))


def _add_matrix_totals(ops: dict[str, dict[str, Any]]) -> None:
    totals: dict[str, dict[str, list[Any]]] = {}
    for op, links in ops.items():
        if not summed_op(op):
            continue
        group = op.rsplit("@", 1)[-1]
        for key, link in links.items():
            entry = totals.setdefault(group, {}).setdefault(key, ["", 0.0, 0.0, ""])
            entry[0], entry[3] = link[TRANSPORT], link[OP_NAME]
            entry[1] += link[TRANSIT]
            entry[2] += link[SIZE]
    for group, links in totals.items():
        ops[f"{TOTAL}@{group}"] = {key: _link(*values) for key, values in links.items()}


def write_json(path: Path, value: Any) -> Path:
    """A small JSON document (the slow-rank report), written atomically."""
    staged = StagedFile(path.parent, path.name)
    staged.write(json.dumps(value, indent=2).encode())
    return staged.commit(path.name)
