"""CSV exports (torch_npu ``ASCEND_PROFILER_OUTPUT/*.csv``, msprof ``*_<timestamp>.csv``) as batches.

Each file is read with ``pyarrow.csv.open_csv`` (a streaming reader: one block at a time; msprof's
step_trace, whose rows may stop early, with :mod:`csv`), every column as text, and converted here:
times and durations are decimal µs turned into int64 ns digit for digit
(:func:`~profstream.engine.kernels.text.parse_decimal`; a trailing TAB, which msprof prints after
start times, is ignored), ``N/A`` and empty cells become null (``Context ID`` ``N/A``
becomes :data:`~profstream.engine.schema.NO_ID`, as in the tasks schema), and the quotes msprof
wraps around shapes (``"32,3,224,224"``) are removed.

Rounding: start times and durations of tasks have 3 decimals, whole ns; should a value carry more,
the sub-ns digits are dropped (as :mod:`.trace` does). The summed columns of ``step_trace_time.csv``
are Python float sums printed with ``repr`` (``8873.756000000001``), so they are rounded to the
nearest ns instead; so are the 3-decimal statistics files.

Column names vary between versions and layouts (framework_outputs.md §3.2 renames op_summary's
``Op Name``/``OP Type``/``Task Type``/``Task Start Time(us)``... in ``kernel_details.csv``; ``Block
Num`` vs ``Block Dim``); :data:`TASK_COLUMNS` accepts both. Columns the tasks schema has no place for
and that are not derived (``Step Id``, ``Wait Time(us)``, ``Model Name``, ``Infer ID``) are skipped;
every other column of kernel_details / op_summary is a PMU metric: float64, named without its unit
(``aic_mac_time(us)`` -> ``aic_mac_time``), see :func:`~profstream.engine.schema.tasks_schema`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from profstream import events
from profstream.codecs._base import OnInvalid
from profstream.engine import schema
from profstream.engine.kernels import text
from profstream.errors import DecodeError

#: bytes per CSV block
DEFAULT_BLOCK_BYTES = 4 * 1024 * 1024

_UNIT = re.compile(r"\s*\([^()]*\)$")
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"

# canonical column -> header names that hold it, in op_summary / kernel_details spellings
TASK_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "device_id": ("Device_id",),
    "model_id": ("Model ID",),
    "task_id": ("Task ID",),
    "stream_id": ("Stream ID",),
    "op_name": ("Op Name", "Name"),
    "op_type": ("OP Type", "Type"),
    "op_state": ("OP State",),
    "task_type": ("Task Type", "Accelerator Core"),
    "start_ns": ("Task Start Time(us)", "Start Time(us)"),
    "duration": ("Task Duration(us)", "Duration(us)"),
    "block_dim": ("Block Num", "Block Dim"),
    "mix_block_dim": ("Mix Block Num", "Mix Block Dim"),
    "hf32_eligible": ("HF32 Eligible",),
    "input_shapes": ("Input Shapes",),
    "input_data_types": ("Input Data Types",),
    "input_formats": ("Input Formats",),
    "output_shapes": ("Output Shapes",),
    "output_data_types": ("Output Data Types",),
    "output_formats": ("Output Formats",),
    "context_id": ("Context ID",),
}
_SKIPPED = frozenset({"Step Id", "Wait Time(us)", "Task Wait Time(us)", "Model Name", "Infer ID", "Device"})
_INT_COLUMNS = frozenset({"device_id", "model_id", "task_id", "stream_id", "block_dim", "mix_block_dim"})
_SHAPES = frozenset({"input_shapes", "output_shapes"})


@dataclass(frozen=True, slots=True)
class CsvOptions:
    """How CSV files are read: block size and the policy for malformed rows."""

    block_bytes: int = DEFAULT_BLOCK_BYTES
    on_invalid: OnInvalid = "error"


def read_header(path: Path) -> list[str]:
    """The first row of a CSV file (a UTF-8 byte-order mark is dropped)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        return next(csv.reader(f), [])


