"""Memory: operator memory rows (``memory``), allocator totals (``memory_record``), device samples.

**PyTorch adapter records** (specs/framework_outputs.md §4b; torch_npu
``prof_view/_memory_prepare_parser.py``, ``_memory_view_parser.py``): ``torch.memory_usage``
records of an NPU (``device_type`` 20) feed ``memory_record``; those of the inner allocator also
feed ``memory`` through :func:`~profstream.engine.kernels.memory.match_pta` (MALLOC/FREE/BLOCK_FREE
groups per (process, ptr); release totals from the FREE, else the BLOCK_FREE). ``Name`` is decided
when the MALLOC becomes final, from the ``ops`` stream:

* a MALLOC inside a dequeue window of its own (process, thread) (``start <= t < end``) takes the
  name of the enqueue with the dequeue's correlation id: the last torch op on the enqueue's thread
  that started at or before the enqueue's end, or its first ancestor whose name starts with
  ``aten`` or ``npu`` (the spec's rule; the torch_npu version read walks back through the ops in
  start order instead, and accepts only ``aten``);
* otherwise the last torch op on the record's thread that started at or before it, walked up to the
  first ancestor still running at the record's time (spec; the version read searches every thread
  of the process, and falls back to the first op when none started before the record, which here
  gives no name);
* ``empty_tensor`` and ``malloc_workspace`` ops are never the starting op; no op gives an empty name
  (counted). The real operator_memory.csv files in shared/realdata fit both readings: each PyTorch
  row's name is the op both rules give (their threads' ops do not overlap there).

``Device Type`` is ``NPU:<id>`` with the collection's only device, else the record's device index.
Records of the v2.1.0-5.0.rc3 layout carry no data type: a positive size is read as a MALLOC, a
negative one as a FREE.

**GE operator memory** (cann_raw_formats.md §2.9 ``task_memory_info``; msprof
``analysis/mscalculate/npu_mem/npu_op_mem_calculator.py``): records whose ``data_len`` is below the
48-byte payload are dropped as msprof's C++ parser does (counted); the rest pair per (op name hash,
addr, device type, device id) through :func:`~profstream.engine.kernels.memory.match_ge`. A release
without its allocation (allocated before the collection) makes no row: msprof's Python calculator
and its C++ one (``csrc/domain/services/modeling/npu_op_mem_calculator.cpp``) both skip it, though
msprof's documentation speaks of negative sizes (counted). An allocation never released is a row
without release columns (msprof's Python stores 0 there, which its viewer prints; the layouts' job).
GE rows have no active columns; names are the hash dictionary's
(torch_npu prefixes them with ``cann::``; that is the layout's job). Every record also makes a GE
``memory_record`` row (its totals; no active total, which torch_npu prints as 0).

**memory_record** (§4b): rows in time order — at equal times ``APP``, then PTA, then GE, as
torch_npu's merge takes a PTA record before a GE record of the same time. ``APP`` rows are the
device's ``npu_mem`` samples of event APP (total reserved = ddr + hbm). torch_npu writes all APP
rows before the rest of its file; holding the rest back for that would need the whole table, so the
rows stay in time order here and a layout that wants torch_npu's order writes the APP rows (also the
``npu_mem`` table's APP rows) first. Each PTA row of the caching allocator is followed by a ``PTA+GE``
row (its totals plus the latest GE record of the device; its stream); each GE row by a ``PTA+GE``
row (its totals plus the latest PTA record of the device; the PTA stream; a GE record's active
total counts as 0, as ``GeMemoryRecordBean.total_active`` gives it, so the row's active total is the
PTA record's, or 0 before any). Workspace-allocator records (``component_type`` 1) are ``WORKSPACE``
rows: no companion, never the latest PTA. That is torch_npu's db path
(``prof_db_parse/_memory_db_parser.py``); the text path of the version read
(``_memory_view_parser.py``, ``MemoryUseBean.row``) writes them as ``PTA`` rows with companions.

**Device samples** (:class:`NpuMemory`, cann_raw_formats.md §2.11, msprof_outputs.md §2.8): the raw
``npu_mem`` feed becomes ``npu_mem`` rows (event 0 APP, 1 Device); the raw ``npu_module_mem`` feed
``npu_module_mem`` rows (module id -> msprof's ``ModuleName``, analysis/profiling_bean/prof_enum/
data_tag.py; an id msprof does not name keeps its number). Sizes above the int64 maximum are
null (msprof prints -1).

Streaming: with PyTorch records, everything is processed up to the watermark (minus
``ops_lag_ns``, 0 by default: FrameworkOps' own output watermark already says how far the ``ops``
stream is complete; the lag is for an ``ops`` stream whose watermark runs ahead of its rows). State:
the records not yet final, the open allocations (kernel tables), the latest PTA/GE totals per
device, and the ops still reachable: ops running at the horizon or starting after it, the last op
before it on each thread with its ancestors, dequeue windows still open, and enqueues whose dequeue
may come. :meth:`Memory.output_watermark` promises the horizon, or the oldest open allocation.
PyTorch ``memory`` rows come in the order their group closes (sorted by allocation time within a
batch); GE rows in the order of their release records, which is the order msprof's Python calculator
appends them in (``NpuOpMemCalculator._calc_operator_memory``) and torch_npu copies, and which, unlike
a sort within each batch, does not depend on where batches end. Allocations never released come out
at :meth:`Memory.finish`, in the order their keys were first allocated (msprof's dict order). A
watermark step or the end releases its records in slices of about ``EMIT_RECORDS`` (one batch each),
so a whole reorder window never turns into rows at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.codecs.dictionaries import resolve
from profstream.codecs.framework import (
    FREE,
    INNER_ALLOCATOR,
    MALLOC,
    NPU_DEVICE_TYPE,
    WORKSPACE_ALLOCATOR,
)
from profstream.engine.kernels import memory as kernels
from profstream.engine.kernels._dispatch import NO_SEQ, NULL, BoolArray, Int64Array
from profstream.engine.kernels.memory import APP, GE, PTA, WORKSPACE
from profstream.engine.operators._state import (
    Columns,
    Pending,
    RowByRow,
    concat,
    empty_columns,
    find,
    horizon,
    ints,
    nullable,
    pack_keyed,
    pick,
    rows,
    slice_starts,
    take,
    unpack_keyed,
)
from profstream.engine.runtime import DONE, START, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform, one_array

#: npu_module_mem component names by module id: msprof's C++ ``MODULE_NAME_TABLE``
#: (Ascend/msprof ``analysis/csrc/application/database/db_constant.h``), which writes npu_module_mem on
#: 910B. msprof's Python ``ModuleName`` enum (``profiling_bean/prof_enum/data_tag.py``, the spec's source)
#: differs: 0 UNKNOWN, 2 IDEDH, 5 HIAIENGINE, 9 HLT, and no HDC, DRV, KERNEL, ROS, TS, LP, TEEOS, ...
#: The real npu_module_mem.csv files in shared/realdata print SLOG, HDC, DRV, KERNEL, ROS, TS, LP, TEEOS,
#: BBOX, CAMERA, ISP, ADETECT and more that only the C++ table names (their version also had some names
#: neither table has now, such as IDEDH and the MDC* modules), and print an id their table lacks as its
#: number ("76"), as :meth:`NpuMemory._module_mem` does.
MODULE_NAMES: dict[int, str] = {
    0: "SLOG", 1: "IDEDD", 2: "SCC", 3: "HCCL", 4: "FMK", 5: "CCU", 6: "DVPP", 7: "RUNTIME", 8: "CCE",
    9: "HDC", 10: "DRV", 11: "NET", 22: "DEVMM", 23: "KERNEL", 24: "LIBMEDIA", 25: "CCECPU", 27: "ROS",
    28: "HCCP", 29: "ROCE", 30: "TEFUSION", 31: "PROFILING", 32: "DP", 33: "APP", 34: "TS", 35: "TSDUMP",
    36: "AICPU", 37: "LP", 38: "TDT", 39: "FE", 40: "MD", 41: "MB", 42: "ME", 43: "IMU", 44: "IMP",
    45: "GE", 47: "CAMERA", 48: "ASCENDCL", 49: "TEEOS", 50: "ISP", 51: "SIS", 52: "HSM", 53: "DSS",
    54: "PROCMGR", 55: "BBOX", 56: "AIVECTOR", 57: "TBE", 58: "FV", 60: "TUNE", 61: "HSS", 62: "FFTS",
    63: "OP", 64: "UDF", 65: "HICAID", 66: "TSYNC", 67: "AUDIO", 68: "TPRT", 69: "ASCENDCKERNEL",
    70: "ASYS", 71: "ATRACE", 72: "RTC", 73: "SYSMONITOR", 74: "AMP", 75: "ADETECT", 76: "MBUFF",
    77: "CUSTOM",
}  # fmt: skip
#: npu_mem ``event`` names (msprof ``NpuMemViewer``)
EVENT_NAMES = {0: "APP", 1: "Device"}
#: memory_record components by code (kernels.memory ``APP`` .. ``PTA_GE``), in their tie order at equal times
COMPONENTS = ("APP", "PTA", "WORKSPACE", "GE", "PTA+GE")
#: ops that never own a PTA allocation (torch_npu ``_complete_record_entry``)
EXCLUDED_OPS = ("empty_tensor", "malloc_workspace")
#: prefixes of the op an enqueue's allocations are named after
OWNER_PREFIXES = ("aten", "npu")
#: bytes of the ``MsprofMemoryInfo`` payload; shorter records are dropped (cann_raw_formats.md §2.9)
GE_MIN_DATA_LEN = 48
#: records one emit step turns into rows, about: the end of a run or a watermark jump releases a whole
#: reorder window at once (613,100 memory_record rows and +120 MB of peak RSS in one step, 1 GB torch_npu run)
EMIT_RECORDS = 65_536
#: op names kept before the name dictionary drops those no held row refers to: torch runs name an
#: op ``ProfilerStep#N`` per step, so a dictionary that only grew would grow with the run (about
#: 12,000 names a minute in a 5 GB torch_npu simulation)
NAMES_KEPT = 4096

# PTA records not yet final, and the payload each carries into the match (name = resolved op)
_PTA = ("time", "seq", "pid", "tid", "ptr", "kind", "component", "inner", "size", "allocated",
        "reserved", "active", "stream", "device")  # fmt: skip
_PTA_PAYLOAD = ("size", "allocated", "reserved", "active", "stream", "device", "name")
_GE = ("time", "seq", "op", "addr", "device_type", "device", "size", "allocated", "reserved")
_APP = ("time", "seq", "device", "reserved")
_OPS = ("id", "parent", "pid", "tid", "start", "end", "name", "owner", "candidate")
_ENQ = ("corr", "pid", "tid", "end", "name")
_DEQ = ("pid", "tid", "start", "end", "corr")
_LAST = ("device", "allocated", "reserved", "active", "stream")
_TOTALS = _LAST[1:]
#: an enqueue whose owning op is not resolved yet
_UNRESOLVED = -2
_COUNTERS = ("pta_not_npu", "unnamed", "ge_short_records")


def _distinct(devices: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The sorted distinct devices and each row's index into them."""
    if len(devices) and devices.min() == devices.max():  # one device, as usual: no sort
        return devices[:1], np.zeros(len(devices), np.int64)
    unique, index = np.unique(devices, return_inverse=True)
    return unique, index


