"""Sinks: chrome-trace JSON, summary CSV, summary JSON and Parquet writers.

Every sink writes its files under hidden temporary names and renames them at ``close()``
(``abort()`` removes them); see ``_base``. Sinks import only :mod:`profstream.errors` and
:mod:`profstream.events`, never the engine (DESIGN.md "Layout").

The Parquet names load ``pyarrow.parquet`` on first use: an export to JSON and CSV never needs it, and
importing it costs each export process about 6 MB of RSS (libparquet, the S3 filesystem it pulls in).
"""

from typing import TYPE_CHECKING, Any

from profstream.sinks._base import Sink, SliceNaming, TableSink, msprof_slice_names
from profstream.sinks._format import NA, Column, Unit
from profstream.sinks.chrome_trace import (
    ChromeTraceWriter,
    CompleteEvents,
    CounterEvents,
    DroppedEvents,
    DropReport,
    FlowEvents,
    MetadataEvents,
)
from profstream.sinks.csv import CSV_LIMIT, CsvSink
from profstream.sinks.summary_json import SummaryJsonSink

if TYPE_CHECKING:
    from profstream.sinks.parquet import BufferBudget, ParquetSink, read_dataset

_PARQUET_NAMES = ("BufferBudget", "ParquetSink", "read_dataset")


def __getattr__(name: str) -> Any:
    """The Parquet names, imported when first asked for (see the module docstring)."""
    if name in _PARQUET_NAMES:
        from profstream.sinks import parquet

        return getattr(parquet, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "CSV_LIMIT",
    "NA",
    "BufferBudget",
    "ChromeTraceWriter",
    "Column",
    "CompleteEvents",
    "CounterEvents",
    "CsvSink",
    "DropReport",
    "DroppedEvents",
    "FlowEvents",
    "MetadataEvents",
    "ParquetSink",
    "Sink",
    "SliceNaming",
    "SummaryJsonSink",
    "TableSink",
    "Unit",
    "msprof_slice_names",
    "read_dataset",
]
