"""The ``profstream`` command line.

``export`` takes exactly msprof.py's arguments (Ascend/msprof
``analysis/msinterface/msprof_entrance.py``; seeds/000) plus ``--layout``,
``--output``, ``--timeline-limit`` and ``--processes``. The msprof binary's form from the
TensorFlow flow, ``profstream --export=on --output=PROF_DIR``, means "export
timeline and summary of that directory".

Exit codes: 0 success, 1 bad input (corrupt data, missing files), 2 usage
(bad arguments or settings, or a command whose capability has not landed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import profstream
from profstream.errors import ConfigError, ProfstreamError

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE = 0, 1, 2
#: msprof's model id for step-granular export (framework steps, tags 60000/60001).
STEP_MODEL_ID = 4294967295
#: msprof's IterationRange.MAX_ITERATION_COUNT (specs/msprof_outputs.md §4b).
MAX_ITERATION_COUNT = 5

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors raised as exceptions, so ``main`` owns the exit code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (profstream.__getattr__)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"profstream {profstream.__version__}")
        parser.exit()


class _UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


def _int_in(low: int, high: int | None, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            msg = f"{what} must be an integer, got {text!r}"
            raise argparse.ArgumentTypeError(msg) from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            msg = f"{what} must be {bound}, got {value}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _positive(what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            msg = f"{what} must be a number, got {text!r}"
            raise argparse.ArgumentTypeError(msg) from None
        if not value > 0:
            msg = f"{what} must be > 0, got {text}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Options accepted both before and after the sub-command."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help="more log output (-v info, -vv debug)",
    )
    parser.add_argument(
        "--log-format", choices=("console", "json"), default=default, help="log rendering (default: console)"
    )
    parser.add_argument("--config", metavar="FILE", default=default, help="a settings TOML file")


def _export_arguments(parser: argparse.ArgumentParser, *, summary: bool) -> None:
    parser.add_argument(
        "-dir",
        "--collection-dir",
        dest="collection_dir",
        required=True,
        metavar="<dir>",
        help="PROF_XXX directory or its parent (also an *_ascend_pt dir or a directory of many)",
    )
    parser.add_argument(
        "--iteration-id",
        type=_int_in(1, None, "--iteration-id"),
        metavar="<iteration_id>",
        help="iteration to export; must be given with --model-id",
    )
    parser.add_argument(
        "--model-id",
        type=_int_in(0, STEP_MODEL_ID, "--model-id"),
        metavar="<model_id>",
        help=f"model to export; must be given with --iteration-id; {STEP_MODEL_ID} selects framework steps",
    )
    parser.add_argument(
        "--iteration-count",
        type=_int_in(1, MAX_ITERATION_COUNT, "--iteration-count"),
        default=1,
        metavar="<iteration_count>",
        help=f"iterations to export from --iteration-id (1..{MAX_ITERATION_COUNT})",
    )
    if summary:
        parser.add_argument(
            "--format", choices=("csv", "json"), default=None, help="summary file format (default csv)"
        )
    parser.add_argument(
        "--clear", action="store_true", help="remove profstream's own caches after export (never raw data)"
    )
    parser.add_argument("--layout", choices=("msprof", "torch_npu", "parquet"), default=None)
    parser.add_argument("--output", metavar="DIR", help="output directory (default: inside the PROF dir)")
    _timeline_limit(parser, "cap on the total timeline output in MB (default 500)")
    parser.add_argument(
        "--processes",
        type=_int_in(0, None, "--processes"),
        metavar="N",
        help="pipelines for output groups sharing none, and a writer (default 0: one per usable core)",
    )


def _timeline_limit(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--timeline-limit`` of export and collect: one range, each saying what it caps."""
    parser.add_argument(
        "--timeline-limit", type=_int_in(1, None, "--timeline-limit"), metavar="MB", help=help_text
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="profstream",
        description="Streaming analysis of Huawei Ascend profiler data (PROF_XXX directories).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    _common(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = _Parser(add_help=False)
    _common(common, top=False)

    export = commands.add_parser("export", parents=[common], help="export timeline or summary, as msprof.py")
    kinds = export.add_subparsers(
        dest="kind", metavar="timeline|summary", parser_class=_Parser, required=True
    )
    _export_arguments(kinds.add_parser("timeline", parents=[common], help="timeline JSON"), summary=False)
    _export_arguments(kinds.add_parser("summary", parents=[common], help="summary CSV/JSON"), summary=True)

    inspect = commands.add_parser("inspect", parents=[common], help="what is in a PROF dir")
    inspect.add_argument("-dir", "--collection-dir", dest="collection_dir", required=True, metavar="<dir>")
    inspect.add_argument("--json", action="store_true", help="one JSON document instead of a table")

    simulate = commands.add_parser("simulate", parents=[common], help="write a synthetic PROF_XXX directory")
    simulate.add_argument("out", metavar="OUT", help="directory to write into")
    simulate.add_argument("--chip", choices=("910A", "910B"), default="910B")
    simulate.add_argument("--steps", type=_int_in(1, None, "--steps"), default=4)
    simulate.add_argument("--ops-per-step", type=_int_in(1, None, "--ops-per-step"), default=64)
    simulate.add_argument("--devices", type=_int_in(1, 64, "--devices"), default=1)
    simulate.add_argument("--ranks", type=_int_in(1, None, "--ranks"), default=1)
    simulate.add_argument("--framework", choices=("none", "torch_npu"), default="none")
    simulate.add_argument("--aic-metrics", default="PipeUtilization", metavar="GROUP")
    simulate.add_argument("--profiling-options", metavar="JSON", help="PROFILING_OPTIONS to record")
    simulate.add_argument(
        "--l2-cache", action="store_true", help="also record L2 cache counters per task (l2_cache.data)"
    )
    simulate.add_argument("--hbm", action="store_true", help="also sample HBM traffic every 10 ms (hbm.data)")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--truth", metavar="DIR", help="also write the ground truth as Parquet here")
    simulate.add_argument(
        "--size",
        type=_int_in(1, None, "--size"),
        metavar="MB",
        help="keep adding steps until about MB of raw data",
    )
    simulate.add_argument(
        "--live", action="store_true", help="write over time, slice by slice, as the collector does"
    )
    simulate.add_argument(
        "--rate", type=_positive("--rate"), metavar="MB/S", help="live: raw data rate (default 1)"
    )
    simulate.add_argument(
        "--duration",
        type=_positive("--duration"),
        metavar="S",
        help="live: about S seconds (rate * S MB)",
    )
    simulate.add_argument(
        "--storage-limit",
        type=_int_in(21, 4294967295, "--storage-limit"),
        metavar="MB",
        help="live: age the oldest slices as the collector's storage_limit does",
    )

    demo = commands.add_parser("demo", parents=[common], help="simulate a small run and analyse it")
    demo.add_argument(
        "--output", metavar="DIR", default="demo-out", help="where the demo writes (default demo-out)"
    )

    collect = commands.add_parser(
        "collect", parents=[common], help="follow live PROF dirs (collector daemon)"
    )
    collect.add_argument("watch_dir", metavar="WATCH_DIR")
    collect.add_argument("--output", required=True, metavar="OUT")
    collect.add_argument("--storage-limit", type=_int_in(200, 4294967295, "--storage-limit"), metavar="MB")
    _timeline_limit(
        collect,
        "cap on the window directories' timeline files together; oldest windows go first (default 500)",
    )
    collect.add_argument(
        "--layout",
        dest="window_layout",
        choices=("auto", "msprof", "torch_npu", "parquet"),
        default="auto",
        help="layout of the per-window timeline and CSV directories (auto: torch_npu with FRAMEWORK data, "
        "else msprof; parquet: Parquet parts only)",
    )
    collect.add_argument("--status-port", type=_int_in(1, 65535, "--status-port"), metavar="PORT")
    collect.add_argument("--once", action="store_true", help="process what is there, then exit")

    cluster = commands.add_parser("cluster", parents=[common], help="analyse many ranks on Dask")
    cluster.add_argument("dir", metavar="DIR")
    cluster.add_argument("--output", required=True, metavar="OUT")
    where = cluster.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", help="a dask.distributed scheduler address")
    where.add_argument("--workers", type=_int_in(1, None, "--workers"), help="LocalCluster size")
    cluster.add_argument("--layout", choices=("msprof", "torch_npu", "parquet"), default=None)

    validate = commands.add_parser(
        "validate", parents=[common], help="check settings and profiler option strings without running"
    )
    validate.add_argument("--profiling-options", metavar="JSON", help="a PROFILING_OPTIONS JSON string")
    validate.add_argument("--ms-profiler-options", metavar="JSON", help="an MS_PROFILER_OPTIONS JSON string")
    return parser


def _check_simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """--rate, --duration and --storage-limit describe a live run: refuse them without --live."""
    flags = {"--rate": args.rate, "--duration": args.duration, "--storage-limit": args.storage_limit}
    live_only = [flag for flag, value in flags.items() if value is not None]
    if live_only and not args.live:
        parser.error(f"{', '.join(live_only)} only apply with --live")


def _msprof_binary_form(argv: Sequence[str]) -> argparse.Namespace | None:
    """Parse ``--export=on --output=DIR [...]`` (the msprof binary) as "export both"; None if absent."""
    if not any(a == "--export" or a.startswith("--export=") for a in argv):
        return None
    binary = _Parser(prog="profstream --export=on")
    binary.add_argument("--export", choices=("on", "off"), required=True)
    binary.add_argument("--output", dest="collection_dir", required=True, metavar="PROF_DIR")
    binary.add_argument("--iteration-id", type=_int_in(1, None, "--iteration-id"))
    binary.add_argument("--model-id", type=_int_in(0, STEP_MODEL_ID, "--model-id"))
    binary.add_argument("--clear", choices=("on", "off"), default="off")
    _common(binary, top=True)
    args = binary.parse_args(list(argv))
    if args.export == "off":
        raise _UsageError(binary, "--export=off asks for nothing; use --export=on")
    args.clear = args.clear == "on"
    args.command, args.kind = "export", "both"
    args.iteration_count, args.format, args.layout, args.output, args.timeline_limit, args.processes = (
        1,
        None,
        None,
        None,
        None,
        None,
    )
    return args


def _check_export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if (args.model_id is None) != (args.iteration_id is None):
        parser.error("--model-id and --iteration-id must be set simultaneously")


def _collect(args: argparse.Namespace) -> int:
    """``collect``: the collector daemon, imported only when asked for."""
    from profstream.daemon import command

    return command.run(args)


def _handlers() -> dict[str, Handler]:
    from profstream import commands

    return {
        "export": commands.run_export,
        "inspect": commands.run_inspect,
        "simulate": commands.run_simulate,
        "demo": commands.run_demo,
        "collect": _collect,
        "cluster": commands.run_cluster,
        "validate": commands.run_validate,
    }


#: commands that run the numba kernels (a first run compiles them)
_COMPILING_COMMANDS = ("export", "demo", "collect", "cluster", "inspect")


def _notice_cold_kernels() -> None:
    """Say why a first run is slow: numba compiles every kernel once, then loads them from its cache."""
    from profstream import events
    from profstream._numba import cache_is_cold

    if cache_is_cold():
        events.get_logger(component="cli").warning(
            events.KERNELS_COMPILING,
            detail="first run: compiling the numba kernels (about 20 s, once; later runs load them cached)",
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used as the console-script entry point)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = _msprof_binary_form(argv) or parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command == "export":
            _check_export(args, parser)
        if args.command == "simulate":
            _check_simulate(args, parser)
    except _UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from profstream._allocator import use_jemalloc
    from profstream.events import configure_logging

    use_jemalloc()
    configure_logging(verbosity=args.verbose, log_format=args.log_format or "console")
    if args.command in _COMPILING_COMMANDS:
        _notice_cold_kernels()
    try:
        return _handlers()[args.command](args)
    except ConfigError as exc:
        print(f"profstream: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProfstreamError as exc:
        print(f"profstream: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a missing input, a full disk ...; the outputs' temporary files are gone
        where = f": {exc.filename}" if exc.filename else ""
        print(f"profstream: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT


__all__ = ["build_parser", "main"]
