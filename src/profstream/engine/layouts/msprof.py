"""The ``msprof`` layout: ``PROF_XXX/mindstudio_profiler_output/``, as ``msprof.py export`` writes it.

Files (msprof_outputs.md §1 to §3), each named ``{module}_{timestamp}.{csv|json}`` with one timestamp per
export (the C++ path's rule, §1.2) and sliced at 1,000,000 rows:

* timeline: ``msprof_{ts}.json`` (every layer of :mod:`.timeline`) and ``step_trace_{ts}.json``
  (the Step Trace layer alone, §2.4);
* summary: ``op_summary``, ``op_statistic``, ``task_time``, ``api_statistic``, ``step_trace``,
  ``communication_statistic``, ``npu_mem``, ``npu_module_mem``, ``memory_record``,
  ``operator_memory`` (§2), ``l2_cache`` (§2.9, when a device recorded L2 cache counters), ``hbm``
  (§2.9, when a device sampled HBM traffic), each with ``Device_id`` first (§1.4), and ``README.txt``
  (§1.3).

Choices where the spec leaves room:

* Values follow msprof's Python path, which msprof_behaviour.md observed on 910A and 910B alike: PMU
  floats rounded to 3 decimals and cycle counts as integers (:func:`metric_cell`), shapes wrapped in
  quotes (:func:`quoted`), a device's first Task Wait Time the integer ``0`` (:class:`WaitTime`). The
  C++ path (910B full exports where msprof's ``.so`` is installed) prints some numbers differently
  (fixed 3-decimal durations, no ``.0``); that is not reproduced.
* op_summary rows are device tasks matched to node info (an op type is known) whose task type is
  not WRITE_BACK/INVALID/HCCL_AI_CPU/COMMUNICATION (§2.1) nor HCCL, except communication tasks of an op
  whose name ends in ``AivKernel`` (``AiCoreOpReport._filter_hccl_op``): the real kernel_details.csv in
  shared/realdata lists communication once per op (Task ID ``N/A``, type ``HCCL``), never per HCCL
  task: those per-op rows are merged in by start time (:class:`TaskRows`; task type ``COMMUNICATION``
  here as msprof's C++ names it, ``HCCL`` in kernel_details as the real file shows). Headers are
  the C++ ones (``Block Num``, ``Mix Block Num``); ``Context ID`` and ``Mix Block Num`` only on
  STARS chips.
* task_time groups a batch's rows by (stream, task, batch id) as msprof's Python does
  (``TaskOpViewer.operate_type``, §4e): a group of one row is kept; a group with a context id
  between 0 and 4294967295 (an FFTS+ task) is left out whole; a group with context 0 (MIX) keeps its
  context-0 rows; any other group (a static graph's repeats) is kept. The rows of one task arrive in
  one batch (HostJoin), so the groups are whole; repeats of a task id across batches are grouped
  apart, where msprof groups the whole run. msprof's C++ assembler (910B full exports) keeps only
  the context-0 rows of every group of several, so it drops a static graph's repeats
  (``FilterAscendTaskData``, ``task_time_assembler.cpp``); that is not reproduced.
* task_time's kernel_name is the launch's task_track kernel name, as current msprof prints it: both
  paths take the host task's kernel name first and the op name only for a task without a host task,
  which has none here either (``TaskOpViewer._reformat_task_info``,
  ``TaskTimeAssembler::AssembleTaskTime``); ``N/A`` when the hash is 0 or not in hash_dic, as the
  Python parser stores it (``TaskTrackParser.format_task_track_data``). Its kernel_type follows
  :func:`task_time_type`; a kernel of an op whose node_basic_info says HCCL, launched outside any
  communication API, prints ``COMMUNICATION`` as the C++ names GE type 9 (``NumberMapping``
  ``geTaskTypeMap``), where the Python prints ``HCCL``. Its collection-start filter compares texts as
  op_summary's does.
* api_statistic's ``Device_id`` is the collection's first device, as the real file in shared/realdata
  shows (``0``; a 310B, so msprof's Python path); the C++ path writes ``host``.
* communication_statistic is not written for a device none of whose communication ops has a type
  (:func:`communication_statistic_rows`), as msprof writes none then.
* step_trace lists the model iterations and the 60000/60001 steps (FP, BP and the durations from them
  ``N/A``) in step-end order, as msprof's ``training_trace`` table holds both
  (``CreateTrainingTrace.update_step_time``, ``update_data_aug``). It spools its rows until close and
  reads them back at once there, because the number of Reduce column pairs is the largest count in any
  iteration (§2.4). A row with fewer Reduce pairs ends after its own: msprof's Python appends each
  iteration's pairs to its row and writes the rows as they are
  (``StepTraceViewer._reformat_step_trace_data``, ``msvp_common.create_csv_writer``). The C++
  path pads such a row with one ``N/A`` per missing pair
  (``SummaryStepTraceAssembler::AssembleStepTraceData``); that is not reproduced. In ``--format json``
  a row object holds ``Reduce Start(us)`` and ``Reduce Duration(us)`` once, with the row's last pair,
  and neither without a pair: ``create_json`` builds each object as ``OrderedDict(zip(header, row))``,
  which stops at the shorter row and keeps a repeated key where it first appears with its last value.
* step_trace's Iteration Time, FP to BP Time, Iteration Refresh and Data Aug Bound are msprof's Python
  floats of the syscnt ticks, unrounded: ``ticks * 1000000.0 / (float(hwts_frequency) * 1000000.0)``
  (``StepTraceViewer.calculate_duration``, ``InfoConfReader.get_freq``), ``N/A`` for 0 ticks (its
  ``training_trace`` query prints every 0 so); Reduce Duration is ``round(ticks * (1000000.0 /
  (float(hwts_frequency) * 1000000.0)), 3)`` (``_reformat_step_trace_data``,
  ``StepTraceConstant.syscnt_to_micro``). The ``steps`` table keeps int64 ns; the ticks come back from
  its ns spans exactly (:func:`~.timeline.syscnt_ticks`, any rate below 500 MHz), and steps imported
  from a CSV count ns as ticks of a 1000 MHz clock. The C++ path (``SummaryStepTraceAssembler``) prints
  fixed 3-decimal µs from ns instead, and the first Reduce Duration of an iteration as start minus end
  on unsigned integers; that is not reproduced.
* ``--format json`` summaries are one file per module holding every device's rows in device order,
  without ``Device_id``. msprof writes one JSON per device dir with the viewer's own header (no
  ``Device_id``) and copies each as it is to ``{module}_{ts}.json`` (``create_json``,
  ``MsprofOutputSummary._copy_summary_data``), so with several devices its copies made within one
  second overwrite each other, leaving one device's rows; keeping them all is the choice here.
* operator_memory lists each device's rows in the order msprof's Python calculator appends them: at
  each release, then the allocations never released (the ``memory`` table's GE order,
  :mod:`~profstream.engine.operators.memory`). A release whose allocation was not captured makes no
  row, as in both of msprof's calculators (msprof_outputs.md §2.8 and msprof's documentation speak of
  a negative Size). An allocation never released prints ``0.0`` as its Duration and release totals:
  ``NpuOpMemCalculator`` stores ``NumberConstant.NULL_NUMBER`` (0) there and ``NpuOpMemViewer``
  rounds it as any other value.
* npu_module_mem follows msprof's Python viewer (``NpuModuleMemViewer._npu_module_mem_reformat``): it
  rounds only positive sizes and prints the others as they are, an empty module's integer ``0`` and a
  release-only sample's ``-1``; the C++ assembler prints ``std::to_string`` of the KB
  (``NpuModuleMemAssembler::AssembleData``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.layouts._outputs import (
    Cell,
    Context,
    Format,
    Limits,
    Output,
    Processes,
    Source,
    Spool,
    SummaryOutput,
    TimelineOutput,
    after_collection_start,
    key_order,
    split_by,
    stamp,
)
from profstream.engine.layouts.timeline import (
    StepTrace,
    cann_layers,
    default_task_type,
    duration,
    map_text,
    stored_task_type,
    syscnt_ticks,
    syscnt_us,
    text,
)
from profstream.engine.operators import pmu
from profstream.engine.operators.hbm import DIRECTIONS
from profstream.engine.operators.memory import MODULE_NAMES
from profstream.engine.operators.settled import SettledLaunches
from profstream.engine.operators.statistics import (
    COMMUNICATION_TASK_TYPES,
    HIDDEN_CORE_TYPES,
    TaskWaitTime,
    sub_task_parents,
    task_time_groups,
)
from profstream.engine.operators.task_rows import is_op_row
from profstream.engine.schema import NO_ID
from profstream.sinks import SliceNaming, msprof_slice_names
from profstream.sinks._base import StagedFile
from profstream.sinks._format import float_text

OUTPUT_DIR = "mindstudio_profiler_output"
#: task types op_summary leaves out (C++ ``INVALID_TASK_TYPE``): op_statistic's hidden core types and
#: the communication task types, of which it keeps ``...AivKernel`` ops (``StrConstant.AIV_KERNEL``)
EXCLUDED_TASK_TYPES = sorted(HIDDEN_CORE_TYPES | COMMUNICATION_TASK_TYPES)
AIV_KERNEL_SUFFIX = "AivKernel"
#: README descriptions of the modules profstream writes (paraphrased from msprof's
#: ``FilenameIntroductionConfig`` topics)
DESCRIPTIONS = {
    "msprof": "Timeline of the whole run: device tasks, CANN APIs, communication, overlap analysis, "
    "step trace, NPU memory and HBM bandwidth\n",
    "step_trace": "Step Trace layer of the timeline: iterations, FP/BP and all-reduce slices\n",
    "op_summary": "One row per device task matched to an operator, with AI Core PMU metrics\n",
    "op_statistic": "Device task time per operator type and core type\n",
    "task_time": "One row per device task: kernel name, type, stream, task id and times\n",
    "api_statistic": "Host CANN API time per level and API name\n",
    "step_trace_csv": "Per iteration: FP/BP times, iteration time, refresh, data augmentation and reduces\n",
    "communication_statistic": "Communication operator time per operator type\n",
    "npu_mem": "Application and device memory on the NPU over time (KB)\n",
    "npu_module_mem": "Memory reserved by each NPU component over time (KB)\n",
    "memory_record": "Total memory allocated and reserved by GE over time (KB)\n",
    "l2_cache": "L2 cache hit and victim rates of each task, with its operator\n",
    "hbm": "Average HBM read and write bandwidth, of all HBM units and of each (MB/s)\n",
    "operator_memory": "Memory each operator allocated, with allocation time and duration\n",
}


def scaled(source: Source, divisor: float) -> Callable[[pa.RecordBatch], pa.Array]:
    """A column (or a function of a batch) as floats over ``divisor`` (bytes -> KB or MB, ns -> µs)."""

    def values(batch: pa.RecordBatch) -> pa.Array:
        numbers = batch.column(source) if isinstance(source, str) else source(batch)
        return pc.divide(pc.cast(numbers, pa.float64()), divisor)

    return values


def zero_if_absent(column: str) -> Callable[[pa.RecordBatch], pa.Array]:
    """A column with 0 where it has no value."""
    return lambda batch: pc.fill_null(batch.column(column), 0)


def kilobytes(header: str, source: Source, divisor: float = 1024.0, null: str = "N/A") -> Cell:
    """bytes as KB (or MB with ``divisor`` 1024²) rounded to 3 decimals, as msprof's memory viewers
    print them (``viewer/npu_mem_viewer.py``, ``npu_mem_rec_viewer.py``, ``npu_op_mem_viewer.py``)."""
    values = scaled(source, divisor)
    return Cell(header, lambda batch: pc.round(values(batch), 3), null=null)


def _module_kilobytes(batch: pa.RecordBatch) -> pa.Array:
    """npu_module_mem's KB text: rounded to 3 decimals, the integer ``0`` for an empty module."""
    sizes = batch.column("total_reserved_bytes")
    kilobytes = pc.round(pc.divide(pc.cast(sizes, pa.float64()), 1024.0), 3)
    return pc.if_else(pc.equal(sizes, 0), pa.scalar("0"), float_text(kilobytes))


