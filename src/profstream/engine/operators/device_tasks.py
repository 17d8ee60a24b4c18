"""DEVICE TASKS: device task logs paired into tasks, with batch ids and PMU metrics, one device at a time.

Inputs (per-device streams, :func:`~profstream.engine.runtime.at`), whichever families the device has:

* task logs: ``hwts`` (AI Core) and ``hwts_aiv`` (AI Vector) on HWTS chips; ``stars_soc`` (ACSQ task
  start/end, funcType 0/1, and FFTS+ sub-task start/end, 34/35) on STARS chips;
* PMU: ``aicore`` / ``aiv`` (HWTS chips, no time of their own: their feeds follow the task log's) or
  ``ffts_profile`` (STARS: context PMU 40 with start/end syscnt, block PMU 41);
* ``ts_track``: task flip records (tag 14) that give each task its ``batch_id``.

Output: ``device_tasks@<id>`` rows of ``schema.device_tasks_schema(metric_columns)`` in start order.

Pairing (``kernels/pairing.py``, cann_raw_formats.md §2.1 and §2.4): HWTS logs pair in file order as they
arrive (a newer start replaces an unmatched one; an end without a start is counted and, having no start,
not emitted). STARS records wait until the watermark passes them, then pair in ``(time, end flag)`` order:
ACSQ per ``(stream, task)``, FFTS+ sub-tasks first in first out per ``(stream, task, subtask, thread)``.
Both rows exist for an FFTS+ task, as in msprof's ``DeviceTaskCollector``: the ACSQ row with context
``NO_ID`` and one row per sub-task with context = sub-task id. At the end, leftover FFTS+ Notify Wait starts
become zero-length rows (``ffts_leftovers``); every other leftover is counted.

Batch ids (msprof ``mscalculate/flip/flip_calculator.py``, all-export mode): per stream, a task gets the
number of flips (tag 14, any ``flipNum`` including 65535 "stream destroyed") whose time is at or before its
start. A flip whose own task id is not 0 (another thread took id 0 first) also moves the tasks just before it
on its stream whose id is below the flip's into its batch (``calibrate_when_flip_task_id_not_zero``). To
apply that in a stream, a task whose id drops below its predecessor's with no flip in between (a wrap whose
flip has not been seen yet) is held, with everything after it, until its flip arrives; after
``open_horizon_ns`` without one it is released uncalibrated and counted.

PMU (msprof_outputs.md §2.1 "PMU rows are matched FIFO per key", §4c): HWTS PMU records carry no time; per
``(stream, task)`` the i-th record goes to the i-th paired task (in pairing order). Known gap: msprof's
queue is consumed by op_summary rows only, and an AI_CPU, DSA or DVPP row (GE task type) takes no record
(``AiCoreOpReport._union_task_ge_ai_core_data``); the device side does not know GE types, so an AI_CPU
task of the HWTS log still waiting when a record of a later task with its key (after a task-id wrap)
comes in the same match takes that record. STARS context PMU
records go to the task of their ``(stream, task, context)`` whose start is the latest at or before the
record's end (context = sub-task id for FFTS+ records, ``NO_ID`` otherwise), the first record wins, and a
record ending more than ``pmu_slack_ns`` after the task is not its; within a 16-bit task-id cycle this is the
FIFO-per-key-and-batch join msprof does, without needing the PMU record's own batch. Records with the
overflow flag are dropped and counted, as msprof does. Block PMU records of MIX tasks (FFTS+ sub-task type
6/7) from the secondary core (AIV for MIX_AIC, AIC for MIX_AIV; main-core block records are dropped, which
is msprof's ``taskBlock`` filter and a no-op without it) are summed into the task whose interval holds their
end: that replaces msprof's grouping by the GE ``mix_block_num`` count, which only the host side knows. On
CHIP_V4_1_0 a record of AIC data (``FftsPmuBean.is_aic_data``) fills the ``aic_`` side; elsewhere every
record uses the AI Core events, as msprof's ``calculate_pmu_list`` does.

Emission by watermark: a task leaves once (a) no input can still deliver an older start (the watermark, and
every open start younger than ``open_task_ns``, 5 s: a task may run that long), (b) its PMU record had its
chance: it has one, or PMU records ending ``pmu_slack_ns`` after its end have been seen (PMU records come in
task-end order), or it ended ``open_horizon_ns`` before the watermark, and (c) it is not held for a flip.
Every emitted batch is sorted by start, and the output watermark is the start below which every task has
left, so the operators downstream see a long task in time order. A task paired after later ones were
emitted (it ran longer than ``open_task_ns``, or its start lost its end) is emitted late and counted.
Whether an open start is a running task or a lost end cannot be told earlier: tasks of one stream overlap
in the real traces of shared/realdata (HCCL Notify Waits on one stream by up to 73 ms), so a later start
on the same stream proves nothing.

Bounded state: open starts, STARS records above the watermark, tasks waiting for their PMU record or flip,
PMU records waiting for their task, flips younger than the horizon. What never matched is counted and
logged at :meth:`DeviceTasks.finish` (event ``records_unmatched``).

Metric columns: :mod:`profstream.engine.operators.pmu` (``aicore_time``/``aiv_time``/``*_time`` stay null
here and are filled after the host join by ``pmu.finish_metrics``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs import stars_soc
from profstream.codecs.ffts_profile import BLOCK_PMU, CONTEXT_PMU
from profstream.codecs.hwts import TASK_END, TASK_START
from profstream.codecs.ts_track import FLIP_STREAM_DESTROYED, TAG_TASK_FLIP
from profstream.engine import schema
from profstream.engine.kernels import pairing
from profstream.engine.kernels._dispatch import NULL
from profstream.engine.kernels._table import KeyedState, Table
from profstream.engine.metadata import DirMetadata
from profstream.engine.operators import _state, pmu
from profstream.engine.operators.api import group_ranks
from profstream.engine.runtime import DONE, START, Emit, Operator, at, pack_state, unpack_state
from profstream.events import RECORDS_UNMATCHED, get_logger

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Columns = dict[str, npt.NDArray[Any]]

#: event counters per PMU record (pmu_0..pmu_7); counter rows hold the total cycles first, then these
COUNTERS = 8
#: task lanes: which log a task came from
HWTS, HWTS_AIV, ACSQ, FFTS = range(4)
#: the two core sides of a task's counters
AIC, AIV = 0, 1
#: the task-log family and PMU family of each HWTS lane, and its task type name
HWTS_LANES = {HWTS: ("hwts", "aicore", "AI_CORE"), HWTS_AIV: ("hwts_aiv", "aiv", "AI_VECTOR_CORE")}
#: device task type codes: ACSQ rows use the SQE type, FFTS+ rows this offset + the sub-task type, HWTS rows
#: this offset + the lane
_FFTS_CODE, _HWTS_CODE = 100, 200
#: FFTS+ sub-task types of MIX tasks, and the FFTS+ ffts_type (cann_raw_formats.md §2.4, §2.5)
MIX_AIC, MIX_AIV, FFTS_PLUS, FFTS_MIX_AIC = 6, 7, 4, 5

_TASK_COLUMNS = ("stream", "task", "context", "start", "end", "kind", "lane", "seq", "matched", "late")
_PMU_COLUMNS = ("stream", "task", "context", "end", "lane", "side", "seq")


def _empty(names: Collection[str], counters: bool = False) -> Columns:
    cols: Columns = {
        name: np.empty(0, np.bool_ if name in ("matched", "late") else np.int64) for name in names
    }
    if counters:
        for side in ("aic", "aiv"):
            cols[side] = np.empty((0, 1 + COUNTERS), np.int64)
        cols["has"] = np.empty((0, 2), np.bool_)
    return cols


def _groups(*keys: I64) -> I64:
    """Dense group ids of equal key tuples (rows of ``keys``)."""
    n = len(keys[0])
    if n == 0:
        return np.empty(0, np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, np.bool_)
    new[0] = True
    for key in keys:
        k = key[order]
        new[1:] |= k[1:] != k[:-1]
    ids = np.empty(n, np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _latest_before(t_group: I64, t_time: I64, q_group: I64, q_time: I64) -> I64:
    """For each query, the row of the latest ``t_time <= q_time`` in its group (-1 if none)."""
    n = len(t_time)
    kind = np.concatenate([np.zeros(n, np.int64), np.ones(len(q_time), np.int64)])
    group = np.concatenate([t_group, q_group])
    time = np.concatenate([t_time, q_time])
    order = np.lexsort((kind, time, group))
    is_task = order < n
    seen = np.maximum.accumulate(np.where(is_task, np.arange(len(order)), -1))
    found = np.full(len(q_time), -1, np.int64)
    queries = np.flatnonzero(~is_task)
    candidate = seen[queries]
    valid = candidate >= 0
    valid[valid] = group[order[candidate[valid]]] == group[order[queries[valid]]]
    found[order[queries[valid]] - n] = order[candidate[valid]]
    return found


@dataclass(frozen=True, slots=True)
class DeviceTaskSettings:
    """Tolerances of the streaming rules (see the module docstring)."""

    #: how long a wrap waiting for its flip or a task waiting for its PMU record may hold back the output;
    #: older ones stop holding it (they are emitted without calibration or PMU)
    open_horizon_ns: int = 1_000_000_000
    #: how long an open start may hold back the output: a task may run that long (an HCCL Notify Wait of a
    #: rank waiting for a slow one); an older open start is taken for a lost end and its task, if it ends
    #: after all, is emitted late
    open_task_ns: int = 5_000_000_000
    #: how much later than its task's end a PMU record may be stamped and still belong to it
    pmu_slack_ns: int = 100_000


class DeviceTasks(Operator):
    """Pairs one device's task logs into ``device_tasks@<id>`` rows (see the module docstring).

    ``families`` names the record families the device dir has (task logs, PMU, ``ts_track``); ``metadata``
    is the device dir's control files (chip, clocks, PMU events).
    """

    def __init__(
        self,
        device_id: int,
        metadata: DirMetadata,
        families: Collection[str],
        settings: DeviceTaskSettings | None = None,
    ) -> None:
        self.device_id = device_id
        self.settings = settings or DeviceTaskSettings()
        self.layout = pmu.layout_of(metadata)
        self.schema = schema.device_tasks_schema(self.layout.columns)
        present = set(families)
        self._lanes = {lane: names for lane, names in HWTS_LANES.items() if names[0] in present}
        self._stars = "stars_soc" in present
        self._pmu_lanes = [lane for lane, names in self._lanes.items() if names[1] in present]
        if "ffts_profile" in present:
            self._pmu_lanes += [ACSQ, FFTS]
        self._names = {at(f, device_id): f for f in present}
        wanted = {"ts_track", "stars_soc", "ffts_profile"} | {f for n in self._lanes.values() for f in n[:2]}
        self.inputs = tuple(sorted(at(f, device_id) for f in present & wanted))
        self.outputs = (at("device_tasks", device_id),)
        self._log = get_logger(component="device_tasks", device_id=device_id)
        self._reset()

    def _reset(self) -> None:
        self._hwts = {lane: pairing.pair_state(2) for lane in self._lanes}
        self._acsq = pairing.pair_state(2, 1)
        self._ffts = pairing.FifoState.new(4, 1)
        self._stars_buffer = _empty(("time", "end", "ffts", "stream", "task", "subtask", "thread", "type"))
        self._pending = _empty(_TASK_COLUMNS, counters=True)
        self._pmu = _empty(_PMU_COLUMNS, counters=True)
        self._blocks = _empty(("stream", "task", "context", "end", "side"), counters=True)
        self._flips = _empty(("stream", "time", "task"))
        self._streams = _empty(("stream", "base", "prev_id", "prev_batch"))
        self._seq = 0
        self._frontier = START
        self._emitted = START
        self._promised = START  # no task emitted later starts before this (late ones aside)
        self._counts: dict[str, int] = {}

    # ------------------------------------------------------------------ input

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        family = self._names.get(stream)
        if family == "ts_track":
            self._push_flips(batch)
        elif family == "stars_soc":
            self._push_stars(batch)
        elif family == "ffts_profile":
            self._push_ffts_profile(batch)
        else:
            for lane, (log, counters, _) in self._lanes.items():
                if family == log:
                    self._push_hwts(lane, batch)
                elif family == counters:
                    self._push_hwts_pmu(lane, batch)

    def _count(self, name: str, n: int) -> None:
        if n:
            self._counts[name] = self._counts.get(name, 0) + int(n)

    def _push_flips(self, batch: pa.RecordBatch) -> None:
        tag = _np(batch, "tag")
        flips = np.flatnonzero(tag == TAG_TASK_FLIP)
        if not flips.size:
            return
        cols = {
            "stream": _np(batch, "stream_id")[flips],
            "time": _np(batch, "time_ns")[flips],
            "task": np.where(
                _np(batch, "flip_num")[flips] == FLIP_STREAM_DESTROYED, 0, _np(batch, "task_id")[flips]
            ),
        }
        self._flips = _state.concat(self._flips, cols)

    def _push_hwts(self, lane: int, batch: pa.RecordBatch) -> None:
        log_type = _np(batch, "log_type")
        task_log = (log_type == TASK_START) | (log_type == TASK_END)
        self._count(f"{HWTS_LANES[lane][0]}_block_logs", int(np.count_nonzero(~task_log)))
        rows = np.flatnonzero(task_log)
        keys = (_np(batch, "stream_id")[rows], _np(batch, "task_id")[rows])
        state = self._hwts[lane]
        pairs = pairing.pair_hwts(
            keys,
            log_type[rows] == TASK_END,
            _np(batch, "time_ns")[rows],
            state=state,
        )
        whole = pairs.start != NULL
        self._count("ends_without_start", int(np.count_nonzero(~whole)))
        n = int(np.count_nonzero(whole))
        self._add_tasks(
            {
                "stream": pairs.keys[0][whole],
                "task": pairs.keys[1][whole],
                "context": np.full(n, schema.NO_ID, np.int64),
                "start": pairs.start[whole],
                "end": pairs.end[whole],
                "kind": np.full(n, _HWTS_CODE + lane, np.int64),
                "lane": np.full(n, lane, np.int64),
            }
        )

    def _push_hwts_pmu(self, lane: int, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        side = AIV if lane == HWTS_AIV else AIC
        counters = np.column_stack(
            [_np(batch, "total_cycle"), *(_np(batch, f"pmu_{i}") for i in range(COUNTERS))]
        )
        self._add_pmu(
            {
                "stream": _np(batch, "stream_id"),
                "task": _np(batch, "task_id"),
                "context": np.full(n, schema.NO_ID, np.int64),
                "end": np.full(n, START, np.int64),  # no time: the next watermark, for ageing (advance)
                "lane": np.full(n, lane, np.int64),
                "side": np.full(n, side, np.int64),
            },
            counters,
        )

    def _push_stars(self, batch: pa.RecordBatch) -> None:
        func = _np(batch, "func_type")
        acsq = (func == stars_soc.ACSQ_START) | (func == stars_soc.ACSQ_END)
        ffts = (func == stars_soc.FFTS_LOG_START) | (func == stars_soc.FFTS_LOG_END)
        rows = np.flatnonzero(acsq | ffts)
        if not rows.size:
            return
        is_ffts = ffts[rows]
        cols = {
            "time": _np(batch, "time_ns")[rows],
            "end": ((func[rows] == stars_soc.ACSQ_END) | (func[rows] == stars_soc.FFTS_LOG_END)).astype(
                np.int64
            ),
            "ffts": is_ffts.astype(np.int64),
            "stream": _np(batch, "stream_id")[rows],
            "task": _np(batch, "task_id")[rows],
            "subtask": _np(batch, "subtask_id")[rows],
            "thread": _np(batch, "thread_id")[rows],
            "type": np.where(is_ffts, _np(batch, "subtask_type")[rows], _np(batch, "sqe_type")[rows]),
        }
        self._stars_buffer = _state.concat(self._stars_buffer, cols)

    def _push_ffts_profile(self, batch: pa.RecordBatch) -> None:
        func = _np(batch, "func_type")
        ffts_type = _np(batch, "ffts_type")
        subtask_type = _np(batch, "subtask_type")
        core_type = _np(batch, "core_type")
        counters = np.column_stack(
            [_np(batch, "total_cycle"), *(_np(batch, f"pmu_{i}") for i in range(COUNTERS))]
        )
        plus = ffts_type == FFTS_PLUS
        context = np.where(plus, _np(batch, "subtask_id"), schema.NO_ID)
        end = _np(batch, "end_ns")
        overflow = (func == CONTEXT_PMU) & (_np(batch, "ov_flag") == 1)
        ctx = np.flatnonzero((func == CONTEXT_PMU) & ~overflow)
        # FftsPmuBean.is_aic_data: FFTS+ AIC or MIX_AIC sub-task, ffts_type 5, or traditional AIC-only
        aic = (plus & ((subtask_type == 0) | (subtask_type == MIX_AIC))) | np.isin(
            ffts_type, (0, FFTS_MIX_AIC)
        )
        side = np.where(aic | (not self.layout.split), AIC, AIV)
        keys = {"stream": _np(batch, "stream_id"), "task": _np(batch, "task_id"), "context": context}
        self._add_pmu(
            {**_state.take(keys, ctx), "end": end[ctx], "lane": np.full(len(ctx), ACSQ), "side": side[ctx]},
            counters[ctx],
        )
        # block records of MIX tasks from the secondary core: AIV blocks of MIX_AIC, AIC blocks of MIX_AIV
        mix_aic = plus & (subtask_type == MIX_AIC)
        mix_aiv = plus & (subtask_type == MIX_AIV)
        secondary = (func == BLOCK_PMU) & ((mix_aic & (core_type == 1)) | (mix_aiv & (core_type == 0)))
        if not self.layout.split:
            secondary[:] = False  # msprof's un-prefixed path reads context PMU only (calculate_pmu_list)
        blocks = np.flatnonzero(secondary)
        cols = {**_state.take(keys, blocks), "end": end[blocks], "side": np.where(mix_aic[blocks], AIV, AIC)}
        self._blocks = _state.concat(self._blocks, _with_counters(cols, counters[blocks]))
        self._count("pmu_overflow", int(np.count_nonzero(overflow)))
        self._count("pmu_other_records", int(np.count_nonzero((func != CONTEXT_PMU) & ~secondary)))
        if ctx.size:
            self._frontier = max(self._frontier, int(end[ctx].max()))

    def _add_tasks(self, cols: Columns) -> None:
        n = _state.rows(cols)
        if not n:
            return
        cols["seq"] = self._seq + np.arange(n, dtype=np.int64)
        self._seq += n
        cols["matched"] = np.zeros(n, np.bool_)
        cols["late"] = cols["start"] < self._emitted
        self._pending = _state.concat(
            self._pending, _with_counters(cols, np.zeros((n, 1 + COUNTERS), np.int64))
        )

    def _add_pmu(self, cols: Columns, counters: I64) -> None:
        n = _state.rows(cols)
        if not n:
            return
        cols["seq"] = self._seq + np.arange(n, dtype=np.int64)
        self._seq += n
        self._pmu = _state.concat(self._pmu, _with_counters(cols, counters))

    # ------------------------------------------------------------------ matching

    def _pair_stars(self, watermark: int) -> None:
        """Pair the buffered STARS records older than ``watermark`` in (time, end flag) order."""
        buf = self._stars_buffer
        ready = buf["time"] < watermark
        if not ready.any():
            return
        rows = _state.take(buf, np.flatnonzero(ready))
        self._stars_buffer = _state.take(buf, np.flatnonzero(~ready))
        order = pairing.acsq_order(rows["time"], rows["end"])
        rows = _state.take(rows, order)
        for ffts in (False, True):
            part = _state.take(rows, np.flatnonzero(rows["ffts"] == int(ffts)))
            if not _state.rows(part):
                continue
            end = part["end"].astype(np.bool_)
            if ffts:
                sub_keys = (part["stream"], part["task"], part["subtask"], part["thread"])
                pairs = pairing.pair_ffts(
                    sub_keys, end, part["time"], state=self._ffts, payload=(part["type"],)
                )
                self._add_ffts(pairs)
            else:
                keys = (part["stream"], part["task"])
                pairs = pairing.pair_acsq(keys, end, part["time"], state=self._acsq, payload=(part["type"],))
                self._add_tasks(
                    {
                        "stream": pairs.keys[0],
                        "task": pairs.keys[1],
                        "context": np.full(len(pairs.start), schema.NO_ID, np.int64),
                        "start": pairs.start,
                        "end": pairs.end,
                        "kind": pairs.payload[0],
                        "lane": np.full(len(pairs.start), ACSQ, np.int64),
                    }
                )

    def _add_ffts(self, pairs: pairing.Pairs) -> None:
        n = len(pairs.start)
        self._add_tasks(
            {
                "stream": pairs.keys[0],
                "task": pairs.keys[1],
                "context": pairs.keys[2],
                "start": pairs.start,
                "end": pairs.end,
                "kind": _FFTS_CODE + pairs.payload[0],
                "lane": np.full(n, FFTS, np.int64),
            }
        )

    def _match_pmu(self) -> None:
        """Give waiting tasks their PMU records (HWTS: FIFO per key; STARS: latest start before the end)."""
        tasks, queue = self._pending, self._pmu
        if not _state.rows(queue) or not _state.rows(tasks):
            return
        open_tasks = np.flatnonzero(~tasks["matched"])
        t_lane = np.where(tasks["lane"][open_tasks] == FFTS, ACSQ, tasks["lane"][open_tasks])
        keys = [np.concatenate([tasks[k][open_tasks], queue[k]]) for k in ("stream", "task", "context")]
        groups = _groups(np.concatenate([t_lane, queue["lane"]]), *keys)
        n = len(open_tasks)
        t_group, q_group = groups[:n], groups[n:]
        hwts_task = t_lane != ACSQ
        hwts_pmu = queue["lane"] != ACSQ
        task_rows: list[I64] = []
        pmu_rows: list[I64] = []
        if hwts_task.any() and hwts_pmu.any():
            t_rank = group_ranks(t_group[hwts_task], tasks["seq"][open_tasks][hwts_task])
            q_rank = group_ranks(q_group[hwts_pmu], queue["seq"][hwts_pmu])
            _, ti, qi = np.intersect1d(
                t_group[hwts_task] * (n + len(q_group) + 1) + t_rank,
                q_group[hwts_pmu] * (n + len(q_group) + 1) + q_rank,
                assume_unique=True,
                return_indices=True,
            )
            task_rows.append(open_tasks[np.flatnonzero(hwts_task)[ti]])
            pmu_rows.append(np.flatnonzero(hwts_pmu)[qi])
        stars_task, stars_pmu = np.flatnonzero(~hwts_task), np.flatnonzero(~hwts_pmu)
        if stars_task.size and stars_pmu.size:
            found = _latest_before(
                t_group[stars_task],
                tasks["start"][open_tasks][stars_task],
                q_group[stars_pmu],
                queue["end"][stars_pmu],
            )
            ok = found >= 0
            cand = open_tasks[stars_task[np.where(ok, found, 0)]]
            ok &= queue["end"][stars_pmu] <= tasks["end"][cand] + self.settings.pmu_slack_ns
            # the first record (by end) of each task wins; later ones stay queued and age out
            q = stars_pmu[ok]
            t = cand[ok]
            order = np.lexsort((queue["end"][q], t))
            first = np.ones(len(order), np.bool_)
            first[1:] = t[order][1:] != t[order][:-1]
            task_rows.append(t[order][first])
            pmu_rows.append(q[order][first])
        if not task_rows:
            return
        t_idx, q_idx = np.concatenate(task_rows), np.concatenate(pmu_rows)
        if not t_idx.size:
            return
        side = queue["side"][q_idx]
        for s, name in ((AIC, "aic"), (AIV, "aiv")):
            rows = side == s
            tasks[name][t_idx[rows]] = queue[name][q_idx[rows]]
            tasks["has"][t_idx[rows], s] = True
        tasks["matched"][t_idx] = True
        hwts_matched = t_idx[tasks["lane"][t_idx] < ACSQ]
        if hwts_matched.size:
            self._frontier = max(self._frontier, int(tasks["end"][hwts_matched].max()))
        keep = np.ones(_state.rows(queue), np.bool_)
        keep[q_idx] = False
        self._pmu = _state.take(queue, np.flatnonzero(keep))

    def _attach_blocks(self, rows: Columns) -> None:
        """Sum the secondary-core block records whose end lies in each emitted MIX task's interval."""
        blocks = self._blocks
        if not _state.rows(blocks) or not _state.rows(rows):
            return
        mix = np.flatnonzero(np.isin(rows["kind"], (_FFTS_CODE + MIX_AIC, _FFTS_CODE + MIX_AIV)))
        if not mix.size:
            return
        keys = [np.concatenate([rows[k][mix], blocks[k]]) for k in ("stream", "task", "context")]
        groups = _groups(*keys)
        found = _latest_before(groups[: mix.size], rows["start"][mix], groups[mix.size :], blocks["end"])
        ok = found >= 0
        task = mix[np.where(ok, found, 0)]
        ok &= blocks["end"] <= rows["end"][task] + self.settings.pmu_slack_ns
        used = np.flatnonzero(ok)
        for s, name in ((AIC, "aic"), (AIV, "aiv")):
            pick = used[blocks["side"][used] == s]
            target = task[pick]
            if not pick.size:
                continue
            fresh = np.unique(target[~rows["has"][target, s]])
            rows[name][fresh] = 0
            np.add.at(rows[name], target, blocks[name][pick])
            rows["has"][target, s] = True
        keep = np.ones(_state.rows(blocks), np.bool_)
        keep[used] = False
        self._blocks = _state.take(blocks, np.flatnonzero(keep))

    # ------------------------------------------------------------------ emission

    def advance(self, watermark: int) -> list[Emit]:
        if watermark <= START:
            return []
        undated = self._pmu["end"] == START
        self._pmu["end"][undated] = watermark
        return self._emit(watermark, final=False)

    def finish(self) -> list[Emit]:
        self._pair_stars(DONE)
        leftovers, others = pairing.ffts_leftovers(self._ffts, 0)
        self._add_ffts(leftovers)
        self._count(
            "open_starts", others + sum(len(pairing.open_starts(s).start) for s in self._open_states())
        )
        out = self._emit(DONE, final=True)
        self._count("pmu_unmatched", _state.rows(self._pmu))
        self._count("block_pmu_unmatched", _state.rows(self._blocks))
        self._report()
        return out

    def _open_states(self) -> list[KeyedState]:
        return [*self._hwts.values(), self._acsq]

    def _report(self) -> None:
        counts = dict(self._counts)
        for lane, state in self._hwts.items():
            counts[f"{HWTS_LANES[lane][0]}_overwritten_starts"] = int(state.counts[pairing.ORPHAN_START])
        counts["acsq_overwritten_starts"] = int(self._acsq.counts[pairing.ORPHAN_START])
        counts["acsq_ends_without_start"] = int(self._acsq.counts[pairing.NO_START])
        counts["ffts_ends_without_start"] = int(self._ffts.counts[pairing.NO_START])
        bad = {k: v for k, v in counts.items() if v}
        if bad:
            self._log.warning(RECORDS_UNMATCHED, **bad)

    def _bound(self, watermark: int, final: bool) -> int:
        """The start below which every task is known and ready (before the per-stream flip holds)."""
        if final:
            return DONE
        horizon = max(watermark - self.settings.open_horizon_ns, START + 1)
        running = max(watermark - self.settings.open_task_ns, START + 1)
        bound = watermark
        starts = [pairing.open_starts(s).start for s in self._open_states()]
        starts.append(pairing.open_starts(self._ffts).start)
        for values in starts:
            young = values[values >= running]
            if young.size:
                bound = min(bound, int(young.min()))
        tasks = self._pending
        if self._pmu_lanes and _state.rows(tasks):
            frontier = max(self._frontier - self.settings.pmu_slack_ns, START)
            waiting = ~tasks["matched"] & np.isin(tasks["lane"], self._pmu_lanes)
            waiting &= (tasks["end"] >= frontier) & (tasks["end"] >= horizon)
            if waiting.any():
                bound = min(bound, int(tasks["start"][waiting].min()))
        return bound

    def _emit(self, watermark: int, final: bool) -> list[Emit]:
        if self._stars:
            self._pair_stars(watermark)
        self._match_pmu()
        bound = self._bound(watermark, final)
        ready = np.flatnonzero(self._pending["start"] < bound)
        out: list[Emit] = []
        if ready.size:
            batch, bound = self._assign_batches(_state.take(self._pending, ready), watermark, bound, final)
            sent = self._pending["start"][ready] < bound
            out = self._release(ready[sent], batch[sent], bound)
        self._promised = bound
        self._age(watermark, final)
        return out

    def output_watermark(self, watermark: int) -> int:
        """The start below which every task has left (an open start, a task waiting for its PMU record or
        flip holds it): downstream operators then need no lateness for tasks that run long."""
        return min(watermark, self._promised)

    def _release(self, emit: I64, batch: I64, bound: int) -> list[Emit]:
        """Emit the pending tasks ``emit`` (their batch ids ``batch``), all starting below ``bound``."""
        tasks = self._pending
        if not emit.size:
            return []
        rows = _state.take(tasks, emit)
        keep = np.ones(_state.rows(tasks), np.bool_)
        keep[emit] = False
        self._pending = _state.take(tasks, np.flatnonzero(keep))
        order = np.lexsort((rows["seq"], rows["start"]))
        rows, batch = _state.take(rows, order), batch[order]
        self._count("late_tasks", int(np.count_nonzero(rows["late"])))
        self._emitted = max(self._emitted, min(bound, DONE - 1))
        self._attach_blocks(rows)
        return [(self.outputs[0], self._batch(rows, batch))]

    def _assign_batches(self, rows: Columns, watermark: int, bound: int, final: bool) -> tuple[I64, int]:
        """Batch ids of ``rows`` (flip counts, calibration) and the bound lowered by flip holds."""
        batch = np.zeros(_state.rows(rows), np.int64)
        self._ensure_streams(np.unique(rows["stream"]))
        horizon = watermark - self.settings.open_horizon_ns
        per_stream = []
        for s, stream in enumerate(self._streams["stream"].tolist()):
            mine = np.flatnonzero(rows["stream"] == stream)
            if not mine.size:
                continue
            mine = mine[np.lexsort((rows["seq"][mine], rows["start"][mine]))]
            b, unresolved = self._stream_batches(
                s, rows["start"][mine], rows["task"][mine], rows["late"][mine]
            )
            batch[mine] = b
            held = np.flatnonzero(unresolved & (rows["start"][mine] >= horizon))
            if held.size and not final:
                bound = min(bound, int(rows["start"][mine][held[0]]))
            per_stream.append((s, mine, unresolved))
        for s, mine, unresolved in per_stream:
            sent = (rows["start"][mine] < bound) & ~rows["late"][mine]
            self._count("wraps_without_flip", int(np.count_nonzero(unresolved & sent)))
            last = np.flatnonzero(sent)
            if last.size:
                self._streams["prev_id"][s] = rows["task"][mine][last[-1]]
                self._streams["prev_batch"][s] = batch[mine][last[-1]]
        return batch, bound

    def _stream_batches(self, s: int, starts: I64, ids: I64, late: Bools) -> tuple[I64, Bools]:
        """Batch ids of one stream's tasks in start order, and which are wraps no known flip explains."""
        flips = self._flips
        mine = np.flatnonzero(flips["stream"] == self._streams["stream"][s])
        mine = mine[np.argsort(flips["time"][mine], kind="stable")]
        f_time, f_task = flips["time"][mine], flips["task"][mine]
        base = int(self._streams["base"][s])
        prev_id = int(self._streams["prev_id"][s])
        b = base + np.searchsorted(f_time, starts, side="right")
        # a flip with a nonzero own id: the tasks right before it with smaller ids join its batch
        for k in np.flatnonzero(f_task > 0).tolist():
            before = int(np.searchsorted(starts, f_time[k], side="left"))
            high = np.flatnonzero(ids[:before] >= f_task[k])
            first = int(high[-1]) + 1 if high.size else 0
            if first == 0 and before and 0 <= prev_id < int(f_task[k]):
                self._count("flip_calibration_incomplete", 1)
            b[first:before] = base + k + 1
        prev_ids = np.concatenate([[prev_id], ids[:-1]])
        prev_b = np.concatenate([[self._streams["prev_batch"][s]], b[:-1]])
        last_flip = int(f_time[-1]) if f_time.size else START
        wrap = ~late & (ids < prev_ids) & (b == prev_b) & (starts >= last_flip)
        return b, wrap

    def _ensure_streams(self, streams: I64) -> None:
        new = np.setdiff1d(streams, self._streams["stream"])
        if not new.size:
            return
        zeros = np.zeros(len(new), np.int64)
        cols = {"stream": new, "base": zeros, "prev_id": np.full(len(new), -1, np.int64), "prev_batch": zeros}
        merged = _state.concat(self._streams, cols)
        self._streams = _state.take(merged, np.argsort(merged["stream"], kind="stable"))

    def _age(self, watermark: int, final: bool) -> None:
        """Drop what can no longer match: flips, PMU and block records older than the horizon."""
        horizon = DONE if final else watermark - self.settings.open_horizon_ns
        old = self._flips["time"] < min(horizon, self._emitted)
        if old.any():
            streams, counts = np.unique(self._flips["stream"][old], return_counts=True)
            self._ensure_streams(streams)
            self._streams["base"][np.searchsorted(self._streams["stream"], streams)] += counts
            self._flips = _state.take(self._flips, np.flatnonzero(~old))
        if final:
            return
        stale = self._pmu["end"] < min(horizon, self._emitted)
        self._count("pmu_unmatched", int(np.count_nonzero(stale)))
        self._pmu = _state.take(self._pmu, np.flatnonzero(~stale))
        stale = self._blocks["end"] < min(horizon, self._emitted)
        self._count("block_pmu_unmatched", int(np.count_nonzero(stale)))
        self._blocks = _state.take(self._blocks, np.flatnonzero(~stale))

    def _batch(self, rows: Columns, batch: I64) -> pa.RecordBatch:
        n = _state.rows(rows)
        kinds, codes = np.unique(rows["kind"], return_inverse=True)
        names = pa.array([_type_name(int(k)) for k in kinds], pa.string())
        task_type = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), names)
        counters = pmu.Counters(
            rows["aic"][:, 0],
            rows["aic"][:, 1:].T,
            rows["aiv"][:, 0],
            rows["aiv"][:, 1:].T,
            rows["has"][:, AIC],
            rows["has"][:, AIV],
        )
        metrics = pmu.device_metrics(self.layout, counters, rows["end"] - rows["start"])
        columns: dict[str, Any] = {
            "device_id": np.full(n, self.device_id, np.int32),
            "stream_id": rows["stream"].astype(np.int32),
            "task_id": rows["task"].astype(np.int32),
            "batch_id": batch.astype(np.int32),
            "context_id": rows["context"],
            "start_ns": rows["start"],
            "end_ns": rows["end"],
            "device_task_type": task_type,
            **{name: pmu.to_arrow(values) for name, values in metrics.items()},
        }
        return schema.conform(self.schema, columns)

    # ------------------------------------------------------------------ state

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "hwts": {str(lane): _keyed(state) for lane, state in self._hwts.items()},
                "acsq": _keyed(self._acsq),
                "ffts": {
                    "queues": _table(self._ffts.queues),
                    "starts": _table(self._ffts.starts),
                    "counts": self._ffts.counts,
                },
                "stars_buffer": self._stars_buffer,
                "pending": self._pending,
                "pmu": self._pmu,
                "blocks": self._blocks,
                "flips": self._flips,
                "streams": self._streams,
                "scalars": [self._seq, self._frontier, self._emitted, self._promised],
                "counts": self._counts,
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._hwts = {int(lane): _unkeyed(value) for lane, value in doc["hwts"].items()}
        self._acsq = _unkeyed(doc["acsq"])
        ffts = doc["ffts"]
        self._ffts = pairing.FifoState(_untable(ffts["queues"]), _untable(ffts["starts"]), ffts["counts"])
        self._stars_buffer = doc["stars_buffer"]
        self._pending = doc["pending"]
        self._pmu = doc["pmu"]
        self._blocks = doc["blocks"]
        self._flips = doc["flips"]
        self._streams = doc["streams"]
        self._seq, self._frontier, self._emitted, self._promised = (int(v) for v in doc["scalars"])
        self._counts = {str(k): int(v) for k, v in doc["counts"].items()}


