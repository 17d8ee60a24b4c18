"""The import source: exported files read back as canonical tables, on hand-built exports."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream import events
from profstream.engine import schema
from profstream.engine.imports import open_export
from profstream.engine.imports.trace import iter_events
from profstream.engine.kernels import text
from profstream.errors import DecodeError, InputPathError

# --------------------------------------------------------------------------- decimal text


def test_parse_decimal_by_hand() -> None:
    """µs text to ns digit for digit: quotes, TAB, exponents, N/A, 19-digit wall-clock times."""
    values = [
        "1736408883674584.732\t",
        '"53.7410625"',
        "1e-05",
        "-1.5",
        "12",
        "N/A",
        "",
        ".5",
        "7.",
        "1e",
        "x1",
    ]
    assert text.parse_decimal(pa.array(values), 3).to_pylist() == [
        1736408883674584732,
        53741,
        0,
        -1500,
        12000,
        None,
        None,
        500,
        7000,
        None,
        None,
    ]
    nearest = text.parse_decimal(
        pa.array(["53.7415", "0.0004999", "8873.756000000001", "-0.0005"]), 3, text.NEAREST
    )
    assert nearest.to_pylist() == [53742, 0, 8873756, -1]


def test_parse_decimal_refuses_what_int64_cannot_hold() -> None:
    """A value beyond int64 is null, not wrapped or silently cut."""
    got = text.parse_decimal(pa.array(["9223372036854775.807", "9223372036854775.808", "1e30"]), 3)
    assert got.to_pylist() == [9223372036854775807, None, None]


@settings(max_examples=200, deadline=None)
@given(
    units=st.integers(0, 10**15),
    fraction=st.text(alphabet="0123456789", min_size=0, max_size=9),
    negative=st.booleans(),
    exponent=st.none() | st.integers(-25, 6),
)
def test_parse_decimal_matches_decimal_arithmetic(
    units: int, fraction: str, negative: bool, exponent: int | None
) -> None:
    """Any µs text: truncation and half-away rounding to ns agree with Python's Decimal (or both overflow)."""
    literal = f"{'-' if negative else ''}{units}{'.' + fraction if fraction else ''}"
    literal += "" if exponent is None else f"e{exponent}"
    exact = Decimal(literal) * 1000
    expected = []
    for value in (int(exact), int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))):
        expected.append(value if abs(value) <= np.iinfo(np.int64).max else None)
    assert text.parse_decimal(pa.array([literal]), 3).to_pylist() == expected[:1]
    assert text.parse_decimal(pa.array([literal]), 3, text.NEAREST).to_pylist() == expected[1:]


# --------------------------------------------------------------------------- JSON framing


def _scan_reference(data: bytes) -> list[Any]:
    """The oracle: the whole array with the json module."""
    return list(json.loads(data))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab{}[]",\\ é\n'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet="k{}\"'[", max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(
    objects=st.lists(
        st.dictionaries(st.text(alphabet='nm"{}', max_size=4), _json_values, max_size=4), max_size=8
    ),
    chunk=st.integers(1, 64),
)
def test_scan_objects_finds_every_event_whatever_the_chunks(
    objects: list[dict[str, Any]], chunk: int
) -> None:
    """Braces and quotes inside strings, escapes and nesting never confuse the framing."""
    data = json.dumps(objects, ensure_ascii=False).encode()
    state = text.scan_state()
    pending = b""
    found: list[Any] = []
    for i in range(0, len(data), chunk):
        buf = pending + data[i : i + chunk]
        spans = text.scan_objects(np.frombuffer(buf, np.uint8), len(pending), state)
        found += [json.loads(buf[s:e]) for s, e in zip(spans.starts, spans.ends, strict=True)]
        keep = text.open_object(state)
        keep = len(buf) if keep is None else keep
        pending = buf[keep:]
        text.rebase(state, keep)
    assert found == _scan_reference(data)
    assert text.depth(state) == 0


def _write_trace(path: Path, trace: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(trace))
    return path


