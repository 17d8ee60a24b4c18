"""AI Core / AI Vector PMU metrics of op_summary: the columns of each ``aic_metrics`` group, and their values.

Spec: msprof_outputs.md §4c (formulas, event lists, column layouts) and §2.1; cann_raw_formats.md §2.2
(task-based counters, ``cal_total_time``) and §2.5 (STARS context / block PMU).

Counters map positionally: counter ``pmu_i`` of a record counts event ``i`` of sample.json
``ai_core_profiling_events`` (AIV records: ``aiv_profiling_events``) ([MSP] ``mscalculate/aic/aic_utils.py``).

Two layouts, as msprof's two implementations write them (msprof_outputs.md §0, §4c):

* chip CHIP_V4_1_0 (platform 5, the C++ all-export summary): ``aicore_time, aic_total_cycles, aic_<metrics>,
  aiv_time, aiv_total_cycles, aiv_<metrics>`` in the calculators' enum order ([MSP]
  ``csrc/domain/entities/metric/include/metric.h``), without the ``UNSUPPORTED_HEADER`` columns
  (``csrc/domain/data_process/ai_task/metric_processor.cpp``), then ``cube_utilization`` when
  ``aic_mac_ratio`` and ``aic_total_cycles`` are columns. The AIC side follows sample.json
  ``ai_core_metrics`` and the AIV side ``aiv_metrics``: the C++ sample.json reader maps each through its
  own ``aicMetricsMap`` / ``aivMetricsMap`` (``csrc/domain/services/device_context/sample_info.cpp``), and
  the 910B collector writes ``PipeUtilizationExct`` for the AIC side of PipeUtilization, ``PipeUtilization``
  for the AIV side (``platform_adapter_interface.cpp`` ``SetParamsForAicMetrics`` /
  ``SetParamsForAivMetrics``). An AIC ``PipeUtilization`` whose events are the Exct list (0x416, 0x417
  present; ``platform_adapter_cloudv2.cpp``) is read as PipeUtilizationExct too;
* every other chip (the Python path): un-prefixed ``aicore_time, total_cycles, <metrics>`` in the order of
  ``AiCoreMetricsManager.AICORE_METRICS_LIST_DEFAULT`` with a ``*_time`` before each pipe ratio
  (``viewer/calculate_rts_data.py`` ``get_metrics_from_sample_config``), ``cube_fops, vector_fops`` after
  ArithmeticUtilization, ``memory_bound`` after the pipe groups, ``cube_utilization`` when ``mac_ratio`` and
  ``total_cycles`` are columns (``DataManager.add_cube_usage``), and without the columns msprof's
  ``AicPmuUtils._remove_list`` drops (``l2_read_bw``/``l2_write_bw`` of Memory, ``ub_*_bw_mte`` of MemoryUB).

PipelineExecuteUtilization (a STARS-chip group) keeps the ``*_exe_*`` names of ``AICORE_METRICS_LIST_DEFAULT``
(``FftsPmuModel.create_table``) over the values ``FftsPmuCalculator._set_ffts_table_name_list`` lists in the
same positions: vec r12c, mac r49 + r4a (``_calculate_mac_ratio_extra``), scalar r9, mte1 r302, mte2 rc,
mte3 rd, fixpipe r303, each ratio with its time.

Names are msprof's without unit suffixes and with ``_extra`` stripped; values keep msprof's units (µs for
``*_time``, GB/s for ``*_bw``, KB for ``*_datas``, raw counts for L2Cache and ``Custom:`` columns ``r<hex>``).

Choices (where the spec is unsure or the two implementations differ):

* bandwidth constants: the C++ ones on CHIP_V4_1_0 (l1_write 128x8, l0b_read 256x16, l0c_*_cube 256x32),
  the Python ``PmuCalculateFunc`` ones elsewhere, as msprof's all-export does (§4c table);
* ``icache_miss_rate`` = r55/r54; when r54 is 0 the C++ path gives 0 and the Python path keeps r55/cycles
  (``_calculate_icache_miss_rate`` leaves the ratio in place), and each layout follows its implementation;
* a task that counted no cycles: its ratios and bandwidths are 0 in the C++ path
  (``Calculator::CalculatorMetricByAdditions*``) and the raw counts in the Python path, whose
  ``CalculateAiCoreData._cal_pmu_metrics`` skips the formula when ``task_cyc`` is 0; each layout follows its
  implementation (fops stay 0 in both);
* ``memory_bound`` and ``cube_utilization`` follow msprof's Python path (``viewer/runtime_report.py``
  ``add_mem_bound`` / ``cube_usage``), which reads the ratios after op_summary's SQL has rounded them to 3
  decimals: ``memory_bound`` = mte2 / max(vec, mac) of the rounded ratios, 0 when that max is 0;
  ``cube_utilization`` is 0 when the rounded mac ratio, the cycles or the duration is 0. (The C++ path's
  ``MetricProcessor::AddMemoryBound`` gives null when mac or vec is 0; memory_bound exists only in the
  un-prefixed layout, which msprof always writes with its Python path. Its cube_utilization,
  ``MetricProcessor::AddCubeUsageWithoutDur`` then ``OpSummaryAssembler::AddCubeUsage``, is 0 only when
  the duration is 0 and does not look at the mac ratio; the real A2 kernel_details in shared/realdata has no
  row with cycles and a zero mac ratio to tell the two apart.)
* frequency: info.json ``aic_frequency`` for every metric, AIC and AIV alike
  (``InfoConfReader.get_freq('aic')``); the per-record low-power frequency that msprof uses for the times
  when freq records exist (C++ ``MetricCalculator::CalculatePmuMetric`` on CHIP_V4_1_0, Python
  ``FftsPmuCalculator.calculate_total_time``) is not used;
* no rounding: the table keeps full precision and the layouts round (op_summary: 3 decimals, cycles as
  integers), except that ``aicore_time`` is rounded to 2 decimals before the ``*_time`` products on the
  Python-path chips, as ``Utils.cal_total_time`` does; that includes ``Custom:`` groups on CHIP_V4_1_0,
  whose counters msprof's C++ device parser leaves to the Python ``FftsPmuCalculator``
  (``msinterface/msprof_c_interface.py`` ``dump_device_data``).

The split between device and host side: ``aicore_time``/``aiv_time`` and every ``*_time`` need the GE block
dim (``block_num`` / ``mix_block_num``), which only the host-side node info carries. :func:`device_metrics`
(called by :class:`~profstream.engine.operators.device_tasks.DeviceTasks`) computes everything else and
leaves those columns null; the host-join operator calls :func:`finish_metrics` on the joined ``tasks`` batch
(it reads ``block_dim``, ``mix_block_dim`` and ``task_type``) to fill them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine.metadata import DirMetadata
from profstream.errors import ConfigError

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: platform_version of CHIP_V4_1_0 (Atlas A2/A3), the chip of the C++ summary and the aic_/aiv_ layout
CHIP_V4_1_0 = 5
#: CHIP_V3_x (mdc, lhisi, dc): other vector_fops lane widths (``CalculateAiCoreData.get_vector_num``)
CHIP_V3 = frozenset({2, 3, 4})
#: 2**33: bytes/s -> GB/s as msprof divides (8589934592.0)
_GB = float(1 << 33)
CUSTOM_PREFIX = "Custom:"
#: columns msprof's C++ summary removes on CHIP_V4_1_0 (``metric_processor.cpp`` ``UNSUPPORTED_HEADER``)
UNSUPPORTED_V4 = frozenset(
    {
        "aic_vec_ratio",
        "aic_vec_time",
        "aiv_mac_ratio",
        "aiv_mac_time",
        "aiv_mte1_ratio",
        "aiv_mte1_time",
        "aic_ub_read_bw",
        "aic_ub_write_bw",
        "aiv_l1_read_bw",
        "aiv_l1_write_bw",
        "aic_l0c_read_bw",
        "aic_l0c_write_bw",
        "aiv_l0a_read_bw",
        "aiv_l0a_write_bw",
        "aiv_l0b_read_bw",
        "aiv_l0b_write_bw",
        "aiv_l0c_read_bw_cube",
        "aiv_l0c_write_bw_cube",
        "aic_ub_read_bw_mte",
        "aic_ub_write_bw_mte",
        "aic_ub_read_bw_vector",
        "aic_ub_write_bw_vector",
        "aiv_mac_fp16_ratio",
        "aiv_mac_int8_ratio",
        "aic_vec_fp32_ratio",
        "aic_vec_fp16_ratio",
        "aic_vec_int32_ratio",
        "aic_vec_misc_ratio",
        "aic_vec_bankgroup_cflt_ratio",
        "aic_vec_bank_cflt_ratio",
        "aic_vec_resc_cflt_ratio",
        "aic_vector_fops",
        "aiv_cube_fops",
        "aiv_fixpipe_ratio",
        "aiv_fixpipe_time",
    }
)


# --------------------------------------------------------------------------- formulas


@dataclass(frozen=True, slots=True)
class Block:
    """The counters of one core type for ``n`` tasks: total cycles and one row per programmed event."""

    cycles: F64  # (n,)
    counts: Mapping[int, F64]  # event id -> (n,)
    freq_hz: float
    cpp: bool  # CHIP_V4_1_0 C++ formulas, else Python's
    chip: int

    def r(self, *events: int) -> F64:
        """The summed counts of ``events``; NaN where an event was not programmed."""
        total = np.zeros_like(self.cycles)
        for event in events:
            total = total + self.counts.get(event, np.full_like(self.cycles, np.nan))
        return total

    def no_cycles(self, values: F64) -> F64:
        """A per-cycle metric of a task that counted no cycles: 0 in C++, the raw count in Python
        (``CalculateAiCoreData._cal_pmu_metrics`` applies no formula when ``task_cyc`` is 0)."""
        return np.zeros_like(values) if self.cpp else values

    def per_cycle(self, values: F64) -> F64:
        """``values / total_cycles``; see :meth:`no_cycles` where the task counted no cycles."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.cycles != 0, values / self.cycles, self.no_cycles(values))


