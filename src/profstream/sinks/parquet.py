"""One Parquet dataset per canonical table, partitioned by device, for DuckDB, Polars and pandas.

Layout: ``{directory}/device_id=0/part-0.parquet`` (hive style; the partition column lives in the
directory name, not in the files, as ``pyarrow.dataset.write_dataset`` does); a table without the
partition column is one file ``{directory}/part-0.parquet``; rows whose device is null go to
``device_id=__HIVE_DEFAULT_PARTITION__``, which pyarrow reads back as null. Read it back with
:func:`read_dataset` (or ``duckdb.read_parquet('dir/**/*.parquet', hive_partitioning=true)``).

Row groups: small streaming batches make small row groups, which are both slower and about 40%
larger (peers.md §5.5), so each partition's rows are written ``row_group_rows`` (1,000,000) at a
time, zstd-compressed, text columns dictionary-encoded and the others plain; the rest goes out at
close. A million rows of a wide table (the tasks table: about 330 bytes a row) would hold more
memory than a whole export may use, so the rows wait on disk, not in memory: when the buffers pass
their :class:`BufferBudget` (``max_buffered_bytes`` of the sink's own, or one shared by several
sinks) the largest is spilled to a hidden Arrow IPC file, and a full row group is written one
column at a time from that file, memory-mapped (:mod:`profstream.sinks._parquet_footer` says how).

Each file is written under a hidden temporary name (which ``pyarrow.dataset`` and DuckDB globs
skip) and renamed into place at close, replacing a file of the same name.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from profstream import events as log_events
from profstream.sinks import _parquet_footer as pf
from profstream.sinks._base import StagedFile, TableSink, sink_error

if TYPE_CHECKING:
    import pyarrow.dataset as ds

#: rows per row group (peers.md §5.5: >= about 1 M rows)
ROW_GROUP_ROWS = 1_000_000
#: the directory name of rows whose partition value is null (Hive's, understood by pyarrow)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class BufferBudget:
    """The bytes the :class:`ParquetSink` objects sharing it may buffer together in memory; past
    it, the largest partition of any of them is spilled to disk until its row group is full."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            msg = f"a buffer budget needs a byte count >= 0, got {limit}"
            raise ValueError(msg)
        self.limit = limit
        self._sinks: list[ParquetSink] = []

    def join(self, sink: ParquetSink) -> None:
        self._sinks.append(sink)

    @property
    def buffered(self) -> int:
        """The bytes buffered in memory by every sink sharing the budget."""
        return sum(part.nbytes for sink in self._sinks for part in sink._partitions.values())

    def enforce(self) -> None:
        """Spill the largest buffers until the rest fits the budget."""
        while self.buffered > self.limit:
            sink, part = max(
                ((sink, part) for sink in self._sinks for part in sink._partitions.values()),
                key=lambda pair: pair[1].nbytes,
            )
            sink._spill(part)


class _Spill:
    """Rows of one partition waiting on disk for their row group: an Arrow IPC stream (a stream,
    not a file, since each batch may bring its own dictionaries), read back memory-mapped."""

    def __init__(self, directory: Path, stem: str, schema: pa.Schema) -> None:
        self.staged = StagedFile(directory, stem)
        self.staged.finish()  # pyarrow writes the path itself
        self.rows = 0
        self._writer = pa.ipc.new_stream(str(self.staged.temp), schema)

    def append(self, batches: list[pa.RecordBatch]) -> None:
        try:
            for batch in batches:
                self._writer.write_batch(batch)
        except OSError as err:
            raise sink_error(self.staged.temp, err, "write") from err
        self.rows += sum(batch.num_rows for batch in batches)

    def columns(self) -> Iterator[list[pa.Array]]:
        """Each column of the spilled batches in turn (the writer is closed first). The arrays map
        the file; the pages one column reads are let go of before the next column is yielded, so the
        process holds about one column's pages, not the row group's."""
        try:
            self._writer.close()
            with self.staged.temp.open("rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as err:
            raise sink_error(self.staged.temp, err, "read back") from err
        reader = pa.ipc.open_stream(pa.py_buffer(mapped))  # unmapped when its last array goes
        batches = list(reader)
        for index in range(len(reader.schema)):
            yield [batch.column(index) for batch in batches]
            mapped.madvise(mmap.MADV_DONTNEED)  # shared file pages: they stay in the page cache

    def discard(self) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):  # the rows are thrown away
            self._writer.close()
        self.staged.discard()


