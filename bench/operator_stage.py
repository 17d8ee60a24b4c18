"""Drain every canonical table of a PROF directory through the operator stage; print rows per table.

Run by ``bench/macro.py`` (scenario ``tables-...``) in a child process so its wall time and peak
RSS are measured alone:

    python bench/operator_stage.py DIR
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import profstream
from profstream._allocator import use_jemalloc
from profstream.engine.plan import TABLE_NAMES, Planner


def main(path: str) -> None:
    use_jemalloc()  # as the CLI does
    started = time.perf_counter()
    rows: Counter[str] = Counter()
    for collection in profstream.open(path).collections:
        pipeline, streams = Planner(collection).pipeline(TABLE_NAMES)
        for name, batch in pipeline.run(streams):
            rows[name.partition("@")[0]] += batch.num_rows
    seconds = time.perf_counter() - started
    print(" ".join(f"{name}={count}" for name, count in sorted(rows.items())), f"seconds={seconds:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
