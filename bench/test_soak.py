"""The collector daemon's soak test (issue #6): two minutes of a live run at 50 MB/s.

The live simulator (:func:`profstream.simulate.live`, 910B, its own collector aging slices under a
2 GB storage limit) writes 50 MB/s for 120 s in this process while a ``profstream collect`` child
follows it with the shipped daemon settings (configs/daemon.toml: polls every 0.5 s, windows of up to
10 s) in its default layout (:func:`daemon.follow`). It passes when the daemon kept up (its own
``profstream_lag_seconds``, the wait of the oldest complete slice it has not read, never reached
2 s), its memory stayed flat (after
a 20 s warm-up, the largest RSS of the second half of the run is within 10 % of the first half's),
nothing was lost (no gap, every window committed) and it ended with code 0 on SIGTERM.

It measures this machine's speed, which unit tests never do, so ``pytest`` deselects it (``-m "not
soak"`` in pyproject.toml); run it with ``pytest bench/test_soak.py -m soak`` (about 2.5 minutes,
2 GB of raw data and 2-3 GB of outputs on disk).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon import follow

RATE_MB_S = 50.0
DURATION_S = 120.0
WARM_UP_S = 20.0
MAX_LAG_S = 2.0
DAEMON_SETTINGS = Path(__file__).parents[1] / "configs" / "daemon.toml"


@pytest.mark.soak
def test_two_minutes_at_50_mb_s_keep_the_lag_under_2_s_in_flat_memory(tmp_path: Path) -> None:
    run = follow(tmp_path, RATE_MB_S, DURATION_S, DAEMON_SETTINGS, storage_limit_mb=2048)
    assert run.raw_mb >= 0.95 * RATE_MB_S * DURATION_S
    assert run.max_lag_s is not None
    assert run.max_lag_s < MAX_LAG_S, f"lag reached {run.max_lag_s:.2f} s"
    half = WARM_UP_S + (DURATION_S - WARM_UP_S) / 2
    first = [rss for at, rss in run.rss_series if WARM_UP_S <= at < half]
    second = [rss for at, rss in run.rss_series if half <= at < DURATION_S]
    assert first
    assert second
    assert max(second) <= 1.1 * max(first), f"RSS rose from {max(first):.0f} to {max(second):.0f} MB"
    assert run.gaps == 0
    assert run.finished
