"""Forked worker parts: run, then commit or abort on the parent's word; every failure comes back."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from profstream.engine.runtime import DONE, PipelineError, StageFeeds, StageMessage
from profstream.errors import DecodeError, ProfstreamError
from profstream.workers import BatchPipe, PipeReader, Worker, WorkerError, can_fork, send_messages

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs fork")


class Part:
    """A part that leaves marker files: what ran, committed or aborted in the child."""

    def __init__(self, root: Path, *, fail: BaseException | None = None, seconds: float = 0.0) -> None:
        self.root = root
        self.fail = fail
        self.seconds = seconds

    def run(self) -> None:
        (self.root / "ran").touch()
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
        if self.fail is not None:
            raise self.fail
        (self.root / "finished").touch()

    def commit(self) -> dict[str, int]:
        (self.root / "committed").touch()
        return {"pid": os.getpid()}

    def abort(self) -> None:
        (self.root / "aborted").touch()

    def worker(self) -> Worker[dict[str, int]]:
        return Worker("test-part", self.run, self.commit, self.abort)

    def marks(self) -> set[str]:
        return {p.name for p in self.root.iterdir()}


def test_a_part_that_ran_commits_in_the_child_and_sends_its_result(tmp_path: Path) -> None:
    part = Part(tmp_path)
    worker = part.worker()
    worker.wait_ran()
    assert part.marks() == {"ran", "finished"}  # nothing is committed before the parent says so
    worker.commit()
    result = worker.result()
    assert result["pid"] == worker.pid != os.getpid()
    assert part.marks() == {"ran", "finished", "committed"}
    worker.abort()  # after a commit: nothing to do
    assert part.marks() == {"ran", "finished", "committed"}


def test_an_abort_after_the_run_removes_the_part(tmp_path: Path) -> None:
    part = Part(tmp_path)
    worker = part.worker()
    worker.wait_ran()
    worker.abort()
    assert part.marks() == {"ran", "finished", "aborted"}


def test_a_failed_run_aborts_in_the_child_and_raises_its_error_in_the_parent(tmp_path: Path) -> None:
    error = DecodeError("bad magic", path="x/hwts.data.0.slice_0", offset=64, record_index=1)
    part = Part(tmp_path, fail=error)
    worker = part.worker()
    with pytest.raises(DecodeError, match="bad magic") as raised:
        worker.wait_ran()
    assert (raised.value.path, raised.value.offset, raised.value.record_index) == (error.path, 64, 1)
    worker.abort()
    assert part.marks() == {"ran", "aborted"}


def test_an_error_that_cannot_be_pickled_comes_back_as_its_text(tmp_path: Path) -> None:
    class LocalError(Exception):  # a class pickle cannot find by name
        pass

    worker = Part(tmp_path, fail=LocalError("lost in transit")).worker()
    with pytest.raises(ProfstreamError, match="LocalError: lost in transit"):
        worker.wait_ran()


def test_aborting_a_running_part_stops_it_and_it_cleans_up(tmp_path: Path) -> None:
    part = Part(tmp_path, seconds=600)
    worker = part.worker()
    while "ran" not in part.marks():
        time.sleep(0.01)
    worker.abort()
    assert part.marks() == {"ran", "aborted"}  # stopped, not finished: the abort did not wait for it


def test_a_child_that_dies_is_an_error_naming_its_exit_code(tmp_path: Path) -> None:
    def die() -> None:
        os._exit(3)

    worker: Worker[None] = Worker("dying", die, lambda: None, lambda: None)
    with pytest.raises(WorkerError, match="exited with code 3"):
        worker.wait_ran()


def test_a_child_waiting_for_a_parent_that_died_aborts(tmp_path: Path) -> None:
    """The parent is itself a forked process that exits without a word: its part must abort."""
    part = Part(tmp_path)
    parent = os.fork()
    if parent == 0:  # the parent that dies
        try:
            part.worker().wait_ran()
        finally:
            os._exit(0)  # no commit, no abort
    os.waitpid(parent, 0)
    for _ in range(600):  # it checks for its parent every second
        if "aborted" in part.marks():
            break
        time.sleep(0.05)
    assert part.marks() == {"ran", "finished", "aborted"}


def _batches() -> list[tuple[str, pa.RecordBatch]]:
    """Batches of two schemas; the dictionaries differ from batch to batch, as operators emit them."""
    return [
        (
            f"tasks@{i % 2}",
            pa.record_batch(
                {"n": pa.array(range(i, i + 3)), "s": pa.array([f"x{i}"] * 3).dictionary_encode()}
            ),
        )
        if i % 3
        else ("api", pa.record_batch({"t": pa.array([float(i)]), "name": pa.array([None], pa.string())}))
        for i in range(12)
    ]


def test_a_batch_pipe_delivers_every_batch_in_order_to_its_worker(tmp_path: Path) -> None:
    sent = _batches()
    pipe = BatchPipe()
    received: list[tuple[str, pa.RecordBatch]] = []

    def run() -> None:
        received.extend(pipe.received())

    def commit() -> list[tuple[str, bytes]]:
        return [(name, _ipc(batch)) for name, batch in received]

    worker = Worker("test-writer", run, commit, lambda: None)
    pipe.forked()
    for name, batch in sent:
        pipe.send(name, batch)
    pipe.close()
    worker.wait_ran()
    worker.commit()
    got = worker.result()
    assert [name for name, _ in got] == [name for name, _ in sent]
    for (_, blob), (_, batch) in zip(got, sent, strict=True):
        assert pa.ipc.open_stream(blob).read_next_batch().equals(batch)


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as stream:
        stream.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_a_batch_pipe_whose_worker_failed_breaks_and_the_worker_says_why() -> None:
    pipe = BatchPipe()

    def run() -> None:
        for _ in pipe.received():
            msg = "bad record"
            raise DecodeError(msg, path="hwts.data", offset=64)

    worker = Worker("test-writer", run, lambda: None, lambda: None)
    pipe.forked()
    big = pa.record_batch({"n": pa.array(range(1 << 20))})  # 8 MiB: more than the pipe holds
    with pytest.raises(BrokenPipeError):
        for _ in range(8):
            pipe.send("tasks@0", big)
    with pytest.raises(DecodeError, match="bad record") as raised:
        worker.wait_ran()
    assert raised.value.offset == 64


def test_a_worker_reading_a_pipe_whose_sender_died_fails_with_eof() -> None:
    pipe = BatchPipe()

    def run() -> None:
        list(pipe.received())

    worker = Worker("test-writer", run, lambda: None, lambda: None)
    pipe.forked()
    pipe.send("tasks@0", pa.record_batch({"n": pa.array([1])}))
    pipe._writer.close()  # the sender's end goes away without the end marker, as when it dies
    with pytest.raises(EOFError):
        worker.wait_ran()


def test_a_nice_worker_runs_at_a_lower_cpu_priority(tmp_path: Path) -> None:
    seen = tmp_path / "nice"
    worker = Worker("test-side", lambda: seen.write_text(str(os.nice(0))), lambda: None, lambda: None, nice=3)
    worker.wait_ran()
    worker.commit()
    worker.result()
    assert int(seen.read_text()) == min(os.nice(0) + 3, 19)


@contextlib.contextmanager
def _sending(pipe: BatchPipe, messages: list[StageMessage], fail: bool = False) -> Iterator[Worker[None]]:
    """A worker that sends ``messages`` (then fails, with ``fail``); aborted at the end, so a failed
    assertion leaves no child waiting for its word."""

    def run() -> None:
        pipe.forked(sends=True)
        if fail:
            for name, item in messages:
                assert isinstance(item, pa.RecordBatch)
                pipe.send(name, item)
            msg = "bad record"
            raise DecodeError(msg, path="stars_soc.data", offset=128)
        send_messages(messages, pipe)

    worker: Worker[None] = Worker("test-front", run, lambda: None, lambda: None)
    pipe.forked(sends=False)
    try:
        yield worker
    finally:
        worker.abort()


def test_a_pipe_reader_gives_a_stage_s_messages_to_its_feeds() -> None:
    """Messages of one stream wait while another is read; a watermark alone makes its feed wait at
    that watermark; DONE ends it."""
    first, second = (pa.record_batch({"start_ns": pa.array([k, k + 1])}) for k in (10, 20))
    pipe = BatchPipe()
    messages: list[StageMessage] = [("a", first), ("a", 15), ("b", second), ("b", DONE), ("a", DONE)]
    with _sending(pipe, messages) as worker:
        readers = threading.active_count()
        reader = PipeReader(pipe, worker.wait_ran)
        a, b = StageFeeds(reader, ["a", "b"]).feeds
        assert threading.active_count() == readers  # no reader thread yet: a fork now would start clean
        assert b.pull() is not None and b.pull() is None  # a's batch and watermark kept for a
        assert (b.watermark, b.waiting) == (DONE, False)
        got = a.pull()
        assert got is not None and got.equals(first)
        assert a.pull() is None and (a.watermark, a.waiting) == (15, True)
        assert a.pull() is None and (a.watermark, a.waiting) == (DONE, False)
        worker.commit()
        worker.result()
        reader.close()


def test_a_pipe_reader_raises_what_the_sending_worker_raised() -> None:
    pipe = BatchPipe()
    batch = pa.record_batch({"start_ns": pa.array([1])})
    with _sending(pipe, [("a", batch)], fail=True) as worker:
        reader = PipeReader(pipe, worker.wait_ran)
        [feed] = StageFeeds(reader, ["a"]).feeds
        assert feed.pull() is not None
        with pytest.raises(DecodeError, match="bad record") as raised:
            feed.pull()
        assert raised.value.offset == 128
        reader.close()


def test_stage_feeds_fail_on_a_stream_they_do_not_expect_or_one_left_unfinished() -> None:
    with pytest.raises(PipelineError, match="sent stream 'c'"):
        StageFeeds([("c", 5)], ["a"]).feeds[0].pull()
    [feed] = StageFeeds([("a", 5)], ["a"]).feeds
    assert feed.pull() is None and (feed.watermark, feed.waiting) == (5, True)
    with pytest.raises(PipelineError, match="without finishing stream a"):
        feed.pull()
