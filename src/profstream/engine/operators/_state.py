"""What the operators share: int64 column tables, lookups over them, snapshots of keyed state.

A :class:`~profstream.engine.kernels._table.KeyedState` is stored as its open entries ordered by a
value row that is unique per entry (a record sequence number), so the same open entries give the
same bytes whatever the slot layout of the hash table they came from.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import pyarrow as pa

from profstream.engine.kernels._dispatch import NULL, Int64Array
from profstream.engine.kernels._table import KeyedState, Table
from profstream.engine.runtime import DONE, START, Emit, Operator, pack_state, unpack_state

Columns = dict[str, Int64Array]


def pack_keyed(state: KeyedState, order_row: int) -> dict[str, Any]:
    """Open entries (ordered by ``values[order_row]``), shape and counters of a keyed state."""
    keys, values = state.table.entries(order_row)
    return {
        "keys": keys,
        "values": values,
        "width": [int(state.table.keys.shape[0]), int(state.table.values.shape[0])],
        "counts": state.counts,
    }


def unpack_keyed(packed: dict[str, Any]) -> KeyedState:
    """The inverse of :func:`pack_keyed`."""
    key_width, value_width = packed["width"]
    keys = np.asarray(packed["keys"], np.int64).reshape(key_width, -1)
    values = np.asarray(packed["values"], np.int64).reshape(value_width, -1)
    return KeyedState(Table.from_entries(keys, values), np.asarray(packed["counts"], np.int64))


def empty_columns(names: tuple[str, ...]) -> Columns:
    """A table of int64 numpy columns with no rows."""
    return {name: np.empty(0, np.int64) for name in names}


def take(columns: Columns, index: Any) -> Columns:
    """Rows ``index`` (indices or a mask) of every column."""
    return {name: values[index] for name, values in columns.items()}


def split_before(
    columns: Columns, times: Int64Array, until: int, ascending: bool | None = None
) -> tuple[Columns, Columns]:
    """(rows with ``times < until``, the rest), both in their order.

    Buffers mostly arrive in time order: then the split is a prefix and costs two views, not a copy
    of everything still pending (which made operators with a long reorder window quadratic).
    ``ascending``: whether ``times`` are known to be in order (None: look).
    """
    if ascending is None:
        ascending = _ascending(times)
    if ascending:
        cut = int(np.searchsorted(times, until, side="left"))
        return {k: v[:cut] for k, v in columns.items()}, {k: v[cut:] for k, v in columns.items()}
    ready = times < until
    return take(columns, ready), take(columns, ~ready)


def _ascending(times: Int64Array) -> bool:
    return times.size < 2 or bool(np.all(times[1:] >= times[:-1]))


class Pending:
    """Rows waiting for a time horizon, kept as the chunks they arrived in.

    Appending is O(1) and taking the rows before a time touches only the chunks that hold some, so a
    long window of pending rows is not copied on every push and every advance. Whether a chunk is in
    time order is looked at once, when it comes.
    """

    def __init__(self, names: tuple[str, ...], rows: Columns | None = None) -> None:
        self.names = names
        self._chunks: list[tuple[Columns, bool]] = []  # each with whether it is in time order
        if rows is not None:
            self.append(rows)

    def append(self, new: Columns) -> None:
        if len(new[self.names[0]]):
            self._chunks.append((new, _ascending(new["time"])))

    def take_before(self, until: int) -> Columns:
        """Remove and return the rows with ``time < until``, in arrival order."""
        taken: list[Columns] = []
        kept: list[tuple[Columns, bool]] = []
        for chunk, ascending in self._chunks:
            ready, rest = split_before(chunk, chunk["time"], until, ascending)
            if len(ready[self.names[0]]):
                taken.append(ready)
            if len(rest[self.names[0]]):
                kept.append((rest, ascending))
        self._chunks = kept
        return self._joined(taken)

    def times_before(self, until: int) -> Int64Array:
        """The times of the rows with ``time < until`` (left pending)."""
        times = [chunk["time"] for chunk, _ in self._chunks]
        return np.concatenate([t[t < until] for t in times]) if times else np.empty(0, np.int64)

    def columns(self) -> Columns:
        """Every pending row as one table (for snapshots)."""
        return self._joined([chunk for chunk, _ in self._chunks])

    def _joined(self, chunks: list[Columns]) -> Columns:
        if not chunks:
            return empty_columns(self.names)
        if len(chunks) == 1:
            return chunks[0]
        return {name: np.concatenate([c[name] for c in chunks]) for name in self.names}


def concat(first: Columns, second: Columns) -> Columns:
    """Rows of ``first`` then rows of ``second`` (same column names)."""
    return {name: np.concatenate((first[name], second[name])) for name in first}


def rows(columns: Columns) -> int:
    """Number of rows."""
    return len(next(iter(columns.values()))) if columns else 0


class KernelReach:
    """How far the watermark had passed a kernel's launch when the kernel came.

    Kernels reach the framework operators only when they end and the host join has them, and the
    host may run far ahead of the device (the real traces in shared/realdata show kernels starting
    up to 94 ms after the torch op that launched them, in steps of about 130 ms). What a launch is
    matched to (an op, a dequeue window, a step) is kept that much longer than the watermark alone
    says: :meth:`reach` after the kernels seen so far, or ``unknown`` before the first one. The
    distance is taken from the watermark of the last advance (the one the operator last let go by);
    for kernels that came before the first advance, from that first advance's watermark.
    """

    def __init__(self, state: list[int] | None = None) -> None:
        # the last advance's watermark (NULL before the first), the furthest reach so far (NULL:
        # none yet) and the oldest launch that came before the first advance
        self._watermark, self._reach, self._early = state if state is not None else (NULL, NULL, DONE)

    def saw(self, launches: Int64Array) -> None:
        """Launches of kernels that just came."""
        if not launches.size:
            return
        if self._watermark == NULL:
            self._early = min(self._early, int(launches.min()))
        else:
            self._reach = max(self._reach, self._watermark - int(launches.min()), 0)

    def advance(self, watermark: int) -> None:
        if watermark == DONE:
            return
        if self._watermark == NULL and self._early != DONE:
            self._reach = max(self._reach, watermark - self._early, 0)
        self._watermark = watermark

    def reach(self, unknown: int) -> int:
        return unknown if self._reach == NULL else self._reach

    def state(self) -> list[int]:
        return [self._watermark, self._reach, self._early]


class RowByRow(Operator):
    """An operator whose every input batch makes its output rows on its own, with no state across
    batches: the rows leave at the next :meth:`advance`. Input rows that make none are counted in
    ``skipped`` (a subclass reports them)."""

    def __init__(self, source: str, output: str) -> None:
        self.inputs = (source,)
        self.outputs = (output,)
        self._ready: list[Emit] = []
        self.skipped = 0

    @abstractmethod
    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The output rows of one non-empty input batch; None when it makes none."""

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream not in self.inputs:
            raise self.unknown_input(stream)
        if batch.num_rows == 0:
            return
        out = self.rows(batch)
        if out is None:
            self.skipped += batch.num_rows
        else:
            self._ready.append((self.outputs[0], out))

    def advance(self, watermark: int) -> list[Emit]:
        ready, self._ready = self._ready, []
        return ready

    def finish(self) -> list[Emit]:
        return self.advance(DONE)

    def snapshot(self) -> bytes:
        return pack_state({"ready": [[name, batch] for name, batch in self._ready], "skipped": self.skipped})

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._ready = [(name, table.to_batches()[0]) for name, table in doc["ready"]]
        self.skipped = int(doc["skipped"])


