"""The open-entry table of the keyed kernels: a linear-probing hash table held in plain arrays.

Pairing (open starts per stream/task key) and memory matching (outstanding allocations per
process/pointer or operator/address key) must remember a few entries between batches. The table
that holds them is four plain values — key columns, value columns, an occupancy mask and a count — so
an operator can snapshot it (:meth:`Table.copy`, or :meth:`Table.entries` for a compact form that
:meth:`Table.from_entries` rebuilds) and the kernels can update it in place.

Why a hash table and not the alternatives:

* A dense table indexed by ``stream * 65536 + task`` needs 2048 x 65536 = 134 M slots for the
  11-bit HWTS stream ids (cann_raw_formats.md §2.0), about 1 GiB per int64 column: far over the
  engine's 400 MB budget, and impossible for the 32-bit V6 unique task ids, the FFTS+ key with
  subtask and thread ids, or 64-bit memory pointers.
* Sorted key arrays make every insertion O(open entries), or force a sort of each batch.
* Linear probing costs O(1) per record, its memory follows the number of *open* entries (a few
  thousand in practice: tasks in flight plus starts whose end was lost), and deletion by backward
  shift leaves no tombstones, so a long run never degrades.

Layout: ``keys`` is ``(key_width, capacity)``, ``values`` is ``(value_width, capacity)`` (one row per
column, like the kernels' inputs), ``capacity`` is a power of two. Kernels work through their records
in chunks of :data:`CHUNK` and double the table before a chunk could fill it more than half, so a busy
table has at least ``4 * CHUNK`` slots. Keys are any int64 tuples (uint64 ids viewed as int64 compare
the same).

numba's on-disk cache does not notice edits to a module that a cached kernel calls into: after
changing the helpers here, delete the ``__pycache__/*.nbi``/``*.nbc`` files of this package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profstream.engine.kernels._dispatch import BoolArray, Int64Array, inline, kernel

MIN_CAPACITY = 16
#: records a kernel processes between two checks of the table's load (each may insert one key)
CHUNK = 4096

_SEED = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@inline
def _hash(keys: Int64Array, i: int) -> np.uint64:
    """splitmix64-style mix of the key in column ``i`` of ``keys``."""
    h = _SEED
    for k in range(keys.shape[0]):
        z = h ^ np.uint64(keys[k, i])
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        h = z ^ (z >> _S31)
    return h


@inline
def find(tkeys: Int64Array, tused: BoolArray, keys: Int64Array, i: int) -> tuple[int, bool]:
    """The slot holding key ``keys[:, i]`` and True, or the empty slot where it would go and False."""
    mask = tused.size - 1
    slot = np.int64(_hash(keys, i) & np.uint64(mask))
    width = keys.shape[0]
    while tused[slot]:
        same = True
        for k in range(width):
            if tkeys[k, slot] != keys[k, i]:
                same = False
                break
        if same:
            return int(slot), True
        slot = (slot + 1) & mask
    return int(slot), False


@inline
def _copy_slot(
    src_keys: Int64Array, src_vals: Int64Array, a: int, dst_keys: Int64Array, dst_vals: Int64Array, b: int
) -> None:
    """Copy key and values of slot ``a`` into slot ``b`` of another (or the same) table."""
    for k in range(src_keys.shape[0]):
        dst_keys[k, b] = src_keys[k, a]
    for v in range(src_vals.shape[0]):
        dst_vals[v, b] = src_vals[v, a]


@kernel
def _grown(
    tkeys: Int64Array, tvals: Int64Array, tused: BoolArray
) -> tuple[Int64Array, Int64Array, BoolArray]:
    """A table of twice the capacity holding the same entries."""
    cap = tused.size * 2
    nkeys = np.zeros((tkeys.shape[0], cap), np.int64)
    nvals = np.zeros((tvals.shape[0], cap), np.int64)
    nused = np.zeros(cap, np.bool_)
    for s in range(tused.size):
        if tused[s]:
            slot, _ = find(nkeys, nused, tkeys, s)
            _copy_slot(tkeys, tvals, s, nkeys, nvals, slot)
            nused[slot] = True
    return nkeys, nvals, nused


@kernel
def reserved(
    tkeys: Int64Array, tvals: Int64Array, tused: BoolArray, size: int
) -> tuple[Int64Array, Int64Array, BoolArray]:
    """The table, grown until :data:`CHUNK` more keys keep it at most half full.

    Kernels call this once per chunk of records instead of checking the load on every insertion:
    returning (possibly new) arrays from a per-record helper costs more than the lookup itself.
    """
    while (size + CHUNK) * 2 > tused.size:
        tkeys, tvals, tused = _grown(tkeys, tvals, tused)
    return tkeys, tvals, tused


@inline
def put(tkeys: Int64Array, tused: BoolArray, keys: Int64Array, i: int, slot: int) -> None:
    """Store the absent key ``keys[:, i]`` at ``slot`` (from :func:`find`); its values are the caller's."""
    for k in range(keys.shape[0]):
        tkeys[k, slot] = keys[k, i]
    tused[slot] = True


