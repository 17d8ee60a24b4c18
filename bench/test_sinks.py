"""Throughput of the sinks, file writes to the page cache included.

    PROFSTREAM_BENCH_SCALE=2000000 pytest bench/test_sinks.py --benchmark-enable \
        --benchmark-columns=mean,min,rounds

Inputs are ``SCALE`` rows in 65,536-row batches (what operators emit), built outside the timing:
Ascend Hardware ``X`` events for the timeline (a 1,000-name dictionary, seven args, about 230 bytes
each, msprof_outputs.md §3.4), op_summary-like rows for CSV, summary JSON and Parquet. Each round
writes every batch and closes the sink (rename included). ``extra_info`` holds MB/s of output and
M rows/s; the target for the timeline is >= 250 MB/s (DESIGN.md "Performance targets"). The default
scale is small so that the test suite, which runs this file with timing disabled, only checks that
every benchmark still works.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from profstream.sinks import (
    ChromeTraceWriter,
    Column,
    CompleteEvents,
    CsvSink,
    ParquetSink,
    SummaryJsonSink,
    msprof_slice_names,
)

#: rows per benchmark input; set PROFSTREAM_BENCH_SCALE for real measurements
SCALE = int(os.environ.get("PROFSTREAM_BENCH_SCALE", "20000"))
BATCH = 65_536
DICT = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema(
    [
        ("device_id", pa.int32()),
        ("stream_id", pa.int32()),
        ("task_id", pa.int32()),
        ("op_name", DICT),
        ("task_type", DICT),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("aic_mac_ratio", pa.float64()),
    ]
)
COLUMNS = [
    Column("device_id", "Device_id"),
    Column("stream_id", "Stream ID"),
    Column("task_id", "Task ID"),
    Column("op_name", "Op Name"),
    Column("task_type", "Task Type"),
    Column("start_ns", "Task Start Time(us)", "timestamp_us"),
    Column("dur_ns", "Task Duration(us)", "duration_us"),
    Column("aic_mac_ratio", "aic_mac_ratio"),
]


def _batches(rows: int) -> list[pa.RecordBatch]:
    """``rows`` op_summary-like rows: tasks 1-100 µs long on 8 streams, names from 1,000 ops."""
    rng = np.random.default_rng(0)
    names = pa.array([f"aclnnMatmul_MatMulCommon_MatMulV2_{i}" for i in range(1000)])
    types = pa.array(["AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC"])
    starts = 1_700_000_000_000_000_000 + np.cumsum(rng.integers(1_000, 100_000, rows))
    out = []
    for first in range(0, rows, BATCH):
        n = min(BATCH, rows - first)
        out.append(
            pa.record_batch(
                [
                    pa.array(np.zeros(n, np.int32)),
                    pa.array(rng.integers(0, 8, n).astype(np.int32)),
                    pa.array(rng.integers(0, 65_535, n).astype(np.int32)),
                    pa.DictionaryArray.from_arrays(
                        pa.array(rng.integers(0, 1000, n).astype(np.int32)), names
                    ),
                    pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 4, n).astype(np.int32)), types),
                    pa.array(starts[first : first + n]),
                    pa.array(rng.integers(1_000, 100_000, n)),
                    pa.array(np.round(rng.random(n), 3)),
                ],
                schema=SCHEMA,
            )
        )
    return out


def _events(batch: pa.RecordBatch) -> CompleteEvents:
    """A batch as Ascend Hardware X events (tid = stream, msprof's args)."""
    return CompleteEvents(
        name=batch.column("op_name"),
        pid=2080782,
        tid=batch.column("stream_id"),
        ts_ns=batch.column("start_ns"),
        dur_ns=batch.column("dur_ns"),
        args={
            "Model Id": 4294967295,
            "Task Type": batch.column("task_type"),
            "Physic Stream Id": batch.column("stream_id"),
            "Task Id": batch.column("task_id"),
            "Batch Id": 0,
            "Subtask Id": 4294967295,
            "connection_id": batch.column("task_id"),
        },
    )


def _run(benchmark: Any, tmp_path: Path, write: Callable[[Path], list[Path]]) -> None:
    """Benchmark ``write`` into an emptied directory per round; report output MB/s and M rows/s."""
    directory = tmp_path / "out"

    def empty() -> None:  # untimed: the previous round's files go before the next round
        shutil.rmtree(directory, ignore_errors=True)

    write(tmp_path / "warm-up")  # compile (or load) the numba kernels outside the timing
    paths = benchmark.pedantic(write, args=(directory,), setup=empty, rounds=5)
    size = sum(p.stat().st_size for p in paths)
    assert size > 0
    stats = getattr(benchmark, "stats", None)
    if stats:
        benchmark.extra_info["MB/s"] = round(size / stats.stats.mean / 1e6, 1)
        benchmark.extra_info["M rows/s"] = round(SCALE / stats.stats.mean / 1e6, 2)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_chrome_trace_throughput(benchmark: Any, tmp_path: Path) -> None:
    """Timeline X events from columns to a file (target >= 250 MB/s)."""
    events = [_events(b) for b in _batches(SCALE)]
    naming = msprof_slice_names("msprof", "20240101000000", ".json")

    def write(directory: Path) -> list[Path]:
        with ChromeTraceWriter(directory, naming) as writer:
            for batch in events:
                writer.write_events(batch)
        return writer.paths

    _run(benchmark, tmp_path, write)


def test_csv_throughput(benchmark: Any, tmp_path: Path) -> None:
    """op_summary-like CSV with msprof cells and minimal quoting."""
    batches = _batches(SCALE)
    naming = msprof_slice_names("op_summary", "20240101000000", ".csv")

    def write(directory: Path) -> list[Path]:
        with CsvSink(directory, SCHEMA, naming, columns=COLUMNS) as sink:
            for batch in batches:
                sink.write(batch)
        return sink.paths

    _run(benchmark, tmp_path, write)


def test_summary_json_throughput(benchmark: Any, tmp_path: Path) -> None:
    """The same rows as a --format json summary."""
    batches = _batches(SCALE)

    def write(directory: Path) -> list[Path]:
        with SummaryJsonSink(directory / "op_summary.json", SCHEMA, columns=COLUMNS) as sink:
            for batch in batches:
                sink.write(batch)
        return sink.paths

    _run(benchmark, tmp_path, write)


def test_parquet_throughput(benchmark: Any, tmp_path: Path) -> None:
    """The same rows as a zstd Parquet dataset with 1 M-row row groups."""
    batches = _batches(SCALE)

    def write(directory: Path) -> list[Path]:
        with ParquetSink(directory, SCHEMA) as sink:
            for batch in batches:
                sink.write(batch)
        return sink.paths

    _run(benchmark, tmp_path, write)
