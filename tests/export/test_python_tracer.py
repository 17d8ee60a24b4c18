"""Python tracer and GC events in torch_npu's trace_view.json: end to end on simulated runs (hand-written
records, and the simulator's own against its truth), and the shape of the real level-1 trace's
python_function events (shared/realdata)."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import profstream
from profstream.codecs.framework import (
    C_CALL,
    C_RETURN,
    GC_RECORD,
    PY_CALL,
    PY_RETURN,
    PYTHON_TRACER_FUNC,
    PYTHON_TRACER_HASH,
)
from profstream.export import export
from profstream.simulate import SimulationConfig, simulate

REAL = Path(__file__).resolve().parents[3] / (
    "shared/realdata/msinsight-torchnpu-910b/test/data/pytorch/text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
)
NAMES = {
    11: "train.py(10): step",
    12: "<built-in method len>",
    13: "Linear######4242",
    14: "main.py(1): <module>",
}


def _python_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == "python_function"]


def _check_shape(calls: list[dict[str, Any]]) -> None:
    """What holds for every python_function event of the real trace (and so must of ours)."""
    for e in calls:
        assert set(e) == {"ph", "name", "pid", "tid", "ts", "dur", "cat", "args"}  # (the sink's key order)
        assert e["ph"] == "X" and isinstance(e["ts"], str) and isinstance(e["dur"], float)
        whole, _, decimals = e["ts"].partition(".")
        assert whole.isdigit() and len(decimals) == 3
        module = "Python module id" in e["args"]
        assert set(e["args"]) == {"Python id", "Python parent id"} | (
            {"Python module id"} if module else set()
        )
        assert module == e["name"].startswith("nn.Module: ")
    by_id = {(e["tid"], e["args"]["Python id"]): e for e in calls}
    assert len(by_id) == len(calls)  # ids are unique per thread
    for e in calls:  # a parent is an enclosing call on the same thread (0: the top, or the first call)
        parent = by_id.get((e["tid"], e["args"]["Python parent id"]))
        if e["args"]["Python parent id"] == 0 and (parent is None or parent is e):
            continue
        assert parent is not None and parent["args"]["Python id"] < e["args"]["Python id"]
        start, end = Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(str(e["dur"]))
        assert Decimal(parent["ts"]) <= start and end <= Decimal(parent["ts"]) + Decimal(str(parent["dur"]))


@pytest.mark.skipif(not REAL.exists(), reason="shared/realdata not present")
def test_the_real_level1_trace_has_the_shape_we_write() -> None:
    calls = _python_events(json.loads(REAL.read_text()))
    assert len(calls) == 1282
    _check_shape(calls)


def test_python_tracer_and_gc_events_end_to_end(tmp_path: Path) -> None:
    """Calls timed at torch ops' raw bounds come out as spans equal to those ops', nested, named, numbered as
    torch_npu numbers them; a thread without torch ops is left out; the start frame written at the end of
    the file comes first; GC records become the "Python GC" process."""
    raw = tmp_path / "raw"
    config = SimulationConfig(
        chip="910B", steps=1, ops_per_step=8, framework="torch_npu", seed=5, with_stack=False, gc_detect=False
    )
    simulate(config, raw)
    ops = profstream.open(raw).read("torch_op_range").read_all().to_pylist()
    ops = sorted((o for o in ops if not o["name"].startswith("ProfilerStep")), key=lambda o: o["start_ns"])[
        :3
    ]
    tid, pid = ops[0]["start_thread_id"], ops[0]["process_id"]
    a, b, c = ops
    records = [  # (ts, tid, key, tag), the order the tracer writes them
        (a["start_ns"], tid, 11, PY_CALL),
        (a["start_ns"] + 1, tid, 12, C_CALL),
        (a["end_ns"] - 1, tid, 12, C_RETURN),
        (a["end_ns"], tid, 11, PY_RETURN),
        (b["start_ns"], 999, 11, PY_CALL),  # a thread without torch ops
        (b["start_ns"], tid, 13, PY_CALL),
        (b["end_ns"], tid, 13, PY_RETURN),
        (c["start_ns"], tid, 13, PY_CALL),
        (c["end_ns"], tid, 13, PY_RETURN),
        (c["end_ns"], 999, 11, PY_RETURN),
        (a["start_ns"] - 5, tid, 14, PY_CALL),  # on the stack when the tracer started: written at stop
    ]
    fwk = next(raw.glob("*_ascend_pt/FRAMEWORK"))
    ts, tids, keys, tags = zip(*records, strict=True)
    (fwk / "torch.python_tracer_func").write_bytes(
        PYTHON_TRACER_FUNC.encode(
            {"ts": ts, "thread_id": tids, "process_id": [pid] * len(ts), "key_hash": keys, "tag": tags}
        )
    )
    (fwk / "torch.python_tracer_hash").write_bytes(
        PYTHON_TRACER_HASH.encode({"key_hash": list(NAMES), "value": list(NAMES.values())})
    )
    (fwk / "torch.gc_record").write_bytes(
        GC_RECORD.encode({"process_id": [pid], "start_ns": [b["start_ns"]], "end_ns": [b["end_ns"]]})
    )
    export(raw, kind="timeline", layout="torch_npu", output=tmp_path / "out")
    events = json.loads((tmp_path / "out" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    calls = _python_events(events)
    _check_shape(calls)
    got = {
        (e["name"], e["args"]["Python id"], e["args"]["Python parent id"], e["args"].get("Python module id"))
        for e in calls
    }
    assert got == {
        ("main.py(1): <module>", 0, 0, None),
        ("train.py(10): step", 1, 0, None),
        ("<built-in method len>", 2, 1, None),
        ("nn.Module: Linear_0", 5, 0, 0),
        ("nn.Module: Linear_0", 7, 0, 0),
    }
    assert {e["tid"] for e in calls} == {tid} and {e["pid"] for e in calls} == {pid}
    cpu = {e["name"]: e for e in events if e.get("cat") == "cpu_op"}
    spans = Counter((e["ts"], e["dur"]) for e in calls)
    for op in (a, b, c):
        match = next(
            e for e in events if e.get("cat") == "cpu_op" and e["tid"] == tid and e["name"] == op["name"]
        )
        assert cpu and (match["ts"], match["dur"]) in spans
    gc = [e for e in events if e.get("cat") == "GC"]
    assert [(e["name"], e["args"]) for e in gc] == [("GC", {})]
    gc_pid = gc[0]["pid"]
    assert gc_pid == (pid << 10) | (1 << 5) | 0 and gc[0]["tid"] == pid
    meta = {(e["name"], e["tid"]): e["args"] for e in events if e["ph"] == "M" and e["pid"] == gc_pid}
    assert meta == {
        ("process_name", 0): {"name": "Python GC"},
        ("process_labels", 0): {"labels": "CPU"},
        ("process_sort_index", 0): {"sort_index": 1},
        ("thread_name", pid): {"name": "Python GC"},
        ("thread_sort_index", pid): {"sort_index": pid},
    }


def _micros(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def test_simulated_python_calls_and_gc_are_the_truths(tmp_path: Path) -> None:
    """A two-device torch_npu simulation (a Python thread per device, start frames at the end of the file,
    nn.Module calls, C calls): every python_function event of trace_view.json is a truth call, exactly
    (name, pid, tid, ids, ts and dur), and every GC event a truth collection; nothing else is drawn."""
    raw, truth = tmp_path / "raw", tmp_path / "truth"
    config = SimulationConfig(
        chip="910B", steps=3, ops_per_step=32, devices=2, framework="torch_npu", seed=11
    )
    simulate(config, raw, truth_dir=truth)
    export(raw, kind="timeline", layout="torch_npu", output=tmp_path / "out")
    events = json.loads((tmp_path / "out" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    offset = profstream.open(raw).collections[0].wall_offset_ns
    calls = _python_events(events)
    _check_shape(calls)

    def drawn(e: dict[str, Any]) -> tuple[Any, ...]:
        module = e["args"].get("Python module id")
        ids = (e["args"]["Python id"], e["args"]["Python parent id"], module)
        return (e["name"], e["pid"], e["tid"], *ids, e["ts"], Decimal(str(e["dur"])))

    def expected(c: dict[str, Any]) -> tuple[Any, ...]:
        ids = (c["python_id"], c["parent_id"], c["module_id"])
        dur = Decimal(c["end_ns"] - c["start_ns"]) / 1000
        return (c["name"], c["pid"], c["tid"], *ids, _micros(c["start_ns"] + offset), dur)

    rows = pq.read_table(truth / "python_calls.parquet").to_pylist()
    assert sorted(map(drawn, calls)) == sorted(map(expected, rows))
    assert len({c["tid"] for c in rows}) == 2 and len(rows) > 100
    names = {c["name"] for c in rows}
    assert {"main.py(1): <module>", "nn.Module: Block_0", "nn.Module: Block_1", "nn.Module: Model_0"} <= names
    assert {c["kind"] for c in rows} == {"python", "module", "c"}
    gc = [e for e in events if e.get("cat") == "GC"]
    collections = pq.read_table(truth / "gc.parquet").to_pylist()
    assert len(collections) == 2
    pid = collections[0]["pid"]
    assert sorted((e["pid"], e["tid"], e["ts"], Decimal(str(e["dur"]))) for e in gc) == sorted(
        (
            (pid << 10) | (1 << 5) | 0,
            g["tid"],
            _micros(g["start_ns"] + offset),
            Decimal(g["end_ns"] - g["start_ns"]) / 1000,
        )
        for g in collections
    )
