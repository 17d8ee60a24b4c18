"""Chrome-trace events of every timeline layer, from the canonical tables (msprof_outputs.md §3).

One :class:`~profstream.engine.layouts._outputs.EventBuilder` per layer; msprof's ``msprof_{ts}.json``
uses the CANN-side ones, torch_npu's ``trace_view.json`` adds the framework ones
(framework_outputs.md §3.1).

* pids: ``(P << 10) | (sort_index << 5) | D`` with ``P`` = info.json ``pid``, ``D`` = device id
  or 31 for host layers (§3.3). Sort indices are the current C++ ``LAYER_INFO`` ones: CANN 7,
  Ascend Hardware 14, AI Core Freq 15, Communication 16, NPU MEM 17, HBM 24, Overlap Analysis 31 (older
  CANN wrote 13, 14, 15, 19, 17, 23, as torch_npu's trace_view.json in shared/realdata shows; viewers only
  order by them).
  Device labels are ``NPU {D}`` (``GetLayerInfoLabelWithDeviceId``).
* ``ts`` is local wall-clock µs with three decimals (the host-monotonic ns plus the start_info
  offset, §3.5), ``dur`` µs.
* Ascend Hardware ``Task Type``: the op's GE task type (node_basic_info, the type op_summary prints;
  GE type 9, ``HCCL`` in the tasks table, as ``COMMUNICATION``: :func:`stored_task_type`),
  else :func:`default_task_type` (current C++ ``AscendHardwareAssembler::GetTaskType`` over
  ``TaskProcessor::GetTaskType``; Python ``TaskTimeViewer._update_op_name_and_type``). Versions
  differ: the CANN 8.0-era C++ assembler (2024, ``GenerateTaskTrace``) wrote every task's device
  task type, as torch_npu's trace_view.json in shared/realdata shows (910B vector kernels
  ``AI_CORE`` where kernel_details says ``AI_VECTOR_CORE``; ``EVENT_RECORD_SQE``,
  ``PLACE_HOLDER_SQE``); we follow the current rule.
* Ascend Hardware: an HCCL task that is no kernel (notify, copy, reduce or event task, or an FFTS+
  task and its contexts, of a communication op) is named and typed by :func:`default_task_type`, not
  by its op: msprof's compute-task info, where the timeline looks up op names and GE types, has only
  kernels (:func:`~profstream.engine.operators.launches.hccl_non_kernels`). Both msprof paths agree,
  and so do the real files in shared/realdata: the 2023 910 timeline (``NOTIFY_WAIT``,
  ``NOTIFY_RECORD``, ``REDUCE_ASYNC_V2`` named and typed so) and the 910B trace_view.json (FFTS+
  contexts ``Notify Wait``, ``Write Value``, ``SDMA``). The tasks table keeps the op's name and
  ``HCCL`` for them (op_summary, the Communication layer and the statistics read it). An HCCL kernel
  is drawn with its op's name, typed ``COMMUNICATION`` (``HCCL_AI_CPU`` on an AI CPU).
* Ascend Hardware threads are GE logic streams: a task's ``tid`` (its thread's name ``Stream {tid}``
  and sort index, its HostToDevice flow end) is the logic stream the host's ``logic_stream_info``
  gives its physical stream, else the stream id; ``Physic Stream Id`` stays physical (C++
  ``AscendHardwareAssembler::GetPhysicStreamId`` over ``HashInitProcessor::ProcessLogicStream``'s
  map; Python ``TaskTimeViewer.format_task_scheduler`` with ``GeLogicStreamSingleton``). Summaries
  (op_summary, task_time, kernel_details) keep the physical id, as both paths print it there.
  The map is read whole when the export is planned (:func:`logic_streams`; GE writes it when it
  loads a model). Choices where the paths differ: a physical stream named twice keeps its first
  logic stream in reading order (unaging slices, then aging), as C++ keeps its first table row;
  msprof's Python also leaves every stream unmapped when the largest mapped physical id is 0 or
  above ``NumberConstant.DEFAULT_STREAM_ID``, which the C++ path, followed here, does not.
* Ascend Hardware: a MEMCPY_ASYNC task is named ``MEMCPY_ASYNC`` with its device task type as
  ``Task Type``, whatever op launched it, and adds, after ``connection_id``, ``size(B)`` (its bytes,
  an integer), ``bandwidth(GB/s)`` (bytes per ns of its duration, a float, unrounded; 0.0 for a task
  of no duration) and ``operation`` (the copy direction) (current C++
  ``AscendHardwareAssembler::GenerateMemcpyAsyncTrace``, ``MemcpyAsyncEvent::ProcessArgs``; the
  sizes come from memcpy_info through the host join, :mod:`~profstream.engine.operators.host_join`).
  msprof writes them on every MEMCPY_ASYNC task once the host recorded any memcpy_info (a task
  without a record: ``0``, ``0.0``, ``other``) and on none otherwise (:func:`memcpy_args`). The
  msprof Python timeline (``TaskTimeViewer.format_task_scheduler``) writes none. The CANN 8.0-era
  trace_view.json files in shared/realdata name them ``data size(Byte)`` and ``memcpy direction``
  and write no bandwidth; we follow the current names. Our duration is whole ns where msprof's
  keeps the fraction of its syscnt conversion, so a bandwidth may differ in its last digits.
* Communication: an HCCL task's ``notify_id`` is decimal text (C++ ``CommunicationTaskData.notifyId``
  is a string), the comm table's null (an all-ones id) as ``18446744073709551615``, as the real
  trace_view.json files in shared/realdata print it.
* HostToDevice flows (§3.7, C++ form): ``id = str(connection_id << 32)``, name ``HostToDevice{id}``;
  one ``s`` per launching API on the CANN layer, at its start on its thread, and an ``f`` at each
  device task or communication op it launched (so one ``s`` for the several ``f`` of an API whose
  op runs several tasks, e.g. a MIX kernel's contexts).

* Collection start (§3.5 item 3): each device layer draws only what starts at or after the device's
  start_info ``clockMonotonicRaw`` or spans it, counters only samples from it on (``_Layer.span``;
  Python ``MsprofTimeline.is_in_iteration``); flows follow their tasks. The CANN layer is drawn whole:
  Python filters it by its own rule (``ApiViewer._filter_api_data``) and draws it only without device data.

Choices: a Communication group's thread is ``100 * k`` for the ``k``-th group seen on a device and its
planes ``100 * k + plane + 1`` (msprof numbers them consecutively after counting planes, which a stream
does not know in advance; viewers only show the names). The Step Trace layer draws the iteration, FP_BP,
Iteration Refresh and Reduce slices, and the Data_aug Bound flow pair where msprof's Python draws it
(§3.6); a 60000/60001 step is an iteration slice (FP and BP ``N/A``), as both msprof paths draw every row
of the ``training_trace`` table (``StepTraceViewer.get_step_trace_timeline``,
``StepTraceAssembler::GenerateTrainTrace``), where ``CreateTrainingTrace.update_step_time`` put them.
Its duration args are msprof's Python floats of the syscnt ticks (:func:`syscnt_us`); an FP_BP or
refresh of 0 ticks prints ``0.0`` where msprof's Python prints ``N/A``, and ``dur`` stays the ns span.
HostToDevice flows end where msprof's C++ ends them (:mod:`~profstream.engine.operators.launches`): on
a task with an op name that is not an HCCL task other than a kernel (an HCCL kernel's flow, its
communication op's, ends on it too), on every MEMCPY_ASYNC task, and on each communication op at its
start on its group thread. torch_npu's ``async_npu`` flows end on the same events but HCCL kernels
(:func:`~profstream.engine.operators.launches.kernel_rows`). They start where
``CannAssembler``'s ``GenerateConnectionTrace`` starts them, once per API record: at every node-level
API, whether or not a task of it was seen (the CANN layer draws these), and at the ACL API that
launched a MEMCPY_ASYNC task outside any node API (Ascend Hardware draws these, one per connection id
of a batch, as the API table does not say which APIs launched one; a copy inside a node API, an HCCL
op's for one, flows from that API's start). Choices: a kernel launched outside any node API keeps its
``f`` and gets no ``s``, as no rule of msprof's starts one there; the ACL record/wait-event APIs, whose
tasks have no flow end here, get none either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.clock import TickRate
from profstream.engine.layouts._outputs import (
    Context,
    EventBuilder,
    Processes,
    after_collection_start,
    split_by,
)
from profstream.engine.operators.host_join import MEMCPY_ASYNC, OTHER_OPERATION
from profstream.engine.operators.launches import (
    hccl_non_kernels,
    kernel_launches,
    op_flow_ends,
    task_flow_ends,
)
from profstream.engine.operators.statistics import sub_task_parents
from profstream.sinks import CompleteEvents, CounterEvents, FlowEvents, MetadataEvents
from profstream.sinks.chrome_trace import Events

HOST_SLOT = 31
CANN_SORT = 7
HARDWARE_SORT = 14
AICORE_FREQ_SORT = 15
COMMUNICATION_SORT = 16
NPU_MEM_SORT = 17
HBM_SORT = 24
OVERLAP_SORT = 31
#: msprof's ``NumberConstant.MICRO_SECOND`` and ``FREQ_TO_MHz`` (both 1000000.0)
MICRO = 1_000_000.0
#: the syscnt rate of a device whose info.json is not known (:func:`syscnt_ticks`)
DEFAULT_HWTS_MHZ = Fraction(1000)
STEP_TRACE_TID = 70000
#: api levels as the CANN layer names them (``{Level}@{api}``, §3.4)
LEVEL_NAMES = {
    "acl": "AscendCL",
    "runtime": "Runtime",
    "model": "Model",
    "node": "Node",
    "communication": "Communication",
}
OVERLAP_KINDS = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")


def format_pid(process_id: int, sort_index: int, device: int) -> int:
    """msprof's timeline pid of one layer of one device (``JsonAssembler::GetFormatPid``)."""
    return (process_id << 10) | (sort_index << 5) | device