Formula = Callable[[Block], F64]


def ratio(*events: int) -> Formula:
    """A ``*_ratio``: the summed counts of ``events`` per total cycle."""
    return lambda b: b.per_cycle(b.r(*events))


def bandwidth(event: int, python: float, cpp: float | None = None) -> Formula:
    """GB/s: ``count * pipe_size * scalar / (cycles / freq) / 2**33``; see :meth:`Block.no_cycles` without
    cycles."""

    def formula(b: Block) -> F64:
        factor = cpp if (b.cpp and cpp is not None) else python
        count = b.r(event)
        with np.errstate(divide="ignore", invalid="ignore"):
            seconds = b.cycles / b.freq_hz
            value = count * factor / seconds / _GB
        return np.where(b.cycles != 0, value, b.no_cycles(count))

    return formula


def _icache_miss_rate(b: Block) -> F64:
    req, miss = b.r(0x54), b.r(0x55)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = miss / req
    fallback = np.zeros_like(miss) if b.cpp else b.per_cycle(miss)
    return np.where(req != 0, rate, fallback)


def _cube_fops(b: Block) -> F64:
    return np.where(b.cycles != 0, b.r(0x49) * 8192.0 + b.r(0x4A) * 16384.0, 0.0)


def _vector_fops(b: Block) -> F64:
    fp32, int32, misc = (64.0, 16.0, 16.0) if b.chip in CHIP_V3 else (64.0, 64.0, 32.0)
    value = b.r(0x4C) * 128.0 + b.r(0x4D) * 64.0 + b.r(0x4B) * fp32 + b.r(0x4E) * int32 + b.r(0x4F) * misc
    return np.where(b.cycles != 0, value, 0.0)


