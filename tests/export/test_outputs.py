"""Layout outputs: SummaryOutput's spooled, keyed and ordered replay."""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.codecs import get_codec
from profstream.codecs._base import DecodeContext
from profstream.engine import schema
from profstream.engine.clock import TickRate
from profstream.engine.discovery import discover
from profstream.engine.imports import csv_tables
from profstream.engine.layouts._outputs import (
    Cell,
    Context,
    Format,
    Processes,
    SortedSpool,
    SummaryOutput,
    after_collection_start,
    split_by,
)
from profstream.engine.layouts.msprof import (
    WaitTime,
    communication_statistic_rows,
    metric_cell,
    op_summary_rows,
    summary_outputs,
)
from profstream.engine.layouts.timeline import (
    AscendHardware,
    Cann,
    PrunedCann,
    StepTrace,
    default_task_type,
    logic_streams,
)
from profstream.engine.layouts.torch_npu import _steps_of
from profstream.engine.layouts.torch_npu import summary_outputs as torch_npu_summary
from profstream.engine.operators.launches import kernel_rows
from profstream.engine.schema import NO_ID
from profstream.export import layout_context
from profstream.simulate import SimulationConfig, simulate
from profstream.sinks import CompleteEvents, FlowEvents, MetadataEvents

SCHEMA = pa.schema([("device_id", pa.int32()), ("part", pa.int64()), ("at", pa.int64()), ("seq", pa.int64())])


def _context(out: Path) -> Context:
    return Context(
        out_dir=out,
        timestamp="20260101000000",
        wall_offset_ns=0,
        devices=(0,),
        metric_columns=(),
        stars=True,
        process_id=1,
    )


def _ordered_output(out: Path) -> SummaryOutput:
    return SummaryOutput(
        _context(out),
        "memory",
        "ordered.csv",
        [Cell("Part", "part"), Cell("At", "at", null=""), Cell("Seq", "seq")],
        key=lambda b: b.column("part"),
        order="at",
    )


def _written(out: Path) -> list[tuple[int, int | None, int]]:
    with (out / "ordered.csv").open(newline="") as f:
        return [(int(r["Part"]), int(r["At"]) if r["At"] else None, int(r["Seq"])) for r in csv.DictReader(f)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(0, 50))), min_size=1, max_size=80),
    st.integers(1, 9),
)
def test_ordered_replay_sorts_each_key_by_the_order_column(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int | None]], size: int
) -> None:
    """Whatever the arrival order and batching: key by key, rows by ``order``, absent values last."""
    out = tmp_path_factory.mktemp("ordered")
    output = _ordered_output(out)
    table = pa.table(
        {
            "device_id": pa.array([0] * len(rows), pa.int32()),
            "part": pa.array([p for p, _ in rows], pa.int64()),
            "at": pa.array([a for _, a in rows], pa.int64()),
            "seq": pa.array(range(len(rows)), pa.int64()),
        },
        schema=SCHEMA,
    )
    for batch in table.to_batches(max_chunksize=size):
        output.write("memory", batch)
    output.close()
    written = _written(out)
    assert sorted(s for _, _, s in written) == list(range(len(rows)))  # every row once
    for part, at, seq in written:
        assert rows[seq] == (part, at)
    keys = [(part, at is None, at or 0) for part, at, _ in written]
    assert keys == sorted(keys)
    assert not list(out.glob(".spool-*"))


def test_rows_in_order_never_wait_in_the_late_spool(tmp_path: Path) -> None:
    """Batches that arrive in order pass straight to the main spool: nothing is held as late."""
    output = _ordered_output(tmp_path)
    for start in range(0, 30, 10):
        at = pa.array(range(start, start + 10), pa.int64())
        batch = pa.record_batch([pa.array([0] * 10, pa.int32()), pc.multiply(at, 0), at, at], schema=SCHEMA)
        output.write("memory", batch)
    assert isinstance(output._spool, SortedSpool)
    assert output._spool.late.pending() == []
    output.close()
    assert [at for _, at, _ in _written(tmp_path)] == list(range(30))


def test_order_needs_a_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="order needs a key"):
        SummaryOutput(_context(tmp_path), "memory", "x.csv", [Cell("At", "at")], order="at")


def test_op_summary_keeps_communication_kernels_on_the_vector_cores() -> None:
    """msprof drops communication tasks from op_summary except an op whose name ends in AivKernel
    (``AiCoreOpReport._filter_hccl_op``)."""
    batch = pa.RecordBatch.from_pydict(
        {
            "op_name": ["allreduceAivKernel", "allreduce", "MatMul", "x"],
            "op_type": ["HcomAllReduce", "HcomAllReduce", "MatMul", "WriteBack"],
            "task_type": ["HCCL", "HCCL", "AI_CORE", "WRITE_BACK"],
            "context_id": [NO_ID] * 4,
            "stream_id": [1, 1, 2, 2],
            "task_id": [1, 2, 3, 4],
            "batch_id": [0] * 4,
            "start_ns": [0, 10, 20, 30],
            "end_ns": [5, 15, 25, 35],
        }
    )
    assert op_summary_rows(batch).column("op_name").to_pylist() == ["allreduceAivKernel", "MatMul"]


def test_op_summary_keeps_a_task_starting_at_the_collection_start(tmp_path: Path) -> None:
    """msprof's op_summary filter compares the start cell, TAB-terminated by then, with the collection
    start's text (``get_op_summary_data``, ``Utils.filter_data_by_start_time_condition``): a task
    starting exactly at it is kept (``"S\t" > "S"``) and gets the first row's wait, one ending
    before it is left out; the wait still runs over the left-out row."""
    context = replace(_context(tmp_path), collection_start_ns={0: 1000})
    batch = pa.RecordBatch.from_pydict(
        {
            "device_id": pa.array([0, 0, 0], pa.int32()),
            "start_ns": [900, 1000, 1500],
            "end_ns": [950, 1200, 1600],
        }
    )
    framed = WaitTime(context)(batch)
    assert framed.column("start_ns").to_pylist() == [1000, 1500]
    assert framed.column("wait_ns").to_pylist() == [None, 300]


def test_op_summary_keeps_a_task_ending_at_the_collection_start(tmp_path: Path) -> None:
    """The end msprof compares is ``float_calculate`` of the start cell and the duration, a 3-decimal
    text, and ``"S" < "S.000"``: a task ending exactly at the collection start spans it."""
    context = replace(_context(tmp_path), collection_start_ns={0: 1000})
    batch = pa.RecordBatch.from_pydict(
        {
            "device_id": pa.array([0, 0, 0], pa.int32()),
            "start_ns": [800, 900, 1100],
            "end_ns": [999, 1000, 1200],
        }
    )
    assert WaitTime(context)(batch).column("start_ns").to_pylist() == [900, 1100]


def test_summaries_compare_the_collection_start_as_text_and_the_timeline_as_numbers() -> None:
    """``Utils.filter_data_by_start_time_condition`` on texts keeps rows starting or ending at S;
    ``MsprofTimeline.is_in_iteration`` on Decimals keeps one starting at S, not one ending at it."""
    batch = pa.RecordBatch.from_pydict(
        {
            "device_id": pa.array([0] * 5, pa.int32()),
            "start_ns": [500, 900, 1000, 900, 1001],
            "end_ns": [999, 1000, 1100, 1001, 1002],
        }
    )
    starts = {0: 1000}
    assert after_collection_start(batch, starts, as_text=True).tolist() == [False, True, True, True, True]
    assert after_collection_start(batch, starts, at_start=True).tolist() == [False, False, True, True, True]
    assert after_collection_start(batch, starts).tolist() == [False, False, False, True, True]


