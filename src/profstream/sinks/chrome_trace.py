"""Streaming Chrome trace JSON (msprof ``msprof_{ts}.json`` / torch_npu ``trace_view.json``).

The file is one JSON array of event objects with no ``traceEvents`` wrapper, as msprof writes it
(msprof_outputs.md §3.1), one event per line::

    [
    {"name":"process_name","pid":2080782,"tid":0,"ph":"M","args":{"name":"Ascend Hardware"}},
    {"name":"MatMul","pid":2080782,"tid":2,"ts":"1700000000000001.500","dur":12.34,"ph":"X","args":{}}
    ]

Event shapes and key order follow msprof's C++ writer (AM ``csrc/domain/entities/json_trace/
trace_event.cpp``, ``meta_data_event.cpp``; msprof_outputs.md §3.2): ``X`` = name, pid, tid, ts,
dur, ph, [cat], args (always present); ``C`` = name, pid, tid, ts, ph, args ``{series: value}``;
``M`` = name, pid, tid, ph, args (``{"name"}``, ``{"labels"}`` or ``{"sort_index"}``); flows
``s``/``f``/``t`` = name, pid, tid, ph, cat, id, ts, and ``"bp":"e"`` on ``f`` (on ``s`` too where
asked: torch_npu's ``TraceEventManager`` flows). ``ts`` is a JSON
string of microseconds with exactly three decimals, ``dur`` a number (see ``_json``). Each batch of
events is written from its columns by a numba kernel into a reused buffer (peers.md §5.4); see
:class:`ChromeTraceWriter` for the file limits.

Choices where msprof differs from itself or is silent:

* Output is compact (msprof's C++ path uses rapidjson's PrettyWriter, its Python path
  ``json.dumps``' spaced separators); viewers parse both, and the limits below are in bytes.
* Optional members with an absent value (a null ``cat`` or arg) are left out of that event, as
  msprof leaves out a blank ``cat``; a float arg that is NaN or infinite counts as absent (JSON
  has no text for it).
* A flow ``id`` is written as given: pass strings for msprof's C++ form (``"id":"4294967296"``),
  integers for torch_npu's numeric ids. Flows carry ``args`` only when some are given (the Step
  Trace flows of msprof_outputs.md §3.6 have them).
* Events are written in the order they are given; msprof sorts by ``ts`` before slicing, which a
  streaming writer leaves to its producer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pyarrow as pa

from profstream import events as log_events
from profstream.errors import ConfigError
from profstream.sinks._base import Sink, SlicedOutput, SliceNaming, StagedFile
from profstream.sinks._json import (
    BUFFER_FULL,
    DONE,
    FILE_FULL,
    S_BUDGET_LEFT,
    S_DATA_IN_FILE,
    S_EVENTS_LEFT,
    S_FILE_LEFT,
    S_IN_FILE,
    S_PENDING,
    S_POS,
    S_ROW,
    UNLIMITED,
    ColumnLike,
    Compiled,
    Template,
    as_arrow,
    int_values,
    new_state,
    render_pieces,
)

OPEN = b"[\n"
SEPARATOR = b",\n"
CLOSE = b"\n]\n"
_SEPARATOR = np.frombuffer(SEPARATOR, np.uint8)

MetadataName = Literal[
    "process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"
]
#: the single key of each metadata event's ``args``
METADATA_KEYS: Mapping[str, str] = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}


def _rows(*columns: ColumnLike | Mapping[str, ColumnLike]) -> int:
    """The row count of a batch of events: the length of its array columns (1 if all are scalars)."""
    rows = 1
    for column in columns:
        values = column.values() if isinstance(column, Mapping) else (column,)
        for value in values:
            if isinstance(value, pa.Array | pa.ChunkedArray | np.ndarray) and len(value) != 1:
                rows = len(value)
                break
    return rows


def _head(template: Template, name: ColumnLike, pid: ColumnLike, tid: ColumnLike) -> None:
    template.member("name", name, required=True)
    template.member("pid", pid, required=True)
    template.member("tid", tid, required=True)


def _args(template: Template, args: Mapping[str, ColumnLike]) -> None:
    template.open("args")
    for key, value in args.items():
        template.member(key, value)
    template.close()


def _times(rows: int, ts_ns: ColumnLike, dur_ns: ColumnLike = 0) -> tuple[np.ndarray, np.ndarray]:
    """Start and end ns of every event (for the drop report)."""
    starts = np.broadcast_to(int_values(as_arrow(ts_ns, rows, "ts"), "ts"), rows)
    return starts, starts + np.broadcast_to(int_values(as_arrow(dur_ns, rows, "dur"), "dur"), rows)


@dataclass(frozen=True)
class CompleteEvents:
    """``X`` events: one per row, spanning ``[ts_ns, ts_ns + dur_ns)``."""

    name: ColumnLike
    pid: ColumnLike
    tid: ColumnLike
    ts_ns: ColumnLike
    dur_ns: ColumnLike
    cat: ColumnLike = None
    args: Mapping[str, ColumnLike] = field(default_factory=dict)

    ph = "X"

    @property
    def rows(self) -> int:
        return _rows(self.name, self.pid, self.tid, self.ts_ns, self.dur_ns, self.cat, self.args)

    def template(self, rows: int) -> Template:
        template = Template(rows)
        _head(template, self.name, self.pid, self.tid)
        template.member("ts", self.ts_ns, role="ts", required=True)
        template.member("dur", self.dur_ns, role="dur", required=True)
        template.constant("ph", "X")
        template.member("cat", self.cat)
        _args(template, self.args)
        return template

    def times(self, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        return _times(rows, self.ts_ns, self.dur_ns)


@dataclass(frozen=True)
class CounterEvents:
    """``C`` events: the value of each series at ``ts_ns``."""

    name: ColumnLike
    pid: ColumnLike
    tid: ColumnLike
    ts_ns: ColumnLike
    series: Mapping[str, ColumnLike]

    ph = "C"

    @property
    def rows(self) -> int:
        return _rows(self.name, self.pid, self.tid, self.ts_ns, self.series)

    def template(self, rows: int) -> Template:
        template = Template(rows)
        _head(template, self.name, self.pid, self.tid)
        template.member("ts", self.ts_ns, role="ts", required=True)
        template.constant("ph", "C")
        _args(template, self.series)
        return template

    def times(self, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        return _times(rows, self.ts_ns)


@dataclass(frozen=True)
class FlowEvents:
    """Flow events of one phase: ``s`` (start), ``t`` (step) or ``f`` (end, bound to the enclosing slice)."""

    phase: Literal["s", "t", "f"]
    name: ColumnLike
    pid: ColumnLike
    tid: ColumnLike
    ts_ns: ColumnLike
    cat: ColumnLike
    id: ColumnLike
    args: Mapping[str, ColumnLike] = field(default_factory=dict)
    bound_start: bool = False  #: ``"bp":"e"`` on ``s`` events too, as torch_npu writes its flows

    @property
    def ph(self) -> str:
        return self.phase

    @property
    def rows(self) -> int:
        return _rows(self.name, self.pid, self.tid, self.ts_ns, self.cat, self.id, self.args)

    def template(self, rows: int) -> Template:
        if self.phase not in ("s", "t", "f"):
            msg = f"flow phase must be 's', 't' or 'f', got {self.phase!r}"
            raise ValueError(msg)
        template = Template(rows)
        _head(template, self.name, self.pid, self.tid)
        template.constant("ph", self.phase)
        template.member("cat", self.cat, required=True)
        template.member("id", self.id, required=True)
        template.member("ts", self.ts_ns, role="ts", required=True)
        if self.phase == "f" or (self.phase == "s" and self.bound_start):
            template.constant("bp", "e")
        if self.args:
            _args(template, self.args)
        return template

    def times(self, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        return _times(rows, self.ts_ns)


@dataclass(frozen=True)
class MetadataEvents:
    """``M`` events of one kind: names, labels and sort indices of processes and threads.

    They are repeated at the head of every file the writer rolls to.
    """

    name: MetadataName
    pid: ColumnLike
    tid: ColumnLike
    value: ColumnLike

    ph = "M"

    @property
    def rows(self) -> int:
        return _rows(self.pid, self.tid, self.value)

    def template(self, rows: int) -> Template:
        if self.name not in METADATA_KEYS:
            msg = f"metadata name must be one of {sorted(METADATA_KEYS)}, got {self.name!r}"
            raise ValueError(msg)
        template = Template(rows)
        template.constant("name", self.name)
        template.member("pid", self.pid, required=True)
        template.member("tid", self.tid, required=True)
        template.constant("ph", "M")
        template.open("args")
        template.member(METADATA_KEYS[self.name], self.value, required=True)
        template.close()
        return template

    def times(self, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
        return None


Events = CompleteEvents | CounterEvents | FlowEvents | MetadataEvents


class DroppedEvents(msgspec.Struct, frozen=True, kw_only=True):
    """Events of one ``ph`` that the budget left out."""

    count: int
    first_ns: int | None  #: earliest start among them (None for ``M`` events, which have no time)
    last_ns: int | None  #: latest end among them


class DropReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a timeline budget (``timeline_limit``) left out, per event phase."""

    budget_bytes: int | None
    dropped: dict[str, DroppedEvents] = msgspec.field(default_factory=dict)

    @property
    def count(self) -> int:
        """Events dropped in all."""
        return sum(d.count for d in self.dropped.values())


