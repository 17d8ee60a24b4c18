"""Decode throughput per record family on a whole PROF directory, next to plain read speed.

For every stream of every family: read its files once to warm the page cache,
time a plain read of the same bytes (``readinto`` a reused buffer), then time
``StreamReader`` decoding them into record batches. Prints MB/s and records/s;
``--write`` puts the table into bench/README.md.

    python bench/decode_dir.py --simulate 910A:1024 --simulate 910B:1024 --write
    python bench/decode_dir.py --dir PATH
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections import defaultdict
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


def decode(stream: Stream) -> tuple[float, int]:
    started = time.perf_counter()
    reader = StreamReader(stream)
    for _ in reader:
        pass
    return time.perf_counter() - started, reader.stats.records


def measure(root: Path, label: str) -> list[str]:
    totals: dict[str, list[float]] = defaultdict(
        lambda: [0.0, 0.0, 0.0, 0.0]
    )  # bytes, read s, decode s, records
    buf = bytearray(2 << 20)
    profile = open_profile(root)
    for collection in profile.collections:
        dirs = [d for d in (collection.host, *collection.devices, collection.framework) if d is not None]
        for stream in (s for d in dirs for s in d.streams):
            size = sum(f.path.stat().st_size for f in stream.files)
            plain_read(stream, buf)  # warm the page cache
            read_s = plain_read(stream, buf)
            decode_s, records = decode(stream)
            row = totals[stream.family]
            row[0] += size
            row[1] += read_s
            row[2] += decode_s
            row[3] += records
    lines = []
    for family, (size, read_s, decode_s, records) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        mb = size / 2**20
        speeds = f"{mb / read_s:.0f} | {mb / decode_s:.0f} | {records / decode_s / 1e6:.1f}"
        lines.append(f"| {label} | {family} | {mb:.1f} | {speeds} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, action="append", default=[], help="an existing PROF dir or parent"
    )
    parser.add_argument("--simulate", action="append", default=[], metavar="CHIP:MB", help="simulate first")
    parser.add_argument("--work", type=Path, help="scratch directory for simulated input")
    parser.add_argument("--write", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        for spec in args.simulate:
            chip, size = spec.split(":")
            out = Path(scratch) / f"{chip}-{size}"
            config = SimulationConfig(chip=chip, seed=5, target_bytes=int(size) << 20)  # type: ignore[arg-type]
            simulate(config, out)
            rows += measure(out, f"{chip} {size} MB")
        for path in args.dir:
            rows += measure(path, path.name)
    header = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"measured {time.strftime('%Y-%m-%d')}, warm page cache, one process, one core.",
        "",
        "| input | family | MB | plain read MB/s | decode MB/s | decode M records/s |",
        "|---|---|---:|---:|---:|---:|",
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
