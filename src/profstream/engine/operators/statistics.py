"""Aggregations: op_statistic, api_statistic, communication_statistic, and Task Wait Time.

Each statistic operator keeps one accumulator per group (count, exact integer sums, min, max), so
its state is O(groups) whatever the input size, and emits its table once, at :meth:`finish`: a
statistic over the whole run is final only when the run is (the ratios need the grand total).
``advance`` therefore emits nothing.

* :class:`OpStatistic` — ``tasks@d`` -> ``op_statistic@d`` (specs/msprof_outputs.md §4d; msprof
  C++ ``analysis/csrc/domain/data_process/ai_task/op_statistic_processor.cpp``,
  ``application/summary/op_statistic_assembler.cpp``).
* :class:`ApiStatistic` — ``api`` -> ``api_statistic`` (§4e; C++
  ``application/summary/api_statistic_assembler.cpp``, ``data_process/ai_task/api_processor.cpp``).
* :class:`CommStatistic` — ``comm@d`` -> ``comm_statistic@d`` (§4e; C++
  ``data_process/ai_task/hccl_statistic_processor.cpp``).
* :class:`TaskWaitTime` — op_summary's ``Task Wait Time`` for rows a sink writes in order (§2.1).

Choices where msprof is unclear or its implementations differ:

* op_statistic excludes communication tasks (task type ``COMMUNICATION``, ``HCCL_AI_CPU``, and
  ``HCCL``, the name older CANN prints in kernel_details) from rows *and* ratio denominator, and
  keeps ``N/A`` (or unknown) op types and ``WRITE_BACK``/``INVALID`` core types in the denominator
  while dropping their rows, as the current C++ does (its comment: to match the Python pipeline).
  The real export in ``realdata/msinsight-torchnpu-910b`` confirms the ``HCCL`` exclusion: its
  ratios only add up without the HCCL rows (tests/golden/test_realdata.py).
* Ties in Total Time: msprof sorts with an unstable ``std::sort``; here ties keep key order
  (op type, core type), which is what the C++ sort receives. communication_statistic breaks a tie
  by Max Time descending, as msprof's Python does (the ``HcclOpReport`` table is written by Max
  descending, ``HcclCalculator._create_report``, and sorted stably by Total), then by op type where
  the Python keeps the order the op types first ran in (later versions sort the op types in that
  order by Total alone, ``generate_op_report_data``).
* api_statistic: the API name is the ``name`` column for the ``acl`` and ``communication`` levels
  and the ``struct_type`` column for the others (``ApiProcessor::FormatData``: ``id`` for acl,
  item id for HCCL node level, struct type otherwise), falling back to ``name`` when the struct
  type is null. Rows and values follow msprof's Python path, as the msprof layout does
  (``viewer/api_statistic_viewer.py`` ``ApiStatisticViewer._api_statistic_reformat``): rows sort by
  (API name, level name), the order its query returns them in; the C++ path sorts a name's levels
  by level number (``DataKey::operator<``). Values are msprof's µs: durations of whole ns are
  exact at 3 decimals, so sums, minima and maxima are exact; ``Avg`` is Python's
  ``round(Time / Count, 3)`` and ``Variance`` the population variance against that Avg, from exact
  integer sums, then ``round(..., 3)``. msprof's Python rounds each squared deviation to 3 decimals
  before summing, which needs every duration held until the end of the run (it keeps them all);
  that is not reproduced, so the group keeps O(1) state, as the C++ path sums unrounded
  (``ApiStatisticAssembler::GenerateApiStatistic``). The two differ by less than 0.0005 before the
  final rounding, so a printed Variance can differ from the Python one by 0.001 at most.
* Collection-start filters are constructor arguments (``start_ns``): op_statistic keeps tasks that
  start after it (msprof's Python: ``start_time > S``, ``OpCounterOpSceneCalculator._get_op_report_sql``),
  api_statistic APIs that end at or after it (``FilterDataByStartTime`` in ``api_processor.cpp``; the
  plan gives it none, as msprof's Python all-export filters nothing:
  ``MsprofIteration.get_condition_within_iteration`` is empty), communication_statistic ops that
  end at or after it, with their whole span. msprof's versions differ here: the one the spec pins
  (``HcclCalculator._get_hccl_op_report_data``, C++ ``GetHcclStatisticsData``) filters the op's
  master-stream *tasks* (timestamp >= S) and spans an op over the tasks it kept, so an op running
  across S counts from its first task at or after S; later ones (``generate_op_report_data``, C++
  ``GenerateOpReportData``) skip an op that ends before S and count the others whole, as here. Only
  an op in flight at the collection start differs.
* Task Wait Time restarts at 0 on each device (msprof's Python writes one table per device); the
  C++ reads code as not resetting at device boundaries (§2.1), which only matters when one file
  holds several devices.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.engine import schema
from profstream.engine.operators.host_join import task_key
from profstream.engine.runtime import Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import NO_ID

#: task types that are not operators of op_statistic (neither rows nor denominator)
COMMUNICATION_TASK_TYPES = frozenset({"COMMUNICATION", "HCCL_AI_CPU", "HCCL"})
#: groups dropped from op_statistic rows but counted in the ratio denominator
HIDDEN_OP_TYPES = frozenset({"N/A"})
HIDDEN_CORE_TYPES = frozenset({"WRITE_BACK", "INVALID"})
#: API levels whose API name is the ``name`` column (the others use ``struct_type``)
NAMED_LEVELS = frozenset({"acl", "communication"})

Key = tuple[str | None, ...]


@dataclass(slots=True)
class _Stats:
    """Exact running statistics of one group's int64 durations."""

    count: int = 0
    total: int = 0
    squares: int = 0
    low: int = 0
    high: int = 0

    def merge(self, count: int, total: int, squares: int, low: int, high: int) -> None:
        if self.count == 0:
            self.low, self.high = low, high
        else:
            self.low, self.high = min(self.low, low), max(self.high, high)
        self.count += count
        self.total += total
        self.squares += squares


