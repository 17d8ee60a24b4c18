"""The live simulator: the moving target the daemon follows (issue 6, point 5).

A live run writes the batch simulation's bytes over time, slice by slice, each
``.done`` only after its slice is complete, control files first and end_info
last; with a storage limit its collector ages slices by the §4g rules.
"""

from __future__ import annotations

import filecmp
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

import profstream
from profstream.cli import main
from profstream.daemon.aging import MB, NEVER_AGED
from profstream.errors import ConfigError
from profstream.simulate import LiveResult, SimulationConfig, live, simulate

SMALL = SimulationConfig(chip="910A", steps=3, ops_per_step=48, slice_bytes=4096)
RECORD_BYTES = {"hwts.data": 64, "aicore.data": 128}
SLICE = re.compile(r"^(?P<family>.+)\.slice_(?P<n>\d+)$")
Snapshot = dict[str, int]  # relative path -> size


def _snapshot(root: Path) -> Snapshot:
    found = {}
    for where, _, names in os.walk(root):
        for name in names:
            path = Path(where, name)
            try:
                found[str(path.relative_to(root))] = path.stat().st_size
            except FileNotFoundError:  # aged between the listing and the stat
                continue
    return found


class _Watcher:
    """Runs :func:`live` in a thread and checks the directory each time it looks."""

    def __init__(self, root: Path, run: Callable[[], LiveResult]) -> None:
        self.root = root
        self.states: set[frozenset[tuple[str, int]]] = set()
        self.partial_tail_seen = False
        self.data_seen_before_end_info = False
        self.result: LiveResult | None = None
        self.error: BaseException | None = None
        self._run = run

    def watch(self) -> LiveResult:
        thread = threading.Thread(target=self._target)
        thread.start()
        while thread.is_alive():
            self._look()
            thread.join(0.002)
        self._look()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def _target(self) -> None:
        try:
            self.result = self._run()
        except BaseException as exc:  # re-raised in the watching thread
            self.error = exc

    def _look(self) -> None:
        snapshot = _snapshot(self.root)
        self.states.add(frozenset(snapshot.items()))
        done = {name.removesuffix(".done") for name in snapshot if name.endswith(".done")}
        for name in sorted(done):
            self._check_done(name)
        data = [n for n in snapshot if "/data/" in n and not n.endswith(".done")]
        if data and not any("end_info" in n for n in snapshot):
            self.data_seen_before_end_info = True
            for control in ("info.json", "sample.json", "start_info", "host_start.log"):
                assert any(n.endswith(f"host/{control}") for n in snapshot), control
        for name in data:
            record = next((size for base, size in RECORD_BYTES.items() if base in name), None)
            if name not in done and record and snapshot[name] % record:
                self.partial_tail_seen = True

    def _check_done(self, name: str) -> None:
        """A ``.done`` exists only once its file is complete: the sizes agree."""
        try:
            text = (self.root / f"{name}.done").read_text()
            size = (self.root / name).stat().st_size
        except FileNotFoundError:  # aged meanwhile
            return
        if not text.endswith("\n"):  # the marker is being written
            return
        declared = re.match(r"filesize:(\d+)\n", text)
        assert declared is not None, text
        assert int(declared[1]) == size, name


def _records(root: Path) -> dict[tuple[str, str, bool | None], int]:
    report = profstream.open(root).inspect()
    return {
        (place.place, fam.family, fam.aging): fam.records
        for prof in report.profiles
        for place in prof.dirs
        for fam in place.families
    }


def _same_tree(left: Path, right: Path) -> None:
    a, b = _snapshot(left), _snapshot(right)
    assert a.keys() == b.keys()
    for name in a:
        assert filecmp.cmp(left / name, right / name, shallow=False), name


def test_a_live_run_writes_the_batch_collection_over_time(tmp_path: Path) -> None:
    out = tmp_path / "live"
    watcher = _Watcher(out, lambda: live(SMALL, out, 0.05))
    result = watcher.watch()
    assert len(watcher.states) >= 3
    assert watcher.data_seen_before_end_info
    assert watcher.partial_tail_seen  # the growing tail is written in pieces, not whole records
    assert result.aged == ()
    batch = tmp_path / "batch"
    simulate(SMALL, batch)
    _same_tree(out, batch)
    assert _records(out) == _records(batch)
    assert sum(_records(out).values()) > 0


