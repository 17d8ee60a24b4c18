"""HCCL communication of one device: ops (``comm@d``) and their tasks (``comm_tasks@d``).

Sources: msprof's C++ ``analysis/csrc/domain/services/association/cann/tree_analyzer.cpp``
(``GetHcclTaskDescs``, ``UpdateHcclBigOpDescs``), ``association/calculator/hccl/hccl_calculator.cpp``,
and the Python ``analysis/mscalculate/cann/cann_analysis_gear.py`` (``add_hccl_task``, ``add_hccl_op``),
``analysis/mscalculate/hccl/hccl_calculator.py``; spec msprof_outputs.md §3.4 Communication, §4a
point 2, §4e communication_statistic; msprof_behaviour.md (op names).

**Host side.** A task_track of this device inside a communication-level API (on its thread,
``start < time <= end``, as :mod:`~profstream.engine.operators.host_join` places records) is an HCCL
task; the node API around it is its op: the op's ``connection_id`` is that node API's, its name the
communication API's item id, its first timestamp the node API's start. The op's hccl_op_info (a
node-level record in the node API; the first one, as the C++ takes) gives relay, retry, data type,
algorithm, count and group name. hccl_info records attach to the communication API that contains
them; msprof then keys them by ``ctxID`` and gives every task of the API every info, which only works
for FFTS+ launches whose device sub-tasks carry those context ids. Choice: each task takes the latest
hccl_info of its communication API at or before its own launch (HCCL reports a task's info just
before launching it); the info names the task (``itemId`` -> ``Notify_Wait``, ``Memcpy``, ...) and gives
plane, notify id, ranks, transport, size, data type, link type and estimated duration. A task is a
master-stream task when its communication API's type name is ``master`` (``isMaster``); task rows
carry that flag (``master``) and the info's ``rdma_type``, which the communication analysis
(:mod:`~profstream.engine.operators.comm_analysis`) needs.

**Device side.** ``tasks@d`` rows of task type ``HCCL`` / ``HCCL_AI_CPU`` join the latest HCCL host
task with their (stream, task, batch) before their start (the same temporal join as the host join).
An op instance is one execution of an op. A task goes to the op's open instance unless that already
has its (stream, task, batch), which opens the next iteration (msprof ``MergeOpDataByThreadId``), so
a static op launched once and run every step gets iterations 1, 2, ... An instance is emitted when
it is settled -- each host task of its op either arrived or was passed by a later-launched task on
its stream (a stream runs its tasks in launch order, so the missing one will not come) --, when a
later iteration starts, when no task came for ``open_limit_ns``, or at the end; an instance emitted
with a task neither arrived nor passed is counted incomplete. (Host tasks that never run on the
device, e.g. a step-trace tag launched inside the HCCL API, make the last op of a run incomplete.)

**Op rows**: ``start_ns``/``end_ns`` = earliest start / latest end of the instance's master-stream
tasks (§4a point 2; an instance without one gets no row and is counted, as the C++ logs and skips it),
``rank_size`` from the last master task's info, ``model_id`` and ``op_type`` from the tasks (the op's
node_basic_info, null without one: msprof then writes no communication_statistic). ``op_name`` is
renamed as msprof prints it, ``{name}_{last 3 characters of the group}_{index}_{iteration}``: the
index counts ops (not iterations) per (group, AicpuKernel or not) from 0 in order of first timestamp,
and an op before ``collection_start_ns`` keeps the current index (Python
``update_op_name_by_group_name``). Later msprof versions count per group alone, over ops sorted by
(start, end), an op counting when it ends after the collection start (Python
``update_op_name_by_group_name(hccl_ops, ...)``, C++ ``UpdateOpNameByGroupName``); the names differ
mainly when a group runs AicpuKernel and other ops, or around the collection start. Not followed.
Task rows carry the renamed op name, the op's group and model id,
and ``bandwidth_gbps``: scanned per (instance, plane) in start order by
:func:`~profstream.engine.kernels.hccl.bandwidth_scan` (``HcclCalculator::UpdateHcclBandwidth``; msprof
groups by the renamed op name, which names one instance; its payload sends are those of ``rdma_type``
``RDMASendPayload``). msprof sorts by the device start (C++) or by (host, device) time (Python)
before scanning; the device start is used here.
``src_rank``/``dst_rank`` are the info's local and remote rank. Enums print through the HCCL tables of
:mod:`profstream.codecs.additional`; a notify id of all ones is null.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs.additional import (
    HCCL_DATA_TYPES,
    HCCL_LINK_TYPES,
    HCCL_RDMA_TYPES,
    HCCL_TRANSPORT_TYPES,
)
from profstream.engine import schema
from profstream.engine.kernels import hccl
from profstream.engine.operators.api import (
    COMMUNICATION_LEVEL,
    I64,
    NODE_LEVEL,
    OPEN_LIMIT_NS,
    Dictionaries,
    append,
    column,
    dense_ids,
    empty,
    enum_names,
    frozen,
    gather,
    latest_before,
    log_unmatched,
    progress_time,
    thawed,
)
from profstream.engine.operators.host_join import API_STATE, ApiTree, launched_on, task_key
from profstream.engine.operators.launches import HCCL_TASK_TYPES
from profstream.engine.operators.settled import SettledLaunches
from profstream.engine.runtime import DONE, START, Emit, Operator, at, pack_state, unpack_state

NO_NOTIFY = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
AICPU_KERNEL = "AicpuKernel"
NA = "N/A"  # what msprof puts where an op has no group name
#: op rows tolerated beyond twice those live at the last pruning (pruning scans every kept host task)
OPS_SLACK = 1024
I64T, U64T, F64T, STR, BOOL = pa.int64(), pa.uint64(), pa.float64(), pa.string(), pa.bool_()

_TRACKS = pa.schema(
    [("thread_id", I64T), ("time_ns", I64T), ("stream_id", I64T), ("task_id", I64T), ("batch_id", I64T)]
)
_INFO_FIELDS = (
    ("item_hash", U64T),
    ("group_name_hash", U64T),
    ("plane_id", I64T),
    ("notify_id", U64T),
    ("local_rank", I64T),
    ("remote_rank", I64T),
    ("rank_size", I64T),
    ("transport_type", I64T),
    ("data_size", I64T),
    ("data_type", I64T),
    ("link_type", I64T),
    ("rdma_type", I64T),
    ("duration_estimated", F64T),
)
_INFOS = pa.schema([("thread_id", I64T), ("time_ns", I64T), ("seq", I64T), *_INFO_FIELDS])
_OP_FIELDS = (
    ("relay", BOOL),
    ("retry", BOOL),
    ("data_type", I64T),
    ("alg_type_hash", U64T),
    ("count", I64T),
    ("group_name_hash", U64T),
)
_OP_INFOS = pa.schema([("thread_id", I64T), ("time_ns", I64T), ("seq", I64T), *_OP_FIELDS])
#: described HCCL host tasks: join key and time, op and info columns (info columns null without one)
_HOST = pa.schema(
    [
        ("key", I64T),
        ("stream_id", I64T),
        ("task_id", I64T),
        ("time_ns", I64T),
        ("op_id", I64T),
        ("master", BOOL),
        ("name", STR),
        ("group_name", STR),
        ("plane_id", I64T),
        ("notify_id", I64T),
        ("src_rank", I64T),
        ("dst_rank", I64T),
        ("rank_size", I64T),
        ("transport_type", STR),
        ("size_bytes", I64T),
        ("data_type", STR),
        ("link_type", STR),
        ("rdma_type", STR),
        ("duration_estimated_us", F64T),
    ]
)
#: one row per op (connection id) with host tasks: what every instance of it shares
_OPS = pa.schema(
    [
        ("op_id", I64T),
        ("first_ns", I64T),  # the node API's start: the op's HostToDevice flow starts there
        ("thread_id", I64T),  # and on its thread
        ("base_name", STR),
        ("group_name", STR),
        ("data_type", STR),
        ("alg_type", STR),
        ("count", I64T),
        ("relay", BOOL),
        ("retry", BOOL),
        ("iterations", I64T),  # instances started so far
        ("index", I64T),  # the renaming index, -1 before the first instance is emitted
    ]
)
#: comm_tasks columns an open task carries as they are (the rest are the op's, or computed when it ends)
_TASK_COLUMNS = [
    f
    for f in schema.TABLES["comm_tasks"]
    if f.name not in ("device_id", "op_name", "model_id", "bandwidth_gbps")
]
#: device tasks dealt to open instances
_OPEN = pa.schema(
    [
        ("op_id", I64T),
        ("iteration", I64T),
        ("key", I64T),
        ("host_ns", I64T),  # the joined host task's launch time
        ("rank_size", I64T),
        ("model_id", I64T),
        ("op_type", STR),
        *[
            pa.field(f.name, STR) if pa.types.is_dictionary(f.type) else pa.field(f.name, f.type)
            for f in _TASK_COLUMNS
        ],
    ]
)
_DEVICE = pa.schema(
    [
        ("stream_id", I64T),
        ("task_id", I64T),
        ("batch_id", I64T),
        ("context_id", I64T),
        ("start_ns", I64T),
        ("end_ns", I64T),
        ("op_type", STR),
        ("model_id", I64T),
    ]
)


#: how long after its newest task ended an op instance still holds the output watermark
HOLD_NS = 1_000_000_000


def payload_jumps(op_names: pa.Array) -> I64:
    """msprof's ``jump`` of each op's RDMA payload groups: 3 for an op named like send or receive (no
    barrier), else 5 (kernels/hccl.py)."""
    lowered = pc.utf8_lower(op_names)
    p2p = pc.or_(pc.match_substring(lowered, "send"), pc.match_substring(lowered, "receive"))
    flags = np.asarray(p2p.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
    return np.where(flags, hccl.JUMP_NO_BARRIER, hccl.JUMP_WITH_BARRIER).astype(np.int64)


def _instances(tasks: pa.Table) -> tuple[I64, I64]:
    """The (op id, iteration) instances of ``tasks``, sorted, and each task's instance index."""
    op_id, iteration = column(tasks, "op_id"), column(tasks, "iteration")
    order = np.lexsort((iteration, op_id))
    op_id, iteration = op_id[order], iteration[order]
    first = np.r_[True, (op_id[1:] != op_id[:-1]) | (iteration[1:] != iteration[:-1])]
    instance = np.empty(len(order), np.int64)
    instance[order] = np.cumsum(first) - 1
    return np.stack([op_id[first], iteration[first]], axis=1), instance