def _unique(names: Sequence[str]) -> list[str]:
    """Header names made unique (msprof's step_trace repeats ``Reduce Start(us)``): ``name#2``..."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def read_text_batches(
    paths: Sequence[Path], block_bytes: int = DEFAULT_BLOCK_BYTES, on_invalid: OnInvalid = "error"
) -> Iterator[pa.RecordBatch]:
    """Every row of the CSV files in order, as string columns named by the first file's header.

    A row with the wrong number of fields raises :class:`DecodeError` naming the file and row, or
    with ``on_invalid="skip"`` is skipped, counted and logged (``records_dropped``) per file.
    """
    names = _unique(read_header(paths[0])) if paths else []
    for path in paths:
        invalid: list[int | None] = []

        def handle(row: pa_csv.InvalidRow, invalid: list[int | None] = invalid) -> str:
            invalid.append(row.number)
            return "skip" if on_invalid == "skip" else "error"

        try:
            reader = pa_csv.open_csv(
                path,
                read_options=pa_csv.ReadOptions(block_size=block_bytes, column_names=names, skip_rows=1),
                parse_options=pa_csv.ParseOptions(invalid_row_handler=handle),
                convert_options=pa_csv.ConvertOptions(
                    column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False
                ),
            )
            yield from reader
        except pa.ArrowInvalid as exc:
            row = invalid[-1] if invalid else None
            msg = f"expected CSV rows of {len(names)} fields as in the header, got {exc}"
            raise DecodeError(msg, path=path, record_index=row) from exc
        if invalid:
            log = events.get_logger(component="imports", file=str(path))
            log.warning(
                events.RECORDS_DROPPED, count=len(invalid), reason="wrong number of fields", stage="import"
            )


def read_ragged_batches(
    paths: Sequence[Path], fewest: int, on_invalid: OnInvalid = "error"
) -> Iterator[pa.RecordBatch]:
    """:func:`read_text_batches` for a small file whose rows may stop early: a row of at least
    ``fewest`` fields and at most the header's is padded with ``N/A`` (msprof's Python step_trace
    writes each iteration's own Reduce pairs only). One batch per file, read with :mod:`csv`."""
    names = _unique(read_header(paths[0])) if paths else []
    for path in paths:
        rows: list[list[str]] = []
        invalid: list[int] = []
        with path.open(newline="", encoding="utf-8-sig") as f:
            for number, row in enumerate(csv.reader(f)):
                if number == 0:
                    continue
                if not fewest <= len(row) <= len(names):
                    if on_invalid != "skip":
                        msg = f"expected CSV rows of {fewest} to {len(names)} fields, got {len(row)}"
                        raise DecodeError(msg, path=path, record_index=number)
                    invalid.append(number)
                    continue
                rows.append(row + ["N/A"] * (len(names) - len(row)))
        if invalid:
            log = events.get_logger(component="imports", file=str(path))
            log.warning(
                events.RECORDS_DROPPED, count=len(invalid), reason="wrong number of fields", stage="import"
            )
        columns = [pa.array([row[k] for row in rows], pa.string()) for k in range(len(names))]
        yield pa.RecordBatch.from_arrays(columns, names=names)


def _text(column: pa.Array) -> pa.Array:
    """Text with ``N/A`` and empty cells as null."""
    trimmed = pc.utf8_trim_whitespace(column)
    absent = pc.or_(pc.equal(trimmed, ""), pc.equal(trimmed, "N/A"))
    return pc.if_else(absent, pa.scalar(None, pa.string()), column)


def _float(column: pa.Array) -> pa.Array:
    """Numeric text as float64; anything else (``N/A``) null."""
    numeric = pc.match_substring_regex(column, _NUMBER)
    return pc.if_else(numeric, column, pa.scalar(None, pa.string())).cast(pa.float64())


def _ns(column: pa.Array, mode: int = text.TRUNCATE) -> pa.Array:
    return text.parse_decimal(column, 3, mode)


def metric_name(header: str) -> str:
    """A PMU column's canonical name: the msprof name without its unit suffix."""
    return _UNIT.sub("", header).strip()


@dataclass(frozen=True, slots=True)
class TaskColumns:
    """How the header of one kernel_details / op_summary file maps onto the tasks schema."""

    canonical: dict[str, str]  # canonical column -> header name
    metrics: dict[str, str]  # metric column -> header name

    @classmethod
    def of(cls, header: Sequence[str]) -> TaskColumns:
        """Map a header; a metric name that repeats keeps its first column."""
        canonical: dict[str, str] = {}
        metrics: dict[str, str] = {}
        spelled = {name: column for column, names in TASK_COLUMNS.items() for name in names}
        for name in _unique(header):
            if name in spelled:
                canonical.setdefault(spelled[name], name)
            elif name not in _SKIPPED:
                metrics.setdefault(metric_name(name), name)
        return cls(canonical, metrics)

    @property
    def schema(self) -> pa.Schema:
        """The tasks schema with this file's metric columns."""
        return schema.tasks_schema(self.metrics)


