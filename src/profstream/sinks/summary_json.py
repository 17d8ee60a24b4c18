"""``--format json`` summaries: a JSON array with one object per row (msprof_outputs.md §1.6).

msprof's ``create_json`` (AM ``common_func/msvp_common.py``) zips the CSV headers with each row
and ``json.dump``s the list, so: keys are the headers in order, numbers stay numbers, absent values
are the string ``"N/A"``, and the separators are ``json.dump``'s (``", "``, ``": "``). The rows are
the ones the CSV would hold, timestamp cells included: ``"1.500\\t"`` keeps its TAB (the exporters
append it to the row data, not in the CSV writer). Durations are exact numbers (``12.34``); see
``_format``. Non-ASCII text is written as UTF-8 rather than ``\\uXXXX`` escapes (same JSON value).

Rows are rendered from the batch columns by the numba writer of ``_json`` and streamed to one file
(msprof does not slice JSON summaries), renamed into place at close.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from profstream import events as log_events
from profstream.sinks._base import StagedFile, TableSink
from profstream.sinks._format import FORMAT_ROWS, Column, resolve_columns
from profstream.sinks._json import (
    BUFFER_FULL,
    S_POS,
    S_ROW,
    Template,
    new_state,
)

_SEPARATOR = b", "


class SummaryJsonSink(TableSink):
    """One summary table as a msprof ``--format json`` file at ``path``."""

    coalesce_rows = FORMAT_ROWS

    def __init__(
        self,
        path: str | Path,
        schema: pa.Schema,
        *,
        columns: list[Column] | None = None,
        buffer_bytes: int = 1 << 20,
    ) -> None:
        super().__init__(schema)
        self.path = Path(path)
        self.columns = resolve_columns(schema, columns)
        self._buffer = np.empty(max(buffer_bytes, 1 << 12), np.uint8)
        self._state = new_state()
        self._file = StagedFile(self.path.parent, self.path.name)
        self._file.write(b"[")
        self._log = log_events.get_logger(component="sink.summary_json", file=str(self.path))

    def _template(self, batch: pa.RecordBatch) -> Template:
        template = Template(batch.num_rows, key_sep=": ", member_sep=", ")
        for column in self.columns:
            values = batch.column(column.name)
            if column.unit == "duration_us":
                template.member(column.title, values, role="dur", null=column.null)
            elif column.unit == "timestamp_us":
                template.member(column.title, values, role="ts_tab", null=column.null)
            else:
                template.member(column.title, values, null=column.null)
        return template

    def _write(self, batch: pa.RecordBatch) -> None:
        compiled = self._template(batch).compile(len(_SEPARATOR))
        if compiled.max_event * 2 > self._buffer.size:
            self._flush()
            self._buffer = np.empty(compiled.max_event * 2, np.uint8)
        state = self._state
        state[S_ROW] = 0
        separator = np.frombuffer(_SEPARATOR, np.uint8)
        while True:
            if compiled.render(separator, self._buffer, state) != BUFFER_FULL:
                return
            self._flush()

    def _flush(self) -> None:
        pos = int(self._state[S_POS])
        if pos:
            self._file.write(self._buffer[:pos].data)
            self._state[S_POS] = 0

    def _finish(self) -> None:
        super()._finish()
        self._flush()
        self._file.write(b"]")
        self._file.finish()

    def _commit(self) -> list[Path]:
        path = self._file.commit(self.path.name)
        self._log.info(log_events.FILE_WRITTEN, file=str(path), rows=self.rows_written)
        return [path]

    def _discard(self) -> None:
        self._file.discard()
