"""Macro benchmark: time whole ``profstream`` CLI runs and record wall time and peak RSS.

Each scenario runs the CLI in a child process (start-up and numba compilation
included, as a user sees it); peak RSS is the child's ``ru_maxrss`` (the largest of the child
and the worker processes an export forks). For exports, which fork workers, the peak PSS sums the
proportional set sizes of all of them (shared pages split between them), sampled every 50 ms in a
second run, so that the sampling does not slow the timed one (see :func:`run`); single-process
scenarios show none. Results are printed and, with ``--write``, replace the table between the markers
in bench/README.md.

    python bench/macro.py --scenario simulate-100MB --scenario inspect-100MB --write
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
BEGIN, END = "<!-- macro:begin -->", "<!-- macro:end -->"


@dataclass(frozen=True)
class Result:
    scenario: str
    command: str
    wall_s: float
    peak_rss_mb: float
    input_mb: float
    peak_pss_mb: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.input_mb / self.wall_s if self.wall_s else 0.0


def du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                continue
    return found


def _pss_mb(pids: list[int]) -> float:
    """The summed proportional set size of ``pids`` (shared pages split between the processes)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total / 1024


def run(argv: list[str], module: list[str] | None = None, *, pss: bool = False) -> tuple[float, float, float]:
    """Run one CLI command (or ``module`` script) in a child process; return (wall s, the largest peak
    RSS of it and its worker processes in MB, and with ``pss`` their summed PSS at its peak, else 0).

    The PSS comes from a second run, sampled every 50 ms: reading ``smaps_rollup`` walks each
    process's page tables and holds its memory map lock, and doing so every 50 ms during the timed run
    made a 1 GB msprof-layout export 1.4 s (15 %) slower on this 2-core VM (session 20)."""
    wall, rss, _ = _run_once(argv, module, sample_pss=False)
    return wall, rss, _run_once(argv, module, sample_pss=True)[2] if pss else 0.0


