"""Memory and NpuMemory: PTA groups and names, GE pairing, memory_record order, snapshots, a simulated run."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from structlog.testing import capture_logs

import profstream
from profstream import events
from profstream.codecs.framework import BLOCK_FREE, FREE, MALLOC, NPU_DEVICE_TYPE
from profstream.engine.feeds import FeedSet
from profstream.engine.operators import memory as memory_module
from profstream.engine.operators.framework_ops import FrameworkOps
from profstream.engine.operators.memory import Memory, NpuMemory
from profstream.engine.runtime import Pipeline, at, unpack_state
from profstream.engine.schema import TABLES, conform
from profstream.simulate import SimulationConfig, simulate
from profstream.simulate.workload import build_template
from tests.engine.operators.framework_inputs import PID, Step, drive, drive_resumed

M, F, B = MALLOC, FREE, BLOCK_FREE
PTA_IN, GE_IN = "torch_memory_usage", "task_memory_info"
NAMES = {11: "GE_Add", 12: "GE_Mul", 13: "GE_Cast"}


def pta(rows: Sequence[tuple[int, ...]], *, tid: int = 1, allocator: int = 0) -> pa.RecordBatch:
    """torch_memory_usage records: (time, kind, ptr, size[, component, device]); totals follow the time."""
    full = [(*r, *(0, 0)[len(r) - 4 :]) for r in rows]
    n = len(full)
    time = np.array([r[0] for r in full], np.int64)
    return pa.RecordBatch.from_pydict(
        {
            "ptr": pa.array([r[2] for r in full], pa.int64()),
            "time_ns": pa.array(time),
            "alloc_size": pa.array([r[3] for r in full], pa.int64()),
            "total_allocated": pa.array(time * 10),
            "total_reserved": pa.array(time * 100),
            "total_active": pa.array(time * 10 + 1),
            "stream_ptr": pa.array([2] * n, pa.int64()),
            "device_type": pa.array([NPU_DEVICE_TYPE] * n, pa.int8()),
            "device_index": pa.array([r[5] for r in full], pa.int16()),
            "component_type": pa.array([r[4] for r in full], pa.uint8()),
            "data_type": pa.array([r[1] for r in full], pa.uint8()),
            "allocator_type": pa.array([allocator] * n, pa.uint8()),
            "thread_id": pa.array([tid] * n, pa.uint64()),
            "process_id": pa.array([PID] * n, pa.uint64()),
        }
    )


def ge(rows: list[tuple[int, int, int, int]], *, device: int = 0, data_len: int = 48) -> pa.RecordBatch:
    """task_memory_info records: (time, op hash, addr, signed size); totals follow the time."""
    time = np.array([r[0] for r in rows], np.int64)
    n = len(rows)
    return pa.RecordBatch.from_pydict(
        {
            "data_len": pa.array([data_len] * n, pa.uint32()),
            "addr": pa.array([r[2] for r in rows], pa.uint64()),
            "size": pa.array([r[3] for r in rows], pa.int64()),
            "node_id_hash": pa.array([r[1] for r in rows], pa.uint64()),
            "total_allocate_memory": pa.array(time * 1000, pa.uint64()),
            "total_reserve_memory": pa.array(time * 2000, pa.uint64()),
            "device_id": pa.array([device] * n, pa.uint32()),
            "device_type": pa.array([0] * n, pa.uint32()),
            "time_ns": pa.array(time),
        }
    )


def hash_dic() -> pa.Table:
    return pa.table({"hash": pa.array(list(NAMES), pa.uint64()), "value": list(NAMES.values())})


def ops(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """ops rows: (op_id, parent_id, kind, name, tid, start, end[, correlation_id])."""
    full = [(*r, None)[:8] for r in rows]
    cols = ("op_id", "parent_id", "kind", "name", "tid", "start_ns", "end_ns", "correlation_id")
    data: dict[str, Any] = {c: [r[i] for r in full] for i, c in enumerate(cols)}
    data["pid"] = [PID] * len(full)
    return conform(TABLES["ops"], {k: pa.array(v) for k, v in data.items()})


def only_pta() -> Memory:
    return Memory([0], ge=False, app_devices=(), ops_lag_ns=0)


def brief(rows: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in rows]


def unmatched(logs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    (entry,) = [e for e in logs if e["event"] == events.RECORDS_UNMATCHED and e["component"] == "memory"]
    return entry


# ----------------------------------------------------------------------------- PTA groups


def test_pta_groups_per_pointer() -> None:
    """MALLOC-MALLOC, FREE without MALLOC, BLOCK_FREE before and after FREE, BLOCK_FREE alone."""
    records = [
        (5, F, 0xA, -8),  # no MALLOC before it on 0xA: dropped
        (10, M, 0xA, 8),
        (11, M, 0xB, 16),
        (12, M, 0xC, 32),
        (13, M, 0xD, 64),
        (20, M, 0xA, 8),  # a second MALLOC closes 0xA's first group
        (21, B, 0xB, -16),  # BLOCK_FREE before FREE
        (22, F, 0xB, -16),
        (23, F, 0xC, -32),  # FREE then BLOCK_FREE
        (24, B, 0xC, -32),
        (25, B, 0xD, -64),  # BLOCK_FREE only
    ]
    with capture_logs() as logs:
        out = drive(only_pta(), [(PTA_IN, pta(records))])
    keys = ("size_bytes", "alloc_ns", "release_ns", "active_release_ns", "duration_ns", "active_duration_ns")
    assert brief(out["memory"], *keys) == [
        (8, 10, None, None, None, None),
        (16, 11, 22, 21, 11, 10),
        (32, 12, 23, 24, 11, 12),
        (64, 13, None, 25, None, 12),
        (8, 20, None, None, None, None),  # never freed: comes out at the end
    ]
    release = ("release_total_allocated", "release_total_reserved", "release_total_active")
    assert brief(out["memory"], *release) == [
        (None, None, None),
        (220, 2200, 221),  # from the FREE
        (230, 2300, 231),
        (250, 2500, 251),  # from the BLOCK_FREE, the only release
        (None, None, None),
    ]
    first = out["memory"][1]
    assert (first["alloc_total_allocated"], first["alloc_total_reserved"], first["alloc_total_active"]) == (
        110,
        1100,
        111,
    )
    assert {(r["source"], r["device_type"], r["stream_ptr"], r["device_id"]) for r in out["memory"]} == {
        ("PTA", "NPU:0", 2, 0)
    }
    entry = unmatched(logs)
    assert (entry["pta_frees_without_malloc"], entry["pta_incomplete"]) == (1, 2 + 1 + 2)


def test_output_watermark_holds_open_allocations() -> None:
    """An allocation not yet released will come out later with its allocation time."""
    op = only_pta()
    op.push(PTA_IN, pta([(10, M, 1, 8), (20, M, 2, 8), (30, F, 2, -8), (31, B, 2, -8)]))
    op.advance(100)
    assert op.output_watermark(100) == 10
    op.push(PTA_IN, pta([(110, F, 1, -8), (111, B, 1, -8)]))
    op.advance(200)
    assert op.output_watermark(200) == 200


def test_external_allocator_records_feed_only_memory_record() -> None:
    """allocator_type 1 records make memory_record rows, no operator rows; non-NPU records neither."""
    batch = pta([(10, M, 1, 8), (20, F, 1, -8)], allocator=1)
    other = pta([(15, M, 2, 8)]).set_column(7, "device_type", pa.array([1], pa.int8()))
    with capture_logs() as logs:
        out = drive(only_pta(), [(PTA_IN, batch), (PTA_IN, other)])
    assert "memory" not in out
    assert brief(out["memory_record"], "component", "time_ns") == [
        ("PTA", 10),
        ("PTA+GE", 10),
        ("PTA", 20),
        ("PTA+GE", 20),
    ]
    assert unmatched(logs)["pta_not_npu"] == 1


def test_pta_device_is_the_only_device_dir() -> None:
    """With one device dir its id names the records' device; with several, the record's index does."""
    records = [(10, M, 1, 8, 0, 0), (11, M, 2, 8, 0, 1)]
    single = drive(Memory([5], ge=False, ops_lag_ns=0, app_devices=()), [(PTA_IN, pta(records))])
    several = drive(Memory([5, 6], ge=False, ops_lag_ns=0, app_devices=()), [(PTA_IN, pta(records))])
    assert brief(single["memory"], "device_id", "device_type") == [(5, "NPU:5"), (5, "NPU:5")]
    assert brief(several["memory"], "device_id", "device_type") == [(0, "NPU:0"), (1, "NPU:1")]


# ----------------------------------------------------------------------------- names


def test_names_from_the_op_tree() -> None:
    """Last op started before the record on its thread, walked up to one still running; exclusions."""
    tree = ops(
        [
            (0, None, "cpu_op", "A", 1, 0, 100),
            (1, 0, "cpu_op", "B", 1, 10, 20),
            (2, 0, "cpu_op", "empty_tensor", 1, 30, 40),
        ]
    )
    records = [(15, M, 1, 8), (35, M, 2, 8), (50, M, 3, 8), (200, M, 4, 8), (-5, M, 5, 8)]
    with capture_logs() as logs:
        out = drive(
            only_pta(), [("ops", tree), (PTA_IN, pta(records)), (PTA_IN, pta([(15, M, 6, 8)], tid=2))]
        )
    assert brief(out["memory"], "alloc_ns", "name") == [
        (-5, ""),
        (15, "B"),
        (15, ""),
        (35, "A"),
        (50, "A"),
        (200, ""),
    ]
    assert unmatched(logs)["unnamed"] == 3


def test_names_inside_a_dequeue_window() -> None:
    """A malloc in a dequeue window takes the aten/npu op around the enqueue of that correlation id."""
    tree = ops(
        [
            (0, None, "cpu_op", "ProfilerStep#1", 1, 0, 1000),
            (1, 0, "cpu_op", "aten::linear", 1, 40, 58),
            (2, 1, "cpu_op", "MatMul", 1, 50, 56),
            (3, 2, "enqueue", "Enqueue", 1, 52, 55, 5),
            (4, None, "dequeue", "Dequeue@MatMul", 9, 60, 80, 5),
            (5, 0, "cpu_op", "npu_fusion", 1, 100, 120),
            (6, 5, "enqueue", "Enqueue", 1, 110, 111, 6),
            (7, None, "dequeue", "Dequeue@npu_fusion", 9, 130, 140, 6),
            (8, None, "dequeue", "Dequeue@lost", 9, 150, 160, 77),
        ]
    )
    records = [(70, M, 1, 8), (80, M, 2, 8), (135, M, 3, 8), (155, M, 4, 8)]
    out = drive(only_pta(), [("ops", tree), (PTA_IN, pta(records, tid=9))])
    # 80 is the window's end (excluded): thread 9 ran no op, so no name; 77 has no enqueue
    assert brief(out["memory"], "alloc_ns", "name") == [
        (70, "aten::linear"),
        (80, ""),
        (135, "npu_fusion"),
        (155, ""),
    ]


def test_names_of_plain_and_null_op_names() -> None:
    """An op without a name gives an empty one (not counted as unnamed); ``kind`` and ``name`` columns
    that are plain strings, not dictionaries, name the same."""
    tree = ops([(0, None, "cpu_op", None, 1, 0, 100), (1, None, "cpu_op", "aten::add", 1, 20, 30)])
    plain = pa.RecordBatch.from_arrays(
        [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in tree.columns],
        names=tree.schema.names,
    )
    records = [(10, M, 1, 8), (25, M, 2, 8)]
    for batch in (tree, plain):
        with capture_logs() as logs:
            out = drive(only_pta(), [("ops", batch), (PTA_IN, pta(records))])
        assert brief(out["memory"], "alloc_ns", "name") == [(10, ""), (25, "aten::add")]
        assert unmatched(logs)["unnamed"] == 0


def test_names_wait_for_the_ops() -> None:
    """Records are held until the ops stream is complete past them (ops_lag_ns behind the watermark)."""
    op = Memory([0], ge=False, app_devices=(), ops_lag_ns=100)
    op.push(PTA_IN, pta([(50, M, 1, 8), (60, F, 1, -8), (61, B, 1, -8)]))
    assert op.advance(120) == []  # horizon 20
    op.push("ops", ops([(0, None, "cpu_op", "late::op", 1, 40, 70)]))
    memory = [r for n, b in op.advance(200) if n == "memory" for r in b.to_pylist()]
    assert brief(memory, "name", "alloc_ns", "release_ns") == [("late::op", 50, 60)]


# ----------------------------------------------------------------------------- GE


def test_ge_pairs_drops_lone_releases_and_keeps_open_allocations_in_first_allocation_order() -> None:
    """msprof's NpuOpMemCalculator (Python ``_calc_operator_memory``, C++ ``NpuOpMemCalculator::Calculate``):
    rows at their releases; a release without its allocation makes none; the allocations never released
    at the end, each key where it was first allocated (a dict keeps a replaced key's place; C++
    ``insertionOrder``), with the latest allocation's values."""
    records = [
        (5, 12, 2, -50),  # released, never allocated in the window: no row
        (10, 11, 1, 100),
        (15, 11, 1, 0),
        (20, 11, 1, -100),
        (30, 13, 3, 30),
        (40, 99, 4, 7),
        (45, 11, 5, 8),
        (50, 12, 6, 9),
        (55, 11, 5, 10),  # replaces the allocation of 45, which keeps its place before 50's
    ]
    short = ge([(12, 11, 9, 5)], data_len=40)
    with capture_logs() as logs:
        out = drive(
            Memory([0], pta=False, app_devices=(), hashes=hash_dic()), [(GE_IN, ge(records)), (GE_IN, short)]
        )
    keys = (
        "name",
        "size_bytes",
        "alloc_ns",
        "release_ns",
        "duration_ns",
        "alloc_total_allocated",
        "release_total_reserved",
    )
    assert brief(out["memory"], *keys) == [
        ("GE_Add", 100, 10, 20, 10, 10_000, 40_000),
        ("GE_Cast", 30, 30, None, None, 30_000, None),  # released after the window
        ("99", 7, 40, None, None, 40_000, None),  # a hash the dictionary lacks keeps its number
        ("GE_Add", 10, 55, None, None, 55_000, None),
        ("GE_Mul", 9, 50, None, None, 50_000, None),
    ]
    assert {
        (r["source"], r["device_type"], r["active_release_ns"], r["alloc_total_active"])
        for r in out["memory"]
    } == {("GE", "NPU:0", None, None)}
    assert [r["component"] for r in out["memory_record"]].count("GE") == 9
    entry = unmatched(logs)
    counts = (
        "ge_releases_without_allocation",
        "ge_zero_size",
        "ge_never_released",
        "ge_allocations_replaced",
    )
    assert tuple(entry[k] for k in counts) == (1, 1, 4, 1)
    assert entry["ge_short_records"] == 1


