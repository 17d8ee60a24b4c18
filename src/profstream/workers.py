"""Parts of one export run in forked worker processes and committed together (two-phase).

An export whose outputs fall into independent groups (plan.split_work) runs the largest group in
the calling process and each other group in a child forked from it. A child inherits the opened
collection and the built outputs, runs its group's pipeline, and then waits: it commits (closes its
outputs, renaming their files into place) only when the parent says every part ran, and removes its
temporary files otherwise, so a failed export leaves no finished-looking file from any part. Only
small things cross the pipe: the word to commit or abort, and what the part reports back (paths,
row counts, drop reports), or the error it raised, which the parent raises again as its own.

The costliest group's outputs can be written by a worker too (:class:`BatchPipe`): the parent then
only runs that group's pipeline and sends its batches, as Arrow IPC, to a child that routes them to
the outputs, renders and commits them, so rendering no longer waits for the pipeline's core. The
first stage of that pipeline can run in a worker too, the other way round: the worker runs a
pipeline of its own and sends the streams it produces, with their watermarks (:func:`send_messages`),
which the parent's pipeline reads as feeds (:class:`PipeReader`, ``runtime.StageFeeds``).

Fork, not spawn: the child starts with everything imported and the collection already read, so a
part costs no start-up. Where fork is not available, or in a daemonic process (a Dask worker, which
may not have children), the export runs every group in one process instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

import msgspec
import pyarrow as pa

from profstream.engine.runtime import StageMessage, ipc_size, write_ipc
from profstream.errors import ProfstreamError

T = TypeVar("T")

#: how often a child waiting for the parent's word checks that the parent is still alive (seconds)
_PARENT_CHECK_S = 1.0
_RAN, _COMMITTED, _FAILED = "ran", "committed", "failed"
_COMMIT, _ABORT = "commit", "abort"
#: the pipe buffer a BatchPipe asks for (Linux's default limit for unprivileged processes)
PIPE_BYTES = 1 << 20
#: the messages (a batch, or one stream's watermark) a PipeReader reads ahead of its pipeline
READ_AHEAD = 2


class WorkerError(ProfstreamError, RuntimeError):
    """A worker process died without saying why (killed, out of memory)."""


def can_fork() -> bool:
    """Whether this process may fork workers: fork exists and this is not a daemonic process."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a :class:`ProfstreamError` with its text."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any pickling failure: send the text instead
        return ProfstreamError(f"{type(error).__name__}: {error}")
    return error


def _wait_for_word(conn: Connection, parent: int) -> str:
    """The parent's word; abort when it closed the pipe or died (its pid is no longer our parent)."""
    while not conn.poll(_PARENT_CHECK_S):
        if os.getppid() != parent:
            return _ABORT
    try:
        word: str = conn.recv()
    except EOFError:
        return _ABORT
    return word


def _stop(signum: int, _frame: object) -> None:
    msg = f"stopped by signal {signum}"
    raise SystemExit(msg)


def _child(
    conn: Connection,
    parent: int,
    run: Callable[[], None],
    commit: Callable[[], Any],
    abort: Callable[[], None],
    *,
    nice: int,
) -> None:
    # Ctrl+C reaches the parent too, which stops its children with SIGTERM; SIGTERM stops the run
    # with an exception, so the part removes its files before it exits
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    if nice:
        os.nice(nice)
    try:
        run()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # from here on the parent's word decides
    except BaseException as error:  # every failure goes back to the parent
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # nothing interrupts the clean-up
        abort()
        conn.send((_FAILED, portable(error)))
        return
    conn.send((_RAN, None))
    if _wait_for_word(conn, parent) != _COMMIT:
        abort()
        return
    try:
        result = commit()
    except BaseException as error:
        abort()
        conn.send((_FAILED, portable(error)))
        return
    conn.send((_COMMITTED, result))


