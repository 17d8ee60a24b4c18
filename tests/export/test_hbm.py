"""HBM bandwidth in every layout: hbm csv and the HBM timeline layer of msprof's, trace_view and Parquet.

Raw hbm.data is written into copies of simulated runs and of a PROF dir with real control files; the
expected values are computed here from those records by msprof's rules (the operator's own tests check
the bandwidths against a literal reading of msprof's model).
"""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from profstream.codecs import hbm
from profstream.engine import discovery
from profstream.engine.operators.hbm import SCALE
from profstream.export import Selection, export
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.test_hbm import msprof_rows
from tests.engine.profdirs import PT_910B, make_prof, needs_realdata
from tests.export.conftest import Run

PERIOD_US = 1_000  # 1 ms (msprof's default hbmInterval is 20 ms; a short one puts samples in an iteration)


def write_samples(
    data: Path, device: int, first_us: int, samples: int, seed: int
) -> list[tuple[int, int, int, int]]:
    """Version-1.0 records of four HBM units, reads and writes, every ``PERIOD_US`` from ``first_us`` (the
    sampling clock: µs after the device's sync instant); returns them as (time, count, event, unit)."""
    rng = np.random.default_rng(seed)
    records = [
        (first_us + s * PERIOD_US, int(rng.integers(0, 60_000)), event, unit)
        for s in range(samples)
        for unit in range(4)
        for event in (0, 1)
    ]
    time, count, event, unit = (np.array(c) for c in zip(*records, strict=True))
    half = len(records) // 2  # two slices
    for number, part in enumerate((slice(0, half), slice(half, None))):
        columns = {"timestamp": time[part], "count": count[part], "event": event[part], "hbm_id": unit[part]}
        (data / f"hbm.data.{device}.slice_{number}").write_bytes(hbm.HBM.encode(columns))
    return records


def three_places(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.001")))


def expected_csv(device: int, rows: list[tuple[int, int, str, float]]) -> list[list[str]]:
    """msprof's get_hbm_summary_data: per unit the mean per direction; Average = the unit means summed
    and rounded to 3 places, over the unit count, rounded again; unit cells round(mean, 3)."""
    units = sorted({unit for _, unit, _, _ in rows})
    means = {
        (unit, d): float(np.mean([b for _, u, e, b in rows if u == unit and e == d]))
        for unit in units
        for d in ("read", "write")
    }
    average = [
        three_places(
            Decimal(three_places(sum((Decimal(str(means[(u, d)])) for u in units), Decimal(0)))) / len(units)
        )
        for d in ("read", "write")
    ]
    out = [[str(device), "Average", *average]]
    for unit in units:
        out.append(
            [
                str(device),
                str(unit),
                repr(round(means[(unit, "read")], 3)),
                repr(round(means[(unit, "write")], 3)),
            ]
        )
    return out


@pytest.fixture(scope="module")
def hbm_run(graph_run: Run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list]]:
    """The two-device simulation with 30 HBM samples per device, from 5 ms before its collection start."""
    raw = tmp_path_factory.mktemp("hbm") / "raw"
    shutil.copytree(graph_run.raw, raw)
    [profile] = discovery.discover(raw)
    records = {}
    for device in (0, 1):
        data_dir = profile.device(device)
        clock = profile.clock(data_dir)
        start = profile.collection_starts_ns[device]
        # the sampling clock counts µs from the host-monotonic sync instant; begin 5 ms before the start
        first_us = (start - (clock.host_mono or 0)) // 1000 - 5_000
        records[device] = write_samples(data_dir.path / "data", device, first_us, 30, seed=device)
    return raw, records


def ns_records(profile: discovery.Profile, device: int, records: list) -> list[tuple[int, int, int, int]]:
    """The records with their times as profstream converts them: µs * 1000 + host monotonic."""
    base = profile.clock(profile.device(device)).host_mono or 0
    return [(t * 1000 + base, c, e, u) for t, c, e, u in records]


