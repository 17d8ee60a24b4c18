"""Handlers of the CLI sub-commands that have landed (argument parsing lives in cli.py)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from profstream.config import Settings

EXIT_OK = 0
DEFAULT_LIVE_RATE_MB_S = 1.0


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def run_validate(args: argparse.Namespace) -> int:
    """Check settings and the profiler option strings without running anything."""
    from profstream import options

    settings = settings_of(args)
    export = settings.export
    print(f"settings: ok ({export.layout} layout, timeline_limit {export.timeline_limit_mb} MB)")
    env = dict(os.environ)
    if args.profiling_options is not None:
        env["PROFILING_OPTIONS"] = args.profiling_options
    if args.ms_profiler_options is not None:
        env["MS_PROFILER_OPTIONS"] = args.ms_profiler_options
    for name, parsed in options.from_environment(env).items():
        print(f"{name}: ok {parsed}")
    return EXIT_OK


def settings_of(args: argparse.Namespace) -> Settings:
    """Settings for one command: default.toml, --config, the environment, then the command's own flags."""
    from profstream.config import load_settings

    overrides: dict[str, Any] = {}
    export: dict[str, Any] = {}
    if getattr(args, "layout", None):
        export["layout"] = args.layout
    if getattr(args, "format", None):
        export["format"] = args.format
    if getattr(args, "timeline_limit", None):
        export["timeline_limit_mb"] = args.timeline_limit
    if getattr(args, "processes", None) is not None:
        export["processes"] = args.processes
    if export:
        overrides["export"] = export
    return load_settings(getattr(args, "config", None), env=os.environ, overrides=overrides)


class _ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self._shown = -1

    def __call__(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if not self.enabled or percent == self._shown:
            return
        self._shown = percent
        filled = percent * 30 // 100
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {percent:3d}%")
        if percent >= 100:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_export(args: argparse.Namespace) -> int:
    """``export timeline|summary`` with msprof.py's arguments; ``--export=on`` writes both from one pass
    over the raw data."""
    from profstream.export import Selection, clear_caches, export, exported

    settings = settings_of(args)
    report = export(
        args.collection_dir,
        kind=args.kind,
        layout=settings.export.layout,
        output=args.output,
        fmt=settings.export.format,
        selection=Selection(args.model_id, args.iteration_id, args.iteration_count),
        settings=settings.export,
        on_invalid=settings.decode.on_invalid,
        chunk_bytes=settings.decode.chunk_mb << 20,
        advance_bytes=settings.decode.advance_mb << 20,
        progress=_ProgressBar(f"export {exported(args.kind)}"),
    )
    sys.stdout.write(report.render() + "\n")
    if args.clear:
        for path in clear_caches(report):
            sys.stdout.write(f"  cleared {path}\n")
    return EXIT_OK


def run_cluster(args: argparse.Namespace) -> int:
    """``cluster``: imported only when asked for (it brings the Dask runner)."""
    from profstream.cluster import command

    return command.run(args)


def run_inspect(args: argparse.Namespace) -> int:
    """Print, per device and family: files, bytes, records, lost-record gaps, time range."""
    from profstream.api import open_profile

    decode = settings_of(args).decode
    profile = open_profile(
        args.collection_dir, on_invalid=decode.on_invalid, chunk_bytes=decode.chunk_mb << 20
    )
    report = profile.inspect()
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    else:
        sys.stdout.write(report.render() + "\n")
    return EXIT_OK


def _simulation_config(args: argparse.Namespace) -> Any:
    from profstream.simulate import SimulationConfig

    return SimulationConfig(
        chip=args.chip,
        steps=args.steps,
        ops_per_step=args.ops_per_step,
        devices=args.devices,
        ranks=args.ranks,
        framework=args.framework,
        aic_metrics=args.aic_metrics,
        profiling_options=args.profiling_options or "",
        seed=args.seed,
        l2_cache=args.l2_cache,
        hbm=args.hbm,
        target_bytes=None if args.size is None else args.size * 1024 * 1024,
    )


def run_simulate(args: argparse.Namespace) -> int:
    """Write a synthetic PROF_XXX directory (and optionally its ground truth), at once or live."""
    from profstream.simulate import live, simulate

    started = time.perf_counter()
    aged: tuple[Path, ...] = ()
    if args.live:
        outcome = live(
            _simulation_config(args),
            Path(args.out),
            args.rate or DEFAULT_LIVE_RATE_MB_S,
            duration_s=args.duration,
            storage_limit_mb=args.storage_limit,
            truth_dir=args.truth,
        )
        result, aged = outcome.simulation, outcome.aged
    else:
        result = simulate(_simulation_config(args), Path(args.out), truth_dir=args.truth)
    took = time.perf_counter() - started
    print(f"wrote {_human(result.bytes)} of raw data in {took:.2f} s to {args.out}")
    if aged:
        print(f"  aged {len(aged)} slices under --storage-limit {args.storage_limit} MB")
    for path in result.roots:
        print(f"  {path}")
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    """Simulate a small realistic torch_npu run, export it in every layout, print where and what."""
    from profstream.export import export
    from profstream.simulate import SimulationConfig, simulate

    out = Path(args.output)
    raw, exports = out / "raw", out / "export"
    for previous in (raw, out / "truth", exports):  # the demo's own output of an earlier run
        shutil.rmtree(previous, ignore_errors=True)
    config = SimulationConfig(chip="910B", steps=3, ops_per_step=48, framework="torch_npu", seed=7)
    result = simulate(config, raw, truth_dir=out / "truth")
    print(f"simulated a 910B torch_npu training run: {_human(result.bytes)} of raw data in {raw}")
    print(f"ground truth (tasks, steps, per-step overlap sums) as Parquet in {out / 'truth'}\n")
    settings = settings_of(args).export
    for layout in ("msprof", "torch_npu", "parquet"):
        report = export(raw, kind="both", layout=layout, output=exports, settings=settings)
        print(report.render() + "\n")
    return EXIT_OK