def metric_header(name: str) -> str:
    """A PMU column's header: msprof's name and its unit (``aicore_time(us)``, ``aic_l0a_read_bw(GB/s)``)."""
    if name.endswith("_time"):
        return f"{name}(us)"
    if name.endswith("_bw") or "_bw_" in name:
        return f"{name}(GB/s)"
    if name.endswith("_datas"):
        return f"{name}(KB)"
    if name == "cube_utilization":
        return f"{name}(%)"
    return name


def _context_id(batch: pa.RecordBatch) -> pa.Array:
    values = batch.column("context_id")
    return pc.if_else(pc.equal(values, NO_ID), pa.scalar(None, values.type), values)


def op_summary_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The device tasks msprof's op_summary lists (module docstring), and every communication op row
    of a ``task_rows`` batch."""
    task_type = text(batch.column("task_type"))
    aiv_kernel = pc.and_(  # communication kernels on the AI Vector cores stay (module docstring)
        pc.is_in(task_type, pa.array(sorted(COMMUNICATION_TASK_TYPES))),
        pc.ends_with(text(batch.column("op_name")), AIV_KERNEL_SUFFIX),
    )
    keep = pc.and_(
        pc.and_(pc.is_valid(text(batch.column("op_type"))), pc.invert(sub_task_parents(batch))),
        pc.or_(
            pc.invert(pc.is_in(task_type, pa.array(EXCLUDED_TASK_TYPES))), pc.fill_null(aiv_kernel, False)
        ),
    )
    return batch.filter(pc.or_(pc.fill_null(keep, True), is_op_row(batch)))


def communication_statistic_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A device's communication_statistic rows, none when no op has a type: msprof writes the file only
    when some op type is known (``mscalculate/hccl/hccl_calculator.py`` ``_generate_hccl_op_info``)."""
    return batch if batch.column("op_type").null_count < batch.num_rows else batch.slice(0, 0)


