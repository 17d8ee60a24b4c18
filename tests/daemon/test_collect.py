"""``profstream collect``: exactly-once Parquet windows, crashes at any point, restarts, faults."""

from __future__ import annotations

import fcntl
import signal
from pathlib import Path

import pytest

from profstream.daemon.collector import LOCK_NAME, CollectionRunner, Collector, CollectorConfig
from profstream.errors import SinkError
from profstream.simulate import SimulationConfig, simulate
from tests.daemon.conftest import collect, daemon_parquet, offline_rows, rows

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
    simulate(SimulationConfig(chip=chip, steps=4, framework=framework, seed=3), out / "raw")
    return out / "raw"


@pytest.fixture(scope="module")
def offline(raw: Path) -> dict[str, object]:
    return dict(offline_rows(raw, raw.parent / "offline"))


def test_once_equals_the_offline_export(raw: Path, offline: dict[str, object], tmp_path: Path) -> None:
    """One --once run over a finished collection commits every table's rows exactly once."""
    done = collect(raw, tmp_path / "out", "--once", env={STEPS_ENV: "4"})
    assert done.returncode == 0, done.stderr
    assert '"window_committed"' in done.stderr
    assert rows(daemon_parquet(tmp_path / "out")) == offline


@pytest.mark.parametrize(
    "faults",
    [
        ["kill_mid_commit=1", "kill_after_commit=3", "kill_after_steps=5", "kill_mid_commit=6"],
        ["kill_after_steps=2", "kill_mid_commit=2", "kill_mid_commit=2", "kill_after_steps=9"],
        ["kill_mid_commit=0", "kill_after_commit=0", "kill_after_steps=1", "kill_mid_commit=4"],
    ],
)
def test_kill_9_anywhere_then_restart_is_exactly_once(
    raw: Path, offline: dict[str, object], tmp_path: Path, faults: list[str]
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
    again = collect(raw, out, "--once")  # a finished collection is not processed twice
    assert again.returncode == 0
    assert rows(daemon_parquet(out)) == offline


def test_a_full_output_disk_pauses_and_retries_without_corruption(
    raw: Path, offline: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while committing: the window stays in memory, the daemon retries, nothing is lost or doubled."""
    failures = iter([True, True, False, True])
    write = CollectionRunner._write_window

    def full_disk(self: CollectionRunner, window: int) -> list[Path]:
        paths = write(self, window)  # some part files are renamed before the disk "fills"
        if next(failures, False):
            msg = "cannot write part: No space left on device"
            raise SinkError(msg)
        return paths

    monkeypatch.setattr(CollectionRunner, "_write_window", full_disk)
    config = CollectorConfig(
        watch_dir=raw, output=tmp_path / "out", poll_interval_s=0.01, once=True, window_steps=3
    )
    assert Collector(config).run() == 0
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