def test_iter_events_streams_in_small_chunks(tmp_path: Path) -> None:
    """Events decode the same whether the file is read in 5-byte chunks or at once."""
    trace = [
        {"ph": "X", "name": f"op{{{i}}}", "pid": 1, "tid": 2, "ts": f"{i}.5", "dur": 1} for i in range(50)
    ]
    path = _write_trace(tmp_path / "t.json", trace)
    small = [e.name for chunk in iter_events(path, 5) for e in chunk]
    large = [e.name for chunk in iter_events(path) for e in chunk]
    assert small == large == [e["name"] for e in trace]


def test_iter_events_rejects_what_is_not_an_event_array(tmp_path: Path) -> None:
    """A root object, or an event cut off at the end, is a DecodeError naming the file."""
    (tmp_path / "obj.json").write_text('{"traceEvents": []}')
    with pytest.raises(DecodeError, match="JSON array") as err:
        list(iter_events(tmp_path / "obj.json"))
    assert err.value.path == str(tmp_path / "obj.json")
    (tmp_path / "cut.json").write_text('[{"ph": "X"}, {"ph": "X", "na')
    with pytest.raises(DecodeError, match="unfinished"):
        list(iter_events(tmp_path / "cut.json"))


def test_iter_events_accepts_a_missing_closing_bracket_with_a_warning(tmp_path: Path) -> None:
    """torch_npu's two-step write can leave the array unclosed: the events arrive, it is logged."""
    (tmp_path / "open.json").write_text('[{"ph": "X", "name": "a"},\n{"ph": "X", "name": "b"},')
    with capture_logs() as logs:
        names = [e.name for chunk in iter_events(tmp_path / "open.json") for e in chunk]
    assert names == ["a", "b"]
    assert [e["event"] for e in logs] == [events.TRUNCATED_TAIL]


# --------------------------------------------------------------------------- torch_npu layout


def _meta(pid: int, name: str, label: str, threads: dict[int, str] | None = None) -> list[dict[str, Any]]:
    out = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}},
    ]
    out += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": n}}
        for tid, n in (threads or {}).items()
    ]
    return out


HW, HCCL, OVERLAP, PY = 3170820515, 3170820579, 3170820835, 4242


def _trace_events() -> list[dict[str, Any]]:
    """A small torch_npu trace whose layer metadata comes after the layers' events."""
    return [
        {
            "ph": "X",
            "name": "aten::add",
            "pid": PY,
            "tid": 7,
            "ts": "1000.100",
            "dur": 5.5,
            "cat": "cpu_op",
            "args": {
                "Sequence number": 3,
                "Fwd thread id": 0,
                "Input Dims": "1,2;\r\n",
                "Input type": "float",
            },
        },
        {
            "ph": "X",
            "name": "Enqueue",
            "pid": PY,
            "tid": 7,
            "ts": "1000.200",
            "dur": 1,
            "cat": "enqueue",
            "args": {"correlation_id": 9},
        },
        {
            "ph": "X",
            "name": "trans_TransData_0",
            "pid": HW,
            "tid": 2,
            "ts": "1736408883704643.212",
            "dur": 53.7410625,
            "args": {
                "Model Id": 4294967295,
                "Task Type": "AI_CORE",
                "Physic Stream Id": 2,
                "Task Id": 11051,
                "Batch Id": 0,
                "Subtask Id": 4294967295,
                "connection_id": 953,
            },
        },
        {"ph": "X", "name": "Iteration 1", "pid": HW, "tid": 70000, "ts": "1.000", "dur": 1, "args": {}},
        {
            "ph": "X",
            "name": "hcom_allReduce__586_0_1",
            "pid": HCCL,
            "tid": 0,
            "ts": "1736408883732241.564",
            "dur": 79089.52021875,
            "args": {
                "connection_id": 1175,
                "model id": 4294967295,
                "data_type": "FP32",
                "alg_type": "MESH-RING",
                "count": 4097000,
                "relay": "no",
                "retry": "yes",
            },
        },
        {
            "ph": "X",
            "name": "Memcpy",
            "pid": HCCL,
            "tid": 1,
            "ts": "1736408883732243.384",
            "dur": 3.36,
            "args": {},
        },
        {
            "ph": "X",
            "name": "Computing",
            "pid": OVERLAP,
            "tid": 0,
            "ts": "1736408883704643.212",
            "dur": 53.742,
        },
        {
            "ph": "s",
            "name": "torch_to_npu",
            "pid": PY,
            "tid": 7,
            "ts": "1000.100",
            "id": 1,
            "cat": "async_npu",
        },
        *_meta(PY, "Python", "CPU"),
        *_meta(HW, "Ascend Hardware", "NPU 3", {2: "Stream 2", 70000: "Step Trace(Model ID:0)"}),
        *_meta(HCCL, "Communication", "NPU 3", {0: "Group 17 Communication", 1: "Plane 0"}),
        *_meta(OVERLAP, "Overlap Analysis", "NPU 3", {0: "Computing"}),
    ]


