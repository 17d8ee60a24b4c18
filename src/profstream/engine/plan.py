"""Which feeds and operators produce each canonical table of one collection: the pipeline plan.

Every operator the collection's data allows is declared once in :meth:`Planner._operators`; a
request for some tables keeps only the operators those tables need (walking back from the
wanted streams to the feeds) and opens only the feeds they read. Device tables are per device
(``tasks@0``); host and framework tables (``api``, ``ops``, ``flows``, ``memory``,
``memory_record``, ``api_statistic``) are not. A plan restricted to some devices gives the device
tables of those devices alone, which is how devices run in separate processes.

Graph, per device ``d`` (inputs present in the collection only):

    hwts|stars_soc, aicore|ffts_profile, ts_track -> DeviceTasks -> device_tasks@d
    device_tasks@d, task_track, api, node/tensor info, memcpy_info -> HostJoin -> tasks@d
    api, task_track, hccl_info, hccl_op_info, tasks@d -> Communication -> comm@d, comm_tasks@d
    ts_track -> Steps -> steps@d;  ops, tasks@* -> FrameworkSteps -> framework_steps@*
    tasks@d, comm@d, steps -> Overlap -> overlap@d, step_time@d
    npu_mem, npu_module_mem -> NpuMemory (one per family) -> npu_mem@d, npu_module_mem@d
    l2_cache (follows the task log) -> L2Cache -> l2_cache@d
    hbm|hbm_v2 -> HbmBandwidth -> hbm@d (at the end of the run)
    lpm_freq (if any) -> AicoreFreq -> aicore_freq@d (910B and 310B)
    tasks@d, comm@d -> TaskRowMerge -> task_rows@d (op_summary's rows, for its output only)
    tasks@d -> OpStatistic; comm@d -> CommStatistic; comm@d, comm_tasks@d -> CommAnalysis ->
    comm_ops@d, comm_links@d
and once: api_event -> ApiEvents -> api -> ApiStatistic; torch_op_range/op_mark, tasks@*, comm@* ->
FrameworkOps -> ops, flows (``tasks`` and ``comm`` only where flows are wanted); ops, flows, tasks@*,
comm@* -> OperatorDetails -> operator_details;
torch_memory_usage, ops, task_memory_info, npu_mem@* -> Memory;
torch_python_tracer_func, ops (their threads), torch_python_tracer_hash (names) -> PythonTracer ->
python_calls; torch_gc_record -> GcRecords -> gc.

An export may run the first stage, task pairing, API events and step tags, in a process of its own
(:meth:`Planner.front`), whose streams the rest of the pipeline reads as feeds; and the last stage, the
operators only its outputs read (:meth:`Planner.last_stage`), in its writer, on the rest's streams.

The ``task_track`` feed reads the host's ``task_track_v2`` records when it has no ``task_track`` file in
either aging group, and only then, as msprof's ``TaskTrackParser`` (Python and C++) does
(:mod:`profstream.codecs.compact`).

Per-step sums (``step_time``) use framework steps when the collection has torch_npu data, else
the 60000/60001 step markers, else model iterations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profstream.codecs._base import OnInvalid
from profstream.codecs.framework import PYTHON_TRACER_FUNC
from profstream.engine import discovery
from profstream.engine.feeds import FeedSet, Follow, converters
from profstream.engine.operators import pmu
from profstream.engine.operators._state import Columns, ints
from profstream.engine.operators.aicore_freq import AicoreFreq, drawn
from profstream.engine.operators.api import ApiEvents, Dictionaries
from profstream.engine.operators.comm import Communication
from profstream.engine.operators.comm_analysis import CommAnalysis
from profstream.engine.operators.device_tasks import DeviceTasks
from profstream.engine.operators.framework_ops import FrameworkOps
from profstream.engine.operators.hbm import HbmBandwidth
from profstream.engine.operators.host_join import HostJoin
from profstream.engine.operators.l2_cache import L2Cache
from profstream.engine.operators.memory import Memory, NpuMemory
from profstream.engine.operators.operator_details import OperatorDetails
from profstream.engine.operators.overlap import Overlap, StepSource
from profstream.engine.operators.python_tracer import PRELUDE_LIMIT, GcRecords, PythonTracer, prelude_length
from profstream.engine.operators.statistics import ApiStatistic, CommStatistic, OpStatistic
from profstream.engine.operators.steps import FrameworkSteps, Steps
from profstream.engine.operators.task_rows import TaskRowMerge
from profstream.engine.runtime import ADVANCE_BYTES, Feed, Operator, Pipeline, at
from profstream.engine.sources import DEFAULT_CHUNK_BYTES, Stream
from profstream.errors import InputPathError

#: canonical tables kept per device
DEVICE_TABLES = (
    "tasks",
    "comm",
    "comm_tasks",
    "steps",
    "framework_steps",
    "overlap",
    "step_time",
    "npu_mem",
    "npu_module_mem",
    "l2_cache",
    "hbm",
    "aicore_freq",
    "op_statistic",
    "comm_statistic",
    "comm_ops",
    "comm_links",
)
#: per-device streams made for one output, not canonical tables: op_summary's merged rows
OUTPUT_STREAMS = ("task_rows",)
#: canonical tables of the host and framework side
HOST_TABLES = (
    "api",
    "ops",
    "flows",
    "memory",
    "memory_record",
    "api_statistic",
    "operator_details",
    "python_calls",
    "gc",
)
TABLE_NAMES = (*DEVICE_TABLES, *HOST_TABLES)

#: device task logs and PMU families, in the order DeviceTasks reads them
_TASK_LOGS = ("hwts", "hwts_aiv", "stars_soc")
_PMU = ("aicore", "aiv", "ffts_profile")
_TIMELESS_LEADER = {"aicore": "hwts", "aiv": "hwts_aiv"}
_HBM = ("hbm", "hbm_v2")
_HOST_FEEDS = ("api_event", "task_track", "hccl_info", "hccl_op_info", "task_memory_info", "memcpy_info")
#: a host feed's newer family, read only when the host has no file of the feed's own family
_NEWER_FAMILY = {"task_track": "task_track_v2"}
#: unaging (static) and aging (dynamic) node info, merged into one time order by the feed
_STREAMED_NODE_INFO = ("node_basic_info", "tensor_info")
_FRAMEWORK_FEEDS = (
    "torch_op_range",
    "torch_op_mark",
    "torch_memory_usage",
    "torch_python_tracer_func",
    "torch_gc_record",
)
#: how long a torch op may last and still be nested in start order (FrameworkOps ``max_op_ns``):
#: the framework reorder window, so the memory the op tree needs is bounded by this much of the run
#: and not by the run's length. A longer op is emitted late and counted; a ProfilerStep longer than
#: this (a common case) stays a root and a step (FrameworkOps ``late_steps``).
FRAMEWORK_REORDER_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class _FeedSpec:
    data_dir: discovery.DataDir
    family: str
    aging: bool | None = None
    follows: str | None = None


class Planner:
    """Builds pipelines for one collection; see the module docstring.

    ``read_framework=False`` leaves the framework's FRAMEWORK files unread, as msprof.py does: its tables
    then come from the CANN data alone (``memory`` and ``memory_record`` hold only GE rows, steps are
    the step-trace ones), and none of the framework operators or their reorder window run.
    """

    def __init__(
        self,
        collection: discovery.Profile,
        *,
        devices: Sequence[int] | None = None,
        on_invalid: OnInvalid = "error",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        advance_bytes: int = ADVANCE_BYTES,
        positions: dict[str, Any] | None = None,
        follow: Follow | None = None,
        read_framework: bool = True,
    ) -> None:
        self.collection = collection
        self.advance_bytes = advance_bytes
        self.read_framework = read_framework
        self.feedset = FeedSet(
            collection, on_invalid=on_invalid, chunk_bytes=chunk_bytes, positions=positions, follow=follow
        )
        known = [d.device_id for d in collection.devices if d.device_id is not None]
        chosen = known if devices is None else [d for d in known if d in devices]
        if devices is not None and len(chosen) != len(set(devices)):
            missing = sorted(set(devices) - set(known))
            msg = f"no device {missing} in {collection.path} (devices: {known})"
            raise InputPathError(msg)
        self.devices = tuple(chosen)
        self._feeds = self._feed_specs()
        self._tracer_inputs: tuple[dict[int, str], Columns | None, int] | None = None
        host = collection.host
        self.dictionaries = Dictionaries(
            hashes=self.feedset.table(host, "hash_dic"), types=self.feedset.table(host, "type_info_dic")
        )

    # -- feeds --------------------------------------------------------------------------------

    def _feed_specs(self) -> dict[str, _FeedSpec]:
        specs: dict[str, _FeedSpec] = {}
        fs, host, framework = self.feedset, self.collection.host, self.collection.framework
        for name in _HOST_FEEDS:
            family = next((f for f in (name, _NEWER_FAMILY.get(name)) if f and fs.has(host, f)), None)
            if host is not None and family is not None:
                specs[name] = _FeedSpec(host, family)
        for family in _STREAMED_NODE_INFO:
            if host is not None and fs.has(host, family):
                specs[family] = _FeedSpec(host, family)
        for family in _FRAMEWORK_FEEDS if self.read_framework else ():
            if framework is not None and fs.has(framework, family):
                specs[family] = _FeedSpec(framework, family)
        for device_id in self.devices:
            data_dir = self.collection.device(device_id)
            for family in (*_TASK_LOGS, *_PMU, "ts_track"):
                if fs.has(data_dir, family):
                    leader = _TIMELESS_LEADER.get(family)
                    specs[at(family, device_id)] = _FeedSpec(
                        data_dir, family, follows=None if leader is None else at(leader, device_id)
                    )
            for family in NpuMemory.SOURCES:
                if fs.has(data_dir, family):
                    specs[at(f"{family}_raw", device_id)] = _FeedSpec(data_dir, family)
            if fs.has(data_dir, "l2_cache"):  # written per task as the task log is: it follows the log
                log = next((f for f in ("stars_soc", "hwts") if at(f, device_id) in specs), "hwts")
                feed = _FeedSpec(data_dir, "l2_cache", follows=at(log, device_id))
                specs[at("l2_cache_raw", device_id)] = feed
            if fs.has(data_dir, "lpm_freq"):
                specs[at("lpm_freq", device_id)] = _FeedSpec(data_dir, "lpm_freq")
            for family in _HBM:  # one of the two, by the collection's version
                if fs.has(data_dir, family):
                    specs[at("hbm_raw", device_id)] = _FeedSpec(data_dir, family)
        return specs

    def feed_streams(self) -> dict[str, list[Stream]]:
        """Every feed the plan can open and the streams it reads, in its order (what positions index)."""
        return {name: self._streams_of(name) for name in self._feeds}

    def _open_feed(self, name: str) -> Feed:
        spec = self._feeds[name]
        return self.feedset.feed(
            spec.data_dir, spec.family, name=name, aging=spec.aging, follows=spec.follows
        )

    # -- operators ----------------------------------------------------------------------------

    def metric_layout(self, device_id: int) -> pmu.MetricLayout | None:
        """The PMU layout of a device (its ``aic_metrics`` group); None without sample.json."""
        metadata = self.collection.device(device_id).metadata
        if metadata is None or metadata.sample is None:
            return None
        return pmu.layout_of(metadata)

    def metric_columns(self, device_id: int) -> list[str]:
        """The PMU metric columns of a device's ``tasks``."""
        layout = self.metric_layout(device_id)
        return [] if layout is None else list(layout.columns)

    def _has(self, *names: str) -> bool:
        return all(n in self._feeds for n in names)

    def _operators(self, *, flows: bool = True, tracer: bool = True) -> list[Operator]:
        """Every operator the collection's data allows. Without ``flows`` FrameworkOps makes only
        ``ops`` and takes no ``tasks``: its ``ops`` do not depend on them, only its flows do, so a plan
        that wants ops but not flows (PTA memory) runs no device pipeline. Without ``tracer`` the
        Python tracer replay is left out: no operator reads ``python_calls``, and building it reads
        the tracer's names and start frames (a quarter second at 1 GB)."""
        ops: list[Operator] = []
        starts = self.collection.collection_starts_ns  # the statistics leave out what ran before
        if self._has("api_event"):
            ops += [ApiEvents(self.dictionaries), ApiStatistic()]
        framework = self._has("torch_op_range")
        for d in self.devices:
            data_dir = self.collection.device(d)
            if data_dir.metadata is None:
                continue
            families = {f for f in (*_TASK_LOGS, *_PMU, "ts_track") if at(f, d) in self._feeds}
            if families & set(_TASK_LOGS) and self._has("task_track"):
                # HostJoin's optional inputs: the api table exists where api_event records do
                streamed = [
                    n
                    for n in ("api", *_STREAMED_NODE_INFO, "memcpy_info")
                    if self._has("api_event" if n == "api" else n)
                ]
                ops += [
                    DeviceTasks(d, data_dir.metadata, families),
                    HostJoin(
                        d,
                        self.dictionaries,
                        metrics=self.metric_layout(d),
                        streamed=streamed,
                    ),
                    OpStatistic(d, start_ns=starts.get(d)),
                    TaskRowMerge(d, self.metric_columns(d), comm=self._has("api_event", "hccl_info")),
                ]
                if self._has("api_event", "hccl_info"):
                    ops += [
                        Communication(
                            d,
                            self.dictionaries,
                            op_info=self._has("hccl_op_info"),
                            collection_start_ns=starts.get(d),
                        ),
                        CommStatistic(d, start_ns=starts.get(d)),
                        CommAnalysis(d),
                        Overlap(d, self._step_source(d, framework)),
                    ]
            if at("ts_track", d) in self._feeds:
                ops.append(Steps(d))
            ops += [NpuMemory(d, s) for s in NpuMemory.SOURCES if at(f"{s}_raw", d) in self._feeds]
            if at("l2_cache_raw", d) in self._feeds:
                metadata = data_dir.metadata
                ops.append(L2Cache(d, metadata.info.platform_version, metadata.sample.l2_cache_events))
            if drawn(data_dir.metadata):
                changes = at("lpm_freq", d) in self._feeds
                ops.append(AicoreFreq(d, data_dir.metadata, self.collection.wall_offset_ns, changes=changes))
            if at("hbm_raw", d) in self._feeds:
                sample = data_dir.metadata.sample
                ops.append(HbmBandwidth(d, "" if sample is None else sample.hbm_events))
        joined = [d for d in self.devices if any(at("tasks", d) in op.outputs for op in ops)]
        communication = [d for d in joined if any(at("comm", d) in op.outputs for op in ops)]
        if framework:
            ops += [
                FrameworkOps(
                    joined if flows else [],
                    communication=communication if flows else [],
                    task_queue=self._has("torch_op_mark"),
                    max_op_ns=FRAMEWORK_REORDER_NS,
                    flows=flows,
                ),
                FrameworkSteps(joined, communication=communication, task_queue=self._has("torch_op_mark")),
                OperatorDetails(joined, communication),
            ]
        if tracer and framework and self._has("torch_python_tracer_func") and self._tracer_names_known():
            ops.append(self._python_tracer())
        if framework and self._has("torch_gc_record"):
            ops.append(GcRecords())
        memory_inputs = {
            "pta": self._has("torch_memory_usage", "torch_op_range"),
            "ge": self._has("task_memory_info"),
        }
        if any(memory_inputs.values()):
            ops.append(
                Memory(
                    self.devices,
                    **memory_inputs,
                    app_devices=[d for d in self.devices if at("npu_mem_raw", d) in self._feeds],
                    hashes=self.dictionaries.hashes,
                )
            )
        return ops

    def _tracer_names_known(self) -> bool:
        """Whether the Python tracer's names can be known: torch_npu writes ``torch.python_tracer_hash``
        when profiling stops, so a collection followed live before then leaves the tracer out (the
        daemon does not start over for it either: ``daemon.collector.AT_STOP_FAMILIES``)."""
        streams = self.feedset.streams(self.collection.framework, "torch_python_tracer_hash")
        return self.feedset.follow is None or bool(streams)

    def _python_tracer(self) -> PythonTracer:
        """The Python tracer replay, with its names and the start frames at the end of its file
        (:mod:`~profstream.engine.operators.python_tracer`); both read once per planner."""
        if self._tracer_inputs is None:
            table = self.feedset.table(self.collection.framework, "torch_python_tracer_hash")
            names: dict[int, str] = {}
            if table is not None:  # a key named twice takes its last name, as torch_npu's dict does
                keys = ints(table.column("key_hash")).tolist()
                values = table.column("value").fill_null("").to_pylist()
                names = dict(zip(keys, values, strict=True))
            self._tracer_inputs = (names, *self._python_prelude())
        names, prelude, skip_from = self._tracer_inputs
        return PythonTracer(names, prelude, skip_from)

    def _python_prelude(self) -> tuple[Columns | None, int]:
        """The start frames the tracer appends at stop (:func:`prelude_length`) and the feed record
        index they begin at; (None, -1) when the file has none, or is still being written."""
        framework = self.collection.framework
        streams = self.feedset.streams(framework, "torch_python_tracer_func")
        if framework is None or self.feedset.follow is not None or not streams:
            return None, -1
        dtype = PYTHON_TRACER_FUNC.dtype
        paths = [f.path for stream in streams for f in stream.files]
        sizes = [path.stat().st_size // dtype.itemsize for path in paths]
        filled = [i for i, size in enumerate(sizes) if size]
        if not filled or filled[-1] != len(paths) - 1:
            return None, -1
        first = np.fromfile(paths[filled[0]], dtype, 1)
        count = min(sizes[-1], PRELUDE_LIMIT)
        tail = np.fromfile(paths[-1], dtype, count, offset=(sizes[-1] - count) * dtype.itemsize)
        times, tags = tail["ts"].astype(np.int64), tail["tag"].astype(np.int64)
        length = prelude_length(times, tags, int(first["ts"][0]))
        if not length:
            return None, -1
        rows = tail[count - length :]
        to_ns = converters(self.feedset.clock(framework))["framework"]
        prelude = {
            "time": np.asarray(to_ns(rows["ts"]), np.int64),
            "tid": rows["thread_id"].astype(np.uint64).view(np.int64),
            "pid": rows["process_id"].astype(np.uint64).view(np.int64),
            "key": rows["key_hash"].astype(np.uint64).view(np.int64),
            "tag": rows["tag"].astype(np.int64),
        }
        return prelude, sum(sizes) - length

    def _step_source(self, device_id: int, framework: bool) -> StepSource | None:
        if framework:
            return StepSource("framework_steps", "framework")
        if at("ts_track", device_id) in self._feeds:
            return StepSource("steps", "step")
        return None

    # -- pipelines -----------------------------------------------------------------------------

    def streams(self, tables: Iterable[str]) -> list[str]:
        """The stream names of ``tables`` in this plan (device tables once per device)."""
        names = []
        for table in tables:
            if table not in TABLE_NAMES and table not in OUTPUT_STREAMS:
                msg = f"unknown table {table!r}; tables: {', '.join(TABLE_NAMES)}"
                raise ValueError(msg)
            per_device = table in DEVICE_TABLES or table in OUTPUT_STREAMS
            names += [at(table, d) for d in self.devices] if per_device else [table]
        return names

    def pipeline(self, tables: Iterable[str], *, received: Sequence[Feed] = ()) -> tuple[Pipeline, list[str]]:
        """A pipeline producing ``tables`` and the streams of them it actually produces. The streams of
        ``received`` come from those feeds instead of the operators that would produce them here
        (:meth:`front`)."""
        provided = {feed.name: feed for feed in received}
        kept, feeds, wanted = self._needed(tables, provided=set(provided))
        return self._build(kept, feeds, provided), wanted

    def front(self, tables: Iterable[str]) -> list[str]:
        """The first stage of a pipeline for ``tables`` that can run as a pipeline of its own
        (:meth:`front_pipeline`) in another process: the streams of the operators that read only raw
        records, task pairing (``device_tasks@d``, from the device task logs and PMU records), the API
        events (``api``, ``api_progress``) and the step tags (``steps@d``), about a quarter of the
        msprof layout's task pipeline, which go to the rest as small tables. None when the rest reads
        one of the front's feeds itself (an L2 cache feed follows the task log): that feed would then
        be decoded twice.
        """
        kept, _, _ = self._needed(tables)
        front = [op for op in kept if isinstance(op, DeviceTasks | ApiEvents | Steps)]
        streams = [name for op in front for name in op.outputs]
        if not streams:
            return []
        _, rest, _ = self._needed(tables, provided=set(streams))
        _, own, _ = self._walk(self._operators(tracer=False), streams)
        return [] if rest & own else streams

    def last_stage(
        self, tables: Iterable[str], *, provided: Iterable[str] = (), here: Iterable[str] = ()
    ) -> list[str]:
        """The streams a last stage of a pipeline for ``tables`` reads from the rest, when that stage
        runs in another process (an export's writer, :meth:`pipeline` with them as ``received``).

        The stage takes the operators that read no feed (nor ``provided`` stream) and whose outputs
        only the stage itself and the outputs of ``tables`` read: statistics, row merges, per-op and
        per-step sums, which cost the rest's process as much as the joins it keeps. Operators that
        make the ``here`` tables (read by outputs the rest renders itself) stay with the rest. The
        streams are the stage's inputs, and the wanted streams of ``tables`` the rest makes.
        """
        table_list, kept_here = list(tables), set(self.streams(here))
        kept, feeds, wanted = self._needed([*table_list, *here], provided=set(provided))
        stage = {id(op): op for op in kept if not set(op.outputs) & kept_here}
        moved = True
        while moved:  # an operator leaving the stage takes those whose outputs it reads with it
            rest = [op for op in kept if id(op) not in stage]
            read_by_rest = {name for op in rest for name in op.inputs}
            leaving = [
                key for key, op in stage.items() if set(op.inputs) & feeds or set(op.outputs) & read_by_rest
            ]
            for key in leaving:
                del stage[key]
            moved = bool(leaving)
        made = {name for op in stage.values() for name in op.outputs}
        inputs = {name for op in stage.values() for name in op.inputs} - made
        return sorted(inputs | (set(self.streams(table_list)) & set(wanted)) - made)

    def front_pipeline(self, streams: Sequence[str]) -> Pipeline:
        """The pipeline producing the :meth:`front` ``streams``."""
        kept, feeds, _ = self._walk(self._operators(tracer=False), list(streams))
        return self._build(kept, feeds, {})

    def _build(self, kept: list[Operator], feeds: set[str], provided: Mapping[str, Feed]) -> Pipeline:
        # leaders first, then by name: a set iterates in hash order, which differs from run to run
        ordered = sorted(feeds - set(provided), key=lambda n: (self._feeds[n].follows is not None, n))
        opened = [self._open_feed(n) for n in ordered] + [provided[n] for n in sorted(feeds & set(provided))]
        return Pipeline(opened, kept, advance_bytes=self.advance_bytes)

    def work(self, tables: Iterable[str]) -> dict[str, int]:
        """What producing ``tables`` costs, to split an export across processes: every feed read and
        every operator run, in raw bytes (an operator's: those of the feeds it takes directly, as the
        operators that do the heavy work, pairing and joins, take the big feeds; those that only take
        derived streams, statistics, cost nothing). Keys name the feed or operator, so the work two
        table sets share has the same keys in both."""
        kept, feeds, _ = self._needed(tables)
        size = {name: sum(self._bytes(s) for s in self._streams_of(name)) for name in feeds}
        work = {f"feed {name}": bytes_ for name, bytes_ in size.items()}
        for op in kept:
            work[f"op {type(op).__name__} -> {','.join(op.outputs)}"] = sum(size.get(i, 0) for i in op.inputs)
        return work

    def _streams_of(self, feed: str) -> list[Stream]:
        spec = self._feeds[feed]
        return self.feedset.streams(spec.data_dir, spec.family, spec.aging)

    @staticmethod
    def _bytes(stream: Stream) -> int:
        return sum(f.path.stat().st_size for f in stream.files)

    def _needed(
        self, tables: Iterable[str], *, provided: set[str] | frozenset[str] = frozenset()
    ) -> tuple[list[Operator], set[str], list[str]]:
        """The operators and feeds ``tables`` need, and the wanted streams the plan can produce."""
        names = self.streams(tables)
        tracer = "python_calls" in names
        kept, feeds, wanted = self._walk(self._operators(tracer=tracer), names, provided)
        if "flows" not in wanted and not any("flows" in op.inputs for op in kept):
            kept, feeds, wanted = self._walk(self._operators(flows=False, tracer=tracer), names, provided)
        return kept, feeds, wanted

    def _walk(
        self, operators: list[Operator], names: list[str], provided: set[str] | frozenset[str] = frozenset()
    ) -> tuple[list[Operator], set[str], list[str]]:
        """The operators and feeds producing ``names`` need (walking back from them to the feeds, or to
        the ``provided`` streams, which count as feeds)."""
        producer = {name: op for op in operators for name in op.outputs}
        wanted = [s for s in names if s in producer]
        needed: dict[int, Operator] = {}
        feeds: set[str] = set()
        todo = list(wanted)
        while todo:
            name = todo.pop()
            if name in provided:
                feeds.add(name)
                continue
            if name in self._feeds:
                feeds.add(name)
                follows = self._feeds[name].follows
                if follows is not None:
                    todo.append(follows)
                continue
            op = producer.get(name)
            if op is None or id(op) in needed:
                continue
            needed[id(op)] = op
            todo += list(op.inputs)
        return [op for op in operators if id(op) in needed], feeds, wanted


def split_work(works: Sequence[Mapping[str, int]], parts: int, *, min_part: int = 0) -> list[list[int]]:
    """The indices of ``works`` (what each output costs, :meth:`Planner.work`) in at most ``parts``
    groups, the costliest group first, each group to run in a process of its own.

    A group costs the sum of its distinct keys: work two outputs share is done once in a group, and
    once more in every other group that needs it. On ``parts`` cores the groups take at least as long
    as the costliest one and at least their total cost over ``parts``; greedily, costliest output
    first, each output joins the group (or opens a new one) where the sum of those two bounds ends
    up least, and on a tie the group it adds least to. So outputs that share a pipeline stay
    together, and a pipeline is run twice only when that shortens the costliest group by more than
    the extra work. A new group opens only for an output that costs at least ``min_part`` alone.
    """
    groups: list[dict[str, int]] = []
    members: list[list[int]] = []
    for index in sorted(range(len(works)), key=lambda i: -sum(works[i].values())):
        work = works[index]
        options = (
            [*groups, {}]
            if len(groups) < parts and (not groups or sum(work.values()) >= min_part)
            else groups
        )
        chosen = min(range(len(options)), key=lambda g: _outcome(options, g, work, parts))
        if chosen == len(groups):
            groups.append({})
            members.append([])
        groups[chosen].update(work)
        members[chosen].append(index)
    order = sorted(range(len(groups)), key=lambda g: -sum(groups[g].values()))
    return [sorted(members[g]) for g in order]


def _outcome(
    groups: Sequence[Mapping[str, int]], chosen: int, work: Mapping[str, int], parts: int
) -> tuple[float, int, int]:
    """How good it is for ``work`` to join group ``chosen`` (less is better; see :func:`split_work`)."""
    costs = [sum(group.values()) for group in groups]
    after = sum({**groups[chosen], **work}.values())
    costs_after = [after if g == chosen else cost for g, cost in enumerate(costs)]
    return max(costs_after) + sum(costs_after) / parts, after - costs[chosen], chosen
