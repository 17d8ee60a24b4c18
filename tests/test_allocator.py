"""The CLI's Arrow memory pool (jemalloc unless the user chose one) and the heap trimming of pipelines."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from profstream import _allocator
from profstream._allocator import POOL_ENV, HeapTrimmer, trim_heap, use_jemalloc


def test_jemalloc_without_decay_becomes_the_default_pool_unless_the_user_chose_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = pa.default_memory_pool()
    decays: list[int] = []
    monkeypatch.setattr(pa, "jemalloc_set_decay_ms", decays.append)
    try:
        monkeypatch.setenv(POOL_ENV, "system")
        assert use_jemalloc() == before.backend_name
        assert pa.default_memory_pool().backend_name == before.backend_name
        assert decays == []  # the user's pool is left as it is
        monkeypatch.delenv(POOL_ENV)
        assert use_jemalloc() == "jemalloc"
        assert pa.default_memory_pool().backend_name == "jemalloc"
        assert decays == [0]  # freed pages go back at once
        held = pa.jemalloc_memory_pool().bytes_allocated()
        values = pa.array(range(100_000))
        assert pa.jemalloc_memory_pool().bytes_allocated() >= held + values.nbytes
    finally:
        pa.set_memory_pool(before)


def test_heap_trimmer_trims_at_most_once_per_interval_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    now = [100.0]
    monkeypatch.setattr(_allocator.time, "monotonic", lambda: now[0])
    trimmer = HeapTrimmer(lambda pad: calls.append(pad) or 1, interval_s=1.0)
    trimmer()
    trimmer()
    assert calls == [0]
    now[0] += 0.5
    trimmer()
    assert len(calls) == 1
    trimmer(force=True)
    assert len(calls) == 2
    now[0] += 1.0
    trimmer()
    assert len(calls) == 3


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(trim_heap.trim is None, reason="needs glibc's malloc_trim")
def test_trim_heap_gives_back_the_pages_of_holes_between_live_arrays() -> None:
    # 100 KB arrays stay under glibc's mmap threshold, so they live on the heap; keeping every
    # tenth leaves 90 % of the heap as holes that a heap which only shrinks from its top keeps
    arrays = [np.ones(100 * 1024, np.uint8) for _ in range(1000)]
    kept = arrays[::10]
    del arrays
    before = _resident_bytes()
    trim_heap(force=True)
    assert before - _resident_bytes() > 50 * 1024 * 1024
    assert all(int(a.sum()) == a.size for a in kept)
