"""The host API table (``api``) from ``api_event`` records, and the host-side helpers other joins share.

Rules (specs/cann_raw_formats.md §2.7; msprof_outputs.md §2.5, §3.4 CANN, §4e):

- MsprofApi records are intervals as they stand. msprof's Python drops those whose beginTime is 0
  (``analysis/msparser/api_event/api_event_parser.py``); so does :class:`ApiEvents`, and counts them.
- MsprofEvent records pair into intervals per key (level, type, thread, requestId, itemId): the first
  of a key opens, the next closes and the key is free again; the interval keeps the opening event's
  requestId and itemId (C++ ``analysis/csrc/domain/services/parser/host/cann/api_event_parser.cpp``,
  Python ``analysis/mscalculate/cann/cann_event_generator.py``). An event that never closes is
  dropped and counted, as both do.
- ``level`` is the level's lower-case name (``codecs._host.LEVELS``). Names follow msprof's C++
  writer of the API table (``ApiEventDBDumper::GenerateData``; ``ApiProcessor::FormatData``):
  ``struct_type`` (the timeline's ``Mode``) is the type name of ``type_info_dic`` at key
  ``level_type``, except at the acl level, where the type's high 16 bits name the API's category
  (:data:`ACL_API_TAGS`: ``ACL_OP``, ``ACL_RTS``, ...; the low 16 bits the API); ``name`` is the
  type name except at the communication level, where it is the item id resolved through
  ``hash_dic`` (§4e); ``item`` is the item id as msprof prints it: resolved through ``hash_dic``,
  but ``0`` for 0 and the decimal number at the model level and for node-level ``step_info``.
  Unknown ids print as their number, as msprof prints them.
- ``connection_id``: msprof numbers API events and uses the number of the node-level launch API (or
  the innermost enclosing API) as the flow id of every runtime task launched inside it. The C++ takes
  a global counter over all host events after sorting APIs by (begin, level descending)
  (``analysis/csrc/domain/entities/tree/event.cpp`` ``g_eventIDCnt``; ``event_grouper.cpp``
  ``SortByTimeAndLevel``; ``association/cann/tree_analyzer.cpp`` uses ``nodeNode->event->id``); the
  Python uses the record's position in the file. Choice: every API row gets the next number in the
  C++ order, (start, level descending), counting from 0, so ids are deterministic and grow with time.
  :class:`~profstream.engine.operators.host_join.HostJoin` copies them onto the tasks.

Streaming and watermarks: an Api row is known when it arrives; an Event pair only when its closing
event arrives, which for a model execution is a whole step later. To keep its promise that nothing
older than the watermark follows, :class:`ApiEvents` holds back every row that starts at or after
the oldest still-open event and releases rows in (start, level descending) order. An event open for
longer than ``open_limit_ns`` stops holding rows back (memory stays bounded); if it closes after
all, its row comes late and is counted. The runtime marks an operator's outputs with its input
watermark, which says nothing about rows held back, so :class:`ApiEvents` also emits
``api_progress``: one-row batches (:data:`PROGRESS`) with the time below which every ``api`` row has
been emitted. Consumers that need the API tree complete (the host join) read it.

Shared helpers: :class:`Dictionaries` (hash and type names), :func:`latest_before` (the temporal join
"latest left row of the same key strictly before"), :func:`innermost` (innermost interval of a group
containing a time, intervals ``(start, end]`` as msprof's tree builder attaches records,
``association/cann/tree_builder.cpp``), :func:`dense_ids` and the snapshot helpers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream import events
from profstream.codecs._host import LEVELS
from profstream.codecs.dictionaries import TYPE_FALLBACKS
from profstream.engine import schema
from profstream.engine.kernels import search
from profstream.engine.runtime import DONE, Emit, Operator, pack_state, unpack_state

I64 = npt.NDArray[np.int64]
Array = npt.NDArray[Any]

#: how long an open event may hold back the api stream (and how far consumers trust its frontier)
OPEN_LIMIT_NS = 120 * 10**9
RUNTIME_LEVEL, COMMUNICATION_LEVEL, NODE_LEVEL, MODEL_LEVEL, ACL_LEVEL = 5000, 5500, 10000, 15000, 20000
LEVEL_NUMBERS = {name: number for number, name in LEVELS.items()}
#: the acl level's API categories by the high 16 bits of the type (msprof C++ ``aclApiTagMap``;
#: the reporters' ``MSPROF_REPORT_ACL_*_BASE_TYPE`` 0x010000-0x0B0000); others print as the number
ACL_API_TAGS = {
    1: "ACL_OP",
    2: "ACL_MODEL",
    3: "ACL_RTS",
    4: "ACL_OTHERS",
    5: "ACL_NN",
    6: "ACL_ASCENDC",
    7: "HOST_HCCL",
    9: "ACL_DVPP",
    10: "ACL_GRAPH",
    11: "ACL_ATB",
}

# -- dictionaries --------------------------------------------------------------------------------


def _strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A plain string array (dictionary arrays decoded), one chunk."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.cast(pa.string())


def _backwards(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` last row first, one chunk: lookups find the first match, and the last duplicate wins."""
    return schema.one_array(values).take(pa.array(np.arange(len(values) - 1, -1, -1)))


