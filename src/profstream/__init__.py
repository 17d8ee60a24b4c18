"""profstream: a streaming engine for Huawei Ascend profiler data.

``profstream.open(path)`` gives a profile's devices, record families and
decoded record batches; see the README for the CLI and output layouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profstream.api import Profile

__all__ = ["__version__", "open"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata when asked for: importlib.metadata costs
    about 50 ms, which every CLI start would otherwise pay."""
    if name != "__version__":
        msg = f"module 'profstream' has no attribute {name!r}"
        raise AttributeError(msg)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("profstream")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"


def open(path: Any, **options: Any) -> Profile:  # noqa: A001 - the documented entry point mirrors io.open
    """Open a PROF_XXX directory (or its parent, an ``*_ascend_pt`` dir, or a dir of many)."""
    from profstream.api import open_profile

    return open_profile(path, **options)
