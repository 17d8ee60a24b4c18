"""One rank's communication analysis: what torch_npu writes to ``communication.json`` and
``communication_matrix.json`` (framework_outputs.md §3.6), as two small Arrow tables.

From raw data the per-op numbers are msprof's ``--analyze`` communication analysis (MSPROF
``analysis/msparser/cluster/communication_parser.py``, ``communication_matrix_parser.py``,
``meta_parser.py``; constants in ``common_func/ms_constant/str_constant.py``, ``number_constant.py``),
computed from the canonical ``comm`` and ``comm_tasks`` tables:

* ops are bundled by ``op_name@group_name`` (start = earliest, end = latest of the bundle);
* **Communication Time Info**, on the master plane (``plane_id`` 0, MSPROF
  ``MAIN_STREAM_THREAD_ID``), clipped to the op window: transit = union of ``Memcpy`` /
  ``Reduce_Inline`` tasks over SDMA not ``ON_CHIP`` (and UB writes); wait = union of ``Notify_Wait``
  minus transit; synchronization = the wait before the first transit; idle = elapse minus the union
  of transit and wait; ratios rounded to 4 digits, 0 when the divisor is 0. Times in ms.
* **Communication Bandwidth Info** (all planes) per transport of ``RDMA, HCCS, PCIE, SDMA, SIO, UB``:
  an SDMA transit task counts under its link type (``HCCS_SW`` as HCCS; other link types as SDMA);
  ``SDMA`` then adds the HCCS, PCIE and SIO totals; bandwidth GB/s = (MB / 1024) / (ms / 1000)
  rounded to 4; large-packet ratio = share of tasks above the transport's threshold (MB).
* **matrix** links (all planes, tasks with a valid ``src_rank``): ``src-dst`` (``dst`` = ``src`` when
  it is 0xffffffff), transport ``LOCAL`` for ``ON_CHIP`` links; per (op type, group, link) the
  instances are sorted by bandwidth, descending, and kept as ``<type>-top1@``, ``-middle@``
  (index n // 2), ``-bottom1@``, ``-bottom2@``, ``-bottom3@`` and ``-total@`` (torch_npu
  ``_communication_parser.py::integrate_matrix_data``).
* steps (torch_npu): with one framework step every op belongs to it; else the first step whose
  ``[start, end]`` holds the op start; ops outside every step are dropped and counted; without
  framework steps one pseudo-step ``"step"``. ``p2p`` = names starting ``hcom_send``,
  ``hcom_receive``, ``hcom_batchsendrecv`` (case-insensitive), everything else ``collective``.

Not reproduced: RDMA transit needs the task's ``rdma_type`` (``RDMA_SEND_PAYLOAD`` groups), which
the ``comm_tasks`` schema does not carry, so RDMA transit time and bandwidth are 0 from raw data;
already-exported ranks carry msprof's own RDMA figures. Ties in bandwidth keep op start order (torch_npu
keeps the order of msprof's file).

Exported ranks: the ``communication.json`` / ``communication_matrix.json`` that torch_npu wrote
are read as they are (:func:`read_exported`).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.errors import DecodeError

TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO", "UB")
#: large-packet thresholds in MB (MSPROF ``HcclAnalysisTool.MessageSizeThreshold``)
LARGE_PACKET_MB = {"RDMA": 0.5, "HCCS": 32.0, "PCIE": 32.0, "SIO": 32.0, "UB": 1.0}
SDMA_TRANSIT = ("Memcpy", "Reduce_Inline")
UB_TRANSIT = ("Ub_Inline_Write", "Ub_Write_Or_Read")
UB_TYPES = ("UB", "UBoE")
NOTIFY_WAIT = "Notify_Wait"
INVALID_RANK = 0xFFFFFFFF
MASTER_PLANE = 0
BYTES_PER_MB = 1024.0 * 1024.0
NS_PER_MS = 1_000_000.0
P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")
HCCL_PATTERN = re.compile(
    r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|alltoall|alltoallv"
    r"|alltoallvc|batchsendrecv"
)
TIME_INFO = "Communication Time Info"
BANDWIDTH_INFO = "Communication Bandwidth Info"
TOTAL_OP_INFO = "Total Op Info"
TIME_KEYS = (
    "Start Timestamp(us)",
    "Elapse Time(ms)",
    "Transit Time(ms)",
    "Wait Time(ms)",
    "Synchronization Time(ms)",
    "Idle Time(ms)",
    "Wait Time Ratio",
    "Synchronization Time Ratio",
)
SIZE, TIME, BANDWIDTH, LARGE, DISTRIBUTION = (
    "Transit Size(MB)",
    "Transit Time(ms)",
    "Bandwidth(GB/s)",
    "Large Packet Ratio",
    "Size Distribution",
)

#: one row per op of one rank: its communication.json entry (``info``, JSON text)
OPS_SCHEMA = pa.schema(
    [
        ("step", pa.string()),  # "step<id>" or "step"
        ("kind", pa.string()),  # p2p / collective
        ("op", pa.string()),  # op_name@group
        ("group", pa.string()),
        ("start_ns", pa.int64()),
        ("info", pa.string()),
    ]
)
#: one row per (summary op, link) of one rank: its communication_matrix.json entry
MATRIX_SCHEMA = pa.schema(
    [
        ("step", pa.string()),
        ("kind", pa.string()),
        ("op", pa.string()),  # e.g. allreduce-top1@group
        ("group", pa.string()),
        ("src", pa.int64()),  # local ranks of the group
        ("dst", pa.int64()),
        ("transport", pa.string()),
        ("size_mb", pa.float64()),
        ("time_ms", pa.float64()),
        ("bandwidth", pa.float64()),
        ("op_name", pa.string()),  # the instance's name without @group; "" for -total@
    ]
)


@dataclass(frozen=True, slots=True)
class StepWindows:
    """Device step ranges (framework_outputs.md §4c); empty means "no step information"."""

    ids: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()

    @classmethod
    def from_table(cls, steps: pa.Table) -> StepWindows:
        if steps.num_rows == 0:
            return cls()
        steps = steps.sort_by([("start_ns", "ascending")])
        return cls(
            tuple(steps.column("iteration_id").to_pylist()),
            tuple(steps.column("start_ns").to_pylist()),
            tuple(steps.column("end_ns").to_pylist()),
        )

    def assign(self, start_ns: npt.NDArray[np.int64]) -> list[str | None]:
        """The step key of each op start; None when it is outside every step (dropped)."""
        if not self.ids:
            return ["step"] * len(start_ns)
        if len(self.ids) == 1:
            return [f"step{self.ids[0]}"] * len(start_ns)
        keys: list[str | None] = [None] * len(start_ns)
        for step_id, lo, hi in reversed(list(zip(self.ids, self.starts, self.ends, strict=True))):
            inside = np.flatnonzero((start_ns >= lo) & (start_ns <= hi))  # first step wins: go backwards
            for i in inside:
                keys[i] = f"step{step_id}"
        return keys


def kind_of(op: str) -> str:
    """``p2p`` or ``collective`` (torch_npu ``split_communication_p2p_ops``)."""
    return "p2p" if op.lower().startswith(P2P_PREFIXES) else "collective"


def op_type(op: str) -> str:
    """The op type of the matrix summary names: first HCCL_PATTERN hit, else the text before ``__``."""
    match = HCCL_PATTERN.search(op.lower())
    return match.group() if match else op.split("__", maxsplit=1)[0]


def ratio(dividend: float, divisor: float) -> float:
    """msprof-analyze / torch_npu ``compute_ratio``: rounded to 4 digits, 0 when the divisor is ~0."""
    return 0 if abs(divisor) < 1e-15 else round(dividend / divisor, 4)


def bandwidth_gbs(size_mb: float, time_ms: float) -> float:
    """GB/s from MB and ms as msprof computes it (MSPROF ``analyze_bandwidth_info``)."""
    return 0 if time_ms == 0 else round((size_mb / 1024.0) / (time_ms / 1000.0), 4)


# --------------------------------------------------------------------------- raw data


def analyse_raw(
    comm: pa.Table, tasks: pa.Table, steps: StepWindows, wall_offset_ns: int
) -> tuple[pa.Table, pa.Table]:
    """(ops, matrix) of one rank from its canonical ``comm`` and ``comm_tasks`` tables."""
    if comm.num_rows == 0:
        return OPS_SCHEMA.empty_table(), MATRIX_SCHEMA.empty_table()
    bundles = (
        pa.table(
            {
                "key": _op_key(comm),
                "group": _text(comm, "group_name"),
                "s": comm["start_ns"],
                "e": comm["end_ns"],
            }
        )
        .group_by(["key", "group"], use_threads=False)
        .aggregate([("s", "min"), ("e", "max")])
        .sort_by([("s_min", "ascending"), ("key", "ascending")])
    )
    keys = bundles.column("key").to_pylist()
    starts = bundles.column("s_min").to_numpy()
    ends = bundles.column("e_max").to_numpy()
    step_keys = steps.assign(starts)
    index = {k: i for i, k in enumerate(keys)}
    task_cols = _task_columns(tasks, index)
    times = _time_info(task_cols, starts, ends)
    bandwidth = _bandwidth_info(task_cols, len(keys))
    dropped = sum(k is None for k in step_keys)
    if dropped:
        events.get_logger(component="cluster.comm").warning(
            events.RECORDS_UNMATCHED, what="communication ops outside every step", count=dropped
        )
    rows = _Rows(OPS_SCHEMA)
    for i, key in enumerate(keys):
        if step_keys[i] is None:
            continue
        time_info = dict(zip(TIME_KEYS, times[i], strict=True))
        time_info["Start Timestamp(us)"] = (int(starts[i]) + wall_offset_ns) / 1000.0
        info = {TIME_INFO: time_info, BANDWIDTH_INFO: bandwidth[i]}
        rows.add(step_keys[i], kind_of(key), key, key.rsplit("@", 1)[-1], int(starts[i]), json.dumps(info))
    ops = rows.table()
    step_of = dict(zip(keys, step_keys, strict=True))
    return ops, summarise_matrix(_links(task_cols, keys, starts, step_of))


def _text(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = column.cast(pa.string())
    return pc.fill_null(column, "")


def _op_key(table: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(_text(table, "op_name"), _text(table, "group_name"), "@")


@dataclass(frozen=True, slots=True)
class _Tasks:
    """comm_tasks as numpy columns, sorted by (op, plane, start), with each task's op index."""

    op: npt.NDArray[np.int64]
    plane: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    name: list[str]
    transport: list[str]
    link: list[str]
    size: npt.NDArray[np.float64]
    src: npt.NDArray[np.int64]
    dst: npt.NDArray[np.int64]


