"""Chrome-trace exports (torch_npu ``trace_view.json``, msprof ``msprof_*.json``) read as a stream.

Framing: the file is one JSON array of event objects (specs/msprof_outputs.md §3.1,
framework_outputs.md §3.1). It is read in chunks; :func:`~profstream.engine.kernels.text.scan_objects`
(a numba byte scanner that tracks nesting and string state across chunks) finds the complete
events, and msgspec decodes all of them with one call per chunk into small typed structs whose
``ts``, ``dur`` and ``args`` stay raw bytes. Numbers are then parsed column-wise from their text
(:func:`~profstream.engine.kernels.text.parse_decimal`), so ``ts`` (a string of µs with 3
decimals) becomes int64 ns exactly and nothing passes through float. Memory is one chunk plus the
event that straddles it, whatever the file size.

Why not an incremental JSON library (ijson on PyPI is the maintained one): it builds a Python dict
per event and a Decimal per number, several times slower than one msgspec call per chunk, and
would be a new dependency; msgspec and numba are already the engine's.

Layers are recognised by ``process_name`` metadata, which the writers may put before or after a
layer's events (§3.1: concurrent layer assemblers), so :func:`read_metadata` reads the metadata in
a first pass over the file and the tables are built in a second.

What each canonical table takes (times are the file's: local wall-clock ns):

* ``tasks`` — ``X`` events of ``Ascend Hardware`` (except its ``Step Trace`` threads): ``tid`` is
  the logic stream; ``args`` give task/batch/sub-task id, model id, connection id and ``Task Type``,
  read as the device task type (what the CANN 8.0-era writers put there; current msprof writes the
  op's GE task type there when it has one, :mod:`~profstream.engine.layouts.timeline`);
  ``name`` is the op name (or a task type when no op matched, §3.4). ``dur`` is a double of µs
  with sub-ns digits (``53.7410625``); the end is start + the whole ns of it, as msprof's C++
  adds ``uint64(duration)`` (``overlap_analysis_processor.cpp``) and as ``kernel_details.csv``
  prints it.
* ``comm`` — ``X`` events on the group threads (``Group <g> Communication`` or ``Communication``)
  of the ``Communication`` (older CANN: ``HCCL``) process; ``op_type`` is the op name up to its
  first ``__`` (``hcom_allReduce__586_0_1`` -> ``hcom_allReduce``), the fallback torch_npu itself
  uses (framework_outputs.md §3.6): the trace does not carry msprof's op type.
* ``overlap`` — ``X`` events of ``Overlap Analysis``; ``kind`` is the event name.
* ``ops`` — ``X`` events of torch_npu's ``Python`` process with ``cat`` ``cpu_op``, ``enqueue`` or
  ``dequeue``; ``op_id`` numbers them in file order; the op tree (``parent_id``) is not rebuilt.

Rows come in file order, which is not time order (layers are written one after the other, and
msprof's C++ writes them concurrently). The statistics operators take rows in any order; a
consumer that needs time order (the interval kernels do) sorts.

Device ids: the number in a device layer's ``process_labels`` (``NPU 3``); older writers label
every device layer just ``NPU``, and then the run's device id (see :mod:`.run`) is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.engine import schema
from profstream.engine.kernels import text
from profstream.errors import DecodeError

#: bytes read per step; one chunk (plus the event straddling its end) is what the reader holds
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024

HARDWARE = "Ascend Hardware"
COMMUNICATION = ("Communication", "HCCL")
OVERLAP = "Overlap Analysis"
FRAMEWORK = "Python"  # torch_npu's process of torch ops (framework_outputs.md §3.1)
FRAMEWORK_KINDS = ("cpu_op", "enqueue", "dequeue")
_NPU_LABEL = re.compile(r"NPU\s*(\d+)$")


class _Event(msgspec.Struct, gc=False):
    """One trace event with the fields every table reads; numbers stay text."""

    ph: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    cat: str | None = None
    args: msgspec.Raw = msgspec.Raw()


class _Label(msgspec.Struct, gc=False):
    name: str | None = None
    labels: str | None = None


class _HardwareArgs(msgspec.Struct, gc=False):
    task_type: str | None = msgspec.field(default=None, name="Task Type")
    physical_stream: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Physic Stream Id")
    task_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Task Id")
    batch_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Batch Id")
    context_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Subtask Id")
    model_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Model Id")
    connection_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="connection_id")


class _CommArgs(msgspec.Struct, gc=False):
    connection_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="connection_id")
    model_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="model id")
    rank_size: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="rank_size")
    count: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="count")
    data_type: str | None = None
    alg_type: str | None = None
    relay: str | None = None
    retry: str | None = None


class _OpArgs(msgspec.Struct, gc=False):
    sequence_number: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Sequence number")
    fwd_thread_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Fwd thread id")
    correlation_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="correlation_id")
    input_shapes: str | None = msgspec.field(default=None, name="Input Dims")
    input_dtypes: str | None = msgspec.field(default=None, name="Input type")
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    module_hierarchy: str | None = msgspec.field(default=None, name="Module Hierarchy")
    flops: str | None = None


_EVENTS = msgspec.json.Decoder(list[_Event])
_HARDWARE_ARGS = msgspec.json.Decoder(list[_HardwareArgs])
_COMM_ARGS = msgspec.json.Decoder(list[_CommArgs])
_OP_ARGS = msgspec.json.Decoder(list[_OpArgs])
_ArgsT = TypeVar("_ArgsT", _HardwareArgs, _CommArgs, _OpArgs)


def iter_events(path: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[list[_Event]]:
    """The events of a trace file, one list per chunk, in file order (see the module docstring)."""
    log = events.get_logger(component="imports", file=str(path))
    state = text.scan_state()
    pending = b""
    consumed = 0  # file offset of pending[0]
    started = False
    with path.open("rb") as f:
        while chunk := f.read(chunk_bytes):
            buf = pending + chunk
            begin = len(pending)
            if not started:
                head = buf.lstrip()
                if not head:
                    pending, consumed = b"", consumed + len(buf)
                    continue
                if head[:1] != b"[":
                    msg = f"expected a JSON array of trace events, got {head[:1]!r} first"
                    raise DecodeError(msg, path=path, offset=consumed + len(buf) - len(head))
                started = True
            found = text.scan_objects(np.frombuffer(buf, np.uint8), begin, state)
            if found.starts.size:
                body = buf[int(found.starts[0]) : int(found.ends[-1])]
                try:
                    yield _EVENTS.decode(b"[" + body + b"]")
                except msgspec.DecodeError as exc:
                    msg = f"expected trace events, got invalid JSON ({exc})"
                    raise DecodeError(msg, path=path, offset=consumed + int(found.starts[0])) from exc
            keep = text.open_object(state)
            keep = len(buf) if keep is None else keep
            pending = buf[keep:]
            text.rebase(state, keep)
            consumed += keep
    if text.open_object(state) is not None:
        msg = f"expected the trace to end after its last event, got {len(pending)} bytes of an unfinished one"
        raise DecodeError(msg, path=path, offset=consumed)
    if started and text.depth(state) != 0:
        # torch_npu writes the framework part first without the closing bracket (§3.1); a crash
        # between the two steps leaves a file whose events are all complete
        log.warning(events.TRUNCATED_TAIL, reason="JSON array not closed", bytes=0)


def _iter_files(paths: Sequence[Path], chunk_bytes: int) -> Iterator[list[_Event]]:
    """The events of the slices of one trace, in order (msprof slices a large timeline, §1.5)."""
    for path in paths:
        yield from iter_events(path, chunk_bytes)


@dataclass(frozen=True, slots=True)
class TraceMetadata:
    """Process names, labels and thread names of a trace (its ``M`` events)."""

    processes: dict[int | str, str] = field(default_factory=dict)
    labels: dict[int | str, str] = field(default_factory=dict)
    threads: dict[tuple[int | str, int | str], str] = field(default_factory=dict)

    def pids(self, *names: str) -> set[int | str]:
        """The processes with one of these names."""
        return {pid for pid, name in self.processes.items() if name in names}

    def device_ids(self) -> set[int]:
        """Device ids named by ``NPU <id>`` labels."""
        return {d for label in self.labels.values() if (d := _label_device(label)) is not None}

    def device_of(self, pid: int | str, default: int | None) -> int | None:
        """The device a device-layer process belongs to; ``default`` when its label has no number."""
        found = _label_device(self.labels.get(pid, ""))
        return default if found is None else found


def _label_device(label: str) -> int | None:
    match = _NPU_LABEL.match(label.strip())
    return None if match is None else int(match.group(1))


_LABEL = msgspec.json.Decoder(_Label)


def read_metadata(paths: Sequence[Path], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> TraceMetadata:
    """The first pass: every ``M`` event's process or thread name and process label (all slices)."""
    meta = TraceMetadata()
    for chunk in _iter_files(paths, chunk_bytes):
        for event in chunk:
            if event.ph != "M" or event.name not in ("process_name", "process_labels", "thread_name"):
                continue
            args = _LABEL.decode(bytes(event.args) or b"{}")
            if event.name == "process_name" and args.name is not None:
                meta.processes[event.pid] = args.name
            elif event.name == "process_labels" and args.labels is not None:
                meta.labels[event.pid] = args.labels
            elif event.name == "thread_name" and args.name is not None:
                meta.threads[(event.pid, event.tid)] = args.name
    return meta


