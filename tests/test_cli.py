"""CLI argument parsing: msprof.py's rules, exit codes, and commands not landed yet."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profstream import __version__, events
from profstream.cli import EXIT_BAD_INPUT, EXIT_USAGE, _msprof_binary_form, build_parser, main
from profstream.events import configure_logging


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI expecting a usage error; return what it printed on stderr."""
    assert main(argv) == EXIT_USAGE
    return capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_no_command_is_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """No sub-command prints help and exits 2."""
    assert "COMMAND" in usage_error([], capsys)


@pytest.mark.parametrize("kind", ["timeline", "summary"])
def test_export_parses_msprof_arguments(kind: str) -> None:
    """export takes exactly msprof.py's arguments plus --layout/--output/--timeline-limit/--processes."""
    args = build_parser().parse_args(
        [
            "export",
            kind,
            "-dir",
            "/p",
            "--iteration-id",
            "3",
            "--model-id",
            "1",
            "--iteration-count",
            "2",
            "--clear",
            "--layout",
            "torch_npu",
            "--output",
            "/o",
            "--timeline-limit",
            "100",
            "--processes",
            "1",
            "-v",
        ]
    )
    assert (args.collection_dir, args.iteration_id, args.model_id, args.iteration_count) == ("/p", 3, 1, 2)
    assert (args.clear, args.layout, args.output, args.timeline_limit, args.processes, args.verbose) == (
        True,
        "torch_npu",
        "/o",
        100,
        1,
        1,
    )
    long_form = build_parser().parse_args(["export", kind, "--collection-dir", "/q"])
    assert long_form.collection_dir == "/q"
    assert long_form.iteration_count == 1


def test_summary_format() -> None:
    """--format csv|json belongs to export summary."""
    assert build_parser().parse_args(["export", "summary", "-dir", "/p", "--format", "json"]).format == "json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "timeline"], "-dir"),
        (["export"], "timeline|summary"),
        (["export", "trace", "-dir", "/p"], "invalid choice"),
        (["export", "summary", "-dir", "/p", "--model-id", "1"], "simultaneously"),
        (["export", "summary", "-dir", "/p", "--iteration-id", "1"], "simultaneously"),
        (
            ["export", "summary", "-dir", "/p", "--model-id", "1", "--iteration-id", "0"],
            "--iteration-id must be >= 1",
        ),
        (
            ["export", "summary", "-dir", "/p", "--model-id", "-1", "--iteration-id", "1"],
            "--model-id must be in",
        ),
        (
            ["export", "summary", "-dir", "/p", "--model-id", "4294967296", "--iteration-id", "1"],
            "--model-id",
        ),
        (
            ["export", "summary", "-dir", "/p", "--iteration-count", "0"],
            "--iteration-count must be in [1, 5]",
        ),
        (
            ["export", "summary", "-dir", "/p", "--iteration-count", "6"],
            "--iteration-count must be in [1, 5]",
        ),
        (["export", "summary", "-dir", "/p", "--iteration-count", "two"], "must be an integer"),
        (["export", "summary", "-dir", "/p", "--format", "xml"], "invalid choice"),
        (["export", "timeline", "-dir", "/p", "--format", "json"], "unrecognized arguments"),
        (["export", "summary", "-dir", "/p", "--layout", "perfetto"], "invalid choice"),
        (["export", "summary", "-dir", "/p", "--timeline-limit", "0"], "--timeline-limit must be >= 1"),
        (["export", "summary", "-dir", "/p", "--processes", "-1"], "--processes must be >= 0"),
        (["inspect"], "-dir"),
        (["simulate"], "OUT"),
        (["simulate", "/o", "--chip", "310P"], "invalid choice"),
        (["simulate", "/o", "--steps", "0"], "--steps must be >= 1"),
        (["simulate", "/o", "--ops-per-step", "-3"], "--ops-per-step must be >= 1"),
        (["simulate", "/o", "--framework", "mindspore"], "invalid choice"),
        (["simulate", "/o", "--seed", "x"], "invalid int"),
        (["collect", "/w"], "--output"),
        (["collect", "/w", "--output", "/o", "--storage-limit", "100"], "--storage-limit must be in [200"),
        (["collect", "/w", "--output", "/o", "--status-port", "0"], "--status-port must be in"),
        (["cluster", "/d"], "--output"),
        (
            ["cluster", "/d", "--output", "/o", "--scheduler", "tcp://x:1", "--workers", "2"],
            "not allowed with",
        ),
        (["cluster", "/d", "--output", "/o", "--workers", "0"], "--workers must be >= 1"),
        (["--log-format", "xml", "inspect", "-dir", "/p"], "invalid choice"),
        (["--export=on"], "--output"),
        (["--export=maybe", "--output=/p"], "invalid choice"),
        (["--export=off", "--output=/p"], "asks for nothing"),
        (["--export=on", "--output=/p", "--model-id=1"], "simultaneously"),
    ],
)
def test_argument_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every argument error exits 2 with a message that says what is wrong."""
    assert message in usage_error(argv, capsys)


def test_msprof_binary_form() -> None:
    """``--export=on --output=DIR`` means export timeline and summary of DIR."""
    args = _msprof_binary_form(["--export=on", "--output=/p/PROF_1", "--clear=on", "-v"])
    assert args is not None
    assert (args.command, args.kind, args.collection_dir, args.clear, args.verbose) == (
        "export",
        "both",
        "/p/PROF_1",
        True,
        1,
    )
    assert _msprof_binary_form(["inspect", "-dir", "/p"]) is None


def test_validate_reports_bad_option_string(capsys: pytest.CaptureFixture[str]) -> None:
    """validate exits 2 and names the option when a PROFILING_OPTIONS string is invalid."""
    err = usage_error(["validate", "--profiling-options", '{"storage_limit": "10MB"}'], capsys)
    assert "storage_limit" in err


def test_validate_accepts_good_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """validate prints ok for valid settings and option strings."""
    assert main(["validate", "--profiling-options", '{"output": "/tmp/prof", "training_trace": "on"}']) == 0
    assert "ok" in capsys.readouterr().out


def test_bad_config_file_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A settings file with an unknown key exits 2 naming the key."""
    path = tmp_path / "user.toml"
    path.write_text("[export]\nlayuot = 'msprof'\n")
    assert "export.layuot" in usage_error(["validate", "--config", str(path)], capsys)