def _distinct_codes(codes: Int64Array) -> tuple[Int64Array, Int64Array]:
    """``np.unique(codes, return_inverse=True)`` of small codes (>= -1), by counting instead of sorting."""
    seen = np.bincount(codes + 1) if codes.size else np.zeros(0, np.int64)
    used = np.flatnonzero(seen)
    rank = np.zeros(seen.size, np.int64)
    rank[used] = np.arange(used.size)
    return used - 1, rank[codes + 1]


def _device_tags(devices: Int64Array) -> pa.Array:
    """``NPU:<id>`` per row, dictionary-encoded."""
    return _tags(*_distinct(devices))


def _tags(unique: Int64Array, index: Int64Array) -> pa.Array:
    """``NPU:<id>`` of ``unique[index]`` per row, dictionary-encoded."""
    return pa.DictionaryArray.from_arrays(
        pa.array(index.astype(np.int32)), pa.array([f"NPU:{d}" for d in unique.tolist()])
    )


def _labels(codes: Int64Array, labels: Sequence[str]) -> pa.Array:
    """Codes into ``labels`` as a dictionary column."""
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(list(labels)))


def _column(batch: pa.RecordBatch, name: str, default: int) -> Int64Array:
    """An int column of a decoded batch as int64, ``default`` where absent (older layouts)."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return np.full(batch.num_rows, default, np.int64)
    values = ints(batch.column(index))
    return values if default == NULL else np.where(values == NULL, default, values)


def _decoded(column: pa.Array | pa.ChunkedArray) -> tuple[list[str], Int64Array]:
    """A string column as the texts of its dictionary (a null as "", one more "" last) and each row's
    index into them (a null row: the last)."""
    column = one_array(column)
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    texts = [*column.dictionary.cast(pa.string()).fill_null("").to_pylist(), ""]
    index = ints(column.indices)
    return texts, np.where(index == NULL, len(texts) - 1, index)


def _is(texts: list[str], index: Int64Array, wanted: str) -> BoolArray:
    """Rows whose text (:func:`_decoded`) is ``wanted``."""
    return np.asarray([t == wanted for t in texts])[index]


def _unsigned_bytes(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """uint64 byte counts as int64, null above the int64 maximum."""
    values = ints(column)
    return nullable(np.where(values < 0, NULL, values))


def last_at_or_before(keys: tuple[Int64Array, ...], queries: tuple[Int64Array, ...]) -> Int64Array:
    """For each query (pid, tid, time), the row of ``keys`` (pid, tid, time) of the same pid and tid
    with the latest time at or before the query's (at equal times the last row), else -1."""
    n = keys[2].size
    pid, tid, time = (np.concatenate((k, q)) for k, q in zip(keys, queries, strict=True))
    is_query = np.arange(time.size) >= n
    order = np.lexsort((time, tid, pid))  # stable: at equal keys, rows before queries, each in order
    group = np.r_[True, _changes(pid[order], tid[order])]
    position = np.arange(order.size)
    group_start = np.maximum.accumulate(np.where(group, position, 0))
    last = np.maximum.accumulate(np.where(is_query[order], -1, position))
    found = pick(order, np.where(last >= group_start, last, -1))
    out = np.empty(time.size - n, np.int64)
    asked = is_query[order]
    out[order[asked] - n] = found[asked]
    return out