def _task_time(tmp_path: Path, columns: dict[str, object], start_ns: int) -> list[dict[str, str]]:
    context = replace(_context(tmp_path), collection_start_ns={0: start_ns})
    [output] = [
        o for o in summary_outputs(context, "csv") if type(o) is SummaryOutput and o.tables == ("task_rows",)
    ]
    output.write("task_rows", schema.conform(schema.tasks_schema(), columns))
    [path] = output.close()
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_task_time_names_and_types_tasks_as_current_msprof(tmp_path: Path) -> None:
    """kernel_name: the launch's task_track kernel name, else ``N/A`` (``TaskOpViewer._reformat_task_info``
    takes the host task's kernel name first). kernel_type: the stored GE type; of an HCCL task only a
    kernel has one, ``COMMUNICATION`` (``TaskGear.add_kernel_task``), a notify or copy task prints its
    runtime type (``TaskTimeViewer.get_task_type``). Tasks before the collection start (2000 ns) are
    left out, except one ending or starting at it (the text comparison of ``get_task_op_summary``)."""
    n = 6
    rows = _task_time(
        tmp_path,
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([1, 1, 5, 5, 5, 1], pa.int32()),
            "task_id": pa.array(range(1, n + 1), pa.int32()),
            "batch_id": pa.array([0] * n, pa.int32()),
            "context_id": pa.array([NO_ID] * n),
            "start_ns": pa.array([1000, 1500, 2000, 2100, 2200, 2300]),
            "end_ns": pa.array([1999, 2000, 2050, 2150, 2250, 2350]),
            "op_name": ["Add", "MatMul", "hcom_allReduce_1", "hcom_allReduce_1", "hcom_allReduce_1", None],
            "kernel_name": ["Add_k", None, "AllReduceAivKernel_k", None, None, None],
            "task_type": ["AI_VECTOR_CORE", "AI_CORE", "HCCL", "HCCL", "HCCL", None],
            "host_task_type": [
                "KERNEL_AIVEC",
                "KERNEL_AICORE",
                "KERNEL_AIVEC",
                "NOTIFY_WAIT",
                "MEMCPY_ASYNC",
                "EVENT_RECORD",
            ],
            "device_task_type": ["AI_CORE", "AI_CORE", "AI_CORE", "NOTIFY_WAIT", "SDMA", "EVENT_RECORD_SQE"],
        },
        2000,
    )
    assert [(r["task_id"], r["kernel_name"], r["kernel_type"]) for r in rows] == [
        ("2", "N/A", "AI_CORE"),
        ("3", "AllReduceAivKernel_k", "COMMUNICATION"),
        ("4", "N/A", "NOTIFY_WAIT"),
        ("5", "N/A", "MEMCPY_ASYNC"),
        ("6", "N/A", "EVENT_RECORD"),
    ]
    assert [r["task_start(us)"] for r in rows][:2] == ["1.500\t", "2.000\t"]


def test_appended_metrics_print_msprofs_integer_zero() -> None:
    """msprof's Python path appends ``0`` (an int) as cube usage and memory bound where it computes
    none (``viewer/runtime_report.py`` ``cube_usage``, ``add_mem_bound``): the real kernel_details
    prints ``0`` for an idle ``cube_utilization(%)``, while SQL-rounded ratios print ``0.0``."""
    batch = pa.RecordBatch.from_pydict(
        {
            "cube_utilization": [0.0, 66.30149, float("nan")],
            "memory_bound": [0.0, 1.5, float("nan")],
            "aic_mac_ratio": [0.0, 0.5194, float("nan")],
        }
    )
    for name in ("cube_utilization", "memory_bound"):
        assert metric_cell(name, name).values(batch, 0).to_pylist()[0] == "0"
    assert metric_cell("cube_utilization", "c").values(batch, 0).to_pylist()[1:] == ["66.301", None]
    assert metric_cell("aic_mac_ratio", "r").values(batch, 0).to_pylist()[:2] == [0.0, 0.519]


def test_communication_statistic_needs_one_typed_op() -> None:
    typed = pa.RecordBatch.from_pydict({"op_type": ["hcom_allReduce_", None], "count": [1, 2]})
    untyped = pa.RecordBatch.from_pydict({"op_type": pa.array([None, None], pa.string()), "count": [1, 2]})
    assert communication_statistic_rows(typed).num_rows == 2
    assert communication_statistic_rows(untyped).num_rows == 0


def _npu_module_mem_file(tmp_path: Path, fmt: Format) -> Path:
    """The msprof npu_module_mem file of three samples: 1500 bytes, a release only (null), 0 bytes."""
    [output] = [o for o in summary_outputs(_context(tmp_path), fmt) if o.tables == ("npu_module_mem",)]
    batch = schema.conform(
        schema.TABLES["npu_module_mem"],
        {
            "device_id": pa.array([0, 0, 0], pa.int32()),
            "component": pa.array(["HCCL", "GE", "SLOG"]),
            "time_ns": pa.array([1000, 2000, 3000]),
            "total_reserved_bytes": pa.array([1500, None, 0], pa.int64()),
        },
    )
    output.write("npu_module_mem", batch)
    [path] = output.close()
    return path


def test_msprof_npu_module_mem_prints_kilobytes_rounded_and_a_release_only_sample_as_minus_one(
    tmp_path: Path,
) -> None:
    """msprof's npu_module_mem viewer: bytes / 1024 rounded to 3 decimals, the integer -1 where only a
    release was captured and the integer 0 for an empty module (``NpuModuleMemViewer.
    _npu_module_mem_reformat`` rounds only positive sizes)."""
    path = _npu_module_mem_file(tmp_path, "csv")
    with path.open(newline="") as f:
        assert sorted(r["Total Reserved(KB)"] for r in csv.DictReader(f)) == ["-1", "0", "1.465"]


@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=8),
    st.lists(st.integers(-10, 280), max_size=40),
)
def test_kernel_step_id_is_torch_npus_first_containing_step(
    spans: list[tuple[int, int]], starts: list[int]
) -> None:
    """kernel_details' Step Id, against a literal reading of torch_npu's KernelViewParser loop: the
    first step (in start order) whose range holds the start, a start at a step's end not in it (the
    op_summary cell's TAB makes that text compare greater); overlapping steps included."""
    spans = sorted(spans, key=lambda span: span[0])
    begin = np.array([b for b, _ in spans], np.int64)
    end = begin + np.array([length for _, length in spans], np.int64)
    ids = np.arange(1, len(spans) + 1, dtype=np.int64)
    batch = pa.record_batch(
        {"start_ns": pa.array(starts, pa.int64()), "device_id": pa.array([0] * len(starts), pa.int32())}
    )
    got = _steps_of({0: (begin, end, ids)} if spans else {}, batch).to_pylist()
    expected = [
        next((int(i) for b, e, i in zip(begin, end, ids, strict=True) if b <= t < e), None) for t in starts
    ]
    assert got == expected


