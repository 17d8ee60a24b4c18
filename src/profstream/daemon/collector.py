"""``profstream collect``: follow live PROF_XXX directories and commit Parquet outputs in windows.

One :class:`CollectionRunner` per collection found under the watch directory runs the engine's
pipeline (:class:`~profstream.engine.plan.Planner`) over live feeds (``FeedSet`` follow mode: the
growing tail of a slice is read up to its last whole record; a stream is read to its end, and the
operators finished, once the collection has written its ``end_info`` files). Every emitted row of a
canonical table goes to the collection's window writer (:mod:`profstream.daemon.windows`, a forked
process by default) and is committed per window as new part files
``OUT/<collection>/parquet/<table>/[device_id=N/]part-<window>.parquet`` (temporary name, rename,
fsync); once the writer says a window is written, the checkpoint (the pipeline snapshot taken when the
window ended + window number) is replaced atomically (:mod:`profstream.daemon.checkpoint`) by a
background thread, one checkpoint at a time in window order, and the window counts as committed once
its checkpoint is durable. The pipeline reads the next window meanwhile; it ends a window only while
fewer than two are not yet committed.
The pipeline emits each row once, in order, so a restart that drops the uncommitted windows and
resumes from the snapshot produces exactly the rows after it: after ``kill -9`` at any moment the
committed outputs equal an offline ``export --layout parquet`` of the same data, as multisets of rows
per table.

Choices (the issue leaves them open):

* Planning waits until the collection can be planned: its control files parse and every device
  dir has data. What planning waits for is logged (``planning_waits``), and the lag counts every
  complete file meanwhile.
* torch_npu writes ``profiler_info*.json`` only when profiling stops, and its ``start_info`` says
  whether the framework timestamps count syscnt ticks or monotonic ns. Until it exists, a collection
  with a FRAMEWORK dir is planned on an assumed one (``framework_clock`` event, ``assumed=True``): NPU
  activity on (this PROF dir exists), host/info.json's frequency and host/host_start.log's sync
  point (which torch_npu's conversion takes before its own ``start_info``), and the syscnt flag told
  from the first framework timestamp: read as ticks and read as ns, only the right reading lands
  within an hour of the collection's start (:func:`~profstream.engine.clock.framework_counts_syscnt`;
  planning waits when neither or both do, or before the first framework record). The checkpoint
  keeps the assumption, so a restart plans on it again. The last rows go out only once
  profiler_info.json has come and been compared: when its clock is the assumed one, the collection
  goes on (windows before it hold every file of the torch_npu layout, as an export without
  profiler_info.json writes; when its level or AI Core metrics leave some out, a new runner resumes
  from the last commit, so that the windows after it follow it); when it is not, the collection
  starts over (next point), or, once raw data was aged, goes on with the assumed clock and logs an
  error.
* A stream that appears later, or side tables (``hash_dic``, ``type_info_dic``,
  ``logic_stream_info``, read whole when planning) that grow, make the daemon start the
  collection over (delete its outputs and checkpoint, re-plan, re-read), which keeps the result
  exact; once raw data was aged that is impossible, so the new stream is then ignored and logged.
  The files torch_npu writes when profiling stops (:data:`AT_STOP_FAMILIES`: the Python tracer's
  names and start frames, the GC records) would always start a followed run over at its end, doubling
  its lag; they are left out and logged instead (the planner also leaves the tracer out until its
  names exist, ``plan.Planner._tracer_names_known``).
* A restart plans with the streams the checkpoint names, so the snapshot restores into the same
  operators.
* ``--storage-limit`` ages the watched PROF dirs with :class:`~profstream.daemon.aging.AgingPolicy`
  after each poll. A slice the pipeline has not read past is protected (one read to its end is
  past: its reader already stands in the next slice, :mod:`~profstream.engine.sources`); one it
  has read past but not committed yet is committed before it is deleted (a commit out of turn).
  When the limit forces a protected slice out anyway (the stored total over the limit itself,
  see :mod:`~profstream.daemon.aging`), the gap (file, bytes, the ``.done`` start and end times) is
  written into the checkpoint and ``gaps.json`` before the file is deleted, and logged. Without a limit
  the daemon deletes nothing (it does not take the collector's 90 %-of-free-space default).
* A slice the profiler ages (deletes with its ``.done``) before a commit read past it is a gap
  too (``reason="aged_unread"``): each poll compares the listing with the ``.done`` files seen
  before, and a vanished planned slice the committed checkpoint has not read past is recorded
  the same way, with the size and times its ``.done`` had when first seen (the file is gone by
  then). A slice read but not committed yet counts as lost (its rows would be lost by a crash
  before the next commit; a reader that meets a vanished slice skips it, so its position cannot
  tell read from skipped). The reader re-aligns on the next slice
  (:mod:`profstream.engine.sources`), so the rows from the remaining slices are those an offline
  export of what is left gives.
* A slice aged while the daemon was down (between a kill and the restart) is found at the restart:
  the collector numbers a stream's slices from 0 and rolls to ``slice_{n+1}`` (cann_raw_formats.md
  §1, "Slice size") and ages oldest first, so every number from where the checkpoint's reading
  stands up to the lowest slice present is a gap (``reason="aged_while_down"``, size and times
  unknown: the file and its ``.done`` are gone). Limits: when the slice the checkpoint had partly
  read vanished too, only its reader's ``gap`` log event (without a reason) tells that the rest of
  it, if any, was skipped; it is not in ``gaps.json``. A vanished slice leaves the storage-limit
  books (it no longer takes space, and there is nothing left to age).
* A window that fails with ENOSPC stays with the writer, which writes it again each poll; the
  collector logs ``backpressure`` each time and reads nothing more of that collection meanwhile.
  Part files renamed before the failure are rewritten under the same names, so nothing is
  duplicated or corrupted. A writer process that dies (``window_writer_lost``) is handled as a
  vanished directory is (next point): a new runner resumes from the last commit.
* A decode error under ``on_invalid = "error"`` stops that collection (logged ``decode_error``);
  the others go on. ``configs/daemon.toml`` sets ``skip`` (count, log, go on).
* A collection directory that vanishes while its feeds read it (the watch dir unmounted or
  moved away) leaves the readers unusable (a stream reader takes a vanished slice for an aged
  one, a vanished directory raises), so the runner is dropped and a fresh one resumes from the
  last commit when the directory is back; nothing uncommitted was written. While the watch dir
  is missing the daemon logs it once and waits.
* Lag is how long the oldest complete slice (one with its ``.done``) that the pipeline has not read
  to its end has waited since its ``.done`` was written, or since the daemon found it if that is
  later (0 when none waits). A stricter measure,
  the time since the pipeline last found nothing new to read, grew without bound for a daemon that
  kept up a second behind a writer that never paused.
* Besides the Parquet parts, each window's rows are written in a layout (``--layout``; ``auto``:
  torch_npu for a collection with FRAMEWORK data, msprof otherwise; ``parquet``: none) as one
  directory ``OUT/<collection>/<layout dir>/window-<N>/`` holding that layout's timeline and CSV
  files for the window (written under a temporary name and renamed whole): timelines and CSVs are
  rolled per window. Each window directory opens on its own in a viewer (its own process and thread
  metadata); a flow whose two ends fall in different windows is in both files but joins in neither
  viewer. Statistics (op_statistic, api_statistic, communication_statistic) cover the whole run and
  are in the last window. kernel_details' Step Id comes from every framework step committed so far
  (read back from the Parquet parts after a restart); a kernel whose ProfilerStep is emitted in a
  later window (steps settle a second after they end) has an empty Step Id in its window. The task
  wait time (kernel_details, op_summary) runs within a window: a window's first row per device,
  and rows next to a communication op whose row lands in another window, can differ from an
  offline export. Every other CSV cell and timeline event equals the offline export's, once.
  Such a window holds each device's op_summary rows (``task_rows``: the tasks with the
  communication op rows merged in) and not the tasks as well: the tasks it writes and routes are
  those rows less the op rows, derived as it commits.
* The timeline files of the window directories age under ``--timeline-limit`` (MB, default the
  export's 500): after each commit, the oldest windows' timeline files are deleted until the total
  is under the limit; the newest window's are kept even when they alone exceed it (a window's own
  timeline is cut at the limit, and the writer logs what it left out). CSV and Parquet outputs
  do not age.

Test hooks (environment): ``PROFSTREAM_COLLECT_FAULT`` holds comma-separated ``kill_mid_commit=N``
(SIGKILL between the part files' rename and the checkpoint rename of window N),
``kill_after_commit=N``, ``kill_after_steps=N`` (pipeline steps in this process) and
``sleep_mid_commit=S``; ``PROFSTREAM_COLLECT_WINDOW_STEPS=N`` also commits every N steps.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

import msgspec

from profstream import events
from profstream.codecs._base import OnInvalid
from profstream.daemon import checkpoint as ckpt
from profstream.daemon.aging import MB, AgingPolicy, done_path
from profstream.daemon.status import Metrics, StatusServer
from profstream.daemon.windows import Blocked, ForkedWindows, InlineWindows, WindowTarget, WindowWriter
from profstream.engine import discovery
from profstream.engine.clock import framework_counts_syscnt
from profstream.engine.feeds import Follow, first_framework_time
from profstream.engine.layouts import OUTPUT_DIRS, Context, Layout, Limits, is_timeline
from profstream.engine.layouts.torch_npu import Collected
from profstream.engine.metadata import (
    CommonConfig,
    ExperimentalConfig,
    FrameworkConfig,
    FrameworkStartInfo,
    ProfilerInfo,
)
from profstream.engine.plan import OUTPUT_STREAMS, TABLE_NAMES, Planner
from profstream.engine.runtime import ADVANCE_BYTES, Pipeline
from profstream.engine.sources import DEFAULT_CHUNK_BYTES, Stream
from profstream.errors import DecodeError, InputPathError, ProfstreamError
from profstream.export import framework_config, layout_context
from profstream.sinks.csv import CSV_LIMIT
from profstream.workers import WorkerError, can_fork

#: event names the daemon adds (not yet in profstream.events)
LOCK_NAME = ".profstream-collect.lock"
GAPS_NAME = "gaps.json"
FAULT_ENV = "PROFSTREAM_COLLECT_FAULT"
WINDOW_STEPS_ENV = "PROFSTREAM_COLLECT_WINDOW_STEPS"
#: ended windows the writer may not have written yet when the pipeline ends another: with one, the
#: pipeline and the writer had taken turns at each window's end (the 50 MB/s soak's largest lag 1.9-2.7 s
#: against 1.5 s with two, bench/README.md "Session 21")
WINDOWS_IN_FLIGHT = 2
#: side tables read whole when planning (the planner's dictionaries, the layout context's GE logic
#: streams): their growth means re-planning
_SIDE_TABLES = ("hash_dic", "type_info_dic", "logic_stream_info")
#: FRAMEWORK files torch_npu writes when profiling stops (the Python tracer's names and start frames,
#: ``Python GC`` records): appearing after the collection was planned, they are left out (logged)
#: instead of starting the whole collection over at its end
AT_STOP_FAMILIES = frozenset({"torch_python_tracer_func", "torch_python_tracer_hash", "torch_gc_record"})
_SLICE_NUMBER = re.compile(r"slice_\d+$")
#: ``--layout`` of the window directories: ``auto`` picks torch_npu or msprof per collection
WindowLayout = Literal["auto", "msprof", "torch_npu", "parquet"]


class LockedError(ProfstreamError):
    """Another ``profstream collect`` holds the output directory."""


@dataclass(frozen=True, slots=True)
class Faults:
    """Crash points for the exactly-once tests (see the module docstring)."""

    kill_mid_commit: int | None = None
    kill_after_commit: int | None = None
    kill_after_steps: int | None = None
    sleep_mid_commit: float = 0.0

    @classmethod
    def from_env(cls, text: str | None) -> Faults:
        if not text:
            return cls()
        fields: dict[str, Any] = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            fields[key.strip()] = float(value) if key.strip() == "sleep_mid_commit" else int(value)
        return cls(**fields)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    """Everything one daemon run needs (from settings and flags)."""

    watch_dir: Path
    output: Path
    poll_interval_s: float = 1.0
    window_s: float = 10.0
    # end a window early once its batches hold this much: the writer holds up to three (WINDOWS_IN_FLIGHT
    # ended, one arriving); each window costs the pipeline a snapshot and a checkpoint (40 MB of state at
    # 400 MB of input, 2 MB packed), 15 % of its time with windows of 64 MB
    window_bytes: int = 128 * MB
    storage_limit_mb: int | None = None
    status_port: int | None = None
    once: bool = False
    on_invalid: OnInvalid = "skip"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    advance_bytes: int = ADVANCE_BYTES
    window_steps: int | None = None
    layout: WindowLayout = "auto"
    timeline_limit_mb: int = 500
    timeline_file_mb: int = 256
    timeline_file_events: int = 1_000_000
    csv_slice_rows: int = CSV_LIMIT  # rows per file of a window's sliced (msprof) CSVs
    fork_writer: bool = True  # write windows in a child process (daemon/windows.py) where fork exists
    faults: Faults = field(default_factory=Faults)

    def limits(self) -> Limits:
        """Roll sizes and budget of one window's timeline files."""
        return Limits.in_megabytes(self.timeline_file_mb, self.timeline_file_events, self.timeline_limit_mb)