def scaled(factor: float, *terms: tuple[int, float]) -> Formula:
    """``factor * sum(sign * count)``: MemoryAccess data volumes in KB."""

    def formula(b: Block) -> F64:
        total = np.zeros_like(b.cycles)
        for event, sign in terms:
            total = total + sign * b.r(event)
        return factor * total

    return formula


def raw(event: int) -> Formula:
    """The count itself (L2Cache, ``Custom:``)."""
    return lambda b: b.r(event)


def _later(b: Block) -> F64:
    """A ``*_time``: filled by :func:`finish_metrics` (needs the block dim); null on the device side."""
    return np.full_like(b.cycles, np.nan)


def _pipe(
    pairs: Sequence[tuple[str, Formula]], tail: Sequence[tuple[str, Formula]]
) -> list[tuple[str, Formula]]:
    """``<x>_time, <x>_ratio`` for each pipe ratio, then the tail metrics."""
    out: list[tuple[str, Formula]] = []
    for name, formula in pairs:
        out += [(name.replace("_ratio", "_time"), _later), (name, formula)]
    return [*out, *tail]


_ICACHE = ("icache_miss_rate", _icache_miss_rate)
_PIPE = _pipe(
    [
        ("vec_ratio", ratio(0x8)),
        ("mac_ratio", ratio(0xA)),
        ("scalar_ratio", ratio(0x9)),
        ("mte1_ratio", ratio(0xB)),
        ("mte2_ratio", ratio(0xC)),
        ("mte3_ratio", ratio(0xD)),
    ],
    [_ICACHE],
)
_PIPE_EXCT = _pipe(
    [
        ("mac_ratio", ratio(0x416, 0x417)),  # mac_ratio_extra
        ("scalar_ratio", ratio(0x9)),
        ("mte1_ratio", ratio(0x302)),  # mte1_ratio_extra
        ("mte2_ratio", ratio(0xC)),
        ("fixpipe_ratio", ratio(0x303)),
    ],
    [_ICACHE],
)
_PIPE_EXE = _pipe(
    [
        ("vec_exe_ratio", ratio(0x12C)),
        ("mac_exe_ratio", ratio(0x49, 0x4A)),
        ("scalar_exe_ratio", ratio(0x9)),
        ("mte1_exe_ratio", ratio(0x302)),
        ("mte2_exe_ratio", ratio(0xC)),
        ("mte3_exe_ratio", ratio(0xD)),
        ("fixpipe_exe_ratio", ratio(0x303)),
    ],
    [],
)
_ARITH = [
    ("mac_fp16_ratio", ratio(0x49)),
    ("mac_int8_ratio", ratio(0x4A)),
    ("vec_fp32_ratio", ratio(0x4B)),
    ("vec_fp16_ratio", ratio(0x4C, 0x4D)),
    ("vec_int32_ratio", ratio(0x4E)),
    ("vec_misc_ratio", ratio(0x4F)),
    ("cube_fops", _cube_fops),
    ("vector_fops", _vector_fops),
]
_BW = {
    "ub_read_bw": bandwidth(0x15, 256 * 4),
    "ub_write_bw": bandwidth(0x16, 256 * 4),
    "l1_read_bw": bandwidth(0x31, 256 * 16),
    "l1_write_bw": bandwidth(0x32, 256 * 8, 128 * 8),
    "l2_read_bw": bandwidth(0xF, 256 * 8),
    "l2_write_bw": bandwidth(0x10, 256 * 8),
    "main_mem_read_bw": bandwidth(0x12, 8 * 8),
    "main_mem_write_bw": bandwidth(0x13, 8 * 8),
    "l0a_read_bw": bandwidth(0x1B, 256 * 16),
    "l0a_write_bw": bandwidth(0x1C, 256 * 16),
    "l0b_read_bw": bandwidth(0x21, 256 * 8, 256 * 16),
    "l0b_write_bw": bandwidth(0x22, 256 * 8),
    "l0c_read_bw": bandwidth(0x27, 256 * 8),
    "l0c_write_bw": bandwidth(0x29, 256 * 8),
    "l0c_read_bw_cube": bandwidth(0x28, 256 * 8, 256 * 32),
    "l0c_write_bw_cube": bandwidth(0x2A, 256 * 8, 256 * 32),
    "ub_read_bw_vector": bandwidth(0x43, 128 * 2),
    "ub_write_bw_vector": bandwidth(0x44, 128 * 2),
    "ub_read_bw_scalar": bandwidth(0x37, 128 * 1),
    "ub_write_bw_scalar": bandwidth(0x38, 128 * 1),
}


