"""``--format json`` summaries: a JSON array with one object per row (msprof_outputs.md §1.6).

msprof's ``create_json`` (AM ``common_func/msvp_common.py``) zips the CSV headers with each row
and ``json.dump``s the list, so: keys are the headers in order, numbers stay numbers, absent values
are the string ``"N/A"``, and the separators are ``json.dump``'s (``", "``, ``": "``). The rows are
the ones the CSV would hold, timestamp cells included: ``"1.500\\t"`` keeps its TAB (the exporters
append it to the row data, not in the CSV writer). Durations are exact numbers (``12.34``); see
``_format``. Non-ASCII text is written as ``\\uXXXX`` escapes, as ``json.dump`` does by default.

Rows are rendered from the batch columns by the numba writer of ``_json`` and streamed to one file
(msprof does not slice JSON summaries), renamed into place at close.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events as log_events
from profstream.sinks._base import StagedFile, TableSink
from profstream.sinks._format import FORMAT_ROWS, Column, is_text, resolve_columns
from profstream.sinks._json import (
    BUFFER_FULL,
    S_POS,
    S_ROW,
    Template,
    new_state,
)

_SEPARATOR = b", "
#: characters ``json.dump`` escapes as ``\\uXXXX`` that the writer would copy (``ensure_ascii``)
_NOT_PRINTED_AS_IS = r"[^\x{00}-\x{7e}]"


def _ascii_strings(values: pa.Array) -> pa.Array | None:
    """A text column holding non-ASCII characters as ``json.dump`` writes its values (quoted, every
    non-ASCII character as ``\\uXXXX``); None for any other column, which the writer's own escaping
    prints as ``json.dump`` does. A dictionary column converts its entries only."""
    if pa.types.is_dictionary(values.type):
        entries = _ascii_strings(values.dictionary)
        return None if entries is None else pa.DictionaryArray.from_arrays(values.indices, entries)
    # json.dump escapes DEL too: everything outside space to tilde but the control characters,
    # which the writer escapes the same way
    if not is_text(values.type) or not pc.any(pc.match_substring_regex(values, _NOT_PRINTED_AS_IS)).as_py():
        return None
    return pa.array([None if v is None else json.dumps(v) for v in values.to_pylist()], pa.string())


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
            elif column.unit == "number":
                template.member(column.title, values, role="raw", null=column.null)
            elif (escaped := _ascii_strings(values)) is not None:
                template.member(column.title, escaped, role="raw", null=column.null)
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