# ----------------------------------------------------------------------------- memory_record


def npu_mem(rows: list[tuple[int, int, int, int]], device: int = 0) -> pa.RecordBatch:
    """Canonical npu_mem rows: (time, event code, ddr, hbm)."""
    return conform(
        TABLES["npu_mem"],
        {
            "device_id": pa.array([device] * len(rows), pa.int32()),
            "event": pa.array([("APP", "Device")[r[1]] for r in rows]),
            "time_ns": pa.array([r[0] for r in rows], pa.int64()),
            "ddr_bytes": pa.array([r[2] for r in rows], pa.int64()),
            "hbm_bytes": pa.array([r[3] for r in rows], pa.int64()),
        },
    )


def test_memory_record_order_and_sums() -> None:
    """APP, PTA, GE at one time in that order; PTA+GE rows add the device's latest other component."""
    op = Memory([0, 1], ops_lag_ns=0)
    steps: list[Step] = [
        (PTA_IN, pta([(10, M, 1, 8), (12, M, 2, 8, 1), (20, F, 1, -8), (25, M, 3, 8, 0, 1)])),
        (GE_IN, ge([(10, 11, 1, 100), (15, 11, 1, -100)])),
        (at("npu_mem", 0), npu_mem([(10, 0, 1, 2), (10, 1, 5, 5)])),
        (at("npu_mem", 1), npu_mem([(11, 0, 3, 4)], device=1)),
    ]
    out = drive(op, steps)
    assert brief(
        out["memory_record"],
        "device_id",
        "component",
        "time_ns",
        "total_allocated",
        "total_reserved",
        "total_active",
        "stream_ptr",
    ) == [
        (0, "APP", 10, None, 3, None, None),
        (0, "PTA", 10, 100, 1000, 101, 2),
        (0, "PTA+GE", 10, 100, 1000, 101, 2),  # no GE record yet
        (0, "GE", 10, 10_000, 20_000, None, None),
        (0, "PTA+GE", 10, 10_100, 21_000, 101, 2),
        (1, "APP", 11, None, 7, None, None),
        (0, "WORKSPACE", 12, 120, 1200, 121, 2),  # no companion, not the latest PTA
        (0, "GE", 15, 15_000, 30_000, None, None),
        (0, "PTA+GE", 15, 15_100, 31_000, 101, 2),
        (0, "PTA", 20, 200, 2000, 201, 2),
        (0, "PTA+GE", 20, 15_200, 32_000, 201, 2),
        (1, "PTA", 25, 250, 2500, 251, 2),  # device 1 has no GE record
        (1, "PTA+GE", 25, 250, 2500, 251, 2),
    ]
    assert {r["device_type"] for r in out["memory_record"] if r["device_id"] == 1} == {"NPU:1"}