def test_console_script_runs() -> None:
    """The installed entry point runs as a module in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-m", "profstream", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "profstream" in done.stdout


def test_inspect_missing_dir_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    """inspect of a directory that does not exist exits 1 and names it."""
    assert main(["inspect", "-dir", "/nonexistent/PROF_1"]) == EXIT_BAD_INPUT
    assert "/nonexistent/PROF_1" in capsys.readouterr().err


def test_library_prints_nothing_by_default() -> None:
    """Without configure_logging, reading a profile prints nothing (events go to stdlib logging)."""
    code = (
        "import profstream.simulate as s, profstream, tempfile\n"
        "d = tempfile.mkdtemp()\n"
        "s.simulate(s.SimulationConfig(steps=1, ops_per_step=8), d)\n"
        "profstream.open(d).inspect()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--aic-metrics", "Bogus"], "simulate.aic_metrics"),
        (["--profiling-options", '{"storage_limit": "5MB"}'], "PROFILING_OPTIONS.storage_limit"),
        (["--ops-per-step", "4"], "simulate.ops_per_step"),
    ],
)
def test_simulate_rejects_bad_settings(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """simulate validates its settings (metrics group, option string, workload) before writing anything."""
    out = tmp_path / "sim"
    assert message in usage_error(["simulate", str(out), *argv], capsys)
    assert not out.exists()


def test_simulate_writes_a_collection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """simulate writes a PROF dir and its truth, and says where."""
    out, truth = tmp_path / "sim", tmp_path / "truth"
    argv = ["simulate", str(out), "--chip", "910A", "--steps", "2", "--ops-per-step", "8"]
    argv += ["--truth", str(truth)]
    assert main(argv) == 0
    assert str(out) in capsys.readouterr().out
    assert list(out.glob("PROF_*/device_0/data/hwts.data.0.slice_*"))
    assert (truth / "steps.parquet").is_file()


def test_simulate_refuses_a_non_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """simulate never appends to an existing collection: a non-empty OUT is bad input, left untouched."""
    (tmp_path / "keep.txt").write_text("x")
    assert main(["simulate", str(tmp_path), "--steps", "1", "--ops-per-step", "8"]) == EXIT_BAD_INPUT
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_demo_runs_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo replaces its own previous output and reports the same files each time (times aside)."""

    def steady(text: str) -> str:
        return re.sub(r"took [0-9.]+ s|_[0-9]{14}\.", "", text)

    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out)]) == 0
    first = capsys.readouterr().out
    assert main(["demo", "--output", str(out)]) == 0
    assert steady(capsys.readouterr().out) == steady(first)
    for expected in (
        "msprof_",
        "op_summary_",
        "README.txt",
        "trace_view.json",
        "kernel_details.csv",
        "part-0.parquet",
    ):
        assert expected in first
    exported = sorted(p.name for p in (out / "export").rglob("*") if p.is_file())
    assert not [name for name in exported if name.startswith(".")]


def test_a_cold_kernel_cache_is_announced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first run (no cached numba kernels) says why it is slow; a warm one says nothing."""
    import profstream._numba

    for cold in (True, False):
        monkeypatch.setattr(profstream._numba, "cache_is_cold", lambda cold=cold: cold)
        assert main(["inspect", "-dir", "/nonexistent/PROF_1"]) == EXIT_BAD_INPUT
        assert ("kernels_compiling" in capsys.readouterr().err) == cold


def test_cache_is_cold_looks_for_numba_index_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profstream._numba import cache_is_cold

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    package = tmp_path / "package"
    (package / "engine" / "__pycache__").mkdir(parents=True)
    assert cache_is_cold(package)
    (package / "engine" / "__pycache__" / "overlap.union-308.py311.nbi").touch()
    assert not cache_is_cold(package)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cache_is_cold(package)


def test_processes_flag_sets_the_export_setting() -> None:
    from profstream.commands import settings_of

    args = build_parser().parse_args(["export", "summary", "-dir", "/p", "--processes", "3"])
    assert settings_of(args).export.processes == 3
    default = build_parser().parse_args(["export", "summary", "-dir", "/p"])
    assert settings_of(default).export.processes == 0  # one per core


class _Writes:
    """A stderr that records each ``write`` call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_each_log_event_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The export's and the daemon's workers share the parent's stderr: an event written apart from its
    newline let another process's line in between, and two JSON lines became one."""
    stderr = _Writes()
    monkeypatch.setattr(sys, "stderr", stderr)
    configure_logging(verbosity=1, log_format="json")
    events.get_logger(component="test").info("one_event", value=1)
    events.get_logger(component="test").warning("another_event", value=2)
    assert len(stderr.calls) == 2
    assert all(call.endswith("\n") and call.count("\n") == 1 for call in stderr.calls)
    assert [json.loads(call)["event"] for call in stderr.calls] == ["one_event", "another_event"]
