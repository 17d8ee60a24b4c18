"""Structured-log event names, and the one place where logging is configured.

Library code only calls :func:`get_logger` and emits the names below; the entry
point (CLI, daemon) calls :func:`configure_logging` once.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Final, Literal

import msgspec
import structlog

# Decoding and sources
FILE_IGNORED: Final = "file_ignored"  # an unknown file name in a data dir (logged once per name)
DATA_NOT_DECODED: Final = "data_not_decoded"  # an export read past data files no codec reads (per kind)
RECORDS_DROPPED: Final = "records_dropped"  # invalid records skipped under the skip policy
VALUES_REPLACED: Final = "values_replaced"  # values kept but replaced as the profiler's tools do
RECORDS_LOST: Final = "records_lost"  # gaps in a record family's rolling counter
RECORDS_UNMATCHED: Final = "records_unmatched"  # records an operator could not pair or join
L2_CACHE_NOT_COMPUTED: Final = "l2_cache_not_computed"  # no rates: the chip or its configured events
TRUNCATED_TAIL: Final = "truncated_tail"  # a stream ends in a partial record
LEADING_BYTES_DROPPED: Final = "leading_bytes_dropped"  # aged stream starts mid-record
BATCH_DECODED: Final = "batch_decoded"
KERNELS_COMPILING: Final = "kernels_compiling"  # no cached numba kernels yet: this run compiles them
# Export
EXPORT_STARTED: Final = "export_started"
EXPORT_FINISHED: Final = "export_finished"
EXPORT_PART_STARTED: Final = "export_part_started"  # outputs that share no pipeline, in a worker process
FILE_WRITTEN: Final = "file_written"
TIMELINE_EVENTS_DROPPED: Final = "timeline_events_dropped"
# Simulator
SIMULATION_WRITTEN: Final = "simulation_written"
# Daemon
DIR_DISCOVERED: Final = "dir_discovered"
SLICE_PROCESSED: Final = "slice_processed"
WINDOW_COMMITTED: Final = "window_committed"
AGED: Final = "aged"
GAP: Final = "gap"
DECODE_ERROR: Final = "decode_error"
BACKPRESSURE: Final = "backpressure"
PLANNING_WAITS: Final = "planning_waits"  # a collection cannot be planned, or ended, yet (what it waits for)
REPLANNED: Final = "replanned"  # a collection re-planned from the start (a new stream, grown dictionaries)
#: a torch_npu collection planned on a framework clock told from its data (profiler_info.json not yet
#: written), and what profiler_info.json said of it when it came
FRAMEWORK_CLOCK: Final = "framework_clock"
WATCH_DIR_MISSING: Final = "watch_dir_missing"
WINDOW_WRITER_LOST: Final = "window_writer_lost"  # the daemon's writer process died: resume from the commit
# Configuration
OPTION_COERCED: Final = "option_coerced"  # an option value the product reads as another (aicpu -> off)
# Cluster
CLUSTER_STARTED: Final = "cluster_started"
RANKS_NUMBERED: Final = "ranks_numbered"  # no rank ids under a cluster dir: ranks numbered in path order

LogFormat = Literal["console", "json"]


def _json_dumps(obj: Any, **_: Any) -> str:
    return msgspec.json.encode(obj).decode()


def configure_logging(*, verbosity: int = 0, log_format: LogFormat = "console") -> None:
    """Configure structlog once for a process; logs go to stderr.

    verbosity 0 shows warnings and errors, 1 adds info, 2 adds debug.
    """
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    renderer: Any
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*_: Any) -> structlog.WriteLogger:
    """A WriteLogger on the *current* sys.stderr (resolved per logger, so redirections are honoured).

    It writes each event and its newline in one call: ``print``'s two writes let another process on
    the same stderr (an export's or the daemon's worker) put its line between an event and its
    newline, which joined two JSON lines into one."""
    return structlog.WriteLogger(file=sys.stderr)


def get_logger(**bound: Any) -> Any:
    """A structlog logger with ``bound`` context (component, file, device, ...).

    Until an entry point calls :func:`configure_logging`, events go to the stdlib
    logger ``profstream``, which shows only warnings and errors by default: the
    library prints nothing unless something is wrong, and applications route it
    with ordinary ``logging`` configuration.
    """
    if structlog.is_configured():
        return structlog.get_logger().bind(**bound)
    return structlog.wrap_logger(
        logging.getLogger("profstream"),
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    ).bind(**bound)