def _run_once(argv: list[str], module: list[str] | None, *, sample_pss: bool) -> tuple[float, float, float]:
    # each run starts with no dirty page left to write back: a run right after the simulation (or
    # another export) otherwise shares the disk and a core with the writeback of that GB (session 30)
    os.sync()
    started = time.perf_counter()
    command = module or ["-m", "profstream"]
    child = subprocess.Popen([sys.executable, *command, *argv], stdout=subprocess.DEVNULL)
    peak_pss = 0.0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_pss
        while not done.wait(0.05):
            peak_pss = max(peak_pss, _pss_mb(process_tree(child.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    if sample_pss:
        sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    done.set()
    if sample_pss:
        sampler.join()
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv)
    return wall, usage.ru_maxrss / 1024, peak_pss  # Linux reports kilobytes


def simulated(work: Path, chip: str, size_mb: int) -> Path:
    """A simulated torch_npu run of about ``size_mb`` of raw data (made once per scratch dir)."""
    out = work / f"sim-{chip}-{size_mb}MB"
    if not out.exists():
        run(
            [
                "simulate",
                str(out),
                "--chip",
                chip,
                "--size",
                str(size_mb),
                "--seed",
                "1",
                "--framework",
                "torch_npu",
            ]
        )
    return out


def scenario_simulate(chip: str, size_mb: int) -> Callable[[Path], Result]:
    def go(work: Path) -> Result:
        out = work / f"simulate-{chip}-{size_mb}"
        argv = ["simulate", str(out), "--chip", chip, "--size", str(size_mb), "--seed", "2"]
        wall, rss, pss = run(argv)
        return Result(
            f"simulate {chip} {size_mb} MB", "profstream " + " ".join(argv), wall, rss, du_mb(out), pss
        )

    return go


def scenario_inspect(chip: str, size_mb: int) -> Callable[[Path], Result]:
    def go(work: Path) -> Result:
        src = simulated(work, chip, size_mb)
        argv = ["inspect", "-dir", str(src), "--json"]
        wall, rss, pss = run(argv)
        return Result(
            f"inspect {chip} {size_mb} MB", "profstream " + " ".join(argv), wall, rss, du_mb(src), pss
        )

    return go


def scenario_tables(chip: str, size_mb: int) -> Callable[[Path], Result]:
    def go(work: Path) -> Result:
        src = simulated(work, chip, size_mb)
        script = str(Path(__file__).with_name("operator_stage.py"))
        wall, rss, pss = run([str(src)], module=[script])
        command = f"python bench/operator_stage.py {src}"
        return Result(f"all tables {chip} {size_mb} MB", command, wall, rss, du_mb(src), pss)

    return go


def scenario_export(kind: str, layout: str = "msprof") -> Callable[[str, int], Callable[[Path], Result]]:
    """``export timeline|summary`` in ``layout`` of a simulated run, as issue #5 measures it."""

    def factory(chip: str, size_mb: int) -> Callable[[Path], Result]:
        def go(work: Path) -> Result:
            src = simulated(work, chip, size_mb)
            argv = [
                "export",
                kind,
                "-dir",
                str(src),
                "--layout",
                layout,
                "--output",
                str(work / f"export-{kind}-{layout}-{chip}-{size_mb}"),
            ]
            wall, rss, pss = run(argv, pss=True)
            label = f"export {kind} {chip} {size_mb} MB"
            if layout != "msprof":
                label += f", {layout} layout"
            return Result(label, "profstream " + " ".join(argv), wall, rss, du_mb(src), pss)

        return go

    return factory


def scenario_export_both(chip: str, size_mb: int) -> Callable[[Path], Result]:
    """The msprof binary's ``--export=on``: timeline and summary from one pass, into the PROF dir (a
    hard-linked copy of the simulated run, so the shared simulation stays as it is)."""

    def go(work: Path) -> Result:
        src = simulated(work, chip, size_mb)
        linked = work / f"export-both-{chip}-{size_mb}"
        shutil.copytree(src, linked, copy_function=os.link)
        [prof] = linked.glob("*/PROF_*")
        argv = ["--export=on", f"--output={prof}"]
        wall, rss, pss = run(argv, pss=True)
        command = "profstream " + " ".join(argv)
        label = f"export timeline and summary (--export=on) {chip} {size_mb} MB"
        return Result(label, command, wall, rss, du_mb(src), pss)

    return go


SCENARIOS: dict[str, Callable[[Path], Result]] = {
    f"{kind}-{chip}-{size}MB": factory(chip, size)
    for kind, factory in (
        ("simulate", scenario_simulate),
        ("inspect", scenario_inspect),
        ("tables", scenario_tables),
        ("export-summary", scenario_export("summary")),
        ("export-timeline", scenario_export("timeline")),
        ("export-summary-torch_npu", scenario_export("summary", "torch_npu")),
        ("export-timeline-torch_npu", scenario_export("timeline", "torch_npu")),
        ("export-parquet", scenario_export("summary", "parquet")),
        ("export-both", scenario_export_both),
    )
    for chip in ("910A", "910B")
    for size in (100, 1024, 5120, 10240)
}


def machine_speed() -> str:
    """Seconds a fixed pure-Python loop and a numpy sort take here (best of 3), run before the scenarios.

    The shared VMs this runs on differ in speed by half from one session to the next, more than most
    changes measured here; these two figures tell a slower machine from a slower build.
    """
    import numpy as np

    def best(work: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            began = time.perf_counter()
            work()
            times.append(time.perf_counter() - began)
        return min(times)

    def loop() -> int:
        total = 0
        for i in range(10_000_000):
            total += i
        return total

    values = np.random.default_rng(1).integers(0, 1 << 62, 10_000_000)
    return (
        f"Machine speed: a pure-Python loop of 10M additions {best(loop):.2f} s, "
        f"numpy sort of 10M int64 {best(lambda: np.sort(values)):.2f} s (best of 3)."
    )


def table(results: list[Result], speed: str) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"measured {time.strftime('%Y-%m-%d')} with `python bench/macro.py`.",
        speed,
        "",
        "| scenario | raw input MB | wall s | MB/s | peak RSS MB | peak PSS MB, all processes | command |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r.scenario} | {r.input_mb:.0f} | {r.wall_s:.2f} | {r.mb_per_s:.0f} | {r.peak_rss_mb:.0f} "
        f"| {f'{r.peak_pss_mb:.0f}' if r.peak_pss_mb else '-'} | `{r.command}` |"
        for r in results
    ]
    return "\n".join(lines)


def write_readme(text: str) -> None:
    readme = README.read_text()
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--write", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args()
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    speed = machine_speed()
    print(speed, flush=True)
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        results = [SCENARIOS[name](Path(scratch)) for name in args.scenario]
        results = [replace(r, command=r.command.replace(scratch, "$WORK")) for r in results]
    text = table(results, speed)
    print(text)
    if args.write:
        write_readme(text)


if __name__ == "__main__":
    main()