def text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as plain strings (dictionaries decoded), for string functions."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        return values.dictionary_decode()
    return values if pa.types.is_string(values.type) else pc.cast(values, pa.string())


#: host task types msprof replaces by the device task type (``TaskTimeViewer.get_task_type``)
DEVICE_TYPED_HOSTS = pa.array(["FFTS_PLUS", "UNKNOWN"])


def default_task_type(rows: pa.RecordBatch) -> pa.Array:
    """msprof's task type of a task without a GE one, and its name without an op name: the device
    task type for an FFTS+ or unknown host task (or one without a host record), else the host task
    type (Python ``TaskTimeViewer.get_task_type``; C++ ``AscendHardwareAssembler::GetOpName``)."""
    host, device = text(rows.column("host_task_type")), text(rows.column("device_task_type"))
    by_device = pc.or_(pc.is_null(host), pc.is_in(host, value_set=DEVICE_TYPED_HOSTS))
    return pc.if_else(by_device, device, host)


def stored_task_type(rows: pa.RecordBatch) -> pa.Array:
    """The GE task type msprof's compute-task info holds for each task, null without one (then
    msprof prints :func:`default_task_type`). The tasks table's ``HCCL`` is GE type 9, which both
    paths store as ``COMMUNICATION`` (C++ ``NumberMapping`` ``geTaskTypeMap``, also for the HCCL
    kernels ``UpdateComputeDescForHcclSituation`` retypes; Python
    ``TaskGear.get_truth_task_type_for_kernel_hccl_task``), and only for a kernel
    (:func:`~profstream.engine.operators.launches.hccl_non_kernels`); ``HCCL_AI_CPU`` (an AI CPU
    kernel) is stored as it is."""
    task_type = text(rows.column("task_type"))
    hccl = pc.equal(task_type, "HCCL").fill_null(False)
    return pc.if_else(
        hccl, pc.if_else(kernel_launches(rows), "COMMUNICATION", pa.scalar(None, pa.string())), task_type
    )


def map_text(values: pa.Array | pa.ChunkedArray, change: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """``change`` applied to a text column; a dictionary column's entries are changed once each."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        return pa.DictionaryArray.from_arrays(values.indices, change(values.dictionary))
    return change(text(values))


def logic_streams(table: pa.Table | None) -> dict[int, int]:
    """Physical stream id -> GE logic stream id, from the ``logic_stream_info`` records in reading
    order (unaging, then aging); a physical stream listed again keeps its first logic stream, as
    msprof's C++ ``HashInitProcessor::ProcessLogicStream`` keeps it (and warns)."""
    if table is None or not table.num_rows:
        return {}
    lists = table.column("physic_stream_ids").combine_chunks()
    physical = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    counts = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False)
    logic = np.repeat(table.column("logic_stream_id").to_numpy(), counts)
    mapping: dict[int, int] = {}
    for phys, log in zip(physical.tolist(), logic.tolist(), strict=True):
        mapping.setdefault(phys, log)
    return mapping


