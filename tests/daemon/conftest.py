"""Shared helpers of the collector daemon tests: run ``profstream collect``, compare with ``export``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

from profstream.export import export

COLLECT = [sys.executable, "-c", "from profstream.cli import main; raise SystemExit(main())", "collect"]


def collect(
    watch: Path, out: Path, *flags: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``profstream collect WATCH --output OUT --once`` (JSON logs) in a child process."""
    return subprocess.run(
        [*COLLECT, str(watch), "--output", str(out), "--log-format", "json", "-v", *flags],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def rows(directory: Path) -> dict[str, Counter[str]]:
    """Every table of a Parquet layout directory as a multiset of rows (hive partitions included)."""
    tables: dict[str, Counter[str]] = {}
    for table in sorted(p for p in directory.iterdir() if p.is_dir()):
        data = ds.dataset(table, format="parquet", partitioning="hive").to_table()
        names = sorted(data.column_names)
        tables[table.name] = Counter(repr(tuple(r[n] for n in names)) for r in data.to_pylist())
    return {name: counted for name, counted in tables.items() if counted}


def offline_rows(raw: Path, out: Path) -> dict[str, Counter[str]]:
    """What ``export --layout parquet`` gives for ``raw`` (one collection)."""
    export(raw, layout="parquet", output=out)
    return rows(out / "parquet")


def daemon_parquet(out: Path) -> Path:
    """The one collection's Parquet directory under the daemon's output."""
    (found,) = [p for p in out.rglob("parquet") if p.is_dir()]
    return found
