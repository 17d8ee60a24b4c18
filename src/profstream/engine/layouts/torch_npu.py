"""The ``torch_npu`` layout: ``ASCEND_PROFILER_OUTPUT/`` as the PyTorch adapter's ``analyse()`` writes it.

Files (framework_outputs.md §3), headers as the real files in shared/realdata show them:
``trace_view.json`` (framework ops and flows and every CANN layer), ``kernel_details.csv``,
``op_statistic.csv``, ``api_statistic.csv``, ``step_trace_time.csv``, ``operator_memory.csv``,
``memory_record.csv``, ``npu_module_mem.csv``, ``l2_cache.csv`` and, beside the output directory,
``profiler_info.json``.

Conventions: every CSV ends its lines in CRLF, as torch_npu writes them all with ``csv.writer``
(``prof_common_func/_file_manager.py`` ``create_csv_file``). In shared/realdata, op_statistic,
api_statistic, npu_module_mem and operator_details end in LF; those bytes went through a line-end
conversion, since operator_details' cells hold ``;\\n`` where the same run's trace_view.json (JSON,
escaped) holds torch_npu's ``;\\r\\n``. The files copied from CANN lose ``Device_id``;
memory files print absent values as empty cells, sizes as floats (KB, MB = bytes/1024²) and durations
like timestamps (three decimals and a TAB). npu_module_mem's MB is a float always, ``0.0`` for an empty
module (``NpuModuleMemoryBean``: ``float`` of msprof's KB cell / 1024, so msprof's integer ``0`` becomes
``0.0`` and its ``-1`` ``-0.0009765625``, as every real file in shared/realdata prints them). Choice:
MB from the bytes, where torch_npu divides msprof's printed KB (Python: rounded to 3 decimals; C++:
``std::to_string`` of the size / 1024); they agree when a size is whole KB, as in every real file.
``Block Dim``/``Mix Block Dim`` are the headers of that CANN generation (msprof's current C++ says
``Block Num``). memory_record lists APP rows first, then the
others, each in time order. operator_memory lists the PyTorch allocator's rows first, sorted by
allocation time as torch_npu sorts its groups (§4b point 4), then GE's with ``cann::`` before their
names (§4b point 7) in release-time order and with CANN's Duration cell: torch_npu copies CANN's rows as
they are, and the six real files in shared/realdata list them by release time (rows without one last;
such a row gets CANN's 0.0 Duration and release totals, and its allocation time as Release Time).

Which files exist follows profiler_info.json (``ProfilerConfig``): op_statistic, api_statistic and the
communication files only at Level1 and Level2 (``LEVEL_PARSER_CONFIG``; the real Level0 directory has
none of them), kernel_details' short header when no AI Core metrics were collected
(``is_all_kernel_headers``), not by level; l2_cache.csv only with ``_l2_cache`` set
(``_get_l2_cache_bean``). A task outside every step has an empty Step Id, as torch_npu
writes ``None``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.layouts._outputs import (
    Cell,
    Context,
    Limits,
    Output,
    Processes,
    Spool,
    SummaryOutput,
    TimelineOutput,
    spool_directory,
    stamp,
)
from profstream.engine.layouts.msprof import (
    L2CacheRows,
    ModuleMemory,
    TaskRows,
    WaitTime,
    api_statistic_cells,
    device_type,
    op_statistic_cells,
    scaled,
    task_cells,
)
from profstream.engine.layouts.timeline import (
    Cann,
    Groups,
    PrunedCann,
    cann_layers,
    framework_layers,
    map_text,
    micros_text,
    text,
    torch_op_lines,
)
from profstream.engine.metadata import ExperimentalConfig
from profstream.sinks._format import float_text
from profstream.sinks.communication_json import CommunicationJsonSink

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
#: profiler_info.json's levels and "no AI Core metrics" (torch_npu ``Constant``)
LEVEL0, LEVEL1 = "Level0", "Level1"
AIC_METRICS_NONE = "ACL_AICORE_NONE"
#: the levels at which torch_npu copies op_statistic and api_statistic from CANN
#: (``ProfilerConfig.LEVEL_PARSER_CONFIG``) and writes the communication files
CANN_STATISTICS_LEVELS = (LEVEL1, "Level2")


@dataclass(frozen=True, slots=True)
class Collected:
    """What of profiler_info.json's experimental config decides this layout's files (module docstring):
    every file when there is none; ``l2_data``: the collection has L2 cache data."""

    statistics: bool  # op_statistic, api_statistic and the communication files (Level1 and Level2)
    cann_layer: bool  # trace_view.json's CANN API layer (pruned at Level0)
    all_kernel_headers: bool  # kernel_details' PMU columns (AI Core metrics collected)
    l2_cache: bool  # l2_cache.csv

    @classmethod
    def of(cls, framework: ExperimentalConfig | None, *, l2_data: bool) -> Collected:
        if framework is None:
            return cls(statistics=True, cann_layer=True, all_kernel_headers=True, l2_cache=l2_data)
        level = framework.profiler_level
        return cls(
            statistics=level in CANN_STATISTICS_LEVELS,
            cann_layer=level != LEVEL0,
            all_kernel_headers=framework.aic_metrics != AIC_METRICS_NONE,
            l2_cache=l2_data and framework.l2_cache,
        )


CRLF = "\r\n"
MB = 1024.0 * 1024.0
#: step_trace_time.csv value headers (framework_outputs.md §3.4) and their ``step_time`` columns
STEP_TIME_COLUMNS = (
    ("Computing", "computing_ns"),
    ("Communication(Not Overlapped)", "communication_not_overlapped_ns"),
    ("Overlapped", "overlapped_ns"),
    ("Communication", "communication_ns"),
    ("Free", "free_ns"),
    ("Stage", "stage_ns"),
    ("Bubble", "bubble_ns"),
    ("Communication(Not Overlapped and Exclude Receive)", "communication_not_overlapped_exclude_receive_ns"),
    ("Preparing", "preparing_ns"),
)
#: op_summary header -> kernel_details header (framework_outputs.md §3.2)
RENAMES = {
    "Op Name": "Name",
    "OP Type": "Type",
    "Task Type": "Accelerator Core",
    "Task Start Time(us)": "Start Time(us)",
    "Task Duration(us)": "Duration(us)",
    "Task Wait Time(us)": "Wait Time(us)",
    "Block Num": "Block Dim",
    "Mix Block Num": "Mix Block Dim",
}


def fixed(header: str, column: str) -> Cell:
    """A duration printed like a timestamp (three decimals, TAB), empty when absent."""
    return Cell(header, column, "timestamp_us", "")


def _steps_of(
    device_steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]], batch: pa.RecordBatch
) -> pa.Array:
    """The Step Id of each task (null outside every step; §4c), as torch_npu's ``KernelViewParser``
    picks it: the first step, in start order, with ``start <= task start < end``. torch_npu compares
    the µs texts, and op_summary's start cell ends in a TAB, so a task starting at a step's end is
    not in it; steps overlap when a step's last kernel outlives the next step's first one."""
    out = np.full(batch.num_rows, -1, np.int64)
    starts = batch.column("start_ns").to_numpy()
    devices = batch.column("device_id").to_numpy()
    for device, (begin, end, step) in device_steps.items():
        mine = devices == device
        # the first step whose end is past the start: the first whose running maximum of ends is
        first = np.searchsorted(np.maximum.accumulate(end), starts[mine], side="right")
        at = np.minimum(first, len(begin) - 1)
        found = (first < len(begin)) & (begin[at] <= starts[mine])
        out[mine] = np.where(found, step[at], -1)
    return pa.array(out, mask=out < 0)


class KernelDetails(TaskRows):
    """kernel_details.csv: op_summary's rows and columns, torch_npu's names, and the Step Id."""

    def __init__(self, context: Context, short: bool) -> None:
        self._wait = WaitTime(context)
        super().__init__(
            context, "kernel_details.csv", [], label="HCCL", frame=self._frame_rows, line_end=CRLF, spool=True
        )
        self.tables = ("task_rows", "framework_steps")
        self._short = short
        self._steps: list[pa.RecordBatch] = []
        self._device_steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "framework_steps":
            self._steps.append(batch)
        else:
            super().write(table, batch)

    def _frame_rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = self._wait(batch)
        return batch.append_column("step_id", _steps_of(self._device_steps, batch))

    def _replay(self) -> Iterator[pa.RecordBatch]:
        self._set_cells()  # the rows waited in the spool until every step was known
        yield from super()._replay()

    def _set_cells(self) -> None:
        steps = pa.Table.from_batches(self._steps) if self._steps else None
        cells = task_cells(self.context, RENAMES, short=self._short)
        if steps is not None and steps.num_rows:
            for device in pc.unique(steps.column("device_id")).to_pylist():
                rows = steps.filter(pc.equal(steps.column("device_id"), device)).sort_by("start_ns")
                self._device_steps[device] = (
                    rows.column("start_ns").to_numpy(),
                    rows.column("end_ns").to_numpy(),
                    rows.column("iteration_id").to_numpy(),
                )
            cells = [Cell("Step Id", "step_id", null=""), *cells]
        self.cells = cells


def _operator_memory_name(batch: pa.RecordBatch) -> pa.Array:
    """torch_npu's name: the op's, and ``cann::`` before a GE row's (framework_outputs.md §4b point 7)."""
    ge = _is_ge(batch)
    if not pc.any(ge).as_py():  # PyTorch's rows alone: the names as they are (a dictionary's once each)
        return batch.column("name")
    names = text(batch.column("name"))
    return pc.if_else(ge, pc.binary_join_element_wise("cann::", names, ""), names)