#: the op_summary columns torch_npu keeps without AI Core metrics (framework_outputs.md §3.2;
#: ``CsvHeaders.OP_SUMMARY_SHOW_HEADERS``)
SHORT_HEADERS = (
    "Op Name",
    "OP Type",
    "Task Type",
    "Task Start Time(us)",
    "Task Duration(us)",
    "Task Wait Time(us)",
    "Block Num",
)


def task_cells(context: Context, names: dict[str, str], *, short: bool = False) -> list[Cell]:
    """The op_summary / kernel_details columns (``names`` renames headers, torch_npu's way; ``short``:
    kernel_details' columns when no AI Core metrics were collected)."""

    def head(header: str) -> str:
        return names.get(header, header)

    cells = [
        Cell(head("Model ID"), "model_id"),
        Cell(head("Task ID"), "task_id"),
        Cell(head("Stream ID"), "stream_id"),
        Cell(head("Op Name"), "op_name"),
        Cell(head("OP Type"), "op_type"),
        Cell(head("OP State"), "op_state"),
        Cell(head("Task Type"), "task_type"),
        stamp(head("Task Start Time(us)"), "start_ns"),
        Cell(head("Task Duration(us)"), duration, "duration_us"),
        Cell(head("Task Wait Time(us)"), "wait_ns", "duration_us", null=FIRST_WAIT),
        Cell(head("Block Num"), "block_dim"),
    ]
    if context.stars:
        cells.append(Cell(head("Mix Block Num"), "mix_block_dim"))
    cells += [
        Cell(head("HF32 Eligible"), "hf32_eligible"),
        Cell(head("Input Shapes"), quoted("input_shapes")),
        Cell(head("Input Data Types"), "input_data_types"),
        Cell(head("Input Formats"), "input_formats"),
        Cell(head("Output Shapes"), quoted("output_shapes")),
        Cell(head("Output Data Types"), "output_data_types"),
        Cell(head("Output Formats"), "output_formats"),
    ]
    if context.stars:
        cells.append(Cell(head("Context ID"), _context_id))
    if short:
        return [cell for cell in cells if cell.header in {head(h) for h in SHORT_HEADERS}]
    cells += [metric_cell(name, metric_header(name)) for name in context.metric_columns]
    return cells


def quoted(column: str) -> Callable[[pa.RecordBatch], pa.Array]:
    """A shape column wrapped in ``"``, as msprof stores shapes; the CSV sink doubles those quotes and
    quotes the cell, so the file shows three quotes on each side, as msprof_behaviour.md observed and
    msinsight-torchnpu-910b's kernel_details.csv shows (also for a shape without a comma). Null stays
    null (``N/A``)."""

    def values(batch: pa.RecordBatch) -> pa.Array:
        return map_text(
            batch.column(column), lambda shapes: pc.binary_join_element_wise('"', shapes, '"', "")
        )

    return values