def test_default_task_type_is_the_device_type_for_ffts_and_unknown_hosts() -> None:
    """Without a GE task type msprof names a task by its host type, but by its device type when the
    host type is FFTS_PLUS or UNKNOWN, or when there is no host record (TaskTimeViewer.get_task_type;
    AscendHardwareAssembler::GetOpName)."""
    rows = pa.record_batch(
        {
            "host_task_type": pa.array(["KERNEL_AICORE", "FFTS_PLUS", "UNKNOWN", None]).dictionary_encode(),
            "device_task_type": pa.array(["AI_CORE", "AIV_SQE", "SDMA_SQE", "EVENT_RECORD_SQE"]),
        }
    )
    assert default_task_type(rows).to_pylist() == ["KERNEL_AICORE", "AIV_SQE", "SDMA_SQE", "EVENT_RECORD_SQE"]


def test_memory_record_puts_each_device_s_app_rows_first_in_device_name_order(tmp_path: Path) -> None:
    """memory_record.csv: per device (in msprof's name order: device_1, device_10, device_2), its APP rows,
    then the others. The spool keys are device and part; as numbers (device * 2 + part) device 10's
    keys sorted as names between device 1's APP rows and the rest."""
    context = replace(_context(tmp_path), devices=(1, 2, 10))
    output = next(o for o in torch_npu_summary(context) if "memory_record" in o.tables)
    rows = [(2, "PTA", 1), (10, "APP", 2), (1, "PTA", 3), (1, "APP", 4), (10, "GE", 5), (2, "APP", 6)]
    batch = schema.conform(
        schema.TABLES["memory_record"],
        {
            "device_id": [d for d, _, _ in rows],
            "component": pa.array([c for _, c, _ in rows]),
            "time_ns": [t for _, _, t in rows],
            "total_allocated": [1 << 20] * len(rows),
            "total_reserved": [2 << 20] * len(rows),
            "total_active": [1 << 20] * len(rows),
            "stream_ptr": pa.nulls(len(rows), pa.int64()),
            "device_type": pa.array([f"NPU:{d}" for d, _, _ in rows]),
        },
    )
    for one in pa.table(batch).to_batches(max_chunksize=2):
        output.write("memory_record", one)
    (path,) = output.close()
    with path.open(newline="") as f:
        written = [(r["Device Type"], r["Component"]) for r in csv.DictReader(f)]
    assert written == [
        ("NPU:1", "APP"),
        ("NPU:1", "PTA"),
        ("NPU:10", "APP"),
        ("NPU:10", "GE"),
        ("NPU:2", "APP"),
        ("NPU:2", "PTA"),
    ]


def test_split_by_gives_each_key_its_rows_and_a_dictionary_key_its_word() -> None:
    """Spool keys may come as dictionary codes (torch_npu's per-device parts): split by code, named
    by word; a batch of one key comes back as it is."""
    batch = pa.record_batch({"n": pa.array([0, 1, 2, 3])})
    words = pa.array(["1/0", "1/1", "10/0"])
    mixed = pa.DictionaryArray.from_arrays(pa.array([1, 0, 1, 2], pa.int32()), words)
    assert [(key, rows.column("n").to_pylist()) for key, rows in split_by(batch, mixed)] == [
        ("1/1", [0, 2]),
        ("1/0", [1]),
        ("10/0", [3]),
    ]
    one = pa.DictionaryArray.from_arrays(pa.array([2, 2, 2, 2], pa.int32()), words)
    assert [(key, rows is batch) for key, rows in split_by(batch, one)] == [("10/0", True)]
    plain = pa.array([5, 5, 6, 5])
    assert [(key, rows.num_rows) for key, rows in split_by(batch, plain)] == [(5, 3), (6, 1)]


def _step_trace_csv(
    tmp_path: Path, columns: dict[str, pa.Array], fmt: Format = "csv", context: Context | None = None
) -> tuple[Path, list[str]]:
    """msprof's step_trace file of two device-0 ``steps`` rows with ``columns``: its path and lines."""
    context = context or _context(tmp_path)
    [output] = [o for o in summary_outputs(context, fmt) if o.tables == ("steps",)]
    device = {"device_id": pa.array([0, 0], pa.int32())}
    output.write("steps", schema.conform(schema.TABLES["steps"], {**device, **columns}))
    [path] = output.close()
    return path, path.read_text().splitlines()


#: two model iterations, the first with two all-reduces and the second with none
STEPS_WITH_REDUCES = {
    "kind": pa.array(["model", "model"]),
    "model_id": pa.array([1, 1]),
    "iteration_id": pa.array([1, 2]),
    "start_ns": pa.array([1000, 9000]),
    "end_ns": pa.array([8000, 15000]),
    "fp_ns": pa.array([2000, 10000]),
    "bp_ns": pa.array([6000, 14000]),
    "data_aug_ns": pa.array([None, 1000]),
    "reduce_start_ns": pa.array([[3000, 5000], []], pa.list_(pa.int64())),
    "reduce_end_ns": pa.array([[4000, 5500], []], pa.list_(pa.int64())),
}


def test_msprof_step_trace_rows_stop_after_their_own_reduce_pairs(tmp_path: Path) -> None:
    """msprof's Python step_trace: the header has the busiest iteration's Reduce pairs, each row only
    its own (``StepTraceViewer._reformat_step_trace_data`` appends them; ``create_csv_writer`` writes the
    row as it is), so an iteration without reduces ends at Model ID; the importer reads such rows back."""
    path, lines = _step_trace_csv(tmp_path, STEPS_WITH_REDUCES)
    header, first, second = lines
    assert header.count("Reduce Start(us),Reduce Duration(us)") == 2
    assert first.split(",")[9:] == ["1", "3.000\t", "1.0", "5.000\t", "0.5"]
    assert second.split(",")[8:] == ["1.0", "1"]
    steps = csv_tables.step_trace_batches([path], None, csv_tables.CsvOptions()).read_all()
    assert steps["reduce_start_ns"].to_pylist() == [[3000, 5000], []]
    assert steps["reduce_end_ns"].to_pylist() == [[4000, 5500], []]


def test_msprof_step_trace_json_keeps_one_reduce_pair_the_row_s_last(tmp_path: Path) -> None:
    """msprof's ``create_json`` makes each row ``OrderedDict(zip(header, row))``: the repeated Reduce
    headers collapse to one key each, in its first place, holding the row's last pair, and a row
    without reduces (shorter than the header) has neither key. No ``Device_id``: the per-device file
    is copied as it is (``MsprofOutputSummary._copy_summary_data``)."""
    path, _ = _step_trace_csv(tmp_path, STEPS_WITH_REDUCES, "json")
    text = path.read_text()
    assert text.count('"Reduce Start(us)"') == 1
    first, second = json.loads(text)
    assert list(first)[-3:] == ["Model ID", "Reduce Start(us)", "Reduce Duration(us)"]
    assert (first["Reduce Start(us)"], first["Reduce Duration(us)"]) == ("5.000\t", 0.5)
    assert list(second) == list(first)[:-2]


def test_msprof_json_summaries_have_no_device_id_and_print_numbers_as_numbers(tmp_path: Path) -> None:
    """``--format json`` npu_module_mem as ``json.dump`` writes msprof's per-device rows: no
    ``Device_id`` key, the KB a float number (``round(size / 1024, 3)``), an empty module the integer
    ``0`` and a release-only sample the integer ``-1`` (``NpuModuleMemViewer._npu_module_mem_reformat``)."""
    path = _npu_module_mem_file(tmp_path, "json")
    rows = json.loads(path.read_text())
    assert [list(r) for r in rows] == [["Component", "Timestamp(us)", "Total Reserved(KB)", "Device"]] * 3
    assert sorted((r["Total Reserved(KB)"] for r in rows), key=float) == [-1, 0, 1.465]
    assert '"Total Reserved(KB)": 1.465,' in path.read_text()


