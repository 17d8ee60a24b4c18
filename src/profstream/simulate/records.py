"""From a chunk of the workload to the rows of every record family, in the codecs' column names.

Bytes are never packed here: :func:`encode` hands the columns to the
registered codec's ``encode`` (``profstream.codecs``), so a layout lives in one
place. What this module decides is what a real collection would report, and
when (specs/cann_raw_formats.md §2 and the CANN sources it cites):

- host records carry host counter values (100 MHz), device records device
  ticks (:mod:`profstream.simulate.clock`);
- ``task_track`` (level 5000, type 802 = ``RT_PROFILE_TYPE_TASK_TRACK``) is
  stamped just inside the launch API; the task word holds the flip number in
  its high half for every task, as the runtime's ``GetFlipTaskId`` does; PyTorch
  launches outside a model, so the runtime reports it as aging data;
- ``memcpy_info`` (one per H2D copy API, host to device) carries the time stamp
  and thread of the copy's ``task_track``, the key msprof joins them by
  (``MemcpyInfoDumper``);
- ``node_basic_info`` and ``tensor_info`` are stamped at the end of the node
  launch API (GE's ``ReportTaskDescInfo``); static-shape ops go to ``unaging``
  files, dynamic-shape ones to ``aging`` (msprof's opState rule, §1.3);
- an all-reduce reports a node launch API (with its node_basic_info, GE task
  type HCCL, and tensor_info, as for compute ops), an HCCL API (level 5500, master
  type 0x10001) with ``hccl_op_info`` at its begin + 1 tick, and one
  ``hccl_info`` per task at the task's launch;
- STARS ids (910B): the main compute stream's logs use the 0x1000 packing, the
  communication stream's the 0x2000 packing, the side stream none (§2.0), so
  all three rules occur; ts_track carries plain ids;
- device task logs: every device task has a start and an end record
  (``hwts.data`` on 910A, ACSQ funcType 0/1 in ``stars_soc.data`` on 910B),
  AI CPU and communication tasks included, so the truth's task list is what
  the logs hold (whether a real 910A HWTS logs non-AI-Core tasks is not
  documented; msprof reads whatever pairs it finds);
- device PMU: one record per AI Core / AI Vector / MIX task (``aicore.data``
  on 910A, context PMU funcType 40 in ``ffts_profile.data`` on 910B; block PMU
  records are not simulated), FFTS+ sub-task logs (funcType 34/35) for MIX_AIC
  tasks; rolling counters count per file;
- npu_mem samples (info.json version 1.0 layout: u32 µs since the device's
  corrected host start, §2.11) every 10 ms, APP and DEVICE rows, with
  npu_module_mem rows for four modules; on 910B one lpmFreqConv entry per
  chunk holding the constant AI Core frequency;
- with ``hbm``, HBM samples at the same times (version 1.0 layout, the same
  µs clock as npu_mem): a read and a write count for each of four HBM units.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs import get_codec
from profstream.codecs.framework import BLOCK_FREE, FREE, MALLOC, NPU_DEVICE_TYPE
from profstream.simulate.clock import HOST_TICK_NS, DeviceClock, HostClock
from profstream.simulate.config import ChipProfile
from profstream.simulate.workload import (
    COMM_STREAM,
    GRID_NS,
    HCCL_TASK_NAMES,
    ITEM_HCCL,
    ITEM_MEMCPY,
    ITEM_OP,
    MAIN_STREAM,
    MODEL_ID,
    TASK_KINDS,
    TS_FLIP,
    TS_PROFILER_TRACE_EX,
    TS_TYPE_NAMES,
    Chunk,
    Template,
)

I64 = npt.NDArray[np.int64]
Columns = dict[str, Any]

# report levels and types ([MSP] analysis/csrc/infrastructure/utils/prof_common.h; runtime rtProfileDataType)
RUNTIME, HCCL_LEVEL, NODE, MODEL, ACL = 5000, 5500, 10000, 15000, 20000
TYPE_MEMCPY_INFO, TYPE_TASK_TRACK, TYPE_EXPAND_SPEC = 801, 802, 804
NODE_BASIC, NODE_TENSOR, NODE_LAUNCH, NODE_TASK_MEMORY, NODE_HCCL_OP = 0, 1, 5, 6, 10
MODEL_GRAPH_ID_MAP, MODEL_EXECUTE = 0, 1
ACL_RTS_BASE, ACL_NN_BASE = 0x030000, 0x050000
HCCL_MASTER = 0x010001
# payload sizes written in data_len (sizeof of the packed structs)
LEN_RUNTIME_TRACK, LEN_NODE_BASIC, LEN_TENSOR, LEN_HCCL_OP = 40, 29, 232, 26
LEN_MEMCPY, LEN_MEMORY, LEN_HCCL_INFO, LEN_GRAPH_ID, LEN_EXPAND = 24, 48, 120, 16, 4

GROUP_NAME = "hccl_world_group"
ALGORITHM = "RING-NHR-NONE-NONE"
MODEL_NAME = "torch_npu_eager_graph"
HCCL_DATA_FP16 = 3  # HcclDataType FP16 (hccl_op_info data_type; hccl_info dataType uses 3 = FP16 too)
GE_FORMAT_ND, GE_DT_FLOAT16 = 2, 1
MEMCPY_HOST_TO_DEVICE = 1
#: the H2D copy's bytes: about what a PCIe copy moves in its simulated ~30 us (the real 910B
#: trace_view.json in shared/realdata copies 19267584 bytes host to device in 828 us, 23 GB/s), so
#: its timeline bandwidth is a real one; and the runtime's per-task copy limit, which it stays under
MEMCPY_BYTES, MEMCPY_MAX_BYTES = 640 << 10, 64 << 20
#: stars id packing per stream (flag bit of the raw stream id, §2.0); 0 = plain ids.
STARS_PACKING = {MAIN_STREAM: 0x1000, COMM_STREAM: 0x2000}
#: npu_module_mem modules ([MSP] data_tag.py ModuleName): HCCL, RUNTIME, DEVMM, GE.
MODULES = np.array([3, 7, 22, 45], np.uint32)
SAMPLE_PERIOD_NS = 10_000_000
WEIGHTS_BYTES = 3 << 30  # memory in use before the first profiled step (model weights)


def hash_id(text: str) -> int:
    """A stable nonzero 64-bit id for a string (stands in for MsprofGetHashId)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") or 1