def _last_ends(tasks: pa.Table, instance: I64, count: int) -> I64:
    """The latest task end of each of ``count`` instances."""
    last = np.full(count, np.iinfo(np.int64).min)
    np.maximum.at(last, instance, column(tasks, "end_ns"))
    return last


def _merge_latest(latest: tuple[I64, I64], streams: I64, times: I64) -> tuple[I64, I64]:
    """Per stream, the latest host launch time of a task dealt so far."""
    all_streams = np.r_[latest[0], streams]
    all_times = np.r_[latest[1], times]
    unique, inverse = np.unique(all_streams, return_inverse=True)
    merged = np.full(len(unique), np.iinfo(np.int64).min)
    np.maximum.at(merged, inverse.reshape(-1), all_times)
    return unique.astype(np.int64), merged


class Communication(Operator):
    """HCCL ops and tasks of device ``device_id`` -> ``comm@d`` and ``comm_tasks@d``.

    Inputs: ``api``, ``task_track``, ``hccl_info``, ``hccl_op_info`` (unless ``op_info`` is False) and
    ``tasks@d``. ``collection_start_ns`` (start_info ``clockMonotonicRaw``) limits which ops count for
    the renaming index.
    """

    def __init__(
        self,
        device_id: int,
        dictionaries: Dictionaries,
        *,
        op_info: bool = True,
        collection_start_ns: int | None = None,
        open_limit_ns: int = OPEN_LIMIT_NS,
    ) -> None:
        self.device_id = device_id
        self.names = dictionaries
        self.collection_start_ns = collection_start_ns
        self.open_limit_ns = open_limit_ns
        self._tasks_input = at("tasks", device_id)
        self.inputs = (
            "api",
            "api_progress",
            "task_track",
            "hccl_info",
            *(("hccl_op_info",) if op_info else ()),
            self._tasks_input,
        )
        self.outputs = (at("comm", device_id), at("comm_tasks", device_id))
        self._apis = ApiTree((NODE_LEVEL, COMMUNICATION_LEVEL))
        self._api_done = np.iinfo(np.int64).min
        self._tracks = empty(_TRACKS)
        self._infos = empty(_INFOS)
        self._op_infos = empty(_OP_INFOS)
        self._host = empty(_HOST)  # described host tasks launched since the last eviction's cut
        self._settled_host = SettledLaunches(_HOST)  # older ones: the newest per (stream, task)
        self._ops = empty(_OPS)
        self._ops_kept = 0  # op rows left by the last pruning
        self._device = empty(_DEVICE)
        self._open = empty(_OPEN)
        self._seq = 0
        self._evicted_at = (START, START)
        self._latest: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # stream -> time
        self._indices: dict[str, list[int]] = {}  # "group\0kind" -> [count, last first timestamp]
        self.counts = {
            "unjoined_tasks": 0,
            "incomplete_ops": 0,
            "ops_without_master": 0,
            "tasks_outside_ops": 0,
            "infos_outside_apis": 0,
            "op_infos_outside_apis": 0,
        }

    # -- input ----------------------------------------------------------------------------------

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == "api_progress":
            self._api_done = max(self._api_done, progress_time(batch))
        elif stream == "api":
            self._apis.add(batch)
        elif stream == "task_track":
            rows = batch.select(_TRACKS.names).filter(pa.array(launched_on(batch, self.device_id)))
            self._tracks = append(self._tracks, pa.table(rows))
        elif stream in ("hccl_info", "hccl_op_info"):
            fields = _INFO_FIELDS if stream == "hccl_info" else _OP_FIELDS
            columns = {name: batch.column(name) for name in ("thread_id", "time_ns")}
            columns |= {name: batch.column(name) for name, _ in fields}
            columns["seq"] = pa.array(self._seq + np.arange(batch.num_rows, dtype=np.int64))
            self._seq += batch.num_rows
            if stream == "hccl_info":
                self._infos = append(self._infos, pa.table(columns))
            else:
                self._op_infos = append(self._op_infos, pa.table(columns))
        elif stream == self._tasks_input:
            hccl = pc.is_in(batch.column("task_type"), value_set=pa.array(HCCL_TASK_TYPES))
            wanted = pc.and_(hccl.fill_null(False), pc.is_valid(batch.column("connection_id")))
            self._device = append(self._device, pa.table(batch.select(_DEVICE.names).filter(wanted)))
        else:
            msg = f"Communication has no input {stream!r}"
            raise ValueError(msg)

    # -- progress -------------------------------------------------------------------------------

    def advance(self, watermark: int) -> list[Emit]:
        located = min(watermark, self._api_done)
        self._describe_ready(located, watermark)
        times = column(self._tracks, "time_ns")
        until = min(watermark, int(times.min())) if len(times) else watermark
        self._deal(column(self._device, "start_ns") <= until)
        out = self._emit(watermark)
        if (until, located) != self._evicted_at:
            self._evict(until, located)
        return out

    def output_watermark(self, watermark: int) -> int:
        """The earliest start of a task still held for an op: an op row comes when its instance is
        settled, from the start of its first task, so a long op must hold back what follows it. An
        instance none of whose tasks ended in the last ``HOLD_NS``, or a task still waiting for its
        host records that started longer ago, stops holding (one that never settles would otherwise
        hold everything downstream for ``open_limit_ns``)."""
        if watermark == DONE:
            return DONE
        recent = watermark - HOLD_NS
        held = [watermark]
        undealt = column(self._device, "start_ns")
        undealt = undealt[undealt >= recent]
        if len(undealt):
            held.append(int(undealt.min()))
        if self._open.num_rows:
            keys, instance = _instances(self._open)
            newest = _last_ends(self._open, instance, len(keys))
            starts = column(self._open, "start_ns")[newest[instance] >= recent]
            if len(starts):
                held.append(int(starts.min()))
        return min(held)

    def finish(self) -> list[Emit]:
        self._describe_ready(DONE, DONE)
        self._deal(np.ones(self._device.num_rows, np.bool_))
        out = self._emit(DONE)
        log_unmatched("communication", self.counts)
        return out

    def _describe_ready(self, located: int, watermark: int) -> None:
        """Describe the tracks before ``located`` in communication APIs whose node API has ended."""
        times = column(self._tracks, "time_ns")
        candidates = np.flatnonzero(times < located)
        if not len(candidates):
            return
        threads = column(self._tracks, "thread_id")[candidates]
        hccl = self._apis.inner(COMMUNICATION_LEVEL, threads, times[candidates])
        node = np.full(len(candidates), -1, np.int64)  # placed only in a communication API: few are
        inside = np.flatnonzero(hccl >= 0)
        node[inside] = self._apis.inner(NODE_LEVEL, threads[inside], times[candidates][inside])
        ends = self._apis.col("end_ns")
        done = np.maximum(gather(ends, hccl), gather(ends, node)) < watermark
        resolved = (hccl < 0) | done
        self.counts["tasks_outside_ops"] += int(((hccl >= 0) & (node < 0) & resolved).sum())
        use = resolved & (hccl >= 0) & (node >= 0)
        if use.any():
            tracks = self._tracks.take(pa.array(candidates[use]))
            self._describe(tracks, hccl[use], node[use])
        keep = np.ones(self._tracks.num_rows, np.bool_)
        keep[candidates[resolved]] = False
        self._tracks = self._tracks.filter(pa.array(keep))

    def _describe(self, tracks: pa.Table, hccl: I64, node: I64) -> None:
        apis = self._apis
        times = column(tracks, "time_ns")
        info = self._record(self._infos, hccl, times + 1, COMMUNICATION_LEVEL)  # at or before the track
        infos = self._infos.take(pa.array(info, mask=info < 0))
        have = info >= 0
        notify_ids = infos.column("notify_id").combine_chunks()
        notify_valid = pc.and_(pc.is_valid(notify_ids), pc.not_equal(notify_ids, pa.scalar(NO_NOTIFY, U64T)))
        item_ids = infos.column("item_hash").combine_chunks()

        def enum(name: str, table: dict[int, str]) -> pa.Array:
            codes = infos.column(name).combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)
            return pc.if_else(pa.array(have), enum_names(codes, table), pa.scalar(None, STR))

        structs = apis.rows.column("struct_type").combine_chunks().take(pa.array(hccl))
        op_id = apis.col("connection_id")[node]
        host = {
            "key": pa.array(
                task_key(column(tracks, "stream_id"), column(tracks, "task_id"), column(tracks, "batch_id"))
            ),
            "stream_id": tracks.column("stream_id"),
            "task_id": tracks.column("task_id"),
            "time_ns": tracks.column("time_ns"),
            "op_id": pa.array(op_id),
            "master": pc.equal(structs, "master").fill_null(False),
            "name": self.names.names(item_ids),
            "group_name": self.names.names(infos.column("group_name_hash").combine_chunks()),
            "plane_id": infos.column("plane_id"),
            "notify_id": pc.if_else(notify_valid, notify_ids.cast(I64T, safe=False), pa.scalar(None, I64T)),
            "src_rank": infos.column("local_rank"),
            "dst_rank": infos.column("remote_rank"),
            "rank_size": infos.column("rank_size"),
            "transport_type": enum("transport_type", HCCL_TRANSPORT_TYPES),
            "size_bytes": infos.column("data_size"),
            "data_type": enum("data_type", HCCL_DATA_TYPES),
            "link_type": enum("link_type", HCCL_LINK_TYPES),
            "rdma_type": enum("rdma_type", HCCL_RDMA_TYPES),
            "duration_estimated_us": infos.column("duration_estimated"),
        }
        described = pa.table(host).select(_HOST.names).cast(_HOST)
        self._host = append(self._host, described)
        self._add_ops(described, node)

    def _record(self, records: pa.Table, api: I64, before: I64, level: int) -> I64:
        """Row of ``records`` in the same ``level`` API as each query, latest strictly before ``before``."""
        placed = self._apis.inner(level, column(records, "thread_id"), column(records, "time_ns"))
        order = np.lexsort((column(records, "seq"), column(records, "time_ns")))
        order = order[placed[order] >= 0]
        found = latest_before(placed[order], column(records, "time_ns")[order], api, before)
        return np.where(found >= 0, gather(order, found), -1)

    def _add_ops(self, described: pa.Table, node: I64) -> None:
        """Create the op rows of ops seen for the first time."""
        ids, first = np.unique(column(described, "op_id"), return_index=True)
        known = column(self._ops, "op_id")  # sorted
        at = np.searchsorted(known, ids)
        new = (at == len(known)) | (gather(known, np.minimum(at, len(known) - 1)) != ids)
        if not new.any():
            return
        node_rows = node[first[new]]
        apis = self._apis
        op_info = self._first_op_info(node_rows)
        infos = self._op_infos.take(pa.array(op_info, mask=op_info < 0))
        group = pc.coalesce(
            self.names.names(infos.column("group_name_hash").combine_chunks()),
            described.column("group_name").combine_chunks().take(pa.array(first[new])),
        )
        codes = infos.column("data_type").combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)
        rows = pa.table(
            {
                "op_id": pa.array(ids[new]),
                "first_ns": pa.array(apis.col("start_ns")[node_rows]),
                "thread_id": pa.array(apis.col("thread_id")[node_rows]),
                "base_name": self._op_names(node_rows),
                "group_name": group,
                "data_type": pc.if_else(
                    pa.array(op_info >= 0), enum_names(codes, HCCL_DATA_TYPES), pa.scalar(None, STR)
                ),
                "alg_type": self.names.names(infos.column("alg_type_hash").combine_chunks()),
                "count": infos.column("count"),
                "relay": infos.column("relay"),
                "retry": infos.column("retry"),
                "iterations": pa.array(np.zeros(int(new.sum()), np.int64)),
                "index": pa.array(np.full(int(new.sum()), -1, np.int64)),
            }
        ).cast(_OPS)
        self._ops = append(self._ops, rows)
        if len(known) and known[-1] > ids[new][0]:  # connection ids mostly grow: sort only when not
            self._ops = self._ops.sort_by("op_id")

    def _first_op_info(self, node_rows: I64) -> I64:
        """The first hccl_op_info record (by time) inside each node API row, or -1."""
        placed = self._apis.inner(
            NODE_LEVEL, column(self._op_infos, "thread_id"), column(self._op_infos, "time_ns")
        )
        order = np.lexsort((column(self._op_infos, "seq"), column(self._op_infos, "time_ns")))[::-1]
        order = order[placed[order] >= 0]
        first = np.full(len(self._apis), -1, np.int64)
        np.maximum.at(first, placed[order], np.arange(len(order)))  # the latest position = earliest row
        return np.where(first[node_rows] >= 0, gather(order, first[node_rows]), -1)

    def _op_names(self, node_rows: I64) -> pa.Array:
        """The op's name: the item id of the communication API inside its node API."""
        apis = self._apis
        inside = apis.inner(
            COMMUNICATION_LEVEL,
            apis.col("thread_id")[node_rows],
            apis.col("start_ns")[node_rows] + 1,
        )
        item = np.where(inside >= 0, gather(apis.col("item_id", np.uint64), inside), 0)
        return self.names.names(
            pa.array(np.where(inside >= 0, item, apis.col("item_id", np.uint64)[node_rows]))
        )

    def _deal(self, ready: npt.NDArray[np.bool_]) -> None:
        """Join ready device tasks to host tasks and deal them to op instances in start order."""
        if not ready.any():
            return
        tasks = self._device.filter(pa.array(ready))
        self._device = self._device.filter(pa.array(~ready))
        tasks = tasks.take(pa.array(np.argsort(column(tasks, "start_ns"), kind="stable")))
        keys = task_key(column(tasks, "stream_id"), column(tasks, "task_id"), column(tasks, "batch_id"))
        found = latest_before(
            column(self._host, "key"), column(self._host, "time_ns"), keys, column(tasks, "start_ns")
        )
        streams = column(tasks, "stream_id")
        host, joined = self._settled_host.join(self._host, found, streams, column(tasks, "task_id"), keys)
        self.counts["unjoined_tasks"] += int((~joined).sum())
        tasks, host = tasks.filter(pa.array(joined)), host.filter(pa.array(joined))
        if not tasks.num_rows:
            return
        op_id = column(host, "op_id")
        keys = column(host, "key")
        iteration = self._iterations(op_id, keys)
        columns = {
            "op_id": pa.array(op_id),
            "iteration": pa.array(iteration),
            "key": pa.array(keys),
            "host_ns": host.column("time_ns"),
            "rank_size": host.column("rank_size"),
            "model_id": tasks.column("model_id"),
            "op_type": tasks.column("op_type"),
        }
        for f in _TASK_COLUMNS:
            source = tasks if f.name in ("start_ns", "end_ns", "stream_id", "task_id", "context_id") else host
            columns[f.name] = source.column(f.name)
        self._open = append(self._open, pa.table(columns))
        self._latest = _merge_latest(self._latest, column(tasks, "stream_id"), column(host, "time_ns"))

    def _iterations(self, op_id: I64, keys: I64) -> I64:
        """Iteration of each dealt task (start order): a task key already in the op's instance opens the next.

        The ``j``-th repeat of a key within this batch goes ``j`` iterations past the op's current one,
        one more if the open instance already has the key (msprof ``MergeOpDataByThreadId``).
        """
        position = np.searchsorted(column(self._ops, "op_id"), op_id)
        started = column(self._ops, "iterations").copy()
        open_op, open_key = column(self._open, "op_id"), column(self._open, "key")
        open_iter = column(self._open, "iteration")
        current = np.zeros(len(started), np.int64)  # the open iteration of each op, 0 when none
        if len(open_op):
            np.maximum.at(current, np.searchsorted(column(self._ops, "op_id"), open_op), open_iter)
        latest = open_iter == current[np.searchsorted(column(self._ops, "op_id"), open_op)]
        both = dense_ids(np.r_[op_id, open_op[latest]], np.r_[keys, open_key[latest]])
        in_open = np.isin(both[: len(op_id)], both[len(op_id) :])
        group = dense_ids(op_id, keys)
        order = np.lexsort((np.arange(len(group)), group))
        first = np.r_[True, group[order][1:] != group[order][:-1]]
        repeat = np.empty(len(group), np.int64)
        repeat[order] = np.arange(len(order)) - np.maximum.accumulate(
            np.where(first, np.arange(len(order)), 0)
        )
        base = np.where(current[position] > 0, current[position], started[position] + 1)
        iteration = base + repeat + in_open
        np.maximum.at(started, position, iteration)
        self._ops = self._ops.set_column(
            self._ops.schema.get_field_index("iterations"), "iterations", pa.array(started)
        )
        return np.asarray(iteration, np.int64)

    def _emit(self, watermark: int) -> list[Emit]:
        """Emit every op instance that is settled, superseded, stale or final.

        Settled: every host task of its op was dealt to it, or a task launched later on the same stream
        was dealt (a stream runs its tasks in launch order, so the missing one will not come).
        Superseded: a later iteration of the op started. Stale: no task for ``open_limit_ns``.
        """
        if not self._open.num_rows:
            return []
        keys, instance = _instances(self._open)
        last_end = _last_ends(self._open, instance, len(keys))
        newest = np.zeros(len(keys), np.int64)
        same_op = np.searchsorted(keys[:, 0], keys[:, 0])  # the first instance of each op
        np.maximum.at(newest, same_op, keys[:, 1])
        superseded = keys[:, 1] < newest[same_op]
        settled = self._settled(keys, instance)
        stale = last_end < watermark - self.open_limit_ns
        done = settled | superseded | stale | (watermark == DONE)
        self.counts["incomplete_ops"] += int((done & ~settled).sum())
        rows = done[instance]
        if not rows.any():
            return []
        finished = self._open.filter(pa.array(rows))
        self._open = self._open.filter(pa.array(~rows))
        return self._rows(finished)

    def _settled(self, instances: I64, row_instance: I64) -> npt.NDArray[np.bool_]:
        """Which (op, iteration) instances can get no more tasks (see :meth:`_emit`)."""
        host = self._host_tasks(np.unique(instances[:, 0]))
        host_op = host["op_id"]
        order = np.argsort(host_op, kind="stable")
        low = np.searchsorted(host_op[order], instances[:, 0], "left")
        high = np.searchsorted(host_op[order], instances[:, 0], "right")
        sizes = high - low
        owner = np.repeat(np.arange(len(instances)), sizes)  # (instance, host task of its op) pairs
        within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        host_row = order[np.repeat(low, sizes) + within]
        host_keys = host["key"][host_row]
        pair = dense_ids(np.r_[owner, row_instance], np.r_[host_keys, column(self._open, "key")])
        dealt = np.isin(pair[: len(owner)], pair[len(owner) :])
        streams, latest = self._latest
        at_stream = np.searchsorted(streams, host["stream_id"][host_row])
        known = (at_stream < len(streams)) & (gather(streams, at_stream) == host["stream_id"][host_row])
        passed = known & (gather(latest, at_stream) > host["time_ns"][host_row])
        missing = np.bincount(owner[~(dealt | passed)], minlength=len(instances))
        return np.asarray(missing == 0, np.bool_)

    def _host_tasks(self, ops: I64) -> dict[str, I64]:
        """Op, key, stream and launch time of the kept host tasks (recent and settled) of ``ops``."""
        store = self._settled_host
        slots = np.flatnonzero(np.isin(store.values("op_id"), ops))
        names = ("op_id", "key", "stream_id", "time_ns")
        return {name: np.r_[column(self._host, name), store.values(name, slots)] for name in names}

    def _rows(self, tasks: pa.Table) -> list[Emit]:
        """Op rows and task rows of finished instances, with msprof's op names."""
        keys, instance = _instances(tasks)
        master = column(tasks, "master", np.bool_)
        start, end = column(tasks, "start_ns"), column(tasks, "end_ns")
        big = np.iinfo(np.int64).max
        first = np.full(len(keys), big)
        last = np.full(len(keys), np.iinfo(np.int64).min)
        np.minimum.at(first, instance[master], start[master])
        np.maximum.at(last, instance[master], end[master])
        has_master = first != big
        self.counts["ops_without_master"] += int((~has_master).sum())
        by_start = np.lexsort((np.arange(len(start)), start))
        rank_row = np.full(len(keys), -1, np.int64)  # the last master task (by start) of each instance
        master_rows = by_start[master[by_start]]
        np.maximum.at(rank_row, instance[master_rows], np.arange(len(master_rows)))
        sample = np.full(len(keys), -1, np.int64)  # any task of the instance, for model id / op type
        np.maximum.at(sample, instance, np.arange(len(instance)))
        ops = self._ops.take(pa.array(np.searchsorted(column(self._ops, "op_id"), keys[:, 0])))
        names = self._rename(ops, keys[:, 1], np.where(has_master, first, start[sample]))
        op_types = tasks.column("op_type").combine_chunks()
        typed = np.full(len(keys), -1, np.int64)
        valid = np.flatnonzero(op_types.is_valid().to_numpy(zero_copy_only=False))
        np.maximum.at(typed, instance[valid], valid)
        emit = np.flatnonzero(has_master)
        order = emit[np.argsort(first[emit], kind="stable")]
        last_master = gather(master_rows, rank_row)
        rank_size = tasks.column("rank_size").combine_chunks().take(pa.array(last_master, mask=rank_row < 0))
        op_rows = schema.conform(
            schema.TABLES["comm"],
            {
                "device_id": pa.array(np.full(len(order), self.device_id, np.int32)),
                "op_name": names.take(pa.array(order)),
                "op_type": op_types.take(pa.array(typed[order], mask=typed[order] < 0)),
                "group_name": ops.column("group_name").take(pa.array(order)),
                "start_ns": pa.array(first[order]),
                "end_ns": pa.array(last[order]),
                "model_id": tasks.column("model_id").take(pa.array(sample[order])),
                "connection_id": pa.array(keys[order, 0]),
                "launch_ns": ops.column("first_ns").take(pa.array(order)),
                "launch_thread_id": ops.column("thread_id").take(pa.array(order)),
                "rank_size": rank_size.take(pa.array(order)),
                "data_type": ops.column("data_type").take(pa.array(order)),
                "alg_type": ops.column("alg_type").take(pa.array(order)),
                "count": ops.column("count").take(pa.array(order)),
                "relay": ops.column("relay").take(pa.array(order)),
                "retry": ops.column("retry").take(pa.array(order)),
            },
        )
        task_order = by_start
        task_columns = {f.name: tasks.column(f.name).take(pa.array(task_order)) for f in _TASK_COLUMNS}
        task_columns["group_name"] = ops.column("group_name").take(pa.array(instance[task_order]))
        task_columns["op_name"] = names.take(pa.array(instance[task_order]))
        task_columns["device_id"] = pa.array(np.full(len(task_order), self.device_id, np.int32))
        task_columns["model_id"] = tasks.column("model_id").take(pa.array(sample[instance[task_order]]))
        task_columns["bandwidth_gbps"] = pa.array(self._bandwidths(tasks, instance, names)[task_order])
        task_rows = schema.conform(schema.TABLES["comm_tasks"], task_columns)
        return [(self.outputs[0], op_rows), (self.outputs[1], task_rows)]

    @staticmethod
    def _bandwidths(tasks: pa.Table, instance: I64, names: pa.Array) -> npt.NDArray[np.float64]:
        """Each task's ``bandwidth(GB/s)``, scanned per (op instance, plane) in start order
        (:func:`~profstream.engine.kernels.hccl.bandwidth_scan`); ``names`` are the instances' op names,
        whose ``send`` / ``receive`` choose the payload groups' length as msprof does."""
        start, end = column(tasks, "start_ns"), column(tasks, "end_ns")
        plane = tasks.column("plane_id").combine_chunks().fill_null(-1).to_numpy(zero_copy_only=False)
        order, offsets = hccl.plane_groups(instance, np.asarray(plane, np.int64), start)
        jumps = payload_jumps(names)
        payload = pc.is_in(tasks.column("rdma_type"), value_set=pa.array([HCCL_RDMA_TYPES[1]]))
        sizes = tasks.column("size_bytes").combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)
        scanned = hccl.bandwidth_scan(
            offsets,
            jumps[instance[order][offsets[:-1]]],
            np.asarray(payload.to_numpy(zero_copy_only=False), np.bool_)[order],
            start[order],
            end[order],
            np.maximum(sizes, 0)[order],
        )
        out = np.empty(len(order), np.float64)
        out[order] = scanned
        return out

    def _rename(self, ops: pa.Table, iteration: I64, start: I64) -> pa.Array:
        """``{name}_{group[-3:]}_{index}_{iteration}``; the index counts ops per (group, kind)."""
        op_ids = column(ops, "op_id")
        base = ops.column("base_name").combine_chunks()
        group = ops.column("group_name").combine_chunks().fill_null(NA)
        first_ns = column(ops, "first_ns")
        # the op rows are sorted by op_id (_add_ops) and hold every op of ``ops``
        position = np.searchsorted(column(self._ops, "op_id"), op_ids)
        stored = column(self._ops, "index").copy()
        # one step per op without an index (its first instance: rows are sorted by op, iteration), in
        # first-timestamp order
        unnamed = np.flatnonzero((stored[position] < 0) & np.r_[True, op_ids[1:] != op_ids[:-1]])
        unnamed = unnamed[np.argsort(first_ns[unnamed], kind="stable")]
        aicpu = pc.match_substring(base, AICPU_KERNEL).to_numpy(zero_copy_only=False)[unnamed]
        counted = (
            np.full(len(unnamed), True)
            if self.collection_start_ns is None
            else (start[unnamed] > self.collection_start_ns)
        )
        steps = zip(
            group.take(pa.array(unnamed, I64T)).to_pylist(),
            aicpu.tolist(),
            first_ns[unnamed].tolist(),
            counted.tolist(),
            strict=True,
        )
        indices, never = [], int(np.iinfo(np.int64).min)
        for name, is_aicpu, first, count_it in steps:
            key = f"{name}\0{'aicpu' if is_aicpu else 'normal'}"
            count, last_first = self._indices.get(key, [-1, never])
            if count_it and first > last_first:
                count, last_first = count + 1, first
                self._indices[key] = [count, last_first]
            indices.append(count)
        stored[position[unnamed]] = indices
        self._ops = self._ops.set_column(self._ops.schema.get_field_index("index"), "index", pa.array(stored))
        texts = [pc.cast(pa.array(values), STR) for values in (stored[position], iteration)]
        return pc.binary_join_element_wise(base, pc.utf8_slice_codeunits(group, -3), *texts, "_")

    def _evict(self, joined_until: int, located: int) -> None:
        """Settle host tasks older than every device task still to join (only the newest of each
        (stream, task) can still be joined, as in the host join), prune op rows, and drop the APIs and
        records no track can need any more."""
        self._evicted_at = (joined_until, located)
        old = column(self._host, "time_ns") < joined_until
        if old.any():
            self._settled_host.add(self._host.filter(pa.array(old)))
            self._host = self._host.filter(pa.array(~old))
        self._prune_ops()
        pending = column(self._tracks, "time_ns")
        cutoff = min(located, int(pending.min())) if len(pending) else located
        self._infos = self._keep(self._infos, COMMUNICATION_LEVEL, cutoff, located, "infos_outside_apis")
        self._op_infos = self._keep(self._op_infos, NODE_LEVEL, cutoff, located, "op_infos_outside_apis")
        self._apis.keep_ending_after(cutoff)

    def _prune_ops(self) -> None:
        """Drop op rows no kept host task or open instance refers to, once they have doubled."""
        if self._ops.num_rows <= 2 * self._ops_kept + OPS_SLACK:
            return
        settled = self._settled_host.values("op_id")
        referred = np.r_[column(self._host, "op_id"), settled, column(self._open, "op_id")]
        self._ops = self._ops.filter(pa.array(np.isin(column(self._ops, "op_id"), referred)))
        self._ops_kept = self._ops.num_rows

    def _keep(self, rows: pa.Table, level: int, cutoff: int, located: int, counter: str) -> pa.Table:
        if not rows.num_rows:
            return rows
        times = column(rows, "time_ns")
        api = self._apis.inner(level, column(rows, "thread_id"), times)
        placed = api >= 0
        orphan = ~placed & (times < located)
        self.counts[counter] += int(orphan.sum())
        keep = (placed & (gather(self._apis.col("end_ns"), api) >= cutoff)) | (~placed & ~orphan)
        return rows.filter(pa.array(keep))

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "apis": frozen(self._apis.rows),
                "tracks": frozen(self._tracks),
                "infos": frozen(self._infos),
                "op_infos": frozen(self._op_infos),
                "host": frozen(self._host),
                "settled": self._settled_host.state(),
                "ops": frozen(self._ops),
                "ops_kept": self._ops_kept,
                "device": frozen(self._device),
                "open": frozen(self._open),
                "api_done": self._api_done,
                "seq": self._seq,
                "evicted_at": list(self._evicted_at),
                "latest": list(self._latest),
                "indices": self._indices,
                "counts": dict(self.counts),
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._apis = ApiTree((NODE_LEVEL, COMMUNICATION_LEVEL), thawed(doc["apis"], API_STATE))
        self._tracks = thawed(doc["tracks"], _TRACKS)
        self._infos = thawed(doc["infos"], _INFOS)
        self._op_infos = thawed(doc["op_infos"], _OP_INFOS)
        self._host = thawed(doc["host"], _HOST)
        self._settled_host = SettledLaunches.restored(_HOST, doc["settled"])
        self._ops = thawed(doc["ops"], _OPS)
        self._ops_kept = int(doc["ops_kept"])
        self._device = thawed(doc["device"], _DEVICE)
        self._open = thawed(doc["open"], _OPEN)
        self._api_done = int(doc["api_done"])
        self._seq = int(doc["seq"])
        self._evicted_at = (int(doc["evicted_at"][0]), int(doc["evicted_at"][1]))
        streams, latest = doc["latest"]
        self._latest = (np.asarray(streams, np.int64), np.asarray(latest, np.int64))
        self._indices = {k: [int(v[0]), int(v[1])] for k, v in doc["indices"].items()}
        self.counts = {k: int(v) for k, v in doc["counts"].items()}