def task_batches(paths: Sequence[Path], device_id: int | None, options: CsvOptions) -> pa.RecordBatchReader:
    """kernel_details.csv / op_summary_*.csv rows as ``tasks`` batches (see the module docstring)."""
    columns = TaskColumns.of(read_header(paths[0]))
    out_schema = columns.schema

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        values: dict[str, pa.Array] = {}
        for name, header in columns.canonical.items():
            column = batch.column(header)
            if name == "start_ns":
                values[name] = _ns(column)
            elif name == "duration":
                continue
            elif name == "context_id":
                values[name] = pc.fill_null(text.parse_decimal(column, 0), schema.NO_ID)
            elif name in _INT_COLUMNS:
                values[name] = text.parse_decimal(column, 0)
            elif name in _SHAPES:
                values[name] = pc.utf8_trim(_text(column), characters='"')
            else:
                values[name] = _text(column)
        if "start_ns" in values and "duration" in columns.canonical:
            values["end_ns"] = pc.add(values["start_ns"], _ns(batch.column(columns.canonical["duration"])))
        if "device_id" not in values:
            values["device_id"] = pa.array([device_id] * batch.num_rows, pa.int32())
        for name, header in columns.metrics.items():
            values[name] = _float(batch.column(header))
        return schema.conform(out_schema, values)

    return _reader(out_schema, paths, convert, options)


def _reader(
    out_schema: pa.Schema,
    paths: Sequence[Path],
    convert: Callable[[pa.RecordBatch], pa.RecordBatch],
    options: CsvOptions,
) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        for batch in read_text_batches(paths, options.block_bytes, options.on_invalid):
            if batch.num_rows:
                yield convert(batch)

    return pa.RecordBatchReader.from_batches(out_schema, batches())


def _column_reader(
    table: str,
    paths: Sequence[Path],
    device_id: int | None,
    converters: Mapping[str, tuple[str, Callable[[pa.Array], pa.Array]]],
    options: CsvOptions,
) -> pa.RecordBatchReader:
    """A reader of ``table`` whose columns each come from one header column through a converter."""
    out_schema = schema.TABLES[table]
    header = set(_unique(read_header(paths[0])))

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = {
            name: fn(batch.column(source)) for name, (source, fn) in converters.items() if source in header
        }
        if "device_id" in out_schema.names and "device_id" not in values:
            values["device_id"] = pa.array([device_id] * batch.num_rows, pa.int32())
        return schema.conform(out_schema, values)

    return _reader(out_schema, paths, convert, options)


def _ns_nearest(column: pa.Array) -> pa.Array:
    return _ns(column, text.NEAREST)


def _int(column: pa.Array) -> pa.Array:
    return text.parse_decimal(column, 0, text.NEAREST)


_EXCLUDE_RECEIVE = "Communication(Not Overlapped and Exclude Receive)"


def step_time_batches(
    paths: Sequence[Path], device_id: int | None, options: CsvOptions
) -> pa.RecordBatchReader:
    """step_trace_time.csv (framework_outputs.md §3.4) as ``step_time`` batches."""
    sums = {
        "computing_ns": "Computing",
        "communication_not_overlapped_ns": "Communication(Not Overlapped)",
        "overlapped_ns": "Overlapped",
        "communication_ns": "Communication",
        "free_ns": "Free",
        "stage_ns": "Stage",
        "bubble_ns": "Bubble",
        "communication_not_overlapped_exclude_receive_ns": _EXCLUDE_RECEIVE,
        "preparing_ns": "Preparing",
    }
    converters = {name: (header, _ns_nearest) for name, header in sums.items()}
    converters |= {"device_id": ("Device_id", _int), "step": ("Step", _int)}
    return _column_reader("step_time", paths, device_id, converters, options)


