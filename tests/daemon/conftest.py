"""Shared helpers of the collector daemon tests: run ``profstream collect``, compare with ``export``."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

from profstream.engine.layouts import Layout, is_timeline
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


#: columns a daemon window computes from its own rows (see :func:`layout_rows`)
WINDOW_COMPUTED = ("Step Id", "Wait Time(us)", "Task Wait Time(us)")


def _file_kind(name: str) -> str:
    """A layout file's name without msprof's export timestamp and slice number."""
    return re.sub(r"_\d{14}", "", re.sub(r"_slice_\d+", "", name))


def layout_rows(directory: Path) -> dict[str, Counter[str]]:
    """The CSV rows (per file kind; its headers under ``<kind> header``, each once) and timeline
    events (``timeline``; metadata left out, each window repeats it) of every file under
    ``directory``, as multisets. A row may stop before the header does (msprof's step_trace rows end
    after their own Reduce pairs), and headers are kept without step_trace's ``Reduce`` pairs, whose
    number is the busiest iteration's in the file: a window holding only 60000/60001 steps has none.

    Two columns of kernel_details / op_summary are left out because a daemon window computes them
    from what it holds (see :mod:`profstream.daemon.collector`): Step Id (from the steps committed
    so far) and the wait time (from the previous row in the window).
    """
    found: dict[str, Counter[str]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        if is_timeline(path.name):
            events = (e for e in json.loads(path.read_text()) if e.get("ph") != "M")
            found.setdefault("timeline", Counter()).update(json.dumps(e, sort_keys=True) for e in events)
        elif path.suffix == ".csv":
            header, *lines = list(csv.reader(path.read_text().splitlines()))
            keep = [i for i, name in enumerate(header) if name not in WINDOW_COMPUTED]
            kind = _file_kind(path.name)
            named = [header[i] for i in keep if not header[i].startswith("Reduce ")]
            found.setdefault(f"{kind} header", Counter())[repr(named)] = 1
            found.setdefault(kind, Counter()).update(
                repr([line[i] for i in keep if i < len(line)]) for line in lines
            )
    return found


def offline_layout_rows(raw: Path, out: Path, layout: Layout) -> dict[str, Counter[str]]:
    """:func:`layout_rows` of ``export timeline`` and ``export summary`` of ``raw`` in ``layout``."""
    export(raw, layout=layout, output=out, kind="both")
    return layout_rows(out)
