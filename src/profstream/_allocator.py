"""How profstream processes hold memory: Arrow's pool, and the C heap's free pages.

:func:`use_jemalloc` makes jemalloc Arrow's pool, whose peak RSS stays flat with input size, and has
it return freed pages to the kernel at once instead of after Arrow's decay time.

With pyarrow's default pool here (mimalloc) the operator stage's peak RSS rose by about 10 % from
1 GB to 5 GB of raw data (633 to 701 MiB); with jemalloc by 3-7 % (about 590 to 630 MiB), at the
same CPU time. The system pool is about as flat only with glibc's mmap threshold pinned, and then
peaks higher. Commands and numbers: bench/README.md ("Operator stage").

Without the decay time, the torch_npu summary's main process peaks about 13 MB lower (1 GB
simulation: 372-373 MB against 385-386 MB, `bench/processes.py`) at no wall or CPU time seen beyond
noise: a streaming pipeline frees a batch's pages long before it allocates as many again.

A user's own choice (``ARROW_DEFAULT_MEMORY_POOL``) is left alone, and so is a pyarrow built without
jemalloc.

:func:`trim_heap` gives the free pages inside glibc's heap back to the kernel; every pipeline step
calls it, and it trims at most once a second. glibc (2.8 and later) releases a free page wherever it
lies, not only at the heap's top.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import cast

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
    pa.jemalloc_set_decay_ms(0)
    return "jemalloc"


#: seconds between two heap trims of a running pipeline
TRIM_INTERVAL_S = 1.0


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


class HeapTrimmer:
    """Gives the C heap's free pages back to the kernel, at most once per ``interval_s``.

    numpy's arrays live on glibc's heap, and a streaming pipeline frees them in an order that leaves
    holes between live blocks; the heap cannot shrink past them, so without trimming its free part
    stays resident and grows with the run (in the torch_npu export of the 5 GB simulation, 190 MB of
    a 408 MB heap were free near the end of the pipeline; glibc's ``mallinfo2``).
    ``malloc_trim(0)`` releases the free pages of every hole.
    """

    def __init__(self, trim: Callable[[int], int] | None, interval_s: float = TRIM_INTERVAL_S) -> None:
        self.trim = trim  #: ``malloc_trim``, None where the C library has none (then this does nothing)
        self.interval_s = interval_s
        self._next = 0.0  #: monotonic time of the next trim

    def __call__(self, *, force: bool = False) -> None:
        """Trim if the interval has passed since the last trim, or now with ``force`` (after a stage
        dropped its state)."""
        if self.trim is None:
            return
        if force or time.monotonic() >= self._next:
            self.trim(0)
            self._next = time.monotonic() + self.interval_s


#: the process's trimmer (one heap per process); every pipeline step calls it
trim_heap = HeapTrimmer(_find_malloc_trim())