class _ParquetFile:
    """A Parquet file assembled one column chunk at a time: pyarrow writes each column of a row
    group as a one-column file, whose body is copied here; the footer, written at close, is the
    ``FileMetaData`` pyarrow writes for the whole schema with these row groups in it."""

    def __init__(self, directory: Path, name: str, schema: pa.Schema, compression: str) -> None:
        self.schema = schema
        self.compression = compression
        self.text_columns = set(_dictionary_columns(schema))
        empty = self._file_bytes(schema.empty_table())
        self.metadata = pf.split_file(empty)[1]
        self.row_groups: list[pf.Struct] = []
        self.rows = 0
        self.staged = StagedFile(directory, name)
        self.staged.write(pf.MAGIC)

    def _file_bytes(self, table: pa.Table) -> pa.Buffer:
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            row_group_size=max(table.num_rows, 1),
            compression=self.compression,
            use_dictionary=[name for name in table.column_names if name in self.text_columns],
        )
        return sink.getvalue()

    def write_row_group(self, columns: Iterator[pa.ChunkedArray], rows: int) -> None:
        """Write one row group of ``rows`` rows, given its columns in schema order."""
        chunks: list[pf.Struct] = []
        groups: list[pf.Struct] = []
        for schema_field, column in zip(self.schema, columns, strict=True):
            table = pa.Table.from_arrays([column], schema=pa.schema([schema_field]))
            body, metadata = pf.split_file(self._file_bytes(table))
            [group] = pf.field(metadata, pf.FILE_ROW_GROUPS)[1]
            shift = self.staged.bytes_written - len(pf.MAGIC)
            self.staged.write(body)
            chunks += [pf.moved_chunk(chunk, shift) for chunk in pf.field(group, pf.GROUP_COLUMNS)[1]]
            groups.append(group)
        changes = {
            pf.GROUP_COLUMNS: (pf.LIST, (pf.STRUCT, chunks)),
            pf.GROUP_NUM_ROWS: (pf.I64, rows),
            pf.GROUP_FILE_OFFSET: (pf.I64, pf.chunk_start(chunks[0])),
        }
        for summed in (pf.GROUP_TOTAL_BYTE_SIZE, pf.GROUP_TOTAL_COMPRESSED_SIZE):
            if pf.field(groups[0], summed) is not None:
                changes[summed] = (pf.I64, sum(pf.field(group, summed) for group in groups))
        if pf.field(groups[0], pf.GROUP_ORDINAL) is not None:
            changes[pf.GROUP_ORDINAL] = (pf.I16, len(self.row_groups))
        self.row_groups.append(pf.with_fields(groups[0], changes))
        self.rows += rows

    def close(self) -> None:
        """Write the footer and close the file (still under its temporary name)."""
        changes = {
            pf.FILE_NUM_ROWS: (pf.I64, self.rows),
            pf.FILE_ROW_GROUPS: (pf.LIST, (pf.STRUCT, self.row_groups)),
        }
        metadata = pf.with_fields(self.metadata, changes)
        self.staged.write(pf.footer(metadata))
        self.staged.finish()


@dataclass
class _Partition:
    """The rows of one partition waiting for their row group (in memory, then spilled) and its file."""

    directory: Path
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0  # in memory and spilled
    nbytes: int = 0  # in memory
    spill: _Spill | None = None
    file: _ParquetFile | None = None


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns Parquet should dictionary-encode: the text ones. Dictionary-encoding the int64
    times and ids too, nearly all distinct, had taken a quarter of the tasks table's write time and
    two thirds of the api table's, for larger files than plain encoding gives under zstd."""
    text = (pa.types.is_dictionary, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary)
    return [f.name for f in schema if any(is_text(f.type) for is_text in text)]


