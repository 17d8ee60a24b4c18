"""torch_npu's ``communication.json`` and ``communication_matrix.json`` from ``comm_ops``/``comm_links``.

The per-op values are msprof's ``--analyze`` communication analysis (msprof_outputs.md §2.10; MSPROF
``analysis/msparser/cluster/communication_parser.py``, ``meta_parser.py`` ``HcclAnalysisTool``,
``common_func/ms_constant/str_constant.py``); the file layout is torch_npu's re-packaging
(framework_outputs.md §3.6; ``torch_npu/profiler/analysis/prof_view/_communication_parser.py``). The
cluster files read the same documents (:mod:`profstream.cluster.comm`), so msprof-analyze on a
torch_npu export and profstream's own cluster analysis agree. The files:

* ``communication.json``: ``{"step<id>": {"p2p": {op: info}, "collective": {op: info}}}``; an op key is
  ``<op name>@<group>``; ``info`` is ``Communication Time Info`` (start µs on the wall clock, times in
  ms, ratios rounded to 4 digits, 0 when undefined) and ``Communication Bandwidth Info`` per transport
  ``RDMA, HCCS, PCIE, SDMA, SIO`` (size MB = 10^6 bytes, time ms, bandwidth GB/s = MB/ms rounded to 4,
  large packet ratio, size distribution ``{size MB: [count, time ms]}``). SDMA adds HCCS, PCIE and SIO
  to the copies of other link types; on-chip (LOCAL) copies count nowhere. Each non-empty group gets a
  ``Total Op Info`` (time fields summed, ratios recomputed; per transport time, size and merged size
  distribution, no bandwidth — torch_npu computes it but does not store it).
* ``communication_matrix.json``: per step and group, per (op type, group, link ``src-dst``), the link
  entries of every op sorted by bandwidth (descending, stable) summarised as ``<type>-top1@<group>``,
  ``-middle@``, ``-bottom1@``, ``-total@`` (sums; bandwidth = size/time), and ``-bottom2@`` / ``-bottom3@``
  when there are that many. The op type is the first match of torch_npu's regex on the lower-cased
  op key, else the text before ``__``.
* Steps: the device's ``framework_steps`` (torch_npu's device step ranges, §4c); with exactly one step
  every op goes to it, otherwise to the first step whose ``[start, end]`` holds the op's start (ops
  outside every step are dropped, counted and logged); without steps one key ``"step"`` holds
  everything. The matrix takes an op into the first step whose communication ops include it, or
  everything into ``"step"`` when no step got any op (torch_npu's quirks, kept).

Integer-or-float: msprof starts every value at the integer 0 and adds floats, so a time with no task
behind it prints ``0`` and one with tasks ``0.0``; the null times of ``comm_ops`` reproduce that.
Sizes and times are summed in integer bytes and ns and divided once, so the last digit of a sum may
differ from msprof's running float sums.

Holding: the device's ``comm_ops``, ``comm_links`` and ``framework_steps`` rows as Arrow tables until
:meth:`close` (steps may arrive after the ops they contain); the files are then built and written a
step at a time, so the Python objects of only one step's part exist at once. A run without steps
is one pseudo-step, built whole.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.sinks._base import Sink, StagedFile

COMMUNICATION, MATRIX = "communication.json", "communication_matrix.json"
#: msprof's ``TRANSIT_TYPE``: the transports of ``Communication Bandwidth Info``, in order
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
#: msprof's ``*_MESSAGE_SIZE_THRESHOLD`` (MB): larger transfers are large packets
LARGE_PACKET_MB: Mapping[str, float] = {"RDMA": 0.5, "HCCS": 32, "PCIE": 32, "SIO": 32}
P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")
OP_TYPE_PATTERN = re.compile(
    r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|alltoall|alltoallv"
    r"|alltoallvc|batchsendrecv"
)
TIME, BANDWIDTH, TOTAL = "Communication Time Info", "Communication Bandwidth Info", "Total Op Info"
START, ELAPSE, TRANSIT, WAIT, SYNC, IDLE = (
    "Start Timestamp(us)",
    "Elapse Time(ms)",
    "Transit Time(ms)",
    "Wait Time(ms)",
    "Synchronization Time(ms)",
    "Idle Time(ms)",
)
WAIT_RATIO, SYNC_RATIO = "Wait Time Ratio", "Synchronization Time Ratio"
SIZE, BW, LARGE, DISTRIBUTION = (
    "Transit Size(MB)",
    "Bandwidth(GB/s)",
    "Large Packet Ratio",
    "Size Distribution",
)
TRANSPORT, OP_NAME = "Transport Type", "Op Name"
_NS_PER_MS, _BYTES_PER_MB = 1e6, 1e6
F64 = npt.NDArray[np.float64]
#: op rows converted to Python at once while the files are written (bounds the objects alive)
FETCH_ROWS = 4096
I64 = npt.NDArray[np.int64]

Number = int | float


#: the columns of comm_ops and comm_links the files read (only these become Python objects)
OP_COLUMNS = ("op_name", "group_name", "start_ns", "end_ns", "transit_ns", "wait_ns", "synchronization_ns")
LINK_COLUMNS = (
    "transport_type",
    "size_bytes",
    "transit_ns",
    "packet_sizes",
    "packet_counts",
    "packet_transit_ns",
    "src_rank",
    "dst_rank",
)


def _rows(table: pa.Table | None) -> list[dict[str, Any]]:
    return [] if table is None else table.to_pylist()


def _fetchable(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """``names`` of ``table`` in one chunk, dictionary columns decoded: what ``_rows`` converts fastest
    (a take from a table of many small batches costs a pass over its chunks)."""
    columns = [table.column(name) for name in names]
    decoded = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in columns]
    return pa.table(decoded, names=list(names)).combine_chunks()


def _ms(ns: int | None) -> Number:
    return 0 if ns is None else ns / _NS_PER_MS


def _round_ratio(part: Number, whole: Number) -> Number:
    """msprof's ratio: rounded to 4 digits, the integer 0 where it divides by zero."""
    return 0 if whole == 0 else round(part / whole, 4)


