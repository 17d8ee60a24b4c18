"""msprof's communication analysis scans over the tasks of HCCL ops (``msprof --analyze``).

Rules (msprof_outputs.md §2.10; MSPROF ``analysis/msparser/cluster/communication_parser.py``
``op_time_parser`` / ``op_bandwidth_parser``, ``communication_matrix_parser.py`` ``parse_ops``,
``meta_parser.py`` ``HcclAnalysisTool``): an op's tasks are read in time order, and

* a *transit* is an SDMA copy task (``Memcpy`` / ``Reduce_Inline`` over SDMA, not on chip), or an
  RDMA *payload group*: a run of ``k`` consecutive payload sends, closed by ``jump - 1`` more tasks
  (``jump`` = 3 for send/receive ops, which have no barrier, else 5); the group transfers the payloads' summed
  size and lasts from the first payload's start to the end of task ``first + k + jump - 2``. A run
  whose closing tasks are missing is skipped (msprof logs "missing closure tasks");
* **time** (master-stream tasks of the op, all planes in one time order): transit time sums the
  transits; wait time sums ``Notify_Wait`` durations; synchronization time is the wait before the
  first transit;
* **transfers** (bandwidth and matrix; all tasks, each plane scanned on its own): every transit and
  every on-chip copy.

* **task bandwidth** (the timeline's ``bandwidth(GB/s)`` of each HCCL task, each (op, plane) scanned
  on its own): a task's size over its duration, and for the payloads of a payload group the group's.

The scans are sequential (a payload group skips the tasks it covers), so they are kernels. Inputs
are per-task columns grouped by op (``time_scan``) or by (op, plane) (``transfer_scan``,
``bandwidth_scan``), in time order within a group; groups are ``offsets[g]:offsets[g + 1]``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream.engine.kernels._dispatch import (
    BoolArray,
    FloatArray,
    Int64Array,
    flag_column,
    inline,
    int_column,
    kernel,
)

#: task kinds of the scans: an SDMA copy over an on-chip link is a transfer (the matrix's LOCAL
#: links) but no transit time
OTHER, SDMA_COPY, NOTIFY_WAIT, LOCAL_COPY = 0, 1, 2, 3
#: closing tasks of an RDMA payload group, plus one (msprof ``RDMA_NO/WITH_BARRIER_TASK_NUM``)
JUMP_NO_BARRIER, JUMP_WITH_BARRIER = 3, 5


@inline
def _payload_group(payload: BoolArray, jump: int, i: int, stop: int) -> tuple[int, int]:
    """The payload group starting at ``i``: how many payloads, and its last task (-1 when the group's
    closing tasks are missing: msprof skips the payloads)."""
    run = 0
    while i + run < stop and payload[i + run]:
        run += 1
    last = i + run + jump - 2
    return run, last if last < stop else -1


@kernel
def _time_kernel(
    offsets: Int64Array,
    jumps: Int64Array,
    kind: Int64Array,
    payload: BoolArray,
    starts: Int64Array,
    ends: Int64Array,
    out: Int64Array,
) -> None:
    """``out[:, g]`` = transit, transits seen, wait, waits seen, sync, syncs seen of group ``g``."""
    for g in range(offsets.size - 1):
        i, stop = offsets[g], offsets[g + 1]
        before_transit = True
        while i < stop:
            if kind[i] == SDMA_COPY:
                before_transit = False
                out[0, g] += ends[i] - starts[i]
                out[1, g] += 1
            if payload[i]:
                run, last = _payload_group(payload, jumps[g], i, stop)
                if last < 0:
                    i += run
                    continue
                out[0, g] += ends[last] - starts[i]
                out[1, g] += 1
                before_transit = False
                i = last + 1
                continue
            if kind[i] == NOTIFY_WAIT:
                out[2, g] += ends[i] - starts[i]
                out[3, g] += 1
                if before_transit:
                    out[4, g] += ends[i] - starts[i]
                    out[5, g] += 1
            i += 1


@kernel
def _transfer_kernel(
    offsets: Int64Array,
    jumps: Int64Array,
    kind: Int64Array,
    payload: BoolArray,
    starts: Int64Array,
    ends: Int64Array,
    sizes: Int64Array,
    out: Int64Array,
) -> int:
    """Rows of ``out``: first task, size, duration of each transfer; returns how many."""
    n = 0
    for g in range(offsets.size - 1):
        i, stop = offsets[g], offsets[g + 1]
        while i < stop:
            if kind[i] == SDMA_COPY or kind[i] == LOCAL_COPY:
                out[0, n], out[1, n], out[2, n] = i, sizes[i], ends[i] - starts[i]
                n += 1
            if payload[i]:
                run, last = _payload_group(payload, jumps[g], i, stop)
                if last < 0:
                    i += run
                    continue
                out[0, n], out[1, n], out[2, n] = i, sizes[i : i + run].sum(), ends[last] - starts[i]
                n += 1
                i = last + 1
                continue
            i += 1
    return n


@kernel
def _bandwidth_kernel(
    offsets: Int64Array,
    jumps: Int64Array,
    payload: BoolArray,
    starts: Int64Array,
    ends: Int64Array,
    sizes: Int64Array,
    out: FloatArray,
) -> None:
    """``out[i]`` = task ``i``'s bandwidth in GB/s (bytes per ns; 0 for no duration)."""
    for g in range(offsets.size - 1):
        i, stop = offsets[g], offsets[g + 1]
        while i < stop:
            if not payload[i]:
                out[i] = _per_ns(sizes[i], ends[i] - starts[i])
                i += 1
                continue
            run, last = _payload_group(payload, jumps[g], i, stop)
            for k in range(i, i + run):
                if last < 0:  # no closing tasks: each payload on its own
                    out[k] = _per_ns(sizes[k], ends[k] - starts[k])
                else:
                    out[k] = _per_ns(sizes[i : i + run].sum(), ends[last] - starts[i])
            i += run


