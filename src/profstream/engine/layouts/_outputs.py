"""The outputs a layout is made of: each takes batches of canonical tables and owns its sinks.

Three kinds cover every file of the msprof and torch_npu layouts:

* :class:`SummaryOutput`: one summary table (CSV or ``--format json``) from one canonical table.
  Its cells are :class:`Cell` s: a header, where the value comes from, and its unit. msprof orders
  its merged summaries by device dir name (``device_0``, ``device_1``, ``device_10``, ``device_2`` ...;
  msprof_outputs.md §1.4) and in time within a device; the pipeline delivers devices interleaved,
  so with more than one device each device's rows are spooled to an Arrow IPC stream on disk
  (:class:`Spool`) and replayed in device order at close. Memory stays one batch; the spool is
  deleted after use.
* :class:`TimelineOutput`: one chrome-trace file set, events built per batch by the layout's
  :class:`EventBuilder` s, metadata (process/thread names) emitted the first time a process or
  thread appears.
* :class:`ParquetOutput`: a canonical table as a Parquet dataset.

Outputs open their sinks lazily: a table without rows writes no file, as msprof's exporters write
nothing without data.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.sinks import (
    ChromeTraceWriter,
    Column,
    CsvSink,
    DropReport,
    MetadataEvents,
    SliceNaming,
    SummaryJsonSink,
    TableSink,
    Unit,
)
from profstream.sinks.chrome_trace import Events
from profstream.sinks.csv import CSV_LIMIT, MINIMAL_QUOTING, UNSLICED

if TYPE_CHECKING:
    from profstream.sinks.parquet import BufferBudget, ParquetSink


@dataclass(frozen=True)
class Context:
    """What every output needs to know about the collection being exported."""

    out_dir: Path  #: where the layout's files go
    timestamp: str  #: msprof's ``%Y%m%d%H%M%S`` of this export (one per run, as its C++ path)
    wall_offset_ns: int  #: local wall clock minus host monotonic (start_info; msprof_outputs.md §3.5)
    devices: tuple[int, ...]
    metric_columns: Sequence[str]  #: PMU columns of ``tasks`` (the collection's aic_metrics group)
    stars: bool  #: STARS chips (Context ID, Mix Block Num exist; msprof_outputs.md §2.1)
    process_id: int  #: info.json ``pid``: the high bits of msprof's timeline pids
    window: tuple[int, int] | None = None  #: ``--model-id/--iteration-id`` time window (host ns)
    csv_slice_rows: int = CSV_LIMIT  #: data rows per file of a sliced (msprof-named) summary CSV
    #: per device, its start_info ``clockMonotonicRaw`` (host ns): msprof leaves out what ran before it
    collection_start_ns: Mapping[int, int] = field(default_factory=dict)
    l2_cache: bool = False  #: some device recorded L2 cache counters (``l2_cache.data``)
    #: the host recorded memcpy_info: every MEMCPY_ASYNC task of the timeline prints its copy args
    memcpy_info: bool = False
    #: physical stream id -> GE logic stream id (host ``logic_stream_info``; empty without it)
    logic_streams: Mapping[int, int] = field(default_factory=dict)
    #: per device, its info.json ``hwts_frequency`` (MHz, exact): msprof's Python prints step-trace
    #: durations from syscnt ticks at this rate (:func:`~profstream.engine.layouts.timeline.syscnt_us`)
    hwts_mhz: Mapping[int, Fraction] = field(default_factory=dict)


Source = str | Callable[[pa.RecordBatch], pa.Array]


@dataclass(frozen=True)
class Cell:
    """One summary column: its header, its value (a column name or a function of the batch), its unit."""

    header: str
    source: Source
    unit: Unit = "raw"
    null: str | None = "N/A"  #: None: an absent value's cell is left out (trailing cells only)
    wall: bool = False  #: a host-monotonic time printed on the local wall clock (msprof_outputs.md §3.5)

    def values(self, batch: pa.RecordBatch, wall_offset_ns: int) -> pa.Array:
        """The column's values, times moved to the local wall clock where ``wall``."""
        values = batch.column(self.source) if isinstance(self.source, str) else self.source(batch)
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if self.wall:
            values = pc.add(values, wall_offset_ns)
        return values


def stamp(header: str, source: Source, null: str | None = "N/A") -> Cell:
    """A timestamp cell: local wall-clock µs, three decimals and msprof's trailing TAB."""
    return Cell(header, source, "timestamp_us", null, wall=True)


Format = Literal["csv", "json"]
#: the device column msprof's merged summaries begin with (not in its ``--format json`` files)
DEVICE_ID = "Device_id"


