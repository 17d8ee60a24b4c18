"""The CLI's Arrow memory pool (jemalloc unless the user chose one) and the heap trimming of pipelines."""

from __future__ import annotations

import os
import sys
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
    released: list[int] = []
    without_trim = HeapTrimmer(None, interval_s=1.0, loader_pages=lambda: released.append(1))
    without_trim()
    without_trim()
    assert released == [1]  # a C library without malloc_trim still lets go of the loader's pages


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resident_in(ranges: list[tuple[int, int]]) -> int:
    """The resident bytes of the mappings that start at one of ``ranges``."""
    starts, total, counting = {low for low, _ in ranges}, 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and not fields[0].endswith(":"):
            counting = int(fields[0].split("-")[0], 16) in starts
        elif counting and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


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


LLVM = "/venv/llvmlite/binding/libllvmlite.so"


def _mapping(span: str, perms: str, path: str, rss_kb: int, own_kb: int = 0) -> str:
    """One mapping of a ``/proc/<pid>/smaps`` text; ``own_kb`` of its pages dirty and anonymous."""
    fields = {"Rss": rss_kb, "Private_Dirty": own_kb, "Shared_Dirty": 0, "Anonymous": own_kb}
    return f"{span} {perms} 00000000 fd:00 42 {path}\n" + "".join(f"{k}: {v} kB\n" for k, v in fields.items())


SMAPS = "".join(
    [
        _mapping("7f0000000000-7f0000300000", "r--p", LLVM, 3000),
        _mapping("7f0000300000-7f0003300000", "r-xp", LLVM, 51200),
        _mapping("7f0003300000-7f0003400000", "r--p", LLVM, 1024, own_kb=1024),  # relocated (RELRO)
        _mapping("7f0003400000-7f0003500000", "rw-p", LLVM, 64),
        _mapping("7f0004000000-7f0005000000", "r-xp", "/venv/pyarrow/libarrow.so.2600", 16384),
        _mapping("7f0006000000-7f0006100000", "rw-p", "", 1024, own_kb=1024),
    ]
)


def test_clean_library_ranges_are_the_read_only_mappings_of_the_library_that_hold_no_page_of_their_own() -> (
    None
):
    # the relocated read-only part (dirty pages) and the writable one would lose their contents
    assert _allocator.clean_library_ranges(SMAPS, ["libllvmlite"]) == [
        (0x7F0000000000, 0x7F0000300000),
        (0x7F0000300000, 0x7F0003300000),
    ]
    assert _allocator.clean_library_ranges(SMAPS, ["libnothing"]) == []


def test_loader_pages_advise_the_ranges_once_the_loader_is_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[tuple[int, int, int]] = []
    pages = _allocator.LoaderPages(lambda *args: advised.append(args) or 0, module="a_module_never_imported")
    pages()
    assert advised == []  # nothing mapped yet: the ranges are not looked for
    monkeypatch.setitem(sys.modules, "a_module_never_imported", object())
    monkeypatch.setattr(_allocator.Path, "read_text", lambda _self: SMAPS)
    pages()
    pages()
    start, size, drop = 0x7F0000000000, 0x300000, _allocator.MADV_DONTNEED
    assert advised[:2] == [(start, size, drop), (start + size, 0x3000000, drop)]
    assert len(advised) == 4  # each call advises every range again; smaps was read once
    monkeypatch.setattr(_allocator.Path, "read_text", lambda _self: "")
    pages()
    assert len(advised) == 6


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_loader_pages_take_llvm_code_out_of_rss_and_numba_compiles_after_it() -> None:
    import ctypes

    import numba

    pages = _allocator.LoaderPages(_allocator._find_madvise())
    ranges = _allocator.clean_library_ranges(Path("/proc/self/smaps").read_text(), pages.libraries)
    assert ranges, "llvmlite's library is mapped once numba is imported"
    for low, high in ranges:  # read every page in, as compiling or loading kernels does
        ctypes.string_at(low, high - low)
    before, resident = _resident_bytes(), _resident_in(ranges)
    assert resident > 10 * 1024 * 1024
    pages()
    assert _resident_in(ranges) < resident / 10
    assert before - _resident_bytes() > resident / 2

    @numba.njit(cache=False)
    def doubled(values: np.ndarray) -> np.ndarray:  # compiled now: LLVM runs from the file again
        return values * 2

    assert doubled(np.arange(3)).tolist() == [0, 2, 4]
