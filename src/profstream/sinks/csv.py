"""Streaming summary CSV with msprof's conventions (msprof_outputs.md §1.2, §1.4).

* Header: the display names joined by ``,``; rows end in ``line_end``: ``\\n`` for msprof (its C++
  ``CsvWriter`` and the CANN files in shared/realdata), ``\\r\\n`` for the files torch_npu writes
  with Python's ``csv.writer`` (its kernel_details, memory_record, operator_memory and
  step_trace_time in shared/realdata).
* Cells: see ``_format`` (timestamps ``123.456`` + TAB, durations ``12.34``, ``N/A`` when absent,
  floats as Python prints them). Rows are rendered into a byte buffer by the numba writer of
  ``_json`` (a line template); text cells are quoted column-wise with pyarrow.compute first,
  dictionary columns once per dictionary entry.
* Slicing: a new file every ``slice_rows`` data rows (msprof's ``CSV_LIMIT``, 1,000,000), each with
  the header; the files are named at close by ``naming(index, count)`` because msprof writes no
  ``_slice_`` suffix when the whole table fits one file (``csv_writer.cpp`` ``GetSliceFileName``),
  which a streaming writer only knows at the end. A table with no rows writes no file, as msprof's
  exporters write nothing without data.

Quoting (``quote_chars``), which msprof's two writers do differently:

* ``',"\\r\\n'`` (default): a cell containing any of these characters is wrapped in ``"`` with its
  quotes doubled, as Python's ``csv.writer`` (msprof's Python path) does. msprof's parsers pre-wrap
  shape strings in quotes (``"1,2;3,4"``), which this turns into ``\"\"\"1,2;3,4\"\"\"``: the same bytes
  as both msprof paths (the C++ path triples the quotes itself, ``TaskInfoData::escapeQuotes``).
* ``None``: no quoting at all, as msprof's C++ ``CsvWriter`` joins fields; a cell with a comma then
  splits its row, exactly as it does in msprof's output.
* Add ``\\t`` to also quote timestamp cells, as torch_npu's ``kernel_details.csv`` in
  shared/realdata shows (``"1736413971558972.912\\t"``).

pyarrow's ``CSVWriter`` is not used: its quoting styles cannot express either convention
(``needed`` quotes every string cell, ``N/A`` included; ``none`` refuses a cell holding a comma or a
quote, so it cannot write msprof's pre-quoted shapes). Rendering whole lines in numba also runs 1.5 to
1.8 times as fast as formatting and joining text columns with pyarrow.compute did (bench/README.md,
"Micro results").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events as log_events
from profstream.sinks._base import SlicedOutput, SliceNaming, StagedFile, TableSink
from profstream.sinks._format import FORMAT_ROWS, Column, is_text, resolve_columns
from profstream.sinks._json import (
    DONE,
    NO_SEPARATOR,
    S_DATA_IN_FILE,
    S_EVENTS_LEFT,
    S_POS,
    S_ROW,
    Compiled,
    Template,
    new_state,
)

#: msprof's ``CSV_LIMIT``: data rows per summary CSV file
CSV_LIMIT = 1_000_000
#: ``slice_rows`` of a file that is never sliced
UNSLICED = 2**62
#: Python ``csv.writer``'s minimal quoting
MINIMAL_QUOTING = ',"\r\n'


def _char_class(chars: str) -> str:
    """An RE2 character class matching any one of ``chars``."""
    escapes = {"\r": r"\r", "\n": r"\n", "\t": r"\t", "\\": r"\\", "]": r"\]", "^": r"\^", "-": r"\-"}
    return "[" + "".join(escapes.get(char, char) for char in chars) + "]"


def _value_type(kind: pa.DataType) -> pa.DataType:
    """The type of a column's values (a dictionary's value type)."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _quote(text: str, quote_chars: str | None) -> str:
    if quote_chars and any(char in text for char in quote_chars):
        return '"' + text.replace('"', '""') + '"'
    return text


