"""The headers and line ends profstream writes equal those of the real files in shared/realdata.

kernel_details' PMU columns depend on the collected events, so its header is rebuilt from the real
file's own metric names (its unit suffixes stripped) and must come back column for column; every
other file has a fixed header, compared with a profstream export of a simulated run.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from profstream.engine.layouts import Context
from profstream.engine.layouts.msprof import metric_header, task_cells
from profstream.engine.layouts.torch_npu import RENAMES
from profstream.export import export
from profstream.simulate import SimulationConfig, simulate

REAL = Path(__file__).resolve().parents[3] / "shared" / "realdata"
TORCH = REAL / "msinsight-torchnpu-910b" / "test" / "data" / "pytorch" / "text"
FIXED_COLUMNS = 21  # Step Id .. Context ID in the Level1/Level2 kernel_details

pytestmark = pytest.mark.skipif(not TORCH.is_dir(), reason="shared/realdata is not beside the checkout")


def header(path: Path) -> tuple[list[str], bytes]:
    first = path.read_bytes().split(b"\n", 1)[0]
    ending = b"\r\n" if first.endswith(b"\r") else b"\n"
    return first.rstrip(b"\r").decode().split(","), ending


def _context(metrics: list[str]) -> Context:
    return Context(
        out_dir=Path(),
        timestamp="",
        wall_offset_ns=0,
        devices=(0,),
        metric_columns=metrics,
        stars=True,
        process_id=0,
    )


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_kernel_details_header_is_rebuilt_column_for_column(level: str) -> None:
    real, _ = header(TORCH / level / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    metrics = [re.sub(r"\((us|GB/s|KB|%)\)$", "", name) for name in real[FIXED_COLUMNS:]]
    cells = task_cells(_context(metrics), RENAMES)
    assert ["Step Id", *(c.header for c in cells)] == real
    assert [metric_header(m) for m in metrics] == real[FIXED_COLUMNS:]


def test_level0_kernel_details_header() -> None:
    real, _ = header(TORCH / "level0" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert ["Step Id", *(c.header for c in task_cells(_context([]), RENAMES, short=True))] == real


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("headers")
    simulate(
        SimulationConfig(
            chip="910B", steps=2, ops_per_step=24, framework="torch_npu", seed=11, l2_cache=True
        ),
        base / "raw",
    )
    export(base / "raw", kind="summary", layout="torch_npu", output=base / "torch_npu")
    export(base / "raw", kind="summary", layout="msprof", output=base / "msprof")
    return base


@pytest.mark.parametrize(
    "name",
    [
        "op_statistic.csv",
        "api_statistic.csv",
        "step_trace_time.csv",
        "operator_memory.csv",
        "memory_record.csv",
        "npu_module_mem.csv",
        "operator_details.csv",
        "l2_cache.csv",
    ],
)
def test_torch_npu_headers_equal_the_real_files_and_lines_end_in_crlf(exported: Path, name: str) -> None:
    real, _ = header(TORCH / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / name)
    # line ends are not compared with the real files: some of them went through a CRLF -> LF conversion
    # (operator_details.csv there holds ";\n" where torch_npu writes ";\r\n"; torch_npu.py's docstring)
    assert header(exported / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / name) == (real, b"\r\n")


def test_simulated_910b_pipe_utilization_kernel_details_equals_the_real_level1_header(exported: Path) -> None:
    """A simulated 910B PipeUtilization run programs the CloudV2 collector's event lists (AIC: the Exct
    list, AIV: the default one; platform_adapter_cloudv2.cpp), so its kernel_details has the real
    Level1 file's PMU columns (aic_fixpipe, no aic_mte3), with ratios and miss rates in [0, 1]."""
    real, _ = header(TORCH / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    path = exported / "torch_npu" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    assert header(path)[0] == real
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    ratios = [name for name in real if name.endswith(("_ratio", "_miss_rate"))]
    values = [float(row[name]) for row in rows for name in ratios if row[name] != "N/A"]  # tasks without PMU
    assert rows and ratios and all(0.0 <= value <= 1.0 for value in values)
    assert any(row["aic_mac_ratio"] not in ("N/A", "0.0", "0") for row in rows)  # AIC counters counted


def test_msprof_api_statistic_header_equals_the_real_file(exported: Path) -> None:
    [real_file] = (REAL / "dora-robo-310b-torchnpu").rglob("api_statistic_*.csv")
    [ours_file] = (exported / "msprof" / "mindstudio_profiler_output").glob("api_statistic_*.csv")
    assert header(ours_file) == header(real_file)


def _api_args(trace: Path) -> dict[str, tuple[tuple[str, ...], dict[str, set[str]]]]:
    """Per CANN API level of a trace: the arg names in order, and the Mode and id values seen."""
    found: dict[str, tuple[tuple[str, ...], dict[str, set[str]]]] = {}
    for event in json.loads(trace.read_text()):
        args = event.get("args") or {}
        if event.get("ph") == "X" and "Thread Id" in args and "level" in args:
            keys, values = found.setdefault(args["level"], (tuple(args), {"Mode": set(), "id": set()}))
            assert tuple(args) == keys
            values["Mode"].add(args["Mode"])
            values["id"].add(args["id"])
            assert isinstance(args["item_id"], str)  # a hash_dic name or the number as text
    return found


def test_cann_api_events_carry_msprofs_args(exported: Path) -> None:
    """The CANN layer's API events carry the args of the real trace, in its order (ApiTraceEvent):
    Mode is the acl API's category (ACL_RTS, ACL_NN, ...) or the node struct type (launch), id the
    acl API's name and "0" at the node level, item_id text."""
    real = _api_args(TORCH / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    export(exported / "raw", kind="timeline", layout="torch_npu", output=exported / "timeline")
    ours = _api_args(exported / "timeline" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    for level in ("acl", "node"):
        assert ours[level][0] == real[level][0]
    assert ours["acl"][1]["Mode"] <= {"ACL_OP", "ACL_MODEL", "ACL_RTS", "ACL_OTHERS", "ACL_NN", "HOST_HCCL"}
    assert ours["node"][1] == real["node"][1] == {"Mode": {"launch"}, "id": {"0"}}