def test_the_companion_of_a_ge_record_before_any_pta_record_has_an_active_total_of_0() -> None:
    """torch_npu's ``_combine_record`` with no PTA record yet copies the GE record's totals, whose
    active total ``GeMemoryRecordBean.total_active`` gives as 0 (the GE row itself prints none)."""
    out = drive(
        Memory([0], app_devices=(), ops_lag_ns=0),
        [(GE_IN, ge([(5, 11, 1, 100)])), (PTA_IN, pta([(10, M, 1, 8)]))],
    )
    assert brief(
        out["memory_record"], "component", "time_ns", "total_allocated", "total_active", "stream_ptr"
    ) == [
        ("GE", 5, 5_000, None, None),
        ("PTA+GE", 5, 5_000, 0, None),
        ("PTA", 10, 100, 101, 2),
        ("PTA+GE", 10, 5_100, 101, 2),
    ]


# ----------------------------------------------------------------------------- device samples


def test_npu_memory_tables() -> None:
    """event 0/1 -> APP/Device; module ids -> msprof names, unknown ids keep their number; huge -> null."""
    samples, modules_op = NpuMemory(3, "npu_mem"), NpuMemory(3, "npu_module_mem")
    assert (samples.inputs, samples.outputs) == ((at("npu_mem_raw", 3),), (at("npu_mem", 3),))
    assert (modules_op.inputs, modules_op.outputs) == (
        (at("npu_module_mem_raw", 3),),
        (at("npu_module_mem", 3),),
    )
    raw = pa.RecordBatch.from_pydict(
        {
            "event": pa.array([0, 1, 7], pa.uint32()),
            "timestamp": pa.array([1, 1, 1], pa.uint64()),
            "ddr": pa.array([10, 2**63 + 5, 1], pa.uint64()),
            "hbm": pa.array([20, 30, 1], pa.uint64()),
            "time_ns": pa.array([100, 100, 200], pa.int64()),
        }
    )
    modules = pa.RecordBatch.from_pydict(
        {
            "module_id": pa.array([45, 3, 1000, 0, 9], pa.uint32()),
            "cpu_cycle_count": pa.array([1, 1, 1, 1, 1], pa.uint64()),
            "total_size": pa.array([1 << 20, -1, 5, 0, 0], pa.int64()),
            "time_ns": pa.array([100, 100, 100, 100, 100], pa.int64()),
        }
    )
    out = drive(samples, [(at("npu_mem_raw", 3), raw)]) | drive(
        modules_op, [(at("npu_module_mem_raw", 3), modules)]
    )
    assert brief(out[at("npu_mem", 3)], "device_id", "event", "time_ns", "ddr_bytes", "hbm_bytes") == [
        (3, "APP", 100, 10, 20),
        (3, "Device", 100, None, 30),
        (3, "7", 200, 1, 1),
    ]
    # msprof's C++ MODULE_NAME_TABLE, as the real files print it: 0 is SLOG, 9 HDC
    assert brief(out[at("npu_module_mem", 3)], "component", "total_reserved_bytes") == [
        ("GE", 1 << 20),
        ("HCCL", None),
        ("1000", 5),
        ("SLOG", 0),
        ("HDC", 0),
    ]
    with pytest.raises(ValueError, match="family"):
        NpuMemory(0, "npu_mem_app")
    with pytest.raises(KeyError, match="does not read"):
        samples.push(at("npu_module_mem_raw", 3), modules)


