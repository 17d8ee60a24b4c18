"""Sinks: chrome-trace JSON, summary CSV, summary JSON and Parquet writers.

Every sink writes its files under hidden temporary names and renames them at ``close()``
(``abort()`` removes them); see ``_base``. Sinks import only :mod:`profstream.errors` and
:mod:`profstream.events`, never the engine (DESIGN.md "Layout").
"""

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
from profstream.sinks.parquet import BufferBudget, ParquetSink, read_dataset
from profstream.sinks.summary_json import SummaryJsonSink

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
