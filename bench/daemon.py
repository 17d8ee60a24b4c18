"""Collector daemon benchmark: what ingest rate ``profstream collect`` keeps up with on one core.

Two measurements, each of a ``profstream collect`` child process (start-up included):

* ``--once`` throughput: a static simulated PROF dir of ``--size`` MB processed in one run; MB per
  CPU second of the child is the rate one core sustains, MB per wall second what this (shared)
  machine gave.
* live: :func:`profstream.simulate.live` writes a 910B run at each ``--rate`` MB/s for
  ``--duration`` s while the daemon follows it. Reported: ``.done``-to-commit latency p50/p99 (the
  ``done_to_commit_s`` of ``slice_processed``), how long after the writer stopped the daemon
  committed its last window (catch-up), the daemon's own lag (``profstream_lag_seconds`` of its
  status endpoint, read every 0.2 s: the largest reading), and its RSS (sampled from /proc every
  0.2 s: the largest sample of any one process, the collector or its window writer, and the last
  sample of the collector). A rate is kept up with when the lag stays within a few polls.

``python bench/daemon.py --size 200 --rate 2 --rate 5 --rate 10 --duration 30`` prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from macro import process_tree  # run as a script, bench/ is on the path
from profstream.simulate import LiveResult, SimulationConfig, live, simulate

MB = 1 << 20
COLLECT = [sys.executable, "-c", "from profstream.cli import main; raise SystemExit(main())", "collect"]
CONFIG = """
[logging]
format = "json"
verbosity = 1

[decode]
on_invalid = "skip"

[daemon]
poll_interval_s = {poll}
window_s = {window}
"""


@dataclass
class Run:
    """What one daemon child did."""

    label: str
    raw_mb: float
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    end_rss_mb: float | None = None
    latencies: list[float] = field(default_factory=list)
    catch_up_s: float | None = None
    max_lag_s: float | None = None
    gaps: int = 0  # gap events logged (raw data lost before it was read)
    finished: bool = False  # the last window (the collection's end) was committed
    rss_series: list[tuple[float, float]] = field(default_factory=list)  # (s since start, largest MB)
    lag_series: list[tuple[float, float]] = field(default_factory=list)  # (s since start, lag s)


def _raw_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.name.endswith(".done"))


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None
    return None


def _events(log: Path) -> list[dict[str, object]]:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _lag_s(port: int) -> float | None:
    """``profstream_lag_seconds`` from the daemon's status endpoint (None while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("profstream_lag_seconds "):
            return float(line.split()[1])
    return None


class Child:
    """A ``profstream collect`` child: its log, CPU time (rusage, its window writer's included), RSS of
    it and its writer and its reported lag (sampled every 0.2 s)."""

    def __init__(self, watch: Path, out: Path, config: Path, *flags: str) -> None:
        self.log = out.with_suffix(".log")
        self.before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.started = time.perf_counter()
        self.port = _free_port()
        with self.log.open("wb") as log:
            argv = [*COLLECT, str(watch), "--output", str(out), "--config", str(config)]
            argv += ["--status-port", str(self.port), *flags]
            self.proc = subprocess.Popen(argv, stderr=log)
        self.rss: list[float] = []  # the collector's
        self.largest: list[tuple[float, float]] = []  # (s since start, largest process's RSS)
        self.lags: list[tuple[float, float]] = []  # (s since start, reported lag)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self.proc.poll() is None:
            sizes = [rss for pid in process_tree(self.proc.pid) if (rss := _rss_mb(pid)) is not None]
            if sizes:
                self.rss.append(sizes[0])
                self.largest.append((time.perf_counter() - self.started, max(sizes)))
            lag = _lag_s(self.port)
            if lag is not None:
                self.lags.append((time.perf_counter() - self.started, lag))
            time.sleep(0.2)

    def wait(self, label: str, raw_mb: float) -> Run:
        self.proc.wait()
        wall = time.perf_counter() - self.started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - self.before.ru_utime) + (after.ru_stime - self.before.ru_stime)
        if self.proc.returncode != 0:
            msg = f"collect exited {self.proc.returncode}; see {self.log}"
            raise RuntimeError(msg)
        return Run(
            label,
            raw_mb,
            wall,
            cpu,
            max((rss for _, rss in self.largest), default=0.0),
            self.rss[-1] if self.rss else None,
            max_lag_s=max((lag for _, lag in self.lags), default=None),
            lag_series=list(self.lags),
            rss_series=list(self.largest),
        )


def once(work: Path, size_mb: int, config: Path, *flags: str, framework: str = "none") -> Run:
    raw = work / f"static-{framework}-{size_mb}"
    if not raw.exists():
        simulate(SimulationConfig(chip="910B", framework=framework, seed=1, target_bytes=size_mb * MB), raw)
    child = Child(raw, work / f"out-once-{size_mb}", config, "--once", *flags)
    run = child.wait(f"--once {size_mb} MB", _raw_bytes(raw) / MB)
    run.latencies = [
        float(e["done_to_commit_s"]) for e in _events(child.log) if e["event"] == "slice_processed"
    ]
    return run