def test_every_slice_is_marked_done_by_the_end(tmp_path: Path) -> None:
    result = live(SMALL, tmp_path / "out", 50.0).simulation
    assert result.files
    for path in result.files:
        assert Path(f"{path}.done").read_text().startswith(f"filesize:{path.stat().st_size}\n")


def test_duration_sets_the_amount_of_data_like_a_batch_budget(tmp_path: Path) -> None:
    rate, duration = 4.0, 0.1
    result = live(SMALL, tmp_path / "live", rate, duration_s=duration).simulation
    budget = int(rate * duration * MB)
    batch = simulate(msgspec.structs.replace(SMALL, target_bytes=budget), tmp_path / "batch")
    assert result.bytes >= budget
    assert result.steps == batch.steps > SMALL.steps
    _same_tree(tmp_path / "live", tmp_path / "batch")


def test_a_stop_event_closes_the_collection_early(tmp_path: Path) -> None:
    out, stop = tmp_path / "out", threading.Event()
    long_run = SimulationConfig(chip="910B", steps=10_000, ops_per_step=48, slice_bytes=4096)
    outcome: list[LiveResult] = []
    thread = threading.Thread(target=lambda: outcome.append(live(long_run, out, 0.05, stop_event=stop)))
    thread.start()
    while thread.is_alive() and not list(out.glob("*/device_0/data/*")):
        thread.join(0.01)
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    result = outcome[0].simulation
    assert result.steps < long_run.steps
    root = result.roots[0]
    assert (root / "host" / "end_info").is_file()
    for path in result.files:
        assert Path(f"{path}.done").is_file()


def test_storage_limit_ages_the_oldest_slices_like_the_collector(tmp_path: Path) -> None:
    config = SimulationConfig(chip="910A", steps=10, ops_per_step=48, slice_bytes=2048)
    out, limit_mb = tmp_path / "out", 0.2
    watcher = _Watcher(out, lambda: live(config, out, 2.0, storage_limit_mb=limit_mb, reserve_mb=0.05))
    outcome = watcher.watch()
    assert outcome.aged
    limit = int(limit_mb * MB)
    assert all(sum(size for _, size in state) <= limit for state in watcher.states)
    written = outcome.simulation.files
    on_disk = {p for p in out.rglob("*") if p.is_file()}
    for path in outcome.aged:
        assert path not in on_disk
        assert Path(f"{path}.done") not in on_disk
        assert not any(marker in path.name for marker in NEVER_AGED)
    streams: dict[Path, list[tuple[int, Path]]] = {}
    for path in written:
        match = SLICE.match(path.name)
        assert match is not None
        streams.setdefault(path.parent / match["family"], []).append((int(match["n"]), path))
    for stream, slices in streams.items():
        ordered = [p for _, p in sorted(slices)]
        kept = [p for p in ordered if p in on_disk]
        assert kept, f"the last slice of {stream.name} was aged"
        assert kept == ordered[-len(kept) :], f"{stream.name} lost a slice in the middle"
        if any(marker in stream.name for marker in NEVER_AGED):
            assert len(kept) == len(slices)
    for control in ("info.json", "sample.json", "start_info", "end_info", "host_start.log"):
        assert (outcome.simulation.roots[0] / "host" / control).is_file()


def test_live_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rate"):
        live(SMALL, tmp_path / "a", 0)
    with pytest.raises(ConfigError, match="duration"):
        live(SMALL, tmp_path / "b", 1.0, duration_s=-1)
    with pytest.raises(ConfigError, match="reserve"):
        live(SMALL, tmp_path / "c", 1.0, storage_limit_mb=10)  # within the collector's 20 MB reserve


def test_cli_live_simulation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--rate", "5", str(tmp_path / "no")]) == 2
    assert "--live" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["simulate", "--live", "--rate", "50", "--steps", "2", "--chip", "910A", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    batch = tmp_path / "batch"
    simulate(SimulationConfig(chip="910A", steps=2, ops_per_step=64), batch)
    _same_tree(out, batch)