KERNEL_DETAILS = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),"
    "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,"
    "Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),cube_utilization(%)\n"
    "50,4294967295,11051,2,trans_TransData_0,TransData,dynamic,AI_VECTOR_CORE,1736408883704643.212\t,53.741,0,32,0,"
    'NO,"""32,3,224,224""",FLOAT,NCHW,"""32,1,224,224,8""",FLOAT,NC1HWC0,N/A,0.5,N/A\n'
    "50,4294967295,N/A,N/A,hcom_allReduce__586_0_1,hcom_allReduce_,N/A,HCCL,1736408883732241.563\t,79089.52,"
    "0,0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,3,N/A,N/A\n"
)
STEP_TRACE_TIME = (
    "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
    "Communication(Not Overlapped and Exclude Receive),Preparing\n"
    "50,8873.756000000001,101963.203,4028.6750000000175,105991.87800000001,25744.050000000003,136581.0,0,"
    "101963.203,17902.5\n"
)


@pytest.fixture
def torch_export(tmp_path: Path) -> Path:
    run = tmp_path / "host_1_ascend_pt"
    out = run / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _write_trace(out / "trace_view.json", _trace_events())
    (out / "kernel_details.csv").write_text(KERNEL_DETAILS)
    (out / "step_trace_time.csv").write_text(STEP_TRACE_TIME)
    (out / "op_statistic.csv").write_text(
        "OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "TransData,AI_VECTOR_CORE,57,1423.208,6.54,24.969,70.801,16.038\n"
    )
    return run


def test_torch_export_lists_its_tables_and_sources(torch_export: Path) -> None:
    """The run dir leads to ASCEND_PROFILER_OUTPUT; tables and their sources are listed."""
    export = open_export(torch_export)
    assert export.directory == torch_export / "ASCEND_PROFILER_OUTPUT"
    assert export.tables == ("tasks", "comm", "overlap", "ops", "step_time", "op_statistic")
    assert export.sources("tasks") == ("kernel_details", "trace")
    assert export.default_device == 3  # the only "NPU <id>" label


def test_trace_tables_take_exact_times_and_args(torch_export: Path) -> None:
    """Trace events become tasks/comm/overlap/ops rows with ns times parsed from the text."""
    export = open_export(torch_export, chunk_bytes=64)
    tasks = export.table("tasks", source="trace").read_all().to_pylist()
    assert len(tasks) == 1  # the Step Trace thread is not a device task
    task = tasks[0]
    assert task["start_ns"] == 1736408883704643212
    assert task["end_ns"] == 1736408883704643212 + 53741  # whole ns of 53741.0625
    assert (task["device_id"], task["stream_id"], task["task_id"], task["batch_id"]) == (3, 2, 11051, 0)
    assert (task["context_id"], task["connection_id"], task["device_task_type"]) == (
        schema.NO_ID,
        953,
        "AI_CORE",
    )
    [comm] = export.table("comm").read_all().to_pylist()
    assert (comm["op_type"], comm["group_name"], comm["count"], comm["relay"], comm["retry"]) == (
        "hcom_allReduce",
        "17",
        4097000,
        False,
        True,
    )
    assert comm["end_ns"] - comm["start_ns"] == 79089520
    [lane] = export.table("overlap").read_all().to_pylist()
    assert (lane["kind"], lane["end_ns"] - lane["start_ns"], lane["device_id"]) == ("Computing", 53742, 3)
    ops = export.table("ops").read_all().to_pylist()
    assert [(o["op_id"], o["kind"], o["name"]) for o in ops] == [
        (0, "cpu_op", "aten::add"),
        (1, "enqueue", "Enqueue"),
    ]
    assert (ops[0]["start_ns"], ops[0]["end_ns"], ops[0]["sequence_number"]) == (1000100, 1005600, 3)
    assert ops[1]["correlation_id"] == 9
    for name in ("tasks", "comm", "overlap", "ops"):
        assert export.table(name, source="trace").schema == schema.TABLES[name]