def after_collection_start(
    batch: pa.RecordBatch,
    starts: Mapping[int, int],
    start: str = "start_ns",
    end: str | None = "end_ns",
    *,
    at_start: bool = False,
    as_text: bool = False,
) -> npt.NDArray[np.bool_]:
    """The rows msprof keeps after their device's collection start S (msprof_outputs.md §3.5, item 3).

    A row is kept when it starts after S or spans it (start < S < end), as
    ``Utils.filter_data_by_start_time_condition`` keeps summary rows; ``at_start`` also keeps rows
    starting at S, as the timeline does (``MsprofTimeline.is_in_iteration``). ``as_text`` applies the
    rule as msprof's Python summaries run it, on texts (op_summary's ``get_op_summary_data``,
    task_time's ``TaskOpViewer.get_task_op_summary``): S is start_info's integer µs text, the start
    a TAB-terminated 3-decimal cell and the end the 3-decimal sum of start and duration
    (``float_calculate``), so ``"S.000\t" > "S"`` and ``"S" < "S.000"`` keep a row that starts at S
    and one that ends at it. Without ``end`` (counters) only the start counts. Devices without a
    known S keep everything.
    """
    devices = batch.column("device_id").to_numpy(zero_copy_only=False)
    bound = np.full(len(devices), np.iinfo(np.int64).min, np.int64)
    for device, s in starts.items():
        bound[devices == device] = s
    first = np.asarray(batch.column(start).fill_null(np.iinfo(np.int64).max).to_numpy(), np.int64)
    kept: npt.NDArray[np.bool_] = (first >= bound) if at_start or as_text else (first > bound)
    if end is not None:
        last = np.asarray(batch.column(end).fill_null(np.iinfo(np.int64).min).to_numpy(), np.int64)
        kept |= (first < bound) & ((last >= bound) if as_text else (last > bound))
    return kept


def split_by(batch: pa.RecordBatch, keys: pa.Array) -> Iterator[tuple[Any, pa.RecordBatch]]:
    """The rows of each key value in ``batch`` (usually a batch holds one, returned as is); dictionary
    keys split by their codes."""
    if pa.types.is_dictionary(keys.type):
        for code, rows in split_by(batch, keys.indices):
            yield keys.dictionary[code].as_py(), rows
        return
    low, high = pc.min_max(keys).values()
    if low.as_py() == high.as_py():
        yield low.as_py(), batch
        return
    for key in pc.unique(keys).to_pylist():
        yield key, batch.filter(pc.equal(keys, key))


class Output(ABC):
    """One output of a layout: the canonical tables it reads, and the files it writes."""

    tables: tuple[str, ...]
    #: whether an iteration selection's time window (``--model-id/--iteration-id``) limits its rows
    windowed: bool = True

    @abstractmethod
    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Take one batch of one of :attr:`tables`."""

    @property
    def renders_at_finish(self) -> bool:
        """Whether most of the output's work waits for :meth:`finish` (rows spooled until then): an
        export shares such outputs out between its processes (export.py ``_Part.shared``)."""
        return False

    def finish(self) -> None:  # noqa: B027 (a hook: most outputs write as they go)
        """Render everything the output still holds (spooled rows) into temporary files, so that
        :meth:`close` only renames; an export's worker does this before it is told to commit."""

    @property
    def finish_rows(self) -> int:
        """Rows :meth:`finish` still encodes outside the GIL (a Parquet dataset's last row groups;
        0 for an output whose finish is Python's work): an export finishes the largest such output in
        a thread of its own while the others finish (export.py ``_Part.finish``)."""
        return 0

    @abstractmethod
    def close(self) -> list[Path]:
        """Finish every file; the paths written."""

    @abstractmethod
    def abort(self) -> None:
        """Remove every temporary file."""


#: a spool key: a device id, or a device id and a part, ``"<device>/<part>"``
SpoolKey = int | str


def key_order(keys: Iterable[SpoolKey]) -> list[SpoolKey]:
    """Spool keys (device ids) in the order msprof merges its device dirs: by name, so ``device_10``
    comes before ``device_2`` (msprof_outputs.md §1.4)."""
    return sorted(keys, key=str)