def _bw(*names: str) -> list[tuple[str, Formula]]:
    return [(name, _BW[name]) for name in names]


_L0 = _bw(
    "l0a_read_bw",
    "l0a_write_bw",
    "l0b_read_bw",
    "l0b_write_bw",
    "l0c_read_bw",
    "l0c_write_bw",
    "l0c_read_bw_cube",
    "l0c_write_bw_cube",
)
_UB = _bw("ub_read_bw_vector", "ub_write_bw_vector", "ub_read_bw_scalar", "ub_write_bw_scalar")
_CONFLICT = [
    ("vec_bankgroup_cflt_ratio", ratio(0x64)),
    ("vec_bank_cflt_ratio", ratio(0x65)),
    ("vec_resc_cflt_ratio", ratio(0x66)),
]
_L2_CACHE = [
    ("write_cache_hit", raw(0x500)),
    ("write_cache_miss_allocate", raw(0x502)),
    ("r0_read_cache_hit", raw(0x504)),
    ("r0_read_cache_miss_allocate", raw(0x506)),
    ("r1_read_cache_hit", raw(0x508)),
    ("r1_read_cache_miss_allocate", raw(0x50A)),
]
_MEMORY_ACCESS = [
    ("read_main_memory_datas", scaled(0.125, (0x50D, 1), (0x50E, 1))),
    ("write_main_memory_datas", scaled(0.125, (0x50C, 1))),
    ("GM_to_L1_datas", scaled(0.25, (0x32, 1), (0x206, -1))),
    ("L0C_to_L1_datas", scaled(0.125, (0x206, 1))),
    ("L0C_to_GM_datas", scaled(0.125, (0x20C, 1), (0x206, -1))),
    ("GM_to_UB_datas", scaled(0.125, (0x3E, 1))),
    ("UB_to_GM_datas", scaled(0.125, (0x3D, 1))),
]

