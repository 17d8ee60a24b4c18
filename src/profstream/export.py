"""``export``: pipelines per collection, their tables routed to a layout's outputs.

What ``msprof.py export timeline|summary`` does (msprof_outputs.md §1.1), as a stream: every output of
the layout says which canonical tables it reads, a pipeline produces them, and each batch goes to the
outputs that read its table. Files are written under temporary names and renamed when the export
succeeds; on any error every output is aborted, so no partial file is left looking complete.

Outputs whose pipelines share little (in the msprof layout, GE memory and step trace beside the task
tables; in torch_npu's, PTA memory) are split into groups (``plan.split_work``, by the raw bytes each
group's feeds and operators take), up to ``processes`` (``[export]``, ``--processes``; 0: one per
usable core). The costliest group's pipeline runs here and sends its batches to a forked writer that
renders and writes that group's outputs (a :class:`~profstream.workers.BatchPipe`), but for every
second output that renders only at finish, which this process renders once its pipeline ends. The
first stage of that pipeline (task pairing, API events and step tags, ``Planner.front``) runs in a worker
too and sends its streams here; its last stage (the operators only the writer's outputs read: per-op
and per-step sums, statistics, row merges, ``Planner.last_stage``) runs in the writer, on the streams
and watermarks this process sends, taken in the order sent. With ``processes`` 1 both run here as
stages of their own, so the stages read the same batches and one process writes the same rows as
several (a timeline's events may come in another order: the pipeline emits them as its schedule goes,
and that depends on the tables each process makes). Each other
group runs in a forked worker of its own (:mod:`profstream.workers`), at a lower CPU priority: this
group's processes are the longest path. Every part renders its files under temporary names when its
pipeline ends, and all rename them together. With ``processes`` 1 everything runs here.

``--model-id/--iteration-id`` (msprof_outputs.md §4b): the iterations are read first (a small
pipeline of the step tables); the window is from the end of the last iteration (of any model) that
ended before the first selected one started, or the start of the data, to the end of the last
selected iteration. Rows whose time falls in the window are exported; the statistics are recomputed
from the windowed tasks, API calls and communication ops. The msprof step_trace summary keeps every
iteration, as msprof's does (an output's ``windowed``). Model id 4294967295 selects framework steps
(torch_npu's ProfilerStep, else the 60000/60001 step markers). HBM samples are windowed as the memory
samples are, so hbm csv averages the window (msprof's Python averages the whole run whatever the
iteration; a choice for one consistent window).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events as log_events
from profstream.api import open_profile
from profstream.codecs._base import OnInvalid
from profstream.config import ExportSettings
from profstream.engine import discovery
from profstream.engine.layouts import (
    OUTPUT_DIRS,
    Context,
    Format,
    Kind,
    Layout,
    Limits,
    Output,
    TimelineOutput,
    outputs,
)
from profstream.engine.layouts.msprof import write_readme
from profstream.engine.layouts.timeline import logic_streams
from profstream.engine.metadata import ExperimentalConfig
from profstream.engine.operators.statistics import ApiStatistic, CommStatistic, OpStatistic
from profstream.engine.operators.task_rows import is_op_row
from profstream.engine.plan import Planner, split_work
from profstream.engine.runtime import (
    ADVANCE_BYTES,
    Feed,
    Operator,
    PipelineError,
    StageFeeds,
    StageMessage,
    stage_messages,
)
from profstream.engine.schema import NO_ID
from profstream.engine.sources import DEFAULT_CHUNK_BYTES
from profstream.errors import InputPathError, ProfstreamError
from profstream.sinks import DropReport
from profstream.sinks._base import remove_temporaries
from profstream.sinks.csv import CSV_LIMIT
from profstream.workers import BatchPipe, PipeReader, Worker, can_fork, send_messages

#: msprof's STEP_EXPORT model id
STEP_MODEL_ID = NO_ID
#: output streams that merge canonical tables, and those tables (task rows, then op rows)
MERGED_FROM = {"task_rows": ("tasks", "comm")}
#: the time column of each table the window filters (statistics are recomputed instead)
TIME_OF = {
    "tasks": "start_ns",
    "task_rows": "start_ns",
    "api": "start_ns",
    "ops": "start_ns",
    "flows": "src_ns",
    "comm": "start_ns",
    "comm_tasks": "start_ns",
    "memory": "alloc_ns",
    "memory_record": "time_ns",
    "npu_mem": "time_ns",
    "npu_module_mem": "time_ns",
    "hbm": "time_ns",
    "aicore_freq": "time_ns",
    "steps": "start_ns",
    "framework_steps": "start_ns",
    "overlap": "start_ns",
}
#: statistics table -> the table it is computed from, under a window
RECOMPUTED = {"op_statistic": "tasks", "api_statistic": "api", "comm_statistic": "comm"}


class IterationError(ProfstreamError, ValueError):
    """``--model-id/--iteration-id`` name iterations the data does not have."""


@dataclass(frozen=True)
class Selection:
    """msprof.py's iteration arguments: both or neither of model and iteration id."""

    model_id: int | None = None
    iteration_id: int | None = None
    iteration_count: int = 1


