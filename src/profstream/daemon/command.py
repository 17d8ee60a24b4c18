"""``profstream collect``: settings and flags into a :class:`~profstream.daemon.collector.Collector` run.

Flags win over the settings file (``--config``, e.g. ``configs/daemon.toml``), which wins over
``configs/default.toml``. The daemon logs as the settings say (JSON in ``daemon.toml``) unless
``--log-format`` is given, and runs in the foreground (systemd ``Type=simple``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from profstream import events
from profstream.commands import settings_of
from profstream.daemon.collector import FAULT_ENV, WINDOW_STEPS_ENV, Collector, CollectorConfig, Faults


def run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    events.configure_logging(
        verbosity=max(args.verbose or 0, settings.logging.verbosity),
        log_format=args.log_format or settings.logging.format,
    )
    daemon, export = settings.daemon, settings.export
    steps = os.environ.get(WINDOW_STEPS_ENV)
    config = CollectorConfig(
        watch_dir=Path(args.watch_dir),
        output=Path(args.output),
        poll_interval_s=daemon.poll_interval_s,
        window_s=daemon.window_s,
        storage_limit_mb=args.storage_limit or daemon.storage_limit_mb,
        status_port=args.status_port or daemon.status_port,
        once=args.once,
        on_invalid=settings.decode.on_invalid,
        chunk_bytes=settings.decode.chunk_mb << 20,
        advance_bytes=settings.decode.advance_mb << 20,
        window_steps=int(steps) if steps else None,
        layout=args.window_layout,
        timeline_limit_mb=args.timeline_limit or export.timeline_limit_mb,
        timeline_file_mb=export.timeline_file_mb,
        timeline_file_events=export.timeline_file_events,
        csv_slice_rows=export.csv_slice_rows,
        faults=Faults.from_env(os.environ.get(FAULT_ENV)),
    )
    return Collector(config).run()