@dataclass(frozen=True)
class Dictionaries:
    """``hash_dic`` and ``type_info_dic`` rows (``FeedSet.table``), and name lookups over them.

    Missing ids print as their decimal number (cann_raw_formats.md §2.10); the C++ fallback names
    of runtime types 27/28 apply when type_info_dic lacks them. Both tables are indexed once: a join
    asks for thousands of names per batch, of a few dozen distinct ids.
    """

    hashes: pa.Table | None = None
    types: pa.Table | None = None
    _hash_keys: pa.Array = field(init=False, repr=False)
    _hash_names: pa.Array = field(init=False, repr=False)
    _type_names: dict[tuple[int, int], str | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keys, names = pa.array([], pa.uint64()), pa.array([], pa.string())
        if self.hashes is not None and self.hashes.num_rows:
            keys = _backwards(self.hashes.column("hash")).cast(pa.uint64())
            names = _strings(_backwards(self.hashes.column("value")))
        types: dict[tuple[int, int], str | None] = {}
        if self.types is not None:  # the last duplicate wins
            rows = zip(
                *(self.types.column(name).to_pylist() for name in ("level", "type", "name")), strict=True
            )
            types.update(((int(level), int(kind)), name) for level, kind, name in rows)
        object.__setattr__(self, "_hash_keys", keys)
        object.__setattr__(self, "_hash_names", names)
        object.__setattr__(self, "_type_names", types)

    def _found(self, ids: Array | pa.Array) -> tuple[pa.Array, pa.Array]:
        """The ids as uint64, and their hash_dic strings (null where hash_dic lacks one)."""
        values = ids if isinstance(ids, pa.Array) else pa.array(np.asarray(ids).astype(np.uint64))
        values = values.cast(pa.uint64())
        return values, self._hash_names.take(pc.index_in(values, value_set=self._hash_keys))

    def names(self, ids: Array | pa.Array) -> pa.Array:
        """Strings of uint64 hash ids (nulls stay null)."""
        values, found = self._found(ids)
        if found.null_count == values.null_count:
            return found
        missing = pc.and_(pc.is_null(found), pc.is_valid(values))
        return pc.replace_with_mask(found, missing, pc.cast(values.filter(missing), pa.string()))

    def found_names(self, ids: Array | pa.Array) -> pa.Array:
        """Strings of the uint64 hash ids hash_dic holds, null for any other (0 included), as msprof's
        task_track parser names kernels (``TaskTrackParser.format_task_track_data``: ``N/A`` for a
        hash it does not find)."""
        return self._found(ids)[1]

    def type_names(self, levels: Array, types: Array) -> pa.Array:
        """Strings of (level, type) ids through type_info_dic."""
        level = np.asarray(levels).astype(np.uint64)
        kind = np.asarray(types).astype(np.uint64)
        pair = dense_ids(level, kind)
        first = first_rows(pair)
        return encode(
            [
                self._type_name(lv, k)
                for lv, k in zip(level[first].tolist(), kind[first].tolist(), strict=True)
            ],
            pair,
        )

    def _type_name(self, level: int, kind: int) -> str:
        name = self._type_names.get((level, kind))
        if name is None and level == RUNTIME_LEVEL:
            name = TYPE_FALLBACKS.get(kind)
        return str(kind) if name is None else name


def encode(values: Sequence[str | None] | pa.Array, codes: Array) -> pa.Array:
    """``values[codes]`` as strings; a negative code is null."""
    table = values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())
    codes = np.asarray(codes, np.int64)
    return table.take(pa.array(codes, mask=codes < 0))