class Spool:
    """Batches kept on disk per key (a device), replayed in :func:`key_order` (Arrow IPC streams).

    ``name`` keeps the files of several spools in one directory apart.
    """

    def __init__(self, directory: Path, name: str = "rows") -> None:
        self.directory = directory
        self.name = name
        self._writers: dict[SpoolKey, pa.ipc.RecordBatchStreamWriter] = {}
        self._paths: dict[SpoolKey, Path] = {}

    def write(self, key: SpoolKey, batch: pa.RecordBatch) -> None:
        writer = self._writers.get(key)
        if writer is None:
            path = self.directory / f"{self.name}-{len(self._paths)}.arrows"
            self._paths[key] = path
            writer = self._writers[key] = pa.ipc.new_stream(str(path), batch.schema)
        writer.write_batch(batch)

    def pending(self) -> list[SpoolKey]:
        """The keys with rows not yet read back, in order."""
        return key_order(self._paths)

    def read(self, key: SpoolKey) -> Iterator[pa.RecordBatch]:
        """The batches of ``key`` as written; its file is deleted once they are all read."""
        path = self._paths.pop(key)
        self._writers.pop(key).close()
        # read, not mapped: mapped pages of a large spool would all count as resident memory
        with pa.OSFile(str(path)) as source:
            yield from pa.ipc.open_stream(source)
        path.unlink()

    def replay(self) -> Iterator[pa.RecordBatch]:
        """Every key's batches, key by key."""
        for key in self.pending():
            yield from self.read(key)


class SortedSpool:
    """A :class:`Spool` whose keys replay sorted by the int64 column ``order``, for rows that arrive
    nearly in that order.

    A row below the largest value already spooled for its key goes to a side spool ("late"); at
    replay a key's late rows are sorted in memory (operator_memory's are allocations that closed
    late, a few hundred per GB) and merged into the in-order rows as those are read back. Rows
    without a value come last.
    """

    _LOWEST, _HIGHEST = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)

    def __init__(self, directory: Path, order: str) -> None:
        self.order = order
        self.in_order = Spool(directory)
        self.late = Spool(directory, "late")
        self._highest: dict[SpoolKey, int] = {}  # per key, the largest value spooled in order

    def write(self, key: SpoolKey, batch: pa.RecordBatch) -> None:
        rows = batch.sort_by(self.order)
        late = pc.less(rows.column(self.order), self._highest.get(key, self._LOWEST)).fill_null(True)
        if pc.any(late).as_py():
            self.late.write(key, rows.filter(late))
            rows = rows.filter(pc.invert(late))
        if rows.num_rows:
            self._highest[key] = pc.max(rows.column(self.order)).as_py()
            self.in_order.write(key, rows)

    def replay(self) -> Iterator[pa.RecordBatch]:
        """Every key's rows sorted by ``order``, key by key."""
        late_keys = set(self.late.pending())
        for key in key_order(set(self.in_order.pending()) | late_keys):
            if key not in late_keys:
                yield from self.in_order.read(key)
                continue
            late = pa.Table.from_batches(list(self.late.read(key))).sort_by(self.order)
            due = late.column(self.order).fill_null(self._HIGHEST).to_numpy()
            taken = 0
            for batch in self.in_order.read(key) if key in self.in_order.pending() else ():
                upto = int(np.searchsorted(due, pc.max(batch.column(self.order)).as_py(), "right"))
                merged = pa.concat_tables([pa.table(batch), late.slice(taken, upto - taken)])
                taken = upto
                yield from merged.sort_by(self.order).combine_chunks().to_batches()
            yield from late.slice(taken).to_batches()


def spool_directory(context: Context) -> Path:
    """A new hidden directory for spools in the output directory (``export --clear`` removes one a
    killed run left behind)."""
    context.out_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".spool-", dir=context.out_dir))


Rows = Callable[[pa.RecordBatch], pa.RecordBatch]


def _one_name(name: str) -> SliceNaming:
    """The naming of an output that is one file."""
    return lambda _index, _count: name


