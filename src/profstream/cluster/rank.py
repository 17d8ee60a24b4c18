"""The per-rank task: one rank's pipeline, its Parquet partition, and a small result.

:func:`analyse_rank` runs on a worker. It streams every canonical table of the rank (one engine
pipeline over all tables for raw data; :func:`~profstream.engine.imports.open_export` for an export)
into the cluster dataset ``{dataset}/{table}/rank={rank}/part-0.parquet`` (hive partitioning: readers
see a ``rank`` column), and returns a :class:`RankResult` that holds only what the cluster files need
from it: the rank's ``step_trace_time`` rows and its ``communication_matrix`` rows (both a few per
step) and the ``parallel_group_info`` of its ``profiler_metadata.json`` (one entry per group). The
rank's ``communication.json`` entries (one per communication op) are written to the dataset table
``comm_op_info`` instead of being returned, so that the reduction never carries them; the
``cluster_communication.json`` writer reads them back group by group.

Communication: the engine's own analysis (``comm_ops`` / ``comm_links``, rendered by
:func:`~profstream.cluster.comm.analyse` exactly as the torch_npu export renders it).

Memory: besides the sinks' buffers (``SINK_BUFFER_BYTES`` for all of them), the task keeps the rank's
``step_time``, ``framework_steps``, ``comm_ops`` and ``comm_links`` rows (a few rows per step and per
communication op).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from profstream._allocator import use_jemalloc
from profstream.cluster import comm as comm_analysis
from profstream.cluster.discovery import EXPORT_DIRS, RankDir
from profstream.cluster.stages import ParallelGroup, read_parallel_groups
from profstream.engine import discovery
from profstream.engine.layouts.torch_npu import STEP_TIME_COLUMNS
from profstream.engine.schema import TABLES, conform, tasks_schema
from profstream.sinks.parquet import BufferBudget, ParquetSink

#: the dataset table of the per-op communication entries (the rows of communication.json); not
#: ``comm_ops``, which is the canonical table of per-op communication times
COMM_OPS_TABLE = "comm_op_info"
#: tables the communication entries and the step trace need from the pipeline
KEPT = ("step_time", "framework_steps", "comm_ops", "comm_links")
#: what the rank's sinks (one per table) buffer in memory together before the largest spills to disk
SINK_BUFFER_BYTES = 64 << 20

#: cluster_step_trace_time.csv value columns: step_trace_time.csv's (framework_outputs.md §3.4)
STEP_COLUMNS = STEP_TIME_COLUMNS
#: a rank's step_trace_time rows, values in µs
STEP_SCHEMA = pa.schema(
    [("rank", pa.int64()), ("step", pa.int64()), *((name, pa.float64()) for name, _ in STEP_COLUMNS)]
)
MATRIX_SCHEMA = pa.schema([("rank", pa.int64()), *comm_analysis.MATRIX_SCHEMA])


@dataclass(frozen=True, slots=True)
class RankResult:
    """What one rank contributes to the reduction (small: a few rows per step)."""

    rank: int
    steps: pa.Table  # STEP_SCHEMA
    matrix: pa.Table  # MATRIX_SCHEMA
    groups: tuple[tuple[str, str], ...]  # (kind, group) of every communication group the rank is in
    comm_ops: int  # rows written to the comm_op_info dataset table
    parallel_groups: tuple[ParallelGroup, ...] = ()  # profiler_metadata.json parallel_group_info


def analyse_rank(rank_dir: RankDir, dataset: Path) -> RankResult:
    """Run one rank (see the module docstring) with its Parquet partition under ``dataset``."""
    use_jemalloc()  # a Dask worker is a process of its own
    with ExitStack() as stack:
        sinks = _Sinks(dataset, rank_dir.rank, stack)
        if rank_dir.kind == "raw":
            kept, wall_offset = _run_raw(rank_dir.path, sinks)
            ops, matrix = comm_analysis.analyse(
                kept["comm_ops"], kept["comm_links"], kept["framework_steps"], wall_offset
            )
        else:
            kept = _run_exported(rank_dir.path, sinks)
            found = _exported_comm(rank_dir.path)
            ops, matrix = found or (
                comm_analysis.OPS_SCHEMA.empty_table(),
                comm_analysis.MATRIX_SCHEMA.empty_table(),
            )
        sinks.write(COMM_OPS_TABLE, ops)
    groups = pc.unique(pc.binary_join_element_wise(ops["kind"], ops["group"], "\n")).to_pylist()
    groups += pc.unique(pc.binary_join_element_wise(matrix["kind"], matrix["group"], "\n")).to_pylist()
    return RankResult(
        rank=rank_dir.rank,
        steps=_step_rows(rank_dir.rank, kept["step_time"]),
        matrix=_with_rank(rank_dir.rank, matrix, MATRIX_SCHEMA),
        groups=tuple(sorted({(kind, group) for kind, _, group in (g.partition("\n") for g in groups)})),
        comm_ops=ops.num_rows,
        parallel_groups=read_parallel_groups(rank_dir.path),
    )


class _Sinks:
    """One ParquetSink per table of the rank's partition, opened on the table's first rows."""

    def __init__(self, dataset: Path, rank: int, stack: ExitStack) -> None:
        self.dataset, self.rank, self.stack = dataset, rank, stack
        self.sinks: dict[str, ParquetSink] = {}
        self.budget = BufferBudget(SINK_BUFFER_BYTES)

    def write(self, table: str, data: pa.RecordBatch | pa.Table) -> None:
        if data.num_rows == 0:
            return
        sink = self.sinks.get(table)
        if sink is None:
            directory = self.dataset / table / f"rank={self.rank}"
            sink = ParquetSink(directory, data.schema, partition_by=None, budget=self.budget)
            self.sinks[table] = self.stack.enter_context(sink)
        sink.write(data)


def _run_raw(path: Path, sinks: _Sinks) -> tuple[dict[str, pa.Table], int]:
    """Every table of every collection under ``path`` into the sinks; the KEPT tables and the wall offset."""
    from profstream.engine.plan import TABLE_NAMES, Planner

    kept: dict[str, list[pa.RecordBatch]] = {name: [] for name in KEPT}
    wall_offset = 0
    for collection in discovery.discover(path):
        planner = Planner(collection)
        wall_offset = collection.wall_offset_ns
        metrics = next((planner.metric_columns(d) for d in planner.devices), [])
        schemas = {**TABLES, "tasks": tasks_schema(metrics)}
        pipeline, streams = planner.pipeline(TABLE_NAMES)
        for stream, produced in pipeline.run(streams):
            table = stream.split("@", 1)[0]
            batch = _conformed(schemas[table], produced)
            sinks.write(table, batch)
            if table in kept:
                kept[table].append(batch)
    return {name: pa.Table.from_batches(batches, TABLES[name]) for name, batches in kept.items()}, wall_offset


def _run_exported(path: Path, sinks: _Sinks) -> dict[str, pa.Table]:
    """Every table the export provides into the sinks; the KEPT tables it has (others empty)."""
    from profstream.engine.imports import open_export

    run = open_export(path)
    kept: dict[str, list[pa.RecordBatch]] = {name: [] for name in KEPT}
    for name in run.tables:
        reader = run.table(name)
        schema = reader.schema if name == "tasks" else TABLES[name]
        for read in reader:
            batch = _conformed(schema, read)
            sinks.write(name, batch)
            if name in kept:
                kept[name].append(batch)
    return {name: pa.Table.from_batches(batches, TABLES[name]) for name, batches in kept.items()}


def _conformed(schema: pa.Schema, batch: pa.RecordBatch) -> pa.RecordBatch:
    if batch.schema == schema:
        return batch
    return conform(schema, dict(zip(batch.schema.names, batch.columns, strict=True)))


def _exported_comm(path: Path) -> tuple[pa.Table, pa.Table] | None:
    """torch_npu's communication files, else msprof's ``PROF_*/analyze`` ones."""
    for directory in (path / EXPORT_DIRS[0], *sorted(path.glob("PROF_*/analyze")), path / "analyze"):
        found = comm_analysis.read_exported(directory)
        if found is not None:
            return found
    return None


def _step_rows(rank: int, step_time: pa.Table) -> pa.Table:
    """step_time (ns) as µs rows of the cluster step trace, in step order."""
    step_time = step_time.sort_by([("step", "ascending")])
    columns: dict[str, pa.Array | list[int]] = {
        "rank": [rank] * step_time.num_rows,
        "step": step_time["step"],
    }
    for name, column in STEP_COLUMNS:
        columns[name] = pc.divide(pc.cast(pc.fill_null(step_time[column], 0), pa.float64()), 1000.0)
    return pa.table(columns, schema=STEP_SCHEMA)


def _with_rank(rank: int, table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table(
        {"rank": [rank] * table.num_rows, **{n: table[n] for n in table.column_names}}, schema=schema
    )


def concat(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    """Tables of one schema as one table (empty when none)."""
    found = [t for t in tables if t.num_rows]
    return pa.concat_tables(found).combine_chunks() if found else schema.empty_table()
