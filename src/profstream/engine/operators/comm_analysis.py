"""msprof's communication analysis: ``comm@d``, ``comm_tasks@d`` -> ``comm_ops@d``, ``comm_links@d``.

What ``msprof --analyze`` computes per HCCL op (msprof_outputs.md §2.10; framework_outputs.md §3.6;
MSPROF ``analysis/msparser/cluster/communication_parser.py``, ``communication_matrix_parser.py``,
``meta_parser.py``, constants in ``common_func/ms_constant/{str,number}_constant.py``), as rows from
which ``communication.json`` / ``communication_matrix.json`` are pure functions
(:mod:`profstream.sinks.communication_json`):

* ``comm_ops``: one row per op with its time info (:func:`~profstream.engine.kernels.hccl.time_scan`
  over the op's master-stream tasks). Elapse is the op's ``end - start``; idle is
  ``elapse - transit - wait``. A time with no task behind it is null (msprof then prints an integer
  ``0``, a float otherwise).
* ``comm_links``: the op's transfers (:func:`~profstream.engine.kernels.hccl.transfer_scan`, all tasks,
  plane by plane) summed per (src rank, dst rank, transport), with msprof's size distribution
  (distinct transfer sizes, their counts and summed times). ``transport_type`` is msprof's matrix
  transport: ``RDMA`` for an RDMA payload group; for an SDMA copy its link type, ``LOCAL`` for an on-chip
  link, ``HCCS`` for ``HCCS_SW``, the raw link type (upper case) otherwise and ``SDMA`` when none.
  The bandwidth info of ``communication.json`` is a function of it: LOCAL copies are left out,
  HCCS/PCIE/SIO/RDMA are their own transports and anything else counts as SDMA.
  Ranks: a local rank of ``0xffffffff`` (or none) is no valid link (null ``src_rank``, left out of the
  matrix, counted in the bandwidth info); a remote rank of ``0xffffffff`` means the local rank.
  ``large_packets`` counts transfers above msprof's threshold of the transport (RDMA 0.5 MB;
  HCCS, PCIE, SIO 32 MB; 0 otherwise; 1 MB = 10^6 bytes, as msprof divides).

Choices:

* **Time algorithm.** msprof's classic one (sequential sums over the master tasks, idle =
  elapse - transit - wait), which the real torch_npu outputs in realdata/ follow; the newest msprof
  replaced it by an interval partition (one-drop rule) — not done.
* **Master tasks.** The time info reads the tasks whose ``master`` flag is set (msprof's
  ``event.is_master == 1`` in ``op_time_parser``; the flag comes from the type of the HCCL API that
  launched the task, :mod:`~profstream.engine.operators.comm`). msprof's older parsers took the tasks
  of ``plane_id == MAIN_STREAM_THREAD_ID`` (0) instead; the current ``communication_parser.py``
  (both its classic and its interval version) uses ``is_master``, and a plane is no stream, so plane 0
  is not the rule here. A task with a null flag (data imported from an export, which has no such
  column) counts as a master task.
* **RDMA payloads.** From ``rdma_type`` (hccl_info ``rdmaType``, ``RDMASendPayload``); where it is null
  (imported data), an ``RDMASend`` over RDMA is a payload when the next task of its plane is an
  ``RDMASend`` too (the pattern msprof's older ``determine_rdma`` checked: payloads, then
  ``RDMASend``, ``Notify_Wait``).
* **Invalid links.** msprof's matrix skips a task with an invalid link before looking for a payload
  group, so it may start a group at the next payload; here a group with an invalid first payload is
  left out of the matrix as a whole.
* Link order: the order of first transfer, planes in order of first appearance (msprof's dict order).

Streaming: :class:`~profstream.engine.operators.comm.Communication` emits an op row together with the
rows of all its tasks (at least one: an op without a master task gets no row), the op batch first.
An op is analysed once a task of it is held, or once a task batch came after it with none (then it
has no task). A task waits for its op until an op batch comes after it; one that still has none (its
op had no master task) is counted and dropped. The pipeline may advance between the two batches of
one emit (a last stage in the export's writer reads them as separate messages), so an op does not go
out at the first advance after it arrives: that dropped its tasks and left its times null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.kernels import hccl
from profstream.engine.kernels._dispatch import NULL, BoolArray, Int64Array
from profstream.engine.operators._state import ints, nullable
from profstream.engine.operators.api import dense_ids, log_unmatched
from profstream.engine.operators.comm import payload_jumps
from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: msprof's SDMA copy task names (``SDMA_TRANSIT_ITEMS``) and its wait / RDMA send task names
SDMA_COPY_NAMES = ("Memcpy", "Reduce_Inline")
NOTIFY_WAIT, RDMA_SEND = "Notify_Wait", "RDMASend"
#: ``rdma_type`` values of a payload send (codec spelling, msprof spelling)
PAYLOAD_TYPES = ("RDMASendPayload", "RDMA_SEND_PAYLOAD")
#: an absent rank in hccl_info
NO_RANK = 0xFFFF_FFFF
#: msprof's large-packet thresholds in bytes (``*_MESSAGE_SIZE_THRESHOLD`` MB x 10^6)
LARGE_PACKET_BYTES: Mapping[str, int] = {
    "RDMA": 500_000,
    "HCCS": 32_000_000,
    "PCIE": 32_000_000,
    "SIO": 32_000_000,
}
#: link types (upper case, no underscores) -> matrix transport
_LINK_LABELS = {"ONCHIP": "LOCAL", "HCCSSW": "HCCS", "HCCS": "HCCS", "PCIE": "PCIE", "SIO": "SIO"}
_COUNTERS = ("tasks_without_op",)


def _texts(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.string())
    column = batch.column(index)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.cast(pa.string())


def _is(values: pa.Array, wanted: tuple[str, ...]) -> BoolArray:
    """Whether each string is one of ``wanted`` (null: no)."""
    found = pc.is_in(values, value_set=pa.array(wanted, pa.string())).fill_null(False)
    return np.asarray(found.to_numpy(zero_copy_only=False), np.bool_)


def _flags(batch: pa.Table, name: str) -> BoolArray:
    """A bool column as numpy; null (or no such column) is True."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return np.ones(batch.num_rows, np.bool_)
    values = batch.column(index).fill_null(True)
    return np.asarray(values.to_numpy(zero_copy_only=False), np.bool_)