def _task_columns(tasks: pa.Table, index: Mapping[str, int]) -> _Tasks:
    log = events.get_logger(component="cluster.comm")
    keys = _op_key(tasks).to_pylist() if tasks.num_rows else []
    op = np.array([index.get(k, -1) for k in keys], np.int64)
    if (op < 0).any():
        log.warning(
            events.RECORDS_UNMATCHED, what="communication tasks without their op", count=int((op < 0).sum())
        )
    keep = np.flatnonzero(op >= 0)
    plane = _ints(tasks, "plane_id", 0)[keep]
    start = _ints(tasks, "start_ns", 0)[keep]
    order = np.lexsort((start, plane, op[keep]))
    rows = keep[order]
    text = {
        n: np.array(_text(tasks, n).to_pylist() if tasks.num_rows else [], object)[rows]
        for n in ("name", "transport_type", "link_type")
    }
    return _Tasks(
        op=op[rows],
        plane=_ints(tasks, "plane_id", 0)[rows],
        start=_ints(tasks, "start_ns", 0)[rows],
        end=_ints(tasks, "end_ns", 0)[rows],
        name=list(text["name"]),
        transport=list(text["transport_type"]),
        link=list(text["link_type"]),
        size=_ints(tasks, "size_bytes", 0)[rows].astype(np.float64) / BYTES_PER_MB,
        src=_ints(tasks, "src_rank", -1)[rows],
        dst=_ints(tasks, "dst_rank", -1)[rows],
    )