@pytest.mark.parametrize("layout", ["msprof", "torch_npu"])
def test_npu_module_mem_lists_each_device_s_modules_by_id_then_time(tmp_path: Path, layout: str) -> None:
    """msprof sorts npu_module_mem by module id, then time (C++ ``NpuModuleMemAssembler::AssembleData``;
    Python ``order by module_id asc, syscnt asc``), and the real files in shared/realdata list module
    after module (SLOG = 0, HCCL = 3, GE = 45); an unnamed id (here 1000) sorts as a number."""
    context = replace(_context(tmp_path), devices=(0, 1))
    outputs = summary_outputs(context, "csv") if layout == "msprof" else torch_npu_summary(context)
    [output] = [o for o in outputs if o.tables == ("npu_module_mem",)]
    samples = [(1, "GE", 10), (0, "1000", 10), (0, "HCCL", 10), (0, "SLOG", 10), (0, "GE", 10)]
    samples += [(0, "HCCL", 20), (0, "1000", 20), (0, "SLOG", 20), (1, "GE", 5), (0, "GE", 30)]
    for device, component, time in samples:  # one sample a batch, in time order per device
        output.write(
            "npu_module_mem",
            schema.conform(
                schema.TABLES["npu_module_mem"],
                {
                    "device_id": pa.array([device], pa.int32()),
                    "component": pa.array([component]),
                    "time_ns": pa.array([time * 1000]),
                    "total_reserved_bytes": pa.array([1024], pa.int64()),
                },
            ),
        )
    (path,) = output.close()
    with path.open(newline="") as f:
        written = [(r["Device"], r["Component"], r["Timestamp(us)"]) for r in csv.DictReader(f)]
    assert written == [
        ("NPU:0", "SLOG", "10.000\t"),
        ("NPU:0", "SLOG", "20.000\t"),
        ("NPU:0", "HCCL", "10.000\t"),
        ("NPU:0", "HCCL", "20.000\t"),
        ("NPU:0", "GE", "10.000\t"),
        ("NPU:0", "GE", "30.000\t"),
        ("NPU:0", "1000", "10.000\t"),
        ("NPU:0", "1000", "20.000\t"),
        ("NPU:1", "GE", "5.000\t"),
        ("NPU:1", "GE", "10.000\t"),
    ]


def _ge_memory(rows: list[tuple[int, int | None]]) -> pa.RecordBatch:
    """GE ``memory`` rows of 2048 bytes: (allocation ns, release ns or None); totals 1 MB then 0.5 MB."""
    n = len(rows)
    released = [r is not None for _, r in rows]
    return schema.conform(
        schema.TABLES["memory"],
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "source": pa.array(["GE"] * n),
            "name": pa.array(["Add"] * n),
            "size_bytes": pa.array([2048] * n),
            "alloc_ns": pa.array([a for a, _ in rows]),
            "release_ns": pa.array([r for _, r in rows], pa.int64()),
            "duration_ns": pa.array([None if r is None else r - a for a, r in rows], pa.int64()),
            "alloc_total_allocated": pa.array([1 << 20] * n),
            "alloc_total_reserved": pa.array([1 << 20] * n),
            "release_total_allocated": pa.array([1 << 19 if x else None for x in released], pa.int64()),
            "release_total_reserved": pa.array([1 << 19 if x else None for x in released], pa.int64()),
            "device_type": pa.array(["NPU:0"] * n),
        },
    )


def test_msprof_operator_memory_prints_msprof_s_zeros_for_an_allocation_never_released(
    tmp_path: Path,
) -> None:
    """``NpuOpMemCalculator`` stores ``NULL_NUMBER`` (0) as an unreleased allocation's duration and release
    totals, and ``NpuOpMemViewer`` prints round(0.0, 3) and round(0 / 1024.0, 3)."""
    [output] = [o for o in summary_outputs(_context(tmp_path), "csv") if o.tables == ("memory",)]
    output.write("memory", _ge_memory([(1_000_000, 1_106_430), (2_000_000, None)]))
    (path,) = output.close()
    with path.open(newline="") as f:
        cells = [
            (r["Duration(us)"], r["Release Total Allocated(KB)"], r["Release Total Reserved(KB)"])
            for r in csv.DictReader(f)
        ]
    assert cells == [("106.43", "512.0", "512.0"), ("0.0", "0.0", "0.0")]


def test_torch_npu_operator_memory_reads_an_unreleased_ge_row_as_torch_npu_reads_cann_s(
    tmp_path: Path,
) -> None:
    """torch_npu's ``GeOpMemoryBean``: Release Time = Allocation Time + Duration when both cells are
    non-empty, CANN's ``0.0`` included; release totals ``float("0.0") / 1024``; the row stays last."""
    [output] = [o for o in torch_npu_summary(_context(tmp_path)) if o.tables == ("memory",)]
    output.write("memory", _ge_memory([(2_000_000, None), (1_000_000, 1_106_430)]))
    (path,) = output.close()
    with path.open(newline="") as f:
        cells = [
            (
                r["Allocation Time(us)"],
                r["Release Time(us)"],
                r["Duration(us)"],
                r["Release Total Allocated(MB)"],
            )
            for r in csv.DictReader(f)
        ]
    assert cells == [
        ("1000.000\t", "1106.430\t", "106.43", "0.5"),
        ("2000.000\t", "2000.000\t", "0.0", "0.0"),
    ]


def test_msprof_step_trace_lists_the_60000_steps_among_the_iterations(tmp_path: Path) -> None:
    """msprof's training_trace table gets a row per 60000/60001 step
    (``CreateTrainingTrace.update_step_time``: FP, BP, FP to BP and refresh 0, data aug 0, all printed
    ``N/A`` by ``get_step_trace_data``), rows in step-end order (``update_data_aug`` sorts by step end)."""
    _, lines = _step_trace_csv(
        tmp_path,
        {
            "kind": pa.array(["model", "step"]),
            "model_id": pa.array([1, 4294967295]),
            "iteration_id": pa.array([1, 3]),
            "start_ns": pa.array([9000, 1000]),
            "end_ns": pa.array([15000, 7500]),
            "fp_ns": pa.array([10000, None]),
            "bp_ns": pa.array([14000, None]),
            "data_aug_ns": pa.array([2500, None]),
            "reduce_start_ns": pa.array([[], []], pa.list_(pa.int64())),
            "reduce_end_ns": pa.array([[], []], pa.list_(pa.int64())),
        },
    )
    _, step, model = lines
    assert step.split(",") == ["0", "3", "N/A", "N/A", "7.500\t", "6.5", "N/A", "N/A", "N/A", "4294967295"]
    assert model.split(",")[:2] == ["0", "1"]