def fork_process(name: str, target: Callable[..., None], *args: Any, **kwargs: Any) -> BaseProcess:
    """Start ``target(*args, **kwargs)`` in a forked, daemonic child named ``name``."""
    process = multiprocessing.get_context("fork").Process(
        target=target, args=args, kwargs=kwargs, name=name, daemon=True
    )
    with warnings.catch_warnings():
        # Python 3.12+ warns when a process with threads forks; ours are Arrow's thread pools,
        # which Arrow re-creates in the child (its at-fork handlers, apache/arrow#2363, #14594)
        warnings.filterwarnings("ignore", message=".*multi-threaded.*fork", category=DeprecationWarning)
        process.start()
    return process


class Worker(Generic[T]):
    """One part in a forked child: ``run`` there at once, then ``commit`` (its result comes back) or
    ``abort`` on the parent's word. A ``nice`` child yields the CPU to the others (``os.nice``): a part
    that is not on the export's longest path then takes the cores the others leave idle."""

    def __init__(
        self,
        name: str,
        run: Callable[[], None],
        commit: Callable[[], T],
        abort: Callable[[], None],
        *,
        nice: int = 0,
    ) -> None:
        self._conn, child_end = multiprocessing.get_context("fork").Pipe()
        self._process = fork_process(name, _child, child_end, os.getpid(), run, commit, abort, nice=nice)
        child_end.close()
        self._ran = False

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _receive(self, expected: str) -> Any:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            self._process.join()
            code = self._process.exitcode
            msg = f"export worker {self._process.name} (pid {self.pid}) exited with code {code}"
            raise WorkerError(msg) from None
        if kind == _FAILED:
            self._process.join()
            raise value
        if kind != expected:
            msg = f"export worker {self._process.name} sent {kind!r}, expected {expected!r}"
            raise WorkerError(msg)
        return value

    def wait_ran(self) -> None:
        """Wait until the part has run; raise what it raised (it has then removed its files)."""
        if not self._ran:
            self._receive(_RAN)
            self._ran = True

    def commit(self) -> None:
        """Tell a part that ran to commit (:meth:`result` waits for it)."""
        self.wait_ran()
        self._conn.send(_COMMIT)

    def result(self) -> T:
        """What the part's commit returned; raise what it raised (it has then removed its files)."""
        result: T = self._receive(_COMMITTED)
        self._process.join()
        self._conn.close()
        return result

    def abort(self) -> None:
        """Tell the part to remove its files (if it still runs, it stops at once) and wait for it."""
        if self._conn.closed:  # it committed, or was aborted already
            return
        if not self._ran:
            self._process.terminate()  # stops the run; the child then removes its files (_child)
        with contextlib.suppress(OSError):  # it has exited already
            self._conn.send(_ABORT)
        self._process.join()
        self._conn.close()