def logic_stream_ids(mapping: Mapping[int, int], streams: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each physical stream id's logic stream, the id itself where ``mapping`` has none
    (``AscendHardwareAssembler::GetPhysicStreamId``)."""
    if isinstance(streams, pa.ChunkedArray):
        streams = streams.combine_chunks()
    if not mapping or not len(streams):
        return streams
    keys = np.fromiter(mapping, np.int64, len(mapping))
    order = np.argsort(keys)
    keys, values = keys[order], np.fromiter(mapping.values(), np.int64, len(mapping))[order]
    ids = streams.to_numpy(zero_copy_only=False).astype(np.int64)
    at = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
    return pa.array(np.where(keys[at] == ids, values[at], ids))


def per_device(batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of each device in ``batch`` (usually one)."""
    return split_by(batch, batch.column("device_id"))


def local(context: Context, ns: pa.Array) -> pa.Array:
    """Host-monotonic ns as local wall-clock ns (§3.5)."""
    return pc.add(ns, context.wall_offset_ns)


def duration(batch: pa.RecordBatch, start: str = "start_ns", end: str = "end_ns") -> pa.Array:
    return pc.subtract(batch.column(end), batch.column(start))


def syscnt_ticks(context: Context, batch: pa.RecordBatch, delta_ns: pa.Array) -> pa.Array:
    """The device syscnt ticks each ns delta of ``batch`` spans (null stays null).

    Each time was converted to the nearest ns from its syscnt (:mod:`~profstream.engine.clock`), so
    a delta is within 1 ns of ticks times the ns per tick: less than half a tick at any rate below
    500 MHz, so the ticks come back exactly. A device whose rate is not known (steps imported from
    msprof's CSV) counts ns as ticks of a 1000 MHz clock.
    """
    ns = pc.cast(delta_ns, pa.int64())
    values = np.asarray(ns.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    devices = np.asarray(batch.column("device_id").to_numpy(zero_copy_only=False))
    ticks = np.zeros(len(values), np.int64)
    for device in np.unique(devices):
        per_ns = context.hwts_mhz.get(int(device), DEFAULT_HWTS_MHZ) / 1000
        chosen = devices == device
        ticks[chosen] = TickRate(per_ns.numerator, per_ns.denominator).scale(values[chosen])
    return pa.array(ticks, mask=np.asarray(ns.is_null().to_numpy(zero_copy_only=False), bool))


def syscnt_us(
    context: Context, batch: pa.RecordBatch, ticks: pa.Array, places: int | None = None
) -> pa.Array:
    """Syscnt ticks as msprof's Python prints a step-trace duration: a float of as many digits as it
    has, ``ticks * 1000000.0 / (float(hwts_frequency) * 1000000.0)`` (``StepTraceViewer.calculate_duration``,
    ``InfoConfReader.get_freq``), or with ``places``, ``round(ticks * (1000000.0 / (float(hwts_frequency)
    * 1000000.0)), places)`` (a Reduce Duration: ``_reformat_step_trace_data``,
    ``StepTraceConstant.syscnt_to_micro``). Null stays null."""
    values = np.asarray(ticks.fill_null(0).to_numpy(zero_copy_only=False), np.int64).astype(np.float64)
    devices = np.asarray(batch.column("device_id").to_numpy(zero_copy_only=False))
    micros = np.zeros(len(values), np.float64)
    for device in np.unique(devices):
        hertz = float(context.hwts_mhz.get(int(device), DEFAULT_HWTS_MHZ)) * MICRO
        chosen = devices == device
        micros[chosen] = (
            values[chosen] * MICRO / hertz if places is None else values[chosen] * (MICRO / hertz)
        )
    if places is not None:
        micros = np.array([round(v, places) for v in micros.tolist()], np.float64)
    return pa.array(micros, mask=np.asarray(ticks.is_null().to_numpy(zero_copy_only=False), bool))


class _Layer(EventBuilder):
    #: the start and end columns by which a device layer leaves out what ran before the collection
    #: start (None: a host or framework layer, drawn whole)
    span: tuple[str, str | None] | None = None

    def __init__(self, context: Context, processes: Processes) -> None:
        self.context = context
        self.processes = processes

    def visible(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.span is None or not self.context.collection_start_ns:
            return batch
        start, end = self.span
        kept = after_collection_start(batch, self.context.collection_start_ns, start, end, at_start=True)
        return batch if kept.all() else batch.filter(pa.array(kept))

    def pid(self, sort_index: int, device: int) -> int:
        return format_pid(self.context.process_id, sort_index, device)

    def device_process(self, name: str, sort_index: int, device: int) -> list[Events]:
        pid = self.pid(sort_index, device)
        return list(self.processes.process(pid, name, f"NPU {device}", sort_index))


class AscendHardware(_Layer):
    """Device tasks per stream, and the HostToDevice flows that launched them."""

    table = "tasks"
    span = ("start_ns", "end_ns")

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        batch = batch.filter(pc.invert(sub_task_parents(batch)))  # the parent is not drawn (§3.4)
        for device, rows in per_device(batch) if batch.num_rows else ():
            yield from self._device(device, rows)

    def _device(self, device: int, rows: pa.RecordBatch) -> Iterator[Events]:
        pid = self.pid(HARDWARE_SORT, device)
        yield from self.device_process("Ascend Hardware", HARDWARE_SORT, device)
        streams = rows.column("stream_id")
        tids = logic_stream_ids(self.context.logic_streams, streams)
        yield from self.processes.threads(
            pid, pc.unique(tids).to_pylist(), lambda t: f"Stream {t}", lambda t: t
        )
        fallback = default_task_type(rows)
        # an HCCL task that is no kernel goes by its own task type, not its op's (hccl_non_kernels)
        op_name = pc.if_else(
            hccl_non_kernels(rows), pa.scalar(None, pa.string()), text(rows.column("op_name"))
        )
        # a MEMCPY_ASYNC task is named by its host type and typed by its device type, whatever op it
        # belongs to (C++ GenerateMemcpyAsyncTrace)
        memcpy = pc.fill_null(pc.equal(text(rows.column("host_task_type")), MEMCPY_ASYNC), False)
        start = local(self.context, rows.column("start_ns"))
        yield CompleteEvents(
            name=pc.if_else(memcpy, MEMCPY_ASYNC, pc.coalesce(op_name, fallback)),
            pid=pid,
            tid=tids,
            ts_ns=start,
            dur_ns=duration(rows),
            args={
                "Model Id": rows.column("model_id"),
                "Task Type": pc.if_else(
                    memcpy,
                    text(rows.column("device_task_type")),
                    pc.coalesce(stored_task_type(rows), fallback),
                ),
                "Physic Stream Id": streams,
                "Task Id": rows.column("task_id"),
                "Batch Id": rows.column("batch_id"),
                "Subtask Id": rows.column("context_id"),
                "connection_id": rows.column("connection_id"),
                **memcpy_args(self.context, rows, memcpy),
            },
        )
        ends = task_flow_ends(rows)
        yield from flow_ends(self.context, rows.filter(ends), pid, tids.filter(ends))
        # the flow start at the ACL API that launched a MEMCPY_ASYNC task, once per API (module docstring)
        outside_nodes = pc.fill_null(pc.not_equal(text(rows.column("launch_level")), "node"), False)
        copies = rows.filter(pc.and_(pc.and_(ends, memcpy), outside_nodes))
        first = np.unique(copies.column("connection_id").to_numpy(), return_index=True)[1]
        copies = copies.take(pa.array(np.sort(first)))
        yield from flow_starts(
            self.context,
            copies.column("connection_id"),
            copies.column("launch_thread_id"),
            copies.column("launch_ns"),
        )


def memcpy_args(context: Context, rows: pa.RecordBatch, memcpy: pa.Array) -> dict[str, pa.Array]:
    """The copy args of the MEMCPY_ASYNC tasks among ``rows`` (null, so left out, elsewhere): on
    each of them when the host recorded memcpy_info, a task without a record as ``0`` bytes in an
    ``other`` direction (module docstring)."""
    size = rows.column("memcpy_size")
    shown = pc.and_(memcpy, pc.or_(pa.scalar(context.memcpy_info), pc.is_valid(size)))
    size = pc.if_else(shown, pc.coalesce(size, 0), None)
    span = duration(rows)
    per_ns = pc.divide(pc.cast(size, pa.float64()), pc.cast(span, pa.float64()))
    bandwidth = pc.if_else(pc.greater(span, 0), per_ns, pc.if_else(shown, 0.0, None))
    operation = pc.coalesce(text(rows.column("memcpy_operation")), OTHER_OPERATION)
    return {
        "size(B)": size,
        "bandwidth(GB/s)": bandwidth,
        "operation": pc.if_else(shown, operation, None),
    }


def _flow_names(connection_id: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The HostToDevice flow id (``connection_id << 32``) and name of each launching API."""
    flow_id = text(pc.shift_left(connection_id, 32))
    return flow_id, pc.binary_join_element_wise("HostToDevice", flow_id, "")


def flow_starts(
    context: Context, connection_id: pa.Array, thread: pa.Array, start_ns: pa.Array
) -> Iterator[Events]:
    """The HostToDevice flow start of each launching API: at its start on its CANN-layer thread."""
    if not len(connection_id):
        return
    flow_id, name = _flow_names(connection_id)
    cann = format_pid(context.process_id, CANN_SORT, HOST_SLOT)
    yield FlowEvents("s", name, cann, thread, local(context, start_ns), "HostToDevice", flow_id)


def flow_ends(
    context: Context, flows: pa.RecordBatch, pid: int, tid: pa.Array | np.ndarray
) -> Iterator[Events]:
    """The HostToDevice flow end of each row, at its start on ``pid``/``tid``, from the API of its
    ``connection_id``."""
    if not flows.num_rows:
        return
    flow_id, name = _flow_names(flows.column("connection_id"))
    yield FlowEvents("f", name, pid, tid, local(context, flows.column("start_ns")), "HostToDevice", flow_id)


class Cann(_Layer):
    """Host API calls on the CANN layer, one thread per host thread."""

    table = "api"

    def metadata(self, batch: pa.RecordBatch) -> list[MetadataEvents]:
        """The process's metadata (once) and that of the batch's threads not seen before."""
        pid = self.pid(CANN_SORT, HOST_SLOT)
        threads = pc.unique(batch.column("thread_id")).to_pylist()
        return [
            *self.processes.process(pid, "CANN", "CPU", CANN_SORT),
            *self.processes.threads(pid, threads, lambda t: f"Thread {t}", lambda t: t),
        ]

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        pid = self.pid(CANN_SORT, HOST_SLOT)
        yield from self.metadata(batch)
        threads = batch.column("thread_id")
        level = text(batch.column("level"))
        shown = pc.coalesce(
            pc.if_else(pc.is_in(level, pa.array(list(LEVEL_NAMES))), _level_names(level), level), "Api"
        )
        name = text(batch.column("name"))
        yield CompleteEvents(
            name=pc.binary_join_element_wise(shown, name, "@"),
            pid=pid,
            tid=threads,
            ts_ns=local(self.context, batch.column("start_ns")),
            dur_ns=duration(batch),
            args={  # msprof's ApiTraceEvent: Mode is the struct type; id the acl API name, else 0
                "Thread Id": threads,
                "Mode": batch.column("struct_type"),
                "level": level,
                "id": pc.if_else(pc.equal(level, "acl"), name, "0"),
                "item_id": batch.column("item"),
                "connection_id": batch.column("connection_id"),
            },
        )
        yield from self.flow_starts(batch)

    def flow_starts(self, batch: pa.RecordBatch) -> Iterator[Events]:
        """The HostToDevice flow start of every node-level API (module docstring)."""
        node = pc.and_(
            pc.equal(text(batch.column("level")), "node"), pc.is_valid(batch.column("connection_id"))
        )
        rows = batch.filter(node)
        yield from flow_starts(
            self.context, rows.column("connection_id"), rows.column("thread_id"), rows.column("start_ns")
        )


class PrunedCann(Cann):
    """The CANN layer as torch_npu leaves it at Level0: its API events pruned
    (``LEVEL_TRACE_PRUNE_CONFIG``) and its ``process_name`` with them, its labels, sort index, threads
    and HostToDevice flow starts kept, as the real Level0 trace_view.json files in shared/realdata show."""

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        return [
            *(event for event in self.metadata(batch) if event.name != "process_name"),
            *self.flow_starts(batch),
        ]


def _level_names(level: pa.Array) -> pa.Array:
    keys = pa.array(list(LEVEL_NAMES))
    index = pc.index_in(level, keys)
    return pc.take(pa.array(list(LEVEL_NAMES.values())), index)


class Groups:
    """The thread of each Communication group per device (module docstring)."""

    def __init__(self) -> None:
        self._index: dict[tuple[int, str], int] = {}

    def tids(self, device: int, groups: pa.Array) -> np.ndarray:
        names = text(groups).fill_null("N/A").to_pylist()
        out = np.empty(len(names), np.int64)
        for row, group in enumerate(names):
            key = (device, group)
            if key not in self._index:
                self._index[key] = sum(1 for d, _ in self._index if d == device)
            out[row] = 100 * self._index[key]
        return out


class Communication(_Layer):
    """HCCL ops on their group's thread (§3.4); :class:`CommunicationTasks` draws the tasks."""

    table = "comm"
    span = ("start_ns", "end_ns")

    def __init__(self, context: Context, processes: Processes, groups: Groups) -> None:
        super().__init__(context, processes)
        self.groups = groups

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        for device, rows in per_device(batch):
            pid = self.pid(COMMUNICATION_SORT, device)
            yield from self.device_process("Communication", COMMUNICATION_SORT, device)
            tids, names = self.threads(device, rows)
            yield from self.processes.threads(pid, names, names.__getitem__, lambda t: t)
            yield CompleteEvents(
                name=rows.column(self.name_column),
                pid=pid,
                tid=pa.array(tids),
                ts_ns=local(self.context, rows.column("start_ns")),
                dur_ns=duration(rows),
                args=self.args(rows),
            )
            yield from self.flows(rows, pid, tids)

    name_column = "op_name"

    def flows(self, rows: pa.RecordBatch, pid: int, tids: np.ndarray) -> Iterator[Events]:
        """Each op's HostToDevice flow end, at its start on its group thread (msprof's hccl
        assembler); the CANN layer starts it at the node API that launched the op."""
        launched = op_flow_ends(rows)
        mask = launched.to_numpy(zero_copy_only=False)
        yield from flow_ends(self.context, rows.filter(launched), pid, tids[mask])

    def threads(self, device: int, rows: pa.RecordBatch) -> tuple[np.ndarray, dict[int, str]]:
        """Each row's thread, and the name of every thread used."""
        tids = self.groups.tids(device, rows.column("group_name"))
        groups = text(rows.column("group_name")).fill_null("N/A").to_pylist()
        names = {
            int(t): "Communication" if g == "N/A" else f"Group {g} Communication"
            for t, g in zip(tids.tolist(), groups, strict=True)
        }
        return tids, names

    def args(self, rows: pa.RecordBatch) -> dict[str, pa.Array]:
        yes_no = pa.array(["no", "yes"])
        return {
            "rank_size": rows.column("rank_size"),
            "connection_id": rows.column("connection_id"),
            "model id": rows.column("model_id"),
            "data_type": rows.column("data_type"),
            "alg_type": rows.column("alg_type"),
            "count": rows.column("count"),
            "relay": pc.take(yes_no, pc.cast(rows.column("relay"), pa.int8())),
            "retry": pc.take(yes_no, pc.cast(rows.column("retry"), pa.int8())),
        }


class CommunicationTasks(Communication):
    """HCCL tasks on the plane threads of their group (no flows: their op has the flow)."""

    table = "comm_tasks"
    name_column = "name"

    def flows(self, rows: pa.RecordBatch, pid: int, tids: np.ndarray) -> Iterator[Events]:
        return iter(())

    def threads(self, device: int, rows: pa.RecordBatch) -> tuple[np.ndarray, dict[int, str]]:
        base = self.groups.tids(device, rows.column("group_name"))
        tids = base + rows.column("plane_id").fill_null(0).to_numpy() + 1
        return tids, {int(t): f"Plane {int(t) % 100 - 1}" for t in np.unique(tids)}

    def args(self, rows: pa.RecordBatch) -> dict[str, pa.Array]:
        return {
            "notify_id": notify_text(rows.column("notify_id")),
            "duration estimated(us)": rows.column("duration_estimated_us"),
            "stream id": rows.column("stream_id"),
            "task id": rows.column("task_id"),
            "context id": rows.column("context_id"),
            "task type": rows.column("name"),
            "src rank": rows.column("src_rank"),
            "dst rank": rows.column("dst_rank"),
            "transport type": rows.column("transport_type"),
            "size(Byte)": rows.column("size_bytes"),
            "data type": rows.column("data_type"),
            "link type": rows.column("link_type"),
            "bandwidth(GB/s)": rows.column("bandwidth_gbps"),
            "model id": rows.column("model_id"),
        }


def notify_text(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """HCCL notify ids as msprof's C++ writes them: the unsigned 64-bit id as decimal text, all ones
    (the comm table's null) as ``18446744073709551615`` (``CommunicationTaskData.notifyId`` is text)."""
    unsigned = pc.cast(pc.fill_null(ids, -1), pa.uint64(), safe=False)
    return pc.cast(unsigned, pa.string())


class OverlapAnalysis(_Layer):
    """The four Overlap Analysis lanes of each device (§3.4, §4a)."""

    table = "overlap"
    span = ("start_ns", "end_ns")

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        for device, rows in per_device(batch):
            pid = self.pid(OVERLAP_SORT, device)
            yield from self.device_process("Overlap Analysis", OVERLAP_SORT, device)
            yield from self.processes.threads(pid, range(4), lambda t: OVERLAP_KINDS[t], lambda t: t)
            kind = text(rows.column("kind"))
            yield CompleteEvents(
                name=kind,
                pid=pid,
                tid=pc.index_in(kind, pa.array(OVERLAP_KINDS)),
                ts_ns=local(self.context, rows.column("start_ns")),
                dur_ns=duration(rows),
            )


class StepTrace(_Layer):
    """Model iterations and 60000/60001 steps on the Step Trace threads of Ascend Hardware (§3.6)."""

    table = "steps"
    span = ("start_ns", "end_ns")

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        iterations = batch.filter(pc.is_in(text(batch.column("kind")), pa.array(["model", "step"])))
        for device, rows in per_device(iterations) if iterations.num_rows else ():
            yield from self._device(device, rows)

    def _device(self, device: int, rows: pa.RecordBatch) -> Iterator[Events]:
        pid = self.pid(HARDWARE_SORT, device)
        yield from self.device_process("Ascend Hardware", HARDWARE_SORT, device)
        tids = pc.add(rows.column("model_id"), STEP_TRACE_TID)
        yield from self.processes.threads(
            pid,
            pc.unique(tids).to_pylist(),
            lambda t: f"Step Trace(Model ID:{t - STEP_TRACE_TID})",
            lambda t: t,
        )
        iteration = text(rows.column("iteration_id"))
        yield CompleteEvents(
            name=pc.binary_join_element_wise("Iteration ", iteration, ""),
            pid=pid,
            tid=tids,
            ts_ns=local(self.context, rows.column("start_ns")),
            dur_ns=duration(rows),
            cat="Iteration Time",
            args={
                "Iteration ID": rows.column("iteration_id"),
                "FP Start": self._stamp(rows, "fp_ns"),
                "BP End": self._stamp(rows, "bp_ns"),
                "Iteration End": self._stamp(rows, "end_ns"),
                "Iteration Time(us)": self._span_us(rows, "start_ns", "end_ns"),
            },
        )
        both = rows.filter(pc.and_(pc.is_valid(rows.column("fp_ns")), pc.is_valid(rows.column("bp_ns"))))
        if both.num_rows:
            both_tids = pc.add(both.column("model_id"), STEP_TRACE_TID)
            both_iter = text(both.column("iteration_id"))
            yield CompleteEvents(
                name=pc.binary_join_element_wise("FP_BP Time ", both_iter, ""),
                pid=pid,
                tid=both_tids,
                ts_ns=local(self.context, both.column("fp_ns")),
                dur_ns=duration(both, "fp_ns", "bp_ns"),
                cat="FP_BP Time",
                args={
                    "Iteration ID": both.column("iteration_id"),
                    "FP Start": self._stamp(both, "fp_ns"),
                    "BP End": self._stamp(both, "bp_ns"),
                    "FP_BP Time(us)": self._span_us(both, "fp_ns", "bp_ns"),
                },
            )
            yield CompleteEvents(
                name=pc.binary_join_element_wise("Iteration Refresh ", both_iter, ""),
                pid=pid,
                tid=both_tids,
                ts_ns=local(self.context, both.column("bp_ns")),
                dur_ns=duration(both, "bp_ns", "end_ns"),
                cat="Iteration Refresh",
                args={
                    "Iteration ID": both.column("iteration_id"),
                    "BP End": self._stamp(both, "bp_ns"),
                    "Iteration End": self._stamp(both, "end_ns"),
                    "Iteration Refresh(us)": self._span_us(both, "bp_ns", "end_ns"),
                },
            )
            yield from self._data_aug(pid, both, both_tids, both_iter)
        yield from self._reduces(pid, rows)

    def _data_aug(
        self, pid: int, rows: pa.RecordBatch, tids: pa.Array, iteration: pa.Array
    ) -> Iterator[Events]:
        """The ``Data_aug Bound`` flow of each iteration with FP and BP (``make_data_aug_dict0/1``): a ``t``
        at its FP start named after the previous iteration, an ``s`` halfway through its refresh (BP end to
        iteration end; msprof's C++ puts it at BP end + Data_aug Bound / 2, §3.6) carrying the bound."""
        flow = pc.binary_join_element_wise(f"Data_aug Bound {pid}_", text(tids), "")
        previous = text(pc.subtract(rows.column("iteration_id"), 1))
        yield FlowEvents(
            phase="t",
            name=pc.binary_join_element_wise("Data_aug Bound ", previous, ""),
            pid=pid,
            tid=tids,
            ts_ns=local(self.context, rows.column("fp_ns")),
            cat="Data_aug Bound",
            id=flow,
            args={"Iteration ID": rows.column("iteration_id")},
        )
        refresh = pc.divide(duration(rows, "bp_ns", "end_ns"), 2)
        yield FlowEvents(
            phase="s",
            name=pc.binary_join_element_wise("Data_aug Bound ", iteration, ""),
            pid=pid,
            tid=tids,
            ts_ns=local(self.context, pc.add(rows.column("bp_ns"), refresh)),
            cat="Data_aug Bound",
            id=flow,
            # no earlier iteration: 0 (both paths start the bound at 0 and keep it; Python
            # CreateTrainingTrace.update_data_aug, C++ StepTraceAssembler::GenerateDataAugTrace)
            args={
                "Data_aug Bound(us)": syscnt_us(
                    self.context,
                    rows,
                    syscnt_ticks(self.context, rows, rows.column("data_aug_ns")).fill_null(0),
                )
            },
        )

    def _span_us(self, rows: pa.RecordBatch, start: str, end: str) -> pa.Array:
        """A duration of the args: msprof's ``calculate_duration`` of its ticks (:func:`syscnt_us`)."""
        return syscnt_us(self.context, rows, syscnt_ticks(self.context, rows, duration(rows, start, end)))

    def _stamp(self, rows: pa.RecordBatch, column: str) -> pa.Array:
        """A time of the args: local µs as msprof's Python path writes it (a 3-decimal string, ``N/A``
        when absent; ``StepTraceViewer.calculate_localtime``)."""
        return pc.fill_null(micros_text(local(self.context, rows.column(column))), "N/A")

    def _reduces(self, pid: int, rows: pa.RecordBatch) -> Iterator[Events]:
        """``Reduce_{iteration}_{k}`` with args ``Reduce Start k`` / ``Reduce End k``
        (``StepTraceViewer.format_reduce_json``): one batch per k, as the args' keys name it."""
        starts = rows.column("reduce_start_ns")
        flat_start = pc.list_flatten(starts)
        if not len(flat_start):
            return
        parent = pc.list_parent_indices(starts)
        lengths = pc.list_value_length(starts).fill_null(0).to_numpy()
        position = np.arange(len(flat_start)) - np.repeat(np.r_[0, np.cumsum(lengths)][:-1], lengths)
        reduces = pa.RecordBatch.from_pydict(
            {
                "iteration_id": pc.take(rows.column("iteration_id"), parent),
                "model_id": pc.take(rows.column("model_id"), parent),
                "start_ns": flat_start,
                "end_ns": pc.list_flatten(rows.column("reduce_end_ns")),
                "k": position,
            }
        )
        for k in np.unique(position).tolist():
            batch = reduces.filter(pc.equal(reduces.column("k"), k))
            yield CompleteEvents(
                name=pc.binary_join_element_wise("Reduce_", text(batch.column("iteration_id")), f"_{k}", ""),
                pid=pid,
                tid=pc.add(batch.column("model_id"), STEP_TRACE_TID),
                ts_ns=local(self.context, batch.column("start_ns")),
                dur_ns=duration(batch),
                cat="Reduce",
                args={
                    "Iteration ID": batch.column("iteration_id"),
                    f"Reduce Start {k}": self._stamp(batch, "start_ns"),
                    f"Reduce End {k}": self._stamp(batch, "end_ns"),
                },
            )


def micros_text(ns: pa.Array | pa.ChunkedArray, suffix: str = "") -> pa.Array:
    """ns as µs text with exactly three decimals (``-`` before a negative value; null stays null),
    then ``suffix``."""
    ns = pc.cast(ns, pa.int64())
    size = pc.abs(ns)
    whole = pc.divide(size, 1000)  # integer division
    digits = pc.utf8_lpad(
        pc.cast(pc.subtract(size, pc.multiply(whole, 1000)), pa.string()), width=3, padding="0"
    )
    sign = pc.if_else(pc.less(ns, 0), "-", "")
    return pc.binary_join_element_wise(sign, pc.cast(whole, pa.string()), ".", digits, suffix, "")


class NpuMem(_Layer):
    """APP and Device memory counters of each device (§3.4 NPU MEM), in KB."""

    table = "npu_mem"
    span = ("time_ns", None)

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        for device, rows in per_device(batch):
            pid = self.pid(NPU_MEM_SORT, device)
            yield from self.device_process("NPU MEM", NPU_MEM_SORT, device)
            event = text(rows.column("event"))
            ddr = pc.divide(pc.cast(rows.column("ddr_bytes"), pa.float64()), 1024.0)
            hbm = pc.divide(pc.cast(rows.column("hbm_bytes"), pa.float64()), 1024.0)
            ts = local(self.context, rows.column("time_ns"))
            for series, values in (("DDR", ddr), ("HBM", hbm), ("Memory", pc.add(ddr, hbm))):
                yield CounterEvents(
                    name=pc.binary_join_element_wise(event, series, "/"),
                    pid=pid,
                    tid=0,
                    ts_ns=ts,
                    series={"KB": values},
                )


class AicoreFreqLayer(_Layer):
    """The AI Core frequency of each device: ``C`` events ``AI Core Freq`` with ``{"MHz": freq}``
    (C++ ``AicoreFreqAssembler``; process ``AI Core Freq``, sort index 15). The rows are already the ones
    msprof draws, from its collection start on (:mod:`~profstream.engine.operators.aicore_freq`)."""

    table = "aicore_freq"

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        for device, rows in per_device(batch):
            yield from self.device_process("AI Core Freq", AICORE_FREQ_SORT, device)
            yield CounterEvents(
                name="AI Core Freq",
                pid=self.pid(AICORE_FREQ_SORT, device),
                tid=0,
                ts_ns=local(self.context, rows.column("time_ns")),
                series={"MHz": rows.column("freq_mhz")},
            )


class Hbm(_Layer):
    """HBM read and write bandwidth counters of each device, MB/s (msprof's C++ ``HBMAssembler``).

    Process ``HBM`` (sort index 24, C++ ``LAYER_INFO``); per row a ``C`` event ``HBM {id}/Read`` with
    args ``Read(MB/s)`` (``Write`` likewise), in the table's order; samples before the device's
    collection start are left out (``span``; the C++ ``FilterDataByStartTime``).
    """

    table = "hbm"
    span = ("time_ns", None)

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        for device, rows in per_device(batch):
            pid = self.pid(HBM_SORT, device)
            yield from self.device_process("HBM", HBM_SORT, device)
            direction = pc.if_else(pc.equal(text(rows.column("event")), "read"), "Read", "Write")
            name = pc.binary_join_element_wise(
                "HBM ", pc.cast(rows.column("hbm_id"), pa.string()), "/", direction, ""
            )
            bandwidth = rows.column("bandwidth")
            reads = pc.equal(direction, "Read")
            yield CounterEvents(
                name=name,
                pid=pid,
                tid=0,
                ts_ns=local(self.context, rows.column("time_ns")),
                series={
                    "Read(MB/s)": pc.if_else(reads, bandwidth, None),
                    "Write(MB/s)": pc.if_else(reads, None, bandwidth),
                },
            )


def cann_layers(context: Context, processes: Processes, groups: Groups | None = None) -> list[EventBuilder]:
    """Every layer of msprof's timeline that profstream draws; ``groups`` numbers the Communication
    group threads (shared with :class:`TorchFlows`, whose flows may end on them)."""
    groups = Groups() if groups is None else groups
    return [
        AscendHardware(context, processes),
        Cann(context, processes),
        Communication(context, processes, groups),
        CommunicationTasks(context, processes, groups),
        OverlapAnalysis(context, processes),
        StepTrace(context, processes),
        AicoreFreqLayer(context, processes),
        NpuMem(context, processes),
        Hbm(context, processes),
    ]


# ---------------------------------------------------------------- torch_npu's framework layer

#: flow names by flows.kind (framework_outputs.md §3.1)
FLOW_NAMES = {"async_task_queue": "enqueue_to_dequeue", "fwdbwd": "fwdbwd", "async_npu": "torch_to_npu"}


def torch_op_lines(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A torch op's shapes, dtypes or call stack as torch_npu prints them: a line break after each
    ``;`` (``TorchOpBean``: ``replace(";", ";\\r\\n")``)."""
    return map_text(values, lambda words: pc.replace_substring(words, ";", ";\r\n"))


class TorchOps(_Layer):
    """torch ops, Enqueue and Dequeue on the "Python" process (framework_outputs.md §3.1).

    A thread's sort index is its tid, the dequeue thread's the largest tid of the process plus one
    (``TraceEventManager.create_m_event``: the largest of every torch op, enqueue and dequeue thread);
    threads are described when first seen, so that largest tid is the largest one seen by then, in
    this batch or an earlier one.
    """

    table = "ops"

    def __init__(self, context: Context, processes: Processes) -> None:
        super().__init__(context, processes)
        self._largest_tid: dict[int, int] = {}  # per pid, the largest tid of its rows so far

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        pids = batch.column("pid")
        for pid in pc.unique(pids).to_pylist():
            rows = batch.filter(pc.equal(pids, pid)) if pc.count_distinct(pids).as_py() > 1 else batch
            yield from self.processes.process(pid, "Python", "CPU", 0)
            kind = text(rows.column("kind"))
            tids = pc.unique(rows.column("tid")).to_pylist()
            dequeue = set(pc.unique(rows.filter(pc.equal(kind, "dequeue")).column("tid")).to_pylist())
            largest = self._largest_tid[pid] = max(self._largest_tid.get(pid, max(tids)), *tids)
            sort_index = {t: largest + 1 if t in dequeue else t for t in tids}  # after every thread
            yield from self.processes.threads(pid, tids, lambda t: f"Thread {t}", sort_index.__getitem__)
            for category in pc.unique(kind).to_pylist():
                yield self._ops(rows.filter(pc.equal(kind, category)), category)

    def _ops(self, rows: pa.RecordBatch, category: str) -> CompleteEvents:
        if category == "cpu_op":
            args = {  # torch_npu's TorchOpBean.get_args: the sequence number always, -1 for none
                "Sequence number": pc.fill_null(rows.column("sequence_number"), -1),
                "Fwd thread id": rows.column("fwd_thread_id"),
                "Input Dims": torch_op_lines(rows.column("input_shapes")),
                "Input type": torch_op_lines(rows.column("input_dtypes")),
                "Call stack": torch_op_lines(rows.column("call_stack")),
                "Module Hierarchy": rows.column("module_hierarchy"),
                "flops": rows.column("flops"),
            }
        else:
            args = {"correlation_id": rows.column("correlation_id")}
        return CompleteEvents(
            name=rows.column("name"),
            pid=rows.column("pid"),
            tid=rows.column("tid"),
            ts_ns=local(self.context, rows.column("start_ns")),
            dur_ns=duration(rows),
            cat=category,
            args=args,
        )


class TorchFlows(_Layer):
    """Framework flows: task queue, forward-backward and torch op to NPU kernel (§3.1). A kernel is a
    task, on its stream of Ascend Hardware, or a communication op (no ``dst_tid``), on its group's
    thread of the Communication layer as the shared ``groups`` number them.

    Ids: the ``flows`` table's, except ``torch_to_npu``, whose id is the kernel's start in local
    wall-clock ns, an integer (``TraceEventManager.create_torch_to_npu_flow``: ``end_event.ts``; every
    async_npu flow of the real traces in shared/realdata): kernels starting at the same ns share an
    id, as there. Ascend/pytorch PR #156 (open, not on master) numbers them with a counter instead.
    """

    table = "flows"

    def __init__(self, context: Context, processes: Processes, groups: Groups) -> None:
        super().__init__(context, processes)
        self.groups = groups

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        kind = text(batch.column("kind"))
        for category in pc.unique(kind).to_pylist():
            rows = batch.filter(pc.equal(kind, category))
            name = FLOW_NAMES.get(category, category)
            end = local(self.context, rows.column("dst_ns"))
            flow_id = end if category == "async_npu" else rows.column("flow_id")
            yield FlowEvents(
                "s",
                name,
                rows.column("src_pid"),
                rows.column("src_tid"),
                local(self.context, rows.column("src_ns")),
                category,
                flow_id,
                bound_start=True,  # torch_npu's TraceEventManager puts "bp":"e" on both ends
            )
            device = pc.cast(rows.column("dst_device_id"), pa.int64())
            on_op = pc.and_(pc.is_valid(device), pc.is_null(rows.column("dst_tid")))
            layer = pc.if_else(on_op, COMMUNICATION_SORT, HARDWARE_SORT)
            device_pid = pc.bit_wise_or(
                pc.bit_wise_or(device, pc.shift_left(layer, 5)), self.context.process_id << 10
            )
            yield FlowEvents(
                "f",
                name,
                pc.coalesce(device_pid, rows.column("dst_pid")),
                self._threads(rows, device, on_op),
                end,
                category,
                flow_id,
            )

    def _threads(self, rows: pa.RecordBatch, device: pa.Array, on_op: pa.Array) -> pa.Array:
        """``dst_tid``, or a communication op's group thread."""
        tid = rows.column("dst_tid")
        mask = on_op.to_numpy(zero_copy_only=False)
        if not mask.any():
            return tid
        out = tid.fill_null(0).to_numpy(zero_copy_only=False).copy()
        devices = device.fill_null(-1).to_numpy(zero_copy_only=False)
        for d in np.unique(devices[mask]).tolist():
            mine = mask & (devices == d)
            out[mine] = self.groups.tids(d, rows.column("dst_group").filter(pa.array(mine)))
        return pa.array(out)


#: torch_npu's sort index of the "Python GC" process (``TraceEventManager.GC_SORT_INDEX``)
GC_SORT = 1


class PythonFunctions(_Layer):
    """Python tracer calls: ``X`` events of cat ``python_function`` on the tracer's pid and tid, args
    ``Python id``, ``Python parent id`` and, for ``nn.Module`` calls, ``Python module id``
    (``PythonTraceParser.get_python_trace_data``, ``PyTraceEvent.args``). No metadata of their own:
    their threads are those of the torch ops, which :class:`TorchOps` describes."""

    table = "python_calls"

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        yield CompleteEvents(
            name=batch.column("name"),
            pid=batch.column("pid"),
            tid=batch.column("tid"),
            ts_ns=local(self.context, batch.column("start_ns")),
            dur_ns=duration(batch),
            cat="python_function",
            args={
                "Python id": batch.column("python_id"),
                "Python parent id": batch.column("parent_id"),
                "Python module id": batch.column("module_id"),
            },
        )


class PythonGc(_Layer):
    """Python garbage collections: process "Python GC" (labels CPU, sort index 1) with one thread, the
    profiled pid, named "Python GC" and sorted by its tid; ``X`` events ``GC`` of cat ``GC``, empty args
    (``FwkFileParser.get_gc_record_trace_data``, ``TraceEventManager.create_gc_m_event``). The pid is
    ``(pid << 10) | (1 << 5) | device``, the device of the collection's first ``device_N`` dir, -1 without
    one (``ProfilerPathManager.get_device_id``; Python's ``|`` with -1 then gives -1, kept)."""

    table = "gc"

    def events(self, batch: pa.RecordBatch) -> Iterable[Events]:
        device = min(self.context.devices, default=-1)
        raw = batch.column("pid")
        for process_id in pc.unique(raw).to_pylist():
            rows = batch.filter(pc.equal(raw, process_id)) if len(pc.unique(raw)) > 1 else batch
            pid = format_pid(process_id, GC_SORT, device)
            yield from self.processes.process(pid, "Python GC", "CPU", GC_SORT)
            tids = pc.unique(rows.column("tid")).to_pylist()
            yield from self.processes.threads(pid, tids, lambda _: "Python GC", int)
            yield CompleteEvents(
                name="GC",
                pid=pid,
                tid=rows.column("tid"),
                ts_ns=local(self.context, rows.column("start_ns")),
                dur_ns=duration(rows),
                cat="GC",
                args={},
            )


def framework_layers(context: Context, processes: Processes, groups: Groups) -> list[EventBuilder]:
    """The framework side of torch_npu's trace_view.json (``groups``: as :func:`cann_layers`')."""
    return [
        TorchOps(context, processes),
        TorchFlows(context, processes, groups),
        PythonFunctions(context, processes),
        PythonGc(context, processes),
    ]