def _ints(table: pa.Table, name: str, null: int) -> npt.NDArray[np.int64]:
    if table.num_rows == 0:
        return np.zeros(0, np.int64)
    return np.asarray(pc.fill_null(table.column(name), null).to_numpy(), dtype=np.int64)


def _masks(t: _Tasks) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(SDMA transit, UB transit, Notify_Wait) per task (MSPROF ``is_transit_sdma_event`` ...)."""
    name = np.array(t.name, object)
    transport = np.array(t.transport, object)
    link = np.array(t.link, object)
    sdma = np.isin(name, SDMA_TRANSIT) & (transport == "SDMA")
    ub = np.isin(name, UB_TRANSIT) & np.isin(transport, UB_TYPES) & np.isin(link, UB_TYPES)
    return sdma, ub, name == NOTIFY_WAIT


def union_length(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> int:
    """Total length of the union of intervals ``[s, e)`` (touching ones merge; empty ones ignored)."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if s.size == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return int((np.maximum.reduceat(e, first) - s[first]).sum())


def _time_info(t: _Tasks, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> list[list[float]]:
    """The Communication Time Info values of every op, in TIME_KEYS order (start filled in later)."""
    sdma, ub, wait = _masks(t)
    transit = ((sdma & (np.array(t.link, object) != "ON_CHIP")) | ub) & (t.plane == MASTER_PLANE)
    wait &= t.plane == MASTER_PLANE
    bounds = np.searchsorted(t.op, np.arange(len(starts) + 1))
    out = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        s = np.clip(t.start[lo:hi], starts[i], ends[i])
        e = np.clip(t.end[lo:hi], starts[i], ends[i])
        tr, wa = transit[lo:hi], wait[lo:hi]
        transit_ns = union_length(s[tr], e[tr])
        busy_ns = union_length(np.concatenate([s[tr], s[wa]]), np.concatenate([e[tr], e[wa]]))
        wait_ns = busy_ns - transit_ns
        if tr.any():
            first = s[tr][e[tr] > s[tr]].min(initial=ends[i])
            sync_ns = union_length(s[wa], np.minimum(e[wa], first))
        else:
            sync_ns = wait_ns
        elapse = float(ends[i] - starts[i]) / NS_PER_MS
        transit_ms, wait_ms, sync_ms = transit_ns / NS_PER_MS, wait_ns / NS_PER_MS, sync_ns / NS_PER_MS
        out.append(
            [
                0.0,
                elapse,
                transit_ms,
                wait_ms,
                sync_ms,
                elapse - busy_ns / NS_PER_MS,
                ratio(wait_ms, wait_ms + transit_ms),
                ratio(sync_ms, sync_ms + transit_ms),
            ]
        )
    return out


def _bandwidth_type(link: str) -> str:
    """MSPROF ``get_communication_bandwidth_info_type``."""
    if link == "HCCS_SW":
        return "HCCS"
    return link if link in ("PCIE", "HCCS", "SIO") else "SDMA"


def _empty_transport() -> dict[str, Any]:
    return {SIZE: 0, TIME: 0, BANDWIDTH: 0, LARGE: 0, DISTRIBUTION: {}}


def _bandwidth_info(t: _Tasks, n_ops: int) -> list[dict[str, dict[str, Any]]]:
    """The Communication Bandwidth Info of every op (MSPROF ``op_bandwidth_parser``)."""
    infos = [{k: _empty_transport() for k in TRANSPORTS} for _ in range(n_ops)]
    sdma, ub, _ = _masks(t)
    counted = np.flatnonzero((sdma & (np.array(t.link, object) != "ON_CHIP")) | ub)
    duration = (t.end - t.start).astype(np.float64) / NS_PER_MS
    for j in counted:  # transit tasks only: a few per op
        kind = "UB" if ub[j] else _bandwidth_type(t.link[j])
        record = infos[t.op[j]][kind]
        size, dur = float(t.size[j]), float(duration[j])
        record[SIZE] += size
        record[TIME] += dur
        slot = record[DISTRIBUTION].setdefault(size, [0, 0])
        slot[0] += 1
        slot[1] += dur
    for info in infos:
        finish_bandwidth(info)
    return infos


def finish_bandwidth(info: dict[str, dict[str, Any]]) -> None:
    """Bandwidth and large-packet ratio per transport; SDMA adds HCCS, PCIE and SIO (MSPROF)."""
    for kind in TRANSPORTS:
        record = info[kind]
        if kind == "SDMA":
            for part in ("HCCS", "PCIE", "SIO"):
                record[SIZE] += info[part][SIZE]
                record[TIME] += info[part][TIME]
            record[BANDWIDTH] = bandwidth_gbs(record[SIZE], record[TIME])
            continue
        record[BANDWIDTH] = bandwidth_gbs(record[SIZE], record[TIME])
        packets = sum(c for c, _ in record[DISTRIBUTION].values())
        large = sum(c for size, (c, _) in record[DISTRIBUTION].items() if size > LARGE_PACKET_MB.get(kind, 0))
        if packets:
            record[LARGE] = round(large / packets, 4)


@dataclass(frozen=True, slots=True)
class Link:
    """One op instance's transfers on one link (local ranks), summed."""

    step: str
    op: str  # op_name@group
    src: int
    dst: int
    transport: str
    size_mb: float
    time_ms: float
    start_ns: int  # the op's start: the tie-break of equal bandwidths

    @property
    def bandwidth(self) -> float:
        return bandwidth_gbs(self.size_mb, self.time_ms)


def _links(
    t: _Tasks, keys: list[str], starts: npt.NDArray[np.int64], step_of: Mapping[str, str | None]
) -> list[Link]:
    """Per-instance link sums (MSPROF ``CommunicationMatrixParser.parse_ops``)."""
    sdma, ub, _ = _masks(t)
    valid = (t.src >= 0) & (t.src != INVALID_RANK) & (t.dst >= 0)
    duration = (t.end - t.start).astype(np.float64) / NS_PER_MS
    sums: dict[tuple[int, int, int], list[Any]] = {}
    for j in np.flatnonzero(valid & (sdma | ub)):  # transit tasks only
        dst = int(t.src[j]) if t.dst[j] == INVALID_RANK else int(t.dst[j])
        entry = sums.setdefault((int(t.op[j]), int(t.src[j]), dst), ["", 0.0, 0.0])
        entry[0] = "UB" if ub[j] else {"ON_CHIP": "LOCAL", "HCCS_SW": "HCCS"}.get(t.link[j], t.link[j])
        entry[1] += float(t.size[j])
        entry[2] += float(duration[j])
    links = []
    for (op, src, dst), (transport, size, time) in sorted(sums.items()):
        step = step_of[keys[op]]
        if step is not None:
            links.append(Link(step, keys[op], src, dst, transport, size, time, int(starts[op])))
    return links


class _Rows:
    """Columns of a table filled row by row (small tables: a few rows per op)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.columns: list[list[Any]] = [[] for _ in schema.names]

    def add(self, *values: Any) -> None:
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)

    def table(self) -> pa.Table:
        return pa.table(dict(zip(self.schema.names, self.columns, strict=True)), schema=self.schema)


def summarise_matrix(links: Iterable[Link]) -> pa.Table:
    """torch_npu's top1/middle/bottom1-3/total rows per (step, op type, group, link)."""
    instances: dict[tuple[str, str, str, str, int, int], list[Link]] = {}
    for link in links:
        group = link.op.rsplit("@", 1)[-1]
        key = (link.step, kind_of(link.op), op_type(link.op), group, link.src, link.dst)
        instances.setdefault(key, []).append(link)
    rows = _Rows(MATRIX_SCHEMA)
    for (step, kind, type_, group, src, dst), found in sorted(instances.items()):
        ranked = sorted(found, key=lambda x: (-x.bandwidth, x.start_ns))
        picks = [("top1", 0), ("middle", len(ranked) // 2), ("bottom1", -1), ("bottom2", -2), ("bottom3", -3)]
        for label, at in picks[: 3 + min(len(ranked) - 1, 2)]:
            pick = ranked[at]
            name = pick.op.rsplit("@", 1)[0]
            rows.add(step, kind, f"{type_}-{label}@{group}", group, src, dst, pick.transport, pick.size_mb,
                     pick.time_ms, pick.bandwidth, name)  # fmt: skip
        size, time = sum(x.size_mb for x in ranked), sum(x.time_ms for x in ranked)
        rows.add(step, kind, f"{type_}-total@{group}", group, src, dst, ranked[0].transport, size, time,
                 ratio(size, time), "")  # fmt: skip
    return rows.table()


# --------------------------------------------------------------------------- exported data


def read_exported(output_dir: Path) -> tuple[pa.Table, pa.Table] | None:
    """(ops, matrix) of torch_npu's ``communication.json`` / ``communication_matrix.json``, or None."""
    comm_path, matrix_path = output_dir / "communication.json", output_dir / "communication_matrix.json"
    if not comm_path.is_file() and not matrix_path.is_file():
        return None
    ops, matrix = _Rows(OPS_SCHEMA), _Rows(MATRIX_SCHEMA)
    for step, kind, op, info in _entries(comm_path):
        start_us = float(info.get(TIME_INFO, {}).get("Start Timestamp(us)", 0))
        ops.add(step, kind, op, op.rsplit("@", 1)[-1], round(start_us * 1000), json.dumps(info))
    for step, kind, op, links in _entries(matrix_path):
        for link, entry in links.items():
            src, _, dst = link.partition("-")
            size, time = float(entry.get(SIZE, 0)), float(entry.get(TIME, 0))
            matrix.add(step, kind, op, op.rsplit("@", 1)[-1], int(src), int(dst),
                       str(entry.get("Transport Type", "")), size, time, float(entry.get(BANDWIDTH, 0)),
                       str(entry.get("Op Name", "")))  # fmt: skip
    return ops.table(), matrix.table()


def _entries(path: Path) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(step, kind, op, value) of a torch_npu communication file, ``Total Op Info`` left out."""
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_bytes())
        for step, kinds in data.items():
            for kind, op_dict in kinds.items():
                for op, value in op_dict.items():
                    if not op.startswith("Total"):
                        yield step, kind, op, value
    except (ValueError, AttributeError) as err:
        msg = f"expected torch_npu's {path.name} (step -> p2p/collective -> op -> value): {err}"
        raise DecodeError(msg, path=path) from err