#: metrics per group, Python path (un-prefixed layout)
PYTHON_GROUPS: Mapping[str, list[tuple[str, Formula]]] = {
    "PipeUtilization": _PIPE,
    "PipeUtilizationExct": _PIPE_EXCT,
    "PipelineExecuteUtilization": _PIPE_EXE,
    "ArithmeticUtilization": _ARITH,
    "Memory": _bw(
        "ub_read_bw", "ub_write_bw", "l1_read_bw", "l1_write_bw", "main_mem_read_bw", "main_mem_write_bw"
    ),
    "MemoryL0": _L0,
    "ResourceConflictRatio": _CONFLICT,
    "MemoryUB": _UB,
    "L2Cache": _L2_CACHE,
    "MemoryAccess": _MEMORY_ACCESS,
}
#: metrics per group, C++ path (CHIP_V4_1_0), in the calculators' enum order
CPP_GROUPS: Mapping[str, list[tuple[str, Formula]]] = {
    **PYTHON_GROUPS,
    "Memory": _bw(
        "ub_read_bw",
        "ub_write_bw",
        "l1_read_bw",
        "l1_write_bw",
        "main_mem_read_bw",
        "main_mem_write_bw",
        "l2_read_bw",
        "l2_write_bw",
    ),
}


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """The metric columns of one core type: ``prefix`` + metric names, with their formulas and events."""

    core: str  # "aic" or "aiv": whose counters, core count and (on CHIP_V4_1_0) column prefix
    prefix: str  # "" (un-prefixed layout), "aic_" or "aiv_"
    group: str
    events: tuple[int, ...]
    time_column: str  # aicore_time / aiv_time
    cycles_column: str  # total_cycles / aic_total_cycles / aiv_total_cycles
    metrics: tuple[tuple[str, Formula], ...]  # (column, formula), unsupported columns removed

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.time_column, self.cycles_column, *(name for name, _ in self.metrics))

    @property
    def pipe_times(self) -> tuple[tuple[str, str], ...]:
        """``(time column, ratio column)`` of every ``*_time`` metric."""
        names = {name for name, _ in self.metrics}
        return tuple(
            (name, name.replace("_time", "_ratio"))
            for name, _ in self.metrics
            if name.endswith("_time") and name.replace("_time", "_ratio") in names
        )