def slice_starts(times: Int64Array, size: int) -> list[int]:
    """Times that cut ``times`` into slices of about ``size`` (each bound starts a slice): an
    operator emits a large release slice by slice, as smaller watermark steps would have."""
    if times.size <= size:
        return []
    return [int(bound) for bound in np.unique(np.sort(times, kind="stable")[size::size])]  # runs: timsort


def horizon(watermark: int, lag: int) -> int:
    """``watermark - lag`` within [START, DONE]; DONE stays DONE (everything is final)."""
    if watermark >= DONE:
        return DONE
    return max(START, watermark - lag)


def ints(column: pa.Array | pa.ChunkedArray) -> Int64Array:
    """An integer column as int64 (uint64 ids keep their bits), nulls as NULL."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_uint64(column.type):
        column = column.view(pa.int64())
    elif column.type != pa.int64():
        column = column.cast(pa.int64())
    if column.null_count:
        column = column.fill_null(NULL)
    return np.asarray(column.to_numpy(zero_copy_only=False), np.int64)


def nullable(values: Int64Array) -> pa.Array:
    """int64 values with NULL as a null."""
    return pa.array(values, pa.int64(), mask=values == NULL)


def find(keys: Int64Array, wanted: Int64Array) -> Int64Array:
    """Positions of ``wanted`` in the sorted unique ``keys``, -1 where absent."""
    at_ = np.searchsorted(keys, wanted)
    found = at_ < keys.size
    found[found] = keys[at_[found]] == wanted[found]
    return np.where(found, at_, -1)


def pick(values: Int64Array, index: Int64Array, missing: int = -1) -> Int64Array:
    """``values[index]`` where the index is >= 0, ``missing`` where it is -1."""
    out = np.full(index.size, missing, np.int64)
    hit = index >= 0
    out[hit] = values[index[hit]]
    return out


def gather(table: Columns, index: Int64Array, names: tuple[str, ...]) -> tuple[Int64Array, ...]:
    """Columns ``names`` at rows ``index``, NULL where the index is -1."""
    return tuple(pick(table[name], index, NULL) for name in names)