class SummaryOutput(Output):
    """One summary table, in msprof's row order (device, then time), as CSV or JSON.

    ``rows`` selects and prepares rows (filters, sort within a batch) and ``frame`` may add columns
    that need state across rows in output order (op_summary's wait time); both see canonical batches.
    ``spool`` keeps every row until close even for one device, for a ``frame`` that needs another
    table's rows first (kernel_details' Step Id needs the step ranges); ``key`` orders the spooled
    rows (ascending; default the device id). ``order`` (an int64 column, with ``key``) sorts each
    key's rows by it (a :class:`SortedSpool`).
    """

    def __init__(
        self,
        context: Context,
        table: str,
        name: str | SliceNaming,
        cells: Sequence[Cell],
        *,
        fmt: Format = "csv",
        rows: Rows | None = None,
        frame: Rows | None = None,
        by_device: bool = True,
        spool: bool = False,
        key: Callable[[pa.RecordBatch], pa.Array] | None = None,
        order: str | None = None,
        line_end: str = "\n",
        quote_chars: str | None = MINIMAL_QUOTING,
    ) -> None:
        if order is not None and key is None:
            msg = "order needs a key: rows are sorted within each key's spool"
            raise ValueError(msg)
        self.context = context
        self.tables = (table,)
        self.name = name
        self.cells = list(cells)
        self.fmt = fmt
        self._rows = rows
        self._frame = frame
        self._line_end = line_end
        self._quote_chars = quote_chars
        self._key = key or (lambda b: b.column("device_id"))
        self._sink: TableSink | None = None
        self._spool_dir: Path | None = None
        self._spool: Spool | SortedSpool | None = None
        self._finished = False  # the held rows went to the sink (finish)
        if spool or key is not None or (by_device and len(context.devices) > 1):
            self._spool_dir = spool_directory(context)
            self._spool = Spool(self._spool_dir) if order is None else SortedSpool(self._spool_dir, order)

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if self._rows is not None:
            batch = self._rows(batch)
        if not batch.num_rows:
            return
        if self._spool is None:
            self._emit(batch)
            return
        for key, rows in split_by(batch, self._key(batch)):
            self._spool.write(key, rows)

    def _emit(self, batch: pa.RecordBatch) -> None:
        if self._frame is not None:
            batch = self._frame(batch)
        offset = self.context.wall_offset_ns
        cells = self.written_cells
        frame = pa.RecordBatch.from_arrays(
            [cell.values(batch, offset) for cell in cells],
            names=[f"c{i}" for i in range(len(cells))],
        )
        if self._sink is None:
            self._sink = self._open(frame.schema, cells)
        elif not frame.schema.equals(self._sink.schema):
            frame = frame.cast(self._sink.schema)
        self._sink.write(frame)

    @property
    def written_cells(self) -> list[Cell]:
        """The cells the file holds. A ``--format json`` summary has no ``Device_id``: msprof writes it
        per device dir with the viewer's header and copies that file as it is, where the CSV merge adds
        the column (``MsprofOutputSummary._copy_summary_data``, ``create_json``; msprof_outputs.md §1.6)."""
        if self.fmt == "json":
            return [cell for cell in self.cells if cell.header != DEVICE_ID]
        return self.cells

    def _open(self, schema: pa.Schema, cells: Sequence[Cell]) -> TableSink:
        columns = [
            Column(f"c{i}", cell.header, unit=cell.unit, null=cell.null) for i, cell in enumerate(cells)
        ]
        if self.fmt == "json":
            name = self.name if isinstance(self.name, str) else self.name(0, 1)
            return SummaryJsonSink(self.context.out_dir / name, schema, columns=columns)
        if callable(self.name):  # msprof's names: sliced every csv_slice_rows rows
            naming, slice_rows = self.name, self.context.csv_slice_rows
        else:  # one file, as torch_npu's csv.writer writes every row into it
            naming, slice_rows = _one_name(self.name), UNSLICED
        return CsvSink(
            self.context.out_dir,
            schema,
            naming,
            columns=columns,
            slice_rows=slice_rows,
            quote_chars=self._quote_chars,
            line_end=self._line_end,
        )

    @property
    def renders_at_finish(self) -> bool:
        return self._spool is not None

    def finish(self) -> None:
        if self._finished:
            return
        for batch in self._replay():
            self._emit(batch)
        self._remove_spool()
        self._finished = True
        if self._sink is not None:
            self._sink.finish()

    def close(self) -> list[Path]:
        try:
            self.finish()
            if self._sink is None:
                return []
            self._sink.close()
            return list(self._sink.paths)
        finally:
            self._remove_spool()

    def _replay(self) -> Iterator[pa.RecordBatch]:
        """The spooled rows, key by key (none without a spool)."""
        if self._spool is not None:
            yield from self._spool.replay()

    def abort(self) -> None:
        if self._sink is not None:
            self._sink.abort()
        self._remove_spool()

    def _remove_spool(self) -> None:
        if self._spool_dir is not None:
            shutil.rmtree(self._spool_dir, ignore_errors=True)
            self._spool_dir = self._spool = None


