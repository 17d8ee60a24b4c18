"""The ``torch_npu`` layout: ``ASCEND_PROFILER_OUTPUT/`` as the PyTorch adapter's ``analyse()`` writes it.

Files (framework_outputs.md §3), headers as the real files in shared/realdata show them:
``trace_view.json`` (framework ops and flows, then every CANN layer), ``kernel_details.csv``,
``op_statistic.csv``, ``api_statistic.csv``, ``step_trace_time.csv``, ``operator_memory.csv``,
``memory_record.csv``, ``npu_module_mem.csv`` and, beside the output directory,
``profiler_info.json``.

Conventions read off the real files: the files torch_npu writes itself with ``csv.writer``
(kernel_details, step_trace_time, operator_memory, memory_record) end lines in CRLF, the ones it
copies from CANN (op_statistic, api_statistic, npu_module_mem) in LF and lose ``Device_id``;
memory files print absent values as empty cells, sizes as floats (KB, MB = bytes/1024²) and
durations like timestamps (three decimals and a TAB). ``Block Dim``/``Mix Block Dim`` are the
headers of that CANN generation (msprof's current C++ says ``Block Num``). At ``Level0``
kernel_details has the short header (§3.2). memory_record lists APP rows first, then the others,
each in time order. operator_memory lists the PyTorch allocator's rows first, then GE's with
``cann::`` before their names (§4b point 7, and the real file of rank 0 in shared/realdata), each
part sorted by allocation time as torch_npu sorts its groups (§4b point 4; it copies the GE rows in
the order of CANN's file, which the specs do not give: allocation time here too, rows without one
last).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
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
    TaskRows,
    WaitTime,
    api_statistic_cells,
    device_type,
    op_statistic_cells,
    scaled,
    task_cells,
)
from profstream.engine.layouts.timeline import Cann, cann_layers, framework_layers, text
from profstream.sinks.communication_json import CommunicationJsonSink

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
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
    """The framework step containing each task's start (null outside every step; §4c)."""
    out = np.full(batch.num_rows, -1, np.int64)
    starts = batch.column("start_ns").to_numpy()
    devices = batch.column("device_id").to_numpy()
    for device, (begin, end, step) in device_steps.items():
        mine = devices == device
        index = np.searchsorted(begin, starts[mine], side="right") - 1
        found = (index >= 0) & (starts[mine] <= end[np.clip(index, 0, None)])
        values = np.where(found, step[np.clip(index, 0, None)], -1)
        out[mine] = values
    return pa.array(out, mask=out < 0)


class KernelDetails(TaskRows):
    """kernel_details.csv: op_summary's rows and columns, torch_npu's names, and the Step Id."""

    def __init__(self, context: Context, level0: bool) -> None:
        self._wait = WaitTime()
        super().__init__(
            context, "kernel_details.csv", [], label="HCCL", frame=self._frame_rows, line_end=CRLF
        )
        self.tables = ("tasks", "comm", "framework_steps")
        self._level0 = level0
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

    def close(self) -> list[Path]:
        steps = pa.Table.from_batches(self._steps) if self._steps else None
        cells = task_cells(self.context, RENAMES, level0=self._level0)
        if steps is not None and steps.num_rows:
            for device in pc.unique(steps.column("device_id")).to_pylist():
                rows = steps.filter(pc.equal(steps.column("device_id"), device)).sort_by("start_ns")
                self._device_steps[device] = (
                    rows.column("start_ns").to_numpy(),
                    rows.column("end_ns").to_numpy(),
                    rows.column("iteration_id").to_numpy(),
                )
            cells = [Cell("Step Id", "step_id"), *cells]
        self.cells = cells
        return super().close()


def _operator_memory_name(batch: pa.RecordBatch) -> pa.Array:
    """torch_npu's name: the op's, and ``cann::`` before a GE row's (framework_outputs.md §4b point 7)."""
    names = text(batch.column("name"))
    ge = pc.equal(text(batch.column("source")), "GE")
    return pc.if_else(ge, pc.binary_join_element_wise("cann::", names, ""), names)