def _steps_at_38_4_mhz() -> dict[str, pa.Array]:
    """Two iterations of a 38.4 MHz device (a tick is 26.041666... ns), each time rounded to the nearest
    ns from its syscnt: 63113 ticks long, FP to BP 38767, refresh 23112, data aug 517, a 7-tick reduce;
    the second with FP = BP."""
    per_tick = TickRate.from_mhz(Fraction("38.4"))
    syscnt = {"prev_end": 10_000_001, "fp": 10_000_518, "bp": 10_039_285, "end": 10_062_397}
    syscnt |= {"start": syscnt["end"] - 63113, "reduce": 10_040_000}
    ns = {k: int(v) for k, v in zip(syscnt, per_tick.scale(np.array(list(syscnt.values()))), strict=True)}
    return {
        "kind": pa.array(["model", "model"]),
        "model_id": pa.array([1, 1]),
        "iteration_id": pa.array([1, 2]),
        "start_ns": pa.array([ns["start"], ns["start"]]),
        "end_ns": pa.array([ns["end"], ns["end"] + 1]),
        "fp_ns": pa.array([ns["fp"], ns["bp"]]),
        "bp_ns": pa.array([ns["bp"], ns["bp"]]),
        "data_aug_ns": pa.array([ns["fp"] - ns["prev_end"], None]),
        "reduce_start_ns": pa.array([[ns["reduce"]], []], pa.list_(pa.int64())),
        "reduce_end_ns": pa.array([[ns["reduce"] + 182], []], pa.list_(pa.int64())),  # 7 ticks, 182.29 ns
    }


def test_msprof_step_trace_durations_are_msprof_s_floats_of_syscnt_ticks(tmp_path: Path) -> None:
    """msprof's Python keeps step-trace times as syscnt and prints Iteration Time, FP to BP, Iteration
    Refresh and Data Aug Bound as ``ticks * 1000000.0 / (float(hwts_frequency) * 1000000.0)``, unrounded
    (``StepTraceViewer.calculate_duration``, ``InfoConfReader.get_freq``), a Reduce Duration as
    ``round(ticks * (1000000.0 / (float(hwts_frequency) * 1000000.0)), 3)``
    (``_reformat_step_trace_data``, ``StepTraceConstant.syscnt_to_micro``) and a span of 0 ticks ``N/A``
    (``get_step_trace_data``). At 38.4 MHz a tick is 26.041666... ns: the ns times (each rounded from
    its syscnt) give the ticks back."""
    columns = _steps_at_38_4_mhz()
    context = replace(_context(tmp_path), hwts_mhz={0: Fraction("38.4")})

    def msprof(ticks: int) -> float:  # calculate_duration
        return ticks * 1000000.0 / (float("38.4") * 1000000.0)

    expected = [msprof(63113), msprof(38767), msprof(23112), msprof(517)]
    assert [repr(v) for v in expected] == [
        "1643.5677083333333",
        "1009.5572916666666",
        "601.875",
        "13.463541666666666",
    ]
    path, lines = _step_trace_csv(tmp_path, columns, context=context)
    first, second = (line.split(",") for line in lines[1:])
    assert first[5:9] == [repr(v) for v in expected]
    assert first[11] == repr(round(7 * (1000000.0 / (float("38.4") * 1000000.0)), 3)) == "0.182"
    assert second[5:9] == ["1643.5677083333333", "N/A", "601.875", "N/A"]  # FP = BP: 0 ticks
    path.unlink()
    path, _ = _step_trace_csv(tmp_path, columns, "json", context)
    row = json.loads(path.read_text())[0]
    assert [row[k] for k in ("Iteration Time(us)", "Data Aug Bound(us)", "Reduce Duration(us)")] == [
        expected[0],
        expected[3],
        0.182,
    ]


def test_msprof_step_trace_timeline_durations_are_msprof_s_floats_of_syscnt_ticks(tmp_path: Path) -> None:
    """The Step Trace layer's duration args are ``calculate_duration`` of the ticks too
    (``StepTraceViewer.update_iteration`` / ``update_fp_bp_time`` / ``update_grad_refresh_data``) and
    ``Data_aug Bound(us)`` is ``data_aug_bound * 1000000.0 / (float(hwts_frequency) * 1000000.0)``
    (``TimeLineJsonMaker.make_data_aug_dict1``)."""
    context = replace(_context(tmp_path), hwts_mhz={0: Fraction("38.4")})
    columns = {"device_id": pa.array([0, 0], pa.int32()), **_steps_at_38_4_mhz()}
    first = schema.conform(schema.TABLES["steps"], columns).slice(0, 1)
    events = list(StepTrace(context, Processes()).events(first))
    args = {
        key: values.to_pylist()
        for e in events
        if isinstance(e, (CompleteEvents, FlowEvents))
        for key, values in e.args.items()
        if key.endswith("(us)")
    }

    def msprof(ticks: int) -> float:  # calculate_duration
        return ticks * 1000000.0 / (float("38.4") * 1000000.0)

    assert args == {
        "Iteration Time(us)": [msprof(63113)],
        "FP_BP Time(us)": [msprof(38767)],
        "Iteration Refresh(us)": [msprof(23112)],
        "Data_aug Bound(us)": [msprof(517)],
    }


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_msprof_hbm_cells_keep_msprof_s_types(tmp_path: Path, fmt: Format) -> None:
    """msprof's ``get_hbm_summary_data`` rows: the Average row's ``float_calculate`` texts (``None`` among
    the means gives ``"0"``, then ``/ 3`` quantized: ``0.000``), each unit's integer ``hbmid``, its
    means ``round(mean, 3)``, a read mean of none the write mean unrounded (``_format_hbm_data``), a
    direction without rows ``None`` (``0 / 0`` in SQLite). ``csv.writer`` prints None empty;
    ``create_json``'s ``json.dump`` prints the texts as strings, the id and means as numbers, None
    as ``null``."""
    [output] = [o for o in summary_outputs(_context(tmp_path), fmt) if o.tables == ("hbm",)]
    samples = [
        (0, "read", 100.5),
        (0, "read", 200.25),
        (0, "write", 10.0),
        (1, "write", 3.3333),
        (2, "read", 5.0),
    ]
    unit, event, bandwidth = zip(*samples, strict=True)
    columns = {"device_id": pa.array([0] * 5, pa.int32()), "time_ns": list(range(5)), "hbm_id": list(unit)}
    output.write(
        "hbm", schema.conform(schema.TABLES["hbm"], {**columns, "event": event, "bandwidth": bandwidth})
    )
    [path] = output.close()
    text = path.read_text()
    if fmt == "csv":
        assert text.splitlines()[1:] == [
            "0,Average,0.000,0.000",
            "0,0,150.375,10.0",
            "0,1,3.3333,3.333",
            "0,2,5.0,",
        ]
        return
    assert json.loads(text) == [
        {"Metric": "Average", "Read(MB/s)": "0.000", "Write(MB/s)": "0.000"},
        {"Metric": 0, "Read(MB/s)": 150.375, "Write(MB/s)": 10.0},
        {"Metric": 1, "Read(MB/s)": 3.3333, "Write(MB/s)": 3.333},
        {"Metric": 2, "Read(MB/s)": 5.0, "Write(MB/s)": None},
    ]
    assert '{"Metric": 2, "Read(MB/s)": 5.0, "Write(MB/s)": null}' in text