@inline
def remove(tkeys: Int64Array, tvals: Int64Array, tused: BoolArray, slot: int) -> None:
    """Empty ``slot``, shifting later entries of its probe run back so every key stays findable."""
    mask = tused.size - 1
    hole = slot
    j = slot
    while True:
        j = (j + 1) & mask
        if not tused[j]:
            break
        home = np.int64(_hash(tkeys, j) & np.uint64(mask))
        # the entry at j may move into the hole unless its home lies cyclically in (hole, j]
        stays = hole < home <= j if hole <= j else home > hole or home <= j
        if not stays:
            _copy_slot(tkeys, tvals, j, tkeys, tvals, hole)
            hole = j
    tused[hole] = False


@kernel
def _insert_all(
    tkeys: Int64Array, tvals: Int64Array, tused: BoolArray, keys: Int64Array, values: Int64Array
) -> None:
    """Insert distinct keys with their values into an empty table large enough for them."""
    for i in range(keys.shape[1]):
        slot, _ = find(tkeys, tused, keys, i)
        _copy_slot(keys, values, i, tkeys, tvals, slot)
        tused[slot] = True


@dataclass(frozen=True, slots=True)
class Table:
    """Open entries of a keyed kernel; the kernels update the arrays in place and may replace them."""

    keys: Int64Array
    values: Int64Array
    used: BoolArray
    size: int

    @classmethod
    def empty(cls, key_width: int, value_width: int, capacity: int = MIN_CAPACITY) -> Table:
        """A table with room for ``capacity // 2`` entries before it first grows."""
        cap = max(MIN_CAPACITY, 1 << max(0, capacity - 1).bit_length())
        return cls(
            np.zeros((key_width, cap), np.int64),
            np.zeros((value_width, cap), np.int64),
            np.zeros(cap, np.bool_),
            0,
        )

    @classmethod
    def from_entries(cls, keys: Int64Array, values: Int64Array) -> Table:
        """Rebuild a table from :meth:`entries` (distinct keys)."""
        table = cls.empty(keys.shape[0], values.shape[0], 2 * keys.shape[1] + 1)
        _insert_all(
            table.keys, table.values, table.used, np.ascontiguousarray(keys), np.ascontiguousarray(values)
        )
        return cls(table.keys, table.values, table.used, keys.shape[1])

    def copy(self) -> Table:
        """An independent snapshot."""
        return Table(self.keys.copy(), self.values.copy(), self.used.copy(), self.size)

    def entries(self, order_row: int = 0) -> tuple[Int64Array, Int64Array]:
        """Keys and values of the open entries as ``(width, n)`` arrays, ordered by ``values[order_row]``."""
        slots = np.flatnonzero(self.used)
        if self.values.shape[0]:
            slots = slots[np.argsort(self.values[order_row, slots], kind="stable")]
        return self.keys[:, slots], self.values[:, slots]


@dataclass(slots=True)
class KeyedState:
    """State of a keyed kernel: its open entries and its counters, both updated in place."""

    table: Table
    counts: Int64Array

    @classmethod
    def new(cls, key_width: int, value_width: int, counters: int) -> KeyedState:
        """Nothing open, counters at zero."""
        return cls(Table.empty(key_width, value_width), np.zeros(counters, np.int64))

    def copy(self) -> KeyedState:
        """An independent snapshot."""
        return KeyedState(self.table.copy(), self.counts.copy())