@dataclass(frozen=True, slots=True)
class MetricLayout:
    """The PMU metric columns of one device and what computing them needs (see the module docstring)."""

    chip: int
    group: str  # sample.json ai_core_metrics ("" when PMU collection is off)
    blocks: tuple[BlockLayout, ...]
    aiv_events: tuple[int, ...]  # AIV counters' events (the un-prefixed layout's HWTS AIV log)
    freq_mhz: float
    ai_core_num: int
    aiv_num: int
    memory_bound: tuple[str, str, str] | None  # (mte2, mac, vec) ratio columns
    cube_utilization: bool

    @property
    def split(self) -> bool:
        """The CHIP_V4_1_0 aic_/aiv_ layout."""
        return self.chip == CHIP_V4_1_0

    @property
    def columns(self) -> tuple[str, ...]:
        out = [c for block in self.blocks for c in block.columns]
        if self.memory_bound:
            out.append("memory_bound")
        if self.cube_utilization:
            out.append("cube_utilization")
        return tuple(out)


def parse_events(text: str) -> tuple[int, ...]:
    """sample.json's comma-separated hex event list (``"0x8,0xa"``) as ints."""
    try:
        return tuple(int(part, 16) for part in text.split(",") if part.strip())
    except ValueError:
        msg = f"expected comma-separated hex PMU event ids, got {text!r}"
        raise ConfigError(msg, key="sample.json.ai_core_profiling_events") from None


def _group_metrics(
    group: str, core: str, events: tuple[int, ...], cpp: bool
) -> tuple[str, list[tuple[str, Formula]]]:
    """The resolved group name and its metrics for one core type."""
    if group.startswith(CUSTOM_PREFIX):
        return group, [(f"r{event:x}", raw(event)) for event in events]
    if cpp and core == "aic" and group == "PipeUtilization" and {0x416, 0x417} <= set(events):
        group = "PipeUtilizationExct"
    table = CPP_GROUPS if cpp else PYTHON_GROUPS
    if group not in table:
        msg = f"unknown aic_metrics group {group!r}; known: {', '.join(sorted(table))}, Custom:<events>"
        raise ConfigError(msg, key="sample.json.ai_core_metrics")
    return group, table[group]


def build_layout(
    group: str,
    chip: int,
    *,
    aic_events: Sequence[int] = (),
    aiv_events: Sequence[int] = (),
    freq_mhz: float = 0.0,
    ai_core_num: int = 0,
    aiv_num: int = 0,
    aiv_group: str = "",
) -> MetricLayout:
    """The metric layout of ``group`` on ``chip`` (platform_version) with the programmed events.

    ``aiv_group`` is the AIV side's group on CHIP_V4_1_0 (sample.json ``aiv_metrics``); ``group`` when empty.
    """
    if not group:
        return MetricLayout(chip, group, (), tuple(aiv_events), freq_mhz, ai_core_num, aiv_num, None, False)
    cpp = chip == CHIP_V4_1_0
    blocks: list[BlockLayout] = []
    cores = (
        (("aic", group, tuple(aic_events)), ("aiv", aiv_group or group, tuple(aiv_events)))
        if cpp
        else (("aic", group, tuple(aic_events)),)
    )
    for core, core_group, events in cores:
        resolved, metrics = _group_metrics(core_group, core, events, cpp)
        if cpp:
            prefix = f"{core}_"
            kept = tuple((prefix + name, f) for name, f in metrics if prefix + name not in UNSUPPORTED_V4)
            time_column = "aicore_time" if core == "aic" else "aiv_time"
            blocks.append(
                BlockLayout(core, prefix, resolved, events, time_column, f"{core}_total_cycles", kept)
            )
        else:
            kept = tuple(metrics)
            blocks.append(BlockLayout(core, "", resolved, events, "aicore_time", "total_cycles", kept))
    names = {c for b in blocks for c in b.columns}
    memory_bound = None
    if not cpp:
        for suffix in ("_ratio", "_exe_ratio"):
            wanted = (f"mte2{suffix}", f"mac{suffix}", f"vec{suffix}")
            if set(wanted) <= names:
                memory_bound = wanted
    # msprof's Python path adds it from the un-prefixed columns too (DataManager.add_cube_usage)
    prefix = "aic_" if cpp else ""
    cube = {f"{prefix}mac_ratio", f"{prefix}total_cycles"} <= names
    return MetricLayout(
        chip, group, tuple(blocks), tuple(aiv_events), freq_mhz, ai_core_num, aiv_num, memory_bound, cube
    )


