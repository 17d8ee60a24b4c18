"""Per-process CPU time and peak RSS of one ``profstream`` command and the workers it forks.

An export on N cores is as fast as its busiest process (the longest path) and as its CPU time over all
processes divided by N; wall time alone, on a shared VM, says neither. This samples ``/proc`` every
``--every`` seconds and prints, per process, when it lived, its CPU seconds (user + system, from
``/proc/PID/stat``, which counts until the process's last sample) and its peak RSS (the kernel's
high-water mark ``VmHWM``, so a spike between two samples counts). Example:

    python bench/processes.py -- export summary -dir DIR --layout msprof --output OUT
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from macro import process_tree  # run as a script, bench/ is on the path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Seen:
    first_s: float
    last_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0


def _sample(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, peak RSS MB so far) of ``pid``, None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    peak_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return (int(stat[11]) + int(stat[12])) / TICKS, peak_kb / 1024


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--every", type=float, default=0.1, help="sampling interval in seconds")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="the profstream arguments, after --")
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "profstream", *argv], stdout=subprocess.DEVNULL)
    seen: dict[int, Seen] = {}
    while child.poll() is None:
        now = time.perf_counter() - started
        for pid in process_tree(child.pid):
            sample = _sample(pid)
            if sample is None:
                continue
            process = seen.setdefault(pid, Seen(now))
            process.last_s, process.cpu_s = now, sample[0]
            process.peak_rss_mb = max(process.peak_rss_mb, sample[1])
        time.sleep(args.every)
    wall = time.perf_counter() - started
    cpu = sum(p.cpu_s for p in seen.values())
    print(f"wall {wall:.2f} s, exit {child.returncode}, CPU {cpu:.1f} s in all")
    for pid, process in seen.items():
        print(
            f"pid {pid}: {process.first_s:5.1f}-{process.last_s:5.1f} s, CPU {process.cpu_s:5.1f} s, "
            f"peak RSS {process.peak_rss_mb:4.0f} MB"
        )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