def test_hbm_csv_holds_msprofs_averages(hbm_run: tuple[Path, dict[int, list]], tmp_path: Path) -> None:
    raw, records = hbm_run
    export(raw, kind="summary", layout="msprof", output=tmp_path)
    [path] = tmp_path.rglob("mindstudio_profiler_output/hbm_*.csv")
    with path.open(newline="") as f:
        got = list(csv.reader(f))
    [profile] = discovery.discover(raw)
    expected = [["Device_id", "Metric", "Read(MB/s)", "Write(MB/s)"]]
    for device in (0, 1):
        expected += expected_csv(device, msprof_rows(ns_records(profile, device, records[device])))
    assert got == expected
    assert "hbm.csv:" in (path.parent / "README.txt").read_text()


def hbm_events(trace: list[dict]) -> tuple[list[dict], dict[int, dict[str, object]]]:
    """The HBM counters of a trace and the metadata of their processes."""
    pids = {e["pid"] for e in trace if e.get("ph") == "M" and e["args"].get("name") == "HBM"}
    meta: dict[int, dict[str, object]] = {pid: {} for pid in pids}
    for e in trace:
        if e.get("ph") == "M" and e["pid"] in pids:
            meta[e["pid"]].update(e["args"])
    return [e for e in trace if e.get("ph") == "C" and e["pid"] in pids], meta


def test_hbm_layer_has_every_sample_after_the_collection_start(
    hbm_run: tuple[Path, dict[int, list]], tmp_path: Path
) -> None:
    raw, records = hbm_run
    export(raw, kind="timeline", layout="msprof", output=tmp_path / "msprof")
    export(raw, kind="timeline", layout="torch_npu", output=tmp_path / "torch_npu")
    [msprof_json] = (tmp_path / "msprof").rglob("msprof_*.json")
    [trace_view] = (tmp_path / "torch_npu").rglob("trace_view.json")
    [profile] = discovery.discover(raw)
    counters, meta = hbm_events(json.loads(msprof_json.read_text()))
    expected = []
    for device in (0, 1):
        start = profile.collection_starts_ns[device]
        for time, unit, direction, bandwidth in msprof_rows(ns_records(profile, device, records[device])):
            if time >= start:
                key = "Read" if direction == "read" else "Write"
                wall = time + profile.wall_offset_ns
                ts = f"{wall // 1000}.{wall % 1000:03d}"
                expected.append((device, f"HBM {unit}/{key}", ts, {f"{key}(MB/s)": bandwidth}))
    got = [(e["pid"] & 31, e["name"], e["ts"], e["args"]) for e in counters]
    assert got == expected
    # left out: the six samples before each start (the sixth is under a µs before it: the grid rounds down)
    assert len(got) == 2 * (30 - 6) * 8
    assert {(pid & 31, m["name"], m["labels"], m["sort_index"]) for pid, m in meta.items()} == {
        (0, "HBM", "NPU 0", 24),
        (1, "HBM", "NPU 1", 24),
    }
    torch_counters, _ = hbm_events(json.loads(trace_view.read_text()))
    assert [(e["name"], e["ts"], e["args"]) for e in torch_counters] == [(n, t, a) for _, n, t, a in expected]


def test_parquet_holds_every_kept_sample(hbm_run: tuple[Path, dict[int, list]], tmp_path: Path) -> None:
    raw, _ = hbm_run
    export(raw, kind="summary", layout="parquet", output=tmp_path)
    [dataset] = tmp_path.rglob("hbm")
    table = pq.read_table(dataset)
    assert table.num_rows == 2 * 30 * 8
    assert sorted(set(table.column("hbm_id").to_pylist())) == [0, 1, 2, 3]