def enum_names(codes: Array, names: Mapping[int, str]) -> pa.Array:
    """Names of enum codes; codes without a name print as their number."""
    values = np.asarray(codes).astype(np.int64)
    ids = dense_ids(values)
    labels = [names.get(v, str(v)) for v in values[first_rows(ids)].tolist()]  # one per distinct code
    return encode(labels, ids)


# -- joins over time -----------------------------------------------------------------------------


def dense_ids(*columns: Array) -> I64:
    """One id per distinct row of ``columns`` (rows that are equal in every column share an id), the
    ids numbering the distinct rows in their order (the first column the most significant).

    When the columns are integers whose combinations of values (the product of their spans) are no
    more than the rows, the rows are numbered as the digits of one number through a table of those
    numbers, without a sort (enum codes, type ids).
    """
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, np.int64)
    arrays = [np.asarray(column) for column in columns]
    if all(values.dtype.kind in "iu" for values in arrays):
        lows = [int(values.min()) for values in arrays]
        spans = [int(values.max()) - low + 1 for values, low in zip(arrays, lows, strict=True)]
        if math.prod(spans) <= n:
            key = np.zeros(n, np.int64)
            for values, low, span in zip(arrays, lows, spans, strict=True):
                key = key * span + (values - values.dtype.type(low)).astype(np.int64)
            present = np.zeros(math.prod(spans), np.bool_)
            present[key] = True
            return (np.cumsum(present) - 1)[key]
    order = np.lexsort(tuple(reversed(arrays)))
    change = np.zeros(n, np.bool_)
    for values in arrays:
        ordered = values[order]
        change[1:] |= ordered[1:] != ordered[:-1]
    ids = np.empty(n, np.int64)
    ids[order] = np.cumsum(change)
    return ids


def first_rows(ids: I64) -> I64:
    """A row of each id ``0..ids.max()`` (ids from :func:`dense_ids`, every one of them used)."""
    rows = np.zeros(int(ids.max(initial=-1)) + 1, np.int64)
    rows[ids] = np.arange(len(ids))
    return rows


def latest_before(keys: Array, times: Array, query_keys: Array, query_times: Array) -> I64:
    """For each query, the index of the row with its key and the largest time strictly before its time.

    -1 where there is none. Among rows with equal key and time the last one wins. Keys are int64.
    """
    n, m = len(keys), len(query_keys)
    if m == 0:
        return np.zeros(0, np.int64)
    if n == 0:
        return np.full(m, -1, np.int64)
    all_keys = np.concatenate([np.asarray(keys, np.int64), np.asarray(query_keys, np.int64)])
    all_times = np.concatenate([np.asarray(times, np.int64), np.asarray(query_times, np.int64)])
    is_query = np.arange(n + m) >= n
    order = np.lexsort((~is_query, all_times, all_keys))  # a query sorts before rows at its time
    positions = np.arange(n + m)
    last_row = np.maximum.accumulate(np.where(order < n, positions, -1))
    found = np.empty(m, np.int64)
    query_at = np.flatnonzero(order >= n)
    candidate = last_row[query_at]
    row = np.where(candidate >= 0, order[np.maximum(candidate, 0)], -1)
    query = order[query_at] - n
    same = (row >= 0) & (all_keys[np.maximum(row, 0)] == np.asarray(query_keys, np.int64)[query])
    found[query] = np.where(same, row, -1)
    return found


def group_ranks(groups: Array, *order_by: Array) -> I64:
    """The position of each row among the rows of its group (equal ``groups``), ordered by the
    ``order_by`` columns (the first the most significant), then by row."""
    n = len(groups)
    order = np.lexsort((*reversed(order_by), groups))
    ordered = np.asarray(groups)[order]
    first = np.ones(n, np.bool_)
    first[1:] = ordered[1:] != ordered[:-1]
    ranks = np.empty(n, np.int64)
    ranks[order] = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    return ranks


