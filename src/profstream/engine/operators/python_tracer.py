"""torch_npu's Python tracer and GC records -> ``python_calls`` and ``gc`` (framework_outputs.md §3.1).

``torch.python_tracer_func`` holds one 33-byte record per call or return (tags 0 Python call,
1 Python return, 2 C call, 3 C return); ``torch.python_tracer_hash`` names the keys. torch_npu turns
them into ``python_function`` events (``prof_parse/_python_trace_parser.py``,
``PythonTraceParser._replay_stack``), and this operator does the same, streaming:

* Only threads that also have torch ops, enqueue or dequeue events are kept (the ``torch_tids`` that
  ``FwkFileParser.get_fwk_trace_data`` passes to the parser). Each kept thread's records are replayed
  in time order (a stable sort by start time, so equal times keep the file's order).
* A call (Python or C) pushes a frame; its ``Python id`` is the record's position among its thread's
  records (returns count too, so ids have gaps) and its ``Python parent id`` the id of the frame
  below it, 0 on an empty stack. A return of either kind pops the top frame whatever its kind, which
  ends at the return's time; a return on an empty stack is ignored (counted as unmatched here).
* A Python call whose name holds ``######`` is an ``nn.Module`` call (``<class>######<object id>``):
  it is named ``nn.Module: <class>_<n>``, ``n`` numbering the distinct object ids of that class on
  that thread in the order they are first called (``get_module_info_from_value``), with the extra
  arg ``Python module id`` = n. A key the hash file does not name is named by its decimal value.
* Frames still open when the records end close at the latest record time of their thread (the
  ``max_call_end_time`` of the replay), innermost first.
* Rows leave in the order the replay closes them (torch_npu's ``replay_result`` order, per thread).

What the stream cannot know in advance, and how it is handled:

* The frames already on a thread's stack when the tracer started are recorded at the end of the file
  (``PythonTracer::stop`` in torch_npu's ``profiler_python.cpp`` appends one call per such frame, timed
  when the tracer started), yet they sort first and take the first ids. They are found before the run
  (:func:`prelude_length`: the trailing Python calls timed before the file's first record), replayed
  first, and skipped when the feed reaches them. Files still being written have no such tail yet: a
  live collection replays them as late records.
* Whether a thread will ever have a torch op is known only at the end. A thread's closed calls wait
  until one of its ops arrives (ops come up to the framework reorder window late); a thread that holds
  more than ``hold_rows`` calls before any op is taken for one without ops: its calls are dropped and
  counted, and if an op comes after all, later calls are kept.
* Records arriving after the watermark passed their time are replayed where they arrive (counted).

GC: ``torch.gc_record`` (pid, start, end; ``_gc_record_bean.py``) becomes one ``gc`` row per record,
with the pid as tid, as ``GCRecordBean`` gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from profstream import events
from profstream.codecs.framework import C_CALL, C_RETURN, PY_CALL, PY_RETURN
from profstream.engine.kernels._dispatch import NULL, Int64Array
from profstream.engine.operators._state import Columns, Pending, RowByRow, ints
from profstream.engine.runtime import DONE, START, Emit, Operator, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: the tracer's feed, and the table whose threads are the ones kept
CALLS, OPS = "torch_python_tracer_func", "ops"
#: what the tracer writes between a module's class name and its object id (``profiler_python.cpp``)
MODULE_DELIMITER = "######"
#: ``python_calls.kind`` values, by the kind codes below
KINDS = ("python", "module", "c")
PYTHON, MODULE, C_FUNCTION = range(3)
#: closed calls a thread may hold while it has no torch op yet (module docstring)
HOLD_ROWS = 1 << 18
#: at most this many trailing start frames: 128 levels (``STACK_MAX_DEPTH`` + 1) on each of 256 threads
PRELUDE_LIMIT = 129 * 256
_RAW = ("time", "tid", "pid", "key", "tag")
_UNSIGNED = 1 << 64

# a frame: python id, parent id, start, pid, name, kind, module id (NULL unless a module)
Frame = list[Any]
# a closed call: pid, tid, start, end, name, kind, python id, parent id, module id
Row = tuple[int, int, int, int, str, int, int, int, int]


def prelude_length(times: Int64Array, tags: Int64Array, first_time: int) -> int:
    """How many of the trailing records (``times``/``tags``, the file's last records in order) are the
    start frames appended at stop: the longest run of Python calls at the end timed before the file's
    first record ``first_time``."""
    starts = (tags == PY_CALL) & (times < first_time)
    if starts.all():
        return int(times.size)
    return int(times.size - 1 - np.flatnonzero(~starts)[-1])


class _Thread:
    """One thread's replay state: its open frames and counters."""

    __slots__ = ("max_time", "module_counts", "module_ids", "next_id", "stack")

    def __init__(self) -> None:
        self.next_id = 0
        self.max_time = 0  # the replay's max_call_end_time starts at 0
        self.stack: list[Frame] = []
        self.module_counts: dict[str, int] = {}  # class name -> instances seen
        self.module_ids: dict[str, int] = {}  # object id -> its number within its class

    def state(self) -> list[Any]:
        return [
            self.next_id,
            self.max_time,
            self.stack,
            list(self.module_counts.items()),
            list(self.module_ids.items()),
        ]

    @classmethod
    def of(cls, state: list[Any]) -> _Thread:
        thread = cls()
        thread.next_id, thread.max_time = int(state[0]), int(state[1])
        thread.stack = [list(frame) for frame in state[2]]
        thread.module_counts = {str(k): int(v) for k, v in state[3]}
        thread.module_ids = {str(k): int(v) for k, v in state[4]}
        return thread


class PythonTracer(Operator):
    """``torch_python_tracer_func``, ``ops`` -> ``python_calls`` (module docstring).

    ``names``: hash key (int64 bits of the u64) -> name, from ``torch.python_tracer_hash``;
    ``prelude``: the start frames found at the end of the file (columns ``time, tid, pid, key, tag``,
    times converted), which the feed delivers from record ``skip_from`` on (-1: none).
    """

    def __init__(
        self,
        names: Mapping[int, str],
        prelude: Columns | None = None,
        skip_from: int = -1,
        *,
        hold_rows: int = HOLD_ROWS,
    ) -> None:
        self.inputs = (CALLS, OPS)
        self.outputs = ("python_calls",)
        self._names = dict(names)
        self._skip_from = skip_from
        self._hold_rows = hold_rows
        self._pending = Pending(_RAW)
        self._threads: dict[int, _Thread] = {}
        self._torch_tids: set[int] = set()
        self._held: dict[int, list[Row]] = {}
        self._abandoned: set[int] = set()  # threads whose calls overflowed the hold before any op
        self._ready: list[Row] = []
        self._seen = 0  # feed records pushed
        self._horizon = START  # records before it were replayed
        self._counts = {"unmatched_returns": 0, "unknown_tags": 0, "late": 0, "without_ops": 0}
        self._log = events.get_logger(component="python_tracer")
        if prelude is not None and len(prelude["time"]):
            self._replay(prelude)

    # -- input --------------------------------------------------------------------------------

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == OPS:
            self._confirm(np.unique(ints(batch.column("tid"))).tolist())
            return
        if stream != CALLS:
            raise self.unknown_input(stream)
        count = batch.num_rows
        first, self._seen = self._seen, self._seen + count
        if self._skip_from >= 0 and first + count > self._skip_from:
            batch = batch.slice(0, max(0, self._skip_from - first))
        if not batch.num_rows:
            return
        rows = {
            "time": ints(batch.column("ts")),
            "tid": ints(batch.column("thread_id")),
            "pid": ints(batch.column("process_id")),
            "key": ints(batch.column("key_hash")),
            "tag": ints(batch.column("tag")),
        }
        self._counts["late"] += int((rows["time"] < self._horizon).sum())
        self._pending.append(rows)

    def _confirm(self, tids: list[int]) -> None:
        for tid in tids:
            if tid in self._torch_tids:
                continue
            self._torch_tids.add(tid)
            self._abandoned.discard(tid)
            self._ready += self._held.pop(tid, [])

    # -- replay -------------------------------------------------------------------------------

    def _name(self, key: int) -> str:
        name = self._names.get(key)
        return str(key % _UNSIGNED) if name is None else name

    def _replay(self, rows: Columns) -> None:
        order = np.argsort(rows["time"], kind="stable")
        columns = [rows[name][order].tolist() for name in _RAW]
        for time, tid, pid, key, tag in zip(*columns, strict=True):
            thread = self._threads.get(tid)
            if thread is None:
                thread = self._threads[tid] = _Thread()
            python_id = thread.next_id
            thread.next_id += 1
            thread.max_time = max(thread.max_time, time)
            stack = thread.stack
            if tag in (PY_CALL, C_CALL):
                parent = stack[-1][0] if stack else 0
                name, kind, module = self._name(key), PYTHON if tag == PY_CALL else C_FUNCTION, NULL
                if kind == PYTHON and MODULE_DELIMITER in name:
                    name, module, kind = *self._module(thread, name), MODULE
                stack.append([python_id, parent, time, pid, name, kind, module])
            elif tag in (PY_RETURN, C_RETURN):
                if stack:
                    self._close(tid, stack.pop(), time)
                else:
                    self._counts["unmatched_returns"] += 1
            else:
                self._counts["unknown_tags"] += 1

    @staticmethod
    def _module(thread: _Thread, name: str) -> tuple[str, int]:
        class_name, _, object_id = name.partition(MODULE_DELIMITER)
        number = thread.module_ids.get(object_id)
        if number is None:
            number = thread.module_ids[object_id] = thread.module_counts.get(class_name, 0)
            thread.module_counts[class_name] = number + 1
        return f"nn.Module: {class_name}_{number}", number

    def _close(self, tid: int, frame: Frame, end: int) -> None:
        python_id, parent, start, pid, name, kind, module = frame
        row: Row = (pid, tid, start, end, name, kind, python_id, parent, module)
        if tid in self._torch_tids:
            self._ready.append(row)
        elif tid in self._abandoned:
            self._counts["without_ops"] += 1
        else:
            held = self._held.setdefault(tid, [])
            held.append(row)
            if len(held) > self._hold_rows:
                self._counts["without_ops"] += len(held)
                del self._held[tid]
                self._abandoned.add(tid)

    # -- output -------------------------------------------------------------------------------

    def advance(self, watermark: int) -> list[Emit]:
        ready = self._pending.take_before(watermark)
        if len(ready["time"]):
            self._replay(ready)
        self._horizon = max(self._horizon, watermark)
        return self._emit()

    def output_watermark(self, watermark: int) -> int:
        starts = [watermark]
        pending = self._pending.times_before(DONE)
        if pending.size:
            starts.append(int(pending.min()))
        starts += [thread.stack[0][2] for thread in self._threads.values() if thread.stack]
        starts += [row[2] for rows in self._held.values() for row in rows[:1]]
        return min(starts)

    def finish(self) -> list[Emit]:
        emitted = self.advance(DONE)
        for tid, thread in self._threads.items():
            while thread.stack:
                self._close(tid, thread.stack.pop(), thread.max_time)
        self._counts["without_ops"] += sum(len(rows) for rows in self._held.values())
        self._held = {}
        counts = {name: count for name, count in self._counts.items() if count}
        if counts:
            self._log.warning(events.RECORDS_UNMATCHED, family=CALLS, **counts)
        return emitted + self._emit()

    def _emit(self) -> list[Emit]:
        if not self._ready:
            return []
        rows, self._ready = self._ready, []
        pid, tid, start, end, name, kind, python_id, parent, module = (
            list(c) for c in zip(*rows, strict=True)
        )
        modules = np.asarray(module, np.int64)
        batch = conform(
            TABLES["python_calls"],
            {
                "pid": pid,
                "tid": tid,
                "start_ns": start,
                "end_ns": end,
                "name": pa.array(name, pa.string()).dictionary_encode(),
                "kind": pa.DictionaryArray.from_arrays(pa.array(kind, pa.int32()), pa.array(KINDS)),
                "python_id": python_id,
                "parent_id": parent,
                "module_id": pa.array(modules, pa.int64(), mask=modules == NULL),
            },
        )
        return [(self.outputs[0], batch)]

    # -- state --------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "pending": self._pending.columns(),
                "threads": [[tid, thread.state()] for tid, thread in self._threads.items()],
                "torch_tids": sorted(self._torch_tids),
                "held": [[tid, [list(row) for row in rows]] for tid, rows in self._held.items()],
                "abandoned": sorted(self._abandoned),
                "ready": [list(row) for row in self._ready],
                "seen": self._seen,
                "horizon": self._horizon,
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        pending = {name: np.asarray(doc["pending"][name], np.int64) for name in _RAW}
        self._pending = Pending(_RAW, pending)
        self._threads = {int(tid): _Thread.of(thread) for tid, thread in doc["threads"]}
        self._torch_tids = {int(tid) for tid in doc["torch_tids"]}
        self._held = {int(tid): [_row(row) for row in rows] for tid, rows in doc["held"]}
        self._abandoned = {int(tid) for tid in doc["abandoned"]}
        self._ready = [_row(row) for row in doc["ready"]]
        self._seen, self._horizon = int(doc["seen"]), int(doc["horizon"])
        self._counts = {str(k): int(v) for k, v in doc["counts"].items()}


def _row(values: list[Any]) -> Row:
    pid, tid, start, end, name, kind, python_id, parent, module = values
    return (
        int(pid),
        int(tid),
        int(start),
        int(end),
        str(name),
        int(kind),
        int(python_id),
        int(parent),
        int(module),
    )


class GcRecords(RowByRow):
    """``torch_gc_record`` -> ``gc``: one row per collection, the pid also as tid (``GCRecordBean``)."""

    def __init__(self) -> None:
        super().__init__("torch_gc_record", "gc")

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        pid = ints(batch.column("process_id"))
        return conform(
            TABLES["gc"],
            {
                "pid": pid,
                "tid": pid,
                "start_ns": ints(batch.column("start_ns")),
                "end_ns": ints(batch.column("end_ns")),
            },
        )