@dataclass
class _Groups:
    """Per-key statistics of durations, merged batch by batch with one vectorised group-by each."""

    keys: tuple[str, ...]
    squares: bool = False
    stats: dict[Key, _Stats] = field(default_factory=dict)

    def add(self, columns: Mapping[str, pa.Array], durations: pa.Array) -> None:
        """Merge rows whose key columns are ``columns`` (same length as ``durations``)."""
        if len(durations) == 0:
            return
        table = pa.table({**{k: _plain(columns[k]) for k in self.keys}, "d": durations})
        aggregations: list[tuple[str, str]] = [("d", "count"), ("d", "sum"), ("d", "min"), ("d", "max")]
        if self.squares:
            exact = pc.cast(durations, pa.decimal256(19, 0))  # squares need 39 digits
            table = table.append_column("q", pc.multiply(exact, exact))
            aggregations.append(("q", "sum"))
        grouped = table.group_by(list(self.keys), use_threads=False).aggregate(aggregations)
        for row in grouped.to_pylist():
            key = tuple(row[k] for k in self.keys)
            squares = int(row["q_sum"]) if self.squares else 0
            self.stats.setdefault(key, _Stats()).merge(
                row["d_count"], row["d_sum"], squares, row["d_min"], row["d_max"]
            )

    def state(self) -> dict[str, Any]:
        """Plain values for :func:`pack_state` (sums as text: they may outgrow 64 bits)."""
        items = sorted(self.stats.items(), key=lambda kv: _sortable(kv[0]))
        return {
            "keys": [list(k) for k, _ in items],
            "values": [
                [str(s.count), str(s.total), str(s.squares), str(s.low), str(s.high)] for _, s in items
            ],
        }

    def load(self, state: Mapping[str, Any]) -> None:
        """The inverse of :meth:`state`."""
        self.stats = {
            tuple(k): _Stats(*(int(v) for v in values))
            for k, values in zip(state["keys"], state["values"], strict=True)
        }


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column as plain strings (dictionary-encoded columns differ per batch)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _sortable(key: Key) -> tuple[tuple[bool, str], ...]:
    """A total order on keys that may hold nulls (nulls first)."""
    return tuple((k is not None, k or "") for k in key)


