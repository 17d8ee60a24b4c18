"""``profstream export`` on the command line: exit codes, messages and the final summary."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from profstream.cli import EXIT_BAD_INPUT, EXIT_OK, main
from profstream.export import Router
from tests.export.conftest import Run


def test_export_summary_prints_the_files_it_wrote(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "summary", "-dir", str(graph_run.raw), "--output", str(tmp_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "export summary (msprof layout)" in out
    assert "devices: 0, 1" in out
    [rows] = [line for line in out.splitlines() if line.strip().startswith("rows: ")]
    counts = dict(item.rsplit(" ", 1) for item in rows.strip().removeprefix("rows: ").split(", "))
    assert int(counts["tasks"]) > 0
    assert "ops" not in counts  # the msprof layout reads no framework ops: no misleading "ops 0"
    for line in out.splitlines():
        if line.strip().endswith(".csv"):
            name = line.split()[-1]
            assert (tmp_path / "mindstudio_profiler_output" / name).is_file()


def test_data_files_without_a_codec_are_named_in_the_summary(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ddr/llc slices (families profstream does not decode) are reported by kind, count and size, with
    a warning; the outputs are those of the run without them."""
    raw = tmp_path / "raw"
    shutil.copytree(graph_run.raw, raw)
    [data] = list(raw.rglob("device_1/data"))
    sizes = {"ddr.data.1.slice_0": 2400, "ddr.data.1.slice_1": 1200, "llc.data.1.slice_0": 100}
    for name, size in sizes.items():
        (data / name).write_bytes(b"\0" * size)
    assert main(["export", "summary", "-dir", str(raw), "--output", str(tmp_path / "out")]) == EXIT_OK
    captured = capsys.readouterr()
    [line] = [line for line in captured.out.splitlines() if "not decoded" in line]
    assert line.endswith("ddr.data (2 files, 3.5 KB), llc.data (1 file, 100 B)")
    assert "data_not_decoded" in captured.err and "'ddr.data': 2" in captured.err
    plain = ["export", "summary", "-dir", str(graph_run.raw), "--output", str(tmp_path / "plain")]
    assert main(plain) == EXIT_OK
    assert "not decoded" not in capsys.readouterr().out

    def kinds(out: Path) -> list[str]:  # the file names without their (per-run) timestamps
        return sorted(re.sub(r"_\d+\.csv$", "", p.name) for p in out.rglob("*.csv"))

    assert kinds(tmp_path / "out") == kinds(tmp_path / "plain")


def test_the_msprof_binary_form_exports_timeline_and_summary(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(graph_run.raw, raw)
    [prof] = raw.glob("PROF_*")
    assert main(["--export=on", f"--output={prof}"]) == EXIT_OK
    written = {p.name.rsplit("_", 1)[0] for p in (prof / "mindstudio_profiler_output").iterdir()}
    assert {"msprof", "op_summary", "step_trace", "README.txt"} <= written | {"README.txt"}
    out = capsys.readouterr().out
    assert out.count("export timeline and summary (msprof layout) took") == 1  # one pass for both


def test_a_missing_directory_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "summary", "-dir", "/nonexistent/PROF_1"]) == EXIT_BAD_INPUT
    assert "/nonexistent/PROF_1" in capsys.readouterr().err


def test_a_full_disk_exits_1_with_a_message_and_leaves_no_complete_file(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    route = Router.route
    routed = [0]

    def full_disk_after_a_few_batches(self: Router, stream: str, batch: pa.RecordBatch) -> None:
        routed[0] += 1
        if routed[0] > 5:
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: No space left on device")
        route(self, stream, batch)

    monkeypatch.setattr(Router, "route", full_disk_after_a_few_batches)
    argv = ["export", "summary", "-dir", str(graph_run.raw), "--output", str(tmp_path)]
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "profstream: error: Error writing bytes to file. Detail: No space left on device" in err
    assert "Traceback" not in err
    left = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.name.startswith(".") for p in left), left


def test_an_iteration_out_of_range_is_bad_input(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "summary", "-dir", str(graph_run.raw), "--output", str(tmp_path)]
    assert main([*argv, "--model-id", "1", "--iteration-id", "9"]) == EXIT_BAD_INPUT
    assert "out of range" in capsys.readouterr().err


def test_corrupt_input_exits_1_naming_the_file(
    graph_run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(graph_run.raw, raw)
    victim = max(raw.rglob("device_1/data/hwts.data.*"), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[:64] = b"\xee" * 64
    victim.write_bytes(bytes(data))
    out = tmp_path / "out"
    assert main(["export", "timeline", "-dir", str(raw), "--output", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert victim.name in err and "offset" in err
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_the_timeline_is_the_same_bytes_whatever_the_hash_seed(graph_run: Run, tmp_path: Path) -> None:
    """Two runs write the same events in the same order (Python's string hashing varies per process)."""
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        code = (
            "import sys; from profstream.export import export; "
            "export(sys.argv[1], kind='timeline', layout='torch_npu', output=sys.argv[2])"
        )
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", code, str(graph_run.raw), str(out)], check=True, env=env)
        outputs.append((out / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
    assert outputs[0] == outputs[1]