# ----------------------------------------------------------------------------- snapshots


def memory_steps() -> list[Step]:
    rng = np.random.default_rng(3)
    steps: list[Step] = []
    op_id = 0
    for block in range(5):
        base = block * 1000
        tree: list[tuple[Any, ...]] = [(op_id, None, "cpu_op", f"ProfilerStep#{block}", 1, base, base + 990)]
        records, ge_rows = [], []
        for k in range(6):
            start = base + 10 + k * 150
            tree.append((op_id + 1 + k, op_id, "cpu_op", f"aten::op{k}", 1, start, start + 100))
            ptr = 0x100 + (block * 6 + k) % 9
            records += [(start + 5, M, ptr, 64), (start + 60 + int(rng.integers(0, 300)), F, ptr, -64)]
            ge_rows += [(start + 7, 11 + k % 3, ptr, 64), (start + 90, 11 + k % 3, ptr, -64)]
        op_id += 7
        records.sort()
        steps += [
            ("ops", ops(tree)),
            (PTA_IN, pta(records)),
            (GE_IN, ge(sorted(ge_rows))),
            (at("npu_mem", 0), npu_mem([(base + 500, 0, 1, 2)])),
            base + 800,
        ]
    return steps


def test_a_large_release_is_emitted_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """One emit step turns about ``EMIT_RECORDS`` records into rows; slicing changes no row, only
    where the ``memory`` rows of one step are cut into batches (each sorted by allocation time)."""

    def make() -> Any:
        return Memory([0], hashes=hash_dic(), ops_lag_ns=300)

    steps = [s for s in memory_steps() if not isinstance(s, int)]  # all released at the end, at once
    whole = drive(make(), steps)
    monkeypatch.setattr(memory_module, "EMIT_RECORDS", 4)
    got = drive(make(), steps)
    assert got["memory_record"] == whole["memory_record"]
    assert sorted(map(repr, got["memory"])) == sorted(map(repr, whole["memory"]))
    sliced = make()
    for step in steps:
        sliced.push(*step)
    batches = [b for name, b in sliced.finish() if name == "memory_record"]
    assert len(batches) > 10 and max(b.num_rows for b in batches) <= 2 * (4 + 4)  # PTA+GE rows double


