"""The AI Core Freq layer: msprof's C++ rows (start, changes, end) on the real 310B control files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from profstream.codecs import lpm_freq
from profstream.engine import discovery
from profstream.engine.operators.aicore_freq import AicoreFreq
from profstream.engine.runtime import DONE
from profstream.export import export
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.harness import check_snapshot, drive, table
from tests.engine.profdirs import make_prof, needs_realdata

pytestmark = needs_realdata


def freq_events(out: Path) -> list[tuple[str, int, int]]:
    """(ts, MHz, sort index) of each AI Core Freq counter of the msprof timeline in ``out``."""
    [trace] = out.rglob("msprof_*.json")
    events = json.loads(trace.read_text())
    events = events if isinstance(events, list) else events["traceEvents"]
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    return [(e["ts"], e["args"]["MHz"], sort[e["pid"]]) for e in events if e.get("name") == "AI Core Freq"]


def local_us(profile: discovery.Profile, ns: int) -> str:
    wall = ns + profile.wall_offset_ns
    return f"{wall // 1000}.{wall % 1000:03d}"


def control_times(prof: Path) -> tuple[int, int, int]:
    """The device's start and end (wall µs) and info.json aic_frequency (MHz)."""
    device = prof / "device_0"
    start = json.loads((device / "start_info.0").read_text())["collectionTimeBegin"]
    end = json.loads((device / "end_info.0").read_text())["collectionTimeEnd"]
    info = json.loads((device / "info.json.0").read_text())
    return int(start), int(end), int(float(info["DeviceInfo"][0]["aic_frequency"]))


def test_without_changes_the_start_and_end_carry_aic_frequency(tmp_path: Path) -> None:
    prof = make_prof(tmp_path)
    start, end, mhz = control_times(prof)
    export(prof, kind="timeline", layout="msprof", output=tmp_path / "out")
    assert freq_events(tmp_path / "out") == [(f"{start}.000", mhz, 15), (f"{end}.000", mhz, 15)]


def write_changes(prof: Path, offsets_ms: list[float], freqs: list[int]) -> list[int]:
    """lpmFreqConv records at the given ms from the collection start; their host-monotonic ns as read."""
    [profile] = discovery.discover(prof)
    clock = profile.clock(profile.device(0))
    start_us, _, _ = control_times(prof)
    start_ns = start_us * 1000 - profile.wall_offset_ns
    # syscnt ticks per ns from two conversions, then the ticks of each wanted time
    probe = np.array([10**12, 2 * 10**12], np.uint64)
    t0, t1 = clock.syscnt_to_ns(probe)
    per_ns = 10**12 / (int(t1) - int(t0))
    wanted = [start_ns + int(ms * 1e6) for ms in offsets_ms]
    syscnt = np.array([10**12 + round((t - int(t0)) * per_ns) for t in wanted], np.uint64)
    columns = {"syscnt": syscnt, "freq_mhz": np.array(freqs, np.uint32)}
    (prof / "device_0" / "data" / "lpmFreqConv.data.0.slice_0").write_bytes(lpm_freq.encode(columns))
    return [int(t) for t in clock.syscnt_to_ns(syscnt)]


def test_changes_before_the_start_set_its_frequency_and_the_last_one_the_end(tmp_path: Path) -> None:
    prof = make_prof(tmp_path)
    start, end, _ = control_times(prof)
    times = write_changes(prof, [-30, -5, 2, 7.5], [1100, 900, 1224, 650])
    export(prof, kind="timeline", layout="msprof", output=tmp_path / "out")
    [profile] = discovery.discover(prof)
    assert freq_events(tmp_path / "out") == [
        (f"{start}.000", 900, 15),  # the last change before the start
        (local_us(profile, times[2]), 1224, 15),
        (local_us(profile, times[3]), 650, 15),
        (f"{end}.000", 650, 15),
    ]


@pytest.fixture
def graph_run_910a(tmp_path: Path) -> Path:
    simulate(SimulationConfig(chip="910A", steps=2, ops_per_step=8, seed=3), tmp_path / "raw")
    return tmp_path / "raw"


def test_a_910a_has_no_frequency_layer(graph_run_910a: Path, tmp_path: Path) -> None:
    export(graph_run_910a, kind="timeline", layout="msprof", output=tmp_path)
    assert freq_events(tmp_path) == []


def test_rows_leave_once_final_and_snapshots_round_trip(tmp_path: Path) -> None:
    prof = make_prof(tmp_path)
    [profile] = discovery.discover(prof)
    metadata = profile.device(0).metadata
    assert metadata is not None

    def make() -> AicoreFreq:
        return AicoreFreq(0, metadata, profile.wall_offset_ns, changes=True)

    start = make().start_ns
    batch = pa.RecordBatch.from_pydict(
        {
            "time_ns": pa.array([start - 10, start + 5, start + 9]),
            "freq_mhz": pa.array([700, 800, 600], pa.uint32()),
        }
    )
    steps = [("lpm_freq@0", batch.slice(0, 1), start - 5), ("lpm_freq@0", batch.slice(1), start + 9)]
    op = make()
    assert drive(op, steps[:1], finish=False) == []  # the start row waits for the watermark to pass it
    out = table(drive(op, steps[1:], finish=False))
    assert out is not None and out.column("freq_mhz").to_pylist() == [700, 800, 600]
    last = table(op.finish())
    assert last is not None and last.column("freq_mhz").to_pylist() == [600]  # the end row
    assert op.finish() == [] and op.advance(DONE) == []
    check_snapshot(make, steps, cut=1)


def test_an_end_info_written_after_the_plan_still_ends_the_layer(tmp_path: Path) -> None:
    """The collector daemon plans a live collection before end_info exists; the end row comes anyway."""
    prof = make_prof(tmp_path)
    end_file = prof / "device_0" / "end_info.0"
    saved = end_file.read_text()
    end_file.unlink()
    [profile] = discovery.discover(prof)
    metadata = profile.device(0).metadata
    assert metadata is not None and metadata.end_info is None
    op = AicoreFreq(0, metadata, profile.wall_offset_ns, changes=False)
    first = table(op.advance(DONE))  # no input: the start row leaves at once, the end row not yet
    assert first is not None and first.num_rows == 1
    end_file.write_text(saved)
    last = table(op.finish())
    _, end, mhz = control_times(prof)
    assert last is not None
    assert last.to_pylist() == [
        {"device_id": 0, "time_ns": end * 1000 - profile.wall_offset_ns, "freq_mhz": mhz}
    ]