class _Aggregate(Operator):
    """The shared shell: one input, one output emitted at finish, state = the groups."""

    def __init__(self, input_stream: str, output_stream: str, groups: _Groups) -> None:
        self.inputs = (input_stream,)
        self.outputs = (output_stream,)
        self._groups = groups
        self._untimed = 0  # rows without a start or end time: counted, logged at finish
        self._log = events.get_logger(component=type(self).__name__, stream=input_stream)

    def advance(self, watermark: int) -> list[Emit]:
        """Nothing is final before the end: the ratios need the grand total."""
        return []

    def finish(self) -> list[Emit]:
        if self._untimed:
            self._log.warning(events.RECORDS_DROPPED, count=self._untimed, reason="no start or end time")
        return [(self.outputs[0], self._table())]

    def _add(self, batch: pa.RecordBatch, keep: pa.Array | None, columns: Sequence[str]) -> None:
        """Merge the rows of ``batch`` that have both times and pass ``keep`` (null: no)."""
        timed = pc.and_(pc.is_valid(batch.column("start_ns")), pc.is_valid(batch.column("end_ns")))
        self._untimed += batch.num_rows - pc.count(pc.filter(timed, timed)).as_py()
        chosen = timed if keep is None else pc.and_(timed, pc.fill_null(keep, False))
        kept = batch.filter(chosen)
        durations = pc.subtract(kept.column("end_ns"), kept.column("start_ns"))
        self._groups.add({name: kept.column(name) for name in columns}, durations)

    @abc.abstractmethod
    def _table(self) -> pa.RecordBatch:
        """The output table from the accumulated groups."""

    def snapshot(self) -> bytes:
        return pack_state({"groups": self._groups.state(), "untimed": self._untimed})

    def restore(self, state: bytes) -> None:
        values = unpack_state(state)
        self._groups.load(values["groups"])
        self._untimed = values["untimed"]


def _not_in(column: pa.Array, values: Iterable[str]) -> pa.Array:
    return pc.invert(pc.is_in(_plain(column), value_set=pa.array(sorted(values), pa.string())))


def _by_total(items: Iterable[tuple[Key, _Stats]]) -> list[tuple[Key, _Stats]]:
    """Total descending, ties in key order."""
    return sorted(sorted(items, key=lambda kv: _sortable(kv[0])), key=lambda kv: -kv[1].total)


def _ratio(total: int, denominator: int) -> float:
    return total * 100 / denominator if denominator > 0 else 0.0