@pytest.mark.parametrize("cut", [1, 3, 7, 12, 19])
def test_memory_snapshot_round_trip(cut: int) -> None:
    """Snapshot after any step, restore into a fresh operator: the output is the uninterrupted one."""

    def make() -> Any:
        return Memory([0], hashes=hash_dic(), ops_lag_ns=300)

    whole = drive(make(), memory_steps())
    assert len(whole["memory"]) > 30 and len(whole["memory_record"]) > 100
    assert drive_resumed(make, memory_steps(), cut) == whole


def steps_naming_ops_anew(blocks: int) -> list[Step]:
    """Every block names its ops anew (as ``ProfilerStep#N`` does); two allocations of the first block
    outlive every block's ops: one freed in the last block, one never."""
    steps: list[Step] = []
    for block in range(blocks):
        base, op_id, ptr = block * 1000, block * 10, 0x100 + block
        tree = [
            (op_id, None, "cpu_op", f"ProfilerStep#{block}", 1, base, base + 990),
            (op_id + 1, op_id, "cpu_op", f"aten::op{block}", 1, base + 10, base + 500),
        ]
        records = [(base + 20, M, ptr, 64), (base + 400, F, ptr, -64), (base + 410, B, ptr, -64)]
        if block == 0:
            records += [(base + 30, M, 0x1, 32), (base + 40, M, 0x2, 16)]
        if block == blocks - 1:
            records += [(base + 600, F, 0x1, -32), (base + 610, B, 0x1, -32)]
        steps += [("ops", ops(tree)), (PTA_IN, pta(sorted(records))), base + 900]
    return steps