class BatchPipe:
    """Named Arrow record batches, and the watermarks of their streams, one way between this process
    and one forked worker, each batch an Arrow IPC stream of its own (its schema and dictionaries with
    it) over a pipe.

    A batch's IPC bytes go raw after a small header that gives their size, and are read straight into
    a buffer of Arrow's memory pool: read as Python bytes (``Connection.recv_bytes``, which builds each
    message from reads of the whole remaining size), the large blocks, freed in arrival order, left
    glibc's heap larger with every GB (the 5 GB msprof summary's pipeline process peaked at 414 MB,
    390 MB this way; bench/README.md, "Session 20").

    A send blocks while the pipe is full, which is the back-pressure that keeps the memory of both
    sides bounded. Make the pipe, then fork its worker, then call :meth:`forked` in this process (and
    in the worker, if the worker sends); fork no other process before that, or the other process holds
    the sending end too and a dead sender goes unnoticed.
    """

    def __init__(self) -> None:
        self._reader, self._writer = multiprocessing.get_context("fork").Pipe(duplex=False)
        if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux: 16 times fewer writes and wake-ups than 64 KiB
            with contextlib.suppress(OSError):  # above the system's limit: keep the default
                fcntl.fcntl(self._writer.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)

    def forked(self, *, sends: bool = True) -> None:
        """Once the worker is forked, in a process that ``sends`` (else receives): close the other end."""
        (self._reader if sends else self._writer).close()

    def send(self, name: str, batch: pa.RecordBatch) -> None:
        """Raises BrokenPipeError when the receiver has exited (it failed: ask its Worker why).

        The IPC stream is measured, then written straight into the pipe: a buffer of the whole stream
        would double a large batch in this process for as long as the pipe takes to drain it."""
        self._writer.send_bytes(msgspec.msgpack.encode((name, None, ipc_size(batch))))
        with os.fdopen(self._writer.fileno(), "wb", buffering=PIPE_BYTES, closefd=False) as pipe:
            write_ipc(pa.PythonFile(pipe, mode="w"), batch)

    def send_mark(self, name: str, watermark: int) -> None:
        """Nothing older than ``watermark`` will come in stream ``name`` (DONE: nothing more)."""
        self._writer.send_bytes(msgspec.msgpack.encode((name, watermark, 0)))

    def close(self) -> None:
        """Tell the receiver that nothing more comes."""
        self._writer.send_bytes(b"")
        self._writer.close()

    def messages(self) -> Iterator[tuple[str, pa.RecordBatch | int]]:
        """In the receiver: each batch, or watermark, with its stream's name in the order sent, until
        the sender closes the pipe.

        Raises EOFError when the sender exited without closing it (it died, was killed, or failed).
        """
        self._writer.close()
        while header := self._reader.recv_bytes():
            name, watermark, size = msgspec.msgpack.decode(header, type=tuple[str, int | None, int])
            if watermark is None:
                yield name, pa.ipc.open_stream(self._payload(size)).read_next_batch()
            else:
                yield name, watermark

    def _payload(self, size: int) -> pa.Buffer:
        """The next ``size`` bytes of the pipe, read straight into Arrow memory."""
        buffer = pa.allocate_buffer(size)
        view, fd = memoryview(buffer), self._reader.fileno()
        while view:
            got = os.readv(fd, [view])
            if not got:
                raise EOFError
            view = view[got:]
        return buffer

    def received(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """:meth:`messages`' batches: a worker that renders outputs has no use for watermarks."""
        for name, item in self.messages():
            if isinstance(item, pa.RecordBatch):
                yield name, item


def send_messages(messages: Iterable[StageMessage], pipe: BatchPipe) -> None:
    """Send a stage's ``messages`` (:func:`~profstream.engine.runtime.stage_messages`), then close:
    in a worker whose pipeline feeds the parent's (:class:`PipeReader`)."""
    for name, item in messages:
        if isinstance(item, pa.RecordBatch):
            pipe.send(name, item)
        else:
            pipe.send_mark(name, item)
    pipe.close()


class PipeReader:
    """The messages a worker's stage sends (:func:`send_messages`), read ahead by a thread, up to
    :data:`READ_AHEAD` of them: the worker does not stop at each batch until the parent's pipeline asks
    for it, and the pipeline finds the batch here when it does. ``sender_failed`` raises why the
    worker stopped when the pipe ends early. :meth:`close` stops the reader (the export does, whatever
    happened). The thread starts with the first message asked for, so that processes forked before
    (the export's writer) start without it. ``read_ahead`` 0 reads without a bound: the daemon's window
    writer, whose sender bounds what it sends.
    """

    def __init__(
        self, pipe: BatchPipe, sender_failed: Callable[[], None], *, read_ahead: int = READ_AHEAD
    ) -> None:
        self._sender_failed = sender_failed
        self._queue: queue.Queue[StageMessage | BaseException | None] = queue.Queue(read_ahead)
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(pipe,), name="pipe-reader", daemon=True)

    def _read(self, pipe: BatchPipe) -> None:
        try:
            for message in pipe.messages():
                if not self._put(message):
                    return
            self._put(None)
        except (EOFError, OSError) as error:
            self._put(error)

    def _put(self, item: StageMessage | BaseException | None) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_PARENT_CHECK_S)
            except queue.Full:
                continue
            return True
        return False

    def __iter__(self) -> Iterator[StageMessage]:
        self._reader.start()
        while (message := self._queue.get()) is not None:
            if isinstance(message, BaseException):
                self._sender_failed()  # raises what the worker raised
                msg = "the pipeline worker closed its pipe before it finished"
                raise WorkerError(msg) from message
            yield message

    def close(self) -> None:
        """Stop reading ahead. The reader thread ends at its next message, or when the worker's end
        of the pipe closes; it is not waited for, as a worker that still runs may send nothing soon."""
        self._closed.set()