def last_index(groups: Array, size: int) -> I64:
    """For each group 0..size-1, the largest position ``i`` with ``groups[i] == group``, or -1."""
    last = np.full(size, -1, np.int64)
    np.maximum.at(last, np.asarray(groups, np.int64), np.arange(len(groups), dtype=np.int64))
    return last


def gather(values: Array, index: I64) -> Array:
    """``values[index]``, with anything (0) where the index is negative or ``values`` is empty."""
    if not len(values):
        return np.zeros(len(index), values.dtype)
    return values[np.maximum(index, 0)]


def _running_max_before(groups: I64, values: I64) -> I64:
    """For rows sorted by group: the largest value among earlier rows of the group (min int64 if none)."""
    low = np.iinfo(np.int64).min
    out = np.full(len(values), low, np.int64)
    if len(values) < 2:
        return out
    first = np.r_[True, groups[1:] != groups[:-1]]
    span = int(values.max()) - int(values.min()) + 1
    rank = np.cumsum(first) - 1
    if int(rank[-1]) + 1 > np.iinfo(np.int64).max // max(span, 1) - 1:
        return np.full(len(values), np.iinfo(np.int64).max, np.int64)  # too wide to shift: "maybe"
    shifted = rank * span + (values - values.min())  # each group above the one before
    running = np.maximum.accumulate(shifted) - rank * span + values.min()
    out[1:] = np.where(first[1:], low, running[:-1])
    return out


def _parents(groups: I64, starts: I64, ends: I64) -> I64:
    """For intervals sorted by (group, start, end descending): the nearest enclosing earlier one, or -1.

    Pointer jumping: ``p[i]`` starts at ``i - 1`` and climbs its chain while it ends before ``i``;
    every interval skipped that way ends before ``i`` too, so the first one left encloses ``i``. An
    interval that ends after every earlier one of its group has none (the common, unnested case).
    """
    n = len(starts)
    parent = np.arange(n, dtype=np.int64) - 1
    parent[_running_max_before(groups, ends) < ends] = -1
    while True:
        valid = parent >= 0
        climb = np.flatnonzero(valid & (ends[np.maximum(parent, 0)] < ends))
        if not len(climb):
            return parent
        parent[climb] = parent[parent[climb]]


class Intervals:
    """Intervals ``(start, end]`` in groups (API calls on threads), indexed for containment queries."""

    def __init__(self, groups: Array, starts: Array, ends: Array) -> None:
        groups = np.asarray(groups, np.int64)
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        self._order = np.lexsort((-ends, starts, groups))
        self._groups = groups[self._order]
        self._starts = starts[self._order]
        self._ends = ends[self._order]
        self._parent = _parents(self._groups, self._starts, self._ends)

    def innermost(self, query_groups: Array, query_times: Array) -> I64:
        """Index of the innermost interval of the query's group with ``start < time <= end``, or -1."""
        at = search.innermost(self._groups, self._starts, self._ends, self._parent, query_groups, query_times)
        return np.where(at >= 0, gather(self._order, at), -1)


def innermost(groups: Array, starts: Array, ends: Array, query_groups: Array, query_times: Array) -> I64:
    """Index of the innermost interval of the query's group with ``start < time <= end``, or -1."""
    return Intervals(groups, starts, ends).innermost(query_groups, query_times)


def progress_time(batch: pa.RecordBatch) -> int:
    """The time an ``api_progress`` batch announces."""
    return int(column(batch, "time_ns").max())


# -- state helpers ------------------------------------------------------------------------------


def empty(table_schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([], table_schema)


def frozen(table: pa.Table) -> pa.RecordBatch:
    """One record batch of ``table``, the same bytes whenever the rows are the same (for snapshots)."""
    if table.num_rows == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in table.schema], schema=table.schema)
    return table.combine_chunks().to_batches()[0]


def thawed(value: pa.Table, table_schema: pa.Schema) -> pa.Table:
    """A state table read back from a snapshot."""
    return value.cast(table_schema) if value.num_rows else empty(table_schema)


#: chunks a state table may collect before ``append`` combines them: reading a column of a chunked
#: table copies it, and state columns are read on every advance
MAX_CHUNKS = 8


