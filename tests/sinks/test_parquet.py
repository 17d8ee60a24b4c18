"""Parquet datasets: hive partitions by device, coalesced row groups, round trip through pyarrow.dataset."""

from __future__ import annotations

import subprocess
import sys
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
from profstream.sinks import _parquet_footer as parquet_footer

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


def test_past_the_buffer_cap_rows_wait_on_disk_and_row_groups_stay_full(tmp_path: Path) -> None:
    """Past max_buffered_bytes the largest buffer is spilled to a hidden file, so memory stays
    bounded while every row group but the last still has row_group_rows rows."""
    one = batch(0, 100, [0])
    sink = ParquetSink(tmp_path, SCHEMA, row_group_rows=1_000, max_buffered_bytes=one.nbytes * 2)
    written = []
    for start in range(0, 2_500, 100):
        written.append(batch(start, 100, [0]))
        sink.write(written[-1])
        assert sink.budget.buffered <= one.nbytes * 2
        if start == 400:
            [spilled] = (tmp_path / "device_id=0").glob(".part-0.parquet.rows.*.part")
    assert not spilled.exists()  # read into the first row group and removed
    sink.close()
    meta = pq.ParquetFile(sink.paths[0]).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1_000, 1_000, 500]
    back = pq.read_table(sink.paths[0])
    assert back.to_pylist() == pa.Table.from_batches(written).drop_columns(["device_id"]).to_pylist()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["part-0.parquet"]


WIDE = pa.schema(
    [
        ("name", pa.dictionary(pa.int32(), pa.string())),
        ("label", pa.string()),
        ("start_ns", pa.int64()),
        ("size", pa.int32()),
        ("ratio", pa.float64()),
        ("flag", pa.bool_()),
        ("shape", pa.list_(pa.int64())),
        ("missing", pa.int64()),
    ]
)


def wide_batch(start: int, rows: int) -> pa.RecordBatch:
    index = np.arange(start, start + rows)
    return pa.record_batch(
        [
            pa.array([f"op{i % 7}" for i in index.tolist()]).dictionary_encode(),
            pa.array([None if i % 11 == 0 else f"label {i % 13}" for i in index.tolist()]),
            pa.array(index * 1_000 + 17),
            pa.array(index % 300, pa.int32()),
            pa.array(index / 3.0),
            pa.array(index % 3 == 0),
            pa.array([list(range(i % 4)) for i in index.tolist()], pa.list_(pa.int64())),
            pa.nulls(rows, pa.int64()),
        ],
        schema=WIDE,
    )


def test_row_groups_assembled_by_column_are_what_pyarrow_writes_whole(tmp_path: Path) -> None:
    """The sink writes a row group column by column (spilled rows read back from disk) and the
    footer itself; its file must hold what pyarrow writes for the whole table in one call: the same
    rows and schema, and per column chunk the same statistics, encodings and sizes."""
    written = [wide_batch(start, 250) for start in range(0, 2_750, 250)]
    with ParquetSink(tmp_path, WIDE, partition_by=None, row_group_rows=1_000, max_buffered_bytes=0) as sink:
        for data in written:
            sink.write(data)
    table = pa.Table.from_batches(written)
    pq.write_table(
        table,
        tmp_path / "whole.parquet",
        row_group_size=1_000,
        compression="zstd",
        use_dictionary=["name", "label"],
    )
    ours, whole = pq.ParquetFile(sink.paths[0]), pq.ParquetFile(tmp_path / "whole.parquet")
    assert ours.read().equals(whole.read())
    assert ours.schema_arrow == whole.schema_arrow == WIDE

    def described(path: Path) -> parquet_footer.Struct:
        """The file's footer, every offset into the file zeroed."""
        metadata = parquet_footer.split_file(path.read_bytes())[1]
        groups = []
        for group in parquet_footer.field(metadata, parquet_footer.FILE_ROW_GROUPS)[1]:
            chunks = [
                parquet_footer.moved_chunk(chunk, -parquet_footer.chunk_start(chunk))
                for chunk in parquet_footer.field(group, parquet_footer.GROUP_COLUMNS)[1]
            ]
            changes = {
                parquet_footer.GROUP_COLUMNS: (parquet_footer.LIST, (parquet_footer.STRUCT, chunks)),
                parquet_footer.GROUP_FILE_OFFSET: (parquet_footer.I64, 0),
            }
            groups.append(parquet_footer.with_fields(group, changes))
        return parquet_footer.with_fields(
            metadata, {parquet_footer.FILE_ROW_GROUPS: (parquet_footer.LIST, (parquet_footer.STRUCT, groups))}
        )

    assert described(sink.paths[0]) == described(tmp_path / "whole.parquet")
    assert [ours.metadata.row_group(i).num_rows for i in range(3)] == [1_000, 1_000, 750]
    first = ours.metadata.row_group(1).column(0)
    assert first.dictionary_page_offset is not None and first.data_page_offset > first.dictionary_page_offset


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
    sink = ParquetSink(tmp_path, SCHEMA, row_group_rows=5, max_buffered_bytes=0)
    sink.write(batch(0, 24, [0, 1]))
    hidden = list(tmp_path.rglob("*.part"))
    assert len(hidden) == 4  # each device's file and its spilled rows (the 2 past its 10)
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


def test_only_the_parquet_layout_loads_pyarrow_parquet() -> None:
    """The export's modules leave ``pyarrow.parquet`` (about 6 MB of RSS) to the first Parquet output."""
    probe = (
        "import sys\n"
        "from profstream import cli, export, workers\n"
        "from profstream.engine import layouts\n"
        "assert 'pyarrow.parquet' not in sys.modules, 'imported with the export'\n"
        "from profstream.sinks import ParquetSink\n"
        "assert 'pyarrow.parquet' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