def _upper(values: pa.Array) -> pa.Array:
    """Upper case without underscores: ``OnChip``/``ON_CHIP`` -> ``ONCHIP``, ``PCIe`` -> ``PCIE``."""
    return pc.replace_substring(pc.utf8_upper(values), "_", "")


def _plane_order(op: Int64Array, plane: Int64Array) -> Int64Array:
    """Per task (tasks in time order within each op): the first task of its (op, plane), which orders
    the planes of an op by first appearance, as msprof's dict of planes does."""
    order = np.lexsort((np.arange(op.size), plane, op))
    new = np.r_[True, (op[order][1:] != op[order][:-1]) | (plane[order][1:] != plane[order][:-1])]
    first = np.empty(op.size, np.int64)
    first[order] = order[np.maximum.accumulate(np.where(new, np.arange(op.size), 0))]
    return first


class _Transfers(NamedTuple):
    """One row per transfer: its op, the task naming its link, payload or copy, size and time."""

    op: Int64Array
    tasks: pa.Table
    payload: BoolArray
    size: Int64Array
    time: Int64Array


def _labels(transfers: _Transfers) -> pa.Array:
    """msprof's matrix transport of each transfer (module docstring)."""
    link = _upper(_texts(transfers.tasks, "link_type"))
    known = pa.array(list(_LINK_LABELS), pa.string())
    mapped = pc.take(pa.array(list(_LINK_LABELS.values()), pa.string()), pc.index_in(link, value_set=known))
    label = pc.fill_null(pc.coalesce(mapped, link), "SDMA")
    return pc.if_else(pa.array(transfers.payload, pa.bool_()), "RDMA", label)


