"""Memory matching: allocation records into ``operator_memory`` rows (PyTorch adapter and GE/CANN).

**PyTorch adapter** (specs/framework_outputs.md §4b; torch_npu
``prof_view/_memory_prepare_parser.py``): ``torch.memory_usage`` records (§1.3) of one process and one
pointer, in time order, are cut into groups. Nothing starts a group but a MALLOC; a group takes the
following records while each brings a data type the group does not have yet (MALLOC, FREE,
BLOCK_FREE: at most one of each, so at most three records, and BLOCK_FREE may come before FREE —
§1.3 "Memory sign convention"); a record of a type the group already has closes it, and then
starts the next group if it is a MALLOC or is dropped if it is a FREE or BLOCK_FREE. A row per group:

* allocation time and payload (size, totals, stream, ...) from the MALLOC;
* ``Release Time`` / ``Duration`` from the FREE, ``Active Release Time`` / ``Active Duration`` from
  the BLOCK_FREE — :data:`~profstream.engine.kernels._dispatch.NULL` (an empty cell) when the group
  lacks it;
* release totals from the FREE if there is one, else from the BLOCK_FREE (the adapter takes the
  second record of a two-record group) — zeros with no release record;
* the adapter's "N memory record(s) are incomplete" counter adds 2 for a MALLOC alone and 1 for a
  two-record group (:data:`PTA_INCOMPLETE`).

FREE/BLOCK_FREE records outside any group (no MALLOC before them on that pointer, or a repeat) are
dropped by the adapter; here they are dropped and counted (:data:`PTA_DROPPED`). The caller filters
first (device type 20, inner allocator) and gives the records in ``(time, file order)`` order, as the
adapter sorts them; the key is ``(process id, ptr)``.

Streaming: a group is emitted the moment it is closed (its third record or a repeated type); open
groups are the state (outstanding allocations). ``final=True`` also emits the open groups — never
freed, or freed but never block-freed — in order of their MALLOC. The adapter sorts the rows of each
process by allocation time; rows here come in closing order, and the operator sorts what it needs.

**GE / CANN operator memory** (specs/cann_raw_formats.md §2.9 ``task_memory_info``,
specs/msprof_outputs.md §2.8; msprof ``analysis/mscalculate/npu_mem/npu_op_mem_calculator.py``):
records in order, keyed by ``(operator, addr, device type)``. ``size > 0`` allocates and replaces a
pending allocation of the same key (msprof loses the older one silently; here it is counted,
:data:`GE_REPLACED`); ``size < 0`` releases the pending allocation into a row (``Duration`` = release
- allocation); ``size == 0`` is neither and is counted (:data:`GE_ZERO_SIZE`). A release without a
pending allocation is dropped by msprof's Python calculator and by its C++ one
(``analysis/csrc/domain/services/modeling/npu_op_mem_calculator.cpp``), while msprof's documentation
describes rows with a negative size when the allocation fell before the collection window: here it
comes out as a row with the allocation time ``NULL`` and the release's (negative) size and is counted
(:data:`GE_NO_ALLOCATION`), so the caller can follow either. ``final=True`` emits the allocations
never released with empty release columns (:data:`GE_NEVER_FREED`), in the order their keys were first
allocated: an allocation that replaced a pending one keeps that one's place, as msprof's Python dict
and its C++ ``insertionOrder`` do.

**memory_record companions** (framework_outputs.md §4b; the operator's docstring has the rule):
:func:`memory_records` writes the records of every component in their merged order, each PTA and
GE record followed by its ``PTA+GE`` row, its totals plus the latest of the other component on its
device (a GE record's active total counting as 0). One pass in order, carrying the latest totals of
each component per device across batches.

Both matching kernels carry a caller-chosen int64 payload per record (the columns that end up in the row) in
their state, and report record sequence numbers (``base + i``) so the wrapper can join the rest.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import (
    NO_SEQ,
    NULL,
    BoolArray,
    Columns,
    Int64Array,
    inline,
    int_column,
    int_rows,
    kernel,
    require_times,
)
from profstream.engine.kernels._table import CHUNK, KeyedState, Table, find, put, remove, reserved

#: ``torch.memory_usage`` data types (framework_outputs.md §1.3)
MALLOC, FREE, BLOCK_FREE = range(3)
#: counters of :func:`match_pta`: rows emitted, FREE/BLOCK_FREE records dropped, the adapter's
#: incomplete count
PTA_ROWS, PTA_DROPPED, PTA_INCOMPLETE = range(3)
#: memory_record components (the operator's ``COMPONENTS`` order)
APP, PTA, WORKSPACE, GE, PTA_GE = range(5)
#: rows of the :func:`memory_records` output and of its ``latest`` totals (TOTALS = the four totals)
R_COMPONENT, R_DEVICE, R_TIME, R_ALLOCATED, R_RESERVED, R_ACTIVE, R_STREAM = range(7)
L_FOUND, L_ALLOCATED, L_RESERVED, L_ACTIVE, L_STREAM = range(5)
#: counters of :func:`match_ge`: allocation/release rows, releases without allocation, allocations
#: replaced by a newer one, size-0 records, allocations emitted unreleased at the end
GE_PAIRED, GE_NO_ALLOCATION, GE_REPLACED, GE_ZERO_SIZE, GE_NEVER_FREED = range(5)

# PTA group values: time and seq of each data type (2 * type, 2 * type + 1), then payload per type
_GROUP_FIXED = 6
# PTA output rows
_P_ALLOC, _P_RELEASE, _P_ACTIVE, _P_DURATION, _P_ACTIVE_DURATION, _P_ALLOC_SEQ, _P_FREE_SEQ, _P_BLOCK_SEQ = (
    range(8)
)
_P_FIXED = 8
# GE pending allocation values: time, seq, size, the seq of the key's first allocation, then payload
_G_TIME, _G_SEQ, _G_SIZE, _G_FIRST = range(4)
_G_VALUES = 4
# GE output rows
_G_ALLOC, _G_RELEASE, _G_DURATION, _G_SIZE_OUT, _G_ALLOC_SEQ, _G_RELEASE_SEQ = range(6)
_G_FIXED = 6


class PtaRows(NamedTuple):
    """``operator_memory`` rows of the PyTorch adapter.

    Absent times and durations are ``NULL``, absent seqs ``NO_SEQ``; ``keys``, ``alloc_payload`` and
    ``release_payload`` are ``(width, n)``.
    """

    alloc_time: Int64Array
    release_time: Int64Array
    active_release_time: Int64Array
    duration: Int64Array
    active_duration: Int64Array
    alloc_seq: Int64Array
    free_seq: Int64Array
    block_free_seq: Int64Array
    keys: Int64Array
    alloc_payload: Int64Array
    release_payload: Int64Array


class GeRows(NamedTuple):
    """GE operator memory rows; ``size`` is the allocation's, or the release's (negative) without one."""

    alloc_time: Int64Array
    release_time: Int64Array
    duration: Int64Array
    size: Int64Array
    alloc_seq: Int64Array
    release_seq: Int64Array
    keys: Int64Array
    alloc_payload: Int64Array
    release_payload: Int64Array


def pta_state(payload_width: int = 0, key_width: int = 2) -> KeyedState:
    """State of :func:`match_pta` before the first batch: open groups per (process, ptr)."""
    return KeyedState.new(key_width, _GROUP_FIXED + 3 * payload_width, 3)


def _payload_width(state: KeyedState) -> int:
    """The payload columns a PTA state was made for (:func:`pta_state`)."""
    return int((state.table.values.shape[0] - _GROUP_FIXED) // 3)


def _payload_rows(state: KeyedState, column: int) -> tuple[Int64Array, Int64Array]:
    rows = _GROUP_FIXED + np.array([MALLOC, FREE, BLOCK_FREE]) * _payload_width(state) + column
    return rows, np.flatnonzero(state.table.used)


def open_pta_payload(state: KeyedState, column: int) -> Int64Array:
    """Payload ``column`` of every open PTA group, one row per data type (MALLOC, FREE, BLOCK_FREE)."""
    rows, slots = _payload_rows(state, column)
    return state.table.values[np.ix_(rows, slots)]


def set_open_pta_payload(state: KeyedState, column: int, values: Int64Array) -> None:
    """Overwrite what :func:`open_pta_payload` returned (a caller re-coding what its payload refers to)."""
    rows, slots = _payload_rows(state, column)
    state.table.values[np.ix_(rows, slots)] = values


def ge_state(payload_width: int = 0, key_width: int = 3) -> KeyedState:
    """State of :func:`match_ge` before the first batch: pending allocations per (operator, addr, device)."""
    return KeyedState.new(key_width, _G_VALUES + payload_width, 5)


# --------------------------------------------------------------------------- kernels


@inline
def _copy_keys(out: Int64Array, row: int, n: int, tkeys: Int64Array, slot: int) -> None:
    """Key of table ``slot`` into output rows ``row..`` of column ``n``."""
    for k in range(tkeys.shape[0]):
        out[row + k, n] = tkeys[k, slot]


@inline
def _emit_group(
    tkeys: Int64Array, tvals: Int64Array, slot: int, width: int, out: Int64Array, n: int, counts: Int64Array
) -> None:
    """Render the PTA group in ``slot`` (payload ``width``) as output column ``n``."""
    alloc = tvals[2 * MALLOC, slot]
    free = tvals[2 * FREE, slot]
    block = tvals[2 * BLOCK_FREE, slot]
    has_free = tvals[2 * FREE + 1, slot] != NO_SEQ
    has_block = tvals[2 * BLOCK_FREE + 1, slot] != NO_SEQ
    out[_P_ALLOC, n] = alloc
    out[_P_RELEASE, n] = free if has_free else NULL
    out[_P_ACTIVE, n] = block if has_block else NULL
    out[_P_DURATION, n] = free - alloc if has_free else NULL
    out[_P_ACTIVE_DURATION, n] = block - alloc if has_block else NULL
    out[_P_ALLOC_SEQ, n] = tvals[2 * MALLOC + 1, slot]
    out[_P_FREE_SEQ, n] = tvals[2 * FREE + 1, slot]
    out[_P_BLOCK_SEQ, n] = tvals[2 * BLOCK_FREE + 1, slot]
    _copy_keys(out, _P_FIXED, n, tkeys, slot)
    row = _P_FIXED + tkeys.shape[0]
    release = FREE if has_free else (BLOCK_FREE if has_block else -1)
    for p in range(width):
        out[row + p, n] = tvals[_GROUP_FIXED + MALLOC * width + p, slot]
        out[row + width + p, n] = 0 if release < 0 else tvals[_GROUP_FIXED + release * width + p, slot]
    counts[PTA_ROWS] += 1
    counts[PTA_INCOMPLETE] += 2 - int(has_free) - int(has_block)


@kernel
def _match_pta(
    keys: Int64Array,
    kinds: Int64Array,
    times: Int64Array,
    payload: Int64Array,
    base: int,
    tkeys: Int64Array,
    tvals: Int64Array,
    tused: BoolArray,
    size: int,
    counts: Int64Array,
    out: Int64Array,
) -> tuple[int, Int64Array, Int64Array, BoolArray, int]:
    """Group PTA records per key; closed groups go to ``out``. Returns rows written and the (grown) table."""
    n = 0
    width = payload.shape[0]
    for lo in range(0, times.size, CHUNK):
        tkeys, tvals, tused = reserved(tkeys, tvals, tused, size)
        for i in range(lo, min(lo + CHUNK, times.size)):
            kind = kinds[i]
            slot, found = find(tkeys, tused, keys, i)
            if found:
                if tvals[2 * kind + 1, slot] == NO_SEQ:
                    tvals[2 * kind, slot] = times[i]
                    tvals[2 * kind + 1, slot] = base + i
                    for p in range(width):
                        tvals[_GROUP_FIXED + kind * width + p, slot] = payload[p, i]
                    if tvals[2 * FREE + 1, slot] != NO_SEQ and tvals[2 * BLOCK_FREE + 1, slot] != NO_SEQ:
                        _emit_group(tkeys, tvals, slot, width, out, n, counts)
                        n += 1
                        remove(tkeys, tvals, tused, slot)
                        size -= 1
                    continue
                # a repeated type closes the group
                _emit_group(tkeys, tvals, slot, width, out, n, counts)
                n += 1
                remove(tkeys, tvals, tused, slot)
                size -= 1
                slot, found = find(tkeys, tused, keys, i)
            if kind != MALLOC:
                counts[PTA_DROPPED] += 1
                continue
            put(tkeys, tused, keys, i, slot)
            size += 1
            for v in range(_GROUP_FIXED):
                tvals[v, slot] = NULL if v % 2 == 0 else NO_SEQ
            tvals[2 * MALLOC, slot] = times[i]
            tvals[2 * MALLOC + 1, slot] = base + i
            for p in range(width):
                tvals[_GROUP_FIXED + MALLOC * width + p, slot] = payload[p, i]
    return n, tkeys, tvals, tused, size


@inline
def _emit_ge(
    out: Int64Array,
    n: int,
    alloc: int,
    release: int,
    size: int,
    alloc_seq: int,
    release_seq: int,
    keys: Int64Array,
    i: int,
) -> None:
    """Write the fixed columns and the key of GE output column ``n``."""
    out[_G_ALLOC, n] = alloc
    out[_G_RELEASE, n] = release
    out[_G_DURATION, n] = NULL if NULL in (alloc, release) else release - alloc
    out[_G_SIZE_OUT, n] = size
    out[_G_ALLOC_SEQ, n] = alloc_seq
    out[_G_RELEASE_SEQ, n] = release_seq
    for k in range(keys.shape[0]):
        out[_G_FIXED + k, n] = keys[k, i]


@kernel
def _match_ge(
    keys: Int64Array,
    sizes: Int64Array,
    times: Int64Array,
    payload: Int64Array,
    base: int,
    tkeys: Int64Array,
    tvals: Int64Array,
    tused: BoolArray,
    size: int,
    counts: Int64Array,
    out: Int64Array,
) -> tuple[int, Int64Array, Int64Array, BoolArray, int]:
    """Pair GE allocations and releases per key. Returns rows written and the (grown) table."""
    n = 0
    width = payload.shape[0]
    row = _G_FIXED + keys.shape[0]
    for lo in range(0, times.size, CHUNK):
        tkeys, tvals, tused = reserved(tkeys, tvals, tused, size)
        for i in range(lo, min(lo + CHUNK, times.size)):
            amount = sizes[i]
            if amount == 0:
                counts[GE_ZERO_SIZE] += 1
                continue
            slot, found = find(tkeys, tused, keys, i)
            if amount > 0:
                if found:
                    counts[GE_REPLACED] += 1
                else:
                    put(tkeys, tused, keys, i, slot)
                    size += 1
                    tvals[_G_FIRST, slot] = base + i
                tvals[_G_TIME, slot] = times[i]
                tvals[_G_SEQ, slot] = base + i
                tvals[_G_SIZE, slot] = amount
                for p in range(width):
                    tvals[_G_VALUES + p, slot] = payload[p, i]
                continue
            if found:
                _emit_ge(
                    out,
                    n,
                    tvals[_G_TIME, slot],
                    times[i],
                    tvals[_G_SIZE, slot],
                    tvals[_G_SEQ, slot],
                    base + i,
                    keys,
                    i,
                )
                for p in range(width):
                    out[row + p, n] = tvals[_G_VALUES + p, slot]
                remove(tkeys, tvals, tused, slot)
                size -= 1
                counts[GE_PAIRED] += 1
            else:
                _emit_ge(out, n, NULL, times[i], amount, NO_SEQ, base + i, keys, i)
                for p in range(width):
                    out[row + p, n] = 0
                counts[GE_NO_ALLOCATION] += 1
            for p in range(width):
                out[row + width + p, n] = payload[p, i]
            n += 1
    return n, tkeys, tvals, tused, size


@kernel
def _drain(
    kind: int,
    width: int,
    tkeys: Int64Array,
    tvals: Int64Array,
    slots: Int64Array,
    counts: Int64Array,
    out: Int64Array,
) -> None:
    """Emit the open entries in ``slots`` (in that order): PTA groups (kind 0) or GE allocations (kind 1)."""
    for n in range(slots.size):
        slot = slots[n]
        if kind == 0:
            _emit_group(tkeys, tvals, slot, width, out, n, counts)
            continue
        out[_G_ALLOC, n] = tvals[_G_TIME, slot]
        out[_G_RELEASE, n] = NULL
        out[_G_DURATION, n] = NULL
        out[_G_SIZE_OUT, n] = tvals[_G_SIZE, slot]
        out[_G_ALLOC_SEQ, n] = tvals[_G_SEQ, slot]
        out[_G_RELEASE_SEQ, n] = NO_SEQ
        _copy_keys(out, _G_FIXED, n, tkeys, slot)
        row = _G_FIXED + tkeys.shape[0]
        for p in range(width):
            out[row + p, n] = tvals[_G_VALUES + p, slot]
            out[row + width + p, n] = 0
        counts[GE_NEVER_FREED] += 1


@kernel
def _records(
    order: Int64Array,
    component: Int64Array,
    device: Int64Array,
    times: Int64Array,
    totals: Int64Array,
    latest: Int64Array,
    out: Int64Array,
) -> int:
    """The records in ``order`` into ``out``, each PTA and GE record followed by its PTA+GE row."""
    n = 0
    for r in order:
        kind = component[r]
        slot = device[r]
        out[R_COMPONENT, n] = kind
        out[R_DEVICE, n] = slot
        out[R_TIME, n] = times[r]
        for v in range(4):
            out[R_ALLOCATED + v, n] = totals[v, r]
        n += 1
        if kind not in (PTA, GE):
            continue
        own = 0 if kind == PTA else 1
        out[R_COMPONENT, n] = PTA_GE
        out[R_DEVICE, n] = slot
        out[R_TIME, n] = times[r]
        for v in range(3):
            value = 0 if kind == GE and v == 2 else totals[v, r]  # a GE record's active total counts as 0
            partner = latest[1 - own, L_ALLOCATED + v, slot]
            if partner == NULL:
                out[R_ALLOCATED + v, n] = value
            elif value == NULL:
                out[R_ALLOCATED + v, n] = partner
            else:
                out[R_ALLOCATED + v, n] = value + partner
        stream = totals[3, r]
        out[R_STREAM, n] = latest[1 - own, L_STREAM, slot] if stream in (NULL, 0) else stream
        n += 1
        latest[own, L_FOUND, slot] = 1
        for v in range(4):
            latest[own, L_ALLOCATED + v, slot] = totals[v, r]
    return n


# --------------------------------------------------------------------------- wrappers


def _batch(
    keys: Columns,
    values: npt.ArrayLike,
    times: npt.ArrayLike,
    payload: Columns | None,
    state: KeyedState,
    name: str,
) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:
    """Validated key, value, time and payload columns of one batch."""
    t = int_column("times", times)
    require_times("times", t)
    v = int_column(name, values, t.size)
    k = int_rows("keys", keys, t.size, state.table.keys.shape[0])
    p = int_rows("payload", payload, t.size)
    return k, v, t, p


def _finish(
    kind: int, width: int, state: KeyedState, out: Int64Array, order_row: int, final: bool
) -> Int64Array:
    """With ``final``, append the open entries (by first record) to ``out`` and empty the table."""
    if not final:
        return out
    table = state.table
    slots = np.flatnonzero(table.used)
    slots = slots[np.argsort(table.values[order_row, slots], kind="stable")].astype(np.int64)
    rest = np.empty((out.shape[0], slots.size), np.int64)
    _drain(kind, width, table.keys, table.values, slots, state.counts, rest)
    state.table = Table.empty(table.keys.shape[0], table.values.shape[0])
    return np.concatenate((out, rest), axis=1)


def match_pta(
    keys: Columns,
    kinds: npt.ArrayLike,
    times: npt.ArrayLike,
    *,
    state: KeyedState,
    payload: Columns | None = None,
    base: int = 0,
    final: bool = False,
) -> PtaRows:
    """One batch of PyTorch adapter memory records to ``operator_memory`` rows (framework_outputs.md §4b).

    ``keys`` = (process id, ptr), ``kinds`` = data type (:data:`MALLOC`, :data:`FREE`,
    :data:`BLOCK_FREE`), in ``(time, file order)`` order; ``payload`` (at most as wide as the state
    was made for) rides along from each record into the row. ``state`` is updated in place.
    """
    k, kinds_, t, p = _batch(keys, kinds, times, payload, state, "kinds")
    width = _payload_width(state)
    if p.shape[0] != width:
        msg = f"payload: expected {width} columns (as the state was made), got {p.shape[0]}"
        raise ValueError(msg)
    bad = np.flatnonzero((kinds_ < MALLOC) | (kinds_ > BLOCK_FREE))
    if bad.size:
        i = int(bad[0])
        msg = f"kinds: expected 0 (malloc), 1 (free) or 2 (block_free), got {kinds_[i]} at index {i}"
        raise ValueError(msg)
    bad = np.flatnonzero(t[1:] < t[:-1])
    if bad.size:
        i = int(bad[0]) + 1
        msg = f"times: expected ascending times, got {t[i]} after {t[i - 1]} at index {i}"
        raise ValueError(msg)
    table = state.table
    out = np.empty((_P_FIXED + k.shape[0] + 2 * width, t.size), np.int64)
    n, tk, tv, tu, size = _match_pta(
        k, kinds_, t, p, base, table.keys, table.values, table.used, table.size, state.counts, out
    )
    state.table = Table(tk, tv, tu, size)
    o = _finish(0, width, state, out[:, :n], 2 * MALLOC + 1, final)
    row = _P_FIXED + k.shape[0]
    return PtaRows._make([*o[:_P_FIXED], o[_P_FIXED:row], o[row : row + width], o[row + width :]])


def match_ge(
    keys: Columns,
    sizes: npt.ArrayLike,
    times: npt.ArrayLike,
    *,
    state: KeyedState,
    payload: Columns | None = None,
    base: int = 0,
    final: bool = False,
) -> GeRows:
    """One batch of GE ``task_memory_info`` records to operator memory rows (cann_raw_formats.md §2.9).

    ``keys`` = (operator hash, addr, device type), ``sizes`` signed bytes, records in order.
    ``state`` is updated in place.
    """
    k, s, t, p = _batch(keys, sizes, times, payload, state, "sizes")
    width = state.table.values.shape[0] - _G_VALUES
    if p.shape[0] != width:
        msg = f"payload: expected {width} columns (as the state was made), got {p.shape[0]}"
        raise ValueError(msg)
    table = state.table
    out = np.empty((_G_FIXED + k.shape[0] + 2 * width, t.size), np.int64)
    n, tk, tv, tu, size = _match_ge(
        k, s, t, p, base, table.keys, table.values, table.used, table.size, state.counts, out
    )
    state.table = Table(tk, tv, tu, size)
    o = _finish(1, width, state, out[:, :n], _G_FIRST, final)
    row = _G_FIXED + k.shape[0]
    return GeRows._make([*o[:_G_FIXED], o[_G_FIXED:row], o[row : row + width], o[row + width :]])


def memory_records(
    order: npt.ArrayLike,
    component: npt.ArrayLike,
    device: npt.ArrayLike,
    times: npt.ArrayLike,
    totals: Columns,
    latest: Int64Array,
) -> Int64Array:
    """memory_record rows ``(7, m)`` (rows ``R_*``) of the records taken in ``order``.

    Per record: ``component`` (:data:`APP`, :data:`PTA`, :data:`WORKSPACE` or :data:`GE`), ``device``
    (a slot of ``latest``), time and ``totals`` (allocated, reserved, active, stream; ``NULL`` when
    absent, and a GE record's active total must be). Each PTA and GE record is followed by its
    :data:`PTA_GE` row. ``latest`` ``(2, 5, devices)`` holds, for PTA (0) and GE (1) and each device
    slot, the latest record's totals (rows ``L_*``; ``NULL`` and ``L_FOUND`` 0 before any); it is
    updated in place.
    """
    t = int_column("times", times)
    o = int_column("order", order)
    c = int_column("component", component, t.size)
    d = int_column("device", device, t.size)
    v = int_rows("totals", totals, t.size, 4)
    if latest.dtype != np.int64 or latest.ndim != 3 or latest.shape[:2] != (2, 5):
        msg = f"latest: expected a (2, 5, devices) int64 array, got {latest.dtype} {latest.shape}"
        raise ValueError(msg)
    if o.size and (int(o.min()) < 0 or int(o.max()) >= t.size):
        msg = f"order: expected record indices below {t.size}, got {int(o.min())}..{int(o.max())}"
        raise ValueError(msg)
    if d.size and (int(d.min()) < 0 or int(d.max()) >= latest.shape[2]):
        msg = f"device: expected slots below {latest.shape[2]}, got {int(d.min())}..{int(d.max())}"
        raise ValueError(msg)
    out = np.empty((7, 2 * o.size), np.int64)
    n = _records(o, c, d, t, v, latest, out)
    return out[:, :n]
