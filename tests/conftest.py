"""Test-session setup: every test starts with structured logging at debug level.

The CLI reconfigures logging per call (warning level by default); resetting
before each test keeps ``structlog.testing.capture_logs`` seeing every event
whatever ran before.
"""

from __future__ import annotations

import pytest

from profstream.events import configure_logging


@pytest.fixture(autouse=True)
def _debug_logging() -> None:
    configure_logging(verbosity=2)