#: the PMU columns msprof's Python path appends after its SQL, with the integer ``0`` where it computes
#: nothing (``viewer/runtime_report.py`` ``cube_usage`` / ``add_mem_bound`` append ``0``)
APPENDED_METRICS = ("cube_utilization", "memory_bound")


def metric_cell(name: str, header: str) -> Cell:
    """A PMU column as op_summary prints it: cycle counts as integers, every other float rounded to 3
    decimals (the SQL ``round(col, 3)`` msprof applies to each column without ``cycles`` in its name,
    ``viewer/ai_core_op_report.py`` ``_get_ai_core_float_cols``; real kernel_details shows ``0.186`` and
    ``2910056``). :data:`APPENDED_METRICS` print a zero as ``0``, as the real kernel_details' idle
    ``cube_utilization(%)`` cells do (the rare usage that rounds to 0.0 would print ``0.0`` there)."""

    def values(batch: pa.RecordBatch) -> pa.Array:
        column = batch.column(name)
        if not pa.types.is_floating(column.type):
            return column
        if "cycles" in name:
            return pc.cast(column, pa.int64())
        rounded = pc.round(column, pmu.RATIO_DECIMALS)
        if name not in APPENDED_METRICS:
            return rounded
        return pc.if_else(pc.equal(rounded, 0.0), pa.scalar("0"), float_text(rounded))

    return Cell(header, values, "number" if name in APPENDED_METRICS else "raw")


class TaskRows(SummaryOutput):
    """op_summary / kernel_details: device task rows with one row per communication op merged in.

    msprof lists communication once per op, not per HCCL task (§2.1 "communication rows"; the real
    kernel_details.csv in shared/realdata shows them with Task ID ``N/A`` and type ``HCCL``, Block
    Num 0, the rest ``N/A``). The pipeline merges them by start time (``task_rows``,
    :mod:`~profstream.engine.operators.task_rows`), so the wait time runs over both as msprof
    computes it and the rows stream out as the pipeline runs; this output names the op rows' task
    type ``label`` and keeps the task rows op_summary lists (:func:`op_summary_rows`).

    The communication tasks it keeps (``...AivKernel`` ops, typed ``HCCL`` here) are named ``label``
    too: msprof keeps such a task only as GE's communication type and prints that name
    (``AiCoreOpReport._union_task_ge_ai_core_data`` tests ``COMMUNICATION``; the C++ maps GE task type
    9 to ``COMMUNICATION``, ``NumberMapping`` ``geTaskTypeMap``), as it names its op rows.
    """

    def __init__(
        self, context: Context, name: str | SliceNaming, cells: Sequence[Cell], *, label: str, **options: Any
    ) -> None:
        super().__init__(context, "task_rows", name, cells, rows=self._listed, **options)
        self._label = pa.scalar(label)

    def _listed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = op_summary_rows(batch)
        task_type = text(batch.column("task_type"))
        labelled = pc.or_(is_op_row(batch), pc.fill_null(pc.equal(task_type, "HCCL"), False))
        task_type = pc.if_else(labelled, self._label, task_type)
        return batch.set_column(batch.schema.get_field_index("task_type"), "task_type", task_type)


#: what an l2_cache output keeps of a ``tasks`` row to name L2 cache rows
_OP_NAMES = pa.schema(
    [("stream_id", pa.int64()), ("task_id", pa.int64()), ("time_ns", pa.int64()), ("op_name", pa.string())]
)


class L2CacheRows(SummaryOutput):
    """l2_cache: the ``l2_cache`` rows of each device in record order, named at close.

    msprof names a row after the op of the last GE task record (node info) with its (task id,
    stream id), over the whole run (``DataManager.get_op_dict``), so a name is final only at the end:
    the rows are spooled per device, and each device keeps the op of the latest named task of every
    (stream, task) pair seen (at most one per pair, :class:`SettledLaunches`). A pair without one
    prints ``N/A``. Hit Rate is ``N/A`` on STARS chips (:mod:`~profstream.engine.operators.l2_cache`).
    """

    def __init__(
        self, context: Context, name: str | SliceNaming, *, device_column: bool, **options: Any
    ) -> None:
        def hit_rate(batch: pa.RecordBatch) -> pa.Array:
            return pa.nulls(batch.num_rows, pa.float64()) if context.stars else batch.column("hit_rate")

        cells = [
            *([Cell("Device_id", "device_id")] if device_column else []),
            Cell("Stream Id", "stream_id"),
            Cell("Task Id", "task_id"),
            Cell("Hit Rate", hit_rate),
            Cell("Victim Rate", "victim_rate"),
            Cell("Op Name", "op_name"),
        ]
        super().__init__(context, "l2_cache", name, cells, spool=True, **options)
        self.tables = ("l2_cache", "tasks")
        self._names: dict[int, SettledLaunches] = {}  # per device

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "l2_cache":
            super().write(table, batch)
            return
        named = batch.filter(pc.is_valid(batch.column("op_state")))
        for device, rows in split_by(named, named.column("device_id")):
            launches = {
                "stream_id": rows.column("stream_id").cast(pa.int64()),
                "task_id": rows.column("task_id").cast(pa.int64()),
                "time_ns": rows.column("start_ns"),
                "op_name": rows.column("op_name").cast(pa.string()),
            }
            self._names.setdefault(device, SettledLaunches(_OP_NAMES)).add(pa.table(launches))

    def _replay(self) -> Iterator[pa.RecordBatch]:
        for batch in super()._replay():
            names = self._names.get(batch.column("device_id")[0].as_py(), SettledLaunches(_OP_NAMES))
            stream, task = (batch.column(n).to_numpy().astype(np.int64) for n in ("stream_id", "task_id"))
            op_name = names.take(names.slots(stream, task)).column("op_name").combine_chunks()
            yield batch.append_column("op_name", op_name)


