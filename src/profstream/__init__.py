"""profstream: a streaming engine for Huawei Ascend profiler data.

``profstream.open(path)`` gives a profile's devices, record families and
decoded record batches; see the README for the CLI and output layouts.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("profstream")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

if TYPE_CHECKING:
    from profstream.api import Profile

__all__ = ["__version__", "open"]


def open(path: Any, **options: Any) -> Profile:  # noqa: A001 - the documented entry point mirrors io.open
    """Open a PROF_XXX directory (or its parent, an ``*_ascend_pt`` dir, or a dir of many)."""
    from profstream.api import open_profile

    return open_profile(path, **options)