def kernel_name(op_type: str) -> str:
    return f"{op_type}_{hash_id(op_type) % 10**8:08d}_high_performance_1"


@dataclass(frozen=True, slots=True)
class Names:
    """Hash ids of every string the run reports, and the dictionaries that resolve them."""

    op_name: npt.NDArray[np.uint64]
    op_type: npt.NDArray[np.uint64]
    kernel: npt.NDArray[np.uint64]  # per op; 0 for ops without a kernel
    hccl_task: npt.NDArray[np.uint64]
    texts: dict[int, str]
    types: list[tuple[int, int, str]]

    @classmethod
    def of(cls, template: Template) -> Names:
        texts: dict[int, str] = {}

        def ids(values: list[str]) -> npt.NDArray[np.uint64]:
            out = []
            for value in values:
                key = hash_id(value)
                texts[key] = value
                out.append(key)
            return np.array(out, np.uint64)

        kernel = np.zeros(template.n_ops, np.uint64)
        compute = np.flatnonzero(template.op_catalog >= 0)
        kernel[compute] = ids([kernel_name(template.op_type[o]) for o in compute])
        op_name, op_type = ids(list(template.op_name)), ids(list(template.op_type))
        hccl_task = ids(list(HCCL_TASK_NAMES))
        ids([GROUP_NAME, ALGORITHM, MODEL_NAME])
        types = [(RUNTIME, ts, name) for ts, name in TS_TYPE_NAMES.items()]
        types += [
            (RUNTIME, TYPE_MEMCPY_INFO, "memcpy_info"),
            (RUNTIME, TYPE_TASK_TRACK, "task_track"),
            (RUNTIME, TYPE_EXPAND_SPEC, "stream_expand_spec"),
            (HCCL_LEVEL, HCCL_MASTER, "master"),
            (NODE, NODE_BASIC, "node_basic_info"),
            (NODE, NODE_TENSOR, "tensor_info"),
            (NODE, NODE_LAUNCH, "launch"),
            (NODE, NODE_TASK_MEMORY, "task_memory_info"),
            (NODE, NODE_HCCL_OP, "hccl_op_info"),
            (MODEL, MODEL_GRAPH_ID_MAP, "graph_id_map"),
            (MODEL, MODEL_EXECUTE, "ModelExecute"),
            (ACL, ACL_RTS_BASE + 1, "aclrtMemcpyAsync"),
        ]
        types += [(ACL, ACL_NN_BASE + i + 1, kind.acl_api) for i, kind in enumerate(template.catalog)]
        return cls(op_name, op_type, kernel, hccl_task, texts, types)

    def hash_dic(self) -> Columns:
        keys = sorted(self.texts)
        return {
            "hash": np.array(keys, np.uint64),
            "value": pa.array([self.texts[k] for k in keys], pa.string()),
        }

    def type_info_dic(self) -> Columns:
        rows = sorted(self.types)
        return {
            "level": np.array([r[0] for r in rows], np.uint16),
            "type": np.array([r[1] for r in rows], np.uint64),
            "name": pa.array([r[2] for r in rows], pa.string()),
        }


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows of one record family for one stream, with the host ns each row is about."""

    family: str
    columns: Columns
    times: I64

    def __len__(self) -> int:
        return len(self.times)

    def ordered(self) -> Rows:
        """The rows in time order (the order a collector writes them in)."""
        order = np.argsort(self.times, kind="stable")
        if (order == np.arange(len(order))).all():
            return self
        return Rows(self.family, {k: _take(v, order) for k, v in self.columns.items()}, self.times[order])


def _take(values: Any, order: I64) -> Any:
    """Rows ``order`` of a numpy or pyarrow column."""
    return values.take(pa.array(order)) if isinstance(values, pa.Array) else values[order]


def concat(parts: list[Rows]) -> Rows:
    """Rows of one family from several sources, in time order."""
    parts = [p for p in parts if len(p)]
    if len(parts) == 1:
        return parts[0].ordered()
    columns: Columns = {}
    for name in parts[0].columns:
        values = [p.columns[name] for p in parts]
        joined = pa.concat_arrays(values) if isinstance(values[0], pa.Array) else np.concatenate(values)
        columns[name] = joined
    return Rows(parts[0].family, columns, np.concatenate([p.times for p in parts])).ordered()


def encode(rows: Rows) -> bytes:
    """The raw bytes of ``rows``, from the family's codec."""
    return get_codec(rows.family).encode(rows.columns)


@dataclass
class DeviceContext:
    """What the record builders need to know about one device of one rank."""

    device_id: int
    rank_index: int  # index of the device among all devices of the run (HCCL rank)
    world: int
    profile: ChipProfile
    template: Template
    names: Names
    clock: DeviceClock
    host: HostClock
    pid: int
    acl_tid: int
    py_tid: int
    l2_events: tuple[int, ...] = ()  # sample.json's L2 cache events; none: no l2_cache.data
    hbm: bool = False  # write hbm.data samples
    counters: dict[str, int] = field(default_factory=dict)
    next_sample: int = 0  # time of the next npu_mem sample
    ge_totals: tuple[int, int] = (WEIGHTS_BYTES,) * 2  # task_memory_info: allocated, reserved
    pta_totals: tuple[int, int, int] = (WEIGHTS_BYTES,) * 3  # torch.memory_usage: allocated, active, reserved

    def rolling(self, family: str, n: int) -> npt.NDArray[np.uint8]:
        """The 4-bit rolling counter values of the next ``n`` records of ``family``."""
        first = self.counters.get(family, 0)
        self.counters[family] = first + n
        return ((first + np.arange(n)) % 16).astype(np.uint8)