def names_held(op: Memory) -> int:
    return len(unpack_state(op.snapshot())["names"])


def test_names_no_row_refers_to_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name dictionary drops names once no held op or open allocation uses them; no row changes,
    and allocations open across many compactions keep their names."""

    def make() -> Memory:
        return Memory([0], ge=False, app_devices=(), ops_lag_ns=0)

    steps = steps_naming_ops_anew(40)
    growing = make()
    whole = drive(growing, steps)
    assert names_held(growing) == 80  # below NAMES_KEPT: every name is still there
    names = {row["alloc_ns"]: row["name"] for row in whole["memory"]}
    assert names[30] == names[40] == "aten::op0" and names[39020] == "aten::op39" and len(names) == 42

    monkeypatch.setattr(memory_module, "NAMES_KEPT", 4)
    compacting = make()
    held: list[int] = []
    for step in steps:
        if isinstance(step, int):
            compacting.advance(step)
        else:
            compacting.push(*step)
        held.append(names_held(compacting))
    assert max(held) <= 10  # the live ops' names (two blocks' worth), up to twice over
    assert drive(make(), steps) == whole
    for cut in (2, 31, 77, 119):
        assert drive_resumed(make, steps, cut) == whole


def test_npu_memory_snapshot_round_trip() -> None:
    """Buffered rows survive a snapshot."""
    raw = pa.RecordBatch.from_pydict(
        {
            n: pa.array([1, 2], pa.uint32() if n == "event" else pa.uint64())
            for n in ("event", "timestamp", "ddr", "hbm")
        }
        | {"time_ns": pa.array([5, 6], pa.int64())}
    )
    steps: list[Step] = [(at("npu_mem_raw", 0), raw)]

    def make() -> Any:
        return NpuMemory(0, "npu_mem")

    assert drive_resumed(make, steps, 1) == drive(make(), steps)


# ----------------------------------------------------------------------------- a simulated run


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationConfig]:
    out, truth = tmp_path_factory.mktemp("sim"), tmp_path_factory.mktemp("truth")
    config = SimulationConfig(chip="910B", steps=3, framework="torch_npu")
    simulate(config, out, truth)
    return out, config


def ge_reference(records: list[dict[str, Any]]) -> collections.Counter[str]:
    """msprof's NpuOpMemCalculator walk, one record at a time: row kinds it leaves."""
    pending: dict[tuple[int, ...], dict[str, Any]] = {}
    kinds: collections.Counter[str] = collections.Counter()
    for r in sorted(records, key=lambda r: r["time_ns"]):
        key = (r["node_id_hash"], r["addr"], r["device_type"], r["device_id"])
        if r["size"] > 0:
            pending[key] = r
        elif r["size"] < 0:
            kinds["paired"] += pending.pop(key, None) is not None  # a lone release makes no row
    kinds["allocation only"] += len(pending)
    return kinds