def op_statistic_batches(
    paths: Sequence[Path], device_id: int | None, options: CsvOptions
) -> pa.RecordBatchReader:
    """op_statistic.csv / op_statistic_*.csv (msprof_outputs.md §2.2) as ``op_statistic`` batches."""
    converters = {
        "device_id": ("Device_id", _int),
        "model_name": ("Model Name", _text),
        "op_type": ("OP Type", _text),
        "core_type": ("Core Type", _text),
        "count": ("Count", _int),
        "total_ns": ("Total Time(us)", _ns_nearest),
        "min_ns": ("Min Time(us)", _ns_nearest),
        "avg_ns": ("Avg Time(us)", lambda c: _ns_nearest(c).cast(pa.float64())),
        "max_ns": ("Max Time(us)", _ns_nearest),
        "ratio": ("Ratio(%)", _float),
    }
    return _column_reader("op_statistic", paths, device_id, converters, options)


def api_statistic_batches(paths: Sequence[Path], options: CsvOptions) -> pa.RecordBatchReader:
    """api_statistic.csv / api_statistic_*.csv (msprof_outputs.md §2.5) as ``api_statistic`` batches."""
    converters = {
        "level": ("Level", _text),
        "name": ("API Name", _text),
        "total_us": ("Time(us)", _float),
        "count": ("Count", _int),
        "avg_us": ("Avg(us)", _float),
        "min_us": ("Min(us)", _float),
        "max_us": ("Max(us)", _float),
        "variance": ("Variance", _float),
    }
    return _column_reader("api_statistic", paths, None, converters, options)


def step_trace_batches(
    paths: Sequence[Path], device_id: int | None, options: CsvOptions
) -> pa.RecordBatchReader:
    """msprof step_trace_*.csv (msprof_outputs.md §2.4) as ``steps`` batches of kind ``model``.

    An iteration spans ``[Iteration End - Iteration Time, Iteration End]``; each ``Reduce Start`` /
    ``Reduce Duration`` pair becomes one element of the reduce lists (an ``N/A`` pair, or one the row
    stops before, is skipped: :func:`read_ragged_batches`).
    """
    out_schema = schema.TABLES["steps"]
    header = _unique(read_header(paths[0]))
    reduce_pairs = list(
        zip(
            [h for h in header if h.split("#")[0] == "Reduce Start(us)"],
            [h for h in header if h.split("#")[0] == "Reduce Duration(us)"],
            strict=False,
        )
    )

    def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
        end = _ns(batch.column("Iteration End(us)"))
        starts = [_ns(batch.column(s)) for s, _ in reduce_pairs]
        ends = [pc.add(st, _ns(batch.column(d))) for st, (_, d) in zip(starts, reduce_pairs, strict=True)]
        values: dict[str, pa.Array] = {
            "kind": pa.array(["model"] * batch.num_rows, pa.string()),
            "iteration_id": _int(batch.column("Iteration ID")),
            "start_ns": pc.subtract(end, _ns(batch.column("Iteration Time(us)"))),
            "end_ns": end,
            "fp_ns": _ns(batch.column("FP Start(us)")),
            "bp_ns": _ns(batch.column("BP End(us)")),
            "data_aug_ns": _ns(batch.column("Data Aug Bound(us)")),
            "reduce_start_ns": _lists(starts, batch.num_rows),
            "reduce_end_ns": _lists(ends, batch.num_rows),
        }
        if "Model ID" in header:
            values["model_id"] = _int(batch.column("Model ID"))
        values["device_id"] = (
            _int(batch.column("Device_id"))
            if "Device_id" in header
            else pa.array([device_id] * batch.num_rows, pa.int32())
        )
        return schema.conform(out_schema, values)

    fewest = len(header) - 2 * len(reduce_pairs)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in read_ragged_batches(paths, fewest, options.on_invalid):
            if batch.num_rows:
                yield convert(batch)

    return pa.RecordBatchReader.from_batches(out_schema, batches())


def _lists(columns: Sequence[pa.Array], rows: int) -> pa.Array:
    """Row-wise lists of the non-null values of several int64 columns."""
    if not columns:
        return pa.array([[] for _ in range(rows)], pa.list_(pa.int64()))
    table = pa.table({str(k): c for k, c in enumerate(columns)})
    stacked = [[v for v in row.values() if v is not None] for row in table.to_pylist()]
    return pa.array(stacked, pa.list_(pa.int64()))
