"""Live mode: the batch simulation written over time, as the collector writes it, with its aging.

:func:`live` writes exactly the data :func:`profstream.simulate.simulate` writes
for the same config (same files, same bytes, same slicing), but paced at about
``rate_mb_s``: raw data goes out in the driver-sized chunks of
:class:`~profstream.simulate.writer.SliceWriter` (so a partial record can sit at
the tail of a slice until the next chunk lands), and each slice gets its
``.done`` only once complete (specs/cann_raw_formats.md §1.2, §1.4). Control
files come first (info.json, sample.json, start_info, host_start.log,
dev_start.log), end_info last. Ranks advance in turn, a chunk of steps each,
as concurrent processes would.

With ``storage_limit_mb`` the simulated collector ages its PROF_XXX directory
as the real one does (specs/msprof_outputs.md §4g), with
:class:`profstream.daemon.aging.AgingPolicy`: every completed slice and control
file is added with its ``.done``, and after each slice the files the policy
picks are deleted. FRAMEWORK files (torch_npu's DataDumper, outside PROF_XXX)
are not aged, as the collector does not own them.

Choices: ``duration_s`` sets the amount of data, ``rate * duration`` bytes (a
``target_bytes`` budget, so the output stays a function of the arguments), and
the pace makes the run last about that long; a set ``stop_event`` stops the
pacing, finishes the chunk of steps in hand and closes the collection (last
``.done`` files, end_info), like a stopped collector. ``reserve_mb`` (the
collector's fixed 20 MB) is a parameter so that tests can age a few MB.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from profstream.daemon.aging import MB, RESERVE_BYTES, AgingPolicy, done_path
from profstream.errors import ConfigError
from profstream.events import AGED, get_logger
from profstream.simulate.config import SimulationConfig
from profstream.simulate.layout import Layout
from profstream.simulate.records import Names
from profstream.simulate.run import RankRun, SimulationResult, fresh_out_dir, result_of
from profstream.simulate.truth import Truth
from profstream.simulate.workload import build_template

__all__ = ["LiveResult", "live"]


@dataclass(frozen=True, slots=True)
class LiveResult:
    """What :func:`live` wrote, and the data files its collector aged (in deletion order)."""

    simulation: SimulationResult
    aged: tuple[Path, ...]


class _Pacer:
    """Sleeps after each chunk so that the bytes written so far match ``rate`` bytes per second."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.rate = rate
        self.stop = stop
        self.started = time.monotonic()
        self.written = 0

    def wrote(self, nbytes: int) -> None:
        self.written += nbytes
        delay = self.started + self.written / self.rate - time.monotonic()
        if delay > 0:
            self.stop.wait(delay)


@dataclass
class _Collector:
    """The simulated collector of one rank: paces its writes and ages its PROF_XXX directory."""

    pacer: _Pacer
    policy: AgingPolicy | None
    volume: Path  # where free space is measured
    aged: list[Path] = field(default_factory=list)
    _known: set[Path] = field(default_factory=set)

    def wrote(self, nbytes: int) -> None:
        self.pacer.wrote(nbytes)

    def completed(self, path: Path, size: int) -> None:
        if self.policy is None:
            return
        self.policy.add(path, size, done_path(path).stat().st_size)
        decision = self.policy.to_delete(shutil.disk_usage(self.volume).free)
        if not decision:
            return
        for victim in decision.paths:
            victim.unlink(missing_ok=True)
        self.aged += [f.path for f in decision.aged]
        get_logger(component="simulate").info(
            AGED,
            files=[f.path.name for f in decision.aged],
            bytes=decision.bytes,
            stored_bytes=self.policy.total_bytes,
        )

    def control_files(self, layout: Layout, device_ids: tuple[int, ...]) -> None:
        """Add the control files written since the last call (the collector counts them, never ages them)."""
        if self.policy is None:
            return
        for directory in (layout.host, *(layout.device(n) for n in device_ids)):
            for path in sorted(directory.iterdir()):
                if path.is_file() and not path.name.endswith(".done") and path not in self._known:
                    self._known.add(path)
                    self.policy.add(path, path.stat().st_size, done_path(path).stat().st_size)


def _check(rate_mb_s: float, duration_s: float | None, storage_limit_mb: float | None) -> None:
    checks = (
        ("rate", rate_mb_s > 0, rate_mb_s),
        ("duration", duration_s is None or duration_s > 0, duration_s),
        ("storage_limit", storage_limit_mb is None or storage_limit_mb > 0, storage_limit_mb),
    )
    for key, ok, value in checks:
        if not ok:
            msg = f"must be > 0, got {value!r}"
            raise ConfigError(msg, key=f"simulate.{key}")


def live(
    config: SimulationConfig,
    out: str | Path,
    rate_mb_s: float,
    *,
    duration_s: float | None = None,
    storage_limit_mb: float | None = None,
    stop_event: threading.Event | None = None,
    truth_dir: str | Path | None = None,
    reserve_mb: float = RESERVE_BYTES / MB,
) -> LiveResult:
    """Write the collection ``config`` describes under ``out`` at about ``rate_mb_s`` MB/s of raw data.

    Without ``duration_s`` the run has ``config.steps`` steps (or
    ``config.target_bytes``, as in batch mode); with it, about ``rate_mb_s *
    duration_s`` MB. Run it in a thread and set ``stop_event`` to end it early.
    ``truth_dir`` gets the ground truth, as in batch mode.
    """
    _check(rate_mb_s, duration_s, storage_limit_mb)
    started = time.perf_counter()
    root = fresh_out_dir(out)
    stop = stop_event or threading.Event()
    pacer = _Pacer(rate_mb_s * MB, stop)
    template = build_template(config)
    names = Names.of(template)
    truth = None if truth_dir is None else Truth(Path(truth_dir), template)
    budget_bytes = config.target_bytes if duration_s is None else int(rate_mb_s * duration_s * MB)
    budget = None if budget_bytes is None else -(-budget_bytes // config.ranks)
    volume = shutil.disk_usage(root).total
    runs: list[tuple[RankRun, _Collector]] = []
    for rank in range(config.ranks):
        policy = None
        if storage_limit_mb is not None:
            policy = AgingPolicy(int(storage_limit_mb * MB), volume, reserve_bytes=int(reserve_mb * MB))
        collector = _Collector(pacer, policy, root)
        run = RankRun(config, template, names, rank, root, truth, observer=collector)
        run.start()
        collector.control_files(run.layout, config.device_ids(rank))
        runs.append((run, collector))
    pending = runs
    while pending:
        unfinished = []
        for run, collector in pending:
            if run.advance(budget) or stop.is_set():
                run.finish()
                collector.control_files(run.layout, config.device_ids(run.rank))
            else:
                unfinished.append((run, collector))
        pending = unfinished
    simulation = result_of(root, [run for run, _ in runs], truth, started)
    return LiveResult(simulation, tuple(path for _, collector in runs for path in collector.aged))