def _task_keys(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    """Each row's (stream, task, batch id) as one key (the host join's :func:`task_key`); a row
    without ids (an op row of ``task_rows``) keys as stream -1, apart from every task."""
    stream = batch.column("stream_id").fill_null(-1).to_numpy()
    task = batch.column("task_id").fill_null(-1).to_numpy()
    return task_key(stream, task, batch.column("batch_id").fill_null(0).to_numpy())


def task_time_groups(batch: pa.RecordBatch) -> npt.NDArray[np.bool_]:
    """The rows msprof's Python task_time keeps of each (stream, task, batch id) group of ``batch``
    (``TaskOpViewer.operate_type``, msprof_outputs.md §4e): a lone row; none of a group holding an
    FFTS+ context (an id between 0 and NO_ID); the context-0 rows of a MIX group; every row of any
    other group (a static graph's repeats)."""
    context = batch.column("context_id").fill_null(NO_ID).to_numpy()
    _, group, sizes = np.unique(_task_keys(batch), return_inverse=True, return_counts=True)

    def any_in_group(rows: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        return np.asarray(np.bincount(group, weights=rows, minlength=len(sizes))[group] > 0, np.bool_)

    ffts = any_in_group((context > 0) & (context != NO_ID))
    mix = any_in_group(context == 0)
    return np.asarray((sizes[group] == 1) | (~ffts & (~mix | (context == 0))), np.bool_)


def sub_task_parents(batch: pa.RecordBatch) -> pa.Array:
    """True for a task row (context ``NO_ID``) that has sub-task rows in this batch: rows with a real
    context id, the same stream, task and batch id, starting within the row's span. STARS reports a
    MIX or FFTS+ task once as a whole and once per context; msprof lists only the contexts
    (op_summary joins on the context id, §2.1; the timeline does not draw the parent, §3.4). The rows
    of one task arrive together, so one batch holds both; the time check keeps task ids that wrapped
    apart.
    """
    count = batch.num_rows
    context = batch.column("context_id").fill_null(NO_ID).to_numpy()
    sub = context != NO_ID
    if not sub.any():
        return pa.array(np.zeros(count, np.bool_))
    key = _task_keys(batch)
    start = batch.column("start_ns").fill_null(0).to_numpy()
    end = batch.column("end_ns").fill_null(0).to_numpy()
    candidates = np.flatnonzero(~sub & np.isin(key, key[sub]))
    parents = np.zeros(count, np.bool_)
    if not candidates.size:
        return pa.array(parents)
    # candidates and sub-task rows in (key, start) order, a candidate before a sub-task row of its
    # start: the first sub-task row after a candidate is the earliest of its key at or after its start
    subs = np.flatnonzero(sub)
    rows = np.r_[candidates, subs]
    is_sub = np.r_[np.zeros(candidates.size, np.bool_), np.ones(subs.size, np.bool_)]
    order = np.lexsort((is_sub, start[rows], key[rows]))
    ordered_rows, ordered_sub = rows[order], is_sub[order]
    at = np.arange(order.size)
    next_sub = np.minimum.accumulate(np.where(ordered_sub, at, order.size)[::-1])[::-1]
    placed = np.flatnonzero(~ordered_sub)
    row, found = ordered_rows[placed], next_sub[placed]
    has_next = found < order.size
    nearest = ordered_rows[found[has_next]]
    row = row[has_next]
    parents[row] = (key[nearest] == key[row]) & (start[nearest] <= end[row])
    return pa.array(parents)


class OpStatistic(_Aggregate):
    """Per-device op_statistic: ``tasks@d`` -> ``op_statistic@d`` grouped by (op type, core type).

    Core Type is the GE task type (the ``task_type`` column). ``start_ns``: the collection start;
    earlier tasks are left out (§4d). ``model_name`` (graph export) is not produced.
    """

    def __init__(self, device_id: int, *, start_ns: int | None = None) -> None:
        super().__init__(
            at("tasks", device_id), at("op_statistic", device_id), _Groups(("op_type", "task_type"))
        )
        self.device_id = device_id
        self.start_ns = start_ns

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        keep = pc.and_(
            _not_in(batch.column("task_type"), COMMUNICATION_TASK_TYPES), pc.invert(sub_task_parents(batch))
        )
        if self.start_ns is not None:
            keep = pc.and_(keep, pc.greater(batch.column("start_ns"), self.start_ns))
        self._add(batch, keep, ("op_type", "task_type"))

    def _table(self) -> pa.RecordBatch:
        stats = self._groups.stats
        denominator = sum(s.total for s in stats.values())
        shown = [
            (key, s)
            for key, s in stats.items()
            if key[0] is not None and key[0] not in HIDDEN_OP_TYPES and key[1] not in HIDDEN_CORE_TYPES
        ]
        rows = _by_total(shown)
        return schema.conform(
            schema.TABLES["op_statistic"],
            {
                "device_id": pa.array([self.device_id] * len(rows), pa.int32()),
                "op_type": pa.array([k[0] for k, _ in rows], pa.string()),
                "core_type": pa.array([k[1] for k, _ in rows], pa.string()),
                **_stat_columns(rows, denominator),
            },
        )


def _stat_columns(rows: Sequence[tuple[Key, _Stats]], denominator: int) -> dict[str, pa.Array]:
    """count/total/min/avg/max/ratio columns of the ns statistics tables."""
    return {
        "count": pa.array([s.count for _, s in rows], pa.int64()),
        "total_ns": pa.array([s.total for _, s in rows], pa.int64()),
        "min_ns": pa.array([s.low for _, s in rows], pa.int64()),
        "avg_ns": pa.array([s.total / s.count for _, s in rows], pa.float64()),
        "max_ns": pa.array([s.high for _, s in rows], pa.int64()),
        "ratio": pa.array([_ratio(s.total, denominator) for _, s in rows], pa.float64()),
    }


class CommStatistic(_Aggregate):
    """Per-device communication_statistic: ``comm@d`` -> ``comm_statistic@d`` grouped by op type.

    Each ``comm`` row is one op instance (msprof's (op name, first timestamp, op type) group, whose
    duration is last task end minus first task start). ``start_ns``: the collection start; ops that
    end before it are left out.
    """

    def __init__(self, device_id: int, *, start_ns: int | None = None) -> None:
        super().__init__(at("comm", device_id), at("comm_statistic", device_id), _Groups(("op_type",)))
        self.device_id = device_id
        self.start_ns = start_ns

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        keep = None if self.start_ns is None else pc.greater_equal(batch.column("end_ns"), self.start_ns)
        self._add(batch, keep, ("op_type",))

    def _table(self) -> pa.RecordBatch:
        stats = self._groups.stats
        # msprof's Python writes the op types by Max descending (HcclCalculator._create_report), then
        # sorts them stably by Total descending (ReportHcclStatisticData.report_hccl_op)
        rows = sorted(_by_total(stats.items()), key=lambda kv: (-kv[1].total, -kv[1].high))
        return schema.conform(
            schema.TABLES["comm_statistic"],
            {
                "device_id": pa.array([self.device_id] * len(rows), pa.int32()),
                "op_type": pa.array([k[0] for k, _ in rows], pa.string()),
                **_stat_columns(rows, sum(s.total for s in stats.values())),
            },
        )


class ApiStatistic(_Aggregate):
    """api_statistic: host ``api`` -> ``api_statistic`` grouped by (level, API name), in µs.

    ``start_ns``: the collection start; APIs that end before it are left out.
    """

    def __init__(self, *, start_ns: int | None = None) -> None:
        super().__init__("api", "api_statistic", _Groups(("level", "api_name"), squares=True))
        self.start_ns = start_ns

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        level = _plain(batch.column("level"))
        named = pc.fill_null(pc.is_in(level, value_set=pa.array(sorted(NAMED_LEVELS), pa.string())), False)
        struct_type = _plain(batch.column("struct_type"))
        name = _plain(batch.column("name"))
        api_name = pc.if_else(pc.or_(named, pc.is_null(struct_type)), name, struct_type)
        keyed = pa.RecordBatch.from_arrays(
            [level, api_name, batch.column("start_ns"), batch.column("end_ns")],
            names=["level", "api_name", "start_ns", "end_ns"],
        )
        keep = None if self.start_ns is None else pc.greater_equal(batch.column("end_ns"), self.start_ns)
        self._add(keyed, keep, ("level", "api_name"))

    def _table(self) -> pa.RecordBatch:
        rows = sorted(self._groups.stats.items(), key=lambda kv: _api_order(kv[0]))
        columns: dict[str, list[Any]] = {name: [] for name in ("level", "name", "total_us", "count")}
        columns |= {name: [] for name in ("avg_us", "min_us", "max_us", "variance")}
        for (level, name), s in rows:
            avg_us = round(round(s.total / 1000, 3) / s.count, 3)
            avg_ns = round(avg_us * 1000)  # whole ns: Avg has 3 decimals
            spread = s.squares - 2 * avg_ns * s.total + s.count * avg_ns * avg_ns  # Σ(d - avg)², ns²
            columns["level"].append(level)
            columns["name"].append(name)
            columns["total_us"].append(s.total / 1000)
            columns["count"].append(s.count)
            columns["avg_us"].append(avg_us)
            columns["min_us"].append(s.low / 1000)
            columns["max_us"].append(s.high / 1000)
            columns["variance"].append(round(spread / s.count / 1_000_000, 3))
        return schema.conform(schema.TABLES["api_statistic"], columns)


def _api_order(key: Key) -> tuple[str, str]:
    """msprof's Python order: API name, then level name."""
    level, name = key
    return (name or "", level or "")


class TaskWaitTime:
    """op_summary's Task Wait Time (§2.1) for rows a sink writes in (device, start) order.

    ``wait_i = max(0, start_i - end_{i-1})``, 0 for the first row of each device; the previous row
    carries over between batches. Times are int64 ns, so the value is exact (msprof's Python rounds
    µs to 3 decimals, its C++ prints 6).
    """

    def __init__(self) -> None:
        self._device: int | None = None
        self._end: int | None = None

    def __call__(
        self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, device_id: npt.ArrayLike | None = None
    ) -> npt.NDArray[np.int64]:
        """The wait before each row of one batch (rows in order)."""
        start = np.asarray(start_ns, np.int64)
        end = np.asarray(end_ns, np.int64)
        if start.shape != end.shape or start.ndim != 1:
            msg = (
                f"start_ns, end_ns: expected two 1-D columns of one length, got {start.shape} and {end.shape}"
            )
            raise ValueError(msg)
        if start.size == 0:
            return np.zeros(0, np.int64)
        devices = np.full(start.size, -1, np.int64) if device_id is None else np.asarray(device_id, np.int64)
        previous_end = np.empty_like(end)
        previous_end[1:] = end[:-1]
        previous_end[0] = start[0] if self._end is None else self._end
        first = np.zeros(start.size, np.bool_)
        first[1:] = devices[1:] != devices[:-1]
        first[0] = self._end is None or self._device != int(devices[0])
        wait: npt.NDArray[np.int64] = np.maximum(start - previous_end, 0)
        wait[first] = 0
        self._device = int(devices[-1])
        self._end = int(end[-1])
        return wait

    def snapshot(self) -> bytes:
        """The carried row, for a sink's checkpoint."""
        return pack_state({"device": self._device, "end": self._end})

    def restore(self, state: bytes) -> None:
        """The inverse of :meth:`snapshot`."""
        values = unpack_state(state)
        self._device = values["device"]
        self._end = values["end"]