def total_ratio(part: Number, whole: Number) -> Number:
    """torch_npu's (and msprof-analyze's) ratio of totals: 0 when the divisor is below 1e-15."""
    return 0 if abs(whole) < 1e-15 else round(part / whole, 4)


def bandwidth_transport(transport: str) -> str | None:
    """The ``Communication Bandwidth Info`` key of a ``comm_links.transport_type`` (None: LOCAL)."""
    if transport == "LOCAL":
        return None
    return transport if transport in ("RDMA", "HCCS", "PCIE", "SIO") else "SDMA"


def op_key(row: Mapping[str, Any]) -> str:
    """``<op name>@<group>``, the key of an op in both files."""
    return f"{row['op_name']}@{row['group_name'] if row['group_name'] is not None else 'N/A'}"


# -- per op ------------------------------------------------------------------------------------


def time_info(op: Mapping[str, Any], wall_offset_ns: int = 0) -> dict[str, Number]:
    """An op's ``Communication Time Info`` from its ``comm_ops`` row."""
    elapse = (op["end_ns"] - op["start_ns"]) / _NS_PER_MS
    transit, wait, sync = _ms(op["transit_ns"]), _ms(op["wait_ns"]), _ms(op["synchronization_ns"])
    return {
        START: (op["start_ns"] + wall_offset_ns) / 1000,
        ELAPSE: elapse,
        TRANSIT: transit,
        WAIT: wait,
        SYNC: sync,
        IDLE: elapse - transit - wait,
        WAIT_RATIO: _round_ratio(wait, wait + transit),
        SYNC_RATIO: _round_ratio(sync, sync + transit),
    }