def metric_columns(
    group: str, chip: int, *, aic_events: Sequence[int] = (), aiv_events: Sequence[int] = ()
) -> list[str]:
    """The metric columns of ``group`` on ``chip``, for ``device_tasks_schema`` and ``tasks_schema``."""
    return list(build_layout(group, chip, aic_events=aic_events, aiv_events=aiv_events).columns)


def layout_of(metadata: DirMetadata) -> MetricLayout:
    """The metric layout of a device dir: sample.json gives group and events, info.json chip and clocks."""
    sample = metadata.sample
    info = metadata.device_info
    return build_layout(
        sample.ai_core_metrics,
        metadata.info.platform_version,
        aic_events=parse_events(sample.ai_core_profiling_events),
        aiv_events=parse_events(sample.aiv_profiling_events),
        freq_mhz=float(info.aic_mhz),
        ai_core_num=info.ai_core_num,
        aiv_num=info.aiv_num,
        aiv_group=sample.aiv_metrics,
    )


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Counters:
    """The PMU counters of ``n`` tasks: per core type total cycles, ``(8, n)`` counters and presence."""

    aic_cycles: I64
    aic: I64
    aiv_cycles: I64
    aiv: I64
    has_aic: npt.NDArray[np.bool_]
    has_aiv: npt.NDArray[np.bool_]

    def block(self, layout: MetricLayout, core: str, events: tuple[int, ...]) -> Block:
        """The formulas' view of one core type's counters, event ``events[i]`` in counter ``i``."""
        cycles, counts = (self.aic_cycles, self.aic) if core == "aic" else (self.aiv_cycles, self.aiv)
        values = {
            event: counts[i].astype(np.float64) for i, event in enumerate(events) if i < counts.shape[0]
        }
        return Block(cycles.astype(np.float64), values, layout.freq_mhz * 1e6, layout.split, layout.chip)


#: decimals op_summary rounds PMU values to (``ai_core_op_report.py`` ``_get_ai_core_float_cols``)
RATIO_DECIMALS = 3