class FileReport(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    bytes: int


class CollectionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one export of one PROF_XXX collection did."""

    path: str
    output_dir: str
    devices: list[int]
    rows: dict[str, int]  #: rows per canonical table the layout read
    files: list[FileReport]
    window_ns: tuple[int, int] | None
    timeline_dropped: dict[str, int]  #: events left out by timeline_limit, per phase
    timeline_dropped_range_ns: tuple[int, int] | None
    not_decoded: list[FileReport] = msgspec.field(default_factory=list)  #: data files no codec reads


def exported(kind: str) -> str:
    """What an export of ``kind`` writes, as the progress bar and the summary name it."""
    return "timeline and summary" if kind == "both" else kind


class ExportReport(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    layout: str
    seconds: float
    collections: list[CollectionReport]

    def render(self) -> str:
        """The one-screen summary the CLI prints."""
        lines = [f"export {exported(self.kind)} ({self.layout} layout) took {self.seconds:.2f} s"]
        for report in self.collections:
            lines.append(f"{report.path}")
            lines.append(f"  devices: {', '.join(map(str, report.devices)) or 'none'}")
            # only the tables this layout read: a count of 0 must mean none were found
            counts = ", ".join(f"{table} {rows}" for table, rows in sorted(report.rows.items()))
            lines.append(f"  rows: {counts or 'none'}")
            if report.window_ns is not None:
                lines.append(f"  window: {report.window_ns[0]} .. {report.window_ns[1]} ns (host monotonic)")
            lines.append(f"  output: {report.output_dir}")
            for file in report.files:
                path = Path(file.path)
                shown = (
                    path.relative_to(report.output_dir) if path.is_relative_to(report.output_dir) else path
                )
                lines.append(f"    {_human(file.bytes):>10}  {shown}")
            if report.timeline_dropped:
                kinds = ", ".join(f"{n} {ph}" for ph, n in sorted(report.timeline_dropped.items()))
                span = report.timeline_dropped_range_ns
                where = f" from {span[0]} to {span[1]} ns (local)" if span else ""
                lines.append(f"  timeline_limit reached: left out {kinds}{where}")
            if report.not_decoded:
                kinds = ", ".join(
                    f"{kind} ({files} file{'s' if files > 1 else ''}, {_human(size)})"
                    for kind, (files, size) in _by_kind(report.not_decoded).items()
                )
                lines.append(f"  not decoded (no codec, so in no output): {kinds}")
        return "\n".join(lines)


def _by_kind(files: Sequence[FileReport]) -> dict[str, tuple[int, int]]:
    """Per kind of data file (``llc.data``), how many files and bytes, in name order."""
    kinds: dict[str, tuple[int, int]] = {}
    for file in files:
        kind = discovery.file_kind(Path(file.path).name)
        count, size = kinds.get(kind, (0, 0))
        kinds[kind] = (count + 1, size + file.bytes)
    return dict(sorted(kinds.items()))


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


Progress = Callable[[float], None]


@dataclass
class Router:
    """Routes pipeline batches to outputs, filtering by the window and recomputing statistics."""

    outputs: Sequence[Output]
    window: tuple[int, int] | None
    statistics: dict[str, list[Operator]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_table: dict[str, list[Output]] = {}
        for output in self.outputs:
            for table in output.tables:
                self._by_table.setdefault(table, []).append(output)
        for table in self._by_table:  # a table read but empty counts 0 rows
            for counted in MERGED_FROM.get(table, (table,)):
                self.rows.setdefault(counted, 0)

    def route(self, stream: str, batch: pa.RecordBatch) -> None:
        table = stream.partition("@")[0]
        if table not in self._by_table and table not in self.statistics:
            return  # read by outputs in the other process of a shared part (_Part.shared), which counts it
        whole = batch
        if self.window is not None and table in TIME_OF:
            low, high = self.window
            times = batch.column(TIME_OF[table])
            inside = pc.and_(pc.greater_equal(times, low), pc.less_equal(times, high))
            batch = batch.filter(pc.fill_null(inside, True))
        self._count(table, batch)
        if batch.num_rows:
            for op in self.statistics.get(table, ()):
                if stream in op.inputs:  # a device's aggregator takes only its device's batches
                    op.push(stream, batch)
        for output in self._by_table.get(table, ()):
            rows = batch if output.windowed else whole
            if rows.num_rows:
                output.write(table, rows)

    def _count(self, table: str, batch: pa.RecordBatch) -> None:
        """Rows per canonical table; op_summary's merged rows count as the tasks and communication
        ops they are, unless those tables are routed themselves."""
        if table not in MERGED_FROM:
            self.rows[table] = self.rows.get(table, 0) + batch.num_rows
            return
        ops = pc.sum(is_op_row(batch)).as_py() or 0
        for counted, count in zip(MERGED_FROM[table], (batch.num_rows - ops, ops), strict=True):
            if counted not in self._by_table:
                self.rows[counted] = self.rows.get(counted, 0) + count

    def finish_statistics(self) -> None:
        for ops in self.statistics.values():
            for op in ops:
                for stream, batch in op.finish():
                    self.route(stream, batch)


def export(
    path: str | Path,
    *,
    kind: Kind = "both",
    layout: Layout = "msprof",
    output: str | Path | None = None,
    fmt: Format = "csv",
    selection: Selection = Selection(),
    settings: ExportSettings | None = None,
    on_invalid: OnInvalid = "error",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    advance_bytes: int = ADVANCE_BYTES,
    progress: Progress | None = None,
) -> ExportReport:
    """Export every PROF_XXX collection under ``path`` in ``layout``; see the module docstring."""
    started = time.perf_counter()
    settings = settings or ExportSettings()
    log = log_events.get_logger(component="export")
    log.info(log_events.EXPORT_STARTED, path=str(path), kind=kind, layout=layout)
    profile = open_profile(path, on_invalid=on_invalid, chunk_bytes=chunk_bytes)
    collections = profile.collections
    if not collections:
        msg = f"no PROF_XXX collection under {path}"
        raise InputPathError(msg)
    reports = []
    for index, collection in enumerate(collections):
        base = Path(output) if output is not None else _default_root(collection, layout)
        if output is not None and len(collections) > 1:
            base = base / collection.path.name
        share = (lambda f, i=index: progress((i + f) / len(collections))) if progress else None
        reports.append(
            _export_one(
                collection,
                base=base,
                kind=kind,
                layout=layout,
                fmt=fmt,
                selection=selection,
                settings=settings,
                on_invalid=on_invalid,
                chunk_bytes=chunk_bytes,
                advance_bytes=advance_bytes,
                progress=share,
            )
        )
    report = ExportReport(
        kind=kind, layout=layout, seconds=time.perf_counter() - started, collections=reports
    )
    log.info(log_events.EXPORT_FINISHED, seconds=round(report.seconds, 3), collections=len(reports))
    return report


def _default_root(collection: discovery.Profile, layout: Layout) -> Path:
    """msprof writes into the PROF dir; torch_npu into the ``*_ascend_pt`` dir around it."""
    if layout == "torch_npu" and collection.profiler_info_path is not None:
        return collection.profiler_info_path.parent
    return collection.path


def _process_id(collection: discovery.Profile) -> int:
    for control in collection.controls:
        pid = control.info.pid
        if isinstance(pid, int) or (isinstance(pid, str) and pid.isdigit()):
            return int(pid) & ((1 << 22) - 1)
    return 0


def layout_context(
    collection: discovery.Profile,
    out_dir: Path,
    window: tuple[int, int] | None,
    *,
    csv_slice_rows: int = CSV_LIMIT,
) -> Context:
    """What the layout outputs of ``collection`` need to know (the daemon builds it once per collection)."""
    planner = Planner(collection)
    devices = tuple(d.device_id for d in collection.devices if d.device_id is not None)
    metrics = planner.metric_columns(devices[0]) if devices else []
    stars = any(d.stream("stars_soc") is not None for d in collection.devices)
    return Context(
        out_dir=out_dir,
        timestamp=datetime.now().strftime("%Y%m%d%H%M%S"),
        wall_offset_ns=collection.wall_offset_ns,
        devices=devices,
        metric_columns=metrics,
        stars=stars,
        process_id=_process_id(collection),
        window=window,
        csv_slice_rows=csv_slice_rows,
        collection_start_ns=collection.collection_starts_ns,
        l2_cache=any(d.stream("l2_cache") is not None for d in collection.devices),
        memcpy_info=planner.feedset.has(collection.host, "memcpy_info"),
        logic_streams=logic_streams(planner.feedset.table(collection.host, "logic_stream_info")),
        hwts_mhz={
            d.device_id: d.metadata.device_info.hwts_mhz
            for d in collection.devices
            if d.device_id is not None and d.metadata is not None and d.metadata.info.device_info
        },
    )


def framework_config(collection: discovery.Profile) -> ExperimentalConfig | None:
    """What torch_npu says it collected (level, AI Core metrics), which its layout's files follow."""
    info = collection.profiler_info
    return None if info is None else info.config.experimental_config


def _export_one(
    collection: discovery.Profile,
    *,
    base: Path,
    kind: Kind,
    layout: Layout,
    fmt: Format,
    selection: Selection,
    settings: ExportSettings,
    on_invalid: OnInvalid,
    chunk_bytes: int,
    advance_bytes: int,
    progress: Progress | None,
) -> CollectionReport:
    window = _window(collection, selection, on_invalid, chunk_bytes)
    out_dir = base / OUTPUT_DIRS[layout]
    context = layout_context(collection, out_dir, window, csv_slice_rows=settings.csv_slice_rows)
    limits = Limits.in_megabytes(
        settings.timeline_file_mb, settings.timeline_file_events, settings.timeline_limit_mb
    )
    built = outputs(context, layout, kind, fmt=fmt, framework=framework_config(collection), limits=limits)
    # msprof.py reads no FRAMEWORK files and none of its outputs need them (the window above may)
    planner = Planner(
        collection,
        on_invalid=on_invalid,
        chunk_bytes=chunk_bytes,
        advance_bytes=advance_bytes,
        read_framework=layout != "msprof",
    )
    processes = _processes(settings)
    parts = [_Part(planner, group, window, context) for group in _groups(planner, built, window, processes)]
    workers: list[Worker[_PartReport]] = []
    if processes > 1:
        _load_numba()
    try:
        for number, part in enumerate(parts[1:], 1):
            workers.append(_start(f"export-part-{number}", part, part.run, nice=SIDE_PART_NICE))
        with _front(planner, parts[0], workers, fork=processes > 1) as received:
            written, here = parts[0].shared()
            sent = planner.last_stage(
                sorted(written.sources()),
                provided=[feed.name for feed in received],
                here=sorted(here.sources()),
            )
            messages = here.tee(here.messages(progress, received, sent=sent))
            if processes > 1:  # the writer renders its outputs and runs the pipeline's last stage
                to_writer = BatchPipe()  # made after the other forks: only its worker holds its ends
                writer = _start(
                    "export-writer", written, lambda: written.run_last_stage(to_writer.messages(), sent)
                )
                workers.insert(0, writer)
                to_writer.forked()
                _send(messages, sent, to_writer, writer)
                local = [here]
            else:  # the same stages here, so one process writes what several write
                wanted = set(sent)
                written.run_last_stage((m for m in messages if m[0] in wanted), sent)
                for _ in messages:  # the batches and statistics of here's outputs after the stage's end
                    pass
                local = [here, written]
        here.finish()  # while the writer finishes its own outputs
        for worker in workers:
            worker.wait_ran()
        for worker in workers:
            worker.commit()
        done = [part.commit() for part in local] + [worker.result() for worker in workers]
    except BaseException:
        for worker in workers:
            worker.abort()
        parts[0].abort()
        raise
    paths = [path for part in done for path in part.paths]
    if layout == "msprof":
        paths.append(write_readme(out_dir))
    if layout == "torch_npu":
        paths += _profiler_info(collection, base)
    if progress is not None:
        progress(1.0)
    return _report(
        collection,
        out_dir=out_dir,
        devices=context.devices,
        parts=done,
        paths=paths,
        window=window,
    )


#: how much less CPU priority a part other than the costliest takes (``os.nice``): the costliest part's
#: pipeline, its writer and its front are the export's longest path, and the other parts have time to
#: spare on the cores that path leaves idle (bench/README.md, "Session 20")
SIDE_PART_NICE = 10
#: the least raw-data work (Planner.work) that earns a group of outputs its own worker process: below
#: it, forking and a second pipeline cost more than they save
MIN_PART_WORK = 16 << 20


def _processes(settings: ExportSettings) -> int:
    """How many processes an export may use (1 where it may not fork): the setting, or one per core
    this process may run on (its affinity mask, as taskset, cgroup cpusets and most batch schedulers
    set it, not every core of the machine)."""
    return (settings.processes or usable_cores()) if can_fork() else 1


def _load_numba() -> None:
    """Load numba's compiler registries before the workers fork, with a small kernel the pipeline runs
    anyway: every process pays about 0.12 s of CPU for them at its first kernel, unless it inherits them."""
    from profstream.engine.kernels.search import last_before  # imports numba: not at the module's import

    nothing = np.zeros(0, np.int64)
    last_before(nothing, nothing, nothing, nothing)


def usable_cores() -> int:
    """The cores this process may run on (all of them where the platform has no affinity mask)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def _groups(
    planner: Planner, built: Sequence[Output], window: tuple[int, int] | None, processes: int
) -> list[list[Output]]:
    """``built`` in groups that run in processes of their own, the costliest first."""
    if processes < 2 or len(built) < 2:
        return [list(built)]
    works = [planner.work(_sources(output.tables, window)) for output in built]
    groups = split_work(works, processes, min_part=MIN_PART_WORK)
    return [[built[i] for i in group] for group in groups]


def _start(name: str, part: _Part, run: Callable[[], None], *, nice: int = 0) -> Worker[_PartReport]:
    """``part`` in a forked worker that does ``run`` and then commits or aborts it on our word."""
    tables = sorted({t for output in part.outputs for t in output.tables})
    return _fork(name, run, part.commit, part.abort, tables, nice=nice)


def _fork(
    name: str,
    run: Callable[[], None],
    commit: Callable[[], _PartReport],
    abort: Callable[[], None],
    tables: Sequence[str],
    *,
    nice: int = 0,
) -> Worker[_PartReport]:
    """A forked worker doing ``run``, then ``commit`` or ``abort`` on our word; logged with the
    ``tables`` it makes."""
    worker = Worker(name, run, commit, abort, nice=nice)
    log_events.get_logger(component="export").info(
        log_events.EXPORT_PART_STARTED, worker=name, pid=worker.pid, tables=list(tables)
    )
    return worker


@contextlib.contextmanager
def _front(
    planner: Planner, part: _Part, workers: list[Worker[_PartReport]], *, fork: bool
) -> Iterator[list[Feed]]:
    """The first stage of ``part``'s pipeline (:meth:`Planner.front`: task pairing, API events, step
    tags), its
    streams as feeds for the rest (none if the pipeline has no such stage). With ``fork`` the stage
    runs in a worker of its own, appended to ``workers``; else here, step by step as the rest asks.
    The rest gets the same messages either way, so one process writes what several write."""
    streams = planner.front(sorted(part.sources()))
    if not streams:
        yield []
        return
    if not fork:
        yield StageFeeds(stage_messages(planner.front_pipeline(streams), streams), streams).feeds
        return
    pipe = BatchPipe()

    def run() -> None:
        pipe.forked(sends=True)
        send_messages(stage_messages(planner.front_pipeline(streams), streams), pipe)

    nothing = _PartReport(paths=[], rows={}, drops=[])  # the stage writes no file
    worker = _fork("export-front", run, lambda: nothing, lambda: None, streams)
    pipe.forked(sends=False)
    workers.append(worker)
    reader = PipeReader(pipe, worker.wait_ran)
    try:
        yield StageFeeds(reader, streams).feeds
    finally:
        reader.close()


def _send(
    messages: Iterable[StageMessage], streams: Sequence[str], pipe: BatchPipe, writer: Worker[_PartReport]
) -> None:
    """The batches and watermarks of ``messages`` whose stream is one of ``streams`` to ``writer``; a
    writer that failed raises its own error here."""
    wanted = set(streams)
    try:
        send_messages((message for message in messages if message[0] in wanted), pipe)
    except BrokenPipeError:  # the writer exited: it sent why
        writer.wait_ran()
        raise


def _sources(tables: Iterable[str], window: tuple[int, int] | None) -> set[str]:
    """The tables a pipeline must produce for outputs reading ``tables`` (statistics are recomputed
    from their source tables under a window)."""
    return {RECOMPUTED.get(t, t) if window is not None else t for t in tables}


class _PartReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one part of an export wrote (sent back by a worker process)."""

    paths: list[Path]
    rows: dict[str, int]
    drops: list[DropReport]