# --------------------------------------------------------------------------- columns


def _raw_column(values: Sequence[msgspec.Raw]) -> pa.Array:
    return pa.array([bytes(v) for v in values], pa.binary())


def _ints(values: Sequence[msgspec.Raw]) -> pa.Array:
    """Integer args (numbers or digit strings); anything else is null."""
    return text.parse_decimal(_raw_column(values), 0)


def _times(selected: Sequence[_Event]) -> tuple[pa.Array, pa.Array]:
    """Start and end ns of ``X`` events: µs text to ns exactly, end = start + whole ns of ``dur``."""
    start = text.parse_decimal(_raw_column([e.ts for e in selected]), 3)
    duration = text.parse_decimal(_raw_column([e.dur for e in selected]), 3, text.TRUNCATE)
    return start, pc.add(start, duration)


def _args(selected: Sequence[_Event], decoder: msgspec.json.Decoder[list[_ArgsT]]) -> list[_ArgsT]:
    """Decode the ``args`` of the selected events with one msgspec call."""
    body = b",".join(bytes(e.args) or b"{}" for e in selected)
    return decoder.decode(b"[" + body + b"]")


def _ids(values: Sequence[int | str]) -> pa.Array:
    return text.parse_decimal(pa.array([str(v) for v in values], pa.string()), 0)


