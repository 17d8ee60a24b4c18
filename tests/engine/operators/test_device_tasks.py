"""DEVICE TASKS: pairing, batch ids, PMU joins and snapshots on hand-built batches; end to end on simulations.

Expected rows follow from the rules of the operator's docstring (cann_raw_formats.md §2.1, §2.4; msprof
``flip_calculator.py``; msprof_outputs.md §2.1 PMU matching), worked out by hand.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import profstream
from profstream.engine.metadata import DirMetadata
from profstream.engine.operators.device_tasks import DeviceTasks, DeviceTaskSettings
from profstream.engine.runtime import DONE, Emit, Pipeline, at
from profstream.engine.schema import NO_ID, device_tasks_schema
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.harness import Step, check_snapshot, device_feeds, drive, table

HWTS, AICORE, TRACK = at("hwts", 0), at("aicore", 0), at("ts_track", 0)
STARS, FFTS_PMU = at("stars_soc", 0), at("ffts_profile", 0)
OUT = at("device_tasks", 0)
EXACT = DeviceTaskSettings(pmu_slack_ns=0)
PIPE = "0x8,0xa,0x9,0xb,0xc,0xd,0x54,0x55"


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """A 3-step simulation per chip: (PROF root, truth dir)."""
    root = tmp_path_factory.mktemp("sims")
    out = {}
    for chip in ("910A", "910B"):
        simulate(SimulationConfig(chip=chip, steps=3), root / chip, root / f"{chip}_truth")
        out[chip] = (root / chip, root / f"{chip}_truth")
    return out


def metadata(sims: dict[str, tuple[Path, Path]], chip: str) -> DirMetadata:
    return _metadata(sims[chip][0])


@functools.cache
def _metadata(root: Path) -> DirMetadata:
    meta = profstream.open(root).collections[0].devices[0].metadata
    assert meta is not None
    return meta


def hwts(*rows: tuple[int, int, int, int]) -> pa.RecordBatch:
    """HWTS logs ``(log_type, stream, task, time)``."""
    log_type, stream, task, time = zip(*rows, strict=True)
    return pa.record_batch(
        {
            "log_type": pa.array(log_type, pa.uint8()),
            "stream_id": pa.array(stream, pa.uint16()),
            "task_id": pa.array(task, pa.uint16()),
            "time_ns": pa.array(time, pa.int64()),
        }
    )


def start_end(stream: int, task: int, start: int, end: int) -> list[tuple[int, int, int, int]]:
    return [(0, stream, task, start), (1, stream, task, end)]


def aicore(*rows: Sequence[int]) -> pa.RecordBatch:
    """Task-based AI Core PMU records ``(stream, task, cycles, pmu_0, ...)``."""
    cols: dict[str, Any] = {"stream_id": pa.array([r[0] for r in rows], pa.uint16())}
    cols["task_id"] = pa.array([r[1] for r in rows], pa.uint16())
    cols["total_cycle"] = pa.array([r[2] for r in rows], pa.uint64())
    for i in range(8):
        cols[f"pmu_{i}"] = pa.array([r[3 + i] if len(r) > 3 + i else 0 for r in rows], pa.uint64())
    return pa.record_batch(cols)


def flips(*rows: tuple[int, int, int, int]) -> pa.RecordBatch:
    """ts_track flip records ``(time, stream, task, flip_num)`` plus a step-trace record to ignore."""
    n = len(rows)
    return pa.record_batch(
        {
            "tag": pa.array([14] * n + [10], pa.uint8()),
            "time_ns": pa.array([r[0] for r in rows] + [1], pa.int64()),
            "stream_id": pa.array([r[1] for r in rows] + [1], pa.uint16()),
            "task_id": pa.array([r[2] for r in rows] + [7], pa.uint32()),
            "flip_num": pa.array([r[3] for r in rows] + [None], pa.uint16()),
        }
    )


def stars(*rows: tuple[int, ...]) -> pa.RecordBatch:
    """STARS records ``(func_type, time, stream, task, type[, subtask_id, thread])``; type is the SQE type
    of ACSQ records and the sub-task type of FFTS+ records."""
    func = [r[0] for r in rows]
    ffts = [f in (34, 35) for f in func]
    return pa.record_batch(
        {
            "func_type": pa.array(func, pa.uint8()),
            "time_ns": pa.array([r[1] for r in rows], pa.int64()),
            "stream_id": pa.array([r[2] for r in rows], pa.uint16()),
            "task_id": pa.array([r[3] for r in rows], pa.uint32()),
            "sqe_type": pa.array([0 if f else r[4] for r, f in zip(rows, ffts, strict=True)], pa.uint8()),
            "subtask_type": pa.array([r[4] if f else 0 for r, f in zip(rows, ffts, strict=True)], pa.uint8()),
            "subtask_id": pa.array([r[5] if len(r) > 5 else 0 for r in rows], pa.uint16()),
            "thread_id": pa.array([r[6] if len(r) > 6 else 0 for r in rows], pa.uint16()),
        }
    )


def ffts_pmu(*rows: dict[str, int]) -> pa.RecordBatch:
    """ffts_profile records from dicts (func_type 40 unless given; missing fields are 0)."""
    fields = ("func_type", "stream_id", "task_id", "subtask_type", "subtask_id", "ffts_type", "ov_flag")
    fields += ("core_type", "total_cycle", *(f"pmu_{i}" for i in range(8)), "start_ns", "end_ns")
    cols = {name: [r.get(name, 40 if name == "func_type" else 0) for r in rows] for name in fields}
    return pa.record_batch({name: pa.array(v, pa.int64()) for name, v in cols.items()})


def rows(emits: Sequence[Emit]) -> list[dict[str, Any]]:
    result = table(emits, OUT)
    return [] if result is None else result.to_pylist()


def key(row: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return row["stream_id"], row["task_id"], row["batch_id"], row["start_ns"], row["end_ns"]


def unmatched(logs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [e for e in logs if e["event"] == "records_unmatched"]
    assert len(found) == 1
    return found[0]


# ----------------------------------------------------------------------------- HWTS


def test_hwts_pairing_rules(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts"})
    assert op.inputs == (HWTS,) and op.outputs == (OUT,)
    logs_in = hwts(
        (0, 1, 5, 100),
        (0, 1, 5, 150),  # a newer start replaces the unmatched one
        (1, 1, 5, 200),
        (1, 1, 6, 210),  # end without start
        (2, 1, 6, 211),  # block log: not a task record
        *start_end(1, 7, 220, 260),
        (0, 1, 8, 300),  # never ends
    )
    with capture_logs() as logs:
        out = drive(op, [(HWTS, logs_in, 400)])
    got = rows(out)
    assert [key(r) for r in got] == [(1, 5, 0, 150, 200), (1, 7, 0, 220, 260)]
    assert {r["device_task_type"] for r in got} == {"AI_CORE"}
    assert {r["context_id"] for r in got} == {NO_ID}
    assert got[0]["total_cycles"] is None  # no PMU family
    report = unmatched(logs)
    assert report["ends_without_start"] == 1
    assert report["hwts_overwritten_starts"] == 1
    assert report["open_starts"] == 1
    assert report["hwts_block_logs"] == 1


def test_open_start_holds_output_until_horizon(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts"}, DeviceTaskSettings(open_task_ns=1000))
    op.push(HWTS, hwts((0, 1, 1, 100), *start_end(1, 2, 150, 160)))
    assert op.advance(500) == []  # task 1 is open: nothing after its start may leave
    assert op.output_watermark(500) == 100  # and nothing downstream may pass its start
    released = rows(op.advance(1200))  # task 1 started more than open_task_ns ago: stop waiting
    assert op.output_watermark(1200) == 1200
    assert [key(r) for r in released] == [(1, 2, 0, 150, 160)]
    op.push(HWTS, hwts((1, 1, 1, 1300)))
    with capture_logs() as logs:
        late = rows(op.advance(1400) + op.finish())
    assert [key(r) for r in late] == [(1, 1, 0, 100, 1300)]
    assert unmatched(logs)["late_tasks"] == 1


def test_a_task_running_for_seconds_leaves_in_start_order(sims: dict[str, tuple[Path, Path]]) -> None:
    """A 3 s task (a Notify Wait held by a slow rank) holds the output and the output watermark at its
    start while short tasks of other streams run, then everything leaves in start order, none late."""
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts"})
    second = 1_000_000_000
    op.push(HWTS, hwts((0, 1, 1, 10)))
    out = []
    for k in range(1, 6):  # short tasks on stream 2 every 0.6 s while task 1 runs
        op.push(HWTS, hwts(*start_end(2, k, k * 600_000_000, k * 600_000_000 + 1000)))
        out += op.advance(k * 600_000_000 + 2000)
        assert op.output_watermark(k * 600_000_000 + 2000) == 10
    assert out == []
    op.push(HWTS, hwts((1, 1, 1, 3 * second)))
    with capture_logs() as logs:
        got = rows(op.advance(3 * second + 1) + op.finish())
    assert [r["start_ns"] for r in got] == [10, *(k * 600_000_000 for k in range(1, 6))]
    assert all(e.get("late_tasks", 0) == 0 for e in logs)


def test_hwts_pmu_fifo_per_key(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "aicore"}, EXACT)
    assert op.inputs == (AICORE, HWTS)
    tasks = hwts(*start_end(1, 5, 0, 10), *start_end(1, 6, 20, 30), *start_end(1, 5, 40, 50))
    op.push(HWTS, tasks)
    assert op.advance(100) == []  # every task waits for its PMU record
    op.push(AICORE, aicore((1, 5, 1000, 100)))  # FIFO: the first (1, 5) record to the first (1, 5) task
    got = rows(op.advance(100))
    # PMU records come in task-end order: (1, 6), which ended later, may still get one
    assert [(r["task_id"], r["start_ns"], r["total_cycles"]) for r in got] == [(5, 0, 1000.0)]
    op.push(AICORE, aicore((1, 6, 3000, 3000), (1, 5, 2000, 200), (1, 9, 1, 1)))
    with capture_logs() as logs:
        got = rows(op.advance(100) + op.finish())
    assert [(r["task_id"], r["start_ns"], r["total_cycles"]) for r in got] == [
        (6, 20, 3000.0),
        (5, 40, 2000.0),
    ]
    assert got[0]["vec_ratio"] == 1.0 and got[1]["vec_ratio"] == 0.1  # pmu_0 / cycles
    assert unmatched(logs)["pmu_unmatched"] == 1  # the (1, 9) record


def test_pmu_frontier_releases_tasks_without_pmu(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "aicore"}, EXACT)
    op.push(AICORE, aicore((1, 6, 500)))  # arrives before its task
    op.push(HWTS, hwts(*start_end(1, 5, 0, 10), *start_end(1, 6, 20, 30), *start_end(1, 7, 40, 50)))
    got = rows(op.advance(100))
    # (1, 6) got its record, so (1, 5), which ended earlier, has none coming; (1, 7) may still get one
    assert [(r["task_id"], r["total_cycles"]) for r in got] == [(5, None), (6, 500.0)]
    assert [(r["task_id"], r["total_cycles"]) for r in rows(op.finish())] == [(7, None)]


# ----------------------------------------------------------------------------- flips


def test_flips_give_batch_ids(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "ts_track"})
    assert op.inputs == (HWTS, TRACK)
    tasks = hwts(
        *start_end(1, 65534, 0, 10),
        *start_end(2, 9, 5, 15),
        *start_end(1, 65535, 20, 30),
        *start_end(1, 1, 40, 50),
        *start_end(1, 2, 60, 70),
        *start_end(2, 10, 110, 120),
    )
    track = flips((35, 1, 0, 1), (100, 2, 0, 65535))  # a wrap on stream 1, stream 2 destroyed and reused
    got = rows(drive(op, [(TRACK, track, 0), (HWTS, tasks, DONE)]))
    assert [(r["stream_id"], r["task_id"], r["batch_id"]) for r in got] == [
        (1, 65534, 0),
        (2, 9, 0),
        (1, 65535, 0),
        (1, 1, 1),
        (1, 2, 1),
        (2, 10, 1),
    ]
    # a task starting exactly at the flip time belongs to the new batch
    again = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "ts_track"})
    got = rows(drive(again, [(TRACK, flips((40, 1, 0, 1)), 0), (HWTS, hwts(*start_end(1, 1, 40, 50)), DONE)]))
    assert got[0]["batch_id"] == 1


def test_flip_with_nonzero_task_id_calibrates_the_held_wrap(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "ts_track"})
    tasks = hwts(*start_end(1, 65535, 0, 10), *start_end(1, 0, 20, 30), *start_end(1, 1, 40, 50))
    op.push(HWTS, tasks)
    first = rows(op.advance(65))
    # ids 0 and 1 wrapped without a flip yet: they wait for it
    assert [(r["task_id"], r["batch_id"]) for r in first] == [(65535, 0)]
    op.push(TRACK, flips((66, 1, 2, 1)))  # the flip task got id 2: 0 and 1 belong to its batch
    op.push(HWTS, hwts(*start_end(1, 3, 70, 80)))
    rest = rows(op.advance(200) + op.finish())
    assert [(r["task_id"], r["batch_id"]) for r in rest] == [(0, 1), (1, 1), (3, 1)]


def test_wrap_without_flip_is_released_after_the_horizon(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts", "ts_track"}, DeviceTaskSettings(open_horizon_ns=30))
    op.push(HWTS, hwts(*start_end(1, 65535, 0, 10), *start_end(1, 0, 20, 30)))
    with capture_logs() as logs:
        got = rows(op.advance(65) + op.finish())
    assert [(r["task_id"], r["batch_id"]) for r in got] == [(65535, 0), (0, 0)]
    assert unmatched(logs)["wraps_without_flip"] == 1


# ----------------------------------------------------------------------------- STARS


def test_acsq_pairs_in_time_order_across_batches(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910B"), {"stars_soc"})
    first = stars((0, 100, 1, 5, 0), (1, 180, 1, 5, 0), (1, 250, 1, 6, 2), (24, 260, 0, 0, 0))
    second = stars(
        (0, 240, 1, 6, 2),  # the start of the end already seen: pairs once the watermark passes both
        (1, 300, 1, 7, 0),  # end without start: dropped
        (0, 400, 1, 8, 11),
        (0, 410, 1, 8, 11),  # replaces the start at 400
        (1, 420, 1, 8, 11),
    )
    with capture_logs() as logs:
        got = rows(drive(op, [(STARS, first, 200), (STARS, second, DONE)]))
    assert [(r["task_id"], r["start_ns"], r["end_ns"], r["device_task_type"]) for r in got] == [
        (5, 100, 180, "AI_CORE"),
        (6, 240, 250, "AIV_SQE"),
        (8, 410, 420, "SDMA_SQE"),
    ]
    report = unmatched(logs)
    assert report["acsq_ends_without_start"] == 1 and report["acsq_overwritten_starts"] == 1


def test_ffts_subtasks_fifo_and_notify_wait_leftovers(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910B"), {"stars_soc"})
    records = stars(
        (0, 500, 1, 9, 0),
        (34, 510, 1, 9, 6, 3),
        (34, 520, 1, 9, 6, 3),
        (35, 530, 1, 9, 6, 3),  # first in, first out: pairs with 510
        (35, 590, 1, 9, 6, 3),
        (1, 600, 1, 9, 0),
        (35, 650, 1, 9, 6, 4),  # sub-task end without start
        (34, 700, 2, 4, 3, 1),  # Notify Wait that never ends: a zero-length row at the end
        (34, 710, 2, 5, 0, 1),  # an AIC sub-task that never ends: counted
    )
    with capture_logs() as logs:
        got = rows(drive(op, [(STARS, records, DONE)]))
    assert [
        (r["task_id"], r["context_id"], r["start_ns"], r["end_ns"], r["device_task_type"]) for r in got
    ] == [
        (9, NO_ID, 500, 600, "AI_CORE"),
        (9, 3, 510, 530, "MIX_AIC"),
        (9, 3, 520, 590, "MIX_AIC"),
        (4, 1, 700, 700, "Notify Wait"),
    ]
    report = unmatched(logs)
    assert report["ffts_ends_without_start"] == 1 and report["open_starts"] == 1


def test_stars_pmu_context_block_and_overflow(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910B"), {"stars_soc", "ffts_profile"}, EXACT)
    assert op.inputs == (FFTS_PMU, STARS)
    records = stars(
        (0, 100, 1, 5, 0),
        (1, 200, 1, 5, 0),
        (0, 300, 1, 6, 2),
        (1, 400, 1, 6, 2),
        (0, 500, 1, 7, 0),
        (34, 510, 1, 7, 6, 2),
        (35, 890, 1, 7, 6, 2),
        (1, 900, 1, 7, 0),
    )
    counters = {f"pmu_{i}": 10 * (i + 1) for i in range(8)}
    pmu_records = ffts_pmu(
        {"stream_id": 1, "task_id": 5, "total_cycle": 1000, "end_ns": 195, **counters},  # AIC only
        {"stream_id": 1, "task_id": 5, "total_cycle": 9, "end_ns": 196, "ov_flag": 1},  # overflow
        {"stream_id": 1, "task_id": 6, "subtask_type": 1, "ffts_type": 1, "total_cycle": 400, "end_ns": 395},
        # MIX_AIC: the secondary (AIV) cores report block records, the main core's block record is ignored
        {"func_type": 41, "stream_id": 1, "task_id": 7, "subtask_type": 6, "subtask_id": 2, "ffts_type": 4}
        | {"core_type": 1, "total_cycle": 300, "pmu_0": 30, "end_ns": 700},
        {"func_type": 41, "stream_id": 1, "task_id": 7, "subtask_type": 6, "subtask_id": 2, "ffts_type": 4}
        | {"core_type": 1, "total_cycle": 200, "pmu_0": 20, "end_ns": 800},
        {"func_type": 41, "stream_id": 1, "task_id": 7, "subtask_type": 6, "subtask_id": 2, "ffts_type": 4}
        | {"core_type": 0, "total_cycle": 999, "end_ns": 850},
        {"stream_id": 1, "task_id": 7, "subtask_type": 6, "subtask_id": 2, "ffts_type": 4}
        | {"total_cycle": 2000, "pmu_2": 500, "end_ns": 880},
        {"stream_id": 3, "task_id": 1, "total_cycle": 5, "end_ns": 950},  # no such task
    )
    with capture_logs() as logs:
        got = rows(drive(op, [(STARS, records, 960), (FFTS_PMU, pmu_records, DONE)]))
    by = {(r["task_id"], r["context_id"]): r for r in got}
    aic = by[5, NO_ID]
    assert (aic["aic_total_cycles"], aic["aiv_total_cycles"]) == (1000.0, 0.0)
    assert aic["aic_scalar_ratio"] == 30 / 1000  # 0x9 is the third event
    aiv = by[6, NO_ID]
    assert (aiv["aic_total_cycles"], aiv["aiv_total_cycles"]) == (0.0, 400.0)
    mix = by[7, 2]
    assert (mix["aic_total_cycles"], mix["aiv_total_cycles"]) == (2000.0, 500.0)
    assert mix["aiv_vec_ratio"] == 50 / 500 and mix["aic_scalar_ratio"] == 500 / 2000
    assert by[7, NO_ID]["aic_total_cycles"] is None  # the PMU record belongs to the sub-task row
    report = unmatched(logs)
    assert report["pmu_overflow"] == 1 and report["pmu_unmatched"] == 1 and report["pmu_other_records"] == 1


def test_stars_pmu_goes_to_the_task_running_at_its_end(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(
        0, metadata(sims, "910B"), {"stars_soc", "ffts_profile"}, DeviceTaskSettings(pmu_slack_ns=10)
    )
    records = stars(
        *((0, t, 1, 5, 0) for t in (100, 300, 500)),
        *((1, t, 1, 5, 0) for t in (200, 400, 600)),
    )
    pmu_records = ffts_pmu(
        {"stream_id": 1, "task_id": 5, "total_cycle": 1, "end_ns": 190},
        {"stream_id": 1, "task_id": 5, "total_cycle": 2, "end_ns": 405},  # 5 ns after its task: within slack
        {"stream_id": 1, "task_id": 5, "total_cycle": 3, "end_ns": 620},  # 20 ns after the last one: not its
    )
    with capture_logs() as logs:
        got = rows(drive(op, [(STARS, records, 700), (FFTS_PMU, pmu_records, DONE)]))
    assert [(r["start_ns"], r["aic_total_cycles"]) for r in got] == [(100, 1.0), (300, 2.0), (500, None)]
    assert unmatched(logs)["pmu_unmatched"] == 1


# ----------------------------------------------------------------------------- snapshots and batching


def hwts_steps() -> list[Step]:
    return [
        (AICORE, aicore((1, 6, 500, 5)), 0),
        (HWTS, hwts(*start_end(1, 65534, 0, 10), *start_end(1, 6, 15, 18), (0, 2, 4, 19)), 20),
        (TRACK, flips((35, 1, 2, 1)), 25),
        (HWTS, hwts(*start_end(1, 65535, 20, 30), *start_end(1, 0, 31, 33), (1, 2, 4, 34)), 34),
        (AICORE, aicore((1, 65535, 100, 1), (2, 4, 40, 4)), 34),
        (HWTS, hwts(*start_end(1, 1, 40, 50), *start_end(1, 3, 60, 70)), 80),
        (AICORE, aicore((1, 3, 70, 7)), DONE),
    ]


def stars_steps() -> list[Step]:
    return [
        (STARS, stars((0, 100, 1, 5, 0), (0, 140, 1, 6, 0), (1, 130, 1, 5, 0), (34, 145, 1, 6, 6, 1)), 120),
        (FFTS_PMU, ffts_pmu({"stream_id": 1, "task_id": 5, "total_cycle": 10, "end_ns": 125}), 125),
        (STARS, stars((35, 170, 1, 6, 6, 1), (1, 180, 1, 6, 0), (34, 190, 2, 1, 3, 0)), 175),
        (TRACK, flips((150, 1, 0, 1)), 175),
        (
            FFTS_PMU,
            ffts_pmu(
                {"stream_id": 1, "task_id": 6, "subtask_type": 6, "subtask_id": 1, "ffts_type": 4}
                | {"total_cycle": 40, "end_ns": 169}
            ),
            DONE,
        ),
    ]


@pytest.mark.parametrize("chip", ["910A", "910B"])
def test_snapshot_round_trips_at_every_cut(sims: dict[str, tuple[Path, Path]], chip: str) -> None:
    meta = metadata(sims, chip)
    if chip == "910A":
        steps, families = hwts_steps(), {"hwts", "aicore", "ts_track"}
    else:
        steps, families = stars_steps(), {"stars_soc", "ffts_profile", "ts_track"}
    whole = rows(drive(DeviceTasks(0, meta, families, EXACT), steps))
    assert len(whole) >= 4
    for cut in range(len(steps) + 1):
        check_snapshot(lambda: DeviceTasks(0, meta, families, EXACT), steps, cut)


def test_snapshot_mid_run_on_a_fresh_state_is_stable(sims: dict[str, tuple[Path, Path]]) -> None:
    op = DeviceTasks(0, metadata(sims, "910A"), {"hwts"})
    blob = op.snapshot()
    again = DeviceTasks(0, metadata(sims, "910A"), {"hwts"})
    again.restore(blob)
    assert again.snapshot() == blob


Logs = list[tuple[int, int, int, int]]


@st.composite
def hwts_runs(draw: st.DrawFn) -> tuple[Logs, Logs, list[int]]:
    """Task logs of two streams (ids wrapping, a flip at each wrap), the flips, and cuts into the logs."""
    records: Logs = []
    track: Logs = []
    time = 0
    ids = {1: draw(st.integers(65530, 65535)), 2: draw(st.integers(0, 10))}
    for _ in range(draw(st.integers(1, 25))):
        stream = draw(st.sampled_from([1, 2]))
        time += draw(st.integers(1, 20))
        if ids[stream] == 65536:
            ids[stream] = 1
            track.append((time, stream, 0, 1))
            time += 1
        records += start_end(stream, ids[stream], time, time + draw(st.integers(0, 15)))
        ids[stream] += 1
    records.sort(key=lambda r: r[3])
    cuts = sorted(draw(st.lists(st.integers(0, len(records)), max_size=4)))
    return records, track, cuts


@given(hwts_runs())
@settings(max_examples=40, deadline=None)
def test_output_does_not_depend_on_batching(
    sims: dict[str, tuple[Path, Path]], run: tuple[Logs, Logs, list[int]]
) -> None:
    logs, track, cuts = run
    meta = metadata(sims, "910A")
    families = {"hwts", "ts_track"}
    first: list[Step] = [(TRACK, flips(*track), 0)] if track else []
    whole = rows(drive(DeviceTasks(0, meta, families), [*first, (HWTS, hwts(*logs), DONE)]))
    bounds = [0, *cuts, len(logs)]
    steps = first + [(HWTS, hwts(*logs[a:b]), logs[b - 1][3]) for a, b in itertools.pairwise(bounds) if b > a]
    assert rows(drive(DeviceTasks(0, meta, families), steps)) == whole
    assert len(whole) == len(logs) // 2
    batches = {(r["stream_id"], r["task_id"]): r["batch_id"] for r in whole}
    for time, stream, _, _ in track:  # every task after a flip is in a later batch than every task before
        starts = [(t, at_) for kind, s, t, at_ in logs if s == stream and kind == 0]
        before = [batches[stream, t] for t, at_ in starts if at_ < time]
        after = [batches[stream, t] for t, at_ in starts if at_ > time]
        if before and after:
            assert max(before) < min(after)


# ----------------------------------------------------------------------------- end to end


def _run(
    root: Path,
    *,
    chunk_bytes: int | None = None,
    resume_after: int | None = None,
) -> tuple[pa.Table, DeviceTasks]:
    collection = profstream.open(root).collections[0]
    device = collection.devices[0]
    assert device.metadata is not None
    present = {s.family for s in device.streams}
    families = present & {"hwts", "aicore", "stars_soc", "ffts_profile", "ts_track"}
    leader = "hwts" if "hwts" in present else "stars_soc"

    def build(positions: dict[str, Any] | None = None) -> tuple[Pipeline, DeviceTasks]:
        assert device.metadata is not None
        op = DeviceTasks(0, device.metadata, present)
        feeds = device_feeds(
            collection, device, families, leader=leader, chunk_bytes=chunk_bytes, positions=positions
        )
        return Pipeline(feeds, [op]), op

    pipeline, op = build()
    emits: list[Emit] = []
    if resume_after is not None:
        for _ in range(resume_after):
            emits += pipeline.step()
        blob = pipeline.snapshot()
        pipeline, op = build(Pipeline.feed_positions(blob))
        pipeline.restore(blob)
    emits += list(pipeline.run([OUT]))
    result = table(emits, OUT)
    assert result is not None
    return result, op


def _truth(truth: Path) -> pa.Table:
    return pq.read_table(truth / "tasks.parquet")


def _keys(t: pa.Table) -> list[tuple[int, ...]]:
    return sorted(
        zip(
            *(t.column(c).to_pylist() for c in ("stream_id", "task_id", "batch_id", "start_ns", "end_ns")),
            strict=True,
        )
    )


@pytest.mark.parametrize("chip", ["910A", "910B"])
def test_end_to_end_tasks_equal_the_simulator_truth(sims: dict[str, tuple[Path, Path]], chip: str) -> None:
    root, truth_dir = sims[chip]
    got, op = _run(root)
    truth = _truth(truth_dir)
    assert got.schema == _decoded(device_tasks_schema(op.layout.columns))
    starts = got.column("start_ns").to_numpy()
    assert (np.diff(starts) >= 0).all()  # start order
    assert max(truth.column("batch_id").to_pylist()) >= 1  # the run wraps task ids: flips are exercised
    whole = got.filter(pa.compute.equal(got.column("context_id"), NO_ID))
    assert _keys(whole) == _keys(truth)  # every device task, exactly
    subtasks = got.filter(pa.compute.not_equal(got.column("context_id"), NO_ID))
    if chip == "910A":
        assert subtasks.num_rows == 0
        has_pmu = whole.column("total_cycles").is_valid()
    else:
        # FFTS+ sub-task rows: one per MIX task, a device tick (20 ns) inside it (the simulated sub-task log)
        mix = truth.filter(pa.compute.equal(truth.column("task_type"), "KERNEL_MIX_AIC"))
        assert mix.num_rows > 0
        inner = [(s, t, b, a + 20, e - 20) for s, t, b, a, e in _keys(mix)]
        assert _keys(subtasks) == sorted(inner)
        assert set(subtasks.column("device_task_type").to_pylist()) == {"MIX_AIC"}
        assert subtasks.column("aic_total_cycles").is_valid().to_pylist() == [True] * subtasks.num_rows
        has_pmu = whole.column("aic_total_cycles").is_valid()
    pmu_kinds = {"KERNEL_AICORE", "KERNEL_AIVEC"} | ({"KERNEL_MIX_AIC"} if chip == "910A" else set())
    task_type = dict(zip(_keys_only(truth), truth.column("task_type").to_pylist(), strict=True))
    expected = [task_type[k] in pmu_kinds for k in _keys_only(whole)]
    assert has_pmu.to_pylist() == expected
    assert op._counts == {}  # nothing unmatched, nothing late


def _keys_only(t: pa.Table) -> list[tuple[int, ...]]:
    return list(
        zip(*(t.column(c).to_pylist() for c in ("stream_id", "task_id", "batch_id", "start_ns")), strict=True)
    )


def _decoded(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema]
    )


@pytest.mark.parametrize("chip", ["910A", "910B"])
def test_end_to_end_streaming_and_resume_give_the_same_rows(
    sims: dict[str, tuple[Path, Path]], chip: str
) -> None:
    root, _ = sims[chip]
    whole, _ = _run(root)
    small, _ = _run(root, chunk_bytes=1024)
    assert small.equals(whole)
    for cut in (3, 17, 40):
        resumed, _ = _run(root, chunk_bytes=1024, resume_after=cut)
        assert resumed.equals(whole)


def test_metadata_group_sets_the_metric_columns(sims: dict[str, tuple[Path, Path]]) -> None:
    meta = metadata(sims, "910A")
    sample = msgspec.structs.replace(
        meta.sample, ai_core_metrics="Memory", ai_core_profiling_events="0x15,0x16"
    )
    op = DeviceTasks(0, dataclasses.replace(meta, sample=sample), {"hwts"})
    assert op.schema.names[8:] == [
        "aicore_time",
        "total_cycles",
        "ub_read_bw",
        "ub_write_bw",
        "l1_read_bw",
        "l1_write_bw",
        "main_mem_read_bw",
        "main_mem_write_bw",
    ]
    assert meta.sample.ai_core_profiling_events == PIPE
