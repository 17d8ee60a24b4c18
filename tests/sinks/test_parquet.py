"""Parquet datasets: hive partitions by device, coalesced row groups, round trip through pyarrow.dataset."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profstream.sinks import BufferBudget, ParquetSink, read_dataset

SCHEMA = pa.schema(
    [
        ("device_id", pa.int32()),
        ("name", pa.dictionary(pa.int32(), pa.string())),
        ("start_ns", pa.int64()),
        ("value", pa.float64()),
    ]
)


def batch(start: int, rows: int, devices: list[int | None]) -> pa.RecordBatch:
    index = np.arange(start, start + rows)
    device = pa.array([devices[i % len(devices)] for i in index.tolist()], pa.int32())
    names = pa.array([f"op{i % 5}" for i in index.tolist()]).dictionary_encode()
    return pa.record_batch([device, names, pa.array(index), pa.array(index * 0.5)], schema=SCHEMA)


def sorted_table(table: pa.Table) -> pa.Table:
    return table.sort_by("start_ns")


def test_round_trip_partitioned_by_device(tmp_path: Path) -> None:
    """Every row comes back with its device (null too) through pyarrow.dataset; files sit in device_id=N."""
    written = [batch(s, 7, [0, 1, None]) for s in range(0, 70, 7)]
    with ParquetSink(tmp_path, SCHEMA) as sink:
        for b in written:
            sink.write(b)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in sink.paths) == [
        "device_id=0/part-0.parquet",
        "device_id=1/part-0.parquet",
        "device_id=__HIVE_DEFAULT_PARTITION__/part-0.parquet",
    ]
    assert pq.read_schema(sink.paths[0]).names == ["name", "start_ns", "value"]  # the device is the directory
    back = read_dataset(tmp_path, SCHEMA).to_table()
    expected = pa.Table.from_batches(written)
    assert sorted_table(back).cast(SCHEMA).to_pylist() == sorted_table(expected).to_pylist()
    zero = read_dataset(tmp_path, SCHEMA).to_table(filter=pc.field("device_id") == 0)
    assert zero.num_rows == sum(1 for d in expected.column("device_id").to_pylist() if d == 0)


def test_duckdb_and_polars_read_the_dataset_as_written(tmp_path: Path) -> None:
    """Issue #5: the datasets are readable by DuckDB and Polars as they are, null partition included."""
    written = pa.Table.from_batches([batch(s, 7, [0, 1, None]) for s in range(0, 70, 7)])
    with ParquetSink(tmp_path / "t", SCHEMA) as sink:
        for b in written.to_batches():
            sink.write(b)
    files = str(tmp_path / "t" / "**" / "*.parquet")
    by_duckdb = duckdb.sql(f"select * from read_parquet('{files}', hive_partitioning=true)").to_arrow_table()
    by_polars = pl.scan_parquet(files, hive_partitioning=True).collect().to_arrow()
    expected = sorted_table(written).to_pylist()
    for back in (by_duckdb, by_polars):
        assert sorted(back.column_names) == sorted(SCHEMA.names)
        assert sorted_table(back.select(SCHEMA.names)).to_pylist() == expected


def test_row_groups_are_coalesced_to_the_row_group_size(tmp_path: Path) -> None:
    """Small batches are buffered: row groups of exactly row_group_rows, the rest in one last group."""
    with ParquetSink(tmp_path, SCHEMA, row_group_rows=10) as sink:
        for start in range(0, 47, 3):
            sink.write(batch(start, 3, [2]))
    [path] = sink.paths
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [10, 10, 10, 10, 8]
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(path).column("start_ns").to_pylist() == list(range(48))


