"""The directory tree of a simulated collection and its control files.

Tree (specs/cann_raw_formats.md §1.1-§1.2; framework_outputs.md §1.1, §3.8)::

    [<host>_<pid>_<YYYYmmddHHMMSSfff>_ascend_pt/]        framework torch_npu only
        profiler_info[_<rank>].json, FRAMEWORK/torch.*
    PROF_<6 digits>_<YYYYmmddHHMMSSfff>_<16 letters A-Z>/
        host/     data/, info.json, sample.json, start_info, end_info, host_start.log
        device_N/ data/, info.json.N, sample.json, start_info.N, end_info.N,
                  host_start.log.N, dev_start.log.N

Every control file gets a ``.done`` with its size. Formats are copied from
real collections (realdata/dora-robo-310b-torchnpu: single-line JSON with
sorted keys and no trailing newline; INI-like ``*_start.log`` files ending in a
newline; realdata/msinsight-torchnpu-910b: ``profiler_info_<rank>.json``
indented by 4). The host ``sample.json`` says ``"devices": "64"`` so that
msprof exports the host data (msprof_behaviour.md). Paths inside sample.json
(``result_dir``) are a fixed fictitious location so the output does not depend
on where it is written. Dates are printed in UTC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from profstream.simulate.clock import CNTVCT_DIFF, HOST_FREQ_MHZ, DeviceClock, HostClock
from profstream.simulate.config import SimulationConfig
from profstream.simulate.python_tracer import GC_THRESHOLD_MS
from profstream.simulate.writer import write_control

HOSTNAME = "sim-node"
RESULT_ROOT = "/home/user/profiling"
DRIVER_VERSION = 467731  # >= 0x072211, so msprof supports "all export" (msprof_outputs.md §4b)
#: aic_metrics group -> the torch_npu experimental-config enum name.
ACL_METRICS = {
    "ArithmeticUtilization": "ACL_AICORE_ARITHMETIC_UTILIZATION",
    "PipeUtilization": "ACL_AICORE_PIPE_UTILIZATION",
    "Memory": "ACL_AICORE_MEMORY_BANDWIDTH",
    "MemoryL0": "ACL_AICORE_L0B_AND_WIDTH",
    "ResourceConflictRatio": "ACL_AICORE_RESOURCE_CONFLICT_RATIO",
    "MemoryUB": "ACL_AICORE_MEMORY_UB",
    "L2Cache": "ACL_AICORE_L2_CACHE",
    "PipelineExecuteUtilization": "ACL_AICORE_PIPELINE_EXECUTE_UTILIZATION",
}


def _stamp(wall_ns: int, digits: int = 3) -> str:
    """``YYYYmmddHHMMSS`` plus ``digits`` digits of the fraction of a second."""
    moment = datetime.fromtimestamp(wall_ns // 10**9, UTC)
    fraction = f"{wall_ns % 10**9:09d}"[:digits]
    return moment.strftime("%Y%m%d%H%M%S") + fraction


def _date(wall_ns: int) -> str:
    """``YYYY-mm-dd HH:MM:SS.ffffff`` as start_info prints it."""
    moment = datetime.fromtimestamp(wall_ns // 10**9, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{wall_ns % 10**9 // 1000:06d}"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one rank's collection goes."""

    root: Path  # the PROF_XXX directory
    framework: Path | None  # the *_ascend_pt directory (torch_npu only)
    pid: int

    @property
    def host(self) -> Path:
        return self.root / "host"

    def device(self, device_id: int) -> Path:
        return self.root / f"device_{device_id}"

    def data(self, device_id: int | None) -> Path:
        """The ``data`` directory of the host (None) or of a device."""
        return (self.host if device_id is None else self.device(device_id)) / "data"


def make_layout(
    config: SimulationConfig, rank: int, out_dir: Path, clock: HostClock, start_ns: int
) -> Layout:
    """Create the directories of rank ``rank``'s collection under ``out_dir``."""
    rng = np.random.default_rng([config.seed, rank, 0x1A7])
    pid = int(rng.integers(2000, 60000))
    letters = "".join(chr(ord("A") + int(c)) for c in rng.integers(0, 26, 16))
    wall = start_ns + clock.wall_offset
    parent, framework = out_dir, None
    if config.framework == "torch_npu":
        framework = out_dir / f"{HOSTNAME}_{pid}_{_stamp(wall - 20_000_000)}_ascend_pt"
        (framework / "FRAMEWORK").mkdir(parents=True, exist_ok=True)
        parent = framework
    root = parent / f"PROF_{rank + 1:06d}_{_stamp(wall)}_{letters}"
    layout = Layout(root=root, framework=framework, pid=pid)
    layout.data(None).mkdir(parents=True, exist_ok=True)
    for device_id in config.device_ids(rank):
        layout.data(device_id).mkdir(parents=True, exist_ok=True)
    return layout


