"""The daemon's window writer: each window's Parquet part files and layout directory.

The collector's pipeline hands every batch it emits to a writer and ends each window with its number
(:meth:`ForkedWindows.end`); the writer writes the window's files (temporary names, renamed,
fsynced) and says so with a :class:`Written`. The collector saves the window's checkpoint only then,
so the order of :mod:`profstream.daemon.checkpoint` holds: files first, checkpoint after.

:class:`ForkedWindows` writes in a child process forked when the collection is planned, while the
pipeline goes on with the next window: rendering CSV, chrome-trace JSON and Parquet no longer takes
the pipeline's core (they cost about as much CPU as the pipeline itself; bench/README.md, "Session 21").
A thread in the child reads the pipe as fast as it fills, so the pipeline does not wait while a
window is written; the collector ends a window only while fewer than two are not written yet, so the
child holds at most three: the one it writes, one ended, and the one arriving. The child dies with
the collector (``PR_SET_PDEATHSIG`` on Linux): after a ``kill -9`` no writer of the old run renames
files while a restarted collector drops the uncommitted ones. :class:`InlineWindows` writes in the
calling process, where fork is not available, and in tests that patch the writing. The child is
forked before its collection's pipeline reads anything; with several collections under one watch
dir it inherits the raw-file maps the others' pipelines hold at that moment, which keep those
slices' disk space until it exits if the profiler ages them.

A window the disk is too full for is kept and written again every ``retry_s`` (a :class:`Blocked`
each time) until it fits; part files renamed before the failure are rewritten under the same names.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import multiprocessing
import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from profstream.daemon import checkpoint as ckpt
from profstream.engine.layouts import Context, Layout, Limits, outputs
from profstream.engine.layouts.msprof import write_readme
from profstream.engine.metadata import ExperimentalConfig
from profstream.engine.operators.steps import FRAMEWORK_STEPS
from profstream.engine.operators.task_rows import is_op_row
from profstream.engine.plan import OUTPUT_STREAMS
from profstream.engine.schema import TABLES
from profstream.export import Router
from profstream.sinks import ParquetSink
from profstream.workers import BatchPipe, PipeReader, WorkerError, fork_process, portable

#: the stream name of the mark that ends a window (its value: the window number)
WINDOW_END = "\x00window_end"
_PR_SET_PDEATHSIG = 1
#: the writer yields the CPU to the pipeline, which must keep up with the profiler; it has time to
#: spare (it writes a window while the pipeline reads the next) and the pipeline waits for it only
#: at a window's end
WRITER_NICE = 5


@dataclass(frozen=True, slots=True)
class Written:
    """Window ``window``'s files are renamed into place and fsynced."""

    window: int
    paths: list[Path]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Window ``window`` did not fit on the output disk; the writer tries again."""

    window: int
    error: str


WindowResult = Written | Blocked


def enospc(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it: sinks wrap OS errors) is a full disk."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return True
        if "No space left" in str(cause):
            return True
        cause = cause.__cause__
    return False


def tasks_of(task_rows: pa.RecordBatch) -> pa.RecordBatch:
    """The device tasks among op_summary's merged rows (engine/operators/task_rows.py)."""
    return task_rows.filter(pc.invert(is_op_row(task_rows)))


@dataclass(frozen=True, slots=True)
class WindowTarget:
    """Where and how a collection's windows are written: Parquet parts, and a layout's directory
    (``context`` None: Parquet only)."""

    parquet: Path
    layout: Layout
    context: Context | None
    framework: ExperimentalConfig | None
    limits: Limits