def _type_name(code: int) -> str:
    """The device task type name of a type code (HWTS lane, FFTS+ sub-task type or SQE type)."""
    if code >= _HWTS_CODE:
        return HWTS_LANES[code - _HWTS_CODE][2]
    if code >= _FFTS_CODE:
        return stars_soc.SUBTASK_TYPE_NAMES.get(code - _FFTS_CODE, f"SUBTASK_{code - _FFTS_CODE}")
    return stars_soc.SQE_TYPE_NAMES.get(code, f"SQE_{code}")


def _np(batch: pa.RecordBatch, name: str) -> I64:
    """A column of a decoded batch as int64 (uint64 counters keep their value below 2**63; nulls are 0)."""
    column = batch.column(name)
    if column.null_count:
        column = pc.fill_null(column, 0)
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(np.int64)


def _with_counters(cols: Columns, counters: I64) -> Columns:
    """``cols`` with a PMU record's counters on its side (``cols['side']``) or none (tasks)."""
    n = _state.rows(cols)
    aic = np.zeros((n, 1 + COUNTERS), np.int64)
    aiv = np.zeros((n, 1 + COUNTERS), np.int64)
    has = np.zeros((n, 2), np.bool_)
    if "side" in cols and n:
        side = cols["side"]
        aic[side == AIC] = counters[side == AIC]
        aiv[side == AIV] = counters[side == AIV]
    return {**cols, "aic": aic, "aiv": aiv, "has": has}


def _table(table: Table) -> dict[str, Any]:
    return {"keys": table.keys, "values": table.values, "used": table.used, "size": table.size}


def _untable(doc: Mapping[str, Any]) -> Table:
    return Table(doc["keys"], doc["values"], doc["used"], int(doc["size"]))


def _keyed(state: KeyedState) -> dict[str, Any]:
    return {"table": _table(state.table), "counts": state.counts}


def _unkeyed(doc: Mapping[str, Any]) -> KeyedState:
    return KeyedState(_untable(doc["table"]), doc["counts"])