def _info(config: SimulationConfig, rank: int, layout: Layout, device_id: int | None) -> dict[str, Any]:
    profile = config.profile
    device_info: list[dict[str, Any]] = []
    if device_id is not None:
        device_info.append(
            {
                "ai_core_id": 0,
                "ai_core_num": profile.ai_core_num,
                "ai_cpu": ",".join(str(i) for i in range(1, 1 + profile.ai_cpu_core_num)),
                "ai_cpu_core_id": 1,
                "ai_cpu_core_num": profile.ai_cpu_core_num,
                "aic_frequency": str(profile.aic_freq_mhz),
                "aicpu_occupy_bitmap": ((1 << profile.ai_cpu_core_num) - 1) << 1,
                "aiv_frequency": str(profile.aic_freq_mhz),
                "aiv_num": profile.aiv_num,
                "ctrl_cpu": "0",
                "ctrl_cpu_core_num": 1,
                "ctrl_cpu_endian_little": 1,
                "ctrl_cpu_id": "ARMv8_Cortex_A55",
                "env_type": 3,
                "hwts_frequency": str(profile.hwts_freq_mhz),
                "id": device_id,
                "ts_cpu_core_num": 1,
            }
        )
    return {
        "CPU": [
            {
                "Frequency": f"{HOST_FREQ_MHZ:.6f}",
                "Id": 0,
                "Logical_CPU_Count": 192,
                "Name": "HiSilicon",
                "Type": "TaishanV200M",
            }
        ],
        "DeviceInfo": device_info,
        "OS": "Linux-5.10.0-60.18.0.50.oe2203.aarch64-#1 SMP Wed Mar 30 02:43:08 UTC 2022",
        "cpuCores": 192,
        "cpuNums": 192,
        "devices": "" if device_id is None else str(device_id),
        "drvVersion": DRIVER_VERSION,
        "hostUid": str(1_000_000_000_000 + config.seed),
        "hostname": HOSTNAME,
        "hwtype": "aarch64",
        "jobInfo": "NA",
        "mac": "7C-88-99-FF-AA-54",
        "memoryTotal": 1_584_896_512,
        "netCard": [],
        "netCardNums": 0,
        "pid": str(layout.pid),
        "pid_name": "python",
        "platform": "",
        "platform_version": str(profile.platform_version),
        "rank_id": rank if config.ranks > 1 else -1,
        "sysClockFreq": 100,
        "upTime": "172163.58 10636495.21",
        "version": "1.0",
    }


def _sample(config: SimulationConfig, layout: Layout, device_id: int | None) -> dict[str, Any]:
    aic_events = ",".join(f"{e:#x}" for e in config.aic_events)
    aiv_events = ",".join(f"{e:#x}" for e in config.aiv_events)
    stars = config.profile.stars
    where = "host" if device_id is None else f"device_{device_id}"
    device = "64" if device_id is None else str(device_id)
    return {
        "ai_core_metrics": config.aic_metrics_name,
        "ai_core_profiling": "on",
        "ai_core_profiling_events": aic_events,
        "ai_core_profiling_mode": "task-based",
        "aicore_sampling_interval": 10,
        "aiv_metrics": config.aic_metrics if config.profile.aiv_num else "",
        "aiv_profiling": "on" if config.profile.aiv_num else "off",
        "aiv_profiling_events": aiv_events,
        "aiv_profiling_mode": "task-based" if config.profile.aiv_num else "",
        "aiv_sampling_interval": 10,
        "devices": device,
        "hardware_mem": "off",
        "host_profiling": int(device_id is None),
        "host_sys_pid": layout.pid,
        "hwts_log": "" if stars else "on",
        "job_id": device,
        "l2CacheTaskProfiling": "on" if config.l2_events else "off",
        "l2CacheTaskProfilingEvents": ",".join(f"0x{e:X}" for e in config.l2_events),
        "hbmProfiling": "on" if config.hbm else "",
        "hbm_profiling_events": "read,write" if config.hbm else "",
        "hbmInterval": 10,
        "msproftx": "off",
        "npuAppMemProfiling": "on",
        "npuModuleMemProfiling": "on",
        "profLevel": "l1",
        "profiling_mode": "def_mode",
        "profiling_options": config.profiling_options,
        "result_dir": f"{RESULT_ROOT}/{layout.root.name}/{where}/",
        "stars_acsq_task": "on" if stars else "",
        "storageLimit": "0MB",
        "taskMemory": "on",
        "ts_keypoint": "on",
        "ts_memcpy": "on",
        "ts_timeline": "",
    }