def _first_then_others(column: str, first: str) -> Callable[[pa.RecordBatch], pa.Array]:
    """A spool key putting, per device, the rows whose ``column`` is ``first`` before the others
    (memory_record's APP rows, operator_memory's PyTorch rows; module docstring)."""

    def key(batch: pa.RecordBatch) -> pa.Array:
        later = pc.cast(pc.not_equal(text(batch.column(column)), first), pa.int64())
        return pc.add(pc.multiply(pc.cast(batch.column("device_id"), pa.int64()), 2), later)

    return key


class Communication(Output):
    """communication.json and communication_matrix.json (framework_outputs.md §3.6).

    Both files need all of a step's ops, and a step may close after its ops, so the sink holds its
    tables until close. The rows wait on disk instead (a :class:`Spool`, one key per table) and reach
    the sink at close, after the pipeline has dropped its state: they grow with the run (22 MB of
    Arrow data on the 5 GB simulation) and no longer add to the pipeline's peak.
    """

    tables = CommunicationJsonSink.TABLES

    def __init__(self, context: Context) -> None:
        self.sink = CommunicationJsonSink(context.out_dir, wall_offset_ns=context.wall_offset_ns)
        self._spool_dir = spool_directory(context)
        self._spool = Spool(self._spool_dir)

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        self._spool.write(self.tables.index(table), batch)

    def close(self) -> list[Path]:
        try:
            for key in self._spool.pending():
                for batch in self._spool.read(key):
                    self.sink.write(self.tables[key], batch)
            self.sink.close()
            return list(self.sink.paths)
        finally:
            shutil.rmtree(self._spool_dir, ignore_errors=True)

    def abort(self) -> None:
        self.sink.abort()
        shutil.rmtree(self._spool_dir, ignore_errors=True)


def summary_outputs(context: Context, level0: bool) -> list[Output]:
    """The summary files of ASCEND_PROFILER_OUTPUT."""
    mega = [
        ("Total Allocated(MB)", "total_allocated"),
        ("Total Reserved(MB)", "total_reserved"),
        ("Total Active(MB)", "total_active"),
    ]
    return [
        KernelDetails(context, level0),
        SummaryOutput(
            context,
            "operator_details",
            "operator_details.csv",
            [
                Cell("Name", "name"),
                Cell("Input Shapes", "input_shapes", null=""),
                Cell("Call Stack", "call_stack", null=""),
                *(
                    Cell(header, scaled(column, 1000.0))
                    for header, column in (
                        ("Host Self Duration(us)", "host_self_ns"),
                        ("Host Total Duration(us)", "host_total_ns"),
                        ("Device Self Duration(us)", "device_self_ns"),
                        ("Device Total Duration(us)", "device_total_ns"),
                        ("Device Self Duration With AICore(us)", "device_self_aicore_ns"),
                        ("Device Total Duration With AICore(us)", "device_total_aicore_ns"),
                    )
                ),
            ],
            by_device=False,
        ),
        Communication(context),
        SummaryOutput(context, "op_statistic", "op_statistic.csv", op_statistic_cells([]), by_device=False),
        SummaryOutput(
            context, "api_statistic", "api_statistic.csv", api_statistic_cells([]), by_device=False
        ),
        SummaryOutput(
            context,
            "step_time",
            "step_trace_time.csv",
            [
                Cell("Step", "step"),
                *(Cell(header, scaled(column, 1000.0)) for header, column in STEP_TIME_COLUMNS),
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
                fixed("Duration(us)", "duration_ns"),
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
            order="alloc_ns",
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
        SummaryOutput(
            context,
            "npu_module_mem",
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
        ),
    ]


def timeline_outputs(context: Context, limits: Limits, *, level0: bool = False) -> list[TimelineOutput]:
    """trace_view.json: the framework layer first, then the CANN layers (§3.1).

    At Level0 torch_npu prunes the host API events (``LEVEL_TRACE_PRUNE_CONFIG``: names starting with
    CANN, AscendCL, Runtime, GE, Node, Model, Hccl, ...), which here is the whole CANN layer.
    """
    processes = Processes()
    layers = [layer for layer in cann_layers(context, processes) if not (level0 and isinstance(layer, Cann))]
    return [
        TimelineOutput(
            context.out_dir,
            lambda index, count: "trace_view.json" if count == 1 else f"trace_view_{index}.json",
            [*framework_layers(context, processes), *layers],
            limits,
        )
    ]