def bandwidth_info(links: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """An op's ``Communication Bandwidth Info`` from its ``comm_links`` rows."""
    info: dict[str, dict[str, Any]] = {
        t: {SIZE: 0, TRANSIT: 0, BW: 0, LARGE: 0, DISTRIBUTION: {}} for t in TRANSPORTS
    }
    for link in links:
        transport = bandwidth_transport(link["transport_type"])
        if transport is None:
            continue
        entry = info[transport]
        entry[SIZE] += link["size_bytes"] / _BYTES_PER_MB
        entry[TRANSIT] += link["transit_ns"] / _NS_PER_MS
        sizes, counts, times = link["packet_sizes"], link["packet_counts"], link["packet_transit_ns"]
        for size, count, ns in zip(sizes, counts, times, strict=True):
            bucket = entry[DISTRIBUTION].setdefault(size / _BYTES_PER_MB, [0, 0])
            bucket[0] += count
            bucket[1] += ns / _NS_PER_MS
    for part in ("HCCS", "PCIE", "SIO"):
        info["SDMA"][SIZE] += info[part][SIZE]
        info["SDMA"][TRANSIT] += info[part][TRANSIT]
    for transport, entry in info.items():
        if entry[TRANSIT] != 0:
            entry[BW] = round(entry[SIZE] / entry[TRANSIT], 4)
        if transport == "SDMA" or not entry[DISTRIBUTION]:
            continue  # msprof computes no large packet ratio for SDMA
        threshold, packets, large = LARGE_PACKET_MB.get(transport, 0), 0, 0
        for size, (count, _) in entry[DISTRIBUTION].items():
            packets += count
            if size > threshold:
                large += count
        if packets:
            entry[LARGE] = round(large / packets, 4)
    return info


def total_op_info(infos: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """torch_npu's ``Total Op Info`` of some ops' infos (one p2p/collective group; msprof-analyze
    totals the ops of a group per rank the same way, then adds each transport's bandwidth)."""
    times: dict[str, Number] = defaultdict(float)
    bandwidth: dict[str, dict[str, Any]] = {}
    for info in infos:
        for key, value in info[TIME].items():
            if key not in (START, WAIT_RATIO, SYNC_RATIO):
                times[key] += value
        for transport, entry in info[BANDWIDTH].items():
            total = bandwidth.setdefault(transport, {TRANSIT: 0, SIZE: 0, DISTRIBUTION: {}})
            total[TRANSIT] += entry[TRANSIT]
            total[SIZE] += entry[SIZE]
            for size, (count, ms) in entry[DISTRIBUTION].items():
                bucket = total[DISTRIBUTION].setdefault(size, [0, 0])
                bucket[0] += count
                bucket[1] += ms
    times[WAIT_RATIO] = total_ratio(times.get(WAIT, 0), times.get(WAIT, 0) + times.get(TRANSIT, 0))
    times[SYNC_RATIO] = total_ratio(times.get(SYNC, 0), times.get(TRANSIT, 0) + times.get(SYNC, 0))
    return {TIME: dict(times), BANDWIDTH: bandwidth}


def _split_p2p(ops: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"p2p": ..., "collective": ...}``; op keys starting with ``total`` are left out."""
    out: dict[str, dict[str, Any]] = {"p2p": {}, "collective": {}}
    for key, value in ops.items():
        lower = key.lower()
        if lower.startswith(P2P_PREFIXES):
            out["p2p"][key] = value
        elif not lower.startswith("total"):
            out["collective"][key] = value
    return out


# -- steps --------------------------------------------------------------------------------------


def _steps(steps: pa.Table | None) -> tuple[list[str], F64, F64]:
    """(key, start, end) of each step in start order; one pseudo-step ``"step"`` when there is none."""
    if steps is None or not steps.num_rows:
        return ["step"], np.zeros(1), np.full(1, np.inf)
    iteration = steps.column("iteration_id")
    rows = steps.append_column("order_id", pc.fill_null(iteration, 0)).sort_by(
        [("start_ns", "ascending"), ("order_id", "ascending")]
    )
    keys = [f"step{i}" if i is not None else "step" for i in rows.column("iteration_id").to_pylist()]
    starts = rows.column("start_ns").to_numpy().astype(np.float64)
    return keys, starts, rows.column("end_ns").to_numpy().astype(np.float64)


def _assign(times: F64, starts: F64, ends: F64) -> I64:
    """The step of each op (torch_npu ``split_comm_op_by_step``), -1 for none: the only step when
    there is one, else the first step (in start order) with ``start <= t <= end``."""
    if len(starts) == 1:
        return np.zeros(len(times), np.int64)
    # the first step whose running max of ends reaches t, if that step has started by t
    first = np.searchsorted(np.maximum.accumulate(ends), times, side="left")
    started = np.searchsorted(starts, times, side="right") - 1
    return np.where(first <= started, first, -1).astype(np.int64)


def _last_of_each(keys: Sequence[str]) -> list[tuple[str, int]]:
    """Each distinct key at its first position with the index of its last occurrence: what a
    Python dict keeps when later entries overwrite earlier ones (torch_npu builds these files as dicts)."""
    last = {key: index for index, key in enumerate(keys)}
    return list(last.items())


# -- the two files ------------------------------------------------------------------------------


class _Index:
    """One device's comm_ops (in start order), comm_links and steps, indexed so that each step's part
    of the files can be built from its own rows: the files are written a step at a time."""

    def __init__(self, ops: pa.Table, links: pa.Table | None, steps: pa.Table | None) -> None:
        self.ops = _fetchable(ops, OP_COLUMNS).sort_by("start_ns")  # stable, as Python's sorted
        keys = _op_keys(self.ops)
        self.keys = pc.unique(keys)  # the distinct op keys in order of first appearance
        self.key_of_op = np.asarray(pc.index_in(keys, value_set=self.keys))
        self.links = _fetchable(links, LINK_COLUMNS) if links is not None else None
        owner = _owner_of_links(links, self.keys)
        self.link_order = np.argsort(owner, kind="stable")  # links of key k in their table order
        self.link_bounds = np.searchsorted(owner[self.link_order], np.arange(len(self.keys) + 1))
        self.step_keys, starts, ends = _steps(steps)
        self.step_of_op = _assign(self.ops.column("start_ns").to_numpy().astype(np.float64), starts, ends)

    def links_by_key(self, keys: I64) -> list[list[dict[str, Any]]]:
        """The comm_links rows of each op key (as dicts)."""
        ranges = [self.link_order[self.link_bounds[k] : self.link_bounds[k + 1]] for k in keys.tolist()]
        if self.links is None or not ranges:
            return [[] for _ in ranges]
        rows = _rows(self.links.take(pa.array(np.concatenate(ranges), pa.int64())))
        bounds = np.cumsum([0, *(len(r) for r in ranges)]).tolist()
        return [rows[start:end] for start, end in itertools.pairwise(bounds)]


def _op_keys(rows: pa.Table) -> pa.Array:
    """``op_key`` of every row, column-wise."""
    name = pc.fill_null(rows.column("op_name").cast(pa.string()), "None")  # as op_key's f-string
    group = pc.fill_null(rows.column("group_name").cast(pa.string()), "N/A")
    return pc.binary_join_element_wise(name, group, "@").combine_chunks()


def _owner_of_links(links: pa.Table | None, keys: pa.Array) -> I64:
    """The op key of each link (``len(keys)`` for a link of no op, which sorts last)."""
    if links is None:
        return np.zeros(0, np.int64)
    owner = pc.index_in(_op_keys(links), value_set=keys)
    return np.asarray(pc.fill_null(owner, len(keys)), np.int64)


def _communication_members(index: _Index, wall_offset_ns: int) -> Iterator[tuple[str, Any]]:
    """The members of ``communication.json`` for one device, a step at a time (module docstring)."""
    dropped = int((index.step_of_op < 0).sum())
    if dropped:
        events.get_logger(component="sink.communication_json").warning(
            events.RECORDS_UNMATCHED, ops_outside_steps=dropped
        )
    order = np.argsort(index.step_of_op, kind="stable")  # each step's ops in start order
    bounds = np.searchsorted(index.step_of_op[order], np.arange(len(index.step_keys) + 1))
    pairs = _last_of_each(index.step_keys)
    members = [order[bounds[step] : bounds[step + 1]] for _, step in pairs]
    op_rows = _fetched(members, lambda rows: _rows(index.ops.take(pa.array(rows, pa.int64()))))
    op_links = _fetched([index.key_of_op[rows] for rows in members], index.links_by_key)
    for (key, _), rows, links_of_rows in zip(pairs, op_rows, op_links, strict=True):
        infos = {
            op_key(op): {TIME: time_info(op, wall_offset_ns), BANDWIDTH: bandwidth_info(links_of_op)}
            for op, links_of_op in zip(rows, links_of_rows, strict=True)
        }
        groups = _split_p2p(infos)
        for group in groups.values():
            if group:
                group[TOTAL] = total_op_info(group.values())
        yield key, groups


def _fetched(groups: Sequence[I64], fetch: Callable[[I64], list[Any]]) -> Iterator[list[Any]]:
    """``fetch(indices)`` of each group, fetched for about FETCH_ROWS indices of many groups at once
    (every fetch has a fixed cost that a step's few ops would not pay back)."""
    start = 0
    while start < len(groups):
        end, size = start + 1, len(groups[start])
        while end < len(groups) and size + len(groups[end]) <= FETCH_ROWS:
            size += len(groups[end])
            end += 1
        fetched = fetch(np.concatenate(groups[start:end]))
        position = 0
        for group in groups[start:end]:
            yield fetched[position : position + len(group)]
            position += len(group)
        start = end


def _link_entries(links: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """msprof's matrix entries of one op: per ``src-dst`` (valid links only), sums and bandwidth."""
    entries: dict[str, dict[str, Any]] = {}
    sums: dict[str, list[int]] = {}
    for link in links:
        if link["src_rank"] is None or link["dst_rank"] is None:
            continue
        key = f"{link['src_rank']}-{link['dst_rank']}"
        total = sums.setdefault(key, [0, 0])
        total[0] += link["size_bytes"]
        total[1] += link["transit_ns"]
        entries[key] = {TRANSPORT: link["transport_type"]}
    for key, (size, ns) in sums.items():
        mb, ms = size / _BYTES_PER_MB, ns / _NS_PER_MS
        entries[key] |= {SIZE: mb, TRANSIT: ms, BW: 0 if ms == 0 else round(mb / ms, 4)}
    return entries


def _op_type(key: str) -> str:
    found = OP_TYPE_PATTERN.search(key.lower())
    return found.group() if found else key.split("__", maxsplit=1)[0]


def _summaries(ops: Mapping[str, Mapping[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """torch_npu's ``get_comm_type`` + ``integrate_matrix_data`` for one p2p/collective group."""
    instances: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for key, link_entries in ops.items():
        kind, group = _op_type(key), key.split("@")[-1]
        for link, entry in link_entries.items():
            instances[kind, group, link].append(entry | {OP_NAME: key.split("@")[0]})
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (kind, group, link), entries in instances.items():
        ranked = sorted(entries, key=lambda e: e[BW], reverse=True)
        size, ms = sum(e[SIZE] for e in ranked), sum(e[TRANSIT] for e in ranked)
        out[f"{kind}-top1@{group}"][link] = ranked[0]
        out[f"{kind}-middle@{group}"][link] = ranked[len(ranked) // 2]
        out[f"{kind}-bottom1@{group}"][link] = ranked[-1]
        out[f"{kind}-total@{group}"][link] = {
            TRANSPORT: ranked[0][TRANSPORT],
            SIZE: size,
            TRANSIT: ms,
            BW: total_ratio(size, ms),
        }
        for depth in (2, 3):
            if len(ranked) >= depth:
                out[f"{kind}-bottom{depth}@{group}"][link] = ranked[-depth]
    return dict(out)


def _matrix_members(index: _Index) -> Iterator[tuple[str, Any]]:
    """The members of ``communication_matrix.json`` for one device, a step at a time (module docstring).

    Each op key goes to the first step (in step order) holding an op of that key, or every key to
    ``"step"`` when no step holds any; a step's keys keep their order of first appearance.
    """
    first_step = np.full(len(index.keys), len(index.step_keys), np.int64)
    assigned = index.step_of_op >= 0
    np.minimum.at(first_step, index.key_of_op[assigned], index.step_of_op[assigned])
    if not assigned.any():
        parts = {"step": np.arange(len(index.keys))}
    else:
        by_step: dict[str, list[int]] = {}
        for key, first in enumerate(first_step.tolist()):
            if first < len(index.step_keys):
                by_step.setdefault(index.step_keys[first], []).append(key)
        parts = {name: np.array(keys, np.int64) for name, keys in by_step.items()}
    groups = list(parts.values())
    names = _fetched(groups, lambda keys: index.keys.take(pa.array(keys, pa.int64())).to_pylist())
    links_of_parts = _fetched(groups, index.links_by_key)
    for part, names_of_step, links_of_step in zip(parts, names, links_of_parts, strict=True):
        matrix = {
            name: _link_entries(of_key) for name, of_key in zip(names_of_step, links_of_step, strict=True)
        }
        yield part, {group: _summaries(data) for group, data in _split_p2p(matrix).items()}


def communication(
    ops: pa.Table, links: pa.Table | None, steps: pa.Table | None = None, *, wall_offset_ns: int = 0
) -> dict[str, Any]:
    """The content of ``communication.json`` for one device, whole (the cluster analysis reads it)."""
    return dict(_communication_members(_Index(ops, links, steps), wall_offset_ns))


def communication_matrix(
    ops: pa.Table, links: pa.Table | None, steps: pa.Table | None = None
) -> dict[str, Any]:
    """The content of ``communication_matrix.json`` for one device, whole."""
    return dict(_matrix_members(_Index(ops, links, steps)))


def _write_members(staged: StagedFile, members: Iterable[tuple[str, Any]]) -> None:
    """A JSON object written member by member: the bytes ``json.dumps`` gives for the whole dict."""
    staged.write(b"{")
    for position, (key, value) in enumerate(members):
        # no container repeats (the members are fresh trees): skipping json's cycle check is faster
        text = json.dumps(value, check_circular=False)
        staged.write(f"{', ' if position else ''}{json.dumps(key)}: {text}".encode())
    staged.write(b"}")


class CommunicationJsonSink(Sink):
    """Writes ``communication.json`` and ``communication_matrix.json`` of one device into ``directory``.

    Feed it with :meth:`write` (``comm_ops``, ``comm_links`` and ``framework_steps`` batches; rows of
    another device than ``device_id`` are ignored when it is given); the files are rendered at
    :meth:`finish` (or :meth:`close`) and appear at :meth:`close`.
    ``wall_offset_ns`` turns the host monotonic ns of the tables into Unix ns for ``Start Timestamp(us)``.
    Nothing is written when no HCCL op was seen, as torch_npu writes nothing without msprof's data.
    """

    TABLES = ("comm_ops", "comm_links", "framework_steps")

    def __init__(
        self, directory: str | Path, *, wall_offset_ns: int = 0, device_id: int | None = None
    ) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.wall_offset_ns = wall_offset_ns
        self.device_id = device_id
        self._batches: dict[str, list[pa.RecordBatch]] = {name: [] for name in self.TABLES}
        self._files: list[tuple[StagedFile, str]] = []  # rendered, with their final names

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Take one batch of ``table`` (one of :attr:`TABLES`)."""
        self._require_open()
        if table not in self._batches:
            msg = f"CommunicationJsonSink reads {self.TABLES}, not {table!r}"
            raise ValueError(msg)
        if self.device_id is not None and batch.num_rows:
            batch = batch.filter(pc.equal(batch.column("device_id"), self.device_id))
        if batch.num_rows:
            self._batches[table].append(batch)

    def _table(self, name: str) -> pa.Table | None:
        batches = self._batches[name]
        return pa.Table.from_batches(batches) if batches else None

    def _finish(self) -> None:
        ops = self._table("comm_ops")
        if ops is None:
            return
        links, steps = self._table("comm_links"), self._table("framework_steps")
        self._batches = {name: [] for name in self.TABLES}
        index = _Index(ops, links, steps)  # both files read it
        del ops, links, steps  # the index holds what it reads: the rest goes before the files are built
        contents = {
            COMMUNICATION: _communication_members(index, self.wall_offset_ns),
            MATRIX: _matrix_members(index),
        }
        for name, members in contents.items():
            staged = StagedFile(self.directory, name)
            self._files.append((staged, name))
            _write_members(staged, members)
            staged.finish()

    def _commit(self) -> list[Path]:
        return [staged.commit(name) for staged, name in self._files]

    def _discard(self) -> None:
        for staged, _ in self._files:
            staged.discard()
        self._batches = {name: [] for name in self.TABLES}