def test_the_buffer_cap_writes_the_largest_partition_early(tmp_path: Path) -> None:
    """Past max_buffered_bytes the largest buffer goes out as a smaller row group, so memory stays bounded."""
    one = batch(0, 100, [0])
    with ParquetSink(tmp_path, SCHEMA, row_group_rows=1_000, max_buffered_bytes=one.nbytes * 2) as sink:
        for start in range(0, 500, 100):
            sink.write(batch(start, 100, [0]))
    meta = pq.ParquetFile(sink.paths[0]).metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(groups) == 500
    assert len(groups) > 1
    assert all(g < 1_000 for g in groups)


@given(
    sizes=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 300)), min_size=1, max_size=25),
    limit_batches=st.integers(1, 4),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_sinks_sharing_a_budget_buffer_no_more_than_it_together(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[tuple[int, int]], limit_batches: int
) -> None:
    """Three tables' sinks under one budget (an export process's Parquet outputs): after every write
    their buffers together fit it, the largest going out early, and every row comes back."""
    root = tmp_path_factory.mktemp("budget")
    budget = BufferBudget(batch(0, 100, [0, 1]).nbytes * limit_batches)
    sinks = [ParquetSink(root / f"t{i}", SCHEMA, row_group_rows=10_000, budget=budget) for i in range(3)]
    written: list[list[pa.RecordBatch]] = [[], [], []]
    start = 0
    for which, rows in sizes:
        data = batch(start, rows, [0, 1])
        start += rows
        sinks[which].write(data)
        written[which].append(data)
        assert budget.buffered <= budget.limit
    for sink, batches in zip(sinks, written, strict=True):
        sink.close()
        if batches:
            back = read_dataset(sink.directory, SCHEMA).to_table()
            assert (
                sorted_table(back).cast(SCHEMA).to_pylist()
                == sorted_table(pa.Table.from_batches(batches)).to_pylist()
            )


def test_a_table_without_the_partition_column_is_one_file(tmp_path: Path) -> None:
    """Host tables (no device_id) go to one file at the dataset root."""
    schema = pa.schema([("thread_id", pa.int64()), ("start_ns", pa.int64())])
    data = pa.record_batch([pa.array([1, 2]), pa.array([10, 20])], schema=schema)
    with ParquetSink(tmp_path / "api", schema) as sink:
        sink.write(data)
    assert sink.paths == [tmp_path / "api" / "part-0.parquet"]
    assert read_dataset(tmp_path / "api", schema).to_table().to_pylist() == data.to_pylist()


def test_abort_leaves_no_parquet_file(tmp_path: Path) -> None:
    """Files being written are hidden (dataset readers skip them) and removed by abort."""
    sink = ParquetSink(tmp_path, SCHEMA, row_group_rows=5)
    sink.write(batch(0, 20, [0, 1]))
    hidden = list(tmp_path.rglob("*.part"))
    assert len(hidden) == 2
    assert all(p.name.startswith(".") for p in hidden)
    assert read_dataset(tmp_path, SCHEMA).to_table().num_rows == 0
    sink.abort()
    assert list(tmp_path.rglob("*.part")) == []
    assert list(tmp_path.rglob("*.parquet")) == []


def test_finish_writes_the_held_rows_and_close_renames(tmp_path: Path) -> None:
    written = [batch(s, 7, [0, 1]) for s in range(0, 70, 7)]
    sink = ParquetSink(tmp_path, SCHEMA)
    for b in written:
        sink.write(b)
    sink.finish()
    hidden = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(hidden) == 2 and all(p.name.startswith(".") for p in hidden)
    assert sum(pq.read_metadata(p).num_rows for p in hidden) == 70  # complete files, footer written
    sink.close()
    back = read_dataset(tmp_path, SCHEMA).to_table()
    assert (
        sorted_table(back).cast(SCHEMA).to_pylist()
        == sorted_table(pa.Table.from_batches(written)).to_pylist()
    )


def test_bad_row_group_size_is_refused(tmp_path: Path) -> None:
    """row_group_rows must be positive."""
    with pytest.raises(ValueError, match="row_group_rows"):
        ParquetSink(tmp_path, SCHEMA, row_group_rows=0)