@dataclass
class _Part:
    """One group of a collection's outputs and the pipeline that feeds them."""

    planner: Planner
    outputs: list[Output]
    window: tuple[int, int] | None
    context: Context
    router: Router | None = None

    def run(self, progress: Progress | None = None, received: Sequence[Feed] = ()) -> None:
        self.route(self.messages(progress, received))

    def run_last_stage(self, messages: Iterable[StageMessage], streams: Sequence[str]) -> None:
        """The last stage of the pipeline (:meth:`Planner.last_stage`) on the ``streams`` of
        ``messages`` (from the writer's pipe, or from this process's pipeline), routed to the outputs."""
        feeds = StageFeeds(messages, streams, in_order=True).feeds
        pipeline, wanted = self.planner.pipeline(sorted(self.sources()), received=feeds)
        unread = set(streams) - set(pipeline.feeds)
        if unread:  # in order, a message no feed takes would stall the stage for good
            msg = f"the last stage reads none of {sorted(unread)}"
            raise PipelineError(msg)
        self.route(pipeline.run(wanted))

    def sources(self) -> set[str]:
        """The tables the part's pipeline produces for its outputs (:func:`_sources`)."""
        return _sources((t for output in self.outputs for t in output.tables), self.window)

    def messages(
        self, progress: Progress | None = None, received: Sequence[Feed] = (), *, sent: Sequence[str] = ()
    ) -> Iterator[StageMessage]:
        """The batches of the tables the outputs read, from one pipeline over the collection (whose
        first stage may run in another process, ``received`` from it: :func:`_front`), and those of the
        ``sent`` streams with their watermarks, for a last stage in the writer."""
        tables = self.sources() | {stream.partition("@")[0] for stream in sent}
        pipeline, streams = self.planner.pipeline(sorted(tables), received=received)
        clock = _Span(self.planner.collection)
        for count, message in enumerate(stage_messages(pipeline, streams, marked=sent)):
            yield message
            if progress is not None and count % 16 == 0:
                progress(clock.fraction(min((f.watermark for f in pipeline.feeds.values()), default=0)))

    def shared(self) -> tuple[_Part, _Part]:
        """This part's outputs as a part for the writer process and a part for this one.

        Outputs that render their files only at finish (from spooled rows: kernel_details,
        communication.json) are shared out, the writer taking the first, this process every second:
        once the pipeline ends, this process would otherwise wait idle while the writer renders them
        one after the other."""
        late = [output for output in self.outputs if output.renders_at_finish]
        here = late[1::2]
        written = [output for output in self.outputs if not any(output is o for o in here)]
        return replace(self, outputs=written), replace(self, outputs=here)

    def route(self, messages: Iterable[StageMessage]) -> None:
        """Route the batches of ``messages`` to the outputs, then finish them: in a worker that renders
        what they hold while the other parts still run, so the commit that follows only renames."""
        for _ in self.tee(messages):
            pass
        self.finish()

    def tee(self, messages: Iterable[StageMessage]) -> Iterator[StageMessage]:
        """Route each batch of ``messages`` to the outputs (statistics recomputed under a window) and
        pass every message on."""
        statistics: dict[str, list[Operator]] = {}
        if self.window is not None:
            for table, source in RECOMPUTED.items():
                if any(table in output.tables for output in self.outputs):
                    statistics.setdefault(source, []).extend(
                        _aggregators(table, self.context.devices, self.context.collection_start_ns)
                    )
        self.router = router = Router(self.outputs, self.window, statistics)
        for stream, item in messages:
            if isinstance(item, pa.RecordBatch):
                router.route(stream, item)
            yield stream, item
        router.finish_statistics()

    def finish(self) -> None:
        """Finish every output; the one with the most rows to encode outside the GIL (the writer's
        tasks dataset: its only row group at 1 GB, 0.6-0.9 s) in a thread while the others finish
        here, as nothing else runs in this process by then."""
        largest = max(self.outputs, key=lambda output: output.finish_rows, default=None)
        if largest is None or not largest.finish_rows or len(self.outputs) < 2:
            for output in self.outputs:
                output.finish()
            return
        with ThreadPoolExecutor(1, thread_name_prefix="finish") as pool:
            finished = pool.submit(largest.finish)
            for output in self.outputs:
                if output is not largest:
                    output.finish()
            finished.result()

    def commit(self) -> _PartReport:
        """Close every output (renaming its files into place); on an error, abort them all."""
        try:
            paths = [path for output in self.outputs for path in output.close()]
        except BaseException:
            self.abort()
            raise
        return _PartReport(
            paths=paths,
            rows=dict(self.router.rows) if self.router is not None else {},
            drops=[
                output.drop_report
                for output in self.outputs
                if isinstance(output, TimelineOutput) and output.drop_report is not None
            ],
        )

    def abort(self) -> None:
        for output in self.outputs:
            output.abort()
        remove_temporaries(self.context.out_dir, os.getpid())


