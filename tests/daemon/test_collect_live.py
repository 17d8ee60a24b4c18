"""``profstream collect`` following a live simulated run: kill -9 while it runs, SIGTERM, metrics."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from profstream.daemon.collector import AT_STOP_FAMILIES
from profstream.simulate import SimulationConfig, live
from tests.daemon.conftest import COLLECT, collect, daemon_parquet, offline_rows, rows

CONFIG = """
[daemon]
poll_interval_s = 0.05
window_s = 0.2
"""


def _daemon(watch: Path, out: Path, config: Path, *flags: str) -> subprocess.Popen[bytes]:
    """The daemon in follow mode, its JSON log appended to ``OUT.log`` (a pipe could fill and block it)."""
    argv = [*COLLECT, str(watch), "--output", str(out), "--config", str(config), "--log-format", "json", "-v"]
    with Path(f"{out}.log").open("ab") as log:
        return subprocess.Popen([*argv, *flags], stderr=log)


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "daemon.toml"
    path.write_text(CONFIG)
    return path


def _live(raw: Path, rate: float) -> threading.Thread:
    cfg = SimulationConfig(chip="910B", steps=24, framework="none", seed=5)
    thread = threading.Thread(target=live, args=(cfg, raw, rate), daemon=True)
    thread.start()
    return thread


def test_kill_9_while_following_a_live_run(tmp_path: Path, config: Path) -> None:
    """The daemon follows slices as they are written, is killed twice mid-run, and still ends exact."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    writer = _live(raw, rate=0.4)
    for pause in (1.0, 1.5):
        _wait_for(raw)
        daemon = _daemon(raw, out, config)
        time.sleep(pause)
        daemon.kill()
        daemon.wait()
    writer.join(timeout=120)
    finished = collect(raw, out, "--once", "--config", str(config))
    assert finished.returncode == 0, finished.stderr
    assert rows(daemon_parquet(out)) == offline_rows(raw, tmp_path / "offline")


def test_sigterm_commits_and_exits_0_and_metrics_are_served(tmp_path: Path, config: Path) -> None:
    """SIGTERM drains and commits; a second instance on the same OUT is refused; /metrics answers."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    writer = _live(raw, rate=0.3)
    _wait_for(raw)
    daemon = _daemon(raw, out, config, "--status-port", "19464")
    try:
        time.sleep(1.5)
        second = collect(raw, out, "--once")
        assert second.returncode == 1
        assert "another profstream collect" in second.stderr
        text = urllib.request.urlopen("http://127.0.0.1:19464/metrics", timeout=5).read().decode()
        assert "profstream_lag_seconds" in text
        assert "profstream_records_total{family=" in text, text
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    err = Path(f"{out}.log").read_text()
    assert daemon.returncode == 0, err
    assert '"window_committed"' in err
    assert '"slice_processed"' in err or '"dir_discovered"' in err
    writer.join(timeout=120)


def test_a_live_torch_npu_run_is_followed_before_profiler_info_and_ends_exact(
    tmp_path: Path, config: Path
) -> None:
    """torch_npu writes profiler_info.json when it stops: the daemon plans on the clock the growing
    FRAMEWORK files tell, commits windows while the run goes on, survives a kill -9 with that
    assumption in its checkpoint, and ends with the offline rows. The files torch_npu writes at stop
    (the Python tracer's names, the GC records) are left out, logged, rather than start it over:
    the tracer's calls and the GC rows are what the daemon's tables lack."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    cfg = SimulationConfig(chip="910B", steps=16, framework="torch_npu", seed=5)
    writer = threading.Thread(target=live, args=(cfg, raw, 1.0), daemon=True)
    writer.start()
    _wait_for(raw)
    daemon = _daemon(raw, out, config)
    time.sleep(2.0)
    daemon.kill()
    daemon.wait()
    daemon = _daemon(raw, out, config)
    writer.join(timeout=120)
    (info,) = raw.rglob("profiler_info*.json")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=60) == 0
    finished = collect(raw, out, "--once", "--config", str(config))
    assert finished.returncode == 0, finished.stderr
    offline = offline_rows(raw, tmp_path / "offline")
    at_stop = {"python_calls", "gc"}
    assert at_stop <= offline.keys()
    assert rows(daemon_parquet(out)) == {name: r for name, r in offline.items() if name not in at_stop}
    logged = [
        json.loads(line) for line in Path(f"{out}.log").read_text().splitlines() if line.startswith("{")
    ]
    finishing = [json.loads(line) for line in finished.stderr.splitlines() if line.startswith("{")]
    replanned = [e for e in logged + finishing if e["event"] == "replanned"]
    left_out = {Path(key).parent.name for e in replanned if not e["done"] for key in e["new_streams"]}
    assert {"torch_python_tracer_hash", "torch_gc_record"} <= left_out <= AT_STOP_FAMILIES
    started_over = {Path(key).parent.name for e in replanned if e["done"] for key in e["new_streams"]}
    assert not started_over & left_out  # the files written at stop never start the collection over
    assert {"assumed": True, "syscnt_enable": True}.items() <= next(
        e for e in logged if e["event"] == "framework_clock"
    ).items()
    committed = [datetime.fromisoformat(e["timestamp"]) for e in logged if e["event"] == "window_committed"]
    assert min(committed).timestamp() < info.stat().st_mtime  # outputs while torch_npu still ran
