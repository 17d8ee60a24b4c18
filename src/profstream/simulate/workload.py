"""A deterministic model of a data-parallel training run, generated a chunk of steps at a time.

What one step looks like (the same structure every step, fresh random durations
per step and device; the structure comes from the seed only, so every rank runs
the same model):

- the Python thread runs one framework op per host op (``torch.op_range``) and
  enqueues it; the ACL thread dequeues it and calls the ACL API
  (``api_event``), inside which the node launch API wraps the runtime task
  launches (``task_track``, one per device task) and the node's
  ``node_basic_info`` / ``tensor_info`` / ``task_memory_info``;
- compute ops (forward, then backward) run one device task each on the main
  compute stream, a few on a side stream; gradient all-reduces (HCCL) run
  NOTIFY_WAIT, SDMA copy and NOTIFY_RECORD tasks on the communication stream,
  each gated by the end of the backward op that produced its bucket, so they
  overlap later backward compute; one H2D memcpy loads the batch;
- step-trace tags are profiler-trace tasks (``PROFILER_TRACE_EX``) that take a
  task id on their stream and leave a ts_track record: 60000 step start, 0
  model start, 2 FP start, 10000+2j / 10001+2j around all-reduce j, 3 BP end,
  4 iteration end, 1 model end, 60001 step end (spec cann_raw_formats.md §2.6).
  The last three wait for every task of the step (a stream wait), so a step's
  tasks all lie inside [60000, 60001]; the model execution is a pair of
  MsprofEvent records whose requestId is the iteration (msprof_behaviour.md);
- the step ends with a host synchronisation, so step k+1 starts after every
  task of step k ended.

Device times follow a max-plus recurrence per stream, ``start_i = max(ready_i,
end_{i-1} + gap_i)``, solved for a whole chunk at once with
``maximum.accumulate`` (``start = D + max.acc(ready - D)`` with ``D`` the
cumulative busy time), so no Python loop runs per task. Every time is a
multiple of 20 ns on the host monotonic clock, which is one device tick at
50 MHz and two at 100 MHz, so conversions to device ticks and host counters
(100 MHz) are exact and the truth can be computed exactly.

Task ids are 16-bit and wrap: each stream starts its counter so that it wraps
within the first two steps; the wrap spends id 0 of the new batch on a
FLIP_TASK (host task_track record with the flip number in the batch field,
device ts_track tag 14), as the runtime does ([MSP]
``analysis/mscalculate/flip/flip_calculator.py``: tasks at or after the flip
timestamp get the next batch).

Memory: every compute op allocates its output; it is freed a few ops later,
except the last outputs of a step (gradient buckets), which are freed early in
the next step. So the first step frees buffers whose allocation was before the
collection (unmatched frees) and the last step's buckets are never freed; in
the PyTorch allocator view, BLOCK_FREE precedes FREE for ordinary tensors and
follows it for buckets the communication stream still used
(framework_outputs.md §1.3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from profstream.simulate.config import ChipProfile, SimulationConfig

I64 = npt.NDArray[np.int64]
Array = npt.NDArray[Any]

GRID_NS = 20  # every generated time is a multiple of this (one tick at 50 MHz)
TARGET_SLOTS_PER_CHUNK = 20_000  # bounds a chunk (arrays and encoded bytes) to tens of MB
TASK_ID_SPAN = 65536

# runtime task types (TsTaskType, runtime task_base.hpp; names as type_info_dic prints them)
TS_TYPE_NAMES: dict[int, str] = {
    0: "KERNEL_AICORE",
    1: "KERNEL_AICPU",
    5: "MEMCPY_ASYNC",
    14: "NOTIFY_WAIT",
    15: "NOTIFY_RECORD",
    26: "PROFILER_TRACE_EX",
    66: "KERNEL_AIVEC",
    98: "FLIP_TASK",
    108: "KERNEL_MIX_AIC",
}
TS_PROFILER_TRACE_EX = 26
TS_FLIP = 98
# GeTaskType of node_basic_info (ge_enum_constant.py)
GE_TYPE_NAMES: dict[int, str] = {0: "AI_CORE", 1: "AI_CPU", 2: "AI_VECTOR_CORE", 4: "MIX_AIC", 9: "HCCL"}

# step-trace tags (spec §2.6)
TAG_MODEL_START, TAG_MODEL_END, TAG_FP_START, TAG_BP_END, TAG_ITER_END = 0, 1, 2, 3, 4
TAG_ALL_REDUCE = 10000
TAG_STEP_START, TAG_STEP_END = 60000, 60001

MAIN_STREAM, SIDE_STREAM, COMM_STREAM = 2, 3, 6
MODEL_ID = 1


@dataclass(frozen=True, slots=True)
class TaskKind:
    """A class of device task and the ids it carries in every record family."""

    name: str  # runtime task type name (truth task_type)
    ts_type: int  # task_track taskType
    sqe_type: int  # STARS SQE type (stars_soc header bits 10-15)
    ge_type: int  # node_basic_info taskType; -1 when the task is not an op's
    category: str  # "compute" | "communication" | "other"
    subtask_type: int  # FFTS sub-task type of the PMU record (0 AIC, 1 AIV, 6 MIX_AIC)
    ffts_type: int  # FFTS type of the PMU record (0 AIC only, 1 AIV only, 4 FFTS+)
    pmu: bool  # has a PMU record (aicore / ffts_profile)
    mean_ns: int
    sigma: float


AIC = TaskKind("KERNEL_AICORE", 0, 0, 0, "compute", 0, 0, True, 40_000, 0.35)
# A vector kernel: runtime KERNEL_AIVEC, GE AI_VECTOR_CORE, but SQE type 0 (AI_CORE) in the STARS log,
# as on the real 910B (shared/realdata msinsight-torchnpu-910b: the db export's TASK rows of these ops
# are KERNEL_AIVEC and their COMPUTE_TASK_INFO rows AI_VECTOR_CORE; the CANN 8.0-era text export,
# whose Ascend Hardware Task Type is the device task type, gives the same ops AI_CORE).
AIV = TaskKind("KERNEL_AIVEC", 66, 0, 2, "compute", 1, 1, True, 7_000, 0.4)
MIX = TaskKind("KERNEL_MIX_AIC", 108, 0, 4, "compute", 6, 4, True, 110_000, 0.25)
AICPU = TaskKind("KERNEL_AICPU", 1, 1, 1, "compute", 0, 0, False, 35_000, 0.3)
NOTIFY_WAIT = TaskKind("NOTIFY_WAIT", 14, 7, 9, "communication", 0, 0, False, 25_000, 0.6)
SDMA = TaskKind("MEMCPY_ASYNC", 5, 11, 9, "communication", 0, 0, False, 140_000, 0.4)
NOTIFY_RECORD = TaskKind("NOTIFY_RECORD", 15, 6, 9, "communication", 0, 0, False, 1_500, 0.3)
H2D = TaskKind("MEMCPY_ASYNC", 5, 11, -1, "other", 0, 0, False, 30_000, 0.2)
TASK_KINDS = (AIC, AIV, MIX, AICPU, NOTIFY_WAIT, SDMA, NOTIFY_RECORD, H2D)
HCCL_TASK_NAMES = ("Notify_Wait", "Memcpy", "Notify_Record")  # hccl_info itemId strings


@dataclass(frozen=True, slots=True)
class OpKind:
    """A compute operator type: its names in each layer and the task it launches."""

    op_type: str  # GE op type (hash_dic)
    acl_api: str  # ACL API name (type_info_dic)
    torch_op: str  # framework op name (torch.op_range)
    task: TaskKind
    block_dim: int
    weight: float  # relative frequency in the model


def _catalog(profile: ChipProfile) -> tuple[OpKind, ...]:
    """Operator types of the chip: 910A runs vector ops on AI Cores and has no mixed kernels."""
    vec = AIV if profile.aiv_num else AIC
    vec_dim = profile.aiv_num or profile.ai_core_num
    attention = OpKind(
        "FlashAttentionScore", "aclnnFlashAttentionScore", "npu::npu_fusion_attention", MIX, 24, 1
    )
    if not profile.aiv_num:
        attention = OpKind("BatchMatMul", "aclnnBatchMatMul", "aten::bmm", AIC, profile.ai_core_num, 1)
    return (
        OpKind("MatMulV3", "aclnnMatmul", "aten::matmul", AIC, profile.ai_core_num, 3),
        OpKind("Add", "aclnnAdd", "aten::add", vec, vec_dim, 3),
        OpKind("Mul", "aclnnMul", "aten::mul", vec, vec_dim, 2),
        OpKind("Cast", "aclnnCast", "aten::to", vec, vec_dim // 2, 2),
        OpKind("LayerNormV4", "aclnnLayerNorm", "aten::layer_norm", vec, vec_dim, 1),
        OpKind("SoftmaxV2", "aclnnSoftmax", "aten::softmax", vec, vec_dim, 1),
        attention,
        OpKind("NonZero", "aclnnNonzero", "aten::nonzero", AICPU, 1, 0.2),
    )


# host items (launch order on the ACL thread)
ITEM_TAG, ITEM_OP, ITEM_HCCL, ITEM_MEMCPY = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Template:
    """The structure of one step: host items, ops and device slots (identical every step)."""

    catalog: tuple[OpKind, ...]
    # ops: every host item that is not a tag (compute ops, all-reduces, the memcpy)
    op_name: tuple[str, ...]
    op_type: tuple[str, ...]
    op_item: I64  # host item of each op
    op_catalog: I64  # OpKind index; -1 for HCCL / memcpy
    op_ge_type: I64
    op_block_dim: I64  # node_basic_info blockNum (mix ratio in the high 16 bits)
    op_dynamic: Array  # bool: node info goes to aging.* (dynamic shape) or unaging.* (static)
    op_shape: I64  # [n_ops, 4] output shape (inputs share it)
    op_bytes: I64  # output tensor size (0: no memory record)
    op_addr: I64  # output address (static per op, as a caching allocator reuses blocks)
    op_free_op: I64  # op freeing the output in the same step; -1 = carried to the next step
    op_carry_free_op: I64  # op of the next step freeing a carried output
    # host items
    item_kind: I64
    item_op: I64  # op of the item; -1 for tags
    item_ref_op: I64  # op whose enqueue gates the item on the ACL thread; -1: the step start
    # device slots (tasks and tags), in launch order
    slot_item: I64
    slot_stream: I64
    slot_kind: I64  # TASK_KINDS index; -1 for a tag
    slot_tag: I64  # tag id; -1 for a task
    slot_dep: I64  # slot whose end gates this one (all-reduce after its gradient); -1
    slot_tail: Array  # bool: waits for every task of the step
    slot_offset: I64  # launch offset of the slot inside its item (ns)
    slot_hccl: I64  # HCCL task index 0..2 of all-reduce slots; -1
    streams: tuple[int, ...]

    @property
    def n_ops(self) -> int:
        return len(self.op_name)

    @property
    def n_items(self) -> int:
        return len(self.item_kind)

    @property
    def n_slots(self) -> int:
        return len(self.slot_item)


def build_template(config: SimulationConfig) -> Template:
    """The step structure for ``config``, from the seed alone (every rank runs the same model)."""
    rng = np.random.default_rng([config.seed, 0xA11CE])
    catalog = _catalog(config.profile)
    n = config.ops_per_step
    weights = np.array([k.weight for k in catalog])
    kinds = rng.choice(len(catalog), size=n, p=weights / weights.sum())
    n_fwd = n // 2
    n_comm = max(1, (n - n_fwd) // 16)
    bwd_positions = np.arange(n_fwd, n)
    comm_after = bwd_positions[((np.arange(n_comm) + 1) * (n - n_fwd)) // n_comm - 1]
    side = (np.arange(n) < n_fwd) & (rng.random(n) < 0.06)
    kinds[side] = 3  # side-stream ops are casts
    layers = max(1, n_fwd // 8)

    ops: list[dict[str, Any]] = []
    items: list[tuple[int, int, int]] = []  # (kind, op, ref_op)
    slots: list[dict[str, int]] = []

    def add_item(kind: int, op: int) -> int:
        ref = op if op >= 0 else (max((o for _, o, _ in items if o >= 0), default=-1))
        items.append((kind, op, ref))
        return len(items) - 1

    def add_tag(tag: int, stream: int = MAIN_STREAM, *, tail: bool = False) -> None:
        item = add_item(ITEM_TAG, -1)
        slots.append({"item": item, "stream": stream, "kind": -1, "tag": tag, "tail": int(tail)})

    def add_op(name: str, op_type: str, *, cat: int = -1, ge: int = -1, block: int = 0, size: int = 0) -> int:
        ops.append({"name": name, "type": op_type, "cat": cat, "ge": ge, "block": block, "bytes": size})
        return len(ops) - 1

    add_tag(TAG_STEP_START)
    add_tag(TAG_MODEL_START)
    memcpy_op = add_op("model/input/MemcpyH2D", "MemcpyAsync")
    item = add_item(ITEM_MEMCPY, memcpy_op)
    slots.append({"item": item, "stream": MAIN_STREAM, "kind": TASK_KINDS.index(H2D)})
    add_tag(TAG_FP_START)
    for p in range(n):
        kind = catalog[int(kinds[p])]
        layer = (p if p < n_fwd else n - 1 - p) * layers // n_fwd
        scope = f"model/layer{layer}" if p < n_fwd else f"gradients/layer{layer}"
        # blockNum: block dim in the low 16 bits, the mix ratio (AIV per AIC) in the high 16 bits
        block_num = kind.block_dim | (2 << 16) if kind.task is MIX else kind.block_dim
        size = int(rng.integers(1, 64)) * 256 * 1024
        op = add_op(
            f"{scope}/{kind.op_type}_{p}",
            kind.op_type,
            cat=int(kinds[p]),
            ge=kind.task.ge_type,
            block=block_num,
            size=size,
        )
        item = add_item(ITEM_OP, op)
        slots.append(
            {
                "item": item,
                "stream": SIDE_STREAM if side[p] else MAIN_STREAM,
                "kind": TASK_KINDS.index(kind.task),
            }
        )
        for j in np.flatnonzero(comm_after == p):
            dep = len(slots) - 1
            hccl = add_op(f"hcom_allReduce_{int(j)}", "HcomAllReduce", ge=SDMA.ge_type)
            item = add_item(ITEM_HCCL, hccl)
            slots.append(
                {
                    "item": item,
                    "stream": COMM_STREAM,
                    "kind": -1,
                    "tag": TAG_ALL_REDUCE + 2 * int(j),
                    "dep": dep,
                }
            )
            for h, task in enumerate((NOTIFY_WAIT, SDMA, NOTIFY_RECORD)):
                slots.append({"item": item, "stream": COMM_STREAM, "kind": TASK_KINDS.index(task), "hccl": h})
            slots.append(
                {"item": item, "stream": COMM_STREAM, "kind": -1, "tag": TAG_ALL_REDUCE + 2 * int(j) + 1}
            )
    add_tag(TAG_BP_END)
    add_tag(TAG_ITER_END, tail=True)
    add_tag(TAG_MODEL_END, tail=True)
    add_tag(TAG_STEP_END, tail=True)

    n_ops = len(ops)
    op_item = np.full(n_ops, -1, np.int64)
    for i, (_, op, _) in enumerate(items):
        if op >= 0:
            op_item[op] = i
    op_bytes = np.array([o["bytes"] for o in ops], np.int64)
    compute_ops = np.flatnonzero(op_bytes > 0)
    # the output of compute op k is freed by compute op k + lag; the last few carry over
    lag = rng.integers(1, 9, size=len(compute_ops))
    target = np.arange(len(compute_ops)) + lag
    carried = target >= len(compute_ops)
    free_op = np.where(carried, -1, compute_ops[np.minimum(target, len(compute_ops) - 1)])
    carry_free = compute_ops[np.minimum(np.cumsum(carried) * carried, len(compute_ops) - 1)]
    op_free_op = np.full(n_ops, -1, np.int64)
    op_free_op[compute_ops] = free_op
    op_carry = np.full(n_ops, -1, np.int64)
    op_carry[compute_ops] = np.where(carried, carry_free, -1)
    addr = 0x12C0_4000_0000 + np.cumsum(np.concatenate([[0], op_bytes[:-1]])) + np.arange(n_ops) * 0x20_0000
    shape = np.stack(
        [np.full(n_ops, 8), rng.integers(1, 9, n_ops) * 256, rng.integers(1, 9, n_ops) * 128, np.ones(n_ops)],
        axis=1,
    ).astype(np.int64)

    def col(rows: list[dict[str, int]], key: str, default: int) -> I64:
        return np.array([r.get(key, default) for r in rows], np.int64)

    slot_item = col(slots, "item", -1)
    # slots of one item launch 1.5 µs apart inside it
    first_of_item = np.searchsorted(slot_item, slot_item)
    return Template(
        catalog=catalog,
        op_name=tuple(o["name"] for o in ops),
        op_type=tuple(o["type"] for o in ops),
        op_item=op_item,
        op_catalog=np.array([o["cat"] for o in ops], np.int64),
        op_ge_type=np.array([o["ge"] for o in ops], np.int64),
        op_block_dim=np.array([o["block"] for o in ops], np.int64),
        op_dynamic=rng.random(n_ops) < 0.3,
        op_shape=shape,
        op_bytes=op_bytes,
        op_addr=addr.astype(np.int64),
        op_free_op=op_free_op,
        op_carry_free_op=op_carry,
        item_kind=np.array([k for k, _, _ in items], np.int64),
        item_op=np.array([o for _, o, _ in items], np.int64),
        item_ref_op=np.array([r for _, _, r in items], np.int64),
        slot_item=slot_item,
        slot_stream=col(slots, "stream", MAIN_STREAM),
        slot_kind=col(slots, "kind", -1),
        slot_tag=col(slots, "tag", -1),
        slot_dep=col(slots, "dep", -1),
        slot_tail=col(slots, "tail", 0).astype(bool),
        slot_offset=(np.arange(len(slots)) - first_of_item) * 1500,
        slot_hccl=col(slots, "hccl", -1),
        streams=(MAIN_STREAM, SIDE_STREAM, COMM_STREAM),
    )


@dataclass(slots=True)
class Chunk:
    """Everything that happened in a run of consecutive steps on one device (times in host ns).

    Per-item, per-op and per-slot arrays are ``[steps, n]``. A draft holds times
    relative to each step's origin; :func:`place` makes them absolute.
    """

    first_step: int  # 0-based index of the first step in the run
    origin: I64  # [S] step origin (the Python thread's step start)
    length: I64  # [S] time from the step's origin to the next step's origin
    # ACL thread, per item
    item_begin: I64
    item_end: I64
    acl_begin: I64
    launch_begin: I64
    launch_end: I64
    acl_end: I64
    # Python thread, per op
    py_begin: I64
    py_end: I64
    enqueue_begin: I64
    enqueue_end: I64
    # device, per slot
    slot_launch: I64  # host time of the slot's task_track record
    slot_start: I64
    slot_end: I64
    slot_task_id: I64
    slot_batch: I64
    total_cycle: I64  # per slot, 0 for slots without PMU
    pmu: I64  # [S, n_slots, 8]

    @property
    def steps(self) -> int:
        return len(self.origin)

    @property
    def end(self) -> int:
        """Origin of the step after the chunk."""
        return int(self.origin[-1] + self.length[-1])


TIME_FIELDS = (
    "item_begin",
    "item_end",
    "acl_begin",
    "launch_begin",
    "launch_end",
    "acl_end",
    "py_begin",
    "py_end",
    "enqueue_begin",
    "enqueue_end",
    "slot_launch",
    "slot_start",
    "slot_end",
)


def place(drafts: list[Chunk], origin0: int) -> list[Chunk]:
    """Drafts of the same steps on several devices, made absolute on shared step origins.

    Data-parallel devices wait for each other every step (the all-reduce and
    the host synchronisation), so a step lasts as long as its slowest device.
    """
    length = np.max([d.length for d in drafts], axis=0)
    origin = origin0 + np.concatenate([[0], np.cumsum(length[:-1])]).astype(np.int64)
    shift = {name: origin[:, None] for name in TIME_FIELDS}
    return [
        replace(d, origin=origin, length=length, **{k: getattr(d, k) + v for k, v in shift.items()})
        for d in drafts
    ]


def _ticks(rng: np.random.Generator, mean_ns: Array, sigma: float | Array, shape: tuple[int, ...]) -> I64:
    """Lognormal durations with mean ``mean_ns``, on the 20 ns grid and at least one grid step."""
    sig = np.asarray(sigma, np.float64)
    draw = np.asarray(mean_ns, np.float64) * np.exp(sig * rng.standard_normal(shape) - sig * sig / 2)
    return np.maximum(1, np.rint(draw / GRID_NS)).astype(np.int64) * GRID_NS


def _uniform(rng: np.random.Generator, low_ns: int, high_ns: int, shape: tuple[int, ...]) -> I64:
    return rng.integers(low_ns // GRID_NS, high_ns // GRID_NS + 1, shape).astype(np.int64) * GRID_NS


def serial(ready: I64, dur: I64, gap: I64, after: I64 | None = None) -> I64:
    """Start times of tasks run in order on one stream: ``start_i = max(ready_i, end_{i-1} + gap_i)``.

    Row-wise over ``[rows, n]`` arrays; ``after`` is the busy-until time before
    the first task of each row.
    """
    busy = np.zeros_like(ready)
    busy[:, 1:] = np.cumsum(dur[:, :-1] + gap[:, 1:], axis=1)
    first = ready[:, :1] if after is None else np.maximum(ready[:, :1], after[:, None] + gap[:, :1])
    shifted = np.concatenate([first, ready[:, 1:]], axis=1) - busy
    return np.asarray(busy + np.maximum.accumulate(shifted, axis=1), np.int64)


def wrap_task_ids(ordinal: I64, first: int) -> tuple[I64, I64]:
    """(task id, batch) of the ``ordinal``-th task of a stream whose first task got id ``first``.

    Ids are 16-bit; each wrap spends id 0 of the new batch on the flip task, so
    a new batch starts at id 1.
    """
    head = TASK_ID_SPAN - first  # tasks left in the first batch
    rest = ordinal - head
    in_first = rest < 0
    task = np.where(in_first, first + ordinal, 1 + np.maximum(rest, 0) % (TASK_ID_SPAN - 1))
    batch = np.where(in_first, 0, 1 + np.maximum(rest, 0) // (TASK_ID_SPAN - 1))
    return task.astype(np.int64), batch.astype(np.int64)


class Workload:
    """The run of one device of one rank, drawn a chunk of steps at a time (:meth:`draft`)."""

    def __init__(self, config: SimulationConfig, template: Template, rank: int, device_index: int) -> None:
        self.config = config
        self.template = template
        self.profile = config.profile
        self.rank = rank
        self.device_index = device_index
        t = template
        self.stream_slots = {s: np.flatnonzero(t.slot_stream == s) for s in t.streams}
        rng = np.random.default_rng([config.seed, rank, device_index, 0xF11D])
        # counters start so that every stream wraps within its first two steps
        self.first_task_id = {
            s: int(max(1, TASK_ID_SPAN - int(len(ix) * rng.uniform(1.2, 1.8)) % TASK_ID_SPAN))
            for s, ix in self.stream_slots.items()
        }
        is_task = t.slot_kind >= 0
        self.task_slots = np.flatnonzero(is_task)
        self.kind_mean = np.array([TASK_KINDS[k].mean_ns if k >= 0 else 0 for k in t.slot_kind], np.float64)
        self.kind_sigma = np.array([TASK_KINDS[k].sigma if k >= 0 else 0.0 for k in t.slot_kind])
        self.pmu_slot = np.flatnonzero([k >= 0 and TASK_KINDS[k].pmu for k in t.slot_kind])
        # per-op-kind PMU ratios of the configured metric group's events
        arch = np.random.default_rng([config.seed, 0x9A0])
        self.pmu_ratio = arch.uniform(0.02, 0.85, (len(t.catalog), 8))
        self.pmu_ratio[:, len(config.aic_events) :] = 0.0
        # cube fp and int MACs (0x416 + 0x417) share the cube's cycles; icache misses (0x55) are a
        # share of the icache requests (0x54), so msprof's mac ratio and miss rate stay within [0, 1]
        events = config.aic_events
        for i, event in enumerate(events):
            if event in (0x416, 0x417):
                self.pmu_ratio[:, i] /= 2
            elif event == 0x55 and 0x54 in events:
                self.pmu_ratio[:, i] *= self.pmu_ratio[:, events.index(0x54)] / 8
        self.chunk_steps = max(1, TARGET_SLOTS_PER_CHUNK // t.n_slots)

    def draft(self, index: int, first_step: int, steps: int) -> Chunk:
        """Chunk ``index`` (steps ``first_step ...``) with times relative to each step's origin."""
        t = self.template
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, self.rank, self.device_index, index])
        n_ops, n_items, n_slots = t.n_ops, t.n_items, t.n_slots
        # Python thread: one framework op per host op, back to back
        py_dur = _ticks(rng, np.full(n_ops, 14_000), 0.3, (steps, n_ops))
        py_gap = _uniform(rng, 1_000, 4_000, (steps, n_ops))
        py_end = np.cumsum(py_dur + py_gap, axis=1)
        py_begin = py_end - py_dur
        enqueue_end = py_end - GRID_NS * 10
        enqueue_begin = enqueue_end - _uniform(rng, 600, 2_000, (steps, n_ops))
        # ACL thread: each item waits for the enqueue of its op
        pre = _uniform(rng, 1_000, 4_000, (steps, n_items))
        lnch = _ticks(rng, np.where(t.item_kind == ITEM_OP, 9_000, 6_000), 0.3, (steps, n_items))
        lnch += (t.item_kind == ITEM_HCCL) * 5 * 1_500  # all-reduce launches five slots
        post = _uniform(rng, 600, 2_400, (steps, n_items))
        is_tag = t.item_kind == ITEM_TAG
        pre[:, is_tag], post[:, is_tag] = 0, 0
        lnch[:, is_tag] = _uniform(rng, 1_000, 2_000, (steps, int(is_tag.sum())))
        item_dur = 400 + pre + lnch + post + 200
        ref = np.where(t.item_ref_op >= 0, t.item_ref_op, 0)
        ready = np.where(t.item_ref_op >= 0, enqueue_end[:, ref] + 600, 2_000)
        item_begin = serial(ready, item_dur, np.full_like(item_dur, GRID_NS))
        acl_begin = item_begin + 400
        launch_begin = acl_begin + pre
        launch_end = launch_begin + lnch
        acl_end = launch_end + post
        item_end = acl_end + 200
        # device
        slot_launch = launch_begin[:, t.slot_item] + t.slot_offset + 2 * GRID_NS
        latency = _uniform(rng, 1_500, 4_000, (steps, n_slots))
        ready_dev = slot_launch + latency
        dur = np.where(t.slot_kind >= 0, _ticks(rng, self.kind_mean, self.kind_sigma, (steps, n_slots)), 0)
        gap = _uniform(rng, 2 * GRID_NS, 1_000, (steps, n_slots))
        start = np.zeros((steps, n_slots), np.int64)
        end = np.zeros((steps, n_slots), np.int64)
        tail = t.slot_tail
        for stream in (MAIN_STREAM, SIDE_STREAM, COMM_STREAM):
            ix = self.stream_slots[stream]
            ix = ix[~tail[ix]]
            dep = t.slot_dep[ix]
            has_dep = dep >= 0
            if has_dep.any():
                r = ready_dev[:, ix]
                r[:, has_dep] = np.maximum(r[:, has_dep], end[:, dep[has_dep]])
                ready_dev[:, ix] = r
            start[:, ix] = serial(ready_dev[:, ix], dur[:, ix], gap[:, ix])
            end[:, ix] = start[:, ix] + dur[:, ix]
        tails = np.flatnonzero(tail)
        main_body = self.stream_slots[MAIN_STREAM][~tail[self.stream_slots[MAIN_STREAM]]]
        everything = end.max(axis=1)
        start[:, tails] = serial(
            np.maximum(ready_dev[:, tails], everything[:, None] + GRID_NS),
            dur[:, tails],
            gap[:, tails],
            after=end[:, main_body[-1]],
        )
        end[:, tails] = start[:, tails]
        # the step ends when the host has synchronised with the device
        sync = _uniform(rng, 20_000, 80_000, (steps,))
        length = np.maximum.reduce([py_end[:, -1], item_end[:, -1], end[:, tails[-1]]]) + sync
        # task ids per stream
        task_id = np.zeros((steps, n_slots), np.int64)
        batch = np.zeros((steps, n_slots), np.int64)
        step_index = first_step + np.arange(steps)[:, None]
        for stream, ix in self.stream_slots.items():
            ordinal = step_index * len(ix) + np.arange(len(ix))
            task_id[:, ix], batch[:, ix] = wrap_task_ids(ordinal, self.first_task_id[stream])
        total_cycle, pmu = self._pmu(rng, dur, steps)
        return Chunk(
            first_step=first_step,
            origin=np.zeros(steps, np.int64),
            length=length,
            item_begin=item_begin,
            item_end=item_end,
            acl_begin=acl_begin,
            launch_begin=launch_begin,
            launch_end=launch_end,
            acl_end=acl_end,
            py_begin=py_begin,
            py_end=py_end,
            enqueue_begin=enqueue_begin,
            enqueue_end=enqueue_end,
            slot_launch=slot_launch,
            slot_start=start,
            slot_end=end,
            slot_task_id=task_id,
            slot_batch=batch,
            total_cycle=total_cycle,
            pmu=pmu,
        )

    def _pmu(self, rng: np.random.Generator, dur: I64, steps: int) -> tuple[I64, I64]:
        """Cycles and event counts of the PMU slots.

        ``total_cycle`` sums over the blocks, as msprof's ``cal_total_time``
        expects (total_time = total_cycle / freq / block_num * ceil(block_num /
        core_num), spec §2.2), so the time msprof derives equals the duration;
        block dims never exceed the core count. Each event counts a fraction of
        the cycles, so every counter is at most ``total_cycle``.
        """
        t = self.template
        n = t.n_slots
        total = np.zeros((steps, n), np.int64)
        pmu = np.zeros((steps, n, 8), np.int64)
        ix = self.pmu_slot
        ops = t.item_op[t.slot_item[ix]]
        blocks = t.op_block_dim[ops] & 0xFFFF
        per_core = dur[:, ix] * self.profile.aic_freq_mhz // 1000
        total[:, ix] = per_core * blocks
        ratio = self.pmu_ratio[t.op_catalog[ops]] * rng.uniform(0.85, 1.0, (steps, len(ix), 8))
        pmu[:, ix, :] = np.floor(ratio * total[:, ix, None]).astype(np.int64)
        return total, pmu
