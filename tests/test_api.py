"""The library API and ``inspect`` against simulated collections of both chips."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import profstream
from profstream.cli import EXIT_BAD_INPUT, main
from profstream.codecs import get_codec
from profstream.errors import InputPathError
from profstream.simulate import SimulationConfig, SimulationResult, simulate


@pytest.fixture(scope="module", params=["910A", "910B"])
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, SimulationResult]:
    """A small simulated torch_npu run of each chip, with slices small enough to roll."""
    out = tmp_path_factory.mktemp(f"sim-{request.param}")
    config = SimulationConfig(
        chip=request.param, steps=3, ops_per_step=40, framework="torch_npu", seed=3, slice_bytes=8192
    )
    return out, simulate(config, out)


def test_inspect_counts_equal_the_simulator(run: tuple[Path, SimulationResult]) -> None:
    """For every family, directory and aging group, inspect counts what the simulator wrote."""
    out, result = run
    report = profstream.open(out).inspect()
    seen = {}
    for prof in report.profiles:
        for place in prof.dirs:
            assert place.not_decoded == []  # the simulator writes only families profstream decodes
            for fam in place.families:
                seen[(place.place, fam.family, fam.aging)] = (fam.records, fam.bytes, fam.files)
                assert fam.lost == 0
                assert not fam.dropped
                assert fam.truncated_bytes == 0
    expected = {}
    for count in result.counts:
        side = get_codec(count.family).side
        place = {"framework": "FRAMEWORK", "host": "host"}.get(side, f"device_{count.device_id}")
        aging = {"aging": True, "unaging": False}.get(count.aging)
        expected[(place, count.family, aging)] = (count.records, count.bytes, len(count.files))
    assert seen == expected


def test_read_returns_record_batch_readers(run: tuple[Path, SimulationResult]) -> None:
    """read() streams a family's decoded records; host families carry the aging flag."""
    out, result = run
    profile = profstream.open(out)
    assert profile.devices == (0,)
    device_family = "stars_soc" if "stars_soc" in profile.families(0) else "hwts"
    reader = profile.read(device_family, device=0)
    assert isinstance(reader, pa.RecordBatchReader)
    table = reader.read_all()
    written = sum(c.records for c in result.counts if c.family == device_family)
    assert table.num_rows == written
    track = profile.read("task_track").read_all()
    assert "aging" in track.schema.names
    assert track.num_rows == sum(c.records for c in result.counts if c.family == "task_track")


def test_read_errors_say_what_is_missing(run: tuple[Path, SimulationResult]) -> None:
    """Unknown families, absent data and unknown devices are clear errors."""
    out, _ = run
    profile = profstream.open(out)
    with pytest.raises(KeyError, match="unknown record family"):
        profile.read("nope")
    with pytest.raises(InputPathError, match="no training_trace data"):
        profile.read("training_trace", device=0)
    with pytest.raises(InputPathError, match="no hwts_aiv data for 7"):
        profile.read("hwts_aiv", device=7)


def test_inspect_cli_json(run: tuple[Path, SimulationResult], capsys: pytest.CaptureFixture[str]) -> None:
    """``inspect --json`` prints one JSON document with the same counts."""
    out, result = run
    assert main(["inspect", "-dir", str(out), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    records = sum(f["records"] for p in document["profiles"] for d in p["dirs"] for f in d["families"])
    assert records == sum(c.records for c in result.counts)


def test_corrupt_record_exits_1_naming_file_and_offset(
    run: tuple[Path, SimulationResult], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad magic in a device log: inspect exits 1 and names the slice and byte offset."""
    out, result = run
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    family = next(c for c in result.counts if c.family in ("hwts", "stars_soc"))
    victim = copy / family.files[0].relative_to(out)
    raw = bytearray(victim.read_bytes())
    raw[64 * 3 + 2 : 64 * 3 + 4] = b"\0\0"  # record 3's magic
    victim.write_bytes(bytes(raw))
    assert main(["inspect", "-dir", str(copy)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert victim.name in err
    assert "byte offset 192" in err