def _changes(pid: Int64Array, tid: Int64Array) -> BoolArray:
    """Where consecutive (pid, tid) pairs differ (one shorter than the inputs)."""
    return np.asarray((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]), np.bool_)


class Memory(Operator):
    """``torch_memory_usage`` + ``ops`` (PTA), ``task_memory_info`` (GE), ``npu_mem@<d>`` -> ``memory``,
    ``memory_record``.

    ``devices``: the collection's device ids (with exactly one, it is every PTA record's device);
    ``app_devices``: the devices whose ``npu_mem@<d>`` gives APP rows (default: all of
    ``devices``); ``pta`` / ``ge``: whether the PyTorch and the GE inputs exist; ``hashes``: the host
    hash dictionary (decoded ``hash_dic`` rows) for GE op names; ``ops_lag_ns``: how far the ``ops``
    stream's rows lag its watermark (0 for FrameworkOps, whose watermark accounts for its window).
    """

    def __init__(
        self,
        devices: Sequence[int] = (),
        *,
        pta: bool = True,
        ge: bool = True,
        app_devices: Sequence[int] | None = None,
        hashes: pa.Table | None = None,
        ops_lag_ns: int = 0,
    ) -> None:
        self.devices = tuple(devices)
        self.pta, self.ge = pta, ge
        app = self.devices if app_devices is None else tuple(app_devices)
        self._app_streams = {at("npu_mem", d): d for d in app}
        self.hashes = hashes
        self.lag = ops_lag_ns if pta else 0
        self.inputs = (
            *(("torch_memory_usage", "ops") if pta else ()),
            *(("task_memory_info",) if ge else ()),
            *self._app_streams,
        )
        self.outputs = ("memory", "memory_record")
        self._log = events.get_logger(component="memory")
        self._reset()

    def _reset(self) -> None:
        self._pta = Pending(_PTA)
        self._ge = Pending(_GE)
        self._app = Pending(_APP)
        self._seen = 0  # records taken so far, all inputs: the tie order of memory_record
        self._pta_base = 0  # records given to the kernels (their sequence numbers)
        self._ge_base = 0
        self._pta_state = kernels.pta_state(len(_PTA_PAYLOAD))
        self._ge_state = kernels.ge_state(2, key_width=4)
        self._ops = empty_columns(_OPS)
        self._enq = empty_columns(_ENQ)
        self._deq = empty_columns(_DEQ)
        self._names: list[str] = []
        self._codes: dict[str, int] = {}
        self._names_limit = NAMES_KEPT  # the dictionary's size that triggers the next compaction
        self._last_pta = empty_columns(_LAST)
        self._last_ge = empty_columns(_LAST)
        self._counts = dict.fromkeys(_COUNTERS, 0)
        # not state: a shortcut for advances that cannot emit anything
        self._advanced_to, self._pushed = START, True

    # ------------------------------------------------------------------ operator protocol

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._pushed = True
        if stream == "torch_memory_usage":
            self._add_pta(batch)
        elif stream == "task_memory_info":
            self._add_ge(batch)
        elif stream == "ops":
            self._add_ops(batch)
        elif stream in self._app_streams:
            self._add_app(batch, self._app_streams[stream])
        else:
            raise self.unknown_input(stream)

    def advance(self, watermark: int) -> list[Emit]:
        until = horizon(watermark, self.lag)
        if until == self._advanced_to and not self._pushed:
            return []  # nothing new: emitting again would give nothing
        self._advanced_to, self._pushed = until, False
        return self._emit(until, final=False)

    def finish(self) -> list[Emit]:
        out = self._emit(DONE, final=True)
        self._report()
        return out

    def output_watermark(self, watermark: int) -> int:
        """The horizon, or the oldest allocation still open (its row comes when it is released)."""
        open_at = [
            state.table.values[0][state.table.used] for state in (self._pta_state, self._ge_state)
        ]  # row 0: the MALLOC time of a PTA group, the time of a GE allocation
        until = horizon(watermark, self.lag)
        return min([until, *(int(t.min()) for t in open_at if t.size)])

    # ------------------------------------------------------------------ inputs

    def _seqs(self, n: int) -> Int64Array:
        first = self._seen
        self._seen += n
        return first + np.arange(n, dtype=np.int64)

    def _add_pta(self, batch: pa.RecordBatch) -> None:
        npu = _column(batch, "device_type", NPU_DEVICE_TYPE) == NPU_DEVICE_TYPE
        self._counts["pta_not_npu"] += int((~npu).sum())
        if not npu.all():
            batch = batch.filter(pa.array(npu))
        size = _column(batch, "alloc_size", 0)
        kind = _column(batch, "data_type", NULL)
        kind = np.where(kind == NULL, np.where(size > 0, MALLOC, FREE), kind)
        device = _column(batch, "device_index", 0)
        if len(self.devices) == 1:
            device = np.full(batch.num_rows, self.devices[0], np.int64)
        new = {
            "time": _column(batch, "time_ns", 0),
            "seq": self._seqs(batch.num_rows),
            "pid": _column(batch, "process_id", 0),
            "tid": _column(batch, "thread_id", 0),
            "ptr": _column(batch, "ptr", 0),
            "kind": kind,
            "component": _column(batch, "component_type", 0),
            "inner": (_column(batch, "allocator_type", INNER_ALLOCATOR) == INNER_ALLOCATOR).astype(np.int64),
            "size": size,
            "allocated": _column(batch, "total_allocated", 0),
            "reserved": _column(batch, "total_reserved", 0),
            "active": _column(batch, "total_active", NULL),
            "stream": _column(batch, "stream_ptr", NULL),
            "device": device,
        }
        self._pta.append(new)

    def _add_ge(self, batch: pa.RecordBatch) -> None:
        whole = _column(batch, "data_len", GE_MIN_DATA_LEN) >= GE_MIN_DATA_LEN
        self._counts["ge_short_records"] += int((~whole).sum())
        if not whole.all():
            batch = batch.filter(pa.array(whole))
        new = {
            "time": _column(batch, "time_ns", 0),
            "seq": self._seqs(batch.num_rows),
            "op": _column(batch, "node_id_hash", 0),
            "addr": _column(batch, "addr", 0),
            "device_type": _column(batch, "device_type", 0),
            "device": _column(batch, "device_id", 0),
            "size": _column(batch, "size", 0),
            "allocated": _column(batch, "total_allocate_memory", 0),
            "reserved": _column(batch, "total_reserve_memory", 0),
        }
        self._ge.append(new)

    def _add_app(self, batch: pa.RecordBatch, device: int) -> None:
        """APP samples of the device's ``npu_mem`` table: total reserved = ddr + hbm."""
        batch = batch.filter(pc.equal(batch.column("event").cast(pa.string()), EVENT_NAMES[0]))
        ddr, hbm = ints(batch.column("ddr_bytes")), ints(batch.column("hbm_bytes"))
        new = {
            "time": ints(batch.column("time_ns")),
            "seq": self._seqs(batch.num_rows),
            "device": np.full(batch.num_rows, device, np.int64),
            "reserved": np.where((ddr == NULL) | (hbm == NULL), NULL, ddr + hbm),
        }
        self._app.append(new)

    def _code(self, texts: list[str], index: Int64Array) -> Int64Array:
        """Integer codes of op names ``texts[index]``, new names coded in the order they first come."""
        distinct, first = np.unique(index, return_index=True)
        code_of = np.full(len(texts), -1, np.int64)
        for at_ in distinct[np.argsort(first)].tolist():
            name = texts[at_]
            if name not in self._codes:
                self._codes[name] = len(self._names)
                self._names.append(name)
            code_of[at_] = self._codes[name]
        return code_of[index]

    def _add_ops(self, batch: pa.RecordBatch) -> None:
        kinds, kind = _decoded(batch.column("kind"))
        texts, name = _decoded(batch.column("name"))
        columns = {
            "id": "op_id",
            "parent": "parent_id",
            "pid": "pid",
            "tid": "tid",
            "start": "start_ns",
            "end": "end_ns",
            "corr": "correlation_id",
        }
        values = {column: ints(batch.column(field)) for column, field in columns.items()}
        cpu = _is(kinds, kind, "cpu_op")
        name = name[cpu]
        owner = np.asarray([t.startswith(OWNER_PREFIXES) for t in texts], np.int64)
        candidate = np.asarray([t not in EXCLUDED_OPS for t in texts], np.int64)
        new = {column: values[column][cpu] for column in _OPS[:6]}
        new |= {"name": self._code(texts, name), "owner": owner[name], "candidate": candidate[name]}
        self._ops = concat(self._ops, new)
        for queue, table, names_ in (("enqueue", "_enq", _ENQ), ("dequeue", "_deq", _DEQ)):
            picked = _is(kinds, kind, queue)
            new = {column: values[column][picked] for column in names_ if column != "name"}
            if "name" in names_:
                new["name"] = np.full(int(picked.sum()), _UNRESOLVED, np.int64)
            setattr(self, table, concat(getattr(self, table), new))
        if len(self._names) >= self._names_limit:
            self._forget_names()

    # ------------------------------------------------------------------ op names

    def _forget_names(self) -> None:
        """Drop the names no held op, enqueue or open allocation refers to, and re-code the rest.

        The next compaction waits until the dictionary doubles (at least :data:`NAMES_KEPT`), so the
        cost stays linear in the names added.
        """
        column = _PTA_PAYLOAD.index("name")
        held = kernels.open_pta_payload(self._pta_state, column)
        codes = np.unique(np.concatenate([self._ops["name"], self._enq["name"], held.ravel()]))
        kept = codes[codes >= 0]
        recode = np.full(len(self._names), -1, np.int64)
        recode[kept] = np.arange(kept.size)

        def recoded(values: Int64Array) -> Int64Array:
            return np.where(values >= 0, recode[np.maximum(values, 0)], values)

        self._ops["name"] = recoded(self._ops["name"])
        self._enq["name"] = recoded(self._enq["name"])
        kernels.set_open_pta_payload(self._pta_state, column, recoded(held))
        self._names = [self._names[code] for code in kept.tolist()]
        self._codes = {name: code for code, name in enumerate(self._names)}
        self._names_limit = max(NAMES_KEPT, 2 * len(self._names))

    def _last_started(self, pid: Int64Array, tid: Int64Array, t: Int64Array) -> Int64Array:
        """Row of the last candidate op of each (pid, tid) that started at or before ``t``, else -1."""
        ops = self._ops
        cand = np.flatnonzero(ops["candidate"] == 1)
        found = last_at_or_before((ops["pid"][cand], ops["tid"][cand], ops["start"][cand]), (pid, tid, t))
        return pick(cand, found)

    def _walk(self, rows_: Int64Array, stop: BoolArray | None, t: Int64Array | None) -> Int64Array:
        """Walk each op row up its parents until ``stop[row]`` (or its end >= ``t``); -1 when lost."""
        ops = self._ops
        at_ = rows_.copy()
        for _ in range(at_.size + 1):
            live = at_ >= 0
            done = np.zeros(at_.size, np.bool_)
            if stop is not None:
                done[live] = stop[at_[live]]
            if t is not None:
                done[live] = ops["end"][at_[live]] >= t[live]
            moving = live & ~done
            if not moving.any():
                break
            parent = ops["parent"][at_[moving]]
            at_[moving] = np.where(parent == NULL, -1, find(ops["id"], parent))
        return at_

    def _resolve_enqueues(self, until: int) -> None:
        """Name each enqueue that ended before ``until`` after the aten/npu op it belongs to."""
        enq = self._enq
        todo = np.flatnonzero((enq["name"] == _UNRESOLVED) & (enq["end"] < until))
        if not todo.size:
            return
        start = self._last_started(enq["pid"][todo], enq["tid"][todo], enq["end"][todo])
        owner = self._walk(start, self._ops["owner"] == 1, None)
        enq["name"][todo] = pick(self._ops["name"], owner)

    def _op_names(self, pid: Int64Array, tid: Int64Array, t: Int64Array) -> Int64Array:
        """Name codes of the ops owning allocations at ``t`` (module docstring), -1 for none."""
        out = np.full(t.size, -1, np.int64)
        deq = self._deq
        window = np.full(t.size, -1, np.int64)
        if deq["start"].size:
            last = last_at_or_before((deq["pid"], deq["tid"], deq["start"]), (pid, tid, t))
            inside = last >= 0
            inside[inside] = t[inside] < deq["end"][last[inside]]
            window = np.where(inside, last, -1)
        queued = window >= 0
        if queued.any():
            enq = self._enq
            order = np.argsort(enq["corr"], kind="stable")
            hit = find(enq["corr"][order], deq["corr"][window[queued]])
            named = pick(enq["name"][order], hit)
            out[queued] = np.where(named == _UNRESOLVED, -1, named)
        plain = ~queued
        start = self._last_started(pid[plain], tid[plain], t[plain])
        owner = self._walk(start, None, t[plain])
        out[plain] = pick(self._ops["name"], owner)
        return out

    # ------------------------------------------------------------------ emission

    def _emit(self, until: int, *, final: bool) -> list[Emit]:
        """The rows of the records before ``until``, in slices of at most about ``EMIT_RECORDS``
        records: a slice is what a smaller watermark step would have released."""
        times = np.concatenate([getattr(self, name).times_before(until) for name in ("_pta", "_ge", "_app")])
        out: list[Emit] = []
        for bound in slice_starts(times, EMIT_RECORDS):
            out += self._emit_slice(bound, final=False)
        return out + self._emit_slice(until, final=final)

    def _emit_slice(self, until: int, *, final: bool) -> list[Emit]:
        self._resolve_enqueues(until)
        pta, ge, app = (self._take(name, until) for name in ("_pta", "_ge", "_app"))
        out: list[Emit] = []
        memory = self._memory_rows(pta, ge, final=final)
        if memory.num_rows:
            out.append(("memory", memory))
        record = self._record_rows(pta, ge, app)
        if record.num_rows:
            out.append(("memory_record", record))
        self._prune(until)
        return out

    def _take(self, attribute: str, until: int) -> Columns:
        """Remove and return the records before ``until``, in (time, arrival) order."""
        pending: Pending = getattr(self, attribute)
        picked = pending.take_before(until)
        time, seq = picked["time"], picked["seq"]
        if np.all((time[1:] > time[:-1]) | ((time[1:] == time[:-1]) & (seq[1:] > seq[:-1]))):
            return picked  # already in order: keep the views
        return take(picked, np.lexsort((seq, time)))

    def _memory_rows(self, pta: Columns, ge: Columns, *, final: bool) -> pa.RecordBatch:
        parts = [self._pta_rows(pta, final=final), self._ge_rows(ge, final=final)]
        table = pa.Table.from_batches([p for p in parts if p.num_rows], TABLES["memory"])
        return table.unify_dictionaries().combine_chunks().to_batches()[0] if table.num_rows else parts[0]

    def _pta_rows(self, pta: Columns, *, final: bool) -> pa.RecordBatch:
        """``operator_memory`` rows of the inner allocator's groups that closed (all, if final)."""
        inner = dict(pta) if pta["inner"].all() else take(pta, pta["inner"] == 1)
        malloc = inner["kind"] == MALLOC
        name = np.full(rows(inner), -1, np.int64)
        name[malloc] = self._op_names(inner["pid"][malloc], inner["tid"][malloc], inner["time"][malloc])
        self._counts["unnamed"] += int((name[malloc] < 0).sum())
        inner["name"] = name
        found = kernels.match_pta(
            (inner["pid"], inner["ptr"]),
            inner["kind"],
            inner["time"],
            state=self._pta_state,
            payload=[inner[c] for c in _PTA_PAYLOAD],
            base=self._pta_base,
            final=final,
        )
        self._pta_base += rows(inner)
        order = np.argsort(found.alloc_time, kind="stable")
        found = kernels.PtaRows._make(c[..., order] for c in found)
        alloc = dict(zip(_PTA_PAYLOAD, found.alloc_payload, strict=True))
        release = dict(zip(_PTA_PAYLOAD, found.release_payload, strict=True))
        released = (found.free_seq != NO_SEQ) | (found.block_free_seq != NO_SEQ)

        def after(name_: str) -> pa.Array:
            return nullable(np.where(released, release[name_], NULL))

        used, index = _distinct_codes(alloc["name"])  # -1: no name, ""
        words = pa.array([self._names[code] if code >= 0 else "" for code in used.tolist()], pa.string())
        return conform(
            TABLES["memory"],
            {
                "device_id": alloc["device"].astype(np.int32),
                "source": _labels(np.zeros(order.size, np.int64), ("PTA", "GE")),
                "name": pa.DictionaryArray.from_arrays(pa.array(index.astype(np.int32)), words),
                "size_bytes": alloc["size"],
                "alloc_ns": found.alloc_time,
                "release_ns": nullable(found.release_time),
                "active_release_ns": nullable(found.active_release_time),
                "duration_ns": nullable(found.duration),
                "active_duration_ns": nullable(found.active_duration),
                "alloc_total_allocated": alloc["allocated"],
                "alloc_total_reserved": alloc["reserved"],
                "alloc_total_active": nullable(alloc["active"]),
                "release_total_allocated": after("allocated"),
                "release_total_reserved": after("reserved"),
                "release_total_active": after("active"),
                "stream_ptr": nullable(alloc["stream"]),
                "device_type": _device_tags(alloc["device"]),
            },
        )

    def _ge_rows(self, ge: Columns, *, final: bool) -> pa.RecordBatch:
        """GE operator memory rows of the pairs that closed (and, if final, the open allocations)."""
        found = kernels.match_ge(
            (ge["op"], ge["addr"], ge["device_type"], ge["device"]),
            ge["size"],
            ge["time"],
            state=self._ge_state,
            payload=(ge["allocated"], ge["reserved"]),
            base=self._ge_base,
            final=final,
        )
        self._ge_base += rows(ge)
        allocated = found.alloc_seq != NO_SEQ  # a release without its allocation makes no row
        if not allocated.all():
            found = kernels.GeRows._make(c[..., allocated] for c in found)
        op, device = found.keys[0], found.keys[3]
        ids = pa.array(op.view(np.uint64))
        names = resolve(ids, self.hashes) if self.hashes is not None else pc.cast(ids, pa.string())
        released = found.release_seq != NO_SEQ
        return conform(
            TABLES["memory"],
            {
                "device_id": device.astype(np.int32),
                "source": _labels(np.ones(len(found.alloc_time), np.int64), ("PTA", "GE")),
                "name": names,
                "size_bytes": found.size,
                "alloc_ns": found.alloc_time,
                "release_ns": nullable(found.release_time),
                "duration_ns": nullable(found.duration),
                "alloc_total_allocated": found.alloc_payload[0],
                "alloc_total_reserved": found.alloc_payload[1],
                "release_total_allocated": nullable(np.where(released, found.release_payload[0], NULL)),
                "release_total_reserved": nullable(np.where(released, found.release_payload[1], NULL)),
                "device_type": _device_tags(device),
            },
        )

    def _record_rows(self, pta: Columns, ge: Columns, app: Columns) -> pa.RecordBatch:
        """memory_record rows of the final records, each PTA and GE row followed by its PTA+GE row.

        Each part is in (time, arrival) order, so a stable sort by time of app, PTA, GE (in that order)
        is the (time, component, arrival) order. Updates the latest PTA and GE totals per device.
        """
        parts = (app, pta, ge)
        component = np.concatenate(
            (
                np.full(rows(app), APP, np.int64),
                np.where(pta["component"] == WORKSPACE_ALLOCATOR, WORKSPACE, PTA),
                np.full(rows(ge), GE, np.int64),
            )
        )
        time = np.concatenate([part["time"] for part in parts])
        totals = np.full((4, time.size), NULL, np.int64)  # a part without a total leaves it absent
        start = 0
        for part in parts:
            for row, name in enumerate(_TOTALS):
                if name in part:
                    totals[row, start : start + rows(part)] = part[name]
            start += rows(part)
        unique, slot = _distinct(np.concatenate([part["device"] for part in parts]))
        latest = np.full((2, 5, unique.size), NULL, np.int64)
        latest[:, kernels.L_FOUND] = 0
        for kind, attribute in enumerate(("_last_pta", "_last_ge")):
            table: Columns = getattr(self, attribute)
            held = find(table["device"], unique)
            hit = held >= 0
            latest[kind, kernels.L_FOUND, hit] = 1
            for row, name in enumerate(_TOTALS, kernels.L_ALLOCATED):
                latest[kind, row, hit] = table[name][held[hit]]
        out = kernels.memory_records(np.argsort(time, kind="stable"), component, slot, time, totals, latest)
        for kind, attribute in enumerate(("_last_pta", "_last_ge")):
            table = getattr(self, attribute)
            found = latest[kind, kernels.L_FOUND] == 1
            new = {
                "device": unique[found],
                **{n: latest[kind, r, found] for r, n in enumerate(_TOTALS, kernels.L_ALLOCATED)},
            }
            kept = take(table, ~np.isin(table["device"], unique))
            setattr(self, attribute, _sorted_by_device(concat(kept, new)))
        device = out[kernels.R_DEVICE]
        return conform(
            TABLES["memory_record"],
            {
                "device_id": unique.astype(np.int32)[device],
                "component": _labels(out[kernels.R_COMPONENT], COMPONENTS),
                "time_ns": out[kernels.R_TIME],
                "total_allocated": nullable(out[kernels.R_ALLOCATED]),
                "total_reserved": nullable(out[kernels.R_RESERVED]),
                "total_active": nullable(out[kernels.R_ACTIVE]),
                "stream_ptr": nullable(out[kernels.R_STREAM]),
                "device_type": _tags(unique, device),
            },
        )

    def _prune(self, until: int) -> None:
        """Forget ops, dequeue windows and enqueues no later record can reach."""
        if until >= DONE:
            self._ops, self._enq, self._deq = empty_columns(_OPS), empty_columns(_ENQ), empty_columns(_DEQ)
            return
        self._deq = take(self._deq, self._deq["end"] >= until)
        enq = self._enq
        reachable = np.isin(enq["corr"], self._deq["corr"]) | (enq["end"] >= horizon(until, self.lag))
        self._enq = take(enq, reachable)
        ops = self._ops
        keep = (ops["start"] >= until) | (ops["end"] >= until)
        before = np.flatnonzero((ops["candidate"] == 1) & (ops["start"] < until))
        if before.size:
            pid, tid, start = ops["pid"][before], ops["tid"][before], ops["start"][before]
            order = np.lexsort((before, start, tid, pid))
            last_of_thread = np.r_[
                (pid[order][1:] != pid[order][:-1]) | (tid[order][1:] != tid[order][:-1]), True
            ]
            chain = before[order[last_of_thread]]
            while chain.size:
                keep[chain] = True
                parent = ops["parent"][chain]
                found = find(ops["id"], parent[parent != NULL])
                found = found[found >= 0]
                chain = found[~keep[found]]
        self._ops = take(ops, keep)

    def _report(self) -> None:
        """Log the allocation records that never matched and the allocations left without a name."""
        pta, ge = self._pta_state.counts, self._ge_state.counts
        counts = {
            **self._counts,
            "pta_frees_without_malloc": int(pta[kernels.PTA_DROPPED]),
            "pta_incomplete": int(pta[kernels.PTA_INCOMPLETE]),
            "ge_releases_without_allocation": int(ge[kernels.GE_NO_ALLOCATION]),
            "ge_allocations_replaced": int(ge[kernels.GE_REPLACED]),
            "ge_zero_size": int(ge[kernels.GE_ZERO_SIZE]),
            "ge_never_released": int(ge[kernels.GE_NEVER_FREED]),
        }
        lost = (
            "pta_frees_without_malloc",
            "ge_releases_without_allocation",
            "ge_allocations_replaced",
            "ge_zero_size",
            "ge_short_records",
        )
        level = self._log.warning if any(counts[k] for k in (*lost, "unnamed")) else self._log.info
        level(events.RECORDS_UNMATCHED, **counts)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "pta": self._pta.columns(),
                "ge": self._ge.columns(),
                "app": self._app.columns(),
                "seen": self._seen,
                "pta_state": pack_keyed(self._pta_state, 2 * MALLOC + 1),
                "ge_state": pack_keyed(self._ge_state, 1),
                "pta_base": self._pta_base,
                "ge_base": self._ge_base,
                "ops": self._ops,
                "enq": self._enq,
                "deq": self._deq,
                "names": self._names,
                "names_limit": self._names_limit,
                "last_pta": self._last_pta,
                "last_ge": self._last_ge,
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._reset()
        self._pta, self._ge = Pending(_PTA, doc["pta"]), Pending(_GE, doc["ge"])
        self._app = Pending(_APP, doc["app"])
        self._seen = doc["seen"]
        self._pta_state = unpack_keyed(doc["pta_state"])
        self._ge_state = unpack_keyed(doc["ge_state"])
        self._pta_base, self._ge_base = doc["pta_base"], doc["ge_base"]
        self._ops, self._enq, self._deq = doc["ops"], doc["enq"], doc["deq"]
        self._names = list(doc["names"])
        self._codes = {name: code for code, name in enumerate(self._names)}
        self._names_limit = doc["names_limit"]
        self._last_pta, self._last_ge = doc["last_pta"], doc["last_ge"]
        self._counts = dict(doc["counts"])