def _ranks(transfers: _Transfers) -> tuple[Int64Array, Int64Array]:
    """Link ends: NULL for an invalid link; a remote rank of ``0xffffffff`` is the local rank."""
    src, dst = ints(transfers.tasks.column("src_rank")), ints(transfers.tasks.column("dst_rank"))
    dst = np.where(dst == NO_RANK, src, dst)
    invalid = (src == NO_RANK) | (src < 0) | (dst < 0)  # NULL is negative
    return np.where(invalid, NULL, src), np.where(invalid, NULL, dst)


def _link_rows(ops: pa.Table, transfers: _Transfers) -> pa.RecordBatch:
    """Transfers summed per (op, src, dst, transport), in order of first transfer."""
    label = _labels(transfers)
    src, dst = _ranks(transfers)
    thresholds = pa.array([LARGE_PACKET_BYTES[k] for k in LARGE_PACKET_BYTES], pa.int64())
    at_label = pc.index_in(label, value_set=pa.array(list(LARGE_PACKET_BYTES)))
    threshold = ints(pc.fill_null(pc.take(thresholds, at_label), 0))
    # transfers by link, then size: one run per (link, size), the runs of a link in ascending size
    link = dense_ids(transfers.op, src, dst, ints(label.dictionary_encode().indices))
    order = np.lexsort((transfers.size, link))
    link, size = link[order], transfers.size[order]
    run_starts = np.flatnonzero(np.r_[link.size > 0, (link[1:] != link[:-1]) | (size[1:] != size[:-1])])
    run_link, run_size = link[run_starts], size[run_starts]
    run_counts = np.diff(np.r_[run_starts, link.size])
    run_times = np.add.reduceat(transfers.time[order], run_starts)
    link_runs = np.flatnonzero(np.r_[run_link.size > 0, run_link[1:] != run_link[:-1]])  # first runs
    link_starts = run_starts[link_runs]
    # links in order of first transfer: the transfer order is the row order
    first = np.minimum.reduceat(order, link_starts)
    by_first = np.argsort(first)
    offsets = pa.array(np.r_[link_runs, run_link.size].astype(np.int32))

    def lists(values: Int64Array) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, pa.array(values, pa.int64())).take(pa.array(by_first))

    sizes, counts, times = lists(run_size), lists(run_counts), lists(run_times)
    flat_sizes = ints(pc.list_flatten(sizes))
    flat_counts = ints(pc.list_flatten(counts))
    flat_times = ints(pc.list_flatten(times))
    parent = ints(pc.list_parent_indices(sizes))
    size_sum = np.bincount(parent, flat_sizes * flat_counts, minlength=len(sizes)).astype(np.int64)
    time_sum = np.bincount(parent, flat_times, minlength=len(sizes)).astype(np.int64)
    bandwidth = np.divide(size_sum, time_sum, out=np.zeros(size_sum.size), where=time_sum != 0)
    row = order[link_starts][by_first]  # a transfer of each link
    large = (transfers.size > threshold).astype(np.int64)[order]
    take = pa.array(transfers.op[row])
    return conform(
        TABLES["comm_links"],
        {
            "device_id": ops.column("device_id").take(take),
            "op_name": ops.column("op_name").take(take),
            "group_name": ops.column("group_name").take(take),
            "op_type": ops.column("op_type").take(take),
            "start_ns": ops.column("start_ns").take(take),
            "src_rank": nullable(src[row]),
            "dst_rank": nullable(dst[row]),
            "transport_type": label.take(pa.array(row)),
            "size_bytes": size_sum,
            "transit_ns": time_sum,
            "bandwidth_gbps": bandwidth,
            "packets": np.add.reduceat(run_counts, link_runs)[by_first],
            "large_packets": np.add.reduceat(large, link_starts)[by_first],
            "packet_sizes": sizes,
            "packet_counts": counts,
            "packet_transit_ns": times,
        },
    )