def device_metrics(layout: MetricLayout, counters: Counters, duration_ns: I64) -> dict[str, F64]:
    """Every metric column of ``layout`` for ``n`` tasks (NaN = null); the ``*_time`` columns stay NaN.

    On CHIP_V4_1_0 a task with a PMU record of one core type only gets zeros on the other side (msprof's
    ``MetricSummaryPersistence::ConstructData``); a task without any PMU record gets nulls. In the
    un-prefixed layout a task's counters are its AIC or its AIV counters (HWTS AIV log), each with its own
    events.
    """
    n = len(duration_ns)
    out: dict[str, F64] = {}
    has_any = counters.has_aic | counters.has_aiv
    for block in layout.blocks:
        cores = (block.core,) if layout.split else ("aic", "aiv")
        values = {name: np.full(n, np.nan) for name in block.columns}
        for core in cores:
            rows = has_any if layout.split else (counters.has_aic if core == "aic" else counters.has_aiv)
            if not rows.any():
                continue
            events = block.events if layout.split or core == "aic" else (layout.aiv_events or block.events)
            inputs = counters.block(layout, core, events)
            values[block.cycles_column][rows] = inputs.cycles[rows]
            for name, formula in block.metrics:
                values[name][rows] = formula(inputs)[rows]
        out |= values
    if layout.memory_bound:
        mte2, mac, vec = (np.round(out[c], RATIO_DECIMALS) for c in layout.memory_bound)
        largest = np.maximum(mac, vec)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(largest != 0, mte2 / largest, 0.0)
        out["memory_bound"] = np.where(np.isfinite(vec), bound, np.nan)
    if layout.cube_utilization:
        prefix = "aic_" if layout.split else ""
        cycles = out[f"{prefix}total_cycles"]
        mac = np.round(out[f"{prefix}mac_ratio"], RATIO_DECIMALS)
        scale = layout.freq_mhz * layout.ai_core_num
        idle = (mac == 0) | (cycles == 0) | (duration_ns == 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            usage = np.where(idle, 0.0, cycles / scale * 100.0 / (duration_ns / 1000.0))
        out["cube_utilization"] = np.where(np.isfinite(mac) & (scale > 0), usage, np.nan)
    return out


def finish_metrics(batch: pa.RecordBatch, layout: MetricLayout) -> pa.RecordBatch:
    """Fill ``aicore_time``/``aiv_time`` and every ``*_time`` of a joined ``tasks`` batch.

    ``time = total_cycles * 1e6 / freq_Hz / block_num * ceil(block_num / core_num)`` (µs; cann_raw_formats.md
    §2.2 ``cal_total_time``) and ``<x>_time = time * <x>_ratio``. ``block_num`` is the batch's ``block_dim``,
    or ``mix_block_dim`` for the secondary core of a MIX task (the AIV side of MIX_AIC, the AIC side of
    MIX_AIV; ``FftsPmuCalculator.calculate_total_time``); ``core_num`` is ``ai_core_num`` (``aiv_num`` for the
    AIV block, and for AI_VECTOR_CORE tasks in the un-prefixed layout). A task with PMU counters but
    without a block dim (no GE node info, or 0), core count or frequency gets times of 0, as both msprof
    paths give (``Utils.cal_total_time``, ``Calculator::CalculatorTotalTime``); a task without counters keeps
    null times.
    """
    if not layout.blocks:
        return batch
    names = batch.schema.names
    block_dim = _column(batch, "block_dim")
    mix_dim = _column(batch, "mix_block_dim")
    task_type = batch.column("task_type") if "task_type" in names else pa.nulls(batch.num_rows, pa.string())
    task_type = pc.cast(task_type, pa.string()) if pa.types.is_dictionary(task_type.type) else task_type
    is_type = {
        t: np.asarray(pc.fill_null(pc.equal(task_type, t), False))
        for t in ("MIX_AIC", "MIX_AIV", "AI_VECTOR_CORE")
    }
    for block in layout.blocks:
        secondary = is_type["MIX_AIV"] if block.core == "aic" else is_type["MIX_AIC"]
        blocks = np.where(secondary, mix_dim, block_dim) if layout.split else block_dim
        if layout.split:
            cores = np.full(batch.num_rows, layout.aiv_num if block.core == "aiv" else layout.ai_core_num)
        else:
            vector = is_type["AI_VECTOR_CORE"] & (layout.chip in CHIP_V3)
            cores = np.where(vector, layout.aiv_num, layout.ai_core_num)
        cycles = _column(batch, block.cycles_column)
        with np.errstate(divide="ignore", invalid="ignore"):
            waves = np.ceil(blocks / np.maximum(cores, 1))
            time = cycles / layout.freq_mhz / blocks * waves
        known = (blocks > 0) & (cores > 0) & (layout.freq_mhz > 0)
        time = np.where(np.isnan(cycles), np.nan, np.where(known, time, 0.0))
        if not layout.split or layout.group.startswith(CUSTOM_PREFIX):
            time = np.round(time, 2)
        batch = _set(batch, block.time_column, time)
        for time_column, ratio_column in block.pipe_times:
            batch = _set(batch, time_column, time * _column(batch, ratio_column))
    return batch


def _column(batch: pa.RecordBatch, name: str) -> F64:
    """A numeric column as float64 with NaN for nulls (all NaN when the batch lacks it)."""
    if name not in batch.schema.names:
        return np.full(batch.num_rows, np.nan)
    values = pc.cast(batch.column(name), pa.float64())
    return np.asarray(values.to_numpy(zero_copy_only=False), np.float64)


def _set(batch: pa.RecordBatch, name: str, values: F64) -> pa.RecordBatch:
    array = to_arrow(values)
    index = batch.schema.get_field_index(name)
    if index < 0:
        return batch.append_column(name, array)
    return batch.set_column(index, name, array)


def to_arrow(values: F64) -> pa.Array:
    """float64 values with NaN as null."""
    return pa.array(values, pa.float64(), mask=np.isnan(values))