@dataclass(frozen=True, slots=True)
class Slots:
    """Slots ``ix`` of every step of a chunk, flattened step-major."""

    step: I64  # 0-based step of the run
    start: I64
    end: I64
    launch: I64
    task_id: I64
    batch: I64
    stream: I64
    kind: I64
    tag: I64
    op: I64

    @classmethod
    def of(cls, chunk: Chunk, t: Template, ix: I64) -> Slots:
        steps = chunk.steps

        def flat(values: I64) -> I64:
            return np.asarray(values[:, ix].ravel(), np.int64)

        def tiled(values: I64) -> I64:
            return np.tile(values[ix], steps)

        return cls(
            step=np.repeat(chunk.first_step + np.arange(steps), len(ix)),
            start=flat(chunk.slot_start),
            end=flat(chunk.slot_end),
            launch=flat(chunk.slot_launch),
            task_id=flat(chunk.slot_task_id),
            batch=flat(chunk.slot_batch),
            stream=tiled(t.slot_stream),
            kind=tiled(t.slot_kind),
            tag=tiled(t.slot_tag),
            op=tiled(t.item_op[t.slot_item]),
        )


def _kind_attr(kind: I64, name: str) -> I64:
    table = np.array([getattr(k, name) for k in TASK_KINDS], np.int64)
    return table[np.maximum(kind, 0)]


def stars_ids(stream: I64, task: I64) -> tuple[I64, I64]:
    """Raw (stream, task) words of STARS logs for true ids, by the stream's packing (§2.0)."""
    mode = np.select([stream == s for s in STARS_PACKING], list(STARS_PACKING.values()), 0)
    raw_stream = np.where(mode == 0x1000, stream | 0x1000 | (task & 0xE000), stream)
    raw_task = np.where(mode == 0x1000, task & 0x1FFF, task)
    raw_stream = np.where(mode == 0x2000, 0x2000 | (task & 0x0FFF), raw_stream)
    raw_task = np.where(mode == 0x2000, (task & 0xF000) | stream, raw_task)
    return raw_stream, raw_task


def flips(chunk: Chunk, t: Template) -> Slots:
    """The first slot of every new task-id batch: a flip task precedes it on its stream."""
    view = Slots.of(chunk, t, np.arange(t.n_slots))
    first = np.flatnonzero((chunk.slot_task_id == 1) & (chunk.slot_batch > 0))  # step-major, as the view
    return Slots(**{f.name: getattr(view, f.name)[first] for f in fields(Slots)})


# ----------------------------------------------------------------------------- device


def device_rows(chunk: Chunk, ctx: DeviceContext) -> list[Rows]:
    """Device-side rows of one chunk: task logs, PMU, ts_track, memory and frequency samples."""
    t = ctx.template
    tasks = Slots.of(chunk, t, np.flatnonzero(t.slot_kind >= 0))
    pmu_ix = np.flatnonzero([k >= 0 and TASK_KINDS[k].pmu for k in t.slot_kind])
    pmu = Slots.of(chunk, t, pmu_ix)
    cycles = chunk.total_cycle[:, pmu_ix].ravel()
    counts = chunk.pmu[:, pmu_ix, :].reshape(-1, 8)
    rows = [_ts_track(chunk, ctx)]
    if ctx.profile.stars:
        rows += [_stars_soc(tasks, ctx), _ffts_profile(pmu, cycles, counts, ctx)]
    else:
        rows += [_hwts(tasks, ctx), _aicore(pmu, cycles, counts, ctx)]
    if ctx.l2_events:
        rows.append(_l2_cache(pmu, cycles, counts, ctx))
    rows += _samples(chunk, ctx)
    return [r for r in rows if len(r)]


def _with_counter(rows: Rows, ctx: DeviceContext) -> Rows:
    ordered = rows.ordered()
    ordered.columns["cnt"] = ctx.rolling(rows.family, len(ordered))
    return ordered


def _hwts(tasks: Slots, ctx: DeviceContext) -> Rows:
    n = len(tasks.start)
    times = np.concatenate([tasks.start, tasks.end])
    columns = {
        "log_type": np.repeat(np.array([0, 1], np.uint8), n),
        "task_id": np.tile(tasks.task_id, 2),
        "stream_id": np.tile(tasks.stream, 2),
        "syscnt": ctx.clock.to_syscnt(times),
    }
    return _with_counter(Rows("hwts", columns, times), ctx)


def _aicore(pmu: Slots, cycles: I64, counts: I64, ctx: DeviceContext) -> Rows:
    columns: Columns = {"task_id": pmu.task_id, "stream_id": pmu.stream, "total_cycle": cycles}
    columns |= {f"pmu_{i}": counts[:, i] for i in range(8)}
    return _with_counter(Rows("aicore", columns, pmu.end), ctx)


def _stars_soc(tasks: Slots, ctx: DeviceContext) -> Rows:
    tick = ctx.profile.tick_ns
    n = len(tasks.start)
    sqe = _kind_attr(tasks.kind, "sqe_type")
    raw_stream, raw_task = stars_ids(tasks.stream, tasks.task_id)
    mix = np.flatnonzero(_kind_attr(tasks.kind, "ffts_type") == 4)
    sub_start = np.minimum(tasks.start[mix] + tick, tasks.end[mix])
    sub_end = np.maximum(tasks.end[mix] - tick, sub_start)
    m = len(mix)
    times = np.concatenate([tasks.start, tasks.end, sub_start, sub_end])
    zeros = np.zeros(2 * n, np.int64)
    columns = {
        "func_type": np.concatenate([np.zeros(n), np.ones(n), np.full(m, 34), np.full(m, 35)]).astype(
            np.uint8
        ),
        "sqe_type": np.concatenate([sqe, sqe, sqe[mix], sqe[mix]]),
        "stream_raw": np.concatenate([raw_stream, raw_stream, raw_stream[mix], raw_stream[mix]]),
        "task_raw": np.concatenate([raw_task, raw_task, raw_task[mix], raw_task[mix]]),
        "syscnt": ctx.clock.to_syscnt(times),
        "acc_id": np.concatenate([np.tile(sqe, 2), np.zeros(2 * m, np.int64)]),
        "acsq_id": np.concatenate([np.tile(tasks.stream % 128, 2), np.zeros(2 * m, np.int64)]),
        "subtask_type": np.concatenate([zeros, np.full(2 * m, 6)]),
        "subtask_id": np.zeros(2 * n + 2 * m, np.int64),
        "ffts_type": np.concatenate([zeros, np.full(2 * m, 4)]),
        "thread_id": np.zeros(2 * n + 2 * m, np.int64),
    }
    return _with_counter(Rows("stars_soc", columns, times), ctx)