def test_kernel_details_rows_become_tasks(torch_export: Path) -> None:
    """TAB after the start, N/A, quoted shapes and PMU metric columns are converted."""
    reader = open_export(torch_export, device_id=5).table("tasks")
    assert reader.schema == schema.tasks_schema(["aicore_time", "cube_utilization"])
    first, hccl = reader.read_all().to_pylist()
    assert (first["start_ns"], first["end_ns"]) == (1736408883704643212, 1736408883704696953)
    assert (first["device_id"], first["task_type"], first["op_type"], first["block_dim"]) == (
        5,
        "AI_VECTOR_CORE",
        "TransData",
        32,
    )
    assert (first["input_shapes"], first["output_formats"], first["context_id"]) == (
        "32,3,224,224",
        "NC1HWC0",
        schema.NO_ID,
    )
    assert (first["aicore_time"], first["cube_utilization"]) == (0.5, None)
    assert (hccl["task_id"], hccl["stream_id"], hccl["op_state"], hccl["context_id"]) == (None, None, None, 3)


def test_step_time_and_op_statistic_csvs(torch_export: Path) -> None:
    """Float sums round to the nearest ns; statistics columns map by name."""
    export = open_export(torch_export)
    [step] = export.table("step_time").read_all().to_pylist()
    assert step["step"] == 50
    assert (step["computing_ns"], step["overlapped_ns"], step["stage_ns"]) == (8873756, 4028675, 136581000)
    assert step["device_id"] == 3
    [stat] = export.table("op_statistic").read_all().to_pylist()
    assert (stat["op_type"], stat["count"], stat["total_ns"], stat["avg_ns"], stat["ratio"]) == (
        "TransData",
        57,
        1423208,
        24969.0,
        16.038,
    )


def test_unknown_tables_and_missing_exports_are_errors(torch_export: Path, tmp_path: Path) -> None:
    """Asking for a table or source the export lacks, or opening a non-export, says what exists."""
    export = open_export(torch_export)
    with pytest.raises(KeyError, match="has no 'memory' table"):
        export.table("memory")
    with pytest.raises(KeyError, match="not from 'op_summary'"):
        export.table("tasks", source="op_summary")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputPathError, match="no export files"):
        open_export(tmp_path / "empty")


def test_malformed_csv_rows_raise_or_are_skipped_and_counted(torch_export: Path) -> None:
    """A row with a missing field: DecodeError by default, skipped and logged with ``skip``."""
    path = torch_export / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    path.write_text(STEP_TRACE_TIME + "51,1,2,3\n")
    with pytest.raises(DecodeError, match="fields") as err:
        open_export(torch_export).table("step_time").read_all()
    assert err.value.path == str(path)
    with capture_logs() as logs:
        rows = open_export(torch_export, on_invalid="skip").table("step_time").read_all()
    assert rows["step"].to_pylist() == [50]
    assert [e["count"] for e in logs if e["event"] == events.RECORDS_DROPPED] == [1]


# --------------------------------------------------------------------------- msprof layout