@dataclass(frozen=True, slots=True)
class _Ended:
    """A window handed to the writer: what its checkpoint will hold once the writer has written it."""

    window: int
    snapshot: bytes  # operator states compressed (ckpt.compress_state)
    finished: bool
    rows: int
    started: float  # monotonic time the window ended


@dataclass(frozen=True, slots=True)
class _Saving:
    """A written window whose checkpoint a background thread is making durable."""

    ended: _Ended
    paths: list[Path]  # the window's files, as the writer reported them
    saved: Future[None]


def stream_key(stream: Stream) -> str:
    """A stream's identity across discoveries: its directory, family and aging group."""
    return f"{stream.data_dir}/{stream.family}/{stream.aging}"


def _data_dirs(profile: discovery.Profile) -> list[discovery.DataDir]:
    return [d for d in (profile.host, *profile.devices, profile.framework) if d is not None]


def _stream_keys(profile: discovery.Profile, *, at_stop: bool = True) -> set[str]:
    """The keys of the collection's streams (without ``at_stop``, not those of AT_STOP_FAMILIES)."""
    return {
        stream_key(s)
        for d in _data_dirs(profile)
        for s in d.streams
        if at_stop or s.family not in AT_STOP_FAMILIES
    }


def _held(wanted: Iterable[str]) -> set[str]:
    """The streams a window holds until it commits: all it wants but a device's ``tasks`` where its
    ``task_rows`` are wanted (a layout's op_summary or kernel_details), as those are the task rows
    less the communication op rows (:func:`~profstream.daemon.windows.tasks_of`); holding both would
    hold every task twice."""
    streams = set(wanted)
    merged = {s.replace("task_rows@", "tasks@", 1) for s in streams if s.startswith("task_rows@")}
    return streams - merged


