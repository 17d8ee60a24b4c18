"""What a simulated collection looks like: the settings and the chip profiles they select.

Chip numbers and clocks follow specs/cann_raw_formats.md §1.5 and §3.1: 910A is
platform_version 1 (HWTS 100 MHz, AI Core 800 MHz default, 32 AI Cores, no AI
Vector cores), 910B is platform_version 5 (STARS, 50 MHz, 800 MHz, 24 AI Cores
+ 48 AI Vector cores). The PMU event ids of each ``aic_metrics`` group are the
collector presets ([COL] ``collector/dvvp/common/config/config_manager.h``
``AICORE_METRICS_LIST``, quoted in §2.2). 910B programs the CloudV2 adapter's own
lists instead (specs/msprof_outputs.md §4c; [COL] ``platform/platform_adapter_cloudv2.cpp``
``PlatformAdapterCloudV2::Init``, ``aicMetricsEventsList_`` / ``aivMetricsEventsList_``): the
AI Core side of PipeUtilization counts the Exct events and sample.json names that group
``PipeUtilizationExct`` (``PlatformAdapterInterface::SetParamsForAicMetrics``), the AI Vector
side keeps the default list, and PipelineExecuteUtilization is not offered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from profstream.errors import ConfigError
from profstream.options import parse_profiling_options

Chip = Literal["910A", "910B"]
Framework = Literal["none", "torch_npu"]

#: PMU event ids per ``aic_metrics`` group, in counter order (spec §2.2).
AIC_METRICS_EVENTS: dict[str, tuple[int, ...]] = {
    "ArithmeticUtilization": (0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F),
    "PipeUtilization": (0x8, 0xA, 0x9, 0xB, 0xC, 0xD, 0x54, 0x55),
    "Memory": (0x15, 0x16, 0x31, 0x32, 0xF, 0x10, 0x12, 0x13),
    "MemoryL0": (0x1B, 0x1C, 0x21, 0x22, 0x27, 0x28, 0x29, 0x2A),
    "ResourceConflictRatio": (0x64, 0x65, 0x66),
    "MemoryUB": (0x10, 0x13, 0x37, 0x38, 0x3D, 0x3E, 0x43, 0x44),
    "L2Cache": (0x500, 0x502, 0x504, 0x506, 0x508, 0x50A),
    "PipelineExecuteUtilization": (0x12C, 0x49, 0x4A, 0x9, 0x302, 0xC, 0xD, 0x303),
}
#: the CloudV2 (910B) AI Vector lists: the default ones, without PipelineExecuteUtilization
AIV_EVENTS_910B = {g: e for g, e in AIC_METRICS_EVENTS.items() if g != "PipelineExecuteUtilization"}
#: the CloudV2 (910B) AI Core lists: the AI Vector ones, but PipeUtilization counts mac fp/int
#: (0x416/0x417), mte1 0x302 and fixpipe 0x303 (``platform_adapter_cloudv2.cpp``)
AIC_EVENTS_910B = {**AIV_EVENTS_910B, "PipeUtilization": (0x416, 0x417, 0x9, 0x302, 0xC, 0x303, 0x54, 0x55)}
DEFAULT_SLICE_BYTES = 2048 * 1024  # the collector's sliceFileMaxKByte = 2048 (spec §1.4)
MAX_DEVICES = 64  # MSPROF_MAX_DEV_NUM; 64 is also the host's device id in sample.json


@dataclass(frozen=True, slots=True)
class ChipProfile:
    """The fixed properties of a chip that shape its raw data and control files."""

    name: Chip
    platform_version: int
    stars: bool  # STARS logs (stars_soc/ffts_profile) instead of HWTS logs (hwts/aicore)
    hwts_freq_mhz: int
    aic_freq_mhz: int
    ai_core_num: int
    aiv_num: int
    ai_cpu_core_num: int
    #: the collector's default l2CacheTaskProfilingEvents (specs/msprof_outputs.md §4c)
    l2_events: tuple[int, ...] = ()

    @property
    def tick_ns(self) -> int:
        """One device counter tick in ns (10 at 100 MHz, 20 at 50 MHz)."""
        return 1000 // self.hwts_freq_mhz


#: the collector's default L2 cache events: cloud (910A) and CloudV2 (910B) platform adapters
L2_EVENTS_910A = (0x5B, 0x59, 0x5C, 0x7D, 0x7E, 0x71, 0x79, 0x7C)
L2_EVENTS_910B = (0xF6, 0xFB, 0xFC, 0xBF, 0x90, 0x91, 0x9C, 0x9D)
CHIPS: dict[str, ChipProfile] = {
    "910A": ChipProfile("910A", 1, False, 100, 800, 32, 0, 14, L2_EVENTS_910A),
    "910B": ChipProfile("910B", 5, True, 50, 800, 24, 48, 6, L2_EVENTS_910B),
}


class SimulationConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Settings of one simulated training run.

    ``ranks`` processes each write one PROF_XXX directory (with ``torch_npu``,
    each inside its own ``*_ascend_pt`` directory) holding ``devices`` devices;
    rank ``r`` drives device ids ``r * devices ...``. ``target_bytes``, when
    set, keeps generating steps past ``steps`` until the raw data written
    reaches about that size (for benchmarks). ``profiling_options`` is kept as
    given (a PROFILING_OPTIONS JSON string, validated by ``profstream.options``)
    and copied into sample.json. With ``torch_npu``, ``with_stack`` adds the Python tracer's files
    (``torch.python_tracer_func`` / ``_hash``) and ``gc_detect`` the GC records (``torch.gc_record``),
    as torch_npu's ``with_stack`` and ``_gc_detect_threshold`` options do
    (:mod:`profstream.simulate.python_tracer`); both are on by default and ignored without a framework.
    """

    chip: Chip = "910B"
    steps: int = 10
    ops_per_step: int = 200
    devices: int = 1
    ranks: int = 1
    framework: Framework = "none"
    aic_metrics: str = "PipeUtilization"
    profiling_options: str = ""
    seed: int = 0
    l2_cache: bool = False
    hbm: bool = False  # also sample HBM traffic (hbm.data), as msprof --sys-hardware-mem=on does
    with_stack: bool = True  # torch_npu: trace Python calls (torch.python_tracer_func / _hash)
    gc_detect: bool = True  # torch_npu: record Python garbage collections (torch.gc_record)
    slice_bytes: int = DEFAULT_SLICE_BYTES
    target_bytes: int | None = None

    def __post_init__(self) -> None:
        checks = (
            ("steps", self.steps >= 1, "must be >= 1"),
            ("ops_per_step", self.ops_per_step >= 8, "must be >= 8 (a forward and a backward pass)"),
            ("devices", self.devices >= 1, "must be >= 1"),
            ("ranks", self.ranks >= 1, "must be >= 1"),
            ("ranks", self.ranks * self.devices < MAX_DEVICES, f"ranks * devices must be < {MAX_DEVICES}"),
            ("seed", self.seed >= 0, "must be >= 0"),
            ("slice_bytes", self.slice_bytes >= 1024, "must be >= 1024"),
            ("target_bytes", self.target_bytes is None or self.target_bytes > 0, "must be > 0"),
        )
        for key, ok, message in checks:
            if not ok:
                msg = f"{message}, got {getattr(self, key)!r}"
                raise ConfigError(msg, key=f"simulate.{key}")
        if self.aic_metrics not in self.aic_groups:
            known = ", ".join(self.aic_groups)
            msg = f"unknown aic_metrics group {self.aic_metrics!r} on {self.chip}; known: {known}"
            raise ConfigError(msg, key="simulate.aic_metrics")
        if self.profiling_options:
            parse_profiling_options(self.profiling_options)  # a ConfigError names the bad option

    @property
    def profile(self) -> ChipProfile:
        return CHIPS[self.chip]

    @property
    def python_tracer(self) -> bool:
        """Whether the run writes torch_npu's Python tracer files."""
        return self.framework == "torch_npu" and self.with_stack

    @property
    def gc_records(self) -> bool:
        """Whether the run writes torch_npu's GC records."""
        return self.framework == "torch_npu" and self.gc_detect

    @property
    def aic_groups(self) -> dict[str, tuple[int, ...]]:
        """The AI Core event list of each ``aic_metrics`` group this chip's collector offers."""
        return AIC_EVENTS_910B if self.chip == "910B" else AIC_METRICS_EVENTS

    @property
    def aic_events(self) -> tuple[int, ...]:
        """The events the AI Cores count (sample.json ``ai_core_profiling_events``)."""
        return self.aic_groups[self.aic_metrics]

    @property
    def aiv_events(self) -> tuple[int, ...]:
        """The events the AI Vector cores count (none on a chip without them)."""
        return AIV_EVENTS_910B[self.aic_metrics] if self.profile.aiv_num else ()

    @property
    def aic_metrics_name(self) -> str:
        """sample.json's ``ai_core_metrics``: the collector renames 910B's AIC PipeUtilization."""
        exct = self.chip == "910B" and self.aic_metrics == "PipeUtilization"
        return "PipeUtilizationExct" if exct else self.aic_metrics

    @property
    def l2_events(self) -> tuple[int, ...]:
        """The L2 cache events the devices count (none without ``l2_cache``)."""
        return self.profile.l2_events if self.l2_cache else ()

    def device_ids(self, rank: int) -> tuple[int, ...]:
        """The device ids rank ``rank`` profiles."""
        return tuple(range(rank * self.devices, (rank + 1) * self.devices))