@inline
def _per_ns(size: int, duration: int) -> float:
    return size / duration if duration > 0 else 0.0


def plane_groups(op: Int64Array, plane: Int64Array, start: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The (op, plane) groups of ``transfer_scan`` and ``bandwidth_scan``: the tasks' order by (op,
    plane, start, position) and the groups' ``offsets`` in that order."""
    order = np.lexsort((np.arange(op.size), start, plane, op))
    new = np.r_[True, (op[order][1:] != op[order][:-1]) | (plane[order][1:] != plane[order][:-1])]
    offsets = np.r_[np.flatnonzero(new[: op.size]), op.size].astype(np.int64)
    return order, offsets


def _groups(offsets: npt.ArrayLike, jumps: npt.ArrayLike, tasks: int) -> tuple[Int64Array, Int64Array]:
    o = int_column("offsets", offsets)
    if o.size == 0 or o[0] != 0 or o[-1] != tasks or np.any(np.diff(o) < 0):
        msg = f"offsets: expected non-decreasing group bounds from 0 to {tasks}"
        raise ValueError(msg)
    j = int_column("jumps", jumps, o.size - 1)
    if np.any(j < 2):
        msg = "jumps: expected at least 2 (a payload and its closing task)"
        raise ValueError(msg)
    return o, j


def _inputs(
    offsets: npt.ArrayLike, jumps: npt.ArrayLike, kind: npt.ArrayLike, payload: npt.ArrayLike
) -> tuple[Int64Array, Int64Array, Int64Array, BoolArray]:
    k = int_column("kind", kind)
    o, j = _groups(offsets, jumps, k.size)
    return o, j, k, flag_column("payload", payload, k.size)


def time_scan(
    offsets: npt.ArrayLike,
    jumps: npt.ArrayLike,
    kind: npt.ArrayLike,
    payload: npt.ArrayLike,
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
) -> Int64Array:
    """Per op (group): ``[transit_ns, transits, wait_ns, waits, sync_ns, syncs]`` as a (6, ops) array.

    The groups hold each op's master-stream tasks in time order; ``jumps`` is each op's ``jump``.
    """
    o, j, k, p = _inputs(offsets, jumps, kind, payload)
    s = int_column("starts", starts, k.size)
    e = int_column("ends", ends, k.size)
    out = np.zeros((6, o.size - 1), np.int64)
    _time_kernel(o, j, k, p, s, e, out)
    return out


def transfer_scan(
    offsets: npt.ArrayLike,
    jumps: npt.ArrayLike,
    kind: npt.ArrayLike,
    payload: npt.ArrayLike,
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    sizes: npt.ArrayLike,
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """The transfers of every (op, plane) group: the index of the task that names its link (the
    copy, or the first payload), its size in bytes and its duration in ns."""
    o, j, k, p = _inputs(offsets, jumps, kind, payload)
    s = int_column("starts", starts, k.size)
    e = int_column("ends", ends, k.size)
    z = int_column("sizes", sizes, k.size)
    out = np.empty((3, k.size), np.int64)
    n = _transfer_kernel(o, j, k, p, s, e, z, out)
    return out[0, :n].copy(), out[1, :n].copy(), out[2, :n].copy()


def bandwidth_scan(
    offsets: npt.ArrayLike,
    jumps: npt.ArrayLike,
    payload: npt.ArrayLike,
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    sizes: npt.ArrayLike,
) -> FloatArray:
    """Each task's ``bandwidth(GB/s)`` in the timeline: groups are (op, plane) in time order.

    A task transfers its size over its duration; every payload of a closed payload group gets the
    group's summed size over the group's time (``HcclCalculator.CalculateTaskBandwidth`` in msprof's
    C++, ``calc_bandwidth`` in its Python; where they differ, after a group the C++ goes on with the
    next task, and so does this scan, where the Python skips ``jump - 1`` tasks, which only matters
    for a payload among them).
    """
    s = int_column("starts", starts)
    o, j = _groups(offsets, jumps, s.size)
    p = flag_column("payload", payload, s.size)
    e = int_column("ends", ends, p.size)
    z = int_column("sizes", sizes, p.size)
    out = np.zeros(p.size, np.float64)
    _bandwidth_kernel(o, j, p, s, e, z, out)
    return out
