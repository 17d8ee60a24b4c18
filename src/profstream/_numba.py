"""The numba decorators of every hot loop: codecs, engine kernels and sinks (none imports the engine).

Compiled code is cached on disk next to the defining module (``cache=True``), so only the first run
after a change pays for compilation; ``nogil=True`` lets a thread decode while another works. The
cache of a kernel is invalidated by changes to its own module only: after editing an inlined helper
or a constant of another module, delete the ``*.nbi`` / ``*.nbc`` files of the modules using it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba

_F = TypeVar("_F", bound=Callable[..., Any])


def kernel(fn: _F) -> _F:
    """``numba.njit(cache=True, nogil=True)`` with the function's own signature kept for mypy.

    Compilation is lazy (first call) and the machine code is cached on disk next to the module.
    """
    return cast(_F, numba.njit(cache=True, nogil=True)(fn))


def inline(fn: _F) -> _F:
    """:func:`kernel` for the small helpers of kernels, inlined into their callers at numba IR level.

    A call that is not inlined costs a function call plus reference counting of every array
    argument, which multiplies the cost of a per-record table lookup several times.
    """
    return cast(_F, numba.njit(cache=True, nogil=True, inline="always")(fn))


def cache_is_cold(package: Path = Path(__file__).parent) -> bool:
    """No compiled kernel is cached for ``package`` yet: this run compiles them all (about 20 s once).

    numba writes ``*.nbi`` index files next to the modules, or under ``NUMBA_CACHE_DIR`` when set.
    """
    root = os.environ.get("NUMBA_CACHE_DIR")
    return not any((Path(root) if root else package).rglob("*.nbi"))