@dataclass(frozen=True, slots=True)
class TraceTables:
    """Builds canonical batches from one trace (its slices in order); one batch per chunk of events."""

    paths: Sequence[Path]
    meta: TraceMetadata
    device_id: int | None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    def available(self) -> list[str]:
        """The canonical tables this trace has layers for."""
        names = set(self.meta.processes.values())
        have = {
            "tasks": HARDWARE in names,
            "comm": any(n in names for n in COMMUNICATION),
            "overlap": OVERLAP in names,
            "ops": FRAMEWORK in names,
        }
        return [name for name, present in have.items() if present]

    def reader(self, table: str) -> pa.RecordBatchReader:
        """The batches of ``table`` (one of :meth:`available`)."""
        build: dict[str, Callable[[list[_Event], int], pa.RecordBatch | None]] = {
            "tasks": self._tasks,
            "comm": self._comm,
            "overlap": self._overlap,
            "ops": self._ops,
        }
        make = build[table]
        schema_ = schema.TABLES[table]

        def batches() -> Iterator[pa.RecordBatch]:
            rows = 0
            for chunk in _iter_files(self.paths, self.chunk_bytes):
                batch = make(chunk, rows)
                if batch is not None and batch.num_rows:
                    rows += batch.num_rows
                    yield batch

        return pa.RecordBatchReader.from_batches(schema_, batches())

    def _device_column(self, selected: Sequence[_Event]) -> pa.Array:
        return pa.array([self.meta.device_of(e.pid, self.device_id) for e in selected], pa.int32())

    def _tasks(self, chunk: list[_Event], _rows: int) -> pa.RecordBatch | None:
        pids = self.meta.pids(HARDWARE)
        threads = self.meta.threads
        selected = [
            e
            for e in chunk
            if e.ph == "X" and e.pid in pids and not threads.get((e.pid, e.tid), "").startswith("Step Trace")
        ]
        if not selected:
            return None
        args = _args(selected, _HARDWARE_ARGS)
        start, end = _times(selected)
        context = _ints([a.context_id for a in args])
        return schema.conform(
            schema.TABLES["tasks"],
            {
                "device_id": self._device_column(selected),
                "stream_id": _ids([e.tid for e in selected]),
                "task_id": _ints([a.task_id for a in args]),
                "batch_id": _ints([a.batch_id for a in args]),
                "context_id": pc.fill_null(context, schema.NO_ID),
                "start_ns": start,
                "end_ns": end,
                "device_task_type": pa.array([a.task_type for a in args], pa.string()),
                "op_name": pa.array([e.name for e in selected], pa.string()),
                "model_id": _ints([a.model_id for a in args]),
                "connection_id": _ints([a.connection_id for a in args]),
            },
        )

    def _comm(self, chunk: list[_Event], _rows: int) -> pa.RecordBatch | None:
        pids = self.meta.pids(*COMMUNICATION)
        groups = {
            key: _group_name(name)
            for key, name in self.meta.threads.items()
            if key[0] in pids and name.endswith("Communication")
        }
        selected = [e for e in chunk if e.ph == "X" and (e.pid, e.tid) in groups]
        if not selected:
            return None
        args = _args(selected, _COMM_ARGS)
        start, end = _times(selected)
        return schema.conform(
            schema.TABLES["comm"],
            {
                "device_id": self._device_column(selected),
                "op_name": pa.array([e.name for e in selected], pa.string()),
                "op_type": pa.array([e.name.split("__", 1)[0] for e in selected], pa.string()),
                "group_name": pa.array([groups[(e.pid, e.tid)] for e in selected], pa.string()),
                "start_ns": start,
                "end_ns": end,
                "model_id": _ints([a.model_id for a in args]),
                "connection_id": _ints([a.connection_id for a in args]),
                "rank_size": _ints([a.rank_size for a in args]),
                "data_type": pa.array([a.data_type for a in args], pa.string()),
                "alg_type": pa.array([a.alg_type for a in args], pa.string()),
                "count": _ints([a.count for a in args]),
                "relay": _yes_no([a.relay for a in args]),
                "retry": _yes_no([a.retry for a in args]),
            },
        )

    def _overlap(self, chunk: list[_Event], _rows: int) -> pa.RecordBatch | None:
        pids = self.meta.pids(OVERLAP)
        selected = [e for e in chunk if e.ph == "X" and e.pid in pids]
        if not selected:
            return None
        start, end = _times(selected)
        return schema.conform(
            schema.TABLES["overlap"],
            {
                "device_id": self._device_column(selected),
                "kind": pa.array([e.name for e in selected], pa.string()),
                "start_ns": start,
                "end_ns": end,
            },
        )

    def _ops(self, chunk: list[_Event], rows: int) -> pa.RecordBatch | None:
        """``rows``: ops already emitted, so ``op_id`` counts on across chunks."""
        pids = self.meta.pids(FRAMEWORK)
        selected = [e for e in chunk if e.ph == "X" and e.cat in FRAMEWORK_KINDS and e.pid in pids]
        if not selected:
            return None
        args = _args(selected, _OP_ARGS)
        start, end = _times(selected)
        return schema.conform(
            schema.TABLES["ops"],
            {
                "op_id": pa.array(np.arange(rows, rows + len(selected), dtype=np.int64)),
                "kind": pa.array([e.cat for e in selected], pa.string()),
                "name": pa.array([e.name for e in selected], pa.string()),
                "pid": _ids([e.pid for e in selected]),
                "tid": _ids([e.tid for e in selected]),
                "start_ns": start,
                "end_ns": end,
                "sequence_number": _ints([a.sequence_number for a in args]),
                "fwd_thread_id": _ints([a.fwd_thread_id for a in args]),
                "correlation_id": _ints([a.correlation_id for a in args]),
                "input_shapes": pa.array([a.input_shapes for a in args], pa.string()),
                "input_dtypes": pa.array([a.input_dtypes for a in args], pa.string()),
                "call_stack": pa.array([a.call_stack for a in args], pa.string()),
                "module_hierarchy": pa.array([a.module_hierarchy for a in args], pa.string()),
                "flops": pa.array([a.flops for a in args], pa.string()),
            },
        )


def _group_name(thread: str) -> str | None:
    """``Group 7 Communication`` -> ``7``; a bare ``Communication`` thread has no group."""
    if thread.startswith("Group ") and thread.endswith(" Communication"):
        return thread[len("Group ") : -len(" Communication")]
    return None


def _yes_no(values: Sequence[str | None]) -> pa.Array:
    flags = {"yes": True, "no": False}
    return pa.array([None if v is None else flags.get(v.lower()) for v in values], pa.bool_())