class WindowFiles:
    """Writes sealed windows, oldest first: the part files of each table, then the layout directory.

    A window that fails stays sealed, to be written again.
    """

    def __init__(self, target: WindowTarget) -> None:
        self.target = target
        self.filling: list[tuple[str, pa.RecordBatch]] = []
        self.sealed: deque[tuple[int, list[tuple[str, pa.RecordBatch]]]] = deque()
        self.committed_steps: list[pa.RecordBatch] | None = None  # read back once, then kept

    def add(self, stream: str, batch: pa.RecordBatch) -> None:
        self.filling.append((stream, batch))

    def seal(self, window: int) -> None:
        self.sealed.append((window, self.filling))
        self.filling = []

    def write_next(self) -> Written:
        """Write the oldest sealed window; it stays sealed if this raises."""
        window, batches = self.sealed[0]
        parts = self._write_parts(window, batches)
        ckpt.fsync_files(parts)
        paths = parts + self._write_layout(window, batches)  # fsynced as it is written
        self.sealed.popleft()
        if self.committed_steps is not None:
            self.committed_steps += [b for s, b in batches if s.partition("@")[0] == FRAMEWORK_STEPS]
        return Written(window, paths)

    def _write_parts(self, window: int, batches: list[tuple[str, pa.RecordBatch]]) -> list[Path]:
        """The window's part files, one per table and partition, renamed into place."""
        tables: dict[str, list[pa.RecordBatch]] = {}
        for stream, batch in batches:
            tables.setdefault(stream.partition("@")[0], []).append(batch)
        sources: dict[str, Iterable[pa.RecordBatch]] = {
            table: held for table, held in tables.items() if table not in OUTPUT_STREAMS
        }
        if "task_rows" in tables:  # the window held no tasks: they are these rows less the op rows
            sources["tasks"] = (tasks_of(batch) for batch in tables["task_rows"])
        paths: list[Path] = []
        for table, held in sources.items():
            rows = (batch for batch in held if batch.num_rows)
            first = next(rows, None)
            if first is None:
                continue
            partition = "device_id" if "device_id" in first.schema.names else None
            sink = ParquetSink(
                self.target.parquet / table,
                first.schema,
                partition_by=partition,
                file_name=ckpt.part_name(window),
            )
            with sink:
                for batch in itertools.chain([first], rows):
                    sink.write(batch)
            paths += sink.paths
        return paths

    def _write_layout(self, window: int, batches: list[tuple[str, pa.RecordBatch]]) -> list[Path]:
        """The window's timeline and CSV files, in a directory written whole and then renamed."""
        target = self.target
        if target.context is None:
            return []
        parent = target.context.out_dir
        temp = parent / f".{ckpt.window_dir_name(window)}.tmp"
        shutil.rmtree(temp, ignore_errors=True)
        context = replace(target.context, out_dir=temp, timestamp=datetime.now().strftime("%Y%m%d%H%M%S"))
        built = outputs(context, target.layout, "both", framework=target.framework, limits=target.limits)
        router = Router(built, None)
        try:
            for batch in self._steps_known():
                router.route(FRAMEWORK_STEPS, batch)
            for stream, batch in batches:
                router.route(stream, batch)
                table, _, device = stream.partition("@")
                if table == "task_rows":  # the tasks, which the window did not hold
                    router.route(f"tasks@{device}", tasks_of(batch))
            written = [p for output in built for p in output.close()]
            if written and target.layout == "msprof":
                written.append(write_readme(temp))
            ckpt.fsync_files(written)
        except BaseException:
            for output in built:
                output.abort()
            shutil.rmtree(temp, ignore_errors=True)
            raise
        if not written:
            return []
        final = parent / ckpt.window_dir_name(window)
        shutil.rmtree(final, ignore_errors=True)  # written before a failed commit (ENOSPC retry)
        temp.rename(final)
        ckpt.fsync_dir(parent)
        return [final / p.relative_to(temp) for p in written]

    def _steps_known(self) -> list[pa.RecordBatch]:
        """Framework steps of the written windows (kernel_details' Step Id needs the steps so far)."""
        if self.committed_steps is None:
            self.committed_steps = []
            directory = self.target.parquet / FRAMEWORK_STEPS
            if directory.is_dir():
                schema = TABLES[FRAMEWORK_STEPS]
                partitioning = ds.partitioning(pa.schema([schema.field("device_id")]), flavor="hive")
                table = ds.dataset(directory, format="parquet", partitioning=partitioning).to_table()
                self.committed_steps = table.select(schema.names).cast(schema).to_batches()
        return self.committed_steps


def _attempt(files: WindowFiles) -> WindowResult:
    """Write the oldest sealed window, or say that the disk is full (other errors raise)."""
    window = files.sealed[0][0]
    try:
        return files.write_next()
    except Exception as err:  # sinks wrap OS errors: enospc() looks through them
        if not enospc(err):
            raise
        return Blocked(window, str(err))