def _time_info(which: str, mono_ns: int, wall_offset: int) -> str:
    """start_info / end_info: the begin or end keys filled, the other pair empty."""
    mono_us = mono_ns // 1000 * 1000  # whole µs, so the wall offset is exact
    wall = mono_us + wall_offset
    other = "End" if which == "Begin" else "Begin"
    return _json(
        {
            "clockMonotonicRaw": str(mono_us),
            f"collectionDate{which}": _date(wall),
            f"collectionDate{other}": "",
            f"collectionTime{which}": str(wall // 1000),
            f"collectionTime{other}": "",
        }
    )


def _start_log(section: str, mono: int, cnt: int, diff: int) -> str:
    return f"[{section}]\nclock_monotonic_raw: {mono}\ncntvct: {cnt}\ncntvct_diff: {diff}\n"


def write_start_files(
    config: SimulationConfig,
    *,
    rank: int,
    layout: Layout,
    clock: HostClock,
    devices: list[DeviceClock],
    start_ns: int,
) -> None:
    """Control files written when the collection starts."""
    host = layout.host
    write_control(host / "info.json", _json(_info(config, rank, layout, None)))
    write_control(host / "sample.json", _json(_sample(config, layout, None)))
    write_control(host / "start_info", _time_info("Begin", start_ns, clock.wall_offset))
    write_control(host / "host_start.log", _start_log("Host", clock.mono0, clock.cnt0, 0))
    for dev in devices:
        n, where = dev.device_id, layout.device(dev.device_id)
        write_control(where / f"info.json.{n}", _json(_info(config, rank, layout, n)))
        write_control(where / "sample.json", _json(_sample(config, layout, n)))
        write_control(where / f"start_info.{n}", _time_info("Begin", start_ns + 40_000, clock.wall_offset))
        write_control(
            where / f"host_start.log.{n}", _start_log(f"Device{n}", dev.host_mono, dev.host_cnt, CNTVCT_DIFF)
        )
        write_control(
            where / f"dev_start.log.{n}", f"clock_monotonic_raw: {dev.dev_mono}\ncntvct: {dev.dev_cnt}\n"
        )


def write_end_files(
    config: SimulationConfig,
    *,
    rank: int,
    layout: Layout,
    clock: HostClock,
    start_ns: int,
    end_ns: int,
) -> None:
    """Control files written when the collection stops (and torch_npu's profiler_info)."""
    write_control(layout.host / "end_info", _time_info("End", end_ns, clock.wall_offset))
    for device_id in config.device_ids(rank):
        path = layout.device(device_id) / f"end_info.{device_id}"
        write_control(path, _time_info("End", end_ns - 40_000, clock.wall_offset))
    if layout.framework is None:
        return
    name = f"profiler_info_{rank}.json" if config.ranks > 1 else "profiler_info.json"
    info: dict[str, Any] = {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": config.steps, "warmup": 1, "repeat": 1, "skip_first": 0},
                "record_shapes": True,
                "profile_memory": True,
                "with_stack": config.python_tracer,
                "with_flops": False,
                "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1",
                "_aic_metrics": ACL_METRICS[config.aic_metrics],
                "_l2_cache": config.l2_cache,
                "_msprof_tx": False,
                "_data_simplification": True,
                "record_op_args": False,
                "_export_type": ["text"],
                "_op_attr": False,
                "_gc_detect_threshold": GC_THRESHOLD_MS if config.gc_records else None,
            },
        },
        "start_info": {
            "syscnt_enable": True,
            "freq": HOST_FREQ_MHZ,
            "start_cnt": clock.cnt_at(start_ns),
            "start_monotonic": start_ns,
        },
        "end_info": {"collectionTimeEnd": end_ns + clock.wall_offset, "MonotonicTimeEnd": end_ns},
        "torch_npu_version": "2.1.0.post10",
        "cann_version": "8.0.RC3",
    }
    if config.ranks > 1:
        info["rank_id"] = rank
    (layout.framework / name).write_text(json.dumps(info, indent=4))