#: hbm's cells after Device_id: (header, column)
HBM_CELLS = (("Metric", "metric"), ("Read(MB/s)", "read"), ("Write(MB/s)", "write"))


def _three_places(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.000"))).replace("E", "e")


def hbm_average(means: Sequence[float | None]) -> str:
    """The Average of hbm csv: msprof's ``float_calculate`` (``common_func/msvp_common.py``) of the per-unit
    means, summed in ``Decimal`` and rounded to 3 places, then divided by the number of units and rounded
    again (``ROUND_HALF_EVEN``); ``0.000`` when a unit has no mean (``float_calculate`` gives ``0`` then)."""
    if not means:
        return "0"
    total = "0" if None in means else _three_places(sum((Decimal(str(m)) for m in means), Decimal(0)))
    return _three_places(Decimal(total) / Decimal(len(means)))


def hbm_unit_cells(read: float | None, write: float | None) -> tuple[float | None, float | None]:
    """A unit's Read and Write values as msprof's ``_format_hbm_data`` gives them: rounded to 3 places,
    except that a read mean of 0 or none gives the write mean as it is (msprof's own slip, kept)."""
    return (round(read, 3) if read else write, round(write, 3) if write else write)


class HbmSummary(SummaryOutput):
    """hbm: per device the mean bandwidth over the ``hbm`` rows, an ``Average`` row then one per HBM id.

    msprof's Python (``viewer/get_msvp_summary_training.py`` ``get_hbm_summary_data``): a unit's mean is the
    sum of its bandwidths over their number, per direction (none without rows); the first row is
    :func:`hbm_average`, then the units by id with :func:`hbm_unit_cells`. Only sums and counts are kept.
    The cells keep msprof's types, which differ by row: the Average row's texts, each unit's integer id
    (the ``hbmid`` INT column) and float means, none for a direction without rows. A CSV prints them as
    ``csv.writer`` does (none empty); ``--format json`` as ``json.dump`` does (``create_json``): the
    Average cells strings, the id and means numbers, none ``null``. So each cell is held as its text in
    the output's format and printed as it is (unit ``number``).
    """

    def __init__(self, context: Context, name: str | SliceNaming, **options: Any) -> None:
        super().__init__(context, "hbm", name, [], by_device=False, **options)
        self.cells = [
            Cell("Device_id", "device_id"),
            *(Cell(header, column, "number", null="") for header, column in HBM_CELLS),
        ]
        # per (device, hbm id, direction): the bandwidths' partial sums and their count
        self._sums: dict[tuple[int, int, str], tuple[list[float], int]] = {}

    def _text(self, value: str | int | float | None) -> str | None:
        if self.fmt == "json":
            return json.dumps(value)
        return None if value is None else repr(value) if isinstance(value, float) else str(value)

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        for device, rows in split_by(batch, batch.column("device_id")):
            units = rows.column("hbm_id").to_numpy()
            directions = text(rows.column("event")).to_numpy(zero_copy_only=False)
            values = rows.column("bandwidth").to_numpy()
            for unit in np.unique(units):
                for direction in DIRECTIONS:
                    chosen = values[(units == unit) & (directions == direction)]
                    partial, count = self._sums.get((device, int(unit), direction), ([], 0))
                    partial.append(math.fsum(chosen.tolist()))
                    self._sums[(device, int(unit), direction)] = (partial, count + len(chosen))

    def _replay(self) -> Iterator[pa.RecordBatch]:
        for device in key_order({device for device, _, _ in self._sums}):
            units = sorted({unit for d, unit, _ in self._sums if d == device})
            means = {
                (unit, direction): (math.fsum(partial) / count if count else None)
                for (d, unit, direction), (partial, count) in self._sums.items()
                if d == device
            }
            reads = [means[(unit, "read")] for unit in units]
            writes = [means[(unit, "write")] for unit in units]
            rows: list[tuple[str | int, str | float | None, str | float | None]] = [
                ("Average", hbm_average(reads), hbm_average(writes))
            ]
            rows += [(unit, *hbm_unit_cells(r, w)) for unit, r, w in zip(units, reads, writes, strict=True)]
            yield pa.RecordBatch.from_pydict(
                {
                    "device_id": pa.array([device] * len(rows), pa.int32()),
                    **{
                        column: pa.array([self._text(row[i]) for row in rows], pa.string())
                        for i, (_, column) in enumerate(HBM_CELLS)
                    },
                }
            )


class WaitTime:
    """Adds ``wait_ns`` to rows in (device, start) order (op_summary's Task Wait Time, §2.1), then keeps
    the rows msprof keeps after the device's collection start, compared as texts
    (:func:`after_collection_start` ``as_text``; ``get_op_summary_data``): a row starting or ending at
    it is kept.

    The wait runs over every row, the left-out ones too, and the first row a device keeps gets a null
    wait, which msprof writes as the integer ``0`` (:data:`FIRST_WAIT`): it computes the waits before
    filtering and then zeroes the first kept row (``AiCoreOpReport._format_summary_data``,
    ``get_op_summary_data``; msinsight-torchnpu-910b's kernel_details.csv shows the ``0``).
    """

    def __init__(self, context: Context) -> None:
        self._wait = TaskWaitTime()
        self._starts = context.collection_start_ns
        self._opened: set[int] = set()  #: devices whose first kept row has been written

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        devices = batch.column("device_id").to_numpy()
        wait = self._wait(batch.column("start_ns").to_numpy(), batch.column("end_ns").to_numpy(), devices)
        kept = after_collection_start(batch, self._starts, as_text=True)
        first = np.zeros(len(kept), np.bool_)
        for device in np.unique(devices[kept]).tolist():
            if device not in self._opened:
                self._opened.add(device)
                first[np.flatnonzero(kept & (devices == device))[0]] = True
        batch = batch.append_column("wait_ns", pa.array(wait, mask=first))
        return batch if kept.all() else batch.filter(pa.array(kept))


#: how a device's first Task Wait Time prints (the other rows are rounded µs floats)
FIRST_WAIT = "0"


def task_time_type(batch: pa.RecordBatch) -> pa.Array:
    """task_time's kernel_type: the GE task type msprof's ``TaskGear`` stored for the task
    (:func:`~profstream.engine.layouts.timeline.stored_task_type`: of an HCCL task only a kernel has
    one, ``COMMUNICATION``), else its runtime or device type
    (:func:`~profstream.engine.layouts.timeline.default_task_type`; ``TaskOpViewer._reformat_task_info``):
    a notify or copy task prints its runtime type (``NOTIFY_WAIT``, ``MEMCPY_ASYNC`` ...), as the 2023
    910 timeline in shared/realdata types them."""
    return pc.coalesce(stored_task_type(batch), default_task_type(batch))


def _statistic_cells(head: Sequence[Cell]) -> list[Cell]:
    return [
        *head,
        Cell("OP Type", "op_type"),
        Cell("Core Type", "core_type"),
        Cell("Count", "count"),
        Cell("Total Time(us)", "total_ns", "duration_us"),
        Cell("Min Time(us)", "min_ns", "duration_us"),
        Cell("Avg Time(us)", lambda b: pc.round(pc.divide(b.column("avg_ns"), 1000.0), 3)),
        Cell("Max Time(us)", "max_ns", "duration_us"),
        Cell("Ratio(%)", lambda b: pc.round(b.column("ratio"), 3)),
    ]


def api_statistic_cells(head: Sequence[Cell], level: Source = "level") -> list[Cell]:
    """api_statistic's columns after the optional Device_id (§2.5); ``level`` renames levels."""
    return [
        *head,
        Cell("Level", level),
        Cell("API Name", "name"),
        Cell("Time(us)", lambda b: pc.round(b.column("total_us"), 3)),
        Cell("Count", "count"),
        Cell("Avg(us)", lambda b: pc.round(b.column("avg_us"), 3)),
        Cell("Min(us)", lambda b: pc.round(b.column("min_us"), 3)),
        Cell("Max(us)", lambda b: pc.round(b.column("max_us"), 3)),
        Cell("Variance", lambda b: pc.round(b.column("variance"), 3)),
    ]


def op_statistic_cells(head: Sequence[Cell]) -> list[Cell]:
    """op_statistic's columns after the optional Device_id (§2.2)."""
    return _statistic_cells(head)


def device_type(batch: pa.RecordBatch) -> pa.Array:
    """``NPU:{device}``, as the memory files print the device."""
    return pc.binary_join_element_wise("NPU:", text(batch.column("device_id")), "")


#: npu_module_mem component names back to their module ids (a name msprof lacks is the id itself)
MODULE_IDS = {name: module for module, name in MODULE_NAMES.items()}


def module_keys(batch: pa.RecordBatch) -> pa.Array:
    """Each row's module id, zero-padded so that the texts sort as the numbers (spool keys)."""
    component = batch.column("component")
    if isinstance(component, pa.ChunkedArray):
        component = component.combine_chunks()
    if not pa.types.is_dictionary(component.type):
        component = pc.dictionary_encode(component)
    ids = [MODULE_IDS[name] if name in MODULE_IDS else int(name) for name in component.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(component.indices, pa.array([f"{m:010d}" for m in ids]))


class ModuleMemory(SummaryOutput):
    """npu_module_mem: each device's rows by module id, then time, as msprof sorts them (C++
    ``NpuModuleMemAssembler::AssembleData``; Python ``NpuAiStackMemTableSelector``, ``order by
    module_id asc, syscnt asc``; the real files in shared/realdata list module after module).

    The rows come in time order with the modules interleaved: each device's rows are spooled, and at
    the end split into one spool per module (one device's modules open at a time), each module's
    rows sorted by time as they are read back.
    """

    def __init__(
        self, context: Context, name: str | SliceNaming, cells: Sequence[Cell], **kwargs: Any
    ) -> None:
        super().__init__(context, "npu_module_mem", name, cells, spool=True, **kwargs)

    def _replay(self) -> Iterator[pa.RecordBatch]:
        if not isinstance(self._spool, Spool) or self._spool_dir is None:
            return
        for device in self._spool.pending():
            modules = Spool(self._spool_dir, f"module-{device}")
            for batch in self._spool.read(device):
                for key, rows in split_by(batch, module_keys(batch)):
                    modules.write(key, rows)
            for key in modules.pending():
                rows = pa.Table.from_batches(list(modules.read(key))).sort_by("time_ns")
                yield from rows.combine_chunks().to_batches()


class StepTraceCsv(SummaryOutput):
    """step_trace_{ts}: one row per iteration, a header with as many Reduce pairs as the busiest
    iteration (§2.4), each row with its own pairs only (module docstring). Every iteration of the run,
    whatever ``--model-id/--iteration-id`` select: msprof's ``StepTraceViewer.get_step_trace_summary``
    reads the device's whole ``training_trace`` table (``MsProfExportDataUtils._get_step_trace_data``
    passes it no iteration)."""

    windowed = False

    def __init__(self, context: Context, fmt: Format) -> None:
        suffix = f".{fmt}"
        super().__init__(
            context,
            "steps",
            msprof_slice_names("step_trace", context.timestamp, suffix),
            [],
            fmt=fmt,
            rows=self._iterations,
            spool=True,
        )

    def _iterations(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Model iterations and 60000/60001 steps, less those before the collection start
        (``get_step_trace_summary``): msprof's ``training_trace`` table holds both, the steps
        appended by ``CreateTrainingTrace.update_step_time`` with FP and BP 0, printed ``N/A``."""
        kind = pc.is_in(text(batch.column("kind")), pa.array(["model", "step"]))
        started = pa.array(after_collection_start(batch, self.context.collection_start_ns))
        return batch.filter(pc.and_(kind, started))

    def _replay(self) -> Iterator[pa.RecordBatch]:
        """Every iteration read back at once: the columns depend on the busiest one."""
        rows = list(super()._replay())
        if not rows:
            return
        table = pa.Table.from_batches(rows).sort_by([("device_id", "ascending"), ("end_ns", "ascending")])
        pairs = pc.max(pc.list_value_length(table.column("reduce_start_ns"))).as_py() or 0
        self.cells = [
            Cell("Device_id", "device_id"),
            Cell("Iteration ID", "iteration_id"),
            stamp("FP Start(us)", "fp_ns"),
            stamp("BP End(us)", "bp_ns"),
            stamp("Iteration End(us)", "end_ns"),
            Cell("Iteration Time(us)", self._span("start_ns", "end_ns")),
            Cell("FP to BP Time(us)", self._span("fp_ns", "bp_ns")),
            Cell("Iteration Refresh(us)", self._span("bp_ns", "end_ns")),
            Cell("Data Aug Bound(us)", self._span(None, "data_aug_ns")),
            Cell("Model ID", "model_id"),
        ]
        # --format json: one pair, the row's last (module docstring)
        picks = list(range(pairs)) if self.fmt == "csv" else [-1] * min(pairs, 1)
        for k in picks:
            self.cells += [
                stamp("Reduce Start(us)", functools.partial(_reduce, k=k, which="start"), null=None),
                Cell("Reduce Duration(us)", functools.partial(self._reduce_us, k=k), null=None),
            ]
        yield from table.combine_chunks().to_batches()

    def _span(self, start: str | None, end: str) -> Callable[[pa.RecordBatch], pa.Array]:
        """A duration column (``end`` minus ``start``, or ``end`` itself when ``start`` is None) as
        :func:`~.timeline.syscnt_us` floats; a span of 0 ticks is ``N/A``, as msprof stores an absent
        value as 0 and its query prints every 0 ``N/A`` (``StepTraceViewer.get_step_trace_data``)."""

        def values(batch: pa.RecordBatch) -> pa.Array:
            delta = batch.column(end) if start is None else duration(batch, start, end)
            ticks = syscnt_ticks(self.context, batch, delta)
            ticks = pc.if_else(pc.equal(ticks, 0), pa.scalar(None, pa.int64()), ticks)
            return syscnt_us(self.context, batch, ticks)

        return values

    def _reduce_us(self, batch: pa.RecordBatch, k: int) -> pa.Array:
        """The ``k``-th Reduce Duration, rounded to 3 places from its ticks (:func:`~.timeline.syscnt_us`)."""
        ticks = syscnt_ticks(self.context, batch, _reduce_duration(batch, k))
        return syscnt_us(self.context, batch, ticks, places=3)


def _reduce(batch: pa.RecordBatch, k: int, which: str) -> pa.Array:
    """Each row's ``k``-th Reduce start or end (``k`` -1: its last), null where it has none."""
    values = batch.column(f"reduce_{which}_ns")
    lengths = np.asarray(pc.list_value_length(values).fill_null(0).to_numpy(), np.int64)
    flat = np.asarray(pc.list_flatten(values).to_numpy(), np.int64)
    ends = np.cumsum(lengths)
    index = ends - 1 if k < 0 else ends - lengths + k
    present = lengths > max(k, 0)
    picked = np.zeros(len(lengths), np.int64)
    picked[present] = flat[index[present]]
    return pa.array(picked, mask=~present)


def _reduce_duration(batch: pa.RecordBatch, k: int) -> pa.Array:
    return pc.subtract(_reduce(batch, k, "end"), _reduce(batch, k, "start"))


def summary_outputs(context: Context, fmt: Format) -> list[Output]:
    """Every summary file of the msprof layout."""
    ts, suffix = context.timestamp, f".{fmt}"

    def named(module: str) -> SliceNaming:
        return msprof_slice_names(module, ts, suffix)

    device = Cell("Device_id", "device_id")
    first_device = Cell(
        "Device_id", lambda b: pa.array([context.devices[0] if context.devices else 0] * b.num_rows)
    )
    wait = WaitTime(context)
    outputs: list[Output] = [
        TaskRows(
            context,
            named("op_summary"),
            [device, *task_cells(context, {})],
            label="COMMUNICATION",
            fmt=fmt,
            frame=wait,
        ),
        SummaryOutput(
            context,
            "op_statistic",
            named("op_statistic"),
            op_statistic_cells([device]),
            fmt=fmt,
            by_device=False,
        ),
        SummaryOutput(
            context,
            "task_rows",  # op_summary's rows, its op rows left out: the writer process gets one stream
            named("task_time"),
            [
                device,
                Cell("kernel_name", "kernel_name"),
                Cell("kernel_type", task_time_type),
                Cell("stream_id", "stream_id"),
                Cell("task_id", "task_id"),
                Cell("task_time(us)", duration, "duration_us"),
                stamp("task_start(us)", "start_ns"),
                stamp("task_stop(us)", "end_ns"),
            ],
            fmt=fmt,
            # msprof leaves out tasks before the collection start, comparing texts
            # (TaskOpViewer.get_task_op_summary)
            rows=lambda b: b.filter(
                pc.and_(
                    pc.and_(pc.invert(is_op_row(b)), pa.array(task_time_groups(b))),
                    pa.array(after_collection_start(b, context.collection_start_ns, as_text=True)),
                )
            ),
        ),
        SummaryOutput(
            context,
            "api_statistic",
            named("api_statistic"),
            api_statistic_cells([first_device]),
            fmt=fmt,
            by_device=False,
        ),
        StepTraceCsv(context, fmt),
        SummaryOutput(
            context,
            "comm_statistic",
            named("communication_statistic"),
            [
                device,
                Cell("OP Type", "op_type"),
                Cell("Count", "count"),
                Cell("Total Time(us)", "total_ns", "duration_us"),
                Cell("Min Time(us)", "min_ns", "duration_us"),
                Cell("Avg Time(us)", lambda b: pc.round(pc.divide(b.column("avg_ns"), 1000.0), 3)),
                Cell("Max Time(us)", "max_ns", "duration_us"),
                Cell("Ratio(%)", lambda b: pc.round(b.column("ratio"), 3)),
            ],
            fmt=fmt,
            by_device=False,
            rows=communication_statistic_rows,
        ),
        SummaryOutput(
            context,
            "npu_mem",
            named("npu_mem"),
            [
                device,
                Cell("event", "event"),
                kilobytes("ddr(KB)", "ddr_bytes"),
                kilobytes("hbm(KB)", "hbm_bytes"),
                kilobytes("memory(KB)", lambda b: pc.add(b.column("ddr_bytes"), b.column("hbm_bytes"))),
                stamp("timestamp(us)", "time_ns"),
            ],
            fmt=fmt,
        ),
        ModuleMemory(
            context,
            named("npu_module_mem"),
            [
                device,
                Cell("Component", "component"),
                stamp("Timestamp(us)", "time_ns"),
                # a release-only sample prints as the integer -1, an empty module as the integer 0
                # (NpuModuleMemViewer._npu_module_mem_reformat)
                Cell("Total Reserved(KB)", _module_kilobytes, "number", null="-1"),
                Cell("Device", device_type),
            ],
            fmt=fmt,
        ),
        *([L2CacheRows(context, named("l2_cache"), device_column=True, fmt=fmt)] if context.l2_cache else []),
        HbmSummary(context, named("hbm"), fmt=fmt),
        SummaryOutput(
            context,
            "memory_record",
            named("memory_record"),
            [
                device,
                Cell("Component", "component"),
                stamp("Timestamp(us)", "time_ns"),
                kilobytes("Total Allocated(KB)", "total_allocated"),
                kilobytes("Total Reserved(KB)", "total_reserved"),
                Cell("Device", device_type),
            ],
            fmt=fmt,
            rows=lambda b: b.filter(pc.equal(text(b.column("component")), "GE")),
        ),
        SummaryOutput(
            context,
            "memory",
            named("operator_memory"),
            [
                device,
                Cell("Name", "name"),
                kilobytes("Size(KB)", "size_bytes"),
                stamp("Allocation Time(us)", "alloc_ns"),
                # never released: msprof's 0 (module docstring)
                Cell("Duration(us)", zero_if_absent("duration_ns"), "duration_us"),
                kilobytes("Allocation Total Allocated(KB)", "alloc_total_allocated"),
                kilobytes("Allocation Total Reserved(KB)", "alloc_total_reserved"),
                kilobytes("Release Total Allocated(KB)", zero_if_absent("release_total_allocated")),
                kilobytes("Release Total Reserved(KB)", zero_if_absent("release_total_reserved")),
                Cell("Device", device_type),
            ],
            fmt=fmt,
            rows=lambda b: b.filter(pc.equal(text(b.column("source")), "GE")),
        ),
    ]
    return outputs


def timeline_outputs(context: Context, limits: Limits) -> list[TimelineOutput]:
    """``msprof_{ts}.json`` and ``step_trace_{ts}.json``; the budget covers both (module docstring)."""
    processes = Processes()
    main = TimelineOutput(
        context.out_dir,
        msprof_slice_names("msprof", context.timestamp, ".json"),
        cann_layers(context, processes),
        limits,
    )
    steps = TimelineOutput(
        context.out_dir,
        msprof_slice_names("step_trace", context.timestamp, ".json"),
        [StepTrace(context, Processes())],
        Limits(limits.max_file_bytes, limits.max_file_events),
    )
    return [main, steps]


def write_readme(out_dir: Path) -> Path:
    """README.txt: the modules of the ``*.json`` and ``*.csv`` files in ``out_dir`` (§1.3)."""
    lines = []
    for title, pattern in (
        ("Timeline file description:\n", "*.json"),
        ("Summary file description:\n", "*.csv"),
    ):
        lines.append(title)
        modules = sorted({_module(p.name) for p in out_dir.glob(pattern)})
        for k, module in enumerate(modules, 1):
            key = "step_trace_csv" if module == "step_trace" and pattern == "*.csv" else module
            description = DESCRIPTIONS.get(
                key,
                f"Here is no description about this file: {module}, "
                "please check in 'Profiling Instructions'!\n",
            )
            lines.append(f"{k}.{module}.{pattern[2:]}:{description}")
        lines.append("\n")
    staged = StagedFile(out_dir, "README.txt")
    staged.write("".join(lines).encode())
    return staged.commit("README.txt")


def _module(name: str) -> str:
    """The module of ``{module}[_slice_{n}]_{ts}.{ext}`` (msprof_outputs.md §1.2)."""
    stem = name.rsplit(".", 1)[0]
    stem = stem.rsplit("_", 1)[0]
    head, sep, _ = stem.rpartition("_slice_")
    return head if sep else stem
