"""Arrow's memory pool for profstream processes: jemalloc, whose peak RSS stays flat with input size.

With pyarrow's default pool here (mimalloc) the operator stage's peak RSS rose by about 10 % from
1 GB to 5 GB of raw data (633 to 701 MiB); with jemalloc by 3-7 % (about 590 to 630 MiB), at the
same CPU time. The system pool is about as flat only with glibc's mmap threshold pinned, and then
peaks higher. Commands and numbers: bench/README.md ("Operator stage").

A user's own choice (``ARROW_DEFAULT_MEMORY_POOL``) is left alone, and so is a pyarrow built without
jemalloc.
"""

from __future__ import annotations

import os

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_jemalloc() -> str:
    """Make jemalloc Arrow's default pool for this process (see the module docstring); returns the
    backend in use."""
    if os.environ.get(POOL_ENV):
        return str(pa.default_memory_pool().backend_name)
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return str(pa.default_memory_pool().backend_name)
    pa.set_memory_pool(pool)
    return "jemalloc"