class CommAnalysis(Operator):
    """``comm@d``, ``comm_tasks@d`` -> ``comm_ops@d``, ``comm_links@d`` (see the module docstring)."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._ops_in, self._tasks_in = at("comm", device_id), at("comm_tasks", device_id)
        self.inputs = (self._ops_in, self._tasks_in)
        self.outputs = (at("comm_ops", device_id), at("comm_links", device_id))
        # each held batch with its arrival: its place among every batch pushed
        self._ops: list[tuple[int, pa.RecordBatch]] = []
        self._tasks: list[tuple[int, pa.RecordBatch]] = []
        self._arrivals = 0
        self._counts = dict.fromkeys(_COUNTERS, 0)

    # ------------------------------------------------------------------ operator protocol

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == self._ops_in:
            held = self._ops
        elif stream == self._tasks_in:
            held = self._tasks
        else:
            raise self.unknown_input(stream)
        self._arrivals += 1
        held.append((self._arrivals, batch))

    def advance(self, watermark: int) -> list[Emit]:
        return self._release(final=watermark == DONE)

    def finish(self) -> list[Emit]:
        out = self._release(final=True)
        log_unmatched("comm_analysis", self._counts)
        return out

    # ------------------------------------------------------------------ analysis

    def _release(self, *, final: bool) -> list[Emit]:
        """Analyse the ops whose tasks are in, drop the tasks whose op will not come (module docstring)."""
        if not self._ops and not (final and self._tasks):
            return []  # tasks wait for the op rows emitted with them
        ops, op_arrival = _stacked(self._ops, TABLES["comm"])
        tasks, task_arrival = _stacked(self._tasks, TABLES["comm_tasks"])
        owner = pc.index_in(_texts(tasks, "op_name"), value_set=_texts(ops, "op_name"))
        matched = np.asarray(owner.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        owner_row = ints(owner.fill_null(0))
        has_task = np.zeros(ops.num_rows, np.bool_)
        has_task[owner_row[matched]] = True
        # every matched task goes with its op, which is ready as it has a task
        ready = has_task | (op_arrival < task_arrival.max(initial=0)) | final
        dropped = ~matched & ((task_arrival < op_arrival.max(initial=0)) | final)
        self._counts["tasks_without_op"] += int(dropped.sum())
        self._ops = _kept(ops, op_arrival, ~ready)
        self._tasks = _kept(tasks, task_arrival, ~(matched | dropped))
        if not ready.any():
            return []
        op = (np.cumsum(ready) - 1)[owner_row[matched]]  # each matched task's row among the ready ops
        return self._analyse(ops.filter(pa.array(ready)), tasks.filter(pa.array(matched)), op)

    def _analyse(self, ops: pa.Table, tasks: pa.Table, op: Int64Array) -> list[Emit]:
        """The rows of ``ops`` from ``tasks``, which are all theirs: task ``i`` is op ``op[i]``'s."""
        op_names = _texts(ops, "op_name")
        start, end = ints(tasks.column("start_ns")), ints(tasks.column("end_ns"))
        order = np.lexsort((np.arange(op.size), start, op))  # each op's tasks in time order
        tasks, op, start, end = tasks.take(pa.array(order, pa.int64())), op[order], start[order], end[order]
        names, transport = _texts(tasks, "name"), _upper(_texts(tasks, "transport_type"))
        copy = _is(names, SDMA_COPY_NAMES) & _is(transport, ("SDMA",))
        on_chip = _is(_upper(_texts(tasks, "link_type")), ("ONCHIP",))
        kind = np.select(
            [copy & on_chip, copy, _is(names, (NOTIFY_WAIT,))],
            [hccl.LOCAL_COPY, hccl.SDMA_COPY, hccl.NOTIFY_WAIT],
            hccl.OTHER,
        ).astype(np.int64)
        planes = _plane_order(op, ints(tasks.column("plane_id")))
        payload = self._payloads(tasks, names, transport, op, planes)
        jumps = payload_jumps(op_names)

        master = _flags(tasks, "master")
        offsets = np.searchsorted(op[master], np.arange(ops.num_rows + 1)).astype(np.int64)
        times = hccl.time_scan(offsets, jumps, kind[master], payload[master], start[master], end[master])

        by_plane, offsets = hccl.plane_groups(op, planes, start)  # tasks are in time order within an op
        sizes = ints(tasks.column("size_bytes"))
        first, size, duration = hccl.transfer_scan(
            offsets,
            jumps[op[by_plane][offsets[:-1]]],
            kind[by_plane],
            payload[by_plane],
            start[by_plane],
            end[by_plane],
            np.maximum(sizes, 0)[by_plane],  # an absent size (NULL) transfers nothing
        )
        row = by_plane[first]
        transfers = _Transfers(op[row], tasks.take(pa.array(row, pa.int64())), payload[row], size, duration)
        return [(self.outputs[0], self._op_rows(ops, times)), (self.outputs[1], _link_rows(ops, transfers))]

    @staticmethod
    def _payloads(
        tasks: pa.Table, names: pa.Array, transport: pa.Array, op: Int64Array, planes: Int64Array
    ) -> BoolArray:
        """RDMA payload sends: from ``rdma_type``, by the task pattern where it is null."""
        rdma_type = _texts(tasks, "rdma_type")
        send = _is(names, (RDMA_SEND,)) & _is(transport, ("RDMA",))
        by_plane = np.lexsort((np.arange(op.size), planes, op))
        same = (op[by_plane][1:] == op[by_plane][:-1]) & (planes[by_plane][1:] == planes[by_plane][:-1])
        pattern = np.zeros(op.size, np.bool_)
        pattern[by_plane[:-1]] = send[by_plane[:-1]] & same & send[by_plane[1:]]
        known = np.asarray(rdma_type.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        return np.where(known, _is(rdma_type, PAYLOAD_TYPES), pattern)

    def _op_rows(self, ops: pa.Table, times: Int64Array) -> pa.RecordBatch:
        transit, wait, sync = times[0], times[2], times[4]
        start, end = ints(ops.column("start_ns")), ints(ops.column("end_ns"))
        return conform(
            TABLES["comm_ops"],
            {
                "device_id": ops.column("device_id"),
                "op_name": ops.column("op_name"),
                "group_name": ops.column("group_name"),
                "op_type": ops.column("op_type"),
                "start_ns": start,
                "end_ns": end,
                "transit_ns": pa.array(transit, mask=times[1] == 0),
                "wait_ns": pa.array(wait, mask=times[3] == 0),
                "synchronization_ns": pa.array(sync, mask=times[5] == 0),
                "idle_ns": end - start - transit - wait,
            },
        )

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "ops": [[arrival, batch] for arrival, batch in self._ops],
                "tasks": [[arrival, batch] for arrival, batch in self._tasks],
                "arrivals": self._arrivals,
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._ops = [(int(arrival), _batch(rows)) for arrival, rows in doc["ops"]]
        self._tasks = [(int(arrival), _batch(rows)) for arrival, rows in doc["tasks"]]
        self._arrivals = int(doc["arrivals"])
        self._counts = dict(doc["counts"])


def _stacked(held: list[tuple[int, pa.RecordBatch]], empty: pa.Schema) -> tuple[pa.Table, Int64Array]:
    """Held batches as one table, and each row's arrival (``empty``'s schema when none is held)."""
    if not held:
        return empty.empty_table(), np.zeros(0, np.int64)
    table = pa.Table.from_batches([batch for _, batch in held]).combine_chunks()
    arrival = np.repeat([a for a, _ in held], [batch.num_rows for _, batch in held]).astype(np.int64)
    return table, arrival


def _kept(rows: pa.Table, arrival: Int64Array, keep: BoolArray) -> list[tuple[int, pa.RecordBatch]]:
    """The ``keep`` rows as one held batch: they all came after every batch of the other input, so
    only the latest arrival among them matters from here on."""
    if not keep.any():
        return []
    return [(int(arrival[keep].max()), _batch(rows.filter(pa.array(keep))))]


def _batch(rows: pa.Table) -> pa.RecordBatch:
    return (
        rows.combine_chunks().to_batches()[0]
        if rows.num_rows
        else pa.RecordBatch.from_pylist([], rows.schema)
    )
