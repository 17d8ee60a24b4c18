"""Decode throughput per record family on a whole PROF directory, next to plain read speed.

For every stream of every family: read its files once to warm the page cache,
time a plain read of the same bytes (``readinto`` a reused buffer), then time
``StreamReader`` decoding them into record batches, in wall time and in CPU time
of the decoding thread (``time.thread_time``): on a machine shared with other
jobs wall time also counts the time the process waited for a core, so the CPU
time is the per-core throughput. Each measurement is the best of ``--repeat``
runs. Prints MB/s (MB = 2**20 bytes) and records/s; ``--write`` puts the table
into bench/README.md.

    python bench/decode_dir.py --simulate 910A:1024 --simulate 910B:1024 --write
    python bench/decode_dir.py --dir PATH --family hwts --family stars_soc
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from profstream.api import open_profile
from profstream.engine.sources import Stream, StreamReader
from profstream.simulate import SimulationConfig, simulate

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- decode:begin -->", "<!-- decode:end -->"


def plain_read(stream: Stream, buf: bytearray) -> float:
    started = time.perf_counter()
    for file in stream.files:
        with file.path.open("rb", buffering=0) as handle:
            while handle.readinto(buf):
                pass
    return time.perf_counter() - started


def decode(stream: Stream) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of this thread, and records of one full read of ``stream``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    reader = StreamReader(stream)
    for _ in reader:
        pass
    return time.perf_counter() - wall, time.thread_time() - cpu, reader.stats.records


@dataclass
class Totals:
    """One family's sums over its streams (seconds are each stream's best of the repeats)."""

    size: int = 0
    read_s: float = 0.0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    records: int = 0


def measure(root: Path, label: str, families: set[str], repeat: int) -> list[str]:
    totals: dict[str, Totals] = defaultdict(Totals)
    buf = bytearray(2 << 20)
    profile = open_profile(root)
    for collection in profile.collections:
        dirs = [d for d in (collection.host, *collection.devices, collection.framework) if d is not None]
        for stream in (s for d in dirs for s in d.streams if not families or s.family in families):
            plain_read(stream, buf)  # warm the page cache
            runs = [decode(stream) for _ in range(repeat)]
            row = totals[stream.family]
            row.size += sum(f.path.stat().st_size for f in stream.files)
            row.read_s += min(plain_read(stream, buf) for _ in range(repeat))
            row.wall_s += min(wall for wall, _, _ in runs)
            row.cpu_s += min(cpu for _, cpu, _ in runs)
            row.records += runs[0][2]
    lines = []
    for family, row in sorted(totals.items(), key=lambda kv: -kv[1].size):
        mb = row.size / 2**20
        speeds = (
            f"{mb / row.read_s:.0f} | {mb / row.wall_s:.0f} | {mb / row.cpu_s:.0f} | "
            f"{row.records / row.cpu_s / 1e6:.1f}"
        )
        lines.append(f"| {label} | {family} | {mb:.1f} | {speeds} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, action="append", default=[], help="an existing PROF dir or parent"
    )
    parser.add_argument("--simulate", action="append", default=[], metavar="CHIP:MB", help="simulate first")
    parser.add_argument("--work", type=Path, help="scratch directory for simulated input")
    parser.add_argument("--family", action="append", default=[], help="measure only this family (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per stream; the best one counts")
    parser.add_argument("--write", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args()
    families = set(args.family)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        for spec in args.simulate:
            chip, size = spec.split(":")
            out = Path(scratch) / f"{chip}-{size}"
            config = SimulationConfig(chip=chip, seed=5, target_bytes=int(size) << 20)  # type: ignore[arg-type]
            simulate(config, out)
            rows += measure(out, f"{chip} {size} MB", families, args.repeat)
        for path in args.dir:
            rows += measure(path, path.name, families, args.repeat)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    header = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"measured {time.strftime('%Y-%m-%d')}, warm page cache, one process, one thread, "
        f"best of {args.repeat} runs per stream; load average at the end {load}.",
        "",
        "| input | family | MB | plain read MB/s | decode MB/s (wall) | decode MB/s per core (CPU time) "
        "| decode M records/s (CPU time) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    text = "\n".join(header + rows)
    print(text)
    if args.write:
        readme = (HERE / "README.md").read_text()
        head, _, rest = readme.partition(BEGIN)
        _, _, tail = rest.partition(END)
        (HERE / "README.md").write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