@pytest.mark.parametrize("stars", [False, True])
def test_msprof_l2_cache_json_cells_keep_msprof_s_types(tmp_path: Path, stars: bool) -> None:
    """msprof's l2_cache rows are the ``L2CacheSummary`` columns (``stream_id``/``task_id`` INTEGER,
    ``hit_rate``/``victim_rate`` REAL; ``get_l2_cache_data``), the hit rate the text ``N/A`` on STARS
    chips (``process_hit_rate``) and the op name ``N/A`` for a task without one (``add_op_name``):
    ``json.dump`` prints ids and rates as numbers, the ``N/A`` texts as strings."""
    context = replace(_context(tmp_path), l2_cache=True, stars=stars)
    [output] = [o for o in summary_outputs(context, "json") if o.tables == ("l2_cache", "tasks")]
    rates = {"hit_rate": [0.5, 0.0], "victim_rate": [0.123456, 1.0]}
    ids = {
        "device_id": pa.array([0, 0], pa.int32()),
        "stream_id": [3, 4],
        "task_id": [7, 8],
        "task_type": [0, 0],
    }
    output.write("l2_cache", schema.conform(schema.TABLES["l2_cache"], {**ids, **rates}))
    [path] = output.close()
    hit = ["N/A", "N/A"] if stars else [0.5, 0.0]
    assert json.loads(path.read_text()) == [
        {"Stream Id": 3, "Task Id": 7, "Hit Rate": hit[0], "Victim Rate": 0.123456, "Op Name": "N/A"},
        {"Stream Id": 4, "Task Id": 8, "Hit Rate": hit[1], "Victim Rate": 1.0, "Op Name": "N/A"},
    ]
    assert ('"Hit Rate": 0.0, "Victim Rate": 1.0' in path.read_text()) is not stars  # REAL, not 0


def test_torch_npu_operator_details_prints_host_floats_and_device_float_sums(tmp_path: Path) -> None:
    """Host durations are ``convert_ns2us_float`` floats, so a 0 ns self duration prints ``0.0``; device
    cells print torch_npu's float sums as Python does, ``0`` where no kernel was added (``sum([])``;
    ``OperatorViewParser.generate_view``)."""
    [output] = [o for o in torch_npu_summary(_context(tmp_path)) if o.tables == ("operator_details",)]
    residue = 23.74 + 172.763 + 14.5
    batch = schema.conform(
        schema.TABLES["operator_details"],
        {
            "device_id": pa.array([0], pa.int32()),
            "op_id": [1],
            "name": pa.array(["aten::add"]),
            "host_self_ns": [0],
            "host_total_ns": [12340],
            "device_self_us": pa.array([None], pa.float64()),
            "device_total_us": [residue],
            "device_self_aicore_us": pa.array([None], pa.float64()),
            "device_total_aicore_us": [14.5],
        },
    )
    output.write("operator_details", batch)
    [path] = output.close()
    with path.open(newline="") as f:
        [row] = list(csv.reader(f))[1:]
    assert row[3:] == ["0.0", "12.34", "0", "211.00300000000001", "0", "14.5"]


def test_torch_npu_preparing_without_a_first_task_is_minus_one_minus_the_host_start(tmp_path: Path) -> None:
    """torch_npu's ``get_prepare_time``: first task start - host start, floats of µs; a step that got
    only Free or hcom_receive pieces keeps its first task time ``-1``, so it prints ``-1 -`` the host
    start on the local wall clock (``convert_ns2us_float``): -1 - 1736408883694699.51 is
    -1736408883694700.5 in doubles; ``0`` for the step-less row without torch ops (``0``)."""
    context = replace(_context(tmp_path), wall_offset_ns=1_736_408_000_000_000_000)
    [output] = [o for o in torch_npu_summary(context) if o.tables == ("step_time",)]
    batch = schema.conform(
        schema.TABLES["step_time"],
        {
            "device_id": pa.array([0] * 4, pa.int32()),
            "step": pa.array([1, 2, 3, None]),
            "computing_ns": pa.array([10, 10, 0, 0]),
            "preparing_ns": pa.array([1500, 0, None, None]),
            "host_start_ns": pa.array([100, 200, 883_694_699_510, None]),
        },
    )
    output.write("step_time", batch)
    [path] = output.close()
    with path.open(newline="") as f:
        assert [r["Preparing"] for r in csv.DictReader(f)] == ["1.5", "0.0", "-1736408883694700.5", "0"]


def _flows(events: list[object], phase: str) -> list[tuple[str, int, int]]:
    """(id, tid, ts in ns) of the HostToDevice flow events of one phase."""
    out = []
    for event in events:
        if isinstance(event, FlowEvents) and event.phase == phase:
            ids, tids, times = (
                pa.array(v) if not isinstance(v, pa.Array) else v for v in (event.id, event.tid, event.ts_ns)
            )
            out += list(zip(ids.to_pylist(), tids.to_pylist(), times.to_pylist(), strict=True))
    return out


def test_host_to_device_flows_start_once_per_launching_api(tmp_path: Path) -> None:
    """msprof's C++ CANN layer writes one flow start per API record -- every node-level API and the API
    of a MEMCPY_ASYNC task (``CannAssembler`` ``GenerateConnectionTrace``) -- and Ascend Hardware one
    flow end per task (``GenerateTaskConnectionTrace``): a node API whose op ran two contexts, or an API
    that launched two copies, has one start and two ends; a node API that launched a copy (an HCCL
    op's) has one start."""
    context = _context(tmp_path)
    api = schema.conform(
        schema.TABLES["api"],
        {
            "level": ["acl", "node", "node", "acl", "node"],
            "name": ["aclnnMatmul", "launch", "launch", "aclrtMemcpyAsync", "launch"],
            "thread_id": [7, 7, 7, 7, 7],
            "start_ns": [100, 110, 300, 500, 700],
            "end_ns": [200, 190, 350, 600, 800],
            "connection_id": [1, 2, 3, 4, 5],
        },
    )
    tasks = schema.conform(
        schema.tasks_schema(()),
        {
            "device_id": pa.array([0] * 5, pa.int32()),
            "stream_id": pa.array([5] * 5, pa.int32()),
            "task_id": pa.array([1, 1, 2, 3, 4], pa.int32()),
            "batch_id": pa.array([0] * 5, pa.int32()),
            "context_id": [0, 1, NO_ID, NO_ID, NO_ID],
            "start_ns": [1000, 1000, 2000, 2100, 3000],
            "end_ns": [1500, 1500, 2050, 2150, 3050],
            "op_name": ["MatMul", "MatMul", None, None, "hcom_allReduce_0"],
            "task_type": ["MIX_AIC", "MIX_AIC", None, None, "HCCL"],
            "host_task_type": [
                "KERNEL_MIX_AIC",
                "KERNEL_MIX_AIC",
                "MEMCPY_ASYNC",
                "MEMCPY_ASYNC",
                "MEMCPY_ASYNC",
            ],
            "device_task_type": ["MIX_AIC", "MIX_AIC", "SDMA", "SDMA", "SDMA"],
            "connection_id": [2, 2, 4, 4, 5],
            "launch_ns": [110, 110, 500, 500, 700],
            "launch_thread_id": [7, 7, 7, 7, 7],
            "launch_level": ["node", "node", "acl", "acl", "node"],
        },
    )
    ends = _flows(list(AscendHardware(context, Processes()).events(tasks)), "f")
    assert Counter(i for i, _, _ in ends) == {str(2 << 32): 2, str(4 << 32): 2, str(5 << 32): 1}
    starts = [
        *_flows(list(Cann(context, Processes()).events(api)), "s"),
        *_flows(list(AscendHardware(context, Processes()).events(tasks)), "s"),
    ]
    # node APIs 2, 3 (it launched nothing seen) and 5 (once, for its copy too), memcpy API 4; not the
    # ACL API of the kernel
    node_starts = [(str(2 << 32), 7, 110), (str(3 << 32), 7, 300), (str(5 << 32), 7, 700)]
    assert sorted(starts) == sorted([*node_starts, (str(4 << 32), 7, 500)])
    pruned = _flows(list(PrunedCann(context, Processes()).events(api)), "s")
    assert sorted(pruned) == sorted(node_starts)