def _side_bytes(profile: discovery.Profile) -> int:
    if profile.host is None:
        return 0
    files = [f for s in profile.host.streams if s.family in _SIDE_TABLES for f in s.files]
    return sum(_size(f.path) for f in files)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _restricted(profile: discovery.Profile, keys: set[str]) -> discovery.Profile:
    """``profile`` with only the streams ``keys`` names (a restart plans what the checkpoint did)."""

    def keep(data_dir: discovery.DataDir | None) -> discovery.DataDir | None:
        if data_dir is None:
            return None
        streams = tuple(s for s in data_dir.streams if stream_key(s) in keys)
        return replace(data_dir, streams=streams)

    devices = tuple(d for d in (keep(d) for d in profile.devices) if d is not None)
    return replace(profile, host=keep(profile.host), devices=devices, framework=keep(profile.framework))


def _complete(profile: discovery.Profile) -> bool:
    """The collection wrote its end files (``end_info[.N]`` with ``.done``) in every dir."""
    dirs = [d for d in (profile.host, *profile.devices) if d is not None]
    return bool(dirs) and all(_has_end_info(d.path) for d in dirs)


def _has_end_info(directory: Path) -> bool:
    try:
        names = {p.name for p in directory.iterdir()}
    except FileNotFoundError:
        return False
    return any(n.startswith("end_info") and f"{n}.done" in names for n in names if not n.endswith(".done"))


def _planning_waits_for(profile: discovery.Profile) -> str | None:
    """What the collection lacks before it can be planned (module docstring), None when nothing."""
    if profile.framework is not None and profile.profiler_info is None and _assumed_info(profile) is None:
        return (
            "profiler_info.json (torch_npu writes it when profiling stops), or a framework record whose"
            " clock host/host_start.log and host/info.json tell"
        )
    if not profile.devices:
        return "a device directory"
    empty = [d.path.name for d in profile.devices if not d.streams]
    return f"data in {', '.join(empty)}" if empty else None


#: what the assumed profiler_info.json says torch_npu recorded: NPU activity (this PROF dir exists)
_ASSUMED_ACTIVITIES = ("ProfilerActivity.CPU", "ProfilerActivity.NPU")


def _assumed_info(profile: discovery.Profile, syscnt: bool | None = None) -> ProfilerInfo | None:
    """The framework clock's part of the profiler_info.json torch_npu will write at its stop, before it
    exists (module docstring): NPU activity, and ``syscnt_enable`` as given or as the first framework
    timestamp tells it. None while the host files that convert it, or a framework record, are missing."""
    host = profile.host.metadata if profile.host is not None else None
    controls = profile.controls
    if profile.framework is None or host is None or not controls:
        return None
    sync, freq = host.host_start, host.info.host_freq_mhz
    if sync is None or sync.section != "Host" or sync.cntvct is None or freq is None:
        return None
    if syscnt is None:
        first = first_framework_time(profile.framework)
        if first is None:
            return None
        syscnt = framework_counts_syscnt(
            first,
            freq_mhz=freq,
            start_cnt=sync.cntvct,
            start_monotonic=sync.clock_monotonic_raw,
            collection_start_ns=controls[0].start_info.clock_monotonic_raw,
        )
        if syscnt is None:
            return None
    return ProfilerInfo(
        config=FrameworkConfig(common_config=CommonConfig(activities=_ASSUMED_ACTIVITIES)),
        start_info=FrameworkStartInfo(
            syscnt_enable=syscnt, start_cnt=sync.cntvct, start_monotonic=sync.clock_monotonic_raw
        ),
    )


def _clock_holds(profile: discovery.Profile, syscnt: bool) -> bool:
    """Whether the profiler_info.json that came gives the framework clock assumed with ``syscnt``."""
    assumed = _assumed_info(profile, syscnt)
    if assumed is None or profile.profiler_info is None:
        return False
    try:
        return profile.framework_clock() == replace(profile, profiler_info=assumed).framework_clock()
    except ProfstreamError:
        return False


def _aged_since_start(profile: discovery.Profile) -> bool:
    """Whether some stream has lost slices: the collector numbers a stream's slices from 0 and ages
    the oldest first (module docstring), so a stream whose first slice is not 0 was aged. This holds
    across a restart, which the runner's own aging and gap records do not see."""
    dirs = (profile.host, *profile.devices)
    return any(min(f.slice for f in s.files) > 0 for d in dirs if d is not None for s in d.streams if s.files)


def _done_times(path: Path) -> tuple[int | None, int | None]:
    """``starttime`` and ``endtime`` of a slice's ``.done`` (None when absent)."""
    found: dict[str, int] = {}
    try:
        text = done_path(path).read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        return None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().lstrip("-").isdigit():
            found[key.strip()] = int(value.strip())
    return found.get("starttime"), found.get("endtime")