def follow(
    work: Path,
    rate: float,
    duration: float,
    config: Path,
    *flags: str,
    storage_limit_mb: float | None = None,
    framework: str = "none",
) -> Run:
    """A live run at ``rate`` MB/s for ``duration`` s, the simulated collector aging its slices under
    ``storage_limit_mb`` (None: none aged), followed by a ``profstream collect`` child."""
    raw, out = work / f"live-{framework}-{rate:g}", work / f"out-live-{framework}-{rate:g}"
    cfg = SimulationConfig(chip="910B", framework=framework, seed=1)
    written: list[LiveResult] = []

    def write() -> None:
        written.append(live(cfg, raw, rate, duration_s=duration, storage_limit_mb=storage_limit_mb))

    writer = threading.Thread(target=write)
    writer.start()
    while not raw.exists():
        time.sleep(0.05)
    child = Child(raw, out, config, *flags)
    writer.join()
    ended = time.perf_counter()
    while not any(e["event"] == "window_committed" and e.get("finished") for e in _events(child.log)):
        if child.proc.poll() is not None or time.perf_counter() - ended > 600:
            break
        time.sleep(0.1)
    catch_up = time.perf_counter() - ended
    child.proc.terminate()
    (result,) = written
    run = child.wait(f"live {rate:g} MB/s x {duration:g} s", result.simulation.bytes / MB)
    logged = _events(child.log)
    run.latencies = [float(e["done_to_commit_s"]) for e in logged if e["event"] == "slice_processed"]
    run.catch_up_s = catch_up
    run.gaps = sum(e["event"] == "gap" for e in logged)
    run.finished = any(e["event"] == "window_committed" and e.get("finished") for e in logged)
    return run


def _quantile(values: list[float], q: float) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.quantiles(values, n=100, method='inclusive')[round(q * 100) - 1]:.2f}"


def table(runs: list[Run]) -> str:
    head = (
        "| run | raw MB | wall s | CPU s | MB/s per CPU s | MB/s wall | done-to-commit p50 s | p99 s "
        "| catch-up s | max lag s | peak RSS MB | end RSS MB |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        end = "-" if r.end_rss_mb is None else f"{r.end_rss_mb:.0f}"
        catch = "-" if r.catch_up_s is None else f"{r.catch_up_s:.1f}"
        lag = "-" if r.max_lag_s is None else f"{r.max_lag_s:.2f}"
        lines.append(
            f"| {r.label} | {r.raw_mb:.0f} | {r.wall_s:.1f} | {r.cpu_s:.1f} | {r.raw_mb / r.cpu_s:.1f} "
            f"| {r.raw_mb / r.wall_s:.1f} | {_quantile(r.latencies, 0.5)} | {_quantile(r.latencies, 0.99)} "
            f"| {catch} | {lag} | {r.peak_rss_mb:.0f} | {end} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--size", type=int, action="append", default=[], help="--once run of N MB")
    parser.add_argument("--rate", type=float, action="append", default=[], help="live run at N MB/s")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds each live run writes")
    parser.add_argument("--poll", type=float, default=0.5, help="daemon poll interval, s")
    parser.add_argument("--window", type=float, default=2.0, help="daemon commit window, s")
    parser.add_argument(
        "--sim-storage-limit", type=float, help="MB under which the simulated collector ages its slices"
    )
    parser.add_argument(
        "--layout", default="auto", help="collect --layout (parquet: Parquet parts only, no window dirs)"
    )
    parser.add_argument(
        "--framework",
        choices=("none", "torch_npu"),
        default="none",
        help="simulated runs without framework data (a PROF dir: msprof layout) or with the PyTorch "
        "adapter's (an *_ascend_pt dir: torch_npu layout)",
    )
    args = parser.parse_args()
    flags = ("--layout", args.layout)
    with tempfile.TemporaryDirectory(dir=args.work) as temp:
        work = Path(temp)
        config = work / "daemon.toml"
        config.write_text(CONFIG.format(poll=args.poll, window=args.window))
        runs = [once(work, size, config, *flags, framework=args.framework) for size in args.size]
        runs += [
            follow(
                work,
                rate,
                args.duration,
                config,
                *flags,
                storage_limit_mb=args.sim_storage_limit,
                framework=args.framework,
            )
            for rate in args.rate
        ]
    print(
        f"Machine: {os.uname().machine}, {os.cpu_count()} cores; poll {args.poll} s, window {args.window} s, "
        f"layout {args.layout}, framework {args.framework}"
    )
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