@pytest.fixture
def msprof_export(tmp_path: Path) -> Path:
    prof = tmp_path / "PROF_000001_20250109_XYZ"
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    (prof / "device_4").mkdir()
    header = "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,Task Type,"
    header += "Task Start Time(us),Task Duration(us)\n"
    (out / "op_summary_20250101000000.csv").write_text(header + "4,1,1,1,old,Old,AI_CORE,1.000\t,1.000\n")
    (out / "op_summary_slice_1_20250109120000.csv").write_text(header + "4,1,3,1,c,C,AI_CORE,3.000\t,1.000\n")
    (out / "op_summary_slice_0_20250109120000.csv").write_text(header + "4,1,2,1,b,B,AI_CORE,2.000\t,0.5\n")
    (out / "step_trace_20250109120000.csv").write_text(
        "Device_id,Iteration ID,FP Start(us),BP End(us),Iteration End(us),Iteration Time(us),"
        "FP to BP Time(us),Iteration Refresh(us),Data Aug Bound(us),Model ID,"
        "Reduce Start(us),Reduce Duration(us),Reduce Start(us),Reduce Duration(us)\n"
        "4,1,10.000,20.000,30.000,25.000,10,10,N/A,1,12.000,2.000,N/A,N/A\n"
    )
    _write_trace(out / "msprof_slice_0_20250109120000.json", _meta(100, "Overlap Analysis", "NPU 4"))
    _write_trace(
        out / "msprof_slice_1_20250109120000.json",
        [{"ph": "X", "name": "Free", "pid": 100, "tid": 3, "ts": "5.000", "dur": 1.5}],
    )
    return prof


def test_msprof_export_takes_the_newest_files_in_slice_order(msprof_export: Path) -> None:
    """The newest timestamp wins; its slices are read in slice order; metadata spans slices."""
    export = open_export(msprof_export)
    assert export.directory.name == "mindstudio_profiler_output"
    assert export.tables == ("tasks", "overlap", "steps")
    tasks = export.table("tasks").read_all()
    assert tasks["op_name"].to_pylist() == ["b", "c"]
    assert tasks["end_ns"].to_pylist() == [2500, 4000]
    assert tasks["device_id"].to_pylist() == [4, 4]
    [lane] = export.table("overlap").read_all().to_pylist()
    assert (lane["device_id"], lane["kind"], lane["start_ns"], lane["end_ns"]) == (4, "Free", 5000, 6500)


def test_msprof_step_trace_rows_outside_their_field_range_raise_or_are_skipped(msprof_export: Path) -> None:
    """A step_trace row may stop after its own Reduce pairs, but not before the fixed columns nor past
    the header: DecodeError naming the file and row by default, skipped and logged with ``skip``."""
    path = next((msprof_export / "mindstudio_profiler_output").glob("step_trace_*.csv"))
    rows = path.read_text()
    short = "4,2,10.000,20.000,40.000,25.000,10,10,N/A\n"  # stops before Model ID
    long = "4,3,10.000,20.000,50.000,25.000,10,10,N/A,1,12.000,2.000,N/A,N/A,1\n"
    fits = "4,4,10.000,20.000,60.000,25.000,10,10,N/A,1\n"  # no Reduce pair: kept
    for bad, number in ((short, 2), (long, 2)):
        path.write_text(rows + bad + fits)
        with pytest.raises(DecodeError, match="fields") as err:
            open_export(msprof_export).table("steps").read_all()
        assert (err.value.path, err.value.record_index) == (str(path), number)
    path.write_text(rows + short + long + fits)
    with capture_logs() as logs:
        steps = open_export(msprof_export, on_invalid="skip").table("steps").read_all()
    assert steps["iteration_id"].to_pylist() == [1, 4]
    assert steps["reduce_start_ns"].to_pylist() == [[12000], []]
    assert [e["count"] for e in logs if e["event"] == events.RECORDS_DROPPED] == [2]


def test_msprof_step_trace_becomes_model_steps(msprof_export: Path) -> None:
    """An iteration spans [end - time, end]; each reduce pair present becomes one list element."""
    [step] = open_export(msprof_export).table("steps").read_all().to_pylist()
    assert (step["kind"], step["model_id"], step["iteration_id"], step["device_id"]) == ("model", 1, 1, 4)
    assert (step["start_ns"], step["end_ns"], step["fp_ns"], step["bp_ns"], step["data_aug_ns"]) == (
        5000,
        30000,
        10000,
        20000,
        None,
    )
    assert (step["reduce_start_ns"], step["reduce_end_ns"]) == ([12000], [14000])
