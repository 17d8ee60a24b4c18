"""Synthetic PROF_XXX collections in the real raw formats, with their ground truth.

:func:`simulate` writes, for each rank, a PROF_XXX directory (inside a
``*_ascend_pt`` directory with FRAMEWORK files when the framework is
torch_npu) whose raw files are produced by the codecs' ``encode``, sliced and
marked as the collector does; with ``truth_dir`` it also writes Parquet truth
tables (:mod:`profstream.simulate.truth`). Generation is vectorised per chunk
of steps, so memory stays bounded and large outputs (``target_bytes``) are
cheap to make.

Families written: device ``hwts``, ``aicore`` (910A) or ``stars_soc``,
``ffts_profile``, ``lpm_freq`` (910B); ``ts_track``, ``npu_mem``,
``npu_module_mem``; host ``api_event``, ``task_track``, ``node_basic_info``,
``hccl_op_info``, ``memcpy_info``, ``expand_stream_spec`` (910B),
``tensor_info``, ``hccl_info``, ``task_memory_info``, ``graph_id_map``,
``hash_dic``, ``type_info_dic``; framework ``torch_op_range``,
``torch_op_mark``, ``torch_memory_usage``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from profstream.errors import InputPathError
from profstream.events import SIMULATION_WRITTEN, get_logger
from profstream.simulate.clock import DeviceClock, device_clock, host_clock
from profstream.simulate.config import SimulationConfig
from profstream.simulate.layout import Layout, make_layout, write_end_files, write_start_files
from profstream.simulate.records import (
    DeviceContext,
    HostKey,
    Names,
    Rows,
    concat,
    device_rows,
    encode,
    framework_rows,
    host_rows,
    host_start_rows,
)
from profstream.simulate.truth import Truth
from profstream.simulate.workload import GRID_NS, Template, Workload, build_template, place
from profstream.simulate.writer import PlainWriter, SliceWriter

__all__ = ["FamilyCount", "SimulationConfig", "SimulationResult", "simulate"]

#: device family -> file base name (spec §1.3); the device id and slice number follow.
DEVICE_FILES = {
    "hwts": "hwts.data",
    "aicore": "aicore.data",
    "stars_soc": "stars_soc.data",
    "ffts_profile": "ffts_profile.data",
    "ts_track": "ts_track.data",
    "npu_mem": "npu_mem.data",
    "npu_module_mem": "npu_module_mem.data",
    "lpm_freq": "lpmFreqConv.data",
}
COMPACT = frozenset({"task_track", "node_basic_info", "memcpy_info", "hccl_op_info", "expand_stream_spec"})
FRAMEWORK_FILES = {
    "torch_op_range": "torch.op_range",
    "torch_op_mark": "torch.op_mark",
    "torch_memory_usage": "torch.memory_usage",
}
START_DELAY_NS = 50_000_000  # from the host start log to the first simulated event
END_DELAY_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class FamilyCount:
    """Records and bytes one family wrote for one rank and device (-1: host or framework files)."""

    rank: int
    device_id: int
    family: str
    aging: str  # "aging" / "unaging" for host files, "" otherwise
    records: int
    bytes: int
    files: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """What :func:`simulate` wrote."""

    roots: tuple[Path, ...]  # one PROF_XXX directory per rank
    framework_dirs: tuple[Path, ...]  # the *_ascend_pt directories (torch_npu)
    counts: tuple[FamilyCount, ...]
    steps: int  # steps per device
    seconds: float

    @property
    def bytes(self) -> int:
        """Raw data bytes written (control files excluded)."""
        return sum(c.bytes for c in self.counts)

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(path for c in self.counts for path in c.files)


Writer = SliceWriter | PlainWriter
StreamKey = tuple[str, int, str]  # (family, device id or -1, aging group or "")


@dataclass
class _Rank:
    """One process of the run: its PROF directory, its devices and its open streams."""

    config: SimulationConfig
    template: Template
    names: Names
    rank: int
    out_dir: Path
    truth: Truth | None
    writers: dict[StreamKey, Writer] = field(default_factory=dict)
    records: dict[StreamKey, int] = field(default_factory=dict)
    written: int = 0
    layout: Layout = field(init=False)

    def run(self, budget: int | None) -> tuple[Layout, int]:
        cfg = self.config
        clock = host_clock(cfg.seed, self.rank)
        start_ns = (clock.mono0 + START_DELAY_NS) // GRID_NS * GRID_NS
        layout = self.layout = make_layout(cfg, self.rank, self.out_dir, clock, start_ns)
        device_ids = cfg.device_ids(self.rank)
        clocks: list[DeviceClock] = [
            device_clock(clock, cfg.profile, device_id, k) for k, device_id in enumerate(device_ids)
        ]
        write_start_files(cfg, rank=self.rank, layout=layout, clock=clock, devices=clocks, start_ns=start_ns)
        world = cfg.ranks * cfg.devices
        contexts = [
            DeviceContext(
                device_id=dev.device_id,
                rank_index=dev.device_id,
                world=world,
                profile=cfg.profile,
                template=self.template,
                names=self.names,
                clock=dev,
                host=clock,
                pid=layout.pid,
                acl_tid=layout.pid + 11 + 2 * k,
                py_tid=layout.pid + 2 * k,
            )
            for k, dev in enumerate(clocks)
        ]
        workloads = [Workload(cfg, self.template, self.rank, k) for k in range(len(device_ids))]
        for (family, aging), rows in host_start_rows(contexts[0], start_ns).items():
            self._write(family, -1, aging, rows)
        origin, step, index = start_ns + GRID_NS * 250, 0, 0
        chunk_steps = workloads[0].chunk_steps
        while True:
            steps = min(chunk_steps, cfg.steps - step)
            if budget is not None and step:  # size the chunk from the bytes per step so far
                steps = min(chunk_steps, max(1, -(-(budget - self.written) * step // self.written)))
            chunks = place([w.draft(index, step, steps) for w in workloads], origin)
            host: dict[HostKey, list[Rows]] = {}
            for ctx, chunk in zip(contexts, chunks, strict=True):
                for rows in device_rows(chunk, ctx):
                    self._write(rows.family, ctx.device_id, "", rows)
                for key, rows in host_rows(chunk, ctx).items():
                    host.setdefault(key, []).append(rows)
                if cfg.framework == "torch_npu":
                    for rows in framework_rows(chunk, ctx):
                        host.setdefault((rows.family, ""), []).append(rows)
                if self.truth is not None:
                    self.truth.add(chunk, ctx.device_id)
            for (family, aging), parts in host.items():
                self._write(family, -1, aging, concat(parts))
            step, index, origin = step + steps, index + 1, chunks[0].end
            if (budget is None and step >= cfg.steps) or (budget is not None and self.written >= budget):
                break
        for writer in self.writers.values():
            writer.close()
        write_end_files(
            cfg, rank=self.rank, layout=layout, clock=clock, start_ns=start_ns, end_ns=origin + END_DELAY_NS
        )
        return layout, step

    def _write(self, family: str, device_id: int, aging: str, rows: Rows) -> None:
        if not len(rows):
            return
        key = (family, device_id, aging)
        writer = self.writers.get(key)
        if writer is None:
            writer = self.writers[key] = self._open(family, device_id, aging)
        data = encode(rows)
        writer.write(data, int(rows.times.min()), int(rows.times.max()))
        self.records[key] = self.records.get(key, 0) + len(rows)
        self.written += len(data)

    def _open(self, family: str, device_id: int, aging: str) -> Writer:
        seed, size = self.config.seed + self.rank, self.config.slice_bytes
        if family in FRAMEWORK_FILES:
            assert self.layout.framework is not None
            return PlainWriter(self.layout.framework / "FRAMEWORK" / FRAMEWORK_FILES[family])
        if device_id >= 0:
            return SliceWriter(self.layout.data(device_id), f"{DEVICE_FILES[family]}.{device_id}", size, seed)
        kind = "api_event.data" if family == "api_event" else family
        group = "compact" if family in COMPACT else "additional"
        name = kind if family == "api_event" else f"{group}.{kind}"
        return SliceWriter(self.layout.data(None), f"{aging}.{name}", size, seed)

    def counts(self) -> list[FamilyCount]:
        return [
            FamilyCount(
                self.rank,
                device_id,
                family,
                aging,
                self.records[key],
                writer.total_bytes,
                tuple(writer.slices),
            )
            for key, writer in sorted(self.writers.items())
            for family, device_id, aging in [key]
        ]


def simulate(
    config: SimulationConfig, out_dir: str | Path, truth_dir: str | Path | None = None
) -> SimulationResult:
    """Write the collection ``config`` describes under ``out_dir`` (and its truth under ``truth_dir``).

    Without ``target_bytes`` every device runs ``config.steps`` steps; with it,
    steps are added a chunk at a time until each rank has written about
    ``target_bytes / ranks`` bytes of raw data. The output is a function of
    ``config`` alone: the same config gives byte-identical directories.
    """
    started = time.perf_counter()
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()):
        msg = f"{out} is not empty: simulate writes a fresh collection and never appends to or replaces one"
        raise InputPathError(msg)
    out.mkdir(parents=True, exist_ok=True)
    template = build_template(config)
    names = Names.of(template)
    truth = None if truth_dir is None else Truth(Path(truth_dir), template)
    budget = None if config.target_bytes is None else -(-config.target_bytes // config.ranks)
    roots, frameworks, counts, steps = [], [], [], 0
    for rank in range(config.ranks):
        runner = _Rank(config, template, names, rank, out, truth)
        layout, steps = runner.run(budget)
        roots.append(layout.root)
        if layout.framework is not None:
            frameworks.append(layout.framework)
        counts += runner.counts()
    if truth is not None:
        truth.close(
            [
                {k: getattr(c, k) for k in ("rank", "device_id", "family", "aging", "records", "bytes")}
                for c in counts
            ]
        )
    result = SimulationResult(
        tuple(roots), tuple(frameworks), tuple(counts), steps, time.perf_counter() - started
    )
    get_logger(component="simulate").info(
        SIMULATION_WRITTEN,
        out_dir=str(out),
        bytes=result.bytes,
        steps=steps,
        seconds=round(result.seconds, 3),
    )
    return result
