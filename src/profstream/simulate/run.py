"""One rank's simulated collection, written a chunk of steps at a time (batch and live modes)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from profstream.errors import InputPathError
from profstream.events import SIMULATION_WRITTEN, get_logger
from profstream.simulate.clock import DeviceClock, HostClock, device_clock, host_clock
from profstream.simulate.config import SimulationConfig
from profstream.simulate.layout import Layout, make_layout, write_end_files, write_start_files
from profstream.simulate.python_tracer import (
    CallModel,
    ThreadTracer,
    gc_rows,
    hash_rows,
    module_objects,
    optimizer_ns,
)
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
from profstream.simulate.workload import GRID_NS, Template, Workload, place
from profstream.simulate.writer import PlainWriter, SliceWriter, WriteObserver

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
    "l2_cache": "l2_cache.data",
    "hbm": "hbm.data",
}
COMPACT = frozenset({"task_track", "node_basic_info", "memcpy_info", "hccl_op_info", "expand_stream_spec"})
FRAMEWORK_FILES = {
    "torch_op_range": "torch.op_range",
    "torch_op_mark": "torch.op_mark",
    "torch_memory_usage": "torch.memory_usage",
    "torch_python_tracer_func": "torch.python_tracer_func",
    "torch_python_tracer_hash": "torch.python_tracer_hash",
    "torch_gc_record": "torch.gc_record",
}
#: families left out of ``target_bytes``, so that a budgeted run writes the same other streams with them
UNBUDGETED = frozenset({"torch_python_tracer_func", "torch_python_tracer_hash", "torch_gc_record"})
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
class RankRun:
    """One process of the run: its PROF directory, its devices and its open streams."""

    config: SimulationConfig
    template: Template
    names: Names
    rank: int
    out_dir: Path
    truth: Truth | None
    observer: WriteObserver | None = None
    writers: dict[StreamKey, Writer] = field(default_factory=dict)
    records: dict[StreamKey, int] = field(default_factory=dict)
    written: int = 0
    step: int = 0  # steps written so far
    index: int = 0  # chunks written so far
    origin: int = 0  # where the next chunk starts (host ns)
    tracers: list[ThreadTracer] = field(default_factory=list)  # one per device's Python thread
    gc: list[Rows] = field(default_factory=list)  # GC records, written at stop
    layout: Layout = field(init=False)
    clock: HostClock = field(init=False)
    start_ns: int = field(init=False)
    contexts: list[DeviceContext] = field(init=False)
    workloads: list[Workload] = field(init=False)

    def run(self, budget: int | None) -> None:
        """The whole collection at once (batch mode)."""
        self.start()
        while not self.advance(budget):
            pass
        self.finish()

    def start(self) -> None:
        """Lay out the collection and write its start files and the host's first records."""
        cfg = self.config
        clock = self.clock = host_clock(cfg.seed, self.rank)
        start_ns = self.start_ns = (clock.mono0 + START_DELAY_NS) // GRID_NS * GRID_NS
        layout = self.layout = make_layout(cfg, self.rank, self.out_dir, clock, start_ns)
        device_ids = cfg.device_ids(self.rank)
        clocks: list[DeviceClock] = [
            device_clock(clock, cfg.profile, device_id, k) for k, device_id in enumerate(device_ids)
        ]
        write_start_files(cfg, rank=self.rank, layout=layout, clock=clock, devices=clocks, start_ns=start_ns)
        world = cfg.ranks * cfg.devices
        self.contexts = [
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
                l2_events=cfg.l2_events,
                hbm=cfg.hbm,
            )
            for k, dev in enumerate(clocks)
        ]
        self.workloads = [Workload(cfg, self.template, self.rank, k) for k in range(len(device_ids))]
        if cfg.python_tracer:
            model = CallModel.of(self.template)
            objects = 1 + max(c.instance for c in model.calls)
            self.tracers = [
                ThreadTracer(model, clock, ctx.pid, ctx.py_tid, module_objects(ctx.pid, k, objects))
                for k, ctx in enumerate(self.contexts)
            ]
        for (family, aging), rows in host_start_rows(self.contexts[0], start_ns).items():
            self._write(family, -1, aging, rows)
        self.origin = start_ns + GRID_NS * 250

    def advance(self, budget: int | None) -> bool:
        """Generate and write the next chunk of steps; True once the run has all its steps."""
        cfg, step = self.config, self.step
        chunk_steps = self.workloads[0].chunk_steps
        steps = min(chunk_steps, cfg.steps - step)
        if budget is not None and step:  # size the chunk from the bytes per step so far
            steps = min(chunk_steps, max(1, -(-(budget - self.written) * step // self.written)))
        chunks = place([w.draft(self.index, step, steps) for w in self.workloads], self.origin)
        host: dict[HostKey, list[Rows]] = {}
        for ctx, chunk in zip(self.contexts, chunks, strict=True):
            for rows in device_rows(chunk, ctx):
                self._write(rows.family, ctx.device_id, "", rows)
            for key, rows in host_rows(chunk, ctx).items():
                host.setdefault(key, []).append(rows)
            if cfg.framework == "torch_npu":
                for rows in framework_rows(chunk, ctx):
                    host.setdefault((rows.family, ""), []).append(rows)
            if self.truth is not None:
                self.truth.add(chunk, ctx.device_id)
        for k, (tracer, chunk) in enumerate(zip(self.tracers, chunks, strict=False)):  # none: no tracer
            rows, calls = tracer.rows(chunk, optimizer_ns(cfg.seed, self.rank, k, self.index, steps))
            host.setdefault((rows.family, ""), []).append(rows)
            if self.truth is not None:
                self.truth.add_python_calls(calls)
        if cfg.gc_records:
            rows, collections = gc_rows(
                chunks, self.clock, self.layout.pid, seed=cfg.seed, rank=self.rank, index=self.index
            )
            self.gc.append(rows)
            if self.truth is not None:
                self.truth.add_gc(collections)
        for (family, aging), parts in host.items():
            self._write(family, -1, aging, concat(parts))
        self.step, self.index, self.origin = step + steps, self.index + 1, chunks[0].end
        if budget is None:
            return self.step >= cfg.steps
        return self.written >= budget

    def finish(self) -> None:
        """Write what torch_npu writes at stop, flush every stream (last ``.done``), write the end files."""
        self._stop_framework()
        for writer in self.writers.values():
            writer.close()
        write_end_files(
            self.config,
            rank=self.rank,
            layout=self.layout,
            clock=self.clock,
            start_ns=self.start_ns,
            end_ns=self.origin + END_DELAY_NS,
        )

    def _stop_framework(self) -> None:
        """The Python tracer's start frames and names, and the GC records: written when profiling stops."""
        if self.tracers:
            frames = [tracer.start_frames(self.start_ns) for tracer in self.tracers]
            self._write("torch_python_tracer_func", -1, "", concat([rows for rows, _ in frames]))
            names = {key: name for tracer in self.tracers for key, name in tracer.names.items()}
            self._write("torch_python_tracer_hash", -1, "", hash_rows(names))
            if self.truth is not None:
                for _, calls in frames:
                    self.truth.add_python_calls(calls)
        if self.gc:
            self._write("torch_gc_record", -1, "", concat(self.gc))

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
        if family not in UNBUDGETED:
            self.written += len(data)

    def _open(self, family: str, device_id: int, aging: str) -> Writer:
        seed, size = self.config.seed + self.rank, self.config.slice_bytes
        if family in FRAMEWORK_FILES:
            assert self.layout.framework is not None
            path = self.layout.framework / "FRAMEWORK" / FRAMEWORK_FILES[family]
            return PlainWriter(path, observer=self.observer)
        if device_id >= 0:
            directory, name = self.layout.data(device_id), f"{DEVICE_FILES[family]}.{device_id}"
        else:
            kind = "api_event.data" if family == "api_event" else family
            group = "compact" if family in COMPACT else "additional"
            directory = self.layout.data(None)
            name = f"{aging}.{kind}" if family == "api_event" else f"{aging}.{group}.{kind}"
        return SliceWriter(directory, name, size, seed, observer=self.observer)

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


def fresh_out_dir(out_dir: str | Path) -> Path:
    """``out_dir``, created; refused when it already holds something."""
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()):
        msg = f"{out} is not empty: simulate writes a fresh collection and never appends to or replaces one"
        raise InputPathError(msg)
    out.mkdir(parents=True, exist_ok=True)
    return out


def result_of(out: Path, runs: list[RankRun], truth: Truth | None, started: float) -> SimulationResult:
    """What the finished ``runs`` wrote (logged as one event); closes ``truth`` with the counts."""
    counts = tuple(c for run in runs for c in run.counts())
    if truth is not None:
        truth.close(
            [
                {k: getattr(c, k) for k in ("rank", "device_id", "family", "aging", "records", "bytes")}
                for c in counts
            ]
        )
    result = SimulationResult(
        roots=tuple(run.layout.root for run in runs),
        framework_dirs=tuple(run.layout.framework for run in runs if run.layout.framework is not None),
        counts=counts,
        steps=runs[-1].step,
        seconds=time.perf_counter() - started,
    )
    get_logger(component="simulate").info(
        SIMULATION_WRITTEN,
        out_dir=str(out),
        bytes=result.bytes,
        steps=result.steps,
        seconds=round(result.seconds, 3),
    )
    return result