#: the column operator_memory.csv's rows are sorted by within their part (module docstring)
MEMORY_ORDER = "order_ns"


def _is_ge(batch: pa.RecordBatch) -> pa.Array:
    is_ge = map_text(batch.column("source"), lambda sources: pc.equal(sources, "GE"))
    return pc.cast(is_ge, pa.bool_()) if pa.types.is_dictionary(is_ge.type) else is_ge


def _operator_memory_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows with :data:`MEMORY_ORDER` (allocation time for PyTorch's rows, release time for GE's),
    and a GE allocation never released as torch_npu reads CANN's row: msprof prints 0.0 as its
    Duration and release totals (:mod:`~profstream.engine.layouts.msprof`), a non-empty Duration,
    so ``GeOpMemoryBean.release_time`` gives the allocation time plus 0."""
    ge = _is_ge(batch)
    release = batch.column("release_ns")
    batch = batch.append_column(MEMORY_ORDER, pc.if_else(ge, release, batch.column("alloc_ns")))
    unreleased = pc.and_(ge, pc.is_null(release))
    if not pc.any(unreleased).as_py():
        return batch
    filled = {
        "release_ns": batch.column("alloc_ns"),
        "duration_ns": pa.scalar(0, pa.int64()),
        "release_total_allocated": pa.scalar(0, pa.int64()),
        "release_total_reserved": pa.scalar(0, pa.int64()),
    }
    for name, value in filled.items():
        index = batch.schema.get_field_index(name)
        batch = batch.set_column(index, name, pc.if_else(unreleased, value, batch.column(index)))
    return batch


def _operator_memory_duration(batch: pa.RecordBatch) -> pa.Array:
    """Duration(us): torch_npu's own format for PyTorch rows (three decimals and a TAB), CANN's cell as
    torch_npu copies it for GE rows (``106.43``, as msprof's operator_memory prints it;
    ``prof_bean/_ge_op_memory_bean.py``, and the real file of rank 0 in shared/realdata)."""
    ns = pc.cast(batch.column("duration_ns"), pa.int64())
    pytorch = micros_text(ns, "\t")
    ge = _is_ge(batch)
    if not pc.any(ge).as_py():  # most batches: PyTorch's rows alone
        return pytorch
    return pc.if_else(ge, float_text(pc.divide(pc.cast(ns, pa.float64()), 1000.0)), pytorch)


def summed_micros(header: str, column: str) -> Cell:
    """A sum of ns as µs the way torch_npu prints step_trace_time's sums: a float, but the integer ``0``
    where nothing was added (its sums start at ``0``: ``_trace_step_time_parser`` ``default_time``;
    the real files print ``0``, never ``0.0``)."""
    micros = scaled(column, 1000.0)

    def values(batch: pa.RecordBatch) -> pa.Array:
        sums = micros(batch)
        return pc.if_else(pc.equal(sums, 0.0), pa.scalar(None, pa.float64()), sums)

    return Cell(header, values, null="0")


def _preparing(wall_offset_ns: int) -> Cell:
    """step_trace_time's Preparing as torch_npu's ``get_prepare_time`` gives it: the first task's start
    minus the host start, in µs floats (``0.0`` included); for a row without a Computing or
    Communication piece its first task time is still ``-1``, so ``-1 - host start`` (the local
    wall-clock µs ``convert_ns2us_float`` gives: a large negative number); ``0`` without a host start
    (the step-less row without torch ops)."""

    def values(batch: pa.RecordBatch) -> pa.Array:
        micros = pc.divide(pc.cast(batch.column("preparing_ns"), pa.float64()), 1000.0)
        starts = batch.column("host_start_ns").to_pylist()
        unset = [None if start is None else -1 - (start + wall_offset_ns) / 1000 for start in starts]
        return pc.coalesce(micros, pa.array(unset, pa.float64()))

    return Cell("Preparing", values, null="0")


def _api_statistic_cells(head: Sequence[Cell]) -> list[Cell]:
    """api_statistic.csv as that CANN generation printed it: the communication level is ``hccl`` (every
    api_statistic.csv of msinsight-torchnpu-910b; msprof's current code says ``communication``)."""

    def level(batch: pa.RecordBatch) -> pa.Array:
        return map_text(
            batch.column("level"), lambda names: pc.if_else(pc.equal(names, "communication"), "hccl", names)
        )

    return api_statistic_cells(head, level)


def _first_then_others(column: str, first: str) -> Callable[[pa.RecordBatch], pa.Array]:
    """A spool key putting, per device, the rows whose ``column`` is ``first`` before the others
    (memory_record's APP rows, operator_memory's PyTorch rows; module docstring): ``"<device>/0"`` or
    ``"<device>/1"``, which :func:`key_order` sorts by device name, then part (``/`` sorts before the
    digits: ``1/1`` before ``10/0``)."""

    def key(batch: pa.RecordBatch) -> pa.Array:
        # codes into the batch's few keys, not a string per row (memory_record: 5.5 million rows at 1 GB)
        is_first = map_text(batch.column(column), lambda names: pc.equal(names, first))
        later = ~np.asarray(pc.cast(is_first, pa.bool_()).fill_null(False).to_numpy(zero_copy_only=False))
        devices = np.asarray(batch.column("device_id").to_numpy(zero_copy_only=False))
        if len(devices) and devices.min() == devices.max():
            unique, position = devices[:1], np.zeros(len(devices), np.int64)
        else:
            unique, position = np.unique(devices, return_inverse=True)
        words = pa.array([f"{device}/{part}" for device in unique.tolist() for part in (0, 1)])
        return pa.DictionaryArray.from_arrays(pa.array((2 * position + later).astype(np.int32)), words)

    return key


class Communication(Output):
    """communication.json and communication_matrix.json (framework_outputs.md §3.6).

    Both files need all of a step's ops, and a step may close after its ops, so the sink holds its
    tables until close. The rows wait on disk instead (a :class:`Spool`, one key per table) and reach
    the sink at close, after the pipeline has dropped its state: they grow with the run (22 MB of
    Arrow data on the 5 GB simulation) and no longer add to the pipeline's peak.
    """

    tables = CommunicationJsonSink.TABLES
    renders_at_finish = True

    def __init__(self, context: Context) -> None:
        self.sink = CommunicationJsonSink(context.out_dir, wall_offset_ns=context.wall_offset_ns)
        self._spool_dir = spool_directory(context)
        self._spool = Spool(self._spool_dir)

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        self._spool.write(self.tables.index(table), batch)

    def finish(self) -> None:
        for key in self._spool.pending():
            for batch in self._spool.read(key):
                self.sink.write(self.tables[int(key)], batch)
        shutil.rmtree(self._spool_dir, ignore_errors=True)
        self.sink.finish()

    def close(self) -> list[Path]:
        try:
            self.finish()
            self.sink.close()
            return list(self.sink.paths)
        finally:
            shutil.rmtree(self._spool_dir, ignore_errors=True)

    def abort(self) -> None:
        self.sink.abort()
        shutil.rmtree(self._spool_dir, ignore_errors=True)


def summary_outputs(context: Context, framework: ExperimentalConfig | None = None) -> list[Output]:
    """The summary files of ASCEND_PROFILER_OUTPUT, as far as ``framework`` collected them (module
    docstring; all of them without a profiler_info.json)."""
    collected = Collected.of(framework, l2_data=context.l2_cache)
    mega = [
        ("Total Allocated(MB)", "total_allocated"),
        ("Total Reserved(MB)", "total_reserved"),
        ("Total Active(MB)", "total_active"),
    ]
    outputs: list[Output] = [
        KernelDetails(context, not collected.all_kernel_headers),
        SummaryOutput(
            context,
            "operator_details",
            "operator_details.csv",
            [
                Cell("Name", "name"),
                Cell("Input Shapes", lambda b: torch_op_lines(b.column("input_shapes")), null=""),
                Cell("Call Stack", lambda b: torch_op_lines(b.column("call_stack")), null=""),
                # floats, 0.0 included (torch_npu's ``convert_ns2us_float``)
                Cell("Host Self Duration(us)", scaled("host_self_ns", 1000.0)),
                Cell("Host Total Duration(us)", scaled("host_total_ns", 1000.0)),
                # torch_npu's float sums, ``0`` where no kernel was added (operators/operator_details.py)
                *(
                    Cell(header, column, null="0")
                    for header, column in (
                        ("Device Self Duration(us)", "device_self_us"),
                        ("Device Total Duration(us)", "device_total_us"),
                        ("Device Self Duration With AICore(us)", "device_self_aicore_us"),
                        ("Device Total Duration With AICore(us)", "device_total_aicore_us"),
                    )
                ),
            ],
            by_device=False,
            line_end=CRLF,
        ),
        SummaryOutput(
            context,
            "step_time",
            "step_trace_time.csv",
            [
                Cell("Step", "step", null=""),
                *(summed_micros(header, column) for header, column in STEP_TIME_COLUMNS[:-1]),
                _preparing(context.wall_offset_ns),
            ],
            line_end=CRLF,
        ),
        SummaryOutput(
            context,
            "memory",
            "operator_memory.csv",
            [
                Cell("Name", _operator_memory_name, null=""),
                Cell(
                    "Size(KB)",
                    lambda b: pc.divide(pc.cast(b.column("size_bytes"), pa.float64()), 1024.0),
                    null="",
                ),
                stamp("Allocation Time(us)", "alloc_ns", null=""),
                stamp("Release Time(us)", "release_ns", null=""),
                stamp("Active Release Time(us)", "active_release_ns", null=""),
                Cell("Duration(us)", _operator_memory_duration, null=""),
                fixed("Active Duration(us)", "active_duration_ns"),
                *(
                    Cell(f"{when} {header}", scaled(f"{prefix}_{column}", MB), null="")
                    for when, prefix in (("Allocation", "alloc"), ("Release", "release"))
                    for header, column in mega
                ),
                Cell("Stream Ptr", "stream_ptr", null=""),
                Cell("Device Type", "device_type", null=""),
            ],
            key=_first_then_others("source", "PTA"),
            rows=_operator_memory_rows,
            order=MEMORY_ORDER,
            line_end=CRLF,
        ),
        SummaryOutput(
            context,
            "memory_record",
            "memory_record.csv",
            [
                Cell("Component", "component", null=""),
                stamp("Timestamp(us)", "time_ns", null=""),
                *(Cell(header, scaled(column, MB), null="") for header, column in mega),
                Cell("Stream Ptr", "stream_ptr", null=""),
                Cell("Device Type", "device_type", null=""),
            ],
            key=_first_then_others("component", "APP"),
            line_end=CRLF,
        ),
        ModuleMemory(
            context,
            "npu_module_mem.csv",
            [
                Cell("Component", "component"),
                stamp("Timestamp(us)", "time_ns"),
                Cell(
                    "Total Reserved(MB)",
                    lambda b: pc.divide(
                        pc.fill_null(pc.cast(b.column("total_reserved_bytes"), pa.float64()), -1024.0), MB
                    ),
                ),
                Cell("Device", device_type),
            ],
            line_end=CRLF,
        ),
    ]
    if collected.l2_cache:
        outputs.append(L2CacheRows(context, "l2_cache.csv", device_column=False, line_end=CRLF))
    if collected.statistics:
        outputs += [
            Communication(context),
            *(
                SummaryOutput(context, table, f"{table}.csv", cells([]), by_device=False, line_end=CRLF)
                for table, cells in (
                    ("op_statistic", op_statistic_cells),
                    ("api_statistic", _api_statistic_cells),
                )
            ),
        ]
    return outputs


def timeline_outputs(
    context: Context, limits: Limits, framework: ExperimentalConfig | None = None
) -> list[TimelineOutput]:
    """trace_view.json: the framework layers and the CANN layers (§3.1).

    torch_npu writes the framework events first (torch ops, enqueues with their flow starts, dequeues
    with their flow ends, the Python process's metadata, fwdbwd flows, Python tracer calls, GC;
    ``FwkFileParser.get_fwk_trace_data``), then msprof's events; the events here go out as the
    pipeline emits their tables, interleaved (sinks/chrome_trace.py), and each event's keys in
    msprof's C++ order rather than ``TraceEventManager``'s (``ph`` first): viewers read neither order.

    At Level0 torch_npu prunes the host API events (``LEVEL_TRACE_PRUNE_CONFIG``: names starting with
    CANN, AscendCL, Runtime, GE, Node, Model, Hccl, ...), which here is every event of the CANN layer,
    and its ``process_name``; the layer's other metadata stays (:class:`PrunedCann`).
    """
    processes, groups = Processes(), Groups()
    cann = Collected.of(framework, l2_data=context.l2_cache).cann_layer
    layers = [
        layer if cann or not isinstance(layer, Cann) else PrunedCann(context, processes)
        for layer in cann_layers(context, processes, groups)
    ]
    return [
        TimelineOutput(
            context.out_dir,
            lambda index, count: "trace_view.json" if count == 1 else f"trace_view_{index}.json",
            [*framework_layers(context, processes, groups), *layers],
            limits,
        )
    ]
