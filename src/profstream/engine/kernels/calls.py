"""Replaying call/return records into closed calls: one stack per thread, in record order.

torch_npu's Python tracer writes a record per call and per return (``torch.python_tracer_func``); its
analysis replays them thread by thread (``PythonTraceParser._replay_stack``), which a with_stack run
asks of millions of records. The rules, for records in time order:

* every record takes the next id of its thread (returns too, so ids have gaps);
* a call (Python or C) pushes a frame whose parent is the id of the frame below it, 0 on an empty stack;
* a return of either kind pops the top frame, whatever its kind, which ends at the return's time; a
  return on an empty stack is counted and ignored, as is a record of an unknown tag.

The open frames live in a pool of rows linked from each thread's top frame (``below``), which the
caller keeps between batches; a popped frame's row is marked closed and reported in close order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from profstream.codecs.framework import C_CALL, C_RETURN, PY_CALL, PY_RETURN
from profstream.engine.kernels._dispatch import Int64Array, int_column, kernel

#: the columns of a frame row (``below``: the row of the frame under it, -1 at the bottom)
FRAME_COLUMNS = ("id", "parent", "start", "thread", "pid", "key", "tag", "module", "below")


class Threads(NamedTuple):
    """Per-thread replay state, by dense thread index: the next record id, the latest record time
    (0 before any, as torch_npu's ``max_call_end_time``) and the pool row of the top frame (-1: none)."""

    next_id: Int64Array
    max_time: Int64Array
    top: Int64Array


class Replayed(NamedTuple):
    """The pool rows closed by a batch, in close order, with their end times; the pool after it (open
    and closed rows); the counts of returns without a frame and of unknown tags."""

    closed: Int64Array
    ends: Int64Array
    pool: dict[str, Int64Array]
    unmatched_returns: int
    unknown_tags: int


@kernel
def _replay(
    thread: Int64Array,
    time: Int64Array,
    pid: Int64Array,
    key: Int64Array,
    tag: Int64Array,
    module: Int64Array,
    next_id: Int64Array,
    max_time: Int64Array,
    top: Int64Array,
    pool: Int64Array,  # (len(FRAME_COLUMNS) + 1, capacity): the frame columns, then an open flag
    used: int,
    closed: Int64Array,
    ends: Int64Array,
    counts: Int64Array,
) -> tuple[int, int]:
    n_closed = 0
    for i in range(thread.size):
        t = thread[i]
        record_id = next_id[t]
        next_id[t] = record_id + 1
        max_time[t] = max(max_time[t], time[i])
        g = tag[i]
        if g in (PY_CALL, C_CALL):
            below = top[t]
            pool[0, used] = record_id
            pool[1, used] = pool[0, below] if below >= 0 else 0
            pool[2, used] = time[i]
            pool[3, used] = t
            pool[4, used] = pid[i]
            pool[5, used] = key[i]
            pool[6, used] = g
            pool[7, used] = module[i]
            pool[8, used] = below
            pool[9, used] = 1
            top[t] = used
            used += 1
        elif g in (PY_RETURN, C_RETURN):
            frame = top[t]
            if frame < 0:
                counts[0] += 1
                continue
            top[t] = pool[8, frame]
            pool[9, frame] = 0
            closed[n_closed] = frame
            ends[n_closed] = time[i]
            n_closed += 1
        else:
            counts[1] += 1
    return used, n_closed


def replay(records: dict[str, Int64Array], threads: Threads, open_frames: dict[str, Int64Array]) -> Replayed:
    """Replay ``records`` (columns ``thread`` (dense index into ``threads``), ``time``, ``pid``, ``key``,
    ``tag``, ``module``; in time order) on top of ``open_frames`` (frame columns, ``below`` as rows of
    it). ``threads`` is updated in place; the returned pool holds the open frames first, then this
    batch's frames."""
    thread = int_column("thread", records["thread"])
    time, pid, key, tag, module = (
        int_column(name, records[name], thread.size) for name in ("time", "pid", "key", "tag", "module")
    )
    if thread.size and (thread.min() < 0 or thread.max() >= threads.top.size):
        msg = f"thread: expected dense indices below {threads.top.size}"
        raise ValueError(msg)
    held = open_frames["id"].size
    calls = int(np.count_nonzero((tag == PY_CALL) | (tag == C_CALL)))
    pool = np.empty((len(FRAME_COLUMNS) + 1, held + calls), np.int64)
    for row, name in enumerate(FRAME_COLUMNS):
        pool[row, :held] = open_frames[name]
    pool[-1, :held] = 1
    closed = np.empty(thread.size, np.int64)
    ends = np.empty(thread.size, np.int64)
    counts = np.zeros(2, np.int64)
    used, n_closed = _replay(thread, time, pid, key, tag, module, *threads, pool, held, closed, ends, counts)
    frames = {name: pool[row, :used] for row, name in enumerate(FRAME_COLUMNS)}
    frames["open"] = pool[-1, :used]
    return Replayed(closed[:n_closed], ends[:n_closed], frames, int(counts[0]), int(counts[1]))


def still_open(pool: dict[str, Int64Array], top: Int64Array) -> tuple[dict[str, Int64Array], Int64Array]:
    """The open frames of ``pool`` alone, their ``below`` links and the threads' ``top`` rows renumbered."""
    is_open = pool["open"] == 1
    renumbered = np.append(np.cumsum(is_open) - 1, -1)  # row -1 (no frame) stays -1
    frames = {name: pool[name][is_open] for name in FRAME_COLUMNS}
    frames["below"] = renumbered[frames["below"]]
    return frames, renumbered[top]