def _sorted_by_device(table: Columns) -> Columns:
    return take(table, np.argsort(table["device"], kind="stable"))


class NpuMemory(RowByRow):
    """Raw ``<family>_raw@<d>`` -> ``<family>@<d>``, for ``family`` npu_mem or npu_module_mem.

    Row by row (module docstring), so a batch is emitted at the next :meth:`advance`. One operator
    per family, so each output's watermark follows its own feed: followed live, npu_module_mem's
    clock lags far behind npu_mem's, and Memory waits on ``npu_mem@<d>``.
    """

    SOURCES = ("npu_mem", "npu_module_mem")

    def __init__(self, device_id: int, family: str) -> None:
        if family not in self.SOURCES:
            msg = f"family: expected one of {self.SOURCES}, got {family!r}"
            raise ValueError(msg)
        super().__init__(at(f"{family}_raw", device_id), at(family, device_id))
        self.device_id = device_id
        self.family = family

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return self._npu_mem(batch) if self.family == "npu_mem" else self._module_mem(batch)

    def _npu_mem(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        event = ints(batch.column("event"))
        labels = {**EVENT_NAMES, **{int(e): str(e) for e in np.unique(event) if int(e) not in EVENT_NAMES}}
        codes = np.searchsorted(sorted(labels), event)
        return conform(
            TABLES["npu_mem"],
            {
                "device_id": np.full(batch.num_rows, self.device_id, np.int32),
                "event": _labels(codes, [labels[k] for k in sorted(labels)]),
                "time_ns": batch.column("time_ns"),
                "ddr_bytes": _unsigned_bytes(batch.column("ddr")),
                "hbm_bytes": _unsigned_bytes(batch.column("hbm")),
            },
        )

    def _module_mem(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        module = ints(batch.column("module_id"))
        unique, index = np.unique(module, return_inverse=True)
        names = [MODULE_NAMES.get(m, str(m)) for m in unique.tolist()]
        return conform(
            TABLES["npu_module_mem"],
            {
                "device_id": np.full(batch.num_rows, self.device_id, np.int32),
                "component": _labels(index, names),
                "time_ns": batch.column("time_ns"),
                "total_reserved_bytes": _unsigned_bytes(batch.column("total_size")),
            },
        )
