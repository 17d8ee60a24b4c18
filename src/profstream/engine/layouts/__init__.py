"""Layouts: which canonical table goes to which output file, in which columns and units.

* :mod:`.msprof`: ``mindstudio_profiler_output/`` (msprof_outputs.md §1 to §3);
* :mod:`.torch_npu`: ``ASCEND_PROFILER_OUTPUT/`` (framework_outputs.md §3);
* ``parquet``: every canonical table as a dataset partitioned by device, one output per table;
* :mod:`.timeline`: the chrome-trace layers both timelines share.

:func:`outputs` builds the outputs of one export; each says which tables it reads
(``Output.tables``), so the export runs one pipeline for all of them.
"""

from __future__ import annotations

from typing import Literal

from profstream.engine.layouts import msprof, torch_npu
from profstream.engine.layouts._outputs import (
    Context,
    Format,
    Limits,
    Output,
    ParquetOutput,
    TimelineOutput,
)
from profstream.engine.metadata import ExperimentalConfig
from profstream.engine.plan import TABLE_NAMES

Layout = Literal["msprof", "torch_npu", "parquet"]
Kind = Literal["timeline", "summary", "both"]
LAYOUTS: tuple[Layout, ...] = ("msprof", "torch_npu", "parquet")
#: where each layout writes, under the collection (or ``--output``)
OUTPUT_DIRS = {"msprof": msprof.OUTPUT_DIR, "torch_npu": torch_npu.OUTPUT_DIR, "parquet": "parquet"}
#: file name prefixes of the chrome-trace timelines (``trace_view[_N].json``, ``msprof_{ts}[_N].json``,
#: ``step_trace_{ts}[_N].json``); with ``--format csv`` no summary JSON starts with them
_TIMELINE_PREFIXES = ("trace_view", "msprof_", "step_trace_")
#: what the Parquet sinks of one export process hold in memory together (sinks/parquet.py BufferBudget;
#: more waits on disk): a million rows of every table at once would be about 900 MB at 1 GB of raw data.
#: With 64 MB the processes writing the 5 GB simulation's datasets peaked at 391-399 MB, with 32 MB at
#: 313-349 MB in the same wall time (bench/README.md, session 29).
PARQUET_BUFFER_BYTES = 32 << 20


def is_timeline(name: str) -> bool:
    """A file of a layout directory (written with CSV summaries) is a timeline, capped by timeline_limit."""
    return name.endswith(".json") and name.startswith(_TIMELINE_PREFIXES)


def outputs(
    context: Context,
    layout: Layout,
    kind: Kind,
    *,
    fmt: Format = "csv",
    framework: ExperimentalConfig | None = None,
    limits: Limits | None = None,
) -> list[Output]:
    """The outputs of one export of one collection into ``context.out_dir``; ``framework`` is what
    torch_npu's profiler_info.json says it collected (None without one)."""
    if layout == "parquet":
        from profstream.sinks import BufferBudget  # loads pyarrow.parquet only for this layout

        budget = BufferBudget(PARQUET_BUFFER_BYTES)  # per process: a worker gets its own copy
        return [ParquetOutput(context.out_dir, name, budget) for name in TABLE_NAMES]
    built: list[Output] = []
    if kind in ("timeline", "both"):
        if layout == "msprof":
            built += msprof.timeline_outputs(context, limits or Limits())
        else:
            built += torch_npu.timeline_outputs(context, limits or Limits(), framework)
    if kind in ("summary", "both"):
        built += (
            msprof.summary_outputs(context, fmt)
            if layout == "msprof"
            else torch_npu.summary_outputs(context, framework)
        )
    return built


__all__ = [
    "LAYOUTS",
    "OUTPUT_DIRS",
    "Context",
    "Format",
    "Kind",
    "Layout",
    "Limits",
    "Output",
    "TimelineOutput",
    "is_timeline",
    "outputs",
]