class ChromeTraceWriter(Sink):
    """Chrome trace files from batches of events (:meth:`write_events`), rolled and budgeted.

    * ``max_file_bytes`` / ``max_file_events``: a file is closed and the next one opened before an
      event would take it past either limit (events counted with the repeated ``M`` head). Every
      file starts with all ``M`` events written so far, so each one opens on its own in a viewer;
      a file always takes at least one event after its head, however large.
    * ``budget_bytes`` (``timeline_limit``): the bytes of all files together, brackets and heads
      included, never exceed it. The first event that does not fit ends the timeline: it and every
      later event are counted per phase with their time range (:attr:`drop_report`) instead of
      written, and the count is logged at close.
    * ``naming(index, count)`` names the files at close, when their number is known (for example
      :func:`~profstream.sinks.msprof_slice_names` for ``msprof_slice_{n}_{ts}.json``).

    Without limits the writer produces one file. Memory is the reused output buffer
    (``buffer_bytes``, grown only for events larger than half of it) plus the ``M`` events.
    """

    def __init__(
        self,
        directory: str | Path,
        naming: SliceNaming,
        *,
        max_file_bytes: int | None = None,
        max_file_events: int | None = None,
        budget_bytes: int | None = None,
        buffer_bytes: int = 4 << 20,
    ) -> None:
        super().__init__()
        smallest = len(OPEN) + len(CLOSE)
        for key, value in (("max_file_bytes", max_file_bytes), ("budget_bytes", budget_bytes)):
            if value is not None and value <= smallest:
                msg = f"must be more than {smallest} bytes (an empty file), got {value}"
                raise ConfigError(msg, key=key)
        if max_file_events is not None and max_file_events < 1:
            msg = f"must be at least 1, got {max_file_events}"
            raise ConfigError(msg, key="max_file_events")
        self.max_file_bytes = max_file_bytes
        self.max_file_events = max_file_events
        self.budget_bytes = budget_bytes
        self.events_written = 0
        self._output = SlicedOutput(Path(directory), naming)
        self._finished_bytes = 0  # bytes of the files already rolled over
        self._head: list[bytes] = []  # every M event written, repeated at each file's head
        self._dropped: dict[str, DroppedEvents] = {}
        self._buffer = np.empty(max(buffer_bytes, 1 << 16), np.uint8)
        self._render_state = new_state()
        self._log = log_events.get_logger(component="sink.chrome_trace", directory=str(directory))
        self._file = self._open_file()

    @property
    def bytes_written(self) -> int:
        """Bytes of all files so far, the buffered tail included; after close, the files' total size."""
        return self._finished_bytes + self._file.bytes_written + int(self._render_state[S_POS])

    @property
    def exhausted(self) -> bool:
        """True once the budget stopped the timeline: every later event is dropped."""
        return bool(self._dropped)

    @property
    def drop_report(self) -> DropReport:
        """The events the budget left out so far."""
        return DropReport(budget_bytes=self.budget_bytes, dropped=dict(self._dropped))

    def write_events(self, events: Events) -> None:
        """Write one batch of events of one kind (all columns of a batch are equally long)."""
        self._require_open()
        rows = events.rows
        if not rows:
            return
        compiled = events.template(rows).compile(len(SEPARATOR))
        if self.exhausted:
            self._drop(events, 0, rows)
            return
        with self._guard():
            self._render(events, compiled)

    def _render(self, events: Events, compiled: Compiled) -> None:
        if compiled.max_event * 2 > self._buffer.size:
            self._flush()
            self._buffer = np.empty(compiled.max_event * 2, np.uint8)
        pieces = render_pieces(compiled) if isinstance(events, MetadataEvents) else None
        state = self._render_state
        state[S_ROW] = 0
        kept = 0
        while True:
            self._set_limits()
            reason = compiled.render(_SEPARATOR, self._buffer, state)
            written = int(state[S_ROW])
            if pieces is not None:  # before any roll: the next file's head includes them
                self._head.extend(pieces[kept:written])
            self.events_written += written - kept
            kept = written
            if reason == DONE:
                return
            if reason == BUFFER_FULL:
                self._flush()
            elif reason == FILE_FULL and self._can_roll(int(state[S_PENDING])):
                self._roll()
            else:  # BUDGET_FULL, or a FILE_FULL whose next file the budget cannot pay for
                self._drop(events, written, compiled.rows)
                return

    def _set_limits(self) -> None:
        state = self._render_state
        file_bytes = self._file.bytes_written + int(state[S_POS])
        state[S_FILE_LEFT] = UNLIMITED
        if self.max_file_bytes is not None:
            state[S_FILE_LEFT] = self.max_file_bytes - file_bytes - len(CLOSE)
        state[S_EVENTS_LEFT] = UNLIMITED
        if self.max_file_events is not None:
            state[S_EVENTS_LEFT] = self.max_file_events - int(state[S_IN_FILE])
        state[S_BUDGET_LEFT] = UNLIMITED
        if self.budget_bytes is not None:
            state[S_BUDGET_LEFT] = self.budget_bytes - self._finished_bytes - file_bytes - len(CLOSE)

    def _head_bytes(self) -> bytes:
        return OPEN + SEPARATOR.join(self._head)

    def _can_roll(self, pending: int) -> bool:
        """Whether the budget pays for closing this file, a new head and the pending event."""
        if self.budget_bytes is None:
            return True
        after = self.bytes_written + len(CLOSE) + len(self._head_bytes()) + pending + len(CLOSE)
        return after <= self.budget_bytes

    def _open_file(self) -> StagedFile:
        staged = self._output.new_file()
        staged.write(self._head_bytes())
        self._render_state[S_IN_FILE] = len(self._head)
        self._render_state[S_DATA_IN_FILE] = 0
        return staged

    def _flush(self) -> None:
        pos = int(self._render_state[S_POS])
        if pos:
            self._file.write(self._buffer[:pos].data)
            self._render_state[S_POS] = 0

    def _roll(self) -> None:
        self._flush()
        self._file.write(CLOSE)
        self._finished_bytes += self._file.bytes_written
        self._file = self._open_file()

    def _drop(self, events: Events, start: int, rows: int) -> None:
        times = events.times(rows)
        first = last = None
        if times is not None:
            first, last = int(times[0][start:].min()), int(times[1][start:].max())
        seen = self._dropped.get(events.ph)
        if seen is not None:
            first = seen.first_ns if first is None or seen.first_ns is None else min(first, seen.first_ns)
            last = seen.last_ns if last is None or seen.last_ns is None else max(last, seen.last_ns)
        count = rows - start + (seen.count if seen else 0)
        self._dropped[events.ph] = DroppedEvents(count=count, first_ns=first, last_ns=last)

    def _finish(self) -> None:
        self._flush()
        self._file.write(CLOSE)
        self._output.finish()

    def _commit(self) -> list[Path]:
        paths = self._output.commit()
        for path in paths:
            self._log.info(log_events.FILE_WRITTEN, file=str(path), bytes=path.stat().st_size)
        if self._dropped:
            self._log.warning(
                log_events.TIMELINE_EVENTS_DROPPED,
                count=self.drop_report.count,
                budget_bytes=self.budget_bytes,
                dropped={ph: msgspec.structs.asdict(d) for ph, d in self._dropped.items()},
            )
        return paths

    def _discard(self) -> None:
        self._output.discard()


__all__ = [
    "ChromeTraceWriter",
    "CompleteEvents",
    "CounterEvents",
    "DropReport",
    "DroppedEvents",
    "FlowEvents",
    "MetadataEvents",
]