@needs_realdata  # make_prof copies the real 310B control files
def test_version_2_times_are_msprofs_absolute_ns(tmp_path: Path) -> None:
    """A 2.0 collection's hbm.data holds ns timestamps msprof writes as they are: the timeline's ts."""
    prof = make_prof(tmp_path)
    info = prof / "device_0" / "info.json.0"
    info.write_text(info.read_text().replace('"version":"1.0"', '"version":"2.0"'))
    [profile] = discovery.discover(prof)
    wall = profile.collection_starts_ns[0] + profile.wall_offset_ns + 10_000_000  # 10 ms after the start
    times = [wall + 20_000_123 * s for s in range(3)]
    columns = {
        "timestamp": np.repeat(times, 2),
        "count": np.array([0, 0, 640, 3200, 64, 32]),
        "event": np.tile([0, 1], 3),
        "hbm_id": np.zeros(6),
    }
    (prof / "device_0" / "data" / "hbm.data.0.slice_0").write_bytes(hbm.HBM_V2.encode(columns))
    export(prof, kind="both", layout="msprof", output=tmp_path / "out")
    [trace] = (tmp_path / "out").rglob("msprof_*.json")
    counters, _ = hbm_events(json.loads(trace.read_text()))
    assert [e["ts"] for e in counters] == [f"{t // 1000}.{t % 1000:03d}" for t in np.repeat(times, 2)]
    assert counters[2]["args"] == {"Read(MB/s)": 640 * SCALE / 20_000_123 * 1e9}
    [summary] = (tmp_path / "out").rglob("hbm_*.csv")
    assert summary.read_text().splitlines()[1].startswith("0,Average,")


@needs_realdata
def test_real_hbm_counters_have_the_shape_profstream_writes() -> None:
    """The HBM layer of the real torch_npu traces (shared/realdata, msinsight-torchnpu-910b): per sample
    one counter per unit and direction, unit-major with reads first, ``HBM {id}/Read`` with a
    ``Read(MB/s)`` arg (writes alike), tid 0, and the first sample 0 (no earlier one)."""
    traces = sorted(PT_910B.rglob("level*/rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    assert traces
    for path in traces:
        counters, _ = hbm_events(json.loads(path.read_text()))
        assert counters, path
        times = sorted({e["ts"] for e in counters}, key=Decimal)
        per_sample = [[e for e in counters if e["ts"] == t] for t in times]
        for events in per_sample:
            names = [e["name"] for e in events]
            assert names == [f"HBM {u}/{d}" for u in range(len(names) // 2) for d in ("Read", "Write")]
            assert all(
                set(e["args"]) == {e["name"].split("/")[1] + "(MB/s)"} and e["tid"] == 0 for e in events
            )
        assert all(next(iter(e["args"].values())) == 0 for e in per_sample[0])
        assert any(next(iter(e["args"].values())) > 0 for e in per_sample[1])


def test_an_iteration_window_keeps_its_samples(hbm_run: tuple[Path, dict[int, list]], tmp_path: Path) -> None:
    raw, _ = hbm_run
    report = export(
        raw,
        kind="summary",
        layout="parquet",
        output=tmp_path,
        selection=Selection(model_id=1, iteration_id=2),
    )
    [collection] = report.collections
    assert collection.window_ns is not None
    low, high = collection.window_ns
    [dataset] = tmp_path.rglob("hbm")
    times = pq.read_table(dataset).column("time_ns").to_pylist()
    assert times and all(low <= t <= high for t in times)
    assert len(times) < 2 * 30 * 8


def test_simulated_hbm_samples_reach_every_output(tmp_path: Path) -> None:
    """``simulate --hbm``: every sample is a row of the hbm table, and hbm csv has each unit's means."""
    result = simulate(
        SimulationConfig(chip="910B", steps=3, ops_per_step=16, hbm=True, seed=4), tmp_path / "raw"
    )
    written = sum(c.records for c in result.counts if c.family == "hbm")
    assert written and written % 8 == 0
    report = export(tmp_path / "raw", kind="summary", layout="msprof", output=tmp_path / "out")
    assert report.collections[0].rows["hbm"] == written  # every sample has all eight records: all kept
    [path] = (tmp_path / "out").rglob("hbm_*.csv")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [r[1] for r in rows] == ["Average", "0", "1", "2", "3"]
    assert all(float(value) > 0 for row in rows for value in row[2:])
