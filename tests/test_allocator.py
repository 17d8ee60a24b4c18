"""The CLI's Arrow memory pool: jemalloc unless the user chose one."""

from __future__ import annotations

import pyarrow as pa
import pytest

from profstream._allocator import POOL_ENV, use_jemalloc


def test_jemalloc_becomes_the_default_pool_unless_the_user_chose_one(monkeypatch: pytest.MonkeyPatch) -> None:
    before = pa.default_memory_pool()
    try:
        monkeypatch.setenv(POOL_ENV, "system")
        assert use_jemalloc() == before.backend_name
        assert pa.default_memory_pool().backend_name == before.backend_name
        monkeypatch.delenv(POOL_ENV)
        assert use_jemalloc() == "jemalloc"
        assert pa.default_memory_pool().backend_name == "jemalloc"
        held = pa.jemalloc_memory_pool().bytes_allocated()
        values = pa.array(range(100_000))
        assert pa.jemalloc_memory_pool().bytes_allocated() >= held + values.nbytes
    finally:
        pa.set_memory_pool(before)