class EventBuilder(ABC):
    """Turns batches of one canonical table into chrome-trace events."""

    table: str

    @abstractmethod
    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        """The events of one batch (metadata included, the first time a process or thread appears)."""

    def visible(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows the layer draws (all; msprof's device layers leave out what ran before the start)."""
        return batch


@dataclass
class Processes:
    """Process and thread metadata, emitted once per process and once per thread."""

    _processes: set[int] = field(default_factory=set)
    _threads: set[tuple[int, int]] = field(default_factory=set)

    def process(self, pid: int, name: str, label: str | None, sort_index: int) -> list[MetadataEvents]:
        """``process_name`` / ``process_labels`` / ``process_sort_index`` of a new process."""
        if pid in self._processes:
            return []
        self._processes.add(pid)
        events = [MetadataEvents("process_name", pid, 0, name)]
        if label is not None:
            events.append(MetadataEvents("process_labels", pid, 0, label))
        events.append(MetadataEvents("process_sort_index", pid, 0, sort_index))
        return events

    def threads(
        self, pid: int, tids: Iterable[int], name: Callable[[int], str], sort_index: Callable[[int], int]
    ) -> list[MetadataEvents]:
        """``thread_name`` / ``thread_sort_index`` of each thread of ``pid`` not seen before."""
        new = [tid for tid in dict.fromkeys(tids) if (pid, tid) not in self._threads]
        if not new:
            return []
        self._threads.update((pid, tid) for tid in new)
        return [
            MetadataEvents("thread_name", pid, pa.array(new, pa.int64()), pa.array([name(t) for t in new])),
            MetadataEvents(
                "thread_sort_index", pid, pa.array(new, pa.int64()), pa.array([sort_index(t) for t in new])
            ),
        ]


@dataclass(frozen=True)
class Limits:
    """Timeline file roll sizes and the total budget (``timeline_limit``); None: no limit."""

    max_file_bytes: int | None = None
    max_file_events: int | None = None
    budget_bytes: int | None = None

    @classmethod
    def in_megabytes(cls, file_mb: int, file_events: int, budget_mb: int) -> Limits:
        """The limits as the settings give them: roll size and budget in MB (2^20 bytes)."""
        return cls(max_file_bytes=file_mb << 20, max_file_events=file_events, budget_bytes=budget_mb << 20)


class TimelineOutput(Output):
    """One chrome-trace file set (``msprof_{ts}.json`` or ``trace_view.json``), rolled and budgeted."""

    def __init__(
        self, directory: Path, naming: SliceNaming, builders: Sequence[EventBuilder], limits: Limits
    ) -> None:
        self.directory = directory
        self.naming = naming
        self.limits = limits
        self._builders: dict[str, list[EventBuilder]] = {}
        for builder in builders:
            self._builders.setdefault(builder.table, []).append(builder)
        self.tables = tuple(self._builders)
        self.writer: ChromeTraceWriter | None = None

    def _writer(self) -> ChromeTraceWriter:
        if self.writer is None:
            self.writer = ChromeTraceWriter(
                self.directory,
                self.naming,
                max_file_bytes=self.limits.max_file_bytes,
                max_file_events=self.limits.max_file_events,
                budget_bytes=self.limits.budget_bytes,
            )
        return self.writer

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        for builder in self._builders[table]:
            rows = builder.visible(batch)
            if not rows.num_rows:
                continue
            for events in builder.events(rows):
                if events.rows:
                    self._writer().write_events(events)

    @property
    def drop_report(self) -> DropReport | None:
        return None if self.writer is None else self.writer.drop_report

    def close(self) -> list[Path]:
        if self.writer is None:
            return []
        self.writer.close()
        return list(self.writer.paths)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


class ParquetOutput(Output):
    """One canonical table as a Parquet dataset ``{out_dir}/{table}/device_id=N/``.

    One output per table, so that tables sharing no pipeline can be written by different processes;
    the outputs of one process share ``budget``, the bytes their sinks buffer together.
    """

    def __init__(self, out_dir: Path, table: str, budget: BufferBudget) -> None:
        self.directory = out_dir / table
        self.tables = (table,)
        self.budget = budget
        self._sink: ParquetSink | None = None  # opened on the first rows: no rows, no dataset

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if self._sink is None:
            from profstream.sinks import ParquetSink  # pyarrow.parquet, for this layout only

            partition = "device_id" if "device_id" in batch.schema.names else None
            self._sink = ParquetSink(self.directory, batch.schema, partition_by=partition, budget=self.budget)
        self._sink.write(batch)

    def finish(self) -> None:
        if self._sink is not None:
            self._sink.finish()

    @property
    def finish_rows(self) -> int:
        return 0 if self._sink is None else self._sink.waiting_rows

    def close(self) -> list[Path]:
        if self._sink is None:
            return []
        self._sink.close()
        return list(self._sink.paths)

    def abort(self) -> None:
        if self._sink is not None:
            with contextlib.suppress(Exception):  # a writer that failed may fail again as it closes
                self._sink.abort()
