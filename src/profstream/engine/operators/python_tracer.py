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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.codecs.framework import C_CALL, PY_CALL
from profstream.engine.kernels import calls
from profstream.engine.kernels._dispatch import NULL, Int64Array
from profstream.engine.operators._state import (
    Columns,
    Pending,
    RowByRow,
    concat,
    empty_columns,
    ints,
    rows,
    take,
)
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
#: a closed call: its thread, process, span, hash key, call tag, python id, parent id, module number
_CLOSED = ("tid", "pid", "start", "end", "key", "tag", "id", "parent", "module")
_UNSIGNED = 1 << 64


def prelude_length(times: Int64Array, tags: Int64Array, first_time: int) -> int:
    """How many of the trailing records (``times``/``tags``, the file's last records in order) are the
    start frames appended at stop: the longest run of Python calls at the end timed before the file's
    first record ``first_time``."""
    starts = (tags == PY_CALL) & (times < first_time)
    if starts.all():
        return int(times.size)
    return int(times.size - 1 - np.flatnonzero(~starts)[-1])


class PythonTracer(Operator):
    """``torch_python_tracer_func``, ``ops`` -> ``python_calls`` (module docstring).

    ``names``: hash key (int64 bits of the u64) -> name, from ``torch.python_tracer_hash``;
    ``prelude``: the start frames found at the end of the file (columns ``time, tid, pid, key, tag``,
    times converted), which the feed delivers from record ``skip_from`` on (-1: none). The replay is
    :func:`profstream.engine.kernels.calls.replay`; this wrapper numbers the modules, holds the calls
    of threads without torch ops and names the rows.
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
        modules = {k: n.partition(MODULE_DELIMITER) for k, n in self._names.items() if MODULE_DELIMITER in n}
        self._module_parts = {key: (parts[0], parts[2]) for key, parts in modules.items()}
        self._module_keys = np.array(sorted(self._module_parts), np.int64)
        self._skip_from = skip_from
        self._hold_rows = hold_rows
        self._pending = Pending(_RAW)
        self._thread_of: dict[int, int] = {}  # tid -> dense index of the replay's per-thread state
        self._threads = calls.Threads(*(np.empty(0, np.int64) for _ in range(3)))
        self._frames = empty_columns(calls.FRAME_COLUMNS)  # open frames, ``below`` as rows of it
        self._module_counts: dict[tuple[int, str], int] = {}  # (tid, class name) -> instances seen
        self._module_ids: dict[tuple[int, str], int] = {}  # (tid, object id) -> its number in its class
        self._torch_tids: set[int] = set()
        self._held: dict[int, Columns] = {}
        self._abandoned: set[int] = set()  # threads whose calls overflowed the hold before any op
        self._ready: list[Columns] = []
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
        records = {
            "time": ints(batch.column("ts")),
            "tid": ints(batch.column("thread_id")),
            "pid": ints(batch.column("process_id")),
            "key": ints(batch.column("key_hash")),
            "tag": ints(batch.column("tag")),
        }
        self._counts["late"] += int((records["time"] < self._horizon).sum())
        self._pending.append(records)

    def _confirm(self, tids: list[int]) -> None:
        for tid in tids:
            if tid in self._torch_tids:
                continue
            self._torch_tids.add(tid)
            self._abandoned.discard(tid)
            held = self._held.pop(tid, None)
            if held is not None:
                self._ready.append(held)

    # -- replay -------------------------------------------------------------------------------

    def _replay(self, records: Columns) -> None:
        records = take(records, np.argsort(records["time"], kind="stable"))
        tids = records["tid"]
        new = [tid for tid in _first_seen(tids) if tid not in self._thread_of]
        if new:  # a new thread's state: next id 0, latest time 0, no frame
            self._thread_of |= {tid: len(self._thread_of) + k for k, tid in enumerate(new)}
            fresh = (np.zeros(len(new), np.int64), np.zeros(len(new), np.int64), np.full(len(new), -1))
            self._threads = calls.Threads(*(np.r_[a, f] for a, f in zip(self._threads, fresh, strict=True)))
        known = np.array(list(self._thread_of), np.int64)  # a thread's index: its place in this order
        order = np.argsort(known)
        thread = order[np.searchsorted(known[order], tids)]
        replayed = calls.replay(
            {**records, "thread": thread, "module": self._number_modules(records)},
            self._threads,
            self._frames,
        )
        self._counts["unmatched_returns"] += replayed.unmatched_returns
        self._counts["unknown_tags"] += replayed.unknown_tags
        pool, closed = replayed.pool, replayed.closed
        self._frames, top = calls.still_open(pool, self._threads.top)
        self._threads = self._threads._replace(top=top)
        self._route(
            self._closed_rows({name: pool[name][closed] for name in calls.FRAME_COLUMNS}, replayed.ends)
        )

    def _number_modules(self, records: Columns) -> Int64Array:
        """Each record's module number (NULL unless a Python call of an ``nn.Module``): the n-th object
        of its class on its thread, in call order (``get_module_info_from_value``)."""
        module = np.full(records["key"].size, NULL, np.int64)
        is_module = (records["tag"] == PY_CALL) & np.isin(records["key"], self._module_keys)
        for row in np.flatnonzero(is_module).tolist():
            tid = int(records["tid"][row])
            class_name, object_id = self._module_parts[int(records["key"][row])]
            number = self._module_ids.get((tid, object_id))
            if number is None:
                number = self._module_ids[(tid, object_id)] = self._module_counts.get((tid, class_name), 0)
                self._module_counts[(tid, class_name)] = number + 1
            module[row] = number
        return module

    def _closed_rows(self, frames: Columns, ends: Int64Array) -> Columns:
        tids = np.array(list(self._thread_of), np.int64)
        return {
            "tid": tids[frames["thread"]],
            "pid": frames["pid"],
            "start": frames["start"],
            "end": ends,
            "key": frames["key"],
            "tag": frames["tag"],
            "id": frames["id"],
            "parent": frames["parent"],
            "module": frames["module"],
        }

    def _route(self, closed: Columns) -> None:
        """Closed calls of threads with torch ops go out; the others wait for an op, up to the hold."""
        for tid in _first_seen(closed["tid"]):
            part = take(closed, closed["tid"] == tid)
            if tid in self._torch_tids:
                self._ready.append(part)
            elif tid in self._abandoned:
                self._counts["without_ops"] += rows(part)
            else:
                held = self._held[tid] = concat(self._held[tid], part) if tid in self._held else part
                if rows(held) > self._hold_rows:
                    self._counts["without_ops"] += rows(held)
                    del self._held[tid]
                    self._abandoned.add(tid)

    def _close_open_frames(self) -> None:
        """Frames still open at the end close at their thread's latest record time, innermost first."""
        frames, pieces = self._frames, []
        for dense, top in enumerate(self._threads.top.tolist()):
            stack, row = [], top
            while row >= 0:
                stack.append(row)
                row = int(frames["below"][row])
            ends = np.full(len(stack), self._threads.max_time[dense], np.int64)
            pieces.append(self._closed_rows(take(frames, np.array(stack, np.int64)), ends))
        self._frames = empty_columns(calls.FRAME_COLUMNS)
        self._threads = self._threads._replace(top=np.full(self._threads.top.size, -1, np.int64))
        for piece in pieces:
            self._route(piece)

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
        if rows(self._frames):
            starts.append(int(self._frames["start"].min()))
        starts += [int(held["start"].min()) for held in self._held.values()]
        return min(starts)

    def finish(self) -> list[Emit]:
        emitted = self.advance(DONE)
        self._close_open_frames()
        self._counts["without_ops"] += sum(rows(held) for held in self._held.values())
        self._held = {}
        counts = {name: count for name, count in self._counts.items() if count}
        if counts:
            self._log.warning(events.RECORDS_UNMATCHED, family=CALLS, **counts)
        return emitted + self._emit()

    def _emit(self) -> list[Emit]:
        if not self._ready:
            return []
        out = self._ready[0]
        for part in self._ready[1:]:
            out = concat(out, part)
        self._ready = []
        module = out["module"]
        is_module = module != NULL
        kind = np.where(is_module, MODULE, np.where(out["tag"] == C_CALL, C_FUNCTION, PYTHON))
        return [
            (
                self.outputs[0],
                conform(
                    TABLES["python_calls"],
                    {
                        "pid": out["pid"],
                        "tid": out["tid"],
                        "start_ns": out["start"],
                        "end_ns": out["end"],
                        "name": self._row_names(out["key"], is_module, module),
                        "kind": pa.DictionaryArray.from_arrays(kind.astype(np.int32), pa.array(KINDS)),
                        "python_id": out["id"],
                        "parent_id": out["parent"],
                        "module_id": pa.array(module, pa.int64(), mask=~is_module),
                    },
                ),
            )
        ]

    def _row_names(self, keys: Int64Array, is_module: np.ndarray, module: Int64Array) -> pa.Array:
        """Each key's name (its decimal value when the hash file has none); ``nn.Module: <class>_<n>``
        for a module call."""
        unique, index = np.unique(keys, return_inverse=True)
        texts = [self._names.get(k, str(k % _UNSIGNED)) for k in unique.tolist()]
        classes = [self._module_parts.get(k, ("", ""))[0] for k in unique.tolist()]
        plain = pa.array(texts, pa.string()).take(pa.array(index))
        if not is_module.any():
            return plain.dictionary_encode()
        modules = pc.binary_join_element_wise(
            "nn.Module: ",
            pa.array(classes, pa.string()).take(pa.array(index)),
            "_",
            pc.cast(module, pa.string()),
            "",
        )
        return pc.if_else(pa.array(is_module), modules, plain).dictionary_encode()

    # -- state --------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        ready = self._ready[0] if len(self._ready) == 1 else empty_columns(_CLOSED)
        for part in self._ready[1:] if len(self._ready) > 1 else ():
            ready = concat(ready, part)
        if len(self._ready) > 1:
            ready = concat(self._ready[0], ready)
        return pack_state(
            {
                "pending": self._pending.columns(),
                "tids": list(self._thread_of),
                "threads": list(self._threads),
                "frames": self._frames,
                "module_counts": [[tid, name, n] for (tid, name), n in self._module_counts.items()],
                "module_ids": [[tid, name, n] for (tid, name), n in self._module_ids.items()],
                "torch_tids": sorted(self._torch_tids),
                "held": [[tid, held] for tid, held in self._held.items()],
                "abandoned": sorted(self._abandoned),
                "ready": ready,
                "seen": self._seen,
                "horizon": self._horizon,
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        pending = {name: np.asarray(doc["pending"][name], np.int64) for name in _RAW}
        self._pending = Pending(_RAW, pending)
        self._thread_of = {int(tid): index for index, tid in enumerate(doc["tids"])}
        self._threads = calls.Threads(*(np.asarray(a, np.int64) for a in doc["threads"]))
        self._frames = doc["frames"]
        self._module_counts = {(int(t), str(n)): int(c) for t, n, c in doc["module_counts"]}
        self._module_ids = {(int(t), str(n)): int(c) for t, n, c in doc["module_ids"]}
        self._torch_tids = {int(tid) for tid in doc["torch_tids"]}
        self._held = {int(tid): held for tid, held in doc["held"]}
        self._abandoned = {int(tid) for tid in doc["abandoned"]}
        self._ready = [doc["ready"]] if rows(doc["ready"]) else []
        self._seen, self._horizon = int(doc["seen"]), int(doc["horizon"])
        self._counts = {str(k): int(v) for k, v in doc["counts"].items()}


def _first_seen(values: Int64Array) -> list[int]:
    """The distinct values, in the order they first appear."""
    distinct, first = np.unique(values, return_index=True)
    return [int(v) for v in distinct[np.argsort(first)]]


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
