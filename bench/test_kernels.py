"""Throughput of the engine kernels (through their public wrappers, validation included).

    PROFSTREAM_BENCH_SCALE=10000000 pytest bench/test_kernels.py --benchmark-enable \
        --benchmark-columns=mean,min,rounds

Each kernel of ``tests/engine/kernels/reference.py`` ``COMPARISONS`` (the table the property tests
use) runs over one whole stream of ``SCALE`` records or intervals made by its ``make`` generator; the
rate is in ``extra_info`` (``M/s``). The default scale is small so that the test suite, which runs
this file with timing disabled, only checks that every benchmark still works.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
from tests.engine.kernels.reference import COMPARISONS
from tests.engine.operators.host_batches import tensor_info

from profstream.codecs.additional import MAX_TENSORS
from profstream.engine.operators.host_join import tensor_records

#: records (or intervals) per benchmark input; set PROFSTREAM_BENCH_SCALE for real measurements
SCALE = int(os.environ.get("PROFSTREAM_BENCH_SCALE", "20000"))


def _first_column(out: Any) -> np.ndarray:
    """The first output column of a wrapper result (results with state come as ``(rows, state)``)."""
    first = out[0]
    return first if isinstance(first, np.ndarray) else np.asarray(first[0])


def _items(inputs: dict[str, Any]) -> int:
    """Input records or intervals, the unit of the rate."""
    if "a" in inputs:
        return int(inputs["a"][0].size + inputs["b"][0].size)
    column = next(name for name in ("times", "time", "starts") if name in inputs)
    return int(np.asarray(inputs[column]).size)


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_kernel_throughput(benchmark: Any, name: str) -> None:
    """One whole-stream call of each kernel wrapper on SCALE realistic records."""
    cmp = COMPARISONS[name]
    rng = np.random.default_rng(0)
    cmp.run(cmp.make(rng, 100))  # compile (or load from cache) outside the timing
    inputs = cmp.make(rng, SCALE)
    out = benchmark(cmp.run, inputs)
    assert _first_column(out).size > 0
    stats = getattr(benchmark, "stats", None)
    if stats:
        benchmark.extra_info["M/s"] = round(_items(inputs) / stats.stats.mean / 1e6, 1)


@pytest.mark.parametrize("distinct", [64, 4096])
def test_tensor_text_throughput(benchmark: Any, distinct: int) -> None:
    """HostJoin's tensor texts (``tensor_records``) of one batch of SCALE tensor_info records, five tensors
    each, drawn from ``distinct`` descriptions (a training step repeats a few dozen; dynamic shapes more)."""
    rng = np.random.default_rng(0)
    described = [
        (
            int(rng.integers(0, 2)),
            int(rng.integers(0, 50)),
            0,
            int(rng.integers(0, 30)),
            rng.integers(1, 4096, 4),
        )
        for _ in range(distinct)
    ]
    pick = rng.integers(0, distinct, (SCALE, MAX_TENSORS))
    batch = tensor_info([(1, i, 7, [described[k] for k in pick[i]]) for i in range(SCALE)])
    out = benchmark(tensor_records, batch, 0)
    assert out.num_rows == SCALE  # one row per record, its tensors' texts joined
    tensors = int(pc.sum(out.column("tensors")).as_py())
    assert tensors == SCALE * MAX_TENSORS
    stats = getattr(benchmark, "stats", None)
    if stats:
        benchmark.extra_info["M tensors/s"] = round(tensors / stats.stats.mean / 1e6, 2)