def append(table: pa.Table, rows: pa.Table) -> pa.Table:
    joined = pa.concat_tables([table, rows.select(table.schema.names).cast(table.schema)])
    if joined.num_rows and joined.column(0).num_chunks > MAX_CHUNKS:
        return joined.combine_chunks()
    return joined


def column(table: pa.Table | pa.RecordBatch, name: str, dtype: npt.DTypeLike = np.int64) -> Array:
    """A column as a numpy array of ``dtype`` (nulls are not expected here); a column of one chunk is
    read in place (most are: tables are combined as they collect chunks, see :data:`MAX_CHUNKS`)."""
    values = schema.one_array(table.column(name))
    return np.asarray(values.to_numpy(zero_copy_only=False)).astype(dtype, copy=False)


def log_unmatched(component: str, counts: Mapping[str, int]) -> None:
    """Report what never matched, once, at the end (only non-zero counts)."""
    nonzero = {k: v for k, v in counts.items() if v}
    if nonzero:
        events.get_logger(component=component).warning(events.RECORDS_UNMATCHED, **nonzero)


# -- the operator ------------------------------------------------------------------------------

_ROWS = pa.schema(
    [
        ("level", pa.uint16()),
        ("type", pa.uint64()),
        ("thread_id", pa.int64()),
        ("request_id", pa.int64()),
        ("item_id", pa.uint64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
    ]
)
_OPEN = pa.schema([f for f in _ROWS if f.name != "end_ns"] + [pa.field("seq", pa.int64())])
_EVENT_KEY = ("level", "type", "thread_id", "request_id", "item_id")
#: ``api_progress`` rows: every ``api`` row starting before ``time_ns`` has been emitted
PROGRESS = pa.schema([("time_ns", pa.int64())])


class ApiEvents(Operator):
    """``api_event`` -> ``api``: Api rows as they stand, Event pairs as intervals, names resolved.

    Inputs: ``source`` (the api_event feed). Outputs: ``api`` (``schema.TABLES["api"]``) and
    ``api_progress`` (:data:`PROGRESS`).
    ``dictionaries`` give the names; ``open_limit_ns`` bounds how long an open event holds rows back.
    """

    def __init__(
        self,
        dictionaries: Dictionaries,
        *,
        open_limit_ns: int = OPEN_LIMIT_NS,
        source: str = "api_event",
        output: str = "api",
        progress: str = "api_progress",
    ) -> None:
        self.inputs = (source,)
        self.outputs = (output, progress)
        self.names = dictionaries
        self.open_limit_ns = open_limit_ns
        self._pending = empty(_ROWS)
        self._open = empty(_OPEN)
        self._seq = 0
        self._next_id = 0
        self._released = np.iinfo(np.int64).min
        self.counts = {"zero_begin": 0, "late_pairs": 0, "unclosed_events": 0}

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        is_event = column(batch, "is_event", np.bool_)
        apis = batch.filter(pa.array(~is_event))
        zero = column(apis, "begin_time", np.uint64) == 0
        self.counts["zero_begin"] += int(zero.sum())
        apis = apis.filter(pa.array(~zero))
        rows = pa.table({name: apis.column(name) for name in _ROWS.names}).cast(_ROWS)
        pairs = self._pair(batch.filter(pa.array(is_event)))
        self.counts["late_pairs"] += int((column(pairs, "start_ns") < self._released).sum())
        self._pending = pa.concat_tables([self._pending, rows, pairs])

    def _pair(self, batch: pa.RecordBatch) -> pa.Table:
        """Close open events with ``batch``'s events in arrival order; keep what stays open."""
        fresh = {name: batch.column(name) for name in _EVENT_KEY}
        fresh["start_ns"] = batch.column("start_ns")
        fresh["seq"] = pa.array(self._seq + np.arange(batch.num_rows, dtype=np.int64))
        self._seq += batch.num_rows
        everything = pa.concat_tables([self._open, pa.table(fresh).cast(_OPEN)])
        cols = {name: column(everything, name, np.uint64) for name in _EVENT_KEY}
        seq = column(everything, "seq")
        order = np.lexsort((seq, *(cols[name] for name in reversed(_EVENT_KEY))))
        group = dense_ids(*(cols[name] for name in _EVENT_KEY))[order]
        first = np.r_[True, group[1:] != group[:-1]]
        rank = np.arange(len(order)) - np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        closes = np.flatnonzero(rank % 2 == 1)
        last = np.r_[group[1:] != group[:-1], True]
        stays = order[np.flatnonzero(last & (rank % 2 == 0))]
        self._open = everything.take(pa.array(np.sort(stays)))
        opening = everything.take(pa.array(order[closes - 1]))
        closing = everything.take(pa.array(order[closes]))
        pairs = {name: opening.column(name) for name in _ROWS.names if name != "end_ns"}
        pairs["end_ns"] = closing.column("start_ns")
        return pa.table(pairs).cast(_ROWS)

    def _safe(self, watermark: int) -> int:
        starts = column(self._open, "start_ns")
        holding = starts[starts >= watermark - self.open_limit_ns]
        return min(watermark, int(holding.min())) if len(holding) else watermark

    def advance(self, watermark: int) -> list[Emit]:
        safe = self._safe(watermark)
        out = self._release(column(self._pending, "start_ns") < safe)
        return out + self._progress(safe)

    def finish(self) -> list[Emit]:
        self.counts["unclosed_events"] += self._open.num_rows
        self._open = empty(_OPEN)
        out = self._release(np.ones(self._pending.num_rows, np.bool_))
        log_unmatched("api", self.counts)
        return out + self._progress(DONE)

    def _progress(self, safe: int) -> list[Emit]:
        if safe <= self._released:
            return []
        self._released = safe
        return [
            (self.outputs[1], pa.RecordBatch.from_arrays([pa.array([safe], pa.int64())], schema=PROGRESS))
        ]

    def _release(self, ready: npt.NDArray[np.bool_]) -> list[Emit]:
        rows = self._pending.filter(pa.array(ready))
        self._pending = self._pending.filter(pa.array(~ready))
        if rows.num_rows == 0:
            return []
        level = column(rows, "level")
        order = np.lexsort((-level, column(rows, "start_ns")))
        rows = rows.take(pa.array(order))
        return [(self.outputs[0], self._table(rows))]

    def _table(self, rows: pa.Table) -> pa.RecordBatch:
        level = column(rows, "level")
        kind = column(rows, "type", np.uint64)
        item = column(rows, "item_id", np.uint64)
        typed = self.names.type_names(level, kind)
        acl = level == ACL_LEVEL
        struct = pc.if_else(pa.array(acl), enum_names(kind >> np.uint64(16), ACL_API_TAGS), typed)
        items = self.names.names(item)
        name = pc.if_else(pa.array(level == COMMUNICATION_LEVEL), items, typed)
        # 0 and ids missing from hash_dic already print as their number
        step_info = pc.equal(typed, "step_info").to_numpy(zero_copy_only=False)
        numbered = (level == MODEL_LEVEL) | ((level == NODE_LEVEL) & step_info)
        item_text = items
        if numbered.any():
            decimals = pc.cast(pa.array(item[numbered]), pa.string())
            item_text = pc.replace_with_mask(items, pa.array(numbered), decimals)
        ids = self._next_id + np.arange(rows.num_rows, dtype=np.int64)
        self._next_id += rows.num_rows
        return schema.conform(
            schema.TABLES["api"],
            {
                "level": enum_names(level, LEVELS),
                "name": name,
                "struct_type": struct,
                "thread_id": rows.column("thread_id"),
                "start_ns": rows.column("start_ns"),
                "end_ns": rows.column("end_ns"),
                "item_id": pa.array(item.view(np.int64)),  # the u64 bits; view as uint64 to resolve
                "item": item_text,
                "request_id": rows.column("request_id"),
                "connection_id": pa.array(ids),
            },
        )

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "pending": frozen(self._pending),
                "open": frozen(self._open),
                "seq": self._seq,
                "next_id": self._next_id,
                "released": self._released,
                "counts": dict(self.counts),
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._pending = thawed(doc["pending"], _ROWS)
        self._open = thawed(doc["open"], _OPEN)
        self._seq = int(doc["seq"])
        self._next_id = int(doc["next_id"])
        self._released = int(doc["released"])
        self.counts = {k: int(v) for k, v in doc["counts"].items()}
