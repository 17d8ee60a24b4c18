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

It also lets go of the pages of LLVM's code that loading numba's cached kernels read in
(:class:`LoaderPages`): about 66 MB of every process's RSS once its first kernels are loaded, which
only the next kernel to load would run again.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
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


#: the shared libraries whose code only compiles or loads numba kernels (llvmlite's build of LLVM), and
#: the module whose import maps them
LOADER_LIBRARIES = ("libllvmlite",)
LOADER_MODULE = "llvmlite.binding"
#: ``madvise`` advice: drop the pages; a clean page of a file mapping is read again from the file if used
MADV_DONTNEED = 4


def _find_madvise() -> Callable[[int, int, int], int] | None:
    """The C library's ``madvise``, or None without one."""
    try:
        madvise = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], madvise)


def clean_library_ranges(smaps: str, libraries: Sequence[str]) -> list[tuple[int, int]]:
    """The address ranges of ``smaps`` (``/proc/<pid>/smaps``) that map one of ``libraries``
    read-only and hold no page of their own (no dirty, no anonymous page): the code and constants of
    a shared library, whose pages the kernel may drop and read again from the file. A relocated
    read-only part (RELRO) holds dirty pages and is left out, as is every writable one."""
    ranges: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    own = 0
    for line in smaps.splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            if current is not None and not own:
                ranges.append(current)
            name = Path(fields[5]).name if len(fields) > 5 else ""
            low, high = (int(bound, 16) for bound in fields[0].split("-"))
            wanted = "w" not in fields[1] and any(name.startswith(lib) for lib in libraries)
            current, own = ((low, high) if wanted else None), 0
        elif fields and fields[0] in ("Private_Dirty:", "Shared_Dirty:", "Anonymous:"):
            own += int(fields[1])
    if current is not None and not own:
        ranges.append(current)
    return ranges


class LoaderPages:
    """Lets go of the resident code pages of numba's compiler (LLVM, in llvmlite's shared library).

    Loading a cached kernel runs LLVM's linker, which reads in about 66 MB of LLVM's code and
    constants; once a process has loaded the kernels it uses, nothing runs that code until another
    kernel loads. Those pages are clean pages of a file mapping, which RSS counts: ``madvise``
    (``MADV_DONTNEED``) takes them out of the process (they stay in the page cache), and a later
    kernel load reads back the ones it needs. The ranges are found once ``module`` has mapped the
    libraries (a forked child maps them at the same addresses); where ``/proc/self/smaps`` or
    ``madvise`` is missing this does nothing.
    """

    def __init__(
        self,
        madvise: Callable[[int, int, int], int] | None,
        libraries: Sequence[str] = LOADER_LIBRARIES,
        module: str = LOADER_MODULE,
    ) -> None:
        self.madvise = madvise  #: None where the C library has none (then this does nothing)
        self.libraries = tuple(libraries)
        self.module = module
        self._ranges: list[tuple[int, int]] | None = None

    def __call__(self) -> None:
        if self.madvise is None or self.module not in sys.modules:
            return
        if self._ranges is None:
            try:
                smaps = Path("/proc/self/smaps").read_text()
            except OSError:
                smaps = ""
            self._ranges = clean_library_ranges(smaps, self.libraries)
        for low, high in self._ranges:
            self.madvise(low, high - low, MADV_DONTNEED)


class HeapTrimmer:
    """Gives the C heap's free pages back to the kernel, at most once per ``interval_s``.

    numpy's arrays live on glibc's heap, and a streaming pipeline frees them in an order that leaves
    holes between live blocks; the heap cannot shrink past them, so without trimming its free part
    stays resident and grows with the run (in the torch_npu export of the 5 GB simulation, 190 MB of
    a 408 MB heap were free near the end of the pipeline; glibc's ``mallinfo2``).
    ``malloc_trim(0)`` releases the free pages of every hole.
    """

    def __init__(
        self,
        trim: Callable[[int], int] | None,
        interval_s: float = TRIM_INTERVAL_S,
        *,
        loader_pages: Callable[[], None] | None = None,
    ) -> None:
        self.trim = trim  #: ``malloc_trim``, None where the C library has none (then this does nothing)
        self.interval_s = interval_s
        self.loader_pages = loader_pages  #: what lets go of the kernel loader's pages with each trim
        self._next = 0.0  #: monotonic time of the next trim

    def __call__(self, *, force: bool = False) -> None:
        """Trim if the interval has passed since the last trim, or now with ``force`` (after a stage
        dropped its state)."""
        if self.trim is None and self.loader_pages is None:
            return
        if force or time.monotonic() >= self._next:
            if self.trim is not None:
                self.trim(0)
            if self.loader_pages is not None:
                self.loader_pages()
            self._next = time.monotonic() + self.interval_s


#: the process's trimmer (one heap per process); every pipeline step calls it
trim_heap = HeapTrimmer(_find_malloc_trim(), loader_pages=LoaderPages(_find_madvise()))