class CollectionRunner:
    """One collection: its live pipeline, window writer, checkpoint and aging (module docstring)."""

    def __init__(self, key: str, config: CollectorConfig, metrics: Metrics) -> None:
        self.key = key
        self.config = config
        self.metrics = metrics
        self.out = config.output / key
        self.parquet = self.out / "parquet"
        self.checkpoint_path = self.out / ckpt.CHECKPOINT_NAME
        self.log = events.get_logger(component="daemon", collection=key)
        self.follow = Follow()
        self.profile: discovery.Profile | None = None
        self.planner: Planner | None = None
        self.pipeline: Pipeline | None = None
        self.wanted: set[str] = set()
        self.planned_keys: set[str] = set()
        self.left_out: set[str] = set()  # streams of AT_STOP_FAMILIES that came after planning
        self.side_bytes = 0
        self.window = -1
        self.snapshot = b""  # of the committed window
        self.finished = False
        self.failed = False
        # why the pipeline cannot go on (its directory vanished, the window writer died, or
        # profiler_info.json's level needs a new runner), and the event and level that say so
        self.lost: str | None = None
        self.lost_event = events.WATCH_DIR_MISSING
        self.lost_level = logging.WARNING
        self.gaps: list[ckpt.Gap] = []
        self.windows: WindowWriter | None = None  # made when planned
        self.in_flight: deque[_Ended] = deque()  # ended windows not committed yet (oldest first)
        self.saving: deque[_Saving] = deque()  # the oldest of those: written, checkpoint being saved
        self._saver: ThreadPoolExecutor | None = None
        self.window_rows = 0
        self.buffered_bytes = 0
        self.dirty = False
        self.steps = 0
        self.steps_since_commit = 0
        self.last_commit = time.monotonic()
        self.blocked = False  # a commit failed for lack of space: retry before reading more
        self.aged_any = False
        self.ignored_logged = False
        self.completed: dict[Path, float] = {}  # data files with a .done -> .done mtime
        self.known_since: dict[Path, float] = {}  # the same files -> when the daemon could first read them
        self.waits_for: str | None = None  # what planning last waited for (logged when it changes)
        self.done_info: dict[Path, tuple[int, int | None, int | None]] = {}  # size, .done times
        self.processed: set[Path] = set()
        self.planned_files: set[Path] = set()
        self.planned_kinds: set[tuple[Path, str]] = set()  # (directory, file kind) of planned streams
        self.reported: set[Path] = set()
        self.policy: AgingPolicy | None = None
        self.layout: Layout = "parquet"  # of the window directories, once planned
        self.context: Context | None = None
        self.framework: ExperimentalConfig | None = None
        # the torch_npu clock planned on before profiler_info.json existed (None: its own), and whether
        # that file has been compared with it since
        self.assumed_syscnt: bool | None = None
        self.assumption_checked = False
        self.closing_waits_logged = False
        self.timelines: deque[tuple[int, list[tuple[Path, int]]]] | None = None  # see _age_timelines
        self.timeline_bytes = 0
        self._resume = ckpt.load(self.checkpoint_path)
        window = -1 if self._resume is None else self._resume.window
        dropped = ckpt.drop_uncommitted(self.out, window)
        if self._resume is not None:
            self.window, self.gaps = self._resume.window, list(self._resume.gaps)
            self.snapshot, self.finished = self._resume.snapshot, self._resume.finished
        self.log.info(events.DIR_DISCOVERED, resumed_window=window, dropped_files=len(dropped))

    # -- planning -------------------------------------------------------------------------------

    def update(self, profile: discovery.Profile) -> None:
        """Take the latest discovery of the collection: plan, re-plan, or tell the feeds to poll."""
        self.profile = profile
        vanished = self._scan_completed(profile)
        if vanished:
            self._vanished(vanished)
        if self.finished or self.failed:
            return
        if self.pipeline is None:
            if self._resume is not None and self._resume.snapshot:
                self._plan(profile, self._resume)
            else:
                waits_for = _planning_waits_for(profile)
                if waits_for is None:
                    self._plan(profile, None)
                elif waits_for != self.waits_for:
                    self.log.info(events.PLANNING_WAITS, waits_for=waits_for)
                self.waits_for = waits_for
            if self.pipeline is None:
                return
        if self.unconfirmed and profile.profiler_info is not None:
            self._check_assumption(profile)
            if self.lost is not None:
                return
        if self._grew(profile):
            if self.aged_any or self.gaps:
                if not self.ignored_logged:
                    new = sorted(_stream_keys(profile, at_stop=False) - self.planned_keys)
                    self.log.warning(
                        events.REPLANNED, done=False, new_streams=new, reason="raw data already aged"
                    )
                    self.ignored_logged = True
            else:
                self._start_over(profile)
        complete = _complete(profile)
        if complete and self.unconfirmed and not self.closing_waits_logged:
            self.log.info(
                events.PLANNING_WAITS,
                waits_for="profiler_info.json, to confirm the clock before the last rows",
            )
            self.closing_waits_logged = True
        self.follow.closing = complete and not self.unconfirmed  # the last rows wait for the check
        self.follow.poll()

    @property
    def unconfirmed(self) -> bool:
        """The pipeline runs on an assumed framework clock that profiler_info.json has not checked."""
        return self.assumed_syscnt is not None and not self.assumption_checked

    def _grew(self, profile: discovery.Profile) -> bool:
        stopped = _stream_keys(profile) - _stream_keys(profile, at_stop=False) - self.planned_keys
        if stopped - self.left_out:
            self.log.warning(
                events.REPLANNED,
                done=False,
                new_streams=sorted(stopped - self.left_out),
                reason="written when profiling stopped; a collection followed live leaves them out",
            )
            self.left_out |= stopped
        new = _stream_keys(profile, at_stop=False) - self.planned_keys
        return bool(new) or _side_bytes(profile) != self.side_bytes

    def _plan(self, profile: discovery.Profile, resume: ckpt.Checkpoint | None) -> None:
        keys = _stream_keys(profile) if resume is None else set(resume.streams)
        planned = self._framework_basis(_restricted(profile, keys), resume)
        positions = None if resume is None else Pipeline.feed_positions(resume.snapshot)
        self.planner = Planner(
            planned,
            on_invalid=self.config.on_invalid,
            chunk_bytes=self.config.chunk_bytes,
            advance_bytes=self.config.advance_bytes,
            positions=positions,
            follow=self.follow,
        )
        self._plan_layout(planned)
        self.windows = self._window_writer()  # forked before the pipeline maps any raw file
        # the canonical tables for the Parquet parts, and the streams the layout's outputs read
        pipeline, wanted = self.planner.pipeline(
            TABLE_NAMES if self.context is None else (*TABLE_NAMES, *OUTPUT_STREAMS)
        )
        if resume is not None:
            try:
                pipeline.restore(resume.snapshot, unpack=ckpt.decompress_state)
            except Exception as err:  # whatever an operator state fails with: the checkpoint is unusable
                msg = (
                    f"cannot restore the pipeline from the checkpoint {self.checkpoint_path}: {err}; move it"
                    " away to start this collection over"
                )
                raise ckpt.CheckpointError(msg) from err
        self.pipeline, self.wanted = pipeline, _held(wanted)
        self.planned_keys = keys
        self.side_bytes = _side_bytes(profile) if resume is None else resume.side_bytes
        self._resume = None
        self._frontier()
        self.reported |= self.processed  # reported by the run that committed the checkpoint
        if positions is not None:
            lost = self._aged_while_down(positions, profile)
            if lost:
                self._record_gaps(lost)
        self.log.info(events.DIR_DISCOVERED, planned=True, streams=len(keys), tables=len(wanted))

    def _framework_basis(
        self, profile: discovery.Profile, resume: ckpt.Checkpoint | None
    ) -> discovery.Profile:
        """``profile`` with the profiler_info the pipeline plans on: its own, or before it exists (or
        when a resumed checkpoint assumed another clock) the assumed one (module docstring)."""
        kept = None if resume is None else resume.assumed_syscnt
        self.assumed_syscnt, self.assumption_checked = None, False
        if profile.framework is None or (profile.profiler_info is not None and kept is None):
            return profile
        if profile.profiler_info is not None and kept is not None and _clock_holds(profile, kept):
            self.log.info(events.FRAMEWORK_CLOCK, confirmed=True, syscnt_enable=kept)
            return profile
        assumed = _assumed_info(profile, kept)
        if assumed is None or assumed.start_info is None:
            return profile  # (a checkpoint planned on profiler_info.json, which is gone: planning says so)
        self.assumed_syscnt = assumed.start_info.syscnt_enable
        self.log.info(events.FRAMEWORK_CLOCK, assumed=True, syscnt_enable=self.assumed_syscnt)
        return replace(profile, profiler_info=assumed)

    def _check_assumption(self, profile: discovery.Profile) -> None:
        """profiler_info.json came: go on if it gives the clock assumed, else start over while the raw
        data is all there (module docstring)."""
        assert self.assumed_syscnt is not None
        self.assumption_checked = True
        syscnt_enable = self.assumed_syscnt
        if _clock_holds(profile, syscnt_enable):
            l2_data = self.context is not None and self.context.l2_cache
            chosen = (Collected.of(c, l2_data=l2_data) for c in (framework_config(profile), self.framework))
            if self.layout != "torch_npu" or len(set(chosen)) == 1:
                self.log.info(events.FRAMEWORK_CLOCK, confirmed=True, syscnt_enable=syscnt_enable)
                self.assumed_syscnt = None
                return
            # its level leaves some files out: a new runner resumes with it from the last commit
            self.lost, self.lost_event, self.lost_level = (
                "profiler_info.json confirms the assumed clock; its level decides the files",
                events.FRAMEWORK_CLOCK,
                logging.INFO,
            )
            return
        if not (self.aged_any or self.gaps or _aged_since_start(profile)):
            self.log.warning(
                events.FRAMEWORK_CLOCK, confirmed=False, syscnt_enable=syscnt_enable, action="start over"
            )
            self._start_over(profile)
            return
        self.log.error(
            events.FRAMEWORK_CLOCK,
            confirmed=False,
            syscnt_enable=syscnt_enable,
            action="kept: raw data already aged, the framework times follow the assumed clock",
        )

    def _plan_layout(self, profile: discovery.Profile) -> None:
        """The layout of the window directories and what its outputs need to know."""
        layout = self.config.layout
        if layout == "auto":
            layout = "torch_npu" if profile.framework is not None else "msprof"
        self.layout = layout
        if layout != "parquet":
            out_dir = self.out / OUTPUT_DIRS[layout]
            self.context = layout_context(profile, out_dir, None, csv_slice_rows=self.config.csv_slice_rows)
            # before profiler_info.json, every file of the layout (as an export without one writes)
            self.framework = None if self.assumed_syscnt is not None else framework_config(profile)

    def _window_writer(self) -> WindowWriter:
        target = WindowTarget(self.parquet, self.layout, self.context, self.framework, self.config.limits())
        if self.config.fork_writer and can_fork():
            return ForkedWindows(target, self.config.poll_interval_s)
        return InlineWindows(target)

    def close(self) -> None:
        """Stop the window writer: what it has not written is dropped (the next run writes it again).
        A checkpoint being saved is waited for, so that none lands after the runner is gone."""
        if self._saver is not None:
            self._saver.shutdown(wait=True)
            self._saver = None
        self.saving.clear()
        if self.windows is not None:
            self.windows.close(abandon=bool(self.in_flight))
            self.windows = None
        self.in_flight.clear()

    def _start_over(self, profile: discovery.Profile) -> None:
        """New streams or grown dictionaries before anything was aged: re-plan from the start."""
        new = sorted(_stream_keys(profile, at_stop=False) - self.planned_keys)
        self.close()
        self.checkpoint_path.unlink(missing_ok=True)
        ckpt.fsync_dir(self.out) if self.out.exists() else None
        ckpt.drop_uncommitted(self.out, -1)
        self.window, self.snapshot, self.window_rows, self.buffered_bytes = -1, b"", 0, 0
        self.timelines = None
        self.reported.clear()
        self.pipeline = None
        self.follow = Follow()
        self.log.warning(events.REPLANNED, done=True, new_streams=new, side_bytes=_side_bytes(profile))
        self._plan(profile, None)

    # -- processing -----------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.pipeline is not None and not (self.finished or self.failed or self.blocked or self.lost)

    def pump(self, until: float) -> bool:
        """Step the pipeline until it waits for data, ``until`` passes or a window is full.

        Returns True when more is ready to be read now.
        """
        pipeline = self.pipeline
        if pipeline is None or not self.active:
            return False
        try:
            more = self._step_until(pipeline, until)
        except DecodeError as err:
            self.failed = True
            self.log.error(events.DECODE_ERROR, error=str(err), path=str(err.path), offset=err.offset)
            return False
        except FileNotFoundError as err:
            self.lost = str(err)
            return False
        except WorkerError as err:
            return self._writer_lost(err)
        if self.profile is not None and not self.profile.path.is_dir():
            self.lost = f"{self.profile.path} vanished while it was read"
            return False
        return more

    def _step_until(self, pipeline: Pipeline, until: float) -> bool:
        """The stepping loop of :meth:`pump` (True when more is ready to be read now)."""
        faults = self.config.faults
        while not pipeline.finished and time.monotonic() < until and not self.due():
            emits = pipeline.step()
            self.steps += 1
            self.steps_since_commit += 1
            if faults.kill_after_steps is not None and self.steps >= faults.kill_after_steps:
                _die()
            # a stalled step pulled nothing but may still emit: it advances what was read before
            self.dirty = self.dirty or bool(emits) or not pipeline.stalled
            for name, batch in emits:
                if name in pipeline.feeds:
                    self.metrics.count(name.partition("@")[0], batch.num_rows)
                elif name in self.wanted and self.windows is not None:
                    self.windows.send(name, batch)
                    self.window_rows += batch.num_rows
                    self.buffered_bytes += batch.nbytes
            if pipeline.stalled:
                return False
        return not pipeline.finished

    def due(self) -> bool:
        """The window should end now."""
        if not self.dirty or self.pipeline is None:
            return False
        steps = self.config.window_steps
        return (
            self.pipeline.finished
            or self.buffered_bytes >= self.config.window_bytes
            or (steps is not None and self.steps_since_commit >= steps)
            or time.monotonic() - self.last_commit >= self.config.window_s
        )

    @property
    def caught_up(self) -> bool:
        """Everything written so far is read (or can never be: not planned yet, finished, failed)."""
        if self.pipeline is None or self.finished or self.failed:
            return True
        return self.pipeline.stalled and not self.blocked

    # -- committing -----------------------------------------------------------------------------

    def commit(self) -> bool:
        """End the window: the writer writes it, and the window's checkpoint follows once it has
        (:meth:`settle`). Waits while :data:`WINDOWS_IN_FLIGHT` are not written yet.

        Returns False (and ``blocked``) while the output disk is full.
        """
        pipeline = self.pipeline
        if pipeline is None or self.windows is None or not self.dirty or self.failed:
            return True
        while len(self.in_flight) >= WINDOWS_IN_FLIGHT:
            if not self.settle(self.config.poll_interval_s):
                return False
        window = self.window + 1 + len(self.in_flight)
        started = time.monotonic()
        snapshot = pipeline.snapshot(pack=ckpt.compress_state)  # up to three windows in flight hold one
        ended = _Ended(window, snapshot, pipeline.finished, self.window_rows, started)
        try:
            self.windows.end(window)
        except WorkerError as err:
            return self._writer_lost(err)
        self.in_flight.append(ended)
        self.window_rows, self.buffered_bytes, self.dirty, self.steps_since_commit = 0, 0, False, 0
        self.last_commit = time.monotonic()
        return self.settle()

    def settle(self, timeout: float = 0.0) -> bool:
        """Checkpoint the windows the writer has written and commit those whose checkpoint is saved
        (waiting up to ``timeout`` s for one of the two).

        Returns False while the writer finds the output disk full (it retries each poll); the runner
        is then ``blocked`` and reads nothing more.
        """
        if not self.in_flight or self.windows is None:
            return True
        try:
            results = self.windows.results(0.0 if self.saving else timeout)
        except WorkerError as err:
            return self._writer_lost(err)
        for result in results:
            if isinstance(result, Blocked):
                self.blocked = True
                self.log.warning(
                    events.BACKPRESSURE,
                    reason="no space left on the output disk",
                    window=result.window,
                    retry_in_s=self.config.poll_interval_s,
                    error=result.error,
                )
            else:
                self._checkpoint(self.in_flight[len(self.saving)], result.paths)
        self._commit_saved(timeout)
        return not self.blocked

    def _commit_saved(self, timeout: float | None) -> None:
        """Commit the windows whose checkpoint is saved, waiting up to ``timeout`` s (None: as long as
        it takes) for the oldest."""
        if self.saving:
            wait_for([self.saving[0].saved], timeout)
        while self.saving and self.saving[0].saved.done():
            done = self.saving.popleft()
            done.saved.result()  # a failed save fails here, in the collector's thread
            self._committed(done.ended, done.paths)
            self.in_flight.popleft()  # after: a window is in flight until it is committed

    def _writer_lost(self, err: WorkerError) -> bool:
        """The window writer died: the runner cannot go on (the collector replaces it). False."""
        self.lost, self.lost_event = str(err), events.WINDOW_WRITER_LOST
        return False

    def flush(self, give_up: Callable[[], bool]) -> bool:
        """Wait until every ended window is written and checkpointed; False if ``give_up()`` says
        to stop waiting for a full disk."""
        while self.in_flight and self.lost is None:
            if not self.settle(self.config.poll_interval_s) and give_up():
                return False
        return not self.in_flight

    def _checkpoint(self, ended: _Ended, paths: list[Path]) -> None:
        """Window ``ended`` is written: save its checkpoint in the background (one save at a time,
        in window order). Writing and fsyncing tens of MB took the pipeline 0.1-0.2 s a window."""
        if self._saver is None:
            self._saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        checkpoint = self._checkpoint_of(ended.window, ended.snapshot, finished=ended.finished)

        def save() -> None:
            self._mid_commit(ended.window)
            self._write_checkpoint(checkpoint)

        self.blocked = False
        self.saving.append(_Saving(ended, paths, self._saver.submit(save)))

    def _committed(self, ended: _Ended, paths: list[Path]) -> None:
        """Window ``ended`` and its checkpoint are durable: make it the committed one (books, logs)."""
        window = ended.window
        self.window, self.snapshot, self.finished = window, ended.snapshot, ended.finished
        self.metrics.committed(sum(_size(p) for p in paths))
        self.log.info(
            events.WINDOW_COMMITTED,
            window=window,
            rows=ended.rows,
            files=len(paths),
            finished=self.finished,
            seconds=round(time.monotonic() - ended.started, 4),
        )
        self._age_timelines(window, paths)
        self._frontier()
        self._report_processed()
        if self.config.faults.kill_after_commit == window:
            _die()

    def _age_timelines(self, window: int, written: list[Path]) -> None:
        """Delete the oldest windows' timeline files while their total is over ``timeline_limit``.

        The books (windows with timeline files, oldest first, and their total) are read from disk once,
        then kept up to date, so a commit costs the same after a week as after a minute.
        """
        if self.timelines is None:
            self.timelines = deque(self._scan_timelines(window))  # holds this window's files already
            self.timeline_bytes = sum(size for _, files in self.timelines for _, size in files)
        else:
            files = [(p, _size(p)) for p in written if is_timeline(p.name)]
            if files:
                self.timelines.append((window, files))
                self.timeline_bytes += sum(size for _, size in files)
        limit = self.config.timeline_limit_mb * MB
        while self.timeline_bytes > limit and len(self.timelines) > 1:
            aged, files = self.timelines.popleft()
            for path, _bytes in files:
                path.unlink(missing_ok=True)
            freed = sum(size for _, size in files)
            self.timeline_bytes -= freed
            self.log.info(
                events.AGED,
                output=True,
                window=aged,
                files=[p.name for p, _ in files],
                bytes=freed,
                stored_bytes=self.timeline_bytes,
            )

    def _scan_timelines(self, window: int) -> list[tuple[int, list[tuple[Path, int]]]]:
        """The committed windows (up to ``window``) that hold timeline files, with their sizes, oldest
        first. The writer may have renamed later windows' directories into place already: they come
        into the books when they are committed."""
        if self.context is None or not self.context.out_dir.is_dir():
            return []
        found = []
        for path in self.context.out_dir.iterdir():
            match = ckpt.WINDOW_DIR.match(path.name)
            if match is None or int(match.group(1)) > window:
                continue
            files = [(p, _size(p)) for p in sorted(path.iterdir()) if is_timeline(p.name)]
            if files:
                found.append((int(match.group(1)), files))
        return sorted(found)

    def _mid_commit(self, window: int) -> None:
        faults = self.config.faults
        if faults.sleep_mid_commit:
            time.sleep(faults.sleep_mid_commit)
        if faults.kill_mid_commit == window:
            _die()

    def _checkpoint_of(self, window: int, snapshot: bytes, *, finished: bool) -> ckpt.Checkpoint:
        return ckpt.Checkpoint(
            state_format=ckpt.STATE_FORMAT,
            window=window,
            snapshot=snapshot,
            streams=sorted(self.planned_keys),
            side_bytes=self.side_bytes,
            finished=finished,
            gaps=list(self.gaps),
            assumed_syscnt=self.assumed_syscnt,
        )

    def _write_checkpoint(self, checkpoint: ckpt.Checkpoint) -> None:
        ckpt.save(self.checkpoint_path, checkpoint)
        if checkpoint.gaps:
            ckpt.write_atomic(self.out / GAPS_NAME, msgspec.json.format(msgspec.json.encode(checkpoint.gaps)))

    # -- what was read: slice progress and aging --------------------------------------------------

    def _scan_completed(self, profile: discovery.Profile) -> list[Path]:
        """Note data and control files with a ``.done`` not seen before (and tell the aging policy).

        Returns the noted files that are gone from their directory (deleted by someone else).
        """
        fresh: list[tuple[float, Path]] = []
        listed: dict[Path, set[str]] = {}
        for directory in self._raw_dirs(profile):
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            names = listed[directory] = {e.name for e in entries}
            for entry in entries:
                if entry.name.endswith(".done") or f"{entry.name}.done" not in names:
                    continue
                path = Path(entry.path)
                if path not in self.completed:
                    mtime = _mtime(done_path(path))
                    if mtime is not None:
                        fresh.append((mtime, path))
        for mtime, path in sorted(fresh):
            self.completed[path] = mtime
            self.known_since[path] = max(mtime, time.time())  # one older than the run: from its start
            self.done_info[path] = (_size(path), *_done_times(path))
            if self.policy is not None:
                self.policy.add(path, self.done_info[path][0], _size(done_path(path)))
        return [p for p in self.completed if p.parent in listed and p.name not in listed[p.parent]]

    def _vanished(self, paths: list[Path]) -> None:
        """Slices deleted by someone else (the profiler's aging): a gap unless a commit read past them.

        Before planning every slice counts as unread. Only the committed frontier counts: a reader
        that meets a vanished slice skips it, so its position cannot tell read from skipped.
        """
        if self.policy is not None:
            self.policy.forget(set(paths))
        gaps = []
        for path in sorted(paths):
            self.completed.pop(path)
            self.known_since.pop(path)
            size, start, end = self.done_info.pop(path)
            if self.planner is None or (self._planned(path) and path not in self.processed):
                gaps.append(ckpt.Gap(path.name, size, start, end, reason="aged_unread"))
        if gaps:
            self._record_gaps(gaps)

    def _raw_dirs(self, profile: discovery.Profile) -> list[Path]:
        """The PROF dir's host and device dirs and their ``data`` dirs (FRAMEWORK is not the collector's)."""
        dirs = {d.path for d in (profile.host, *profile.devices) if d is not None}
        dirs |= {s.data_dir for d in (profile.host, *profile.devices) if d is not None for s in d.streams}
        return sorted(dirs)

    def _frontier(self) -> None:
        """From the committed snapshot: the raw files every planned stream has read past."""
        positions = Pipeline.feed_positions(self.snapshot) if self.snapshot else {}
        if self.profile is not None:
            self.planned_files, self.processed = self._read_past(positions, self.profile)
            self.planned_kinds |= {(p.parent, discovery.file_kind(p.name)) for p in self.planned_files}

    def _planned(self, path: Path) -> bool:
        """``path`` is a slice of a planned stream, also one that appeared after the last commit."""
        return (
            path in self.planned_files or (path.parent, discovery.file_kind(path.name)) in self.planned_kinds
        )

    def _read_now(self, profile: discovery.Profile) -> set[Path]:
        """Files read past by the last commit or by the running pipeline (not committed yet)."""
        if self.pipeline is None:
            return self.processed
        return self.processed | self._read_past(self._live_positions(), profile)[1]

    def _live_positions(self) -> dict[str, Any]:
        assert self.pipeline is not None
        live = {name: feed.position() for name, feed in self.pipeline.feeds.items()}
        return msgspec.to_builtins(live, builtin_types=(bytes,))  # type: ignore[no-any-return]

    def lag_s(self, now: float) -> float:
        """How long (at wall time ``now``) the oldest complete slice the pipeline has not read to its
        end has waited, since its ``.done`` was written or, for one older than this run, since the
        daemon found it (0: none waits). A slice the profiler still writes is not counted: its data is
        as new as the reading can be. Before planning every complete file waits."""
        if self.profile is None or self.finished or self.failed:
            return 0.0
        if self.pipeline is None:
            return max(0.0, now - min(self.known_since.values())) if self.known_since else 0.0
        done_sizes = {path: info[0] for path, info in self.done_info.items()}
        planned, read = self._read_past(self._live_positions(), self.profile, done_sizes)
        waiting = [since for path, since in self.known_since.items() if path in planned and path not in read]
        return max(0.0, now - min(waiting)) if waiting else 0.0

    def _read_past(
        self, positions: dict[str, Any], profile: discovery.Profile, sizes: dict[Path, int] | None = None
    ) -> tuple[set[Path], set[Path]]:
        """The planned streams' files in ``profile``, and those the feeds at ``positions`` have read past
        (or, with the ``sizes`` of complete files, read to their end)."""
        planned: set[Path] = set()
        past: set[Path] = set()
        if self.planner is None:
            return planned, past
        current = {stream_key(s): s for d in _data_dirs(profile) for s in d.streams}
        for name, streams in self.planner.feed_streams().items():
            files = [
                [f.path for f in current[k].files] if (k := stream_key(s)) in current else [] for s in streams
            ]
            planned.update(p for group in files for p in group)
            for index, (position, group) in enumerate(_readings(positions.get(name), len(streams))):
                past.update(_read_past(position, files[index : index + 1] if group else files, sizes or {}))
        return planned, past

    def _aged_while_down(self, positions: dict[str, Any], profile: discovery.Profile) -> list[ckpt.Gap]:
        """Slices the resumed readings still need that are gone (see the module docstring)."""
        assert self.planner is not None
        known = {gap.file for gap in self.gaps}
        current = {stream_key(s): s for d in _data_dirs(profile) for s in d.streams}
        gaps = []
        for name, streams in self.planner.feed_streams().items():
            readings = list(_readings(positions.get(name), len(streams)))
            for number, planned in enumerate(streams):
                stream = current.get(stream_key(planned))
                if stream is None or not stream.files:
                    continue
                first = _first_needed(readings, number)
                if first is None:
                    continue
                template = stream.files[0].name
                for lost in range(first, min(f.slice for f in stream.files)):
                    file = _SLICE_NUMBER.sub(f"slice_{lost}", template)
                    if file not in known:
                        gaps.append(ckpt.Gap(file, None, None, None, reason="aged_while_down"))
        return gaps

    def _report_processed(self) -> None:
        now = time.time()
        for path in sorted(self.processed & set(self.completed) - self.reported):
            self.reported.add(path)
            self.log.info(
                events.SLICE_PROCESSED,
                file=path.name,
                directory=path.parent.name,
                done_to_commit_s=round(now - self.completed[path], 4),
            )

    def _slice_info(self, path: Path) -> tuple[int, int | None, int | None]:
        """A slice's size and ``.done`` times, as first seen."""
        if path in self.done_info:
            return self.done_info[path]
        return (_size(path), *_done_times(path))

    def _record_gaps(self, gaps: list[ckpt.Gap]) -> None:
        """Make lost raw data durable (checkpoint and ``gaps.json``) and log it. Checkpoints being
        saved are committed first, so that this one, of the newest commit, is the last saved."""
        while self.saving:
            self._commit_saved(None)
        self.gaps += gaps
        self._write_checkpoint(self._checkpoint_of(self.window, self.snapshot, finished=self.finished))
        for gap in gaps:
            self.log.warning(
                events.GAP, file=gap.file, bytes=gap.bytes, start=gap.start, end=gap.end, reason=gap.reason
            )
        self.metrics.add_gaps(len(gaps))

    def age(self, free_bytes: int) -> None:
        """Apply the storage limit to the watched collection (protecting unread slices)."""
        if self.policy is None:
            return
        read: set[Path] | None = None

        def protected(path: Path) -> bool:  # not read yet (everything before the collection is planned)
            nonlocal read
            if self.planner is None or self.profile is None:
                return True
            if not self._planned(path):
                return False
            if read is None:
                read = self._read_now(self.profile)
            return path not in read

        self.policy.protect(protected)
        decision = self.policy.to_delete(free_bytes)
        if not decision:
            return
        if not all(path in self.processed for path in decision.paths if self._planned(path)):
            # what the pipeline read but did not commit yet must be durable first; should the
            # output disk be full, the rows stay with the writer until it is not (a crash then
            # loses them)
            self.commit()
            self.flush(give_up=lambda: self.blocked)
        if decision.forced:
            gaps = [
                ckpt.Gap(f.path.name, *self._slice_info(f.path), reason="storage_limit")
                for f in decision.forced
            ]
            self._record_gaps(gaps)  # before deleting
        for victim in decision.paths:
            victim.unlink(missing_ok=True)
            self.completed.pop(victim, None)
            self.known_since.pop(victim, None)
            self.done_info.pop(victim, None)
        self.aged_any = True
        self.log.info(
            events.AGED,
            files=[f.path.name for f in decision.aged],
            forced=[f.path.name for f in decision.forced],
            bytes=decision.bytes,
            stored_bytes=self.policy.total_bytes,
        )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _readings(position: Any, count: int) -> Iterator[tuple[Any, bool]]:
    """A feed position as (reading position, one stream only?) pairs.

    A plain feed's position is ``[stream index, offsets]`` over all its streams; a merged one's
    (unaging and aging host streams) is one ``[[index, offsets], pending]`` per stream.
    """
    if position is None:
        return
    if count > 1 and isinstance(position[0], list):
        for reading, _pending in position:
            yield reading, True
        return
    yield position, False


