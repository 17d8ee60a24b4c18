"""Test-session setup: decoder kernels compiled up front, structured logging at debug level per test.

The CLI reconfigures logging per call (warning level by default); resetting
before each test keeps ``structlog.testing.capture_logs`` seeing every event
whatever ran before.
"""

from __future__ import annotations

import numpy as np
import pytest

from profstream.codecs import CODECS
from profstream.codecs._base import DecodeContext, StreamTraits, counter_gaps
from profstream.codecs._ids import reconstruct_ids
from profstream.events import configure_logging


@pytest.fixture(scope="session", autouse=True)
def _compiled_decoder_kernels() -> None:
    """Compile (or load from numba's cache) the codecs' numba kernels before hypothesis times examples.

    A first call costs seconds on a fresh checkout and ~0.2 s otherwise, far over hypothesis's
    deadline; every later call takes microseconds. The kernel codecs are those whose batches never
    view their input.
    """
    for codec in CODECS.values():
        if not codec.views_input:
            raw = codec.encode({"cnt": np.arange(2, dtype=np.uint8)})
            codec.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    ids = np.zeros(2, np.uint16)
    reconstruct_ids(ids, ids, StreamTraits())
    counter_gaps(np.zeros(2, np.uint8))
    readonly = np.zeros(2, np.uint8)
    readonly.flags.writeable = False  # Arrow columns come back read-only
    counter_gaps(readonly)


@pytest.fixture(autouse=True)
def _debug_logging() -> None:
    configure_logging(verbosity=2)