def test_host_to_device_flows_end_on_hccl_kernels_not_on_torch_npu_kernels(tmp_path: Path) -> None:
    """msprof's C++ Ascend Hardware ends a flow on every task its compute-task info has a row of
    (``GenerateTaskConnectionTrace`` looks the task up in ``opName_``, read from ge_info ``TaskInfo``),
    and that info has the kernels of a communication op (``TreeAnalyzer::IsComputeTask``: ``KERNEL*``,
    ``STARS_COMMON``; ``UpdateComputeDescForHcclSituation`` names them after the op and types a
    ``KERNEL_AICPU`` one ``HCCL_AI_CPU``; ``CANNTraceDBDumper::DumpOpDesc`` writes them), not its
    notify or FFTS+ tasks. So of an hcom op launched by node API 5, the AI CPU and the vector kernel
    get an ``f`` and the notify wait and the FFTS+ context do not, its copy gets one as every
    MEMCPY_ASYNC task does; a kernel of an HCCL-typed op outside a communication API (node API 6)
    gets one too. torch_npu's kernels leave every HCCL task out, its copy too (its
    ``combine_acl_to_npu`` keeps one ``f`` per flow id, and the op's is its communication op's), and
    that kernel too (a choice)."""
    hcom = "hcom_allReduce__586_0_1"
    n = 7
    tasks = schema.conform(
        schema.tasks_schema(()),
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([4] * n, pa.int32()),
            "task_id": pa.array([1, 2, 3, 4, 5, 6, 7], pa.int32()),
            "batch_id": pa.array([0] * n, pa.int32()),
            "context_id": [NO_ID, NO_ID, NO_ID, 0, NO_ID, NO_ID, NO_ID],
            "start_ns": [1000, 2000, 3000, 4000, 5000, 6000, 7000],
            "end_ns": [1500, 2500, 3500, 4500, 5500, 6500, 7500],
            "op_name": [hcom] * 4 + ["allreduce_tbe", "MatMul", hcom],
            "task_type": ["HCCL_AI_CPU", "HCCL", "HCCL", "HCCL", "HCCL", "AI_CORE", "HCCL"],
            "host_task_type": [
                "KERNEL_AICPU",
                "KERNEL_AIVEC",
                "NOTIFY_WAIT",
                "FFTS_PLUS",
                "KERNEL_AICORE",
                "KERNEL_AICORE",
                "MEMCPY_ASYNC",
            ],
            "device_task_type": [
                "AI_CPU",
                "AI_VECTOR_CORE",
                "NOTIFY_WAIT",
                "Notify Wait",
                "AI_CORE",
                "AI_CORE",
                "SDMA",
            ],
            "connection_id": [5, 5, 5, 5, 6, 7, 5],
            "launch_ns": [700, 700, 700, 700, 800, 900, 700],
            "launch_thread_id": [7] * n,
            "launch_level": ["node"] * n,
        },
    )
    ends = _flows(list(AscendHardware(_context(tmp_path), Processes()).events(tasks)), "f")
    assert sorted((i, t) for i, _, t in ends) == [
        (str(5 << 32), 1000),
        (str(5 << 32), 2000),
        (str(5 << 32), 7000),
        (str(6 << 32), 5000),
        (str(7 << 32), 6000),
    ]
    kernels, _ = kernel_rows(tasks, ops=False)
    assert kernels.column("start_ns").to_pylist() == [6000]


def test_ascend_hardware_names_and_types_hccl_tasks_as_msprofs_compute_task_info(tmp_path: Path) -> None:
    """msprof's compute-task info (ge_info ``TaskInfo``), where Ascend Hardware looks up a task's op name
    and GE type, has only kernels (C++ ``TreeAnalyzer::IsComputeTask``: ``KERNEL*``, ``STARS_COMMON``,
    ``FFTS_PLUS`` outside a communication API): an HCCL notify or copy task, or an FFTS+ HCCL task's
    contexts, is named and typed by its host type, or its device type under an ``FFTS_PLUS`` host
    (``AscendHardwareAssembler::GetOpName``/``GetTaskType``), as the real 910 and 910B timelines in
    shared/realdata show them (``NOTIFY_WAIT``; ``Notify Wait``, ``SDMA``). An HCCL kernel keeps its
    op's name, typed ``HCCL_AI_CPU`` on an AI CPU (``UpdateComputeDescForHcclSituation``) and else as
    GE type 9 prints, ``COMMUNICATION`` (``NumberMapping`` ``geTaskTypeMap``), also for a kernel of an
    HCCL-typed op outside a communication API."""
    hcom = "hcom_allReduce__586_0_1"
    n = 8
    tasks = schema.conform(
        schema.tasks_schema(()),
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([4] * n, pa.int32()),
            "task_id": pa.array([1, 2, 3, 4, 4, 4, 5, 6], pa.int32()),
            "batch_id": pa.array([0] * n, pa.int32()),
            "context_id": [NO_ID, NO_ID, NO_ID, NO_ID, 0, 1, NO_ID, NO_ID],
            "start_ns": [1000, 2000, 3000, 4000, 4000, 4100, 5000, 6000],
            "end_ns": [1500, 2500, 3500, 4500, 4050, 4500, 5500, 6500],
            "op_name": [hcom] * 7 + ["allreduce_tbe"],
            "task_type": ["HCCL_AI_CPU", "HCCL", "HCCL", "HCCL", "HCCL", "HCCL", "HCCL", "HCCL"],
            "host_task_type": [
                "KERNEL_AICPU",
                "NOTIFY_WAIT",
                "REDUCE_ASYNC_V2",
                "FFTS_PLUS",
                "FFTS_PLUS",
                "FFTS_PLUS",
                "KERNEL_AIVEC",
                "KERNEL_AICORE",
            ],
            "device_task_type": [
                "AI_CPU",
                "NOTIFY_WAIT",
                "REDUCE_ASYNC_V2",
                "FFTS_PLUS",
                "Notify Wait",
                "SDMA",
                "AI_CORE",
                "AI_CORE",
            ],
        },
    )
    drawn = [
        (name, task_type)
        for event in AscendHardware(_context(tmp_path), Processes()).events(tasks)
        if isinstance(event, CompleteEvents)
        for name, task_type in zip(
            pa.array(event.name).to_pylist(), pa.array(event.args["Task Type"]).to_pylist(), strict=True
        )
    ]
    assert drawn == [
        (hcom, "HCCL_AI_CPU"),
        ("NOTIFY_WAIT", "NOTIFY_WAIT"),
        ("REDUCE_ASYNC_V2", "REDUCE_ASYNC_V2"),
        ("Notify Wait", "Notify Wait"),
        ("SDMA", "SDMA"),
        (hcom, "COMMUNICATION"),
        ("allreduce_tbe", "COMMUNICATION"),
    ]
    assert (
        tasks.column("task_type").to_pylist() == ["HCCL_AI_CPU"] + ["HCCL"] * 7
    )  # the table keeps its types