class _Span:
    """Progress as the share of the collection's time span the pipeline has passed."""

    def __init__(self, collection: discovery.Profile) -> None:
        meta = collection.controls[0] if collection.controls else None
        self.start = meta.start_info.clock_monotonic_raw if meta else 0
        end = meta.end_info.clock_monotonic_raw if meta and meta.end_info else 0
        self.end = max(end, self.start + 1)

    def fraction(self, watermark: int) -> float:
        return min(max((watermark - self.start) / (self.end - self.start), 0.0), 1.0)


def _aggregators(table: str, devices: Sequence[int], starts: Mapping[int, int]) -> list[Operator]:
    """The statistic operators of ``table``, with the plan's collection-start filters (plan.py)."""
    if table == "api_statistic":
        return [ApiStatistic()]
    if table == "op_statistic":
        return [OpStatistic(d, start_ns=starts.get(d)) for d in devices]
    return [CommStatistic(d, start_ns=starts.get(d)) for d in devices]


def _window(
    collection: discovery.Profile, selection: Selection, on_invalid: OnInvalid, chunk_bytes: int
) -> tuple[int, int] | None:
    """The host-ns window of the selected iterations (module docstring), None for all data."""
    if selection.model_id is None or selection.iteration_id is None:
        return None
    planner = Planner(collection, on_invalid=on_invalid, chunk_bytes=chunk_bytes)
    pipeline, streams = planner.pipeline(["steps", "framework_steps"])
    batches = [batch for _, batch in pipeline.run(streams)]
    steps = pa.Table.from_batches(batches) if batches else None
    if steps is None or not steps.num_rows:
        msg = f"{collection.path}: no iterations or steps to select --model-id/--iteration-id from"
        raise IterationError(msg)
    kind = pc.cast(steps.column("kind"), pa.string())
    if selection.model_id == STEP_MODEL_ID:
        framework = pc.equal(kind, "framework")
        mine = steps.filter(framework if pc.any(framework).as_py() else pc.equal(kind, "step"))
    else:
        mine = steps.filter(
            pc.and_(pc.equal(kind, "model"), pc.equal(steps.column("model_id"), selection.model_id))
        )
    if not mine.num_rows:
        models = sorted(set(steps.filter(pc.equal(kind, "model")).column("model_id").to_pylist()))
        msg = f"{collection.path}: model {selection.model_id} has no iterations; models: {models or 'none'}"
        raise IterationError(msg)
    first, last = selection.iteration_id, selection.iteration_id + selection.iteration_count - 1
    ids = mine.column("iteration_id")
    low, high = pc.min_max(ids).values()
    if first < low.as_py() or last > high.as_py():
        msg = (
            f"{collection.path}: iterations {first}..{last} of model {selection.model_id} are out of range;"
            f" it has {low.as_py()}..{high.as_py()}"
        )
        raise IterationError(msg)
    chosen = mine.filter(pc.and_(pc.greater_equal(ids, first), pc.less_equal(ids, last)))
    begin = pc.min(chosen.column("start_ns")).as_py()
    end = pc.max(chosen.column("end_ns")).as_py()
    ends = steps.column("end_ns")
    before = pc.max(steps.filter(pc.less(ends, begin)).column("end_ns")).as_py()
    return (before if before is not None and first > 1 else 0, end)


