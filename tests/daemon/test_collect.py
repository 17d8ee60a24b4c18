"""``profstream collect``: exactly-once Parquet and layout windows, crashes at any point, restarts,
faults, timeline_limit aging of the window directories."""

from __future__ import annotations

import fcntl
import json
import signal
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from profstream.codecs import get_codec
from profstream.daemon import checkpoint as ckpt
from profstream.daemon.collector import LOCK_NAME, CollectionRunner, Collector, CollectorConfig, _side_bytes
from profstream.daemon.status import Metrics
from profstream.daemon.windows import WindowFiles
from profstream.engine.discovery import discover
from profstream.engine.layouts import Layout, is_timeline
from profstream.engine.runtime import Pipeline
from profstream.errors import SinkError
from profstream.simulate import SimulationConfig, simulate
from tests.daemon.conftest import (
    collect,
    daemon_parquet,
    layout_rows,
    offline_layout_rows,
    offline_rows,
    rows,
)

FAULT_ENV = "PROFSTREAM_COLLECT_FAULT"
STEPS_ENV = "PROFSTREAM_COLLECT_WINDOW_STEPS"


@pytest.fixture(
    scope="module",
    params=[("910B", "torch_npu"), ("910A", "none")],
    ids=["910B-torch_npu", "910A-none"],
)
def raw(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    chip, framework = request.param
    out = tmp_path_factory.mktemp(f"raw-{chip}")
    simulate(SimulationConfig(chip=chip, steps=4, framework=framework, seed=3, hbm=True), out / "raw")
    return out / "raw"


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield cast("list[dict[str, Any]]", captured)


@pytest.fixture(scope="module")
def offline(raw: Path) -> dict[str, object]:
    return dict(offline_rows(raw, raw.parent / "offline"))


@pytest.fixture(scope="module")
def offline_layout(raw: Path) -> dict[str, object]:
    """The offline export in the layout ``--layout auto`` picks (torch_npu with FRAMEWORK data)."""
    layout: Layout = "torch_npu" if any(raw.rglob("FRAMEWORK")) else "msprof"
    return dict(offline_layout_rows(raw, raw.parent / "offline-layout", layout))


def _windows(out: Path) -> dict[str, object]:
    """Every CSV row and timeline event of the daemon's window directories."""
    (collection,) = {p.parent for p in out.rglob("checkpoint.msgpack")}
    return dict(layout_rows(collection / _layout_dir(collection)))


def _layout_dir(collection: Path) -> str:
    (found,) = [p.name for p in collection.iterdir() if p.is_dir() and p.name != "parquet"]
    return found


def test_once_equals_the_offline_export(
    raw: Path, offline: dict[str, object], offline_layout: dict[str, object], tmp_path: Path
) -> None:
    """One --once run over a finished collection commits every table's rows exactly once, and every
    CSV row and timeline event of the layout once across the window directories."""
    done = collect(raw, tmp_path / "out", "--once", env={STEPS_ENV: "4"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count('"window_committed"') > 2
    assert rows(daemon_parquet(tmp_path / "out")) == offline
    assert _windows(tmp_path / "out") == offline_layout


def test_csv_slice_rows_of_the_settings_slices_the_window_csvs(raw: Path, tmp_path: Path) -> None:
    """``[export] csv_slice_rows`` reaches the windows as it reaches ``export``: msprof's summary CSVs
    come in slices of that many rows, and together they hold every row of the offline export."""
    config = tmp_path / "settings.toml"
    config.write_text("[export]\ncsv_slice_rows = 5\n")
    done = collect(raw, tmp_path / "out", "--once", "--layout", "msprof", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert any("_slice_" in p.name for p in (tmp_path / "out").rglob("op_summary*.csv"))
    assert _windows(tmp_path / "out") == offline_layout_rows(raw, tmp_path / "offline", "msprof")


@pytest.mark.parametrize(
    "faults",
    [
        ["kill_mid_commit=1", "kill_after_commit=3", "kill_after_steps=5", "kill_mid_commit=6"],
        ["kill_after_steps=2", "kill_mid_commit=2", "kill_mid_commit=2", "kill_after_steps=9"],
        ["kill_mid_commit=0", "kill_after_commit=0", "kill_after_steps=1", "kill_mid_commit=4"],
    ],
)
def test_kill_9_anywhere_then_restart_is_exactly_once(
    raw: Path,
    offline: dict[str, object],
    offline_layout: dict[str, object],
    tmp_path: Path,
    faults: list[str],
) -> None:
    """SIGKILL mid-commit (part files renamed, checkpoint not), after a commit and mid-processing.

    Each restart drops the windows the checkpoint does not name and resumes the pipeline from its
    snapshot; the final outputs equal the offline export: no duplicate rows, no gaps.
    """
    out = tmp_path / "out"
    for fault in faults:
        killed = collect(raw, out, "--once", env={STEPS_ENV: "2", FAULT_ENV: fault})
        assert killed.returncode in (-signal.SIGKILL, 0), killed.stderr
    finished = collect(raw, out, "--once", env={STEPS_ENV: "2"})
    assert finished.returncode == 0, finished.stderr
    assert rows(daemon_parquet(out)) == offline
    assert _windows(out) == offline_layout
    again = collect(raw, out, "--once")  # a finished collection is not processed twice
    assert again.returncode == 0
    assert rows(daemon_parquet(out)) == offline
    assert _windows(out) == offline_layout


def _small_windows(raw: Path, out: Path, *, fork_writer: bool) -> CollectorConfig:
    """A --once run over ``raw`` committing every 3 pipeline steps, polling every 10 ms."""
    return CollectorConfig(
        watch_dir=raw, output=out, poll_interval_s=0.01, once=True, window_steps=3, fork_writer=fork_writer
    )


@pytest.mark.parametrize("fork_writer", [True, False], ids=["forked-writer", "inline-writer"])
def test_a_full_output_disk_pauses_and_retries_without_corruption(
    raw: Path,
    offline: dict[str, object],
    tmp_path: Path,
    logs: list[dict[str, Any]],
    fork_writer: bool,
) -> None:
    """ENOSPC while writing a window: the writer keeps it and retries, the pipeline waits (logged as
    backpressure), nothing is lost or doubled. The forked writer inherits the patch."""
    failures = iter([True, True, False, True])
    write = WindowFiles._write_layout

    def full_disk(self: WindowFiles, window: int, batches: list[tuple[str, pa.RecordBatch]]) -> list[Path]:
        # the part files and the layout are renamed before the disk "fills"
        paths = write(self, window, batches)
        if next(failures, False):
            msg = "cannot write part: No space left on device"
            raise SinkError(msg)
        return paths

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WindowFiles, "_write_layout", full_disk)
        assert Collector(_small_windows(raw, tmp_path / "out", fork_writer=fork_writer)).run() == 0
    assert rows(daemon_parquet(tmp_path / "out")) == offline
    assert sum(e["event"] == "backpressure" for e in logs) == 3


def test_a_window_holds_the_task_rows_of_a_layout_but_not_the_tasks_again(
    raw: Path, offline: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a layout's op_summary or kernel_details reads the merged task rows, the window holds
    those alone and derives the tasks when it commits: the Parquet tasks stay the offline export's."""
    held: list[set[str]] = []
    seal = WindowFiles.seal

    def record(self: WindowFiles, window: int) -> None:
        held.append({stream.partition("@")[0] for stream, _ in self.filling})
        seal(self, window)

    monkeypatch.setattr(WindowFiles, "seal", record)  # the writer in this process sees it
    assert Collector(_small_windows(raw, tmp_path / "out", fork_writer=False)).run() == 0
    assert any("task_rows" in tables for tables in held)
    assert not any("tasks" in tables for tables in held)
    assert rows(daemon_parquet(tmp_path / "out")) == offline


def test_a_second_instance_on_one_output_is_refused(raw: Path, tmp_path: Path) -> None:
    """The lock file keeps one daemon per output directory; the second exits 1 and says why."""
    (tmp_path / "out").mkdir()
    with (tmp_path / "out" / LOCK_NAME).open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        second = collect(raw, tmp_path / "out", "--once")
    assert second.returncode == 1
    assert "another profstream collect (pid 4242)" in second.stderr


def test_timeline_windows_age_oldest_first_under_timeline_limit(tmp_path: Path) -> None:
    """--timeline-limit 1: after each commit the oldest windows' timeline files go until the rest
    fits in 1 MB; the newest window keeps its timeline; CSV files stay; every deletion is logged.
    A kill -9 halfway: the restart reads the books back from disk and goes on."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    simulate(SimulationConfig(chip="910B", steps=6, framework="torch_npu", seed=4), raw)
    unlimited = collect(raw, tmp_path / "unlimited", "--once", env={STEPS_ENV: "2"})
    assert unlimited.returncode == 0, unlimited.stderr
    flags = ("--once", "--timeline-limit", "1")
    killed = collect(raw, out, *flags, env={STEPS_ENV: "2", FAULT_ENV: "kill_after_commit=4"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = collect(raw, out, *flags, env={STEPS_ENV: "2"})
    assert done.returncode == 0, done.stderr

    def timelines(root: Path) -> dict[str, int]:
        return {
            f"{p.parent.name}/{p.name}": p.stat().st_size for p in root.rglob("*.json") if is_timeline(p.name)
        }

    everything, kept = timelines(tmp_path / "unlimited"), timelines(out)
    assert sum(everything.values()) > 1 << 20, "the run must make more than 1 MB of timelines"
    assert sum(kept.values()) <= 1 << 20 or len({k.split("/")[0] for k in kept}) == 1
    newest = max(k.split("/")[0] for k in everything)
    assert {k for k in everything if k.startswith(newest)} <= set(kept)
    gone = set(everything) - set(kept)
    assert gone and all(k.split("/")[0] < min(w.split("/")[0] for w in kept) for k in gone), "oldest first"
    logged = [
        json.loads(line) for run in (killed, done) for line in run.stderr.splitlines() if '"aged"' in line
    ]
    assert {f"{e['window']:08d}/{f}" for e in logged for f in e["files"]} == {
        k.replace("window-", "") for k in gone
    }
    assert layout_rows(out).keys() >= {k for k in layout_rows(tmp_path / "unlimited") if k != "timeline"}


def test_the_timeline_books_take_only_committed_windows(tmp_path: Path) -> None:
    """The writer may have renamed the next windows' directories into place when a window is
    committed; read back from disk, the books (what timeline_limit ages) hold none of them, or they
    would count twice once committed themselves."""
    runner = CollectionRunner("c", CollectorConfig(watch_dir=tmp_path, output=tmp_path / "out"), Metrics())
    out_dir = tmp_path / "out" / "c" / "ASCEND_PROFILER_OUTPUT"
    for window in range(4):
        (out_dir / ckpt.window_dir_name(window)).mkdir(parents=True)
        (out_dir / ckpt.window_dir_name(window) / "trace_view.json").write_bytes(b"[]")
    runner.context = cast("Any", SimpleNamespace(out_dir=out_dir))
    assert [window for window, _ in runner._scan_timelines(1)] == [0, 1]


def _slice_number(path: Path) -> int:
    return int(path.name.rpartition("_")[2])


def test_slices_aged_while_the_daemon_was_down_are_recorded_gaps(tmp_path: Path) -> None:
    """Killed after its first commit; the profiler then ages the oldest slices of a stream, some read
    (no gap) and two not yet read; the restart records exactly those two as gaps and finishes."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    config = SimulationConfig(
        chip="910B", framework="none", seed=3, slice_bytes=256 * 1024, target_bytes=16 << 20
    )
    simulate(config, raw)
    # 16 pipeline steps read into the third of 25 task_memory_info slices (2 MB per read)
    killed = collect(raw, out, "--once", env={STEPS_ENV: "16", FAULT_ENV: "kill_after_commit=0"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (state,) = out.rglob(ckpt.CHECKPOINT_NAME)
    checkpoint = ckpt.load(state)
    assert checkpoint is not None
    (position,) = [
        p for name, p in Pipeline.feed_positions(checkpoint.snapshot).items() if "task_memory_info" in name
    ]
    _index, offsets = position
    first = 0 if offsets is None else offsets["slice"] + (1 if offsets["offset"] else 0)
    slices = sorted(raw.rglob("aging.additional.task_memory_info.slice_*[0-9]"), key=_slice_number)
    assert 0 < first < len(slices) - 3
    for path in slices[: first + 2]:  # the profiler's aging: oldest first, each with its .done
        path.unlink()
        path.with_name(f"{path.name}.done").unlink()
    finished = collect(raw, out, "--once")
    assert finished.returncode == 0, finished.stderr
    gaps = json.loads((state.parent / "gaps.json").read_text())
    assert [(g["file"], g["reason"], g["bytes"]) for g in gaps] == [
        (p.name, "aged_while_down", None) for p in slices[first : first + 2]
    ]
    logged = [e for e in map(json.loads, finished.stderr.splitlines()) if e["event"] == "gap"]
    assert [e["file"] for e in logged if "reason" in e] == [g["file"] for g in gaps]
    # the slice the checkpoint stood in is gone too: its reader logs that it skips the rest
    assert [e["file"] for e in logged if "reason" not in e] == [offsets["file"]]
    done = ckpt.load(state)
    assert done is not None and done.finished


@given(st.binary(max_size=4096), st.integers(0, 64))
def test_operator_states_are_held_compressed_and_come_back_as_they_were(tail: bytes, repeats: int) -> None:
    state = tail * repeats
    packed = ckpt.compress_state(state)
    assert ckpt.decompress_state(packed) == state
    if len(state) >= 1024 and repeats > 4:
        assert len(packed) < len(state) / 4


def test_a_checkpoint_of_another_state_format_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """Operator snapshots change between versions: a checkpoint of another format, or one from before
    the format was recorded, is refused by name instead of being misread."""
    path = tmp_path / ckpt.CHECKPOINT_NAME
    current = ckpt.Checkpoint(
        state_format=ckpt.STATE_FORMAT, window=3, snapshot=b"x", streams=[], side_bytes=0
    )
    ckpt.save(path, current)
    assert ckpt.load(path) == msgspec.structs.replace(current, snapshot_crc32=zlib.crc32(b"x"))
    ckpt.save(path, msgspec.structs.replace(current, state_format=ckpt.STATE_FORMAT - 1))
    with pytest.raises(ckpt.CheckpointError, match=f"state format {ckpt.STATE_FORMAT - 1}.*reads format"):
        ckpt.load(path)
    old = msgspec.msgpack.encode({"window": 3, "snapshot": b"x", "streams": [], "side_bytes": 0})
    path.write_bytes(old)
    with pytest.raises(ckpt.CheckpointError, match="state_format"):
        ckpt.load(path)


def test_a_growing_logic_stream_info_counts_as_a_growing_side_table(tmp_path: Path) -> None:
    """The layout context reads ``logic_stream_info`` whole when planning, as the planner reads the
    dictionaries: a record added later changes the side bytes, which starts the collection over."""
    simulate(SimulationConfig(chip="910B", steps=1, ops_per_step=8, seed=1), tmp_path)
    [prof] = sorted(tmp_path.glob("PROF_*"))
    before = _side_bytes(discover(prof)[0])
    codec = get_codec("logic_stream_info")
    path = prof / "host" / "data" / "unaging.additional.logic_stream_info.slice_0"
    path.write_bytes(codec.encode({"logic_stream_id": [0], "physic_stream_ids": [[2]]}))
    once = _side_bytes(discover(prof)[0])
    with path.open("ab") as f:
        f.write(codec.encode({"logic_stream_id": [1], "physic_stream_ids": [[3]]}))
    assert (once - before, _side_bytes(discover(prof)[0]) - once) == (256, 256)
