"""``profstream collect`` under the faults of issue 6: torn tails, late ``.done``, slices aged before
they were read, storage_limit aging, corrupt records and a watch directory that goes away.

Each test runs a :class:`Collector` in a thread over a watch directory that it fills from a
finished simulation file by file, in the profiler's order (a slice, then its ``.done``; ``end_info``
last), so it decides what the daemon can see at each poll. Expected rows come from an offline
``export --layout parquet`` of the same files (minus those lost, where data is lost).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from structlog.testing import capture_logs

from profstream import events
from profstream.daemon import checkpoint as ckpt
from profstream.daemon import collector
from profstream.daemon.aging import MB, AgingPolicy
from profstream.daemon.collector import GAPS_NAME, CollectionRunner, Collector, CollectorConfig
from profstream.daemon.windows import ForkedWindows
from profstream.engine.runtime import Pipeline
from profstream.simulate import SimulationConfig, simulate
from tests.daemon.conftest import daemon_parquet, offline_rows, rows

SLICE = re.compile(r"^(?P<stream>.+)\.slice_(?P<n>\d+)$")
STARS_RECORD = 64  # stars_soc record size; its bytes 2-3 hold the device-log magic
#: with a 1 MB reserve the upper aging threshold is 2 MB (the big run has 4.4 MB, 3.5 MB on the host)
LIMIT_MB = 3

Rows = dict[str, Counter[str]]


def _prof(config: SimulationConfig, root: Path) -> Path:
    simulate(config, root / "raw")
    (prof,) = (root / "raw").iterdir()
    return prof


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 910B PROF dir (1.3 MB, 64 KiB slices), with HBM samples (held to the end of the run)."""
    cfg = SimulationConfig(chip="910B", steps=4, framework="none", seed=3, slice_bytes=64 * 1024, hbm=True)
    return _prof(cfg, tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def offline(raw: Path) -> Rows:
    return offline_rows(raw.parent, raw.parent.parent / "offline")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 910B PROF dir of 4 MB (3.5 MB of it host data) in 128 KiB slices."""
    cfg = SimulationConfig(
        chip="910B", framework="none", seed=3, slice_bytes=128 * 1024, target_bytes=4 << 20
    )
    return _prof(cfg, tmp_path_factory.mktemp("big"))


# -- the watch directory --------------------------------------------------------------------------


def _files(prof: Path) -> list[Path]:
    """Every file of ``prof``, relative, data slices in slice order, each ``.done`` after its file."""

    def order(rel: Path) -> tuple[int, str, bool]:
        name = rel.name.removesuffix(".done")
        match = SLICE.match(name)
        return (int(match["n"]) if match else -1, str(rel.parent / name), rel.name.endswith(".done"))

    return sorted((p.relative_to(prof) for p in prof.rglob("*") if p.is_file()), key=order)


def _is_data(rel: Path) -> bool:
    return rel.parent.name == "data"


def _is_end(rel: Path) -> bool:
    return rel.name.startswith("end_info")


def _stream(rel: Path) -> str | None:
    match = SLICE.match(rel.name.removesuffix(".done"))
    return None if match is None else f"{rel.parent}/{match['stream']}"


def _slices(prof: Path, stream: str) -> list[Path]:
    return [r for r in _files(prof) if _stream(r) == stream and not r.name.endswith(".done")]


def _put(src: Path, dst: Path, rels: list[Path]) -> None:
    for rel in rels:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dst / rel)


def _without(prof: Path, lost: set[str], root: Path) -> Path:
    """A copy of the collection without the files (and ``.done``) named in ``lost``."""
    copy = root / "raw" / prof.name
    _put(prof, copy, [r for r in _files(prof) if r.name.removesuffix(".done") not in lost])
    return copy


def _done_times(path: Path) -> tuple[int, int]:
    fields = dict(
        line.replace(" ", "").split(":")
        for line in path.with_name(f"{path.name}.done").read_text().split("\n")
        if line
    )
    return int(fields["starttime"]), int(fields["endtime"])


def _logged(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == event]


def _planned(runner: CollectionRunner) -> bool:
    return runner.pipeline is not None


def _finished(runner: CollectionRunner) -> bool:
    return runner.finished


class Daemon:
    """A :class:`Collector` following ``watch`` in a thread; :meth:`settle` waits for it."""

    def __init__(self, watch: Path, out: Path, **options: Any) -> None:
        options = {"poll_interval_s": 0.02, "window_s": 0.1, **options}
        self.collector = Collector(CollectorConfig(watch_dir=watch, output=out, **options))
        self.polls = 0
        discover = self.collector._discover

        def counted() -> Any:
            self.polls += 1
            return discover()

        self.collector._discover = counted  # type: ignore[method-assign]
        self.code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.code = self.collector.run()
        except BaseException as err:  # re-raised by the test thread
            self.error = err

    def __enter__(self) -> Daemon:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.collector.stop.set()
        self.thread.join(60)
        if self.error is not None:
            raise self.error

    @property
    def runner(self) -> CollectionRunner:
        (runner,) = self.collector.runners.values()
        return runner

    def wait_polls(self, count: int, timeout: float = 30) -> None:
        first, deadline = self.polls + count, time.monotonic() + timeout
        while self.polls < first:
            assert self.thread.is_alive(), self.error
            assert time.monotonic() < deadline, "the daemon stopped polling"
            time.sleep(0.01)

    def settle(self, until: Callable[[CollectionRunner], bool] = _planned, timeout: float = 90) -> None:
        """Wait two whole polls, then until everything is read and committed and ``until`` holds."""
        first = self.polls + 2
        deadline = time.monotonic() + timeout
        while not (
            self.polls >= first
            and self.collector.runners
            and all(
                r.caught_up and not r.dirty and not r.in_flight and until(r)
                for r in self.collector.runners.values()
            )
        ):
            assert self.thread.is_alive(), self.error
            assert time.monotonic() < deadline, "the daemon never settled"
            time.sleep(0.01)


@pytest.fixture
def small_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 MB aging reserve instead of the collector's 20 MB, so that MB-sized runs reach the limit."""
    monkeypatch.setattr(collector, "AgingPolicy", partial(AgingPolicy, reserve_bytes=MB))


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield cast("list[dict[str, Any]]", captured)  # structlog types its entries as MutableMapping


# -- torn writes and late .done -------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream", ["device_0/data/stars_soc.data.0", "host/data/aging.additional.task_memory_info"]
)
def test_a_torn_tail_completed_later_loses_and_doubles_nothing(
    raw: Path, offline: Rows, tmp_path: Path, stream: str
) -> None:
    """A slice that ends mid-record is read to its last whole record; the rest is read once it is written."""
    prof = tmp_path / "watch" / raw.name
    first, *_ = _slices(raw, stream)
    data = (raw / first).read_bytes()
    cut = len(data) // 2 | 1  # odd: never a record boundary
    _put(raw, prof, [r for r in _files(raw) if _stream(r) != stream and not _is_end(r)])
    (prof / first).write_bytes(data[:cut])
    with Daemon(tmp_path / "watch", tmp_path / "out") as daemon:
        daemon.settle()
        assert daemon.runner.window >= 0
        with (prof / first).open("ab") as tail:
            tail.write(data[cut:])
        _put(raw, prof, [r for r in _files(raw) if _stream(r) == stream and r != first])
        daemon.settle()
        _put(raw, prof, [r for r in _files(raw) if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert rows(daemon_parquet(tmp_path / "out")) == offline


def test_slices_whose_done_arrives_late(
    raw: Path, offline: Rows, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Slices are read before their ``.done``; each slice the plan reads is reported processed once,
    after its ``.done`` came (slices of families no table needs are never reported)."""
    prof = tmp_path / "watch" / raw.name
    data = [r for r in _files(raw) if _is_data(r) and not r.name.endswith(".done")]
    dones = [r for r in _files(raw) if _is_data(r) and r.name.endswith(".done")]
    _put(raw, prof, [r for r in _files(raw) if not _is_data(r) and not _is_end(r)] + data)
    with Daemon(tmp_path / "watch", tmp_path / "out") as daemon:
        daemon.settle()
        assert daemon.runner.window >= 0
        assert not _logged(logs, events.SLICE_PROCESSED)
        _put(raw, prof, dones)
        daemon.settle()
        _put(raw, prof, [r for r in _files(raw) if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert rows(daemon_parquet(tmp_path / "out")) == offline
    read = {p.name for p in daemon.runner.planned_files}  # the slices of the families the plan reads
    assert {r.name for r in data if "stars_soc" in r.name or "task_track" in r.name} <= read
    reported = Counter(e["file"] for e in _logged(logs, events.SLICE_PROCESSED))
    assert reported == Counter(read)


# -- lost raw data ---------------------------------------------------------------------------------


def _gaps(out: Path) -> list[dict[str, Any]]:
    (found,) = out.rglob(GAPS_NAME)
    gaps: list[dict[str, Any]] = msgspec.json.decode(found.read_bytes())
    return gaps


def test_a_slice_aged_by_the_profiler_before_it_was_read_is_a_recorded_gap(
    raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logs: list[dict[str, Any]]
) -> None:
    """The slice vanishes between the daemon's listing and its reading: gaps.json and a ``gap`` event
    hold its file, size and ``.done`` time range; every other row equals an export of what is left."""
    prof = tmp_path / "watch" / raw.name
    victim = _slices(raw, "device_0/data/stars_soc.data.0")[0]
    update = CollectionRunner.update

    def age_after_listing(runner: CollectionRunner, profile: Any) -> None:
        update(runner, profile)
        if runner.pipeline is not None and (prof / victim).exists():
            (prof / victim).unlink()  # the profiler ages a slice with its .done
            (prof / f"{victim}.done").unlink()

    monkeypatch.setattr(CollectionRunner, "update", age_after_listing)
    _put(raw, prof, [r for r in _files(raw) if not _is_end(r)])
    with Daemon(tmp_path / "watch", tmp_path / "out") as daemon:
        daemon.settle()
        _put(raw, prof, [r for r in _files(raw) if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    start, end = _done_times(raw / victim)
    gap = {"file": victim.name, "bytes": (raw / victim).stat().st_size, "start": start, "end": end}
    assert _gaps(tmp_path / "out") == [{**gap, "reason": "aged_unread"}]
    daemon_gaps = [e for e in _logged(logs, events.GAP) if e.get("component") == "daemon"]
    assert [{k: e[k] for k in gap} for e in daemon_gaps] == [gap]
    expected = offline_rows(_without(raw, {victim.name}, tmp_path / "rest").parent, tmp_path / "offline")
    assert rows(daemon_parquet(tmp_path / "out")) == expected


def test_a_gap_found_while_a_checkpoint_is_saved_goes_into_a_checkpoint_saved_after_it(
    raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints are saved in the background, one at a time in window order. A slice aged unread
    while one is being saved (held here until the gap is found) is recorded once that save is done,
    in a checkpoint of the newest commit: no checkpoint goes back to an older window, and the end
    holds the gap and every other row."""
    prof = tmp_path / "watch" / raw.name
    victim = _slices(raw, "device_0/data/stars_soc.data.0")[-1]
    release = threading.Event()
    saved: list[int] = []
    saving_at_gap: list[int] = []
    save, mid_commit = ckpt.save, CollectionRunner._mid_commit
    update, record_gaps = CollectionRunner.update, CollectionRunner._record_gaps

    def counted_save(path: Path, checkpoint: ckpt.Checkpoint) -> None:
        saved.append(checkpoint.window)
        save(path, checkpoint)

    def held(runner: CollectionRunner, window: int) -> None:
        release.wait(60)
        mid_commit(runner, window)

    def age_while_saving(runner: CollectionRunner, profile: Any) -> None:
        if runner.saving and not release.is_set() and not (prof / victim).exists():
            _put(raw, prof, [victim, victim.with_name(f"{victim.name}.done")])
            update(runner, profile)  # listed, then aged before the pipeline reads it
            (prof / victim).unlink()
            (prof / f"{victim}.done").unlink()
            # the next poll finds it gone (at once: with the save held, the loop could soon be
            # waiting for it in a commit)
            update(runner, profile)
            return
        update(runner, profile)

    def noted(runner: CollectionRunner, gaps: list[ckpt.Gap]) -> None:
        saving_at_gap.append(len(runner.saving))
        release.set()
        record_gaps(runner, gaps)

    monkeypatch.setattr(ckpt, "save", counted_save)
    monkeypatch.setattr(CollectionRunner, "_mid_commit", held)
    monkeypatch.setattr(CollectionRunner, "update", age_while_saving)
    monkeypatch.setattr(CollectionRunner, "_record_gaps", noted)
    _put(
        raw, prof, [r for r in _files(raw) if not _is_end(r) and r.name.removesuffix(".done") != victim.name]
    )
    with Daemon(tmp_path / "watch", tmp_path / "out") as daemon:
        daemon.settle(lambda runner: release.is_set())
        _put(raw, prof, [r for r in _files(raw) if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert saving_at_gap and saving_at_gap[0] > 0  # the gap was found while a save was held
    assert saved == sorted(saved)
    final = ckpt.load(daemon.runner.checkpoint_path)
    assert final is not None
    assert final.finished
    assert [g.file for g in final.gaps] == [victim.name]
    assert [g["file"] for g in _gaps(tmp_path / "out")] == [victim.name]
    expected = offline_rows(_without(raw, {victim.name}, tmp_path / "rest").parent, tmp_path / "offline")
    assert rows(daemon_parquet(tmp_path / "out")) == expected


def test_a_slice_aged_after_it_was_read_is_no_gap(raw: Path, offline: Rows, tmp_path: Path) -> None:
    """Control for the test above: the profiler ages a slice the daemon already committed. It
    leaves the daemon's storage-limit books too (left in, it had counted for ever and come up for
    aging again, a false gap of 0 bytes)."""
    prof = tmp_path / "watch" / raw.name
    victim = _slices(raw, "device_0/data/stars_soc.data.0")[0]
    _put(raw, prof, [r for r in _files(raw) if not _is_end(r)])
    with Daemon(tmp_path / "watch", tmp_path / "out", storage_limit_mb=100_000) as daemon:
        daemon.settle()
        policy = daemon.runner.policy
        assert policy is not None
        stored = policy.total_bytes
        (prof / victim).unlink()
        (prof / f"{victim}.done").unlink()
        daemon.settle()
        victim_bytes = (raw / victim).stat().st_size + (raw / f"{victim}.done").stat().st_size
        assert policy.total_bytes == stored - victim_bytes
        _put(raw, prof, [r for r in _files(raw) if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert not list((tmp_path / "out").rglob(GAPS_NAME))
    assert rows(daemon_parquet(tmp_path / "out")) == offline


@pytest.mark.usefixtures("small_reserve")
def test_storage_limit_ages_only_processed_slices(
    big: Path, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Slices arrive a slice number at a time; the limit ages some, each after it was reported processed."""
    prof = tmp_path / "watch" / big.name
    files = _files(big)
    rounds: dict[int, list[Path]] = {}
    for rel in files:
        match = SLICE.match(rel.name.removesuffix(".done"))
        if match is not None:
            rounds.setdefault(int(match["n"]), []).append(rel)
    _put(big, prof, [r for r in files if not _is_data(r) and not _is_end(r)] + rounds.pop(0))
    with Daemon(tmp_path / "watch", tmp_path / "out", storage_limit_mb=LIMIT_MB) as daemon:
        daemon.settle()
        for number in sorted(rounds):
            _put(big, prof, rounds[number])
            daemon.settle()
        _put(big, prof, [r for r in files if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert not list((tmp_path / "out").rglob(GAPS_NAME))
    assert not _logged(logs, events.GAP)
    processed: set[str] = set()
    aged: list[str] = []
    for event in logs:
        if event["event"] == events.SLICE_PROCESSED:
            processed.add(event["file"])
        elif event["event"] == events.AGED:
            assert not event["forced"]
            assert set(event["files"]) <= processed, "aged before it was processed"
            aged += event["files"]
    assert aged
    assert not any((prof / r).exists() for r in files if r.name in aged)
    assert rows(daemon_parquet(tmp_path / "out")) == offline_rows(big.parent, tmp_path / "offline")


@pytest.mark.usefixtures("small_reserve")
def test_storage_limit_forcing_unread_slices_records_the_gaps(
    big: Path, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Host data beyond the limit arrives before any device data (the daemon cannot plan yet): the
    limit forces unread slices out, each a recorded gap; the rest equals an export of what is left."""
    prof = tmp_path / "watch" / big.name
    files = _files(big)
    _put(big, prof, [r for r in files if not _is_end(r) and not (_is_data(r) and r.parts[0] != "host")])
    with Daemon(tmp_path / "watch", tmp_path / "out", storage_limit_mb=LIMIT_MB) as daemon:
        daemon.settle(lambda runner: bool(runner.gaps))
        # the device's streams appear at once: a stream that appears after data was lost is ignored
        _put(big, tmp_path / "stage", [r for r in files if _is_data(r) and r.parts[0] != "host"])
        (tmp_path / "stage" / "device_0" / "data").rename(prof / "device_0" / "data")
        daemon.settle()
        _put(big, prof, [r for r in files if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    gaps = _gaps(tmp_path / "out")
    assert gaps
    host = {r.name: r for r in files if r.parts[0] == "host" and _is_data(r)}
    for gap in gaps:
        rel = host[gap["file"]]
        assert gap["reason"] == "storage_limit"
        assert (gap["bytes"], gap["start"], gap["end"]) == (
            (big / rel).stat().st_size,
            *_done_times(big / rel),
        )
        assert not (prof / rel).exists()
    logged = [(e["file"], e["start"], e["end"]) for e in _logged(logs, events.GAP) if e.get("reason")]
    assert logged == [(g["file"], g["start"], g["end"]) for g in gaps]
    lost = {g["file"] for g in gaps}
    # the rows are an export's only if each stream lost its oldest slices: an export reads the slices
    # around a hole as one stream (misaligned), where the daemon's reader re-aligns after the gap
    for stream in {_stream(host[name]) for name in lost}:
        assert stream is not None
        gone = [r.name in lost for r in _slices(big, stream)]
        assert gone == sorted(gone, reverse=True), f"a hole in {stream}: {gone}"
    expected = offline_rows(_without(big, lost, tmp_path / "rest").parent, tmp_path / "offline")
    assert rows(daemon_parquet(tmp_path / "out")) == expected


# -- corrupt records ------------------------------------------------------------------------------


def _corrupt(prof: Path) -> tuple[Path, int, bytes]:
    """Break the device-log magic of a stars_soc record in the stream's last slice.

    Returns the slice, the record's offset in it and the original bytes.
    """
    slices = _slices(prof, "device_0/data/stars_soc.data.0")
    before = sum((prof / s).stat().st_size for s in slices[:-1])
    offset = -before % STARS_RECORD + 5 * STARS_RECORD  # the sixth whole record of the last slice
    path = prof / slices[-1]
    data = path.read_bytes()
    path.write_bytes(data[: offset + 2] + b"\0\0" + data[offset + 4 :])
    return path, offset, data


#: small reads, so that windows commit before the reader reaches the corrupt record
ERROR_RUN = {"once": True, "on_invalid": "error", "chunk_bytes": 16384, "window_steps": 8}


def _stopped_by_a_corrupt_record(raw: Path, tmp_path: Path) -> tuple[Daemon, Path, int, bytes]:
    watch = tmp_path / "watch"
    _put(raw, watch / raw.name, _files(raw))
    path, offset, original = _corrupt(watch / raw.name)
    with Daemon(watch, tmp_path / "out", **ERROR_RUN) as daemon:
        daemon.thread.join(90)
    return daemon, path, offset, original


def test_a_corrupt_record_under_error_stops_the_collection_keeping_its_commits(
    raw: Path, offline: Rows, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """``on_invalid = "error"``: exit code 1 and a ``decode_error`` naming the slice and the offset in
    it; the windows committed before stay, each row one of the export's, the checkpoint intact."""
    daemon, path, offset, _ = _stopped_by_a_corrupt_record(raw, tmp_path)
    assert daemon.code == 1
    (error,) = _logged(logs, events.DECODE_ERROR)
    assert (error["path"], error["offset"]) == (str(path), offset)
    assert f"{path}, byte offset {offset}" in error["error"]
    committed = rows(daemon_parquet(tmp_path / "out"))
    assert committed
    assert all(not (counted - offline[table]) for table, counted in committed.items())
    (found,) = (tmp_path / "out").rglob(ckpt.CHECKPOINT_NAME)
    checkpoint = ckpt.load(found)
    assert checkpoint is not None and checkpoint.window >= 0 and not checkpoint.finished


def test_a_run_after_the_corrupt_file_is_repaired_completes_exactly(
    raw: Path, offline: Rows, tmp_path: Path
) -> None:
    """The stopped collection resumes from its last commit once the file is repaired."""
    daemon, path, _, original = _stopped_by_a_corrupt_record(raw, tmp_path)
    assert daemon.code == 1
    path.write_bytes(original)
    with Daemon(tmp_path / "watch", tmp_path / "out", **ERROR_RUN) as again:
        again.thread.join(90)
    assert again.code == 0
    assert rows(daemon_parquet(tmp_path / "out")) == offline


def _refused(watch: Path, out: Path, message: str) -> None:
    """A daemon started on ``out`` stops with a CheckpointError matching ``message``; no output changes."""
    before = sorted((p.relative_to(out), p.stat().st_size) for p in out.rglob("*.parquet"))
    with pytest.raises(ckpt.CheckpointError, match=message):  # noqa: SIM117
        with Daemon(watch, out) as again:
            again.thread.join(60)
    assert sorted((p.relative_to(out), p.stat().st_size) for p in out.rglob("*.parquet")) == before


def test_a_checkpoint_whose_operator_state_is_corrupt_is_refused_naming_it(raw: Path, tmp_path: Path) -> None:
    """A checkpoint that decodes but holds a corrupt operator state stops the daemon with a
    CheckpointError naming the file, and the committed outputs stay as they are: a flipped byte in a
    compressed state on disk (which could decompress into another state) fails the snapshot's CRC-32;
    a state that does not restore fails the restore, not with Arrow's or msgspec's own error."""
    files = _files(raw)
    watch, out = tmp_path / "watch", tmp_path / "out"
    _put(raw, watch, [r for r in files if not _is_end(r)])
    with Daemon(watch, out) as daemon:
        daemon.settle()
        path = daemon.runner.checkpoint_path
    saved = ckpt.load(path)
    assert saved is not None and saved.window >= 0 and saved.snapshot_crc32 is not None
    snapshot = msgspec.msgpack.decode(saved.snapshot)
    largest = max(range(len(snapshot["operators"])), key=lambda i: len(snapshot["operators"][i]))
    blob = bytearray(path.read_bytes())
    at = bytes(blob).find(snapshot["operators"][largest]) + len(snapshot["operators"][largest]) // 2
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))
    _refused(watch, out, f"cannot read the checkpoint {path}: its snapshot's CRC-32 is")
    snapshot["operators"][largest] = ckpt.compress_state(b"not an operator state")
    ckpt.save(path, msgspec.structs.replace(saved, snapshot=msgspec.msgpack.encode(snapshot)))
    _refused(watch, out, f"cannot restore the pipeline from the checkpoint {path}")


def test_a_corrupt_record_under_skip_is_counted_and_logged(
    raw: Path, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """``on_invalid = "skip"``: the record is dropped, counted in a ``records_dropped`` event, and the
    rest equals an offline export under the same policy."""
    watch = tmp_path / "watch"
    _put(raw, watch / raw.name, _files(raw))
    _corrupt(watch / raw.name)
    with Daemon(watch, tmp_path / "out", once=True, on_invalid="skip") as daemon:
        daemon.thread.join(90)
    assert daemon.code == 0
    dropped = [e for e in _logged(logs, events.RECORDS_DROPPED) if e.get("family") == "stars_soc"]
    assert sum(e["count"] for e in dropped) == 1
    offline_skip = tmp_path / "offline"
    from profstream.export import export

    export(watch, layout="parquet", output=offline_skip, on_invalid="skip")
    assert rows(daemon_parquet(tmp_path / "out")) == rows(offline_skip / "parquet")


# -- the watch directory --------------------------------------------------------------------------


def test_a_watch_dir_that_disappears_and_comes_back(
    raw: Path, offline: Rows, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """The daemon logs the missing directory once, keeps running, and resumes where it was."""
    watch, away = tmp_path / "watch", tmp_path / "away"
    files = _files(raw)
    first = [
        r
        for r in files
        if not _is_end(r) and (not _is_data(r) or r.name.endswith(("slice_0", "slice_0.done")))
    ]
    _put(raw, watch / raw.name, first)
    with Daemon(watch, tmp_path / "out") as daemon:
        daemon.settle()
        watch.rename(away)
        daemon.wait_polls(3)
        assert _logged(logs, events.WATCH_DIR_MISSING)
        away.rename(watch)
        _put(raw, watch / raw.name, [r for r in files if r not in first and not _is_end(r)])
        daemon.settle()
        _put(raw, watch / raw.name, [r for r in files if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0
    assert not list((tmp_path / "out").rglob(GAPS_NAME))
    assert rows(daemon_parquet(tmp_path / "out")) == offline


@pytest.mark.parametrize("at_step", [1, 2, 5])
def test_a_watch_dir_moved_away_while_it_is_read(
    raw: Path, offline: Rows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_step: int
) -> None:
    """Moved away inside a pipeline step (the readers hold paths into it): the daemon neither dies nor
    takes the vanished slices for aged ones; it resumes from its last commit once the directory is back."""
    watch, away = tmp_path / "watch", tmp_path / "away"
    files = _files(raw)
    steps = {"left": 0}
    step = Pipeline.step

    def move_away_mid_step(pipeline: Pipeline) -> Any:
        steps["left"] -= 1
        if steps["left"] == 0:
            watch.rename(away)
        return step(pipeline)

    monkeypatch.setattr(Pipeline, "step", move_away_mid_step)
    _put(raw, watch / raw.name, [r for r in files if not _is_end(r)])
    with Daemon(watch, tmp_path / "out", window_steps=2) as daemon:
        daemon.settle(lambda runner: runner.window >= 1)
        steps["left"] = at_step
        _put(raw, watch / raw.name, [r for r in files if _is_end(r)])
        deadline = time.monotonic() + 30
        while not away.exists():
            assert time.monotonic() < deadline, "never moved away"
            time.sleep(0.01)
        daemon.wait_polls(3)
        away.rename(watch)
        daemon.settle(_finished)
    assert daemon.code == 0
    assert not list((tmp_path / "out").rglob(GAPS_NAME))
    assert rows(daemon_parquet(tmp_path / "out")) == offline


# -- the window writer ----------------------------------------------------------------------------


def test_a_killed_window_writer_is_replaced_and_the_run_resumes_from_its_last_commit(
    raw: Path, offline: Rows, tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """The writer process dies (OOM killer, kill -9) between commits: the collector logs it, plans the
    collection again from its last checkpoint with a new writer, and loses or doubles nothing."""
    watch = tmp_path / "watch" / raw.name
    files = _files(raw)
    _put(raw, watch, [r for r in files if not _is_end(r)])
    with Daemon(tmp_path / "watch", tmp_path / "out", window_steps=2) as daemon:
        daemon.settle(lambda runner: runner.window >= 1)
        writer = daemon.runner.windows
        assert isinstance(writer, ForkedWindows)
        assert writer.pid is not None
        os.kill(writer.pid, signal.SIGKILL)
        _put(raw, watch, [r for r in files if _is_end(r)])
        daemon.settle(_finished)
        assert daemon.runner.windows is not writer
    assert daemon.code == 0
    assert _logged(logs, events.WINDOW_WRITER_LOST)
    assert rows(daemon_parquet(tmp_path / "out")) == offline


def test_lag_is_the_wait_of_the_oldest_complete_slice_not_read_yet(raw: Path, tmp_path: Path) -> None:
    """0 while the pipeline has read every complete slice (to its end: the last slice of a stream is
    read when the reader stands at its end); a complete slice written while the pipeline reads
    nothing counts from its ``.done``'s time; data older than the run counts from the run's start,
    so an offline directory does not look hours behind."""
    watch = tmp_path / "watch" / raw.name
    files = _files(raw)
    stream = "device_0/data/stars_soc.data.0"
    last = _slices(raw, stream)[-1]
    held = [last, last.with_name(f"{last.name}.done")]
    _put(raw, watch, [r for r in files if not _is_end(r) and r not in held])
    started = time.time()
    with Daemon(tmp_path / "watch", tmp_path / "out") as daemon:
        daemon.settle()
        runner = daemon.runner
        assert runner.lag_s(time.time() + 60) == 0.0
        assert all(since >= started for since in runner.known_since.values())
        runner.blocked = True  # the pipeline reads nothing more (as while the output disk is full)
        _put(raw, watch, held)
        daemon.wait_polls(3)
        done_at = (watch / held[1]).stat().st_mtime
        assert 59 < runner.lag_s(done_at + 60) <= 60  # from its .done, or from when a poll found it
        runner.blocked = False
        daemon.settle()
        assert runner.lag_s(done_at + 60) == 0.0
        _put(raw, watch, [r for r in files if _is_end(r)])
        daemon.settle(_finished)
    assert daemon.code == 0


@pytest.fixture(scope="module")
def torch_npu(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Rows]:
    """A finished torch_npu run (its ``*_ascend_pt`` dir) and the rows of its offline export."""
    root = tmp_path_factory.mktemp("torch_npu")
    cfg = SimulationConfig(chip="910B", steps=3, framework="torch_npu", seed=3, slice_bytes=64 * 1024)
    pt = _prof(cfg, root)
    return pt, offline_rows(pt.parent, root / "offline")


def _at_stop(rel: Path) -> bool:
    """Written when torch_npu stops profiling: the collection's end files and profiler_info.json."""
    return _is_end(rel) or rel.name.startswith("profiler_info")


def _before_the_stop(pt: Path, tmp_path: Path) -> tuple[list[Path], Path, Path]:
    """The files of the run, and a watch dir holding what torch_npu has written before it stops (and
    the daemon's output dir)."""
    files = _files(pt)
    watch, out = tmp_path / "watch", tmp_path / "out"
    _put(pt, watch / pt.name, [r for r in files if not _at_stop(r)])
    return files, watch, out


def _clock_events(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in e.items() if k not in ("log_level", "component", "collection")}
        for e in logs
        if e["event"] == events.FRAMEWORK_CLOCK
    ]


def test_a_torch_npu_collection_without_the_host_sync_waits_for_profiler_info_and_says_so(
    torch_npu: tuple[Path, Rows], tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Without host/host_start.log the framework clock needs profiler_info.json's own start_info,
    which torch_npu writes when profiling stops: until then the collection is not planned, the daemon
    logs what it waits for once, and its lag counts from the oldest complete file; then it plans and
    ends with the offline rows."""
    pt, offline = torch_npu
    files = _files(pt)
    last = [r for r in files if _at_stop(r) or r.name == "host_start.log"]
    watch = tmp_path / "watch"
    _put(pt, watch / pt.name, [r for r in files if r not in last])
    with Daemon(watch, tmp_path / "out") as daemon:
        daemon.wait_polls(5)
        runner = daemon.runner
        assert runner.pipeline is None
        (waits,) = _logged(logs, events.PLANNING_WAITS)
        assert "profiler_info.json" in waits["waits_for"] and "host_start.log" in waits["waits_for"]
        oldest = min(runner.known_since.values())
        assert runner.lag_s(oldest + 60) == 60
        _put(pt, watch / pt.name, last)
        daemon.settle(_finished)
        assert runner.lag_s(time.time() + 60) == 0.0
    assert daemon.code == 0
    assert rows(daemon_parquet(tmp_path / "out")) == offline
    assert _clock_events(logs) == []  # planned on profiler_info.json itself


def test_a_torch_npu_run_is_followed_on_the_clock_its_data_tells_and_resumed_on_it(
    torch_npu: tuple[Path, Rows], tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Before profiler_info.json the daemon plans on the clock the first framework timestamp tells
    (syscnt ticks in the simulator), reads the framework records and commits rows as they come (this
    run is shorter than the framework reorder window, so its ops wait for the end); the checkpoint
    keeps the assumption, so a restart after profiler_info.json came plans on it, finds it confirmed,
    and ends with the offline rows. A collection that has ended says that it waits for the file."""
    pt, offline = torch_npu
    files, watch, out = _before_the_stop(pt, tmp_path)
    _put(pt, watch / pt.name, [r for r in files if _is_end(r)])
    with Daemon(watch, out) as daemon:
        daemon.settle()
        runner = daemon.runner
        assert runner.assumed_syscnt is True
        assert not runner.follow.closing  # the last rows wait for profiler_info.json
        (waits,) = _logged(logs, events.PLANNING_WAITS)
        assert waits["waits_for"].startswith("profiler_info.json")
        assert daemon.collector.metrics.records["torch_op_range"] > 0
        checkpoint_path = runner.checkpoint_path
    saved = ckpt.load(checkpoint_path)
    assert saved is not None and saved.assumed_syscnt is True and not saved.finished
    committed = rows(daemon_parquet(out))  # out before profiler_info.json, and already the offline rows
    assert committed and all(not (found - offline[table]) for table, found in committed.items())
    _put(pt, watch / pt.name, [r for r in files if r.name.startswith("profiler_info")])
    with Daemon(watch, out) as daemon:
        daemon.settle(_finished)
        assert daemon.runner.assumed_syscnt is None
    assert daemon.code == 0
    assert rows(daemon_parquet(out)) == offline
    assert _clock_events(logs) == [
        {"event": events.FRAMEWORK_CLOCK, "assumed": True, "syscnt_enable": True},
        {"event": events.FRAMEWORK_CLOCK, "confirmed": True, "syscnt_enable": True},
    ]


@pytest.mark.parametrize("level", ["Level1", "Level0"])
def test_profiler_info_that_confirms_the_assumed_clock_lets_the_run_end_with_the_offline_rows(
    torch_npu: tuple[Path, Rows], tmp_path: Path, logs: list[dict[str, Any]], level: str
) -> None:
    """profiler_info.json coming while the daemon runs confirms the clock. At Level1 the torch_npu
    windows already hold its files and the runner goes on; at Level0 (no statistics, no CANN API layer)
    a new runner resumes from the last commit, so that the windows after it follow the level. Either
    way the rows are the offline export's, once."""
    pt, offline = torch_npu
    files, watch, out = _before_the_stop(pt, tmp_path)
    with Daemon(watch, out) as daemon:
        daemon.settle()
        first = daemon.runner
        assert first.window >= 0 and first.assumed_syscnt is True and first.layout == "torch_npu"
        stop = [r for r in files if _at_stop(r)]
        _put(pt, watch / pt.name, [r for r in stop if not r.name.startswith("profiler_info")])
        info = json.loads((pt / "profiler_info.json").read_text())
        info["config"]["experimental_config"]["_profiler_level"] = level
        (watch / pt.name / "profiler_info.json").write_text(json.dumps(info))
        daemon.settle(_finished)
        assert (daemon.runner is first) == (level == "Level1")
        framework = daemon.runner.framework
        assert framework is None if level == "Level1" else framework.profiler_level == level
    assert daemon.code == 0
    assert rows(daemon_parquet(out)) == offline
    confirmed = {"event": events.FRAMEWORK_CLOCK, "confirmed": True, "syscnt_enable": True}
    assert confirmed in _clock_events(logs)


def test_a_wrong_assumed_clock_starts_the_collection_over_when_profiler_info_comes(
    torch_npu: tuple[Path, Rows], tmp_path: Path, logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the data tell the wrong clock (ns where torch_npu counted ticks), profiler_info.json
    shows it: the collection starts over on the right clock while the raw data is all there, and ends
    with the offline rows."""
    monkeypatch.setattr(collector, "framework_counts_syscnt", lambda *_, **__: False)
    pt, offline = torch_npu
    files, watch, out = _before_the_stop(pt, tmp_path)
    with Daemon(watch, out, layout="parquet") as daemon:
        daemon.settle()
        assert daemon.runner.assumed_syscnt is False and daemon.runner.window >= 0
        _put(pt, watch / pt.name, [r for r in files if _at_stop(r)])
        daemon.settle(_finished)
        assert daemon.runner.assumed_syscnt is None
    assert daemon.code == 0
    assert rows(daemon_parquet(out)) == offline
    assert _clock_events(logs)[-1] == {
        "event": events.FRAMEWORK_CLOCK,
        "confirmed": False,
        "syscnt_enable": False,
        "action": "start over",
    }


def test_a_wrong_assumed_clock_is_kept_and_logged_once_raw_data_was_aged(
    torch_npu: tuple[Path, Rows], tmp_path: Path, logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the profiler has aged a slice (here a device stream's slice_0, read and committed), starting
    over would lose it: the daemon keeps the assumed clock, says so in an error event, and ends."""
    monkeypatch.setattr(collector, "framework_counts_syscnt", lambda *_, **__: False)
    pt, _ = torch_npu
    files, watch, out = _before_the_stop(pt, tmp_path)
    with Daemon(watch, out, layout="parquet") as daemon:
        daemon.settle()
        first = next(r for r in files if _is_data(r) and r.name.endswith("slice_0") and "device" in str(r))
        for rel in (first, first.with_name(f"{first.name}.done")):
            (watch / pt.name / rel).unlink()
        _put(pt, watch / pt.name, [r for r in files if _at_stop(r)])
        daemon.settle(_finished)
        assert daemon.runner.assumed_syscnt is False
    assert daemon.code == 0
    assert _clock_events(logs)[-1] == {
        "event": events.FRAMEWORK_CLOCK,
        "confirmed": False,
        "syscnt_enable": False,
        "action": "kept: raw data already aged, the framework times follow the assumed clock",
    }