class CsvSink(TableSink):
    """One summary table as msprof CSV files: header, formatted cells, sliced every ``slice_rows``."""

    coalesce_rows = FORMAT_ROWS

    def __init__(
        self,
        directory: str | Path,
        schema: pa.Schema,
        naming: SliceNaming,
        *,
        columns: list[Column] | None = None,
        slice_rows: int = CSV_LIMIT,
        quote_chars: str | None = MINIMAL_QUOTING,
        line_end: str = "\n",
    ) -> None:
        super().__init__(schema)
        if slice_rows < 1:
            msg = f"slice_rows must be at least 1, got {slice_rows}"
            raise ValueError(msg)
        self.columns = resolve_columns(schema, columns)
        self.slice_rows = slice_rows
        self.quote_chars = quote_chars
        self._quote_pattern = _char_class(quote_chars or "")
        self.line_end = line_end
        self._header = (",".join(_quote(c.title, quote_chars) for c in self.columns) + line_end).encode()
        self._output = SlicedOutput(Path(directory), naming)
        self._file: StagedFile | None = None
        self._buffer = np.empty(1 << 20, np.uint8)
        self._state = new_state(events_left=0)
        self._log = log_events.get_logger(component="sink.csv", directory=str(directory))

    def _cells(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """Each column's values, text cells quoted: for a whole batch, so a dictionary's entries are
        quoted once, not once per slice."""
        cells = [batch.column(column.name) for column in self.columns]
        return [self._quote_cells(c) if is_text(_value_type(c.type)) else c for c in cells]

    def _template(self, cells: list[pa.Array], rows: int) -> Template:
        template = Template(rows, line_end=self.line_end)
        for column, values in zip(self.columns, cells, strict=True):
            null = None if column.null is None else _quote(column.null, self.quote_chars)
            if column.unit == "timestamp_us":
                quote = '"' if self.quote_chars and "\t" in self.quote_chars else ""
                template.member(column.name, values, role="ts_tab", null=null, wrap=(quote, "\t" + quote))
            elif column.unit == "duration_us":
                template.member(column.name, values, role="dur", null=null)
            elif is_text(_value_type(values.type)):
                template.member(column.name, values, role="raw", null=null)
            else:
                template.member(column.name, values, null=null)
        return template

    def _quote_cells(self, text: pa.Array) -> pa.Array:
        """Cells holding a quoting character wrapped in quotes, their quotes doubled; a dictionary
        column's entries once each.

        One regex pass finds them (three times faster than a substring pass per character), and
        only those cells are rewritten: most columns have none.
        """
        if pa.types.is_dictionary(text.type):
            return pa.DictionaryArray.from_arrays(text.indices, self._quote_cells(text.dictionary))
        if not self.quote_chars:
            return text
        needs = pc.match_substring_regex(text, self._quote_pattern)
        if not pc.any(needs).as_py():  # null (no text at all) or False
            return text
        needs = needs.fill_null(False)
        quoted = pc.binary_join_element_wise(
            '"', pc.replace_substring(text.filter(needs), '"', '""'), '"', ""
        )
        return pc.replace_with_mask(text, needs, quoted)

    def _write(self, batch: pa.RecordBatch) -> None:
        # a template holds an index or a value per cell; a bounded slice keeps that memory small
        cells = self._cells(batch)
        for start in range(0, batch.num_rows, FORMAT_ROWS):
            rows = min(FORMAT_ROWS, batch.num_rows - start)
            self._render(self._template([c.slice(start, rows) for c in cells], rows).compile())

    def _render(self, compiled: Compiled) -> None:
        if compiled.max_event * 2 > self._buffer.size:
            self._buffer = np.empty(compiled.max_event * 2, np.uint8)
        state = self._state
        state[S_ROW] = 0
        while True:
            if self._file is None or not state[S_EVENTS_LEFT]:
                self._new_file()
            reason = compiled.render(NO_SEPARATOR, self._buffer, state)
            self._flush()
            if reason == DONE:
                return

    def _new_file(self) -> None:
        self._file = self._output.new_file()
        self._file.write(self._header)
        self._state[S_EVENTS_LEFT] = self.slice_rows
        self._state[S_DATA_IN_FILE] = 0

    def _flush(self) -> None:
        pos = int(self._state[S_POS])
        if pos and self._file is not None:
            self._file.write(self._buffer[:pos].data)
        self._state[S_POS] = 0

    def _finish(self) -> None:
        super()._finish()
        self._output.finish()

    def _commit(self) -> list[Path]:
        paths = self._output.commit()
        for path in paths:
            self._log.info(log_events.FILE_WRITTEN, file=str(path), bytes=path.stat().st_size)
        return paths

    def _discard(self) -> None:
        self._output.discard()