def _profiler_info(collection: discovery.Profile, base: Path) -> list[Path]:
    """profiler_info[_<rank>].json (and profiler_metadata.json) beside ASCEND_PROFILER_OUTPUT:
    torch_npu tools (msprof-analyze) find a rank and its id by this file's name
    (framework_outputs.md §3.8)."""
    source = collection.profiler_info_path
    if source is not None and source.parent == base:
        return []
    if source is not None:
        copied = []
        # profiler_metadata.json names the parallel groups (msprof-analyze's cluster stages)
        for found in (source, source.parent / "profiler_metadata.json"):
            if found.is_file():
                copied.append(base / found.name)
                shutil.copyfile(found, copied[-1])
        return copied
    rank = collection.controls[0].info.rank_id if collection.controls else -1
    target = base / ("profiler_info.json" if rank < 0 else f"profiler_info_{rank}.json")
    target.write_bytes(msgspec.json.encode({"rank_id": rank}))
    return [target]


def _report(
    collection: discovery.Profile,
    *,
    out_dir: Path,
    devices: Sequence[int],
    parts: Sequence[_PartReport],
    paths: Sequence[Path],
    window: tuple[int, int] | None,
) -> CollectionReport:
    dropped: dict[str, int] = {}
    first = last = None
    for report in (drop for part in parts for drop in part.drops):
        for phase, drop in report.dropped.items():
            dropped[phase] = dropped.get(phase, 0) + drop.count
            if drop.first_ns is not None:
                first = drop.first_ns if first is None else min(first, drop.first_ns)
            if drop.last_ns is not None:
                last = drop.last_ns if last is None else max(last, drop.last_ns)
    log = log_events.get_logger(component="export")
    if dropped:
        log.warning(log_events.TIMELINE_EVENTS_DROPPED, dropped=dropped, first_ns=first, last_ns=last)
    not_decoded = [FileReport(path=str(p), bytes=p.stat().st_size) for p in collection.not_decoded]
    if not_decoded:
        files = {kind: count for kind, (count, _) in _by_kind(not_decoded).items()}
        log.warning(log_events.DATA_NOT_DECODED, collection=str(collection.path), files=files)
    rows: dict[str, int] = {}
    for part in parts:  # a table two parts read is the same table in both
        for table, count in part.rows.items():
            rows[table] = max(rows.get(table, 0), count)
    return CollectionReport(
        path=str(collection.path),
        output_dir=str(out_dir),
        devices=list(devices),
        rows=rows,
        files=[FileReport(path=str(p), bytes=p.stat().st_size) for p in paths],
        window_ns=window,
        timeline_dropped=dropped,
        timeline_dropped_range_ns=None if first is None or last is None else (first, last),
        not_decoded=not_decoded,
    )


def clear_caches(report: ExportReport) -> list[Path]:
    """``--clear``: remove what earlier interrupted exports of profstream left in the output dirs.

    profstream keeps no database beside the raw data (msprof's ``sqlite/``, which its ``--clear``
    deletes, has no counterpart, msprof_outputs.md §4f); its only leftovers are hidden temporary files
    (``.*.part``) and spool dirs (``.spool-*``) of a run that was killed. Raw data is never touched.
    """
    removed = []
    for collection in report.collections:
        out_dir = Path(collection.output_dir)
        if not out_dir.is_dir():
            continue
        for path in sorted(out_dir.rglob(".*")):
            if path.is_dir() and path.name.startswith(".spool-"):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            elif path.is_file() and path.name.endswith(".part"):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