def test_simulated_run(simulated: tuple[Path, SimulationConfig]) -> None:
    """PTA rows follow the simulator's allocation model; GE rows msprof's walk; record counts add up."""
    out_dir, config = simulated
    collection = profstream.open(out_dir).collections[0]
    assert collection.framework is not None and collection.host is not None
    fs = FeedSet(collection)
    device = collection.devices[0]
    feeds = [
        fs.feed(collection.framework, "torch_op_range"),
        fs.feed(collection.framework, "torch_op_mark"),
        fs.feed(collection.framework, PTA_IN),
        fs.feed(collection.host, GE_IN),
        fs.feed(device, "npu_mem", name=at("npu_mem_raw", 0)),
        fs.feed(device, "npu_module_mem", name=at("npu_module_mem_raw", 0)),
    ]
    operators = [
        FrameworkOps(),
        Memory([0], hashes=fs.table(collection.host, "hash_dic")),
        *(NpuMemory(0, family) for family in NpuMemory.SOURCES),
    ]
    got: dict[str, list[pa.RecordBatch]] = collections.defaultdict(list)
    with capture_logs() as logs:
        for name, batch in Pipeline(feeds, operators).run():
            got[name].append(batch)
    table = {name: pa.Table.from_batches(b) for name, b in got.items()}
    memory = table["memory"].to_pylist()
    pta_rows = [r for r in memory if r["source"] == "PTA"]
    ge_rows = [r for r in memory if r["source"] == "GE"]

    # the allocation model (simulate/workload.py): every output freed in its step, except the
    # gradient buckets, freed early in the next step: step 1 frees buckets allocated before the
    # collection, the last step's buckets are never freed
    template = build_template(config)
    outputs = np.flatnonzero(template.op_bytes > 0)
    carried = int((template.op_carry_free_op[outputs] >= 0).sum())
    in_step = int((template.op_free_op[outputs] >= 0).sum())
    assert carried > 0 and in_step + carried == outputs.size
    assert len(pta_rows) == config.steps * outputs.size
    never_freed = [r for r in pta_rows if r["release_ns"] is None]
    assert len(never_freed) == carried and all(r["active_release_ns"] is None for r in never_freed)
    gap = collections.Counter(
        r["active_release_ns"] - r["release_ns"] for r in pta_rows if r["release_ns"] is not None
    )
    assert gap == {
        -40: config.steps * in_step,
        3000: (config.steps - 1) * carried,
    }  # BLOCK_FREE before / after FREE
    entry = unmatched(logs)
    assert entry["pta_frees_without_malloc"] == 2 * carried
    assert entry["pta_incomplete"] == 2 * carried and entry["unnamed"] == 0

    # each allocation is named after the torch op running on the Python thread at its time
    ops = table["ops"].filter(pc.equal(table["ops"]["kind"].cast(pa.string()), "cpu_op")).to_pylist()
    leaves = sorted(
        (r["start_ns"], r["end_ns"], r["name"]) for r in ops if not r["name"].startswith("ProfilerStep")
    )
    starts = [s for s, _, _ in leaves]
    for r in pta_rows:
        s, e, name = leaves[int(np.searchsorted(starts, r["alloc_ns"], side="right")) - 1]
        assert s <= r["alloc_ns"] < e and r["name"] == name

    ge_records = [r for b in fs.feed(collection.host, GE_IN).batches for r in b.to_pylist()]
    kinds = collections.Counter(
        "paired" if r["alloc_ns"] is not None and r["release_ns"] is not None
        else "allocation only" if r["release_ns"] is None else "release only"
        for r in ge_rows
    )  # fmt: skip
    assert kinds == ge_reference(ge_records)
    assert all(not r["name"].isdigit() for r in ge_rows)

    record = table["memory_record"]
    components = collections.Counter(record.column("component").cast(pa.string()).to_pylist())
    app_samples = sum(r["event"] == "APP" for r in table[at("npu_mem", 0)].to_pylist())
    assert components == {
        "APP": app_samples,
        # MALLOC, FREE and BLOCK_FREE per output: step 1's extra bucket frees replace the last step's
        "PTA": 3 * len(pta_rows),
        "GE": len(ge_records),
        "PTA+GE": 3 * len(pta_rows) + len(ge_records),
    }
    times = record.column("time_ns").to_numpy()
    assert (np.diff(times) >= 0).all()
    latest: dict[str, dict[str, Any]] = {}
    previous: dict[str, Any] = {}
    for row in record.to_pylist():  # each PTA+GE row = the row before it + the latest of the other kind
        if row["component"] == "PTA+GE":
            other = latest.get("GE" if previous["component"] == "PTA" else "PTA")
            extra = other["total_allocated"] if other else 0
            assert row["total_allocated"] == previous["total_allocated"] + extra
        elif row["component"] in ("PTA", "GE"):
            latest[row["component"]] = row
        previous = row
    modules = table[at("npu_module_mem", 0)].column("component").cast(pa.string()).to_pylist()
    assert set(modules) == {"HCCL", "RUNTIME", "DEVMM", "GE"}