class InlineWindows:
    """Writes each window in the calling process, when the collector asks for results."""

    def __init__(self, target: WindowTarget) -> None:
        self.files = WindowFiles(target)

    def send(self, stream: str, batch: pa.RecordBatch) -> None:
        self.files.add(stream, batch)

    def end(self, window: int) -> None:
        self.files.seal(window)

    def results(self, timeout: float = 0.0) -> list[WindowResult]:
        """Write what is sealed; a full disk stops at that window (``timeout``: unused here)."""
        del timeout
        found: list[WindowResult] = []
        while self.files.sealed:
            found.append(_attempt(self.files))
            if isinstance(found[-1], Blocked):
                break
        return found

    def close(self, *, abandon: bool = False) -> None:
        """Nothing runs apart from the caller (``abandon``: see :meth:`ForkedWindows.close`)."""
        del abandon


def _die_with_parent(parent: int) -> None:
    """Be killed when the collector dies (Linux); exit now if it has died already."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


def _serve(target: WindowTarget, pipe: BatchPipe, replies: Connection, parent: int, retry_s: float) -> None:
    """The child: write each window as its end mark arrives, reply, until the collector closes the pipe."""
    _die_with_parent(parent)
    # the collector drains on SIGTERM and SIGINT, then closes the pipe: the writer must outlive them
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(WRITER_NICE)
    pipe.forked(sends=False)
    files = WindowFiles(target)
    reader = PipeReader(pipe, lambda: None, read_ahead=0)
    try:
        for name, item in reader:
            if isinstance(item, pa.RecordBatch):
                files.add(name, item)
                continue
            files.seal(item)
            while isinstance(result := _attempt(files), Blocked):
                replies.send(result)
                time.sleep(retry_s)
            replies.send(result)
    except WorkerError:
        return  # the collector died mid-window: the restarted one writes it again
    except BaseException as error:  # the collector raises it as its own
        replies.send(portable(error))
    finally:
        reader.close()


class ForkedWindows:
    """Writes the windows in a forked child (module docstring)."""

    def __init__(self, target: WindowTarget, retry_s: float) -> None:
        self._pipe = BatchPipe()
        self._replies, child_end = multiprocessing.get_context("fork").Pipe(duplex=False)
        self._process = fork_process(
            "window-writer", _serve, target, self._pipe, child_end, os.getpid(), retry_s
        )
        child_end.close()
        self._pipe.forked()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def send(self, stream: str, batch: pa.RecordBatch) -> None:
        try:
            self._pipe.send(stream, batch)
        except BrokenPipeError:
            self._failed()

    def end(self, window: int) -> None:
        try:
            self._pipe.send_mark(WINDOW_END, window)
        except BrokenPipeError:
            self._failed()

    def results(self, timeout: float = 0.0) -> list[WindowResult]:
        """What the writer has said, waiting up to ``timeout`` s for the first word."""
        found: list[WindowResult] = []
        while self._replies.poll(timeout if not found else 0):
            try:
                reply = self._replies.recv()
            except EOFError:
                self._failed()
            if isinstance(reply, BaseException):
                self._process.join()
                raise reply
            found.append(reply)
        return found

    def _failed(self) -> None:
        """Raise why the writer stopped (what it raised, else how it exited)."""
        with contextlib.suppress(EOFError, OSError):
            while self._replies.poll(0):
                reply = self._replies.recv()
                if isinstance(reply, BaseException):
                    raise reply
        self._process.join()
        msg = f"the window writer (pid {self._process.pid}) exited with code {self._process.exitcode}"
        raise WorkerError(msg)

    def close(self, *, abandon: bool = False) -> None:
        """Say that nothing more comes and wait for the writer, which writes no window left unended.

        ``abandon``: kill it instead, dropping windows it has not written (a disk still full when the
        collector stops); the next run drops their files and writes them again from the checkpoint.
        """
        if abandon:
            self._process.kill()
        with contextlib.suppress(OSError):
            self._pipe.close()
        self._process.join()
        self._replies.close()


WindowWriter = InlineWindows | ForkedWindows