def test_ascend_hardware_writes_each_copy_tasks_size_bandwidth_and_operation(tmp_path: Path) -> None:
    """A MEMCPY_ASYNC task adds ``size(B)``, ``bandwidth(GB/s)`` (its bytes over its duration in ns,
    0.0 for no duration) and ``operation`` after ``connection_id`` (C++
    ``AscendHardwareAssembler::GenerateMemcpyAsyncTrace``, ``MemcpyAsyncEvent::ProcessArgs``): on every
    copy task when the host recorded memcpy_info, one without a record as 0 bytes ``other``; without
    memcpy_info none, as msprof then has no MemcpyInfo table. Other tasks carry none."""
    n = 4
    tasks = schema.conform(
        schema.tasks_schema(()),
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([2] * n, pa.int32()),
            "task_id": pa.array([1, 2, 3, 4], pa.int32()),
            "batch_id": pa.array([0] * n, pa.int32()),
            "context_id": [NO_ID] * n,
            "start_ns": [1000, 900000, 950000, 960000],
            "end_ns": [829337, 902520, 950000, 961000],
            "op_name": [None, None, None, "MatMul"],
            "host_task_type": ["MEMCPY_ASYNC"] * 3 + ["KERNEL_AICORE"],
            "device_task_type": ["PCIE_DMA_SQE"] * 3 + ["AI_CORE"],
            "connection_id": [11, 12, 13, 14],
            "memcpy_size": [19267584, None, 256, None],
            "memcpy_operation": ["host to device", None, "host to device ex", None],
        },
    )

    def copy_args(context: Context) -> list[list[tuple[str, object]]]:
        [complete] = [
            e for e in AscendHardware(context, Processes()).events(tasks) if isinstance(e, CompleteEvents)
        ]
        names = list(complete.args)[-4:]
        values = [pa.array(complete.args[name]).to_pylist() for name in names]
        return [[(k, v[i]) for k, v in zip(names, values, strict=True) if v[i] is not None] for i in range(n)]

    recorded = replace(_context(tmp_path), memcpy_info=True)
    assert copy_args(recorded) == [
        [
            ("connection_id", 11),
            ("size(B)", 19267584),
            ("bandwidth(GB/s)", 19267584 / 828337),
            ("operation", "host to device"),
        ],
        [("connection_id", 12), ("size(B)", 0), ("bandwidth(GB/s)", 0.0), ("operation", "other")],
        [
            ("connection_id", 13),
            ("size(B)", 256),
            ("bandwidth(GB/s)", 0.0),
            ("operation", "host to device ex"),
        ],
        [("connection_id", 14)],
    ]
    assert copy_args(_context(tmp_path))[1:] == [
        [("connection_id", 12)],
        [
            ("connection_id", 13),
            ("size(B)", 256),
            ("bandwidth(GB/s)", 0.0),
            ("operation", "host to device ex"),
        ],
        [("connection_id", 14)],
    ]


def _logic_stream_info(records: list[tuple[int, list[int]]]) -> pa.Table:
    """``logic_stream_info`` records (logic stream, its physical streams) through the codec's bytes."""
    codec = get_codec("logic_stream_info")
    raw = codec.encode(
        {"logic_stream_id": [logic for logic, _ in records], "physic_stream_ids": [ids for _, ids in records]}
    )
    return pa.Table.from_batches([codec.decode(np.frombuffer(raw, np.uint8), DecodeContext()).batch])


def test_ascend_hardware_draws_each_task_on_its_logic_stream(tmp_path: Path) -> None:
    """msprof draws a task on the GE logic stream its physical stream belongs to: ``tid``, the thread's
    name ``Stream {tid}`` and sort index, and the HostToDevice flow end take the logic id, a stream no
    record names keeps its own id, and ``Physic Stream Id`` stays physical (C++
    ``AscendHardwareAssembler::GetPhysicStreamId``; Python ``format_task_scheduler`` with
    ``GeLogicStreamSingleton.get_logic_stream_id``). A physical stream two records name keeps the
    first one's logic stream (``HashInitProcessor::ProcessLogicStream``)."""
    mapping = logic_streams(_logic_stream_info([(1, [5, 6]), (2, [7, 6])]))
    assert mapping == {5: 1, 6: 1, 7: 2}
    context = replace(_context(tmp_path), logic_streams=mapping)
    n = 4
    tasks = schema.conform(
        schema.tasks_schema(()),
        {
            "device_id": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([5, 6, 7, 9], pa.int32()),
            "task_id": pa.array([1, 2, 3, 4], pa.int32()),
            "batch_id": pa.array([0] * n, pa.int32()),
            "context_id": [NO_ID] * n,
            "start_ns": [1000, 2000, 3000, 4000],
            "end_ns": [1500, 2500, 3500, 4500],
            "op_name": ["MatMul", "Add", "Mul", "Cast"],
            "task_type": ["AI_CORE"] * n,
            "host_task_type": ["KERNEL_AICORE"] * n,
            "device_task_type": ["AI_CORE"] * n,
            "connection_id": [11, 12, 13, 14],
            "launch_ns": [100, 200, 300, 400],
            "launch_thread_id": [7] * n,
            "launch_level": ["node"] * n,
        },
    )
    events = list(AscendHardware(context, Processes()).events(tasks))
    [complete] = [e for e in events if isinstance(e, CompleteEvents)]
    assert pa.array(complete.tid).to_pylist() == [1, 1, 2, 9]
    assert pa.array(complete.args["Physic Stream Id"]).to_pylist() == [5, 6, 7, 9]
    threads = {
        e.name: dict(zip(pa.array(e.tid).to_pylist(), pa.array(e.value).to_pylist(), strict=True))
        for e in events
        if isinstance(e, MetadataEvents) and e.name.startswith("thread_")
    }
    assert threads == {
        "thread_name": {1: "Stream 1", 2: "Stream 2", 9: "Stream 9"},
        "thread_sort_index": {1: 1, 2: 2, 9: 9},
    }
    assert [tid for _, tid, _ in _flows(events, "f")] == [1, 1, 2, 9]
    # without logic_stream_info every task stays on its physical stream
    plain = [
        e
        for e in AscendHardware(_context(tmp_path), Processes()).events(tasks)
        if isinstance(e, CompleteEvents)
    ]
    assert pa.array(plain[0].tid).to_pylist() == [5, 6, 7, 9]


def test_layout_context_reads_the_hosts_logic_stream_info(tmp_path: Path) -> None:
    """The export's context maps physical streams through the host's unaging and aging
    ``logic_stream_info`` slices (unaging first), and is empty without them."""
    raw = tmp_path / "raw"
    simulate(SimulationConfig(chip="910B", steps=1, ops_per_step=8, seed=1), raw)
    [prof] = sorted(raw.glob("PROF_*"))
    assert layout_context(discover(prof)[0], tmp_path / "out", None).logic_streams == {}
    codec = get_codec("logic_stream_info")
    (prof / "host" / "data" / "unaging.additional.logic_stream_info.slice_0").write_bytes(
        codec.encode({"logic_stream_id": [0], "physic_stream_ids": [[2, 3]]})
    )
    (prof / "host" / "data" / "aging.additional.logic_stream_info.slice_0").write_bytes(
        codec.encode({"logic_stream_id": [4], "physic_stream_ids": [[3, 8]]})
    )
    context = layout_context(discover(prof)[0], tmp_path / "out", None)
    assert context.logic_streams == {2: 0, 3: 0, 8: 4}
