"""Device task start/end pairing: HWTS logs, STARS ACSQ logs, FFTS+ sub-task logs.

Rules (specs/cann_raw_formats.md):

* HWTS (§2.1 "Pairing"; msprof ``analysis/mscalculate/hwts/hwts_calculator.py``): records in file
  order, key ``(stream, task)``; a start is stored, overwriting an older unmatched start; an end pairs
  with the stored start and removes it; an end without a start is kept with an invalid start.
* STARS ACSQ (§2.4 "Start/end pairing"; msprof ``analysis/msparser/stars/log_base_parser.py``
  ``get_task_time``): records sorted by syscnt, per ``(task, stream)`` a start deque and an end deque;
  an end earlier than the head start is dropped as mismatched; an end pairs with the head start if
  that is the last start or the end comes before the next start; otherwise the head start is an
  orphan and is dropped; the last unmatched start of each group waits for the next flush.
* FFTS+ sub-tasks (§2.4 end; msprof ``analysis/mscalculate/stars/sub_task_calculator.py``): records
  sorted by time, key ``stream-task-subtask-thread``, first-in first-out; an end earlier than the head
  start is dropped; at the end, leftover Notify Wait starts become zero-length rows.

One streaming kernel serves HWTS and ACSQ. Processed in time order with starts before ends at equal
times, msprof's look-ahead rule reduces to HWTS's: when an end arrives, every open start of its key
except the newest already has a later start at or before the end, so msprof would drop it as an
orphan, and the end pairs with the newest; an end with no open start is earlier than every remaining
start. So the kernel keeps one open start per key, a new start replaces (and counts) the old one, and
the rules differ only in what happens to an end without a start: HWTS emits it with start
:data:`~profstream.engine.kernels._dispatch.NULL`, ACSQ drops it. The ACSQ input must be in
``(syscnt, end flag)`` order — :func:`acsq_order` gives it. Counting differs slightly from msprof, which
counts neither HWTS overwritten starts nor ACSQ ends that no later start follows: every start or end
that does not pair is counted here.

FFTS+ keeps a first-in first-out queue of open starts per key instead. In the same ``(time, end
flag)`` order, msprof's "drop an end earlier than the head start, else pair it with the head start"
becomes: an end pairs with the oldest open start of its key, or is dropped and counted if there is
none (every start still to come is later than it).

Records carry a key (several int64 columns), a start/end flag, a time (raw syscnt or ns, the kernels do
not care) and an optional int64 *payload* (columns a wrapper needs from the start record, e.g. task
type or acc id). Open starts keep their payload in the state, so a pair whose start arrived in an
earlier batch still gets it. Each record is known by its sequence number ``base + i`` (``base`` = records
before this batch), and pairs report both, so a wrapper can join other columns of the batch. Pairs
come out in the order of their end records.

State: open starts in a :class:`~profstream.engine.kernels._table.Table` (see there why a hash table)
plus counters, updated in place. At the end of the stream, :func:`open_starts` lists what never
paired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import (
    NO_SEQ,
    NULL,
    BoolArray,
    Columns,
    Int64Array,
    flag_column,
    inline,
    int_column,
    int_rows,
    kernel,
    require_times,
)
from profstream.engine.kernels._table import CHUNK, KeyedState, Table, find, put, remove, reserved

#: counters (``state.counts``): pairs emitted, ends without an open start, starts that never paired
#: because a later start of their key replaced them (HWTS, ACSQ)
PAIRED, NO_START, ORPHAN_START = range(3)
#: FFTS+ sub-task type of Notify Wait (cann_raw_formats.md §2.4 FFTS+ sub-task log, ``subTaskType``)
NOTIFY_WAIT = 3

# output rows of the kernels: start, end, start seq, end seq, then key columns, then payload columns
_START, _END, _START_SEQ, _END_SEQ = range(4)
_FIXED = 4
# values of an open start: time, seq, then payload
_TIME, _SEQ = range(2)


class Pairs(NamedTuple):
    """Paired records; ``keys`` and ``payload`` are ``(width, n)`` (payload of the start record)."""

    start: Int64Array
    end: Int64Array
    start_seq: Int64Array
    end_seq: Int64Array
    keys: Int64Array
    payload: Int64Array


def pair_state(key_width: int, payload_width: int = 0) -> KeyedState:
    """State of :func:`pair_hwts` / :func:`pair_acsq` before the first batch (open starts, counters)."""
    return KeyedState.new(key_width, 2 + payload_width, 3)


@dataclass(slots=True)
class FifoState:
    """FFTS+ state: per key the queue bounds (head, tail), per (key, position) an open start."""

    queues: Table
    starts: Table
    counts: Int64Array

    @classmethod
    def new(cls, key_width: int, payload_width: int = 0) -> FifoState:
        """The state before the first batch."""
        return cls(
            Table.empty(key_width, 2), Table.empty(key_width + 1, 2 + payload_width), np.zeros(3, np.int64)
        )

    def copy(self) -> FifoState:
        """An independent snapshot."""
        return FifoState(self.queues.copy(), self.starts.copy(), self.counts.copy())


# --------------------------------------------------------------------------- kernels


@inline
def _emit(
    out: Int64Array, n: int, start: int, end: int, start_seq: int, end_seq: int, keys: Int64Array, i: int
) -> None:
    """Write the fixed columns and the key of output row ``n``."""
    out[_START, n] = start
    out[_END, n] = end
    out[_START_SEQ, n] = start_seq
    out[_END_SEQ, n] = end_seq
    for k in range(keys.shape[0]):
        out[_FIXED + k, n] = keys[k, i]


@inline
def _store(tvals: Int64Array, slot: int, time: int, seq: int, payload: Int64Array, i: int) -> None:
    """Record an open start in ``slot``."""
    tvals[_TIME, slot] = time
    tvals[_SEQ, slot] = seq
    for p in range(payload.shape[0]):
        tvals[2 + p, slot] = payload[p, i]


@inline
def _emit_payload(out: Int64Array, n: int, width: int, tvals: Int64Array, slot: int) -> None:
    """Copy the payload of the open start in ``slot`` into output row ``n``."""
    base = _FIXED + width
    for p in range(tvals.shape[0] - 2):
        out[base + p, n] = tvals[2 + p, slot]


@kernel
def _pair_latest(
    keys: Int64Array,
    is_end: BoolArray,
    times: Int64Array,
    payload: Int64Array,
    base: int,
    keep_lone_end: bool,
    tkeys: Int64Array,
    tvals: Int64Array,
    tused: BoolArray,
    size: int,
    counts: Int64Array,
    out: Int64Array,
) -> tuple[int, Int64Array, Int64Array, BoolArray, int]:
    """HWTS / ACSQ pairing: one open start per key; returns rows written and the (grown) table."""
    n = 0
    width = keys.shape[0]
    for lo in range(0, times.size, CHUNK):
        tkeys, tvals, tused = reserved(tkeys, tvals, tused, size)
        for i in range(lo, min(lo + CHUNK, times.size)):
            slot, found = find(tkeys, tused, keys, i)
            if not is_end[i]:
                if found:
                    counts[ORPHAN_START] += 1
                else:
                    put(tkeys, tused, keys, i, slot)
                    size += 1
                _store(tvals, slot, times[i], base + i, payload, i)
            elif found:
                _emit(out, n, tvals[_TIME, slot], times[i], tvals[_SEQ, slot], base + i, keys, i)
                _emit_payload(out, n, width, tvals, slot)
                n += 1
                remove(tkeys, tvals, tused, slot)
                size -= 1
                counts[PAIRED] += 1
            else:
                counts[NO_START] += 1
                if keep_lone_end:
                    _emit(out, n, NULL, times[i], NO_SEQ, base + i, keys, i)
                    for p in range(payload.shape[0]):
                        out[_FIXED + width + p, n] = 0
                    n += 1
    return n, tkeys, tvals, tused, size


@kernel
def _pair_fifo(
    keys: Int64Array,
    is_end: BoolArray,
    times: Int64Array,
    payload: Int64Array,
    base: int,
    qkeys: Int64Array,
    qvals: Int64Array,
    qused: BoolArray,
    qsize: int,
    skeys: Int64Array,
    svals: Int64Array,
    sused: BoolArray,
    ssize: int,
    counts: Int64Array,
    out: Int64Array,
) -> tuple[int, Int64Array, Int64Array, BoolArray, int, Int64Array, Int64Array, BoolArray, int]:
    """FFTS+ pairing: a FIFO of open starts per key, held as (key, position) entries; queue = (head, tail)."""
    n = 0
    width = keys.shape[0]
    pos_key = np.empty((width + 1, 1), np.int64)
    for lo in range(0, times.size, CHUNK):
        qkeys, qvals, qused = reserved(qkeys, qvals, qused, qsize)
        skeys, svals, sused = reserved(skeys, svals, sused, ssize)
        for i in range(lo, min(lo + CHUNK, times.size)):
            qslot, queued = find(qkeys, qused, keys, i)
            if not is_end[i]:
                if not queued:
                    put(qkeys, qused, keys, i, qslot)
                    qsize += 1
                    qvals[0, qslot] = 0
                    qvals[1, qslot] = 0
                for k in range(width):
                    pos_key[k, 0] = keys[k, i]
                pos_key[width, 0] = qvals[1, qslot]
                qvals[1, qslot] += 1
                sslot, _ = find(skeys, sused, pos_key, 0)
                put(skeys, sused, pos_key, 0, sslot)
                ssize += 1
                _store(svals, sslot, times[i], base + i, payload, i)
            elif queued:
                for k in range(width):
                    pos_key[k, 0] = keys[k, i]
                pos_key[width, 0] = qvals[0, qslot]
                qvals[0, qslot] += 1
                sslot, _ = find(skeys, sused, pos_key, 0)
                _emit(out, n, svals[_TIME, sslot], times[i], svals[_SEQ, sslot], base + i, keys, i)
                _emit_payload(out, n, width, svals, sslot)
                n += 1
                remove(skeys, svals, sused, sslot)
                ssize -= 1
                counts[PAIRED] += 1
                if qvals[0, qslot] == qvals[1, qslot]:
                    remove(qkeys, qvals, qused, qslot)
                    qsize -= 1
            else:
                counts[NO_START] += 1
    return n, qkeys, qvals, qused, qsize, skeys, svals, sused, ssize


# --------------------------------------------------------------------------- wrappers


def _records(
    keys: Columns,
    is_end: npt.ArrayLike,
    times: npt.ArrayLike,
    payload: Columns | None,
    key_width: int,
    payload_width: int,
) -> tuple[Int64Array, BoolArray, Int64Array, Int64Array]:
    """Validated columns of one batch."""
    t = int_column("times", times)
    require_times("times", t)
    k = int_rows("keys", keys, t.size, key_width)
    p = int_rows("payload", payload, t.size, payload_width)
    return k, flag_column("is_end", is_end, t.size), t, p


def _pairs(out: Int64Array, n: int, key_width: int) -> Pairs:
    """Column views of the first ``n`` output rows."""
    o = out[:, :n]
    return Pairs(
        o[_START],
        o[_END],
        o[_START_SEQ],
        o[_END_SEQ],
        o[_FIXED : _FIXED + key_width],
        o[_FIXED + key_width :],
    )


def _pair(
    keys: Columns,
    is_end: npt.ArrayLike,
    times: npt.ArrayLike,
    payload: Columns | None,
    state: KeyedState,
    base: int,
    keep_lone_end: bool,
) -> Pairs:
    """Validate one batch and run :func:`_pair_latest` on it; ACSQ input must be in time order."""
    table = state.table
    k, e, t, p = _records(keys, is_end, times, payload, table.keys.shape[0], table.values.shape[0] - 2)
    if not keep_lone_end:
        _require_time_order(t, e)
    out = np.empty((_FIXED + k.shape[0] + p.shape[0], t.size), np.int64)
    n, tk, tv, tu, size = _pair_latest(
        k, e, t, p, base, keep_lone_end, table.keys, table.values, table.used, table.size, state.counts, out
    )
    state.table = Table(tk, tv, tu, size)
    return _pairs(out, n, k.shape[0])


def pair_hwts(
    keys: Columns,
    is_end: npt.ArrayLike,
    times: npt.ArrayLike,
    *,
    state: KeyedState,
    payload: Columns | None = None,
    base: int = 0,
) -> Pairs:
    """Pair one batch of HWTS start/end logs in file order (cann_raw_formats.md §2.1).

    ``keys`` are the key columns (stream id, task id), ``is_end`` the end flags (log type 1), ``base``
    the number of records before this batch. Ends without a start come out with ``start = NULL`` and
    ``start_seq = NO_SEQ``. ``state`` is updated in place.
    """
    return _pair(keys, is_end, times, payload, state, base, keep_lone_end=True)


def acsq_order(times: npt.ArrayLike, is_end: npt.ArrayLike) -> Int64Array:
    """The stable permutation that puts ACSQ / FFTS+ records in ``(time, end flag)`` order."""
    t = int_column("times", times)
    return np.lexsort((flag_column("is_end", is_end, t.size), t)).astype(np.int64)


def _require_time_order(t: Int64Array, e: BoolArray) -> None:
    """Times ascending, starts before ends at equal times."""
    dt = t[1:] - t[:-1]
    bad = np.flatnonzero((dt < 0) | ((dt == 0) & e[:-1] & ~e[1:]))
    if bad.size:
        i = int(bad[0]) + 1
        msg = (
            f"times: expected (time, end flag) order (see acsq_order), got record {i} out of order at {t[i]}"
        )
        raise ValueError(msg)


def pair_acsq(
    keys: Columns,
    is_end: npt.ArrayLike,
    times: npt.ArrayLike,
    *,
    state: KeyedState,
    payload: Columns | None = None,
    base: int = 0,
) -> Pairs:
    """Pair one batch of STARS ACSQ task logs (cann_raw_formats.md §2.4), in :func:`acsq_order`.

    Keys are (task id, stream id) after the §2.0 reconstruction; ends without a start are dropped and
    counted. Sequence numbers count records in the order given. ``state`` is updated in place.
    """
    return _pair(keys, is_end, times, payload, state, base, keep_lone_end=False)


def pair_ffts(
    keys: Columns,
    is_end: npt.ArrayLike,
    times: npt.ArrayLike,
    *,
    state: FifoState,
    payload: Columns | None = None,
    base: int = 0,
) -> Pairs:
    """Pair one batch of FFTS+ sub-task logs first in, first out (cann_raw_formats.md §2.4).

    Keys are (stream, task, subtask, thread). Ends without an open start are dropped and counted;
    starts with no end stay open (see :func:`ffts_leftovers`). ``state`` is updated in place.
    """
    q, s = state.queues, state.starts
    k, e, t, p = _records(keys, is_end, times, payload, q.keys.shape[0], s.values.shape[0] - 2)
    _require_time_order(t, e)
    out = np.empty((_FIXED + k.shape[0] + p.shape[0], t.size), np.int64)
    n, qk, qv, qu, qn, sk, sv, su, sn = _pair_fifo(
        k,
        e,
        t,
        p,
        base,
        q.keys,
        q.values,
        q.used,
        q.size,
        s.keys,
        s.values,
        s.used,
        s.size,
        state.counts,
        out,
    )
    state.queues = Table(qk, qv, qu, qn)
    state.starts = Table(sk, sv, su, sn)
    return _pairs(out, n, k.shape[0])


def open_starts(state: KeyedState | FifoState) -> Pairs:
    """The starts still waiting for an end, in sequence order (end columns ``NULL`` / ``NO_SEQ``)."""
    if isinstance(state, FifoState):
        keys, values = state.starts.entries(_SEQ)
        keys = keys[:-1]  # drop the queue position
    else:
        keys, values = state.table.entries(_SEQ)
    none = np.full(values.shape[1], NULL, np.int64)
    return Pairs(values[_TIME], none, values[_SEQ], np.full_like(none, NO_SEQ), keys, values[2:])


def ffts_leftovers(state: FifoState, type_row: int) -> tuple[Pairs, int]:
    """End of stream for FFTS+: leftover Notify Wait starts as zero-length pairs, and how many others remain.

    msprof emits each unmatched start whose sub-task type (payload row ``type_row``) is Notify Wait with
    its end equal to its start, and counts the rest as mismatched starts.
    """
    left = open_starts(state)
    notify = left.payload[type_row] == NOTIFY_WAIT
    pairs = Pairs(
        left.start[notify],
        left.start[notify],
        left.start_seq[notify],
        left.end_seq[notify],
        left.keys[:, notify],
        left.payload[:, notify],
    )
    return pairs, int(np.count_nonzero(~notify))