def _first_needed(readings: list[tuple[Any, bool]], number: int) -> int | None:
    """The lowest slice number the resumed reading of a feed's stream ``number`` still reads (None: done).

    A merged feed has one reading per stream, a plain one a reading over all its streams.
    """
    if not readings:
        return 0
    (index, offsets), single = readings[number] if readings[0][1] else readings[0]
    mine = 0 if single else number
    if mine < index:
        return None
    if mine > index or offsets is None or offsets["file"] is None:
        return 0
    return int(offsets["slice"]) + (1 if offsets["offset"] else 0)


def _read_past(position: Any, files: list[list[Path]], sizes: dict[Path, int]) -> Iterator[Path]:
    """Files of ``files`` (per stream, in order) that the reading at ``position`` is past, and the one
    it stands in if ``sizes`` gives that file's size and the reading is at its end."""
    index, offsets = position
    for number, group in enumerate(files):
        if number < index:
            yield from group
        elif number == index and offsets is not None:
            current = offsets["file"]
            names = [p.name for p in group]
            stop = names.index(current) if current in names else len(group)
            yield from group[:stop]
            if stop < len(group) and offsets["offset"] >= sizes.get(group[stop], offsets["offset"] + 1):
                yield group[stop]


class Collector:
    """The daemon: discovery, the runners, the lock, signals, the status endpoint (module docstring)."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.runners: dict[str, CollectionRunner] = {}
        self.log = events.get_logger(component="daemon", watch_dir=str(config.watch_dir))
        self.stop = threading.Event()
        self._lock_file: IO[str] | None = None
        self._missing_logged = False
        self._lagging = False

    # -- lifecycle -----------------------------------------------------------------------------

    def _lock(self) -> None:
        self.config.output.mkdir(parents=True, exist_ok=True)
        path = self.config.output / LOCK_NAME
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            msg = f"another profstream collect (pid {holder}) is writing to {self.config.output}"
            raise LockedError(msg) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock_file = handle

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.log.info("signal", signal=signal.Signals(signum).name, action="drain, commit, exit")
        self.stop.set()

    def run(self) -> int:
        """Run until stopped (or, with ``once``, until everything present is processed).

        Returns the exit code: 0, or 1 when a collection failed to decode.
        """
        self._lock()
        server = None
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self.config.status_port is not None:
                server = StatusServer(self.metrics, self.config.status_port)
                self.log.info("status_endpoint", url=f"http://127.0.0.1:{server.port}/metrics")
            self._loop()
            for runner in self.runners.values():
                runner.commit()
                runner.flush(give_up=self.stop.is_set)
        finally:
            for runner in self.runners.values():
                runner.close()
            if server is not None:
                server.close()
            if self._lock_file is not None:
                self._lock_file.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 1 if any(r.failed for r in self.runners.values()) else 0

    def _loop(self) -> None:
        while not self.stop.is_set():
            profiles = self._discover()
            busy = False
            for key, profile in profiles.items():
                runner = self.runners[key]
                runner.update(profile)
                runner.settle()
                busy |= runner.pump(time.monotonic() + self.config.poll_interval_s)
                if runner.lost is not None:
                    self.log.log(
                        runner.lost_level,
                        runner.lost_event,
                        collection=key,
                        error=runner.lost,
                        action="resume from the last commit",
                    )
                    runner.close()
                    self.runners[key] = self._runner(key)
                    continue
                if runner.due():
                    self._commit(runner)
                free = self._free_bytes()
                if free is not None:
                    runner.age(free)
            self._measure_lag(profiles)
            if self.config.once and all(self.runners[k].caught_up for k in profiles):
                return
            if not busy:
                self.stop.wait(self.config.poll_interval_s)

    def _commit(self, runner: CollectionRunner) -> None:
        if not runner.commit():
            self.stop.wait(self.config.poll_interval_s)  # the disk is full: pause before retrying

    def _discover(self) -> dict[str, discovery.Profile]:
        """The collections under the watch dir now; none while it is missing."""
        try:
            found = discovery.Discovery(self.config.watch_dir).profiles()
        except (InputPathError, FileNotFoundError) as err:
            if not self._missing_logged:
                self.log.warning(events.WATCH_DIR_MISSING, error=str(err))
                self._missing_logged = True
            return {}
        except ProfstreamError as err:  # a control file caught mid-write: try again next poll
            self.log.debug("discovery_retry", error=str(err))
            return {}
        self._missing_logged = False
        root = self.config.watch_dir.resolve()
        profiles = {}
        for profile in found:
            key = str(profile.path.relative_to(root)) if profile.path != root else profile.path.name
            if key not in self.runners:
                self.runners[key] = self._runner(key)
                self.log.info(events.DIR_DISCOVERED, collection=key, path=str(profile.path))
            profiles[key] = profile
        return profiles

    def _runner(self, key: str) -> CollectionRunner:
        """A runner for collection ``key``, resuming from its checkpoint if it has one."""
        runner = CollectionRunner(key, self.config, self.metrics)
        if self.config.storage_limit_mb:
            runner.policy = AgingPolicy(self.config.storage_limit_mb * MB, self._volume_bytes())
        return runner

    def _volume_bytes(self) -> int:
        """Size of the watched volume (the nearest existing parent's while the watch dir is missing)."""
        path = self.config.watch_dir.absolute()
        while not path.exists():
            path = path.parent
        return shutil.disk_usage(path).total

    def _free_bytes(self) -> int | None:
        """Free space of the watched volume; None while the watch dir is missing."""
        try:
            return shutil.disk_usage(self.config.watch_dir).free
        except FileNotFoundError:
            return None

    def _measure_lag(self, profiles: dict[str, discovery.Profile]) -> None:
        now = time.time()  # .done files carry wall-clock times
        lag = max((self.runners[k].lag_s(now) for k in profiles), default=0.0)
        self.metrics.set(lag_s=lag)
        lagging = lag > max(10 * self.config.poll_interval_s, self.config.window_s)
        if lagging and not self._lagging:
            self.log.warning(events.BACKPRESSURE, reason="reading behind the writer", lag_s=round(lag, 3))
        self._lagging = lagging