def _ffts_profile(pmu: Slots, cycles: I64, counts: I64, ctx: DeviceContext) -> Rows:
    raw_stream, raw_task = stars_ids(pmu.stream, pmu.task_id)
    columns: Columns = {
        "func_type": np.full(len(pmu.start), 40, np.uint8),
        "stream_raw": raw_stream,
        "task_raw": raw_task,
        "subtask_type": _kind_attr(pmu.kind, "subtask_type"),
        "ffts_type": _kind_attr(pmu.kind, "ffts_type"),
        "total_cycle": cycles,
        "start_syscnt": ctx.clock.to_syscnt(pmu.start),
        "end_syscnt": ctx.clock.to_syscnt(pmu.end),
    }
    columns |= {f"pmu_{i}": counts[:, i] for i in range(8)}
    return _with_counter(Rows("ffts_profile", columns, pmu.end), ctx)


def _l2_cache(pmu: Slots, cycles: I64, counts: I64, ctx: DeviceContext) -> Rows:
    """One L2 cache record per PMU task, in end order: requests from its cycles, hit and victim shares
    from its PMU counts, spread over the events msprof's formula of the chip sums (l2_cache operator)."""
    requests = cycles // 4 + 1
    hits = requests * (counts[:, 0] % 1001) // 1000
    victims = requests * (counts[:, 1] % 301) // 1000
    by_event = {
        0x59: requests, 0x5B: hits, 0x5C: victims,  # 910A: 0x59 requests, 0x5b hits, 0x5c victims
        0xFB: requests - requests // 3, 0xFC: requests // 3,  # 910B: requests 0xfb + 0xfc,
        0x90: hits - hits // 2, 0x91: hits // 2, 0x9C: victims,  # hits 0x90 + 0x91, victims 0x9c
    }  # fmt: skip
    columns: Columns = {"task_type": np.zeros(len(pmu.start), np.int64), "stream_id": pmu.stream}
    columns["task_id"] = pmu.task_id & 0xFFFF
    for i, event in enumerate(ctx.l2_events):
        columns[f"event_{i}"] = by_event.get(event, cycles // 16)
    return Rows("l2_cache", columns, pmu.end).ordered()


def _ts_track(chunk: Chunk, ctx: DeviceContext) -> Rows:
    """Step-trace records (tag 10) of every tag slot and task-flip records (tag 14)."""
    t = ctx.template
    tags = Slots.of(chunk, t, np.flatnonzero(t.slot_tag >= 0))
    flip = flips(chunk, t)
    flip_time = flip.start - ctx.profile.tick_ns
    n, m = len(tags.start), len(flip.start)
    times = np.concatenate([tags.start, flip_time])
    columns = {
        "tag": np.concatenate([np.full(n, 10), np.full(m, 14)]).astype(np.uint8),
        "mode": np.ones(n + m, np.uint8),
        "syscnt": ctx.clock.to_syscnt(times),
        "stream_id": np.concatenate([tags.stream, flip.stream]),
        "task_id": np.concatenate([tags.task_id, np.zeros(m, np.int64)]),
        "index_id": np.concatenate([tags.step + 1, np.zeros(m, np.int64)]),
        "model_id": np.concatenate([np.full(n, MODEL_ID), np.zeros(m, np.int64)]),
        "tag_id": np.concatenate([tags.tag, np.zeros(m, np.int64)]),
        "flip_num": np.concatenate([np.zeros(n, np.int64), flip.batch]),
    }
    return Rows("ts_track", columns, times).ordered()


#: HBM units a simulated device samples (910A and 910B have four)
HBM_UNITS = 4


def _hbm(times: I64, base: int) -> Rows:
    """Per sample time a read and a write count of each HBM unit; counts vary with the time (32 bytes
    each, so 1,000 counts in 10 ms are about 3 MB/s)."""
    n = len(times)
    unit = np.tile(np.repeat(np.arange(HBM_UNITS), 2), n)
    event = np.tile([0, 1], n * HBM_UNITS)
    ms = np.repeat((times - base) // 1_000_000, 2 * HBM_UNITS)
    count = 20_000 + 3_000 * unit + 5_000 * event + (ms * 7919 + unit * 104_729) % 9_973
    columns = {"timestamp": np.repeat((times - base) // 1000, 2 * HBM_UNITS), "count": count, "event": event}
    return Rows("hbm", {**columns, "hbm_id": unit}, np.repeat(times, 2 * HBM_UNITS))


def _samples(chunk: Chunk, ctx: DeviceContext) -> list[Rows]:
    """npu_mem / npu_module_mem samples every 10 ms and, on 910B, the AI Core frequency."""
    base = ctx.clock.corrected_mono
    if ctx.next_sample == 0:
        ctx.next_sample = base + SAMPLE_PERIOD_NS
    times = np.arange(ctx.next_sample, chunk.end, SAMPLE_PERIOD_NS, dtype=np.int64)
    if len(times):
        ctx.next_sample = int(times[-1]) + SAMPLE_PERIOD_NS
    app = ctx.ge_totals[1] + (times - base) // 1_000_000 * 4096  # reserved, plus slow growth
    n = len(times)
    mem = Rows(
        "npu_mem",
        {
            "event": np.repeat(np.array([0, 1], np.uint32), n),
            "timestamp": np.tile((times - base) // 1000, 2),
            "ddr": np.tile(np.full(n, 256 << 20), 2),
            "hbm": np.concatenate([app, app + (2 << 30)]),
        },
        np.tile(times, 2),
    ).ordered()
    k = len(MODULES)
    module = Rows(
        "npu_module_mem",
        {
            "module_id": np.tile(MODULES, n),
            "cpu_cycle_count": np.repeat(ctx.clock.to_syscnt(times), k),
            "total_size": np.tile(np.array([96, 512, 3072, 256], np.int64) << 20, n),
        },
        np.repeat(times, k),
    )
    rows = [mem, module]
    if ctx.hbm:
        rows.append(_hbm(times, base))
    if ctx.profile.stars:
        at = np.array([chunk.origin[0]], np.int64)
        freq = {"syscnt": ctx.clock.to_syscnt(at), "freq_mhz": np.array([ctx.profile.aic_freq_mhz])}
        rows.append(Rows("lpm_freq", freq, at))
    return rows


# ----------------------------------------------------------------------------- host


HostKey = tuple[str, str]  # (family, "aging" | "unaging")


def host_start_rows(ctx: DeviceContext, at_ns: int) -> dict[HostKey, Rows]:
    """Records reported once when the collection starts (per rank): dictionaries, graph map, stream spec."""
    at = np.array([at_ns], np.int64)
    cnt = ctx.host.to_host_cnt(at)
    names = ctx.names
    rows = {
        ("hash_dic", "unaging"): Rows("hash_dic", names.hash_dic(), np.full(len(names.texts), at_ns)),
        ("type_info_dic", "unaging"): Rows(
            "type_info_dic", names.type_info_dic(), np.full(len(names.types), at_ns)
        ),
        ("graph_id_map", "unaging"): Rows(
            "graph_id_map",
            _header(MODEL, MODEL_GRAPH_ID_MAP, ctx.acl_tid, LEN_GRAPH_ID, cnt)
            | {
                "model_name_hash": np.array([hash_id(MODEL_NAME)], np.uint64),
                "graph_id": np.ones(1, np.uint32),
                "model_id": np.full(1, MODEL_ID, np.uint32),
            },
            at,
        ),
    }
    if ctx.profile.stars:
        spec = _header(RUNTIME, TYPE_EXPAND_SPEC, ctx.acl_tid, LEN_EXPAND, cnt) | {
            "expand_status": np.zeros(1, np.uint8)
        }
        rows["expand_stream_spec", "unaging"] = Rows("expand_stream_spec", spec, at)
    return rows


def _header(level: int, kind: int, tid: int, length: int, timestamp: npt.ArrayLike) -> Columns:
    n = len(np.atleast_1d(timestamp))
    return {
        "level": np.full(n, level, np.uint16),
        "type": np.full(n, kind, np.uint32),
        "thread_id": np.full(n, tid, np.uint32),
        "data_len": np.full(n, length, np.uint32),
        "timestamp": np.atleast_1d(timestamp),
    }


def _item_times(chunk: Chunk, items: I64, field_name: str) -> I64:
    return np.asarray(getattr(chunk, field_name)[:, items].ravel(), np.int64)


def host_rows(chunk: Chunk, ctx: DeviceContext) -> dict[HostKey, Rows]:
    """Host-side rows of one chunk of one device."""
    out: dict[HostKey, Rows] = {}
    out["api_event", "aging"] = _api_event(chunk, ctx)
    out["task_track", "aging"] = _task_track(chunk, ctx)
    out |= _node_info(chunk, ctx)
    out |= _hccl(chunk, ctx)
    out["memcpy_info", "aging"] = _memcpy_info(chunk, ctx)
    out["task_memory_info", "aging"] = _task_memory(chunk, ctx)
    return out


def _api_event(chunk: Chunk, ctx: DeviceContext) -> Rows:
    t, steps = ctx.template, chunk.steps
    cnt = ctx.host.to_host_cnt
    ops = np.flatnonzero(t.item_kind == ITEM_OP)
    launched = np.flatnonzero((t.item_kind == ITEM_OP) | (t.item_kind == ITEM_HCCL))
    hccl = np.flatnonzero(t.item_kind == ITEM_HCCL)
    memcpy = np.flatnonzero(t.item_kind == ITEM_MEMCPY)
    acl_items = np.concatenate([ops, memcpy])
    acl_type = np.concatenate(
        [ACL_NN_BASE + 1 + t.op_catalog[t.item_op[ops]], np.full(len(memcpy), ACL_RTS_BASE + 1)]
    )
    step = chunk.first_step + np.arange(steps)
    # (level, type, begin, end, item id) of the API intervals
    intervals = [
        # ACL APIs (aclnn* / aclrtMemcpyAsync)
        (
            ACL,
            np.tile(acl_type, steps),
            _item_times(chunk, acl_items, "acl_begin"),
            _item_times(chunk, acl_items, "acl_end"),
            np.zeros(steps * len(acl_items), np.uint64),
        ),
        # node launch APIs of ops and all-reduces
        (
            NODE,
            np.full(steps * len(launched), NODE_LAUNCH),
            _item_times(chunk, launched, "launch_begin"),
            _item_times(chunk, launched, "launch_end"),
            np.tile(ctx.names.op_name[t.item_op[launched]], steps),
        ),
        # HCCL APIs inside the all-reduce launches
        (
            HCCL_LEVEL,
            np.full(steps * len(hccl), HCCL_MASTER),
            _item_times(chunk, hccl, "launch_begin") + 200,
            _item_times(chunk, hccl, "launch_end") - 200,
            np.tile(ctx.names.op_name[t.item_op[hccl]], steps),
        ),
    ]
    levels, types, begins, ends, items, events, requests = [], [], [], [], [], [], []
    for level, kind, begin, end, item in intervals:
        levels.append(np.full(len(begin), level))
        types.append(kind)
        begins.append(begin)
        ends.append(end)
        items.append(item)
        events.append(np.zeros(len(begin), bool))
        requests.append(np.zeros(len(begin), np.int64))
    # model execution: an Event pair per step whose requestId is the iteration
    exec_begin = chunk.item_begin[:, 0] - 1000
    exec_end = chunk.item_end[:, -1] + 1000
    for at in (exec_begin, exec_end):
        levels.append(np.full(steps, MODEL))
        types.append(np.full(steps, MODEL_EXECUTE))
        begins.append(at)
        ends.append(np.zeros(steps, np.int64))
        items.append(np.full(steps, MODEL_ID, np.uint64))
        events.append(np.ones(steps, bool))
        requests.append(step + 1)
    begin = np.concatenate(begins)
    end = np.concatenate(ends)
    is_event = np.concatenate(events)
    columns = {
        "level": np.concatenate(levels),
        "type": np.concatenate(types),
        "thread_id": np.full(len(begin), ctx.acl_tid, np.uint32),
        "request_id": np.concatenate(requests),
        "begin_time": cnt(begin),
        "end_time": np.where(is_event, np.uint64(0), cnt(np.where(is_event, begin, end))),
        "is_event": is_event,
        "item_id": np.concatenate(items),
    }
    return Rows("api_event", columns, begin).ordered()


def _task_track(chunk: Chunk, ctx: DeviceContext) -> Rows:
    t = ctx.template
    slots = Slots.of(chunk, t, np.arange(t.n_slots))
    flip = flips(chunk, t)
    is_tag = slots.kind < 0
    ts_type = np.where(is_tag, TS_PROFILER_TRACE_EX, _kind_attr(slots.kind, "ts_type"))
    kernel = np.where(is_tag, np.uint64(0), ctx.names.kernel[np.maximum(slots.op, 0)])
    blocks = np.where(
        _kind_attr(slots.kind, "pmu") & ~is_tag, t.op_block_dim[np.maximum(slots.op, 0)] & 0xFFFF, 0
    )
    m = len(flip.start)
    times = np.concatenate([slots.launch, flip.launch - HOST_TICK_NS])
    columns = _header(RUNTIME, TYPE_TASK_TRACK, ctx.acl_tid, LEN_RUNTIME_TRACK, ctx.host.to_host_cnt(times))
    columns |= {
        "device_id": np.full(len(times), ctx.device_id, np.uint16),
        "stream_id": np.concatenate([slots.stream, flip.stream]),
        "task_id": np.concatenate([slots.task_id, np.zeros(m, np.int64)]),
        "batch_id": np.concatenate([slots.batch, flip.batch]),
        "task_type": np.concatenate([ts_type, np.full(m, TS_FLIP)]),
        "kernel_name_hash": np.concatenate([kernel, np.zeros(m, np.uint64)]),
        "num_blocks": np.concatenate([blocks, np.zeros(m, np.int64)]),
    }
    return Rows("task_track", columns, times).ordered()


def _described_ops(t: Template) -> I64:
    """The ops GE reports node info for: compute ops and all-reduces (GE task type HCCL)."""
    return np.flatnonzero((t.op_catalog >= 0) | (t.item_kind[t.op_item] == ITEM_HCCL))


def _node_info(chunk: Chunk, ctx: DeviceContext) -> dict[HostKey, Rows]:
    """node_basic_info and tensor_info per described op, split into unaging (static) and aging (dynamic)."""
    t, steps = ctx.template, chunk.steps
    ops = _described_ops(t)
    at = _item_times(chunk, t.op_item[ops], "launch_end")
    cnt = ctx.host.to_host_cnt(at)
    op = np.tile(ops, steps)
    dynamic = t.op_dynamic[op]
    basic = _header(NODE, NODE_BASIC, ctx.acl_tid, LEN_NODE_BASIC, cnt) | {
        "op_name_hash": ctx.names.op_name[op],
        "task_type": t.op_ge_type[op],
        "op_type_hash": ctx.names.op_type[op],
        "block_dim": t.op_block_dim[op] & 0xFFFF,
        "mix_ratio": t.op_block_dim[op] >> 16,
        "op_state": dynamic.astype(np.uint8),
    }
    n = len(op)
    shape = np.zeros((n, 5, 8), np.uint32)
    shape[:, :3, :4] = t.op_shape[op][:, None, :]
    tensor = _header(NODE, NODE_TENSOR, ctx.acl_tid, LEN_TENSOR, cnt) | {
        "op_name_hash": ctx.names.op_name[op],
        "tensor_num": np.full(n, 3),
        "tensor_type": np.tile(np.array([0, 0, 1, 0, 0]), (n, 1)),
        "format": np.tile(np.array([GE_FORMAT_ND] * 3 + [0, 0]), (n, 1)),
        "sub_format": np.zeros((n, 5), np.int64),
        "data_type": np.tile(np.array([GE_DT_FLOAT16] * 3 + [0, 0]), (n, 1)),
        "shape": shape,
    }
    out: dict[HostKey, Rows] = {}
    for aging, mask in (("unaging", ~dynamic), ("aging", dynamic)):
        for family, columns in (("node_basic_info", basic), ("tensor_info", tensor)):
            out[family, aging] = Rows(family, {k: v[mask] for k, v in columns.items()}, at[mask])
    return out


def _hccl(chunk: Chunk, ctx: DeviceContext) -> dict[HostKey, Rows]:
    """hccl_op_info per all-reduce and hccl_info per communication task."""
    t, steps = ctx.template, chunk.steps
    items = np.flatnonzero(t.item_kind == ITEM_HCCL)
    op_at = _item_times(chunk, items, "launch_begin") + 200 + HOST_TICK_NS
    n = len(op_at)
    bucket = np.tile(np.arange(len(items)), steps)
    elements = (16 << 20) + bucket * (1 << 20)
    op_info = _header(NODE, NODE_HCCL_OP, ctx.acl_tid, LEN_HCCL_OP, ctx.host.to_host_cnt(op_at)) | {
        "data_type": np.full(n, HCCL_DATA_FP16),
        "alg_type_hash": np.full(n, hash_id(ALGORITHM), np.uint64),
        "count": elements,
        "group_name_hash": np.full(n, hash_id(GROUP_NAME), np.uint64),
    }
    slots = Slots.of(chunk, t, np.flatnonzero(t.slot_hccl >= 0))
    which = np.tile(t.slot_hccl[t.slot_hccl >= 0], steps)
    m = len(which)
    copy = which == 1
    size = np.where(copy, np.repeat(elements, 3) * 2, 4)
    remote = (ctx.rank_index + 1) % ctx.world
    info = _header(
        HCCL_LEVEL, HCCL_MASTER, ctx.acl_tid, LEN_HCCL_INFO, ctx.host.to_host_cnt(slots.launch)
    ) | {
        "item_hash": ctx.names.hccl_task[which],
        "ccl_tag_hash": np.full(m, hash_id(GROUP_NAME), np.uint64),
        "group_name_hash": np.full(m, hash_id(GROUP_NAME), np.uint64),
        "local_rank": np.full(m, ctx.rank_index),
        "remote_rank": np.full(m, remote),
        "rank_size": np.full(m, ctx.world),
        "notify_id": np.where(copy, 0, 0x1000 + remote),
        "role": np.where(which == 0, 0, 1),
        "src_addr": np.where(copy, 0x12C0_0000_0000, 0),
        "dst_addr": np.where(copy, 0x12C1_0000_0000, 0),
        "data_size": size,
        "data_type": np.full(m, HCCL_DATA_FP16),
        "link_type": np.ones(m, np.int64),
    }
    return {
        ("hccl_op_info", "aging"): Rows("hccl_op_info", op_info, op_at),
        ("hccl_info", "aging"): Rows("hccl_info", info, slots.launch),
    }


def _memcpy_info(chunk: Chunk, ctx: DeviceContext) -> Rows:
    t = ctx.template
    slots = Slots.of(chunk, t, np.flatnonzero(t.item_kind[t.slot_item] == ITEM_MEMCPY))
    n = len(slots.launch)
    columns = _header(
        RUNTIME, TYPE_MEMCPY_INFO, ctx.acl_tid, LEN_MEMCPY, ctx.host.to_host_cnt(slots.launch)
    ) | {
        "data_size": np.full(n, MEMCPY_BYTES),
        "max_size": np.full(n, MEMCPY_MAX_BYTES),
        "direction": np.full(n, MEMCPY_HOST_TO_DEVICE),
    }
    return Rows("memcpy_info", columns, slots.launch)


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True, slots=True)
class MemoryEvents:
    """Allocations (+size) and releases (-size) of op outputs, in time order.

    ``acl_time`` is when GE reports it (task_memory_info, on the ACL thread);
    ``py_time`` when the PyTorch allocator does (torch.memory_usage).
    ``carried`` marks releases of gradient buckets of the previous step, which
    the communication stream used.
    """

    acl_time: I64
    py_time: I64
    addr: I64
    size: I64
    op: I64  # op in whose context the event happens
    owner: I64  # op whose output it is (GE reports a release under the node that allocated it)
    carried: npt.NDArray[np.bool_]


def memory_events(chunk: Chunk, t: Template) -> MemoryEvents:
    steps = chunk.steps
    outs = np.flatnonzero(t.op_bytes > 0)
    freed = outs[t.op_free_op[outs] >= 0]
    carried = outs[t.op_carry_free_op[outs] >= 0]
    by_op: list[tuple[I64, I64, float, int, bool]] = [
        # (context op, owner op, position in the context op's window, sign, carried)
        (outs, outs, 0.5, 1, False),
        (t.op_free_op[freed], freed, 0.3, -1, False),
        (t.op_carry_free_op[carried], carried, 0.2, -1, True),
    ]
    parts = []
    for context, owner, where, sign, carry in by_op:
        items = t.op_item[context]
        py_b, py_e = chunk.py_begin[:, context], chunk.py_end[:, context]
        py_time = py_b + ((py_e - py_b) * where / GRID_NS).astype(np.int64) * GRID_NS
        acl_time = chunk.acl_begin[:, items] + (200 if sign < 0 else 400)
        parts.append(
            (
                acl_time.ravel(),
                py_time.ravel(),
                np.tile(t.op_addr[owner], steps),
                np.tile(sign * t.op_bytes[owner], steps),
                np.tile(context, steps),
                np.tile(owner, steps),
                np.full(steps * len(owner), carry),
            )
        )
    acl_time, py_time, addr, size, op, owner_op, carry_flag = (
        np.concatenate(x) for x in zip(*parts, strict=True)
    )
    order = np.argsort(acl_time, kind="stable")
    return MemoryEvents(
        acl_time[order],
        py_time[order],
        addr[order],
        size[order],
        op[order],
        owner_op[order],
        carry_flag[order],
    )


def _task_memory(chunk: Chunk, ctx: DeviceContext) -> Rows:
    mem = memory_events(chunk, ctx.template)
    allocated, reserved = ctx.ge_totals
    total = allocated + np.cumsum(mem.size)
    reserve = np.maximum.accumulate(np.maximum(reserved, _round_up(total)))
    if len(total):
        ctx.ge_totals = (int(total[-1]), int(reserve[-1]))
    columns = _header(NODE, NODE_TASK_MEMORY, ctx.acl_tid, LEN_MEMORY, ctx.host.to_host_cnt(mem.acl_time)) | {
        "addr": mem.addr,
        "size": mem.size,
        "node_id_hash": ctx.names.op_name[mem.owner],
        "total_allocate_memory": total,
        "total_reserve_memory": reserve,
        "device_id": np.full(len(total), ctx.device_id),
    }
    return Rows("task_memory_info", columns, mem.acl_time)


def _round_up(values: I64, unit: int = 20 << 20) -> I64:
    return np.asarray(-(-values // unit) * unit, np.int64)


# ----------------------------------------------------------------------------- framework


def framework_rows(chunk: Chunk, ctx: DeviceContext) -> list[Rows]:
    """torch_npu FRAMEWORK rows of one chunk: op ranges, task-queue marks, allocator records."""
    return [_op_range(chunk, ctx), _op_mark(chunk, ctx), _memory_usage(chunk, ctx)]


def _torch_names(t: Template) -> pa.Array:
    """The framework op name of every op of the step."""
    names = []
    for catalog, op_type in zip(t.op_catalog, t.op_type, strict=True):
        if catalog >= 0:
            names.append(t.catalog[catalog].torch_op)
        else:
            names.append("c10d::allreduce_" if op_type == "HcomAllReduce" else "aten::copy_")
    return pa.array(names, pa.string())


def _op_range(chunk: Chunk, ctx: DeviceContext) -> Rows:
    t, steps = ctx.template, chunk.steps
    op = np.tile(np.arange(t.n_ops), steps)
    begin, end = chunk.py_begin.ravel(), chunk.py_end.ravel()
    step_begin, step_end = chunk.origin, chunk.origin + chunk.length - GRID_NS
    shapes = pa.array([";".join([",".join(str(d) for d in t.op_shape[o][:3])] * 2) for o in range(t.n_ops)])
    n = len(op)
    step_names = pa.array([f"ProfilerStep#{s + 1}" for s in chunk.first_step + np.arange(steps)], pa.string())
    absent = pa.nulls(steps, pa.string())
    ends = np.concatenate([end, step_end])
    seq = ctx.counters.get("torch_op_range", 0)
    ctx.counters["torch_op_range"] = seq + n
    columns = {
        "start_ns": ctx.host.to_host_cnt(np.concatenate([begin, step_begin])),
        "end_ns": ctx.host.to_host_cnt(ends),
        "sequence_number": np.concatenate([seq + np.arange(n), np.full(steps, -1)]),
        "process_id": np.full(n + steps, ctx.pid),
        "start_thread_id": np.full(n + steps, ctx.py_tid),
        "end_thread_id": np.full(n + steps, ctx.py_tid),
        "forward_thread_id": np.zeros(n + steps, np.int64),
        "name": pa.concat_arrays([_torch_names(t).take(pa.array(op)), step_names]),
        "input_dtypes": pa.concat_arrays(
            [pa.array(["float16;float16"]).take(pa.array(np.zeros(n, np.int64))), absent]
        ),
        "input_shapes": pa.concat_arrays([shapes.take(pa.array(op)), absent]),
    }
    # torch_npu reports an op range from the RecordFunction exit callback, so the file is in end
    # order and a ProfilerStep follows everything it contains
    return Rows("torch_op_range", columns, ends).ordered()


def _op_mark(chunk: Chunk, ctx: DeviceContext) -> Rows:
    t, steps = ctx.template, chunk.steps
    op = np.tile(np.arange(t.n_ops), steps)
    n = len(op)
    first = ctx.counters.get("torch_op_mark", 0)
    ctx.counters["torch_op_mark"] = first + n
    correlation = np.tile(first + np.arange(n), 4)
    times = np.concatenate(
        [
            chunk.enqueue_begin.ravel(),
            chunk.enqueue_end.ravel(),
            chunk.item_begin[:, t.op_item].ravel(),
            chunk.item_end[:, t.op_item].ravel(),
        ]
    )
    tids = np.repeat(np.array([ctx.py_tid, ctx.py_tid, ctx.acl_tid, ctx.acl_tid]), n)
    columns = {
        "time_ns": ctx.host.to_host_cnt(times),
        "category": np.repeat(np.arange(4), n),
        "correlation_id": correlation,
        "thread_id": tids,
        "process_id": np.full(4 * n, ctx.pid),
        "name": _torch_names(t).take(pa.array(np.tile(op, 4))),
    }
    return Rows("torch_op_mark", columns, times).ordered()


def _memory_usage(chunk: Chunk, ctx: DeviceContext) -> Rows:
    """PyTorch allocator records: MALLOC, FREE, BLOCK_FREE with running totals.

    BLOCK_FREE comes 40 ns before FREE for ordinary tensors (free() calls
    free_block() first) and 3 µs after FREE for gradient buckets that the
    communication stream still used.
    """
    mem = memory_events(chunk, ctx.template)
    releases = np.flatnonzero(mem.size < 0)
    block_time = mem.py_time[releases] + np.where(mem.carried[releases], 3_000, -40)
    time = np.concatenate([mem.py_time, block_time])
    size = np.concatenate([mem.size, mem.size[releases]])
    kind = np.concatenate([np.where(mem.size > 0, MALLOC, FREE), np.full(len(releases), BLOCK_FREE)])
    addr = np.concatenate([mem.addr, mem.addr[releases]])
    order = np.argsort(time, kind="stable")
    time, size, kind, addr = time[order], size[order], kind[order], addr[order]
    allocated, active, reserved = ctx.pta_totals
    total_allocated = allocated + np.cumsum(np.where(kind != BLOCK_FREE, size, 0))
    total_active = active + np.cumsum(np.where(kind != FREE, size, 0))
    total_reserved = np.maximum.accumulate(np.maximum(reserved, _round_up(total_active)))
    if len(time):
        ctx.pta_totals = (int(total_allocated[-1]), int(total_active[-1]), int(total_reserved[-1]))
    n = len(time)
    columns = {
        "ptr": addr,
        "time_ns": ctx.host.to_host_cnt(time),
        "alloc_size": size,
        "total_allocated": total_allocated,
        "total_reserved": total_reserved,
        "total_active": total_active,
        "stream_ptr": np.full(n, MAIN_STREAM),
        "device_type": np.full(n, NPU_DEVICE_TYPE),
        "device_index": np.full(n, ctx.device_id),
        "data_type": kind,
        "thread_id": np.full(n, ctx.py_tid),
        "process_id": np.full(n, ctx.pid),
    }
    return Rows("torch_memory_usage", columns, time)
