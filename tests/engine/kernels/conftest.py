"""Compile (or load from numba's cache) every kernel once, before hypothesis starts timing examples."""

from __future__ import annotations

import numpy as np
import pytest

from profstream.engine.kernels._table import Table, find, put, remove
from tests.engine.kernels.reference import COMPARISONS


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """Run each kernel (and the table helpers the tests call directly) once on a small input."""
    rng = np.random.default_rng(0)
    for cmp in COMPARISONS.values():
        cmp.run(cmp.make(rng, 60))
    table = Table.from_entries(*Table.empty(1, 1).entries())
    key = np.zeros((1, 1), np.int64)
    slot, _ = find(table.keys, table.used, key, 0)
    put(table.keys, table.used, key, 0, slot)
    remove(table.keys, table.values, table.used, slot)
