"""One Parquet dataset per canonical table, partitioned by device, for DuckDB, Polars and pandas.

Layout: ``{directory}/device_id=0/part-0.parquet`` (hive style; the partition column lives in the
directory name, not in the files, as ``pyarrow.dataset.write_dataset`` does); a table without the
partition column is one file ``{directory}/part-0.parquet``; rows whose device is null go to
``device_id=__HIVE_DEFAULT_PARTITION__``, which pyarrow reads back as null. Read it back with
:func:`read_dataset` (or ``duckdb.read_parquet('dir/**/*.parquet', hive_partitioning=true)``).

Row groups: small streaming batches make small row groups, which are both slower and about 40%
larger (peers.md §5.5), so batches are buffered per partition and written ``row_group_rows``
(1,000,000) rows at a time, zstd-compressed, text columns dictionary-encoded and the others plain;
the rest goes out at close. To keep memory bounded, when the buffers pass their
:class:`BufferBudget` (``max_buffered_bytes`` of the sink's own, or one shared by several sinks)
the largest one is written early as a smaller row group: a million rows of a wide table (the tasks
table: about 330 bytes a row) would hold more memory than a whole export may use.

Each file is written under a hidden temporary name (which ``pyarrow.dataset`` and DuckDB globs
skip) and renamed into place at close, replacing a file of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from profstream import events as log_events
from profstream.sinks._base import StagedFile, TableSink, sink_error

if TYPE_CHECKING:
    import pyarrow.dataset as ds

#: rows per row group (peers.md §5.5: >= about 1 M rows)
ROW_GROUP_ROWS = 1_000_000
#: the directory name of rows whose partition value is null (Hive's, understood by pyarrow)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class BufferBudget:
    """The bytes the :class:`ParquetSink` objects sharing it may buffer together; past it, the
    largest partition of any of them is written early, as a smaller row group."""

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
        """The bytes buffered by every sink sharing the budget."""
        return sum(part.nbytes for sink in self._sinks for part in sink._partitions.values())

    def enforce(self) -> None:
        """Write the largest buffers early until the rest fits the budget."""
        while self.buffered > self.limit:
            sink, part = max(
                ((sink, part) for sink in self._sinks for part in sink._partitions.values()),
                key=lambda pair: pair[1].nbytes,
            )
            sink._flush(part, part.rows)


@dataclass
class _Partition:
    """The buffered rows and the open file of one partition."""

    directory: Path
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    staged: StagedFile | None = None
    writer: pq.ParquetWriter | None = None


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

    def _flush(self, part: _Partition, rows: int) -> None:
        """Write the first ``rows`` buffered rows of ``part`` as one row group."""
        table = pa.Table.from_batches(part.batches, self.file_schema)
        group, rest = table.slice(0, rows), table.slice(rows)
        if part.writer is None:
            part.staged = StagedFile(part.directory, self.file_name)
            part.staged.finish()  # pyarrow writes the path itself
            part.writer = pq.ParquetWriter(
                part.staged.temp,
                self.file_schema,
                compression=self.compression,
                use_dictionary=_dictionary_columns(self.file_schema),
            )
        try:
            part.writer.write_table(group, row_group_size=max(rows, 1))
        except OSError as err:
            raise sink_error(part.staged.temp if part.staged else part.directory, err, "write") from err
        part.batches = rest.combine_chunks().to_batches() if rest.num_rows else []
        part.rows = rest.num_rows
        part.nbytes = sum(b.nbytes for b in part.batches)

    def _finish(self) -> None:
        for part in self._partitions.values():
            if part.rows:
                self._flush(part, part.rows)
            if part.writer is not None:
                part.writer.close()

    def _commit(self) -> list[Path]:
        paths = []
        for part in self._partitions.values():
            if part.writer is None or part.staged is None:
                continue
            paths.append(part.staged.commit(self.file_name))
            self._log.info(log_events.FILE_WRITTEN, file=str(paths[-1]))
        return paths

    def _discard(self) -> None:
        for part in self._partitions.values():
            if part.writer is not None:
                part.writer.close()
            if part.staged is not None:
                part.staged.discard()
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