class ParquetSink(TableSink):
    """A table as a Parquet dataset under ``directory``, one file per partition value."""

    def __init__(
        self,
        directory: str | Path,
        schema: pa.Schema,
        *,
        partition_by: str | None = "device_id",
        row_group_rows: int = ROW_GROUP_ROWS,
        max_buffered_bytes: int = 256 << 20,
        budget: BufferBudget | None = None,
        compression: str = "zstd",
        file_name: str = "part-0.parquet",
    ) -> None:
        """``budget``, when given, is shared with other sinks and replaces ``max_buffered_bytes``."""
        super().__init__(schema)
        if row_group_rows < 1:
            msg = f"row_group_rows must be at least 1, got {row_group_rows}"
            raise ValueError(msg)
        self.directory = Path(directory)
        self.partition_by = partition_by if partition_by in schema.names else None
        self.row_group_rows = row_group_rows
        self.budget = budget if budget is not None else BufferBudget(max_buffered_bytes)
        self.budget.join(self)
        self.compression = compression
        self.file_name = file_name
        self.file_schema = schema
        if self.partition_by is not None:
            self.file_schema = schema.remove(schema.get_field_index(self.partition_by))
        self._partitions: dict[str, _Partition] = {}
        self._log = log_events.get_logger(component="sink.parquet", directory=str(self.directory))

    @property
    def waiting_rows(self) -> int:
        """Rows not yet in a row group (held or spilled), which :meth:`finish` writes."""
        return self._held_rows + sum(part.rows for part in self._partitions.values())

    def _write(self, batch: pa.RecordBatch) -> None:
        if self.partition_by is None:
            self._buffer("", batch)
        else:
            key = batch.column(self.partition_by)
            rest = batch.drop_columns([self.partition_by])
            for value in pc.unique(key).to_pylist():
                mask = pc.is_null(key) if value is None else pc.equal(key, value)
                name = f"{self.partition_by}={NULL_PARTITION if value is None else value}"
                self._buffer(name, rest.filter(mask))
        self.budget.enforce()

    def _buffer(self, name: str, batch: pa.RecordBatch) -> None:
        part = self._partitions.get(name)
        if part is None:
            part = self._partitions[name] = _Partition(self.directory / name if name else self.directory)
        part.batches.append(batch)
        part.rows += batch.num_rows
        part.nbytes += batch.nbytes
        while part.rows >= self.row_group_rows:
            self._flush(part, self.row_group_rows)

    def _spill(self, part: _Partition) -> None:
        """Move the partition's rows held in memory to its spill file."""
        if part.spill is None:
            part.spill = _Spill(part.directory, f"{self.file_name}.rows", self.file_schema)
        part.spill.append(part.batches)
        part.batches = []
        part.nbytes = 0

    def _flush(self, part: _Partition, rows: int) -> None:
        """Write the first ``rows`` waiting rows of ``part`` (the spilled ones first) as one row group."""
        spill, spilled = part.spill, part.spill.rows if part.spill else 0
        held = pa.Table.from_batches(part.batches, self.file_schema)
        group, rest = held.slice(0, rows - spilled), held.slice(rows - spilled)
        if part.file is None:
            part.file = _ParquetFile(part.directory, self.file_name, self.file_schema, self.compression)

        def columns() -> Iterator[pa.ChunkedArray]:
            on_disk = spill.columns() if spill is not None else itertools.repeat([], len(self.file_schema))
            for index, (schema_field, from_disk) in enumerate(zip(self.file_schema, on_disk, strict=True)):
                yield pa.chunked_array(from_disk + group.column(index).chunks, schema_field.type)

        try:
            part.file.write_row_group(columns(), rows)
        except OSError as err:
            raise sink_error(part.file.staged.temp, err, "write") from err
        if spill is not None:
            spill.discard()
            part.spill = None
        part.batches = rest.combine_chunks().to_batches() if rest.num_rows else []
        part.rows = rest.num_rows
        part.nbytes = sum(b.nbytes for b in part.batches)

    def _finish(self) -> None:
        for part in self._partitions.values():
            if part.rows:
                self._flush(part, part.rows)
            if part.file is not None:
                part.file.close()

    def _commit(self) -> list[Path]:
        paths = []
        for part in self._partitions.values():
            if part.file is None:
                continue
            paths.append(part.file.staged.commit(self.file_name))
            self._log.info(log_events.FILE_WRITTEN, file=str(paths[-1]))
        return paths

    def _discard(self) -> None:
        for part in self._partitions.values():
            if part.spill is not None:
                part.spill.discard()
            if part.file is not None:
                part.file.staged.discard()
        self._partitions.clear()  # nothing left for a shared budget to write


def read_dataset(
    directory: str | Path, schema: pa.Schema, partition_by: str | None = "device_id"
) -> ds.Dataset:
    """The dataset a :class:`ParquetSink` wrote, with the partition column typed as in ``schema``."""
    import pyarrow.dataset as ds  # here: about 30 ms of start-up that exports never need

    partitioning = None
    if partition_by is not None and partition_by in schema.names:
        field_ = schema.field(partition_by)
        partitioning = ds.partitioning(pa.schema([field_]), flavor="hive")
    return ds.dataset(directory, schema=schema, format="parquet", partitioning=partitioning)
