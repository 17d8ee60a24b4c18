"""Plain-Python oracles for the engine kernels, and the COMPARISONS table shared with bench/.

Each oracle is the slow, obvious version of a rule: the interval ones evaluate coverage on the
elementary segments between all boundaries, the pairing and memory ones follow msprof's and
torch_npu's one-shot algorithms step by step (deques after a sort, dicts, the adapter's group walk),
so a match also shows that the streaming rewrites in the kernels keep the original rules. Oracles
take the same input dicts as the kernels' wrappers and return plain Python values (tuples, lists,
``None`` for an absent value) that :class:`Comparison.normalise` makes of a wrapper's output.

``COMPARISONS`` names every kernel with: ``run`` (one whole-stream call of the public wrapper, what
the benchmarks time), ``normalise``, ``reference`` and ``make`` (realistic inputs of ``n`` records for
the benchmarks, from a numpy generator).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profstream.engine.kernels import calls, memory, overlap, pairing
from profstream.engine.kernels._dispatch import FLUSH, NO_SEQ, NULL

Inputs = dict[str, Any]
Span = tuple[int, int]
Row = tuple[Any, ...]


# --------------------------------------------------------------------------- intervals


def _pieces(points: Iterable[int], inside: Callable[[int], bool]) -> list[Span]:
    """Maximal runs of elementary segments ``[p, q)`` between sorted ``points`` where ``inside(p)``."""
    pts = sorted(set(points))
    out: list[Span] = []
    for p, q in itertools.pairwise(pts):
        if not inside(p):
            continue
        if out and out[-1][1] == p:
            out[-1] = (out[-1][0], q)
        else:
            out.append((p, q))
    return out


def _covers(spans: Sequence[Span]) -> Callable[[int], bool]:
    """Membership test of a point in the union of ``spans`` (half-open)."""
    return lambda t: any(s <= t < e for s, e in spans)


def union_ref(starts: Sequence[int], ends: Sequence[int]) -> list[Span]:
    """Union of intervals as maximal positive pieces."""
    spans = list(zip(starts, ends, strict=True))
    return _pieces((x for span in spans for x in span), _covers(spans))


def combine_ref(op: overlap.SetOp, a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """``a op b`` as maximal positive pieces."""
    in_a, in_b = _covers(a), _covers(b)
    rules = {
        overlap.SetOp.UNION: lambda t: in_a(t) or in_b(t),
        overlap.SetOp.DIFFERENCE: lambda t: in_a(t) and not in_b(t),
        overlap.SetOp.INTERSECTION: lambda t: in_a(t) and in_b(t),
    }
    return _pieces((x for span in [*a, *b] for x in span), rules[op])


def gaps_ref(starts: Sequence[int], ends: Sequence[int], lo: int, hi: int) -> list[Span]:
    """``[lo, hi]`` minus the union of the intervals."""
    spans = list(zip(starts, ends, strict=True))
    covered = _covers(spans)
    points = [lo, hi, *(x for span in spans for x in span if lo <= x <= hi)]
    return _pieces(points, lambda t: lo <= t < hi and not covered(t))


def step_totals_ref(
    starts: Sequence[int], ends: Sequence[int], steps: Sequence[Span], mode: int
) -> tuple[list[int], list[int | None], list[int | None]]:
    """Per-step total, first start and last end; the last slot is time outside every step."""
    m = len(steps)
    total = [0] * (m + 1)
    first: list[int | None] = [None] * (m + 1)
    last: list[int | None] = [None] * (m + 1)

    def credit(k: int, s: int, e: int) -> None:
        total[k] += e - s
        first[k] = s if first[k] is None else min(first[k], s)  # type: ignore[type-var]
        last[k] = e if last[k] is None else max(last[k], e)  # type: ignore[type-var]

    def slot(t: int) -> int:
        return next((k for k, (ss, se) in enumerate(steps) if ss <= t < se), m)

    for s, e in zip(starts, ends, strict=True):
        if mode == overlap.BY_START:
            credit(slot(s), s, e)
            continue
        points = sorted({s, e, *(x for step in steps for x in step if s < x < e)})
        for p, q in itertools.pairwise(points):
            credit(slot(p), p, q)
    return total, first, last


# --------------------------------------------------------------------------- pairing


def _key(inputs: Inputs, i: int) -> tuple[int, ...]:
    return tuple(int(col[i]) for col in inputs["keys"])


def _payload(inputs: Inputs, i: int) -> tuple[int, ...]:
    return tuple(int(col[i]) for col in inputs.get("payload", ()))


def hwts_ref(inputs: Inputs) -> tuple[list[Row], list[int], list[Row]]:
    """msprof ``hwts_calculator._prep_data``: file order, a dict of open starts per key."""
    open_: dict[tuple[int, ...], tuple[int, int]] = {}
    rows: list[Row] = []
    counts = [0, 0, 0]
    width = len(inputs.get("payload", ()))
    for i, t in enumerate(inputs["times"]):
        key = _key(inputs, i)
        if not inputs["is_end"][i]:
            counts[pairing.ORPHAN_START] += key in open_
            open_[key] = (int(t), i)
        elif key in open_:
            start, seq = open_.pop(key)
            rows.append((start, int(t), seq, i, key, _payload(inputs, seq)))
            counts[pairing.PAIRED] += 1
        else:
            rows.append((None, int(t), None, i, key, (0,) * width))
            counts[pairing.NO_START] += 1
    left = sorted((seq, start, key) for key, (start, seq) in open_.items())
    return rows, counts, [(start, None, seq, None, key, _payload(inputs, seq)) for seq, start, key in left]


def _groups(inputs: Inputs) -> dict[tuple[int, ...], dict[bool, deque[int]]]:
    """Record indices per key and start/end, in msprof's order: a stable sort on time."""
    order = sorted(range(len(inputs["times"])), key=lambda i: int(inputs["times"][i]))
    groups: dict[tuple[int, ...], dict[bool, deque[int]]] = {}
    for i in order:
        groups.setdefault(_key(inputs, i), {False: deque(), True: deque()})[bool(inputs["is_end"][i])].append(
            i
        )
    return groups


def _pair_row(inputs: Inputs, s: int, e: int) -> Row:
    t = inputs["times"]
    return (int(t[s]), int(t[e]), s, e, _key(inputs, s), _payload(inputs, s))


def acsq_ref(inputs: Inputs) -> tuple[list[Row], list[int], list[Row]]:
    """msprof ``LogBaseParser.get_task_time``: per key, start and end deques with the look-ahead rule.

    Counting as documented in the kernel: leftover ends (which msprof leaves uncounted) count too.
    """
    rows: list[Row] = []
    counts = [0, 0, 0]
    left: list[Row] = []
    t = inputs["times"]
    for queues in _groups(inputs).values():
        starts, ends = queues[False], queues[True]
        while starts and ends:
            if t[ends[0]] < t[starts[0]]:
                ends.popleft()
                counts[pairing.NO_START] += 1
            elif len(starts) == 1 or t[ends[0]] < t[starts[1]]:
                rows.append(_pair_row(inputs, starts.popleft(), ends.popleft()))
                counts[pairing.PAIRED] += 1
            else:
                starts.popleft()
                counts[pairing.ORPHAN_START] += 1
        counts[pairing.NO_START] += len(ends)
        counts[pairing.ORPHAN_START] += max(0, len(starts) - 1)
        if starts:
            s = starts.pop()
            left.append((int(t[s]), None, s, None, _key(inputs, s), _payload(inputs, s)))
    return sorted(rows, key=lambda r: r[3]), counts, sorted(left, key=lambda r: r[2])


def ffts_ref(inputs: Inputs) -> tuple[list[Row], list[int], list[Row]]:
    """msprof ``SubTaskCalculator.get_subtask_time``: per key, first in first out after a time sort."""
    rows: list[Row] = []
    counts = [0, 0, 0]
    left: list[Row] = []
    t = inputs["times"]
    for queues in _groups(inputs).values():
        starts, ends = queues[False], queues[True]
        while starts and ends:
            if t[starts[0]] > t[ends[0]]:
                ends.popleft()
                counts[pairing.NO_START] += 1
                continue
            rows.append(_pair_row(inputs, starts.popleft(), ends.popleft()))
            counts[pairing.PAIRED] += 1
        counts[pairing.NO_START] += len(ends)
        left += [(int(t[s]), None, s, None, _key(inputs, s), _payload(inputs, s)) for s in starts]
    return sorted(rows, key=lambda r: r[3]), counts, sorted(left, key=lambda r: r[2])


# --------------------------------------------------------------------------- memory


def pta_ref(inputs: Inputs) -> tuple[list[Row], list[int]]:
    """torch_npu ``_get_valid_record_entry`` per (process, ptr), rendered as ``_complete_record_entry``."""
    kinds, times = inputs["kinds"], inputs["times"]
    per_key: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(times)):
        per_key.setdefault(_key(inputs, i), []).append(i)
    groups: list[list[int]] = []
    for records in per_key.values():
        left = right = 0
        group: list[int] = []
        types: list[int] = []
        while left < len(records) and right < len(records):
            if kinds[records[left]] != memory.MALLOC:
                left += 1
                right = left
            elif len(group) < 3 and kinds[records[right]] not in types:
                types.append(int(kinds[records[right]]))
                group.append(records[right])
                right += 1
            else:
                groups.append(group)
                group, types = [], []
                left = right
        if group:
            groups.append(group)
    width = len(inputs.get("payload", ()))
    rows: list[Row] = []
    incomplete = 0
    for group in groups:
        by_kind = {int(kinds[i]): i for i in group}
        alloc = by_kind[memory.MALLOC]
        free = by_kind.get(memory.FREE)
        block = by_kind.get(memory.BLOCK_FREE)
        release = free if free is not None else block
        incomplete += 3 - len(group)
        rows.append(
            (
                int(times[alloc]),
                None if free is None else int(times[free]),
                None if block is None else int(times[block]),
                None if free is None else int(times[free] - times[alloc]),
                None if block is None else int(times[block] - times[alloc]),
                alloc,
                free,
                block,
                _key(inputs, alloc),
                _payload(inputs, alloc),
                (0,) * width if release is None else _payload(inputs, release),
            )
        )
    dropped = len(times) - sum(len(g) for g in groups)
    return sorted(rows, key=lambda r: r[5]), [len(rows), dropped, incomplete]


def ge_ref(inputs: Inputs) -> tuple[list[Row], list[int]]:
    """msprof ``NpuOpMemCalculator._calc_operator_memory`` plus the kernel's rows for lone releases."""
    pending: dict[tuple[int, ...], int] = {}  # latest allocation; the dict keeps each key's first place
    rows: list[Row] = []
    counts = [0] * 5
    sizes, times = inputs["sizes"], inputs["times"]
    width = len(inputs.get("payload", ()))
    for i in range(len(times)):
        key = _key(inputs, i)
        if sizes[i] == 0:
            counts[memory.GE_ZERO_SIZE] += 1
        elif sizes[i] > 0:
            counts[memory.GE_REPLACED] += key in pending
            pending[key] = i
        elif key in pending:
            a = pending.pop(key)
            row = (int(times[a]), int(times[i]), int(times[i] - times[a]), int(sizes[a]), a, i)
            rows.append((*row, key, _payload(inputs, a), _payload(inputs, i)))
            counts[memory.GE_PAIRED] += 1
        else:
            row = (None, int(times[i]), None, int(sizes[i]), None, i)
            rows.append((*row, key, (0,) * width, _payload(inputs, i)))
            counts[memory.GE_NO_ALLOCATION] += 1
    for key, a in pending.items():
        row = (int(times[a]), None, None, int(sizes[a]), a, None)
        rows.append((*row, key, _payload(inputs, a), (0,) * width))
        counts[memory.GE_NEVER_FREED] += 1
    return rows, counts


# --------------------------------------------------------------------------- normalisation


def plain(value: Any) -> Any:
    """An int, or None for the NULL sentinel."""
    v = int(value)
    return None if v == NULL else v


def seq(value: Any) -> int | None:
    """A sequence number, or None for NO_SEQ."""
    v = int(value)
    return None if v == NO_SEQ else v


def spans(out: overlap.Intervals) -> list[Span]:
    """Intervals as a list of tuples."""
    return [(int(s), int(e)) for s, e in zip(out.starts, out.ends, strict=True)]


def pair_rows(p: pairing.Pairs) -> list[Row]:
    """Pairs as row tuples."""
    return [
        (
            plain(p.start[j]),
            plain(p.end[j]),
            seq(p.start_seq[j]),
            seq(p.end_seq[j]),
            tuple(int(x) for x in p.keys[:, j]),
            tuple(int(x) for x in p.payload[:, j]),
        )
        for j in range(p.start.size)
    ]


def pta_rows(r: memory.PtaRows) -> list[Row]:
    """PTA rows as tuples (fixed columns, key, alloc payload, release payload)."""
    fixed = [r.alloc_time, r.release_time, r.active_release_time, r.duration, r.active_duration]
    seqs = [r.alloc_seq, r.free_seq, r.block_free_seq]
    return [
        (
            *(plain(c[j]) for c in fixed),
            *(seq(c[j]) for c in seqs),
            tuple(int(x) for x in r.keys[:, j]),
            tuple(int(x) for x in r.alloc_payload[:, j]),
            tuple(int(x) for x in r.release_payload[:, j]),
        )
        for j in range(r.alloc_time.size)
    ]


def ge_rows(r: memory.GeRows) -> list[Row]:
    """GE rows as tuples (fixed columns, key, alloc payload, release payload)."""
    return [
        (
            *(plain(c[j]) for c in (r.alloc_time, r.release_time, r.duration, r.size)),
            seq(r.alloc_seq[j]),
            seq(r.release_seq[j]),
            tuple(int(x) for x in r.keys[:, j]),
            tuple(int(x) for x in r.alloc_payload[:, j]),
            tuple(int(x) for x in r.release_payload[:, j]),
        )
        for j in range(r.alloc_time.size)
    ]


# --------------------------------------------------------------------------- one-shot calls


def run_union(inputs: Inputs) -> overlap.Intervals:
    """The whole stream through :func:`overlap.union`."""
    return overlap.union(inputs["starts"], inputs["ends"], overlap.union_state(), FLUSH)


def run_combine(op: overlap.SetOp) -> Callable[[Inputs], overlap.Intervals]:
    """The whole of both streams through :func:`overlap.combine` with ``op``."""

    def run(inputs: Inputs) -> overlap.Intervals:
        return overlap.combine(op, inputs["a"], inputs["b"], overlap.CombineState.new(), FLUSH)

    return run


def run_gaps(inputs: Inputs) -> overlap.Intervals:
    """The whole stream through :func:`overlap.gaps`."""
    return overlap.gaps(inputs["starts"], inputs["ends"], overlap.gaps_state(inputs["lo"]), hi=inputs["hi"])


def run_steps(inputs: Inputs) -> overlap.StepTotals:
    """All intervals through :func:`overlap.step_totals`."""
    steps = inputs["steps"]
    return overlap.step_totals(
        inputs["starts"],
        inputs["ends"],
        [s for s, _ in steps],
        [e for _, e in steps],
        mode=inputs["mode"],
        acc=overlap.step_accumulators(len(steps)),
    )


def run_pairs(
    pair: Callable[..., pairing.Pairs], new: Callable[[int, int], Any]
) -> Callable[[Inputs], tuple[pairing.Pairs, Any]]:
    """One call of a pairing wrapper over the whole stream, with its state."""

    def run(inputs: Inputs) -> tuple[pairing.Pairs, Any]:
        payload = inputs.get("payload", ())
        state = new(len(inputs["keys"]), len(payload))
        return pair(inputs["keys"], inputs["is_end"], inputs["times"], state=state, payload=payload), state

    return run


def normalise_pairs(out: tuple[pairing.Pairs, Any]) -> tuple[list[Row], list[int], list[Row]]:
    """Rows sorted by end record, counters, open starts."""
    pairs, state = out
    rows = sorted(pair_rows(pairs), key=lambda r: r[3])
    return rows, [int(c) for c in state.counts], pair_rows(pairing.open_starts(state))


def run_pta(inputs: Inputs) -> tuple[memory.PtaRows, Any]:
    """The whole stream through :func:`memory.match_pta`, final."""
    payload = inputs.get("payload", ())
    state = memory.pta_state(len(payload))
    rows = memory.match_pta(
        inputs["keys"], inputs["kinds"], inputs["times"], state=state, payload=payload, final=True
    )
    return rows, state


def run_ge(inputs: Inputs) -> tuple[memory.GeRows, Any]:
    """The whole stream through :func:`memory.match_ge`, final."""
    payload = inputs.get("payload", ())
    state = memory.ge_state(len(payload))
    rows = memory.match_ge(
        inputs["keys"], inputs["sizes"], inputs["times"], state=state, payload=payload, final=True
    )
    return rows, state


# --------------------------------------------------------------------------- benchmark inputs


def make_intervals(rng: np.random.Generator, n: int) -> Inputs:
    """``n`` start-sorted task intervals, mostly back to back, some overlapping, some nested."""
    starts = np.cumsum(rng.integers(0, 2_000, n))
    ends = starts + rng.integers(0, 3_000, n)
    return {"starts": starts, "ends": ends}


def make_two_sets(rng: np.random.Generator, n: int) -> Inputs:
    """Two merged streams of ``n // 2`` intervals each (compute and communication)."""

    def merged(m: int) -> tuple[np.ndarray, np.ndarray]:
        edges = np.cumsum(rng.integers(1, 5_000, 2 * m))
        return edges[0::2], edges[1::2]

    return {"a": merged(n // 2), "b": merged(n - n // 2)}


def make_gaps(rng: np.random.Generator, n: int) -> Inputs:
    """Intervals plus a window covering them."""
    inputs = make_intervals(rng, n)
    inputs["lo"] = int(inputs["starts"][0]) - 1_000 if n else 0
    inputs["hi"] = int(inputs["ends"].max()) + 1_000 if n else 0
    return inputs


def make_steps(mode: int) -> Callable[[np.random.Generator, int], Inputs]:
    """Intervals plus 1000 steps with small gaps between them."""

    def make(rng: np.random.Generator, n: int) -> Inputs:
        inputs = make_intervals(rng, n)
        top = int(inputs["ends"].max()) if n else 1
        bounds = np.linspace(0, top, 1_001).astype(np.int64)
        inputs["steps"] = [(int(a), int(b) - 10) for a, b in itertools.pairwise(bounds) if b - 10 > a]
        inputs["mode"] = mode
        return inputs

    return make


def make_task_logs(rng: np.random.Generator, n: int) -> Inputs:
    """``n`` start/end records of tasks on 64 streams, a few per stream in flight, 0.1 % of records lost."""
    tasks = n // 2
    stream = rng.integers(0, 64, tasks)
    task = np.arange(tasks) % 65_536
    start = np.cumsum(rng.integers(1, 50, tasks))
    end = start + rng.integers(1, 400, tasks)
    keys = np.concatenate((np.stack((stream, task)), np.stack((stream, task))), axis=1)
    times = np.concatenate((start, end))
    is_end = np.repeat([False, True], tasks)
    order = np.lexsort((is_end, times))
    keep = order[rng.random(order.size) > 0.001]
    return {
        "keys": np.ascontiguousarray(keys[:, keep]),
        "is_end": is_end[keep],
        "times": times[keep],
        "payload": [rng.integers(0, 16, keep.size)],
    }


def make_subtask_logs(rng: np.random.Generator, n: int) -> Inputs:
    """FFTS+ logs: the task logs with (subtask, thread) key columns added."""
    inputs = make_task_logs(rng, n)
    m = inputs["times"].size
    inputs["keys"] = np.concatenate((inputs["keys"], np.zeros((2, m), np.int64)))
    return inputs


def make_pta(rng: np.random.Generator, n: int) -> Inputs:
    """Caching-allocator records: blocks on 4096 recycled pointers, each malloc, block_free, free."""
    blocks = n // 3
    ptr = np.arange(blocks) % 4_096
    t0 = np.cumsum(rng.integers(1, 100, blocks)) * 10
    kinds = np.tile([memory.MALLOC, memory.BLOCK_FREE, memory.FREE], blocks)
    times = np.stack((t0, t0 + 1, t0 + 2), axis=1).ravel()
    ptrs = np.repeat(ptr, 3)
    return {
        "keys": [np.ones(times.size, np.int64), ptrs],
        "kinds": kinds,
        "times": times,
        "payload": [rng.integers(0, 1 << 30, times.size)],
    }


def make_ge(rng: np.random.Generator, n: int) -> Inputs:
    """GE records: allocations released a little later on recycled addresses."""
    pairs = n // 2
    addr = np.arange(pairs) % 8_192
    t0 = np.cumsum(rng.integers(1, 100, pairs))
    size = rng.integers(1, 1 << 20, pairs)
    order = np.argsort(np.concatenate((t0, t0 + 50)), kind="stable")
    keys = np.tile(np.stack((addr % 97, addr, np.zeros(pairs, np.int64))), 2)
    return {
        "keys": keys[:, order],
        "sizes": np.concatenate((size, -size))[order],
        "times": np.concatenate((t0, t0 + 50))[order],
        "payload": [np.concatenate((size, size))[order]],
    }


# --------------------------------------------------------------------------- call stacks


def calls_ref(inputs: Inputs) -> tuple[list[Row], list[int]]:
    """torch_npu's per-thread replay (``PythonTraceParser._replay_stack``) step by step: closed calls
    (thread, python id, parent id, start, end, call key) in close order, and [returns on an empty
    stack, unknown tags]."""
    stacks: dict[int, list[tuple[int, int, int, int]]] = {}
    next_id: dict[int, int] = {}
    closed: list[Row] = []
    counts = [0, 0]
    columns = (inputs["thread"], inputs["time"], inputs["key"], inputs["tag"])
    for thread, time, key, tag in zip(*columns, strict=True):
        stack = stacks.setdefault(thread, [])
        python_id = next_id.get(thread, 0)
        next_id[thread] = python_id + 1
        if tag in (0, 2):  # a Python or C call
            stack.append((python_id, stack[-1][0] if stack else 0, time, key))
        elif tag in (1, 3) and stack:  # either return pops whatever is on top
            frame_id, parent, start, frame_key = stack.pop()
            closed.append((thread, frame_id, parent, start, time, frame_key))
        else:
            counts[0 if tag in (1, 3) else 1] += 1
    return closed, counts


def run_calls(inputs: Inputs) -> calls.Replayed:
    threads = int(max(inputs["thread"], default=-1)) + 1
    state = calls.Threads(
        np.zeros(threads, np.int64), np.zeros(threads, np.int64), np.full(threads, -1, np.int64)
    )
    n = len(inputs["thread"])
    records = {
        **{name: np.asarray(inputs[name], np.int64) for name in ("thread", "time", "key", "tag")},
        "pid": np.zeros(n, np.int64),
        "module": np.full(n, NULL, np.int64),
    }
    return calls.replay(records, state, {name: np.empty(0, np.int64) for name in calls.FRAME_COLUMNS})


def closed_calls(out: calls.Replayed) -> tuple[list[Row], list[int]]:
    pool = out.pool
    names = ("thread", "id", "parent", "start")
    rows = [
        (*(int(pool[name][f]) for name in names), int(end), int(pool["key"][f]))
        for f, end in zip(out.closed.tolist(), out.ends.tolist(), strict=True)
    ]
    return rows, [out.unmatched_returns, out.unknown_tags]


def make_calls(rng: np.random.Generator, n: int) -> Inputs:
    """Nests of 1-8 calls (Python or C) closed in reverse, on 4 threads, one record per ns."""
    depth = rng.integers(1, 9, max(n // 8, 1))
    thread = np.repeat(rng.integers(0, 4, depth.size), 2 * depth)
    tag = np.concatenate([np.r_[np.zeros(d, np.int64), np.ones(d, np.int64)] for d in depth.tolist()])
    tag += 2 * rng.integers(0, 2, tag.size)  # C calls and returns too
    return {"thread": thread, "time": np.arange(tag.size), "key": rng.integers(0, 50, tag.size), "tag": tag}


@dataclass(frozen=True)
class Comparison:
    """One kernel wrapper, its oracle, and benchmark inputs."""

    run: Callable[[Inputs], Any]
    normalise: Callable[[Any], Any]
    reference: Callable[[Inputs], Any]
    make: Callable[[np.random.Generator, int], Inputs]


def _steps_out(acc: overlap.StepTotals) -> tuple[list[int], list[int | None], list[int | None]]:
    return [int(x) for x in acc.total], [plain(x) for x in acc.first], [plain(x) for x in acc.last]


COMPARISONS: dict[str, Comparison] = {
    "union": Comparison(run_union, spans, lambda i: union_ref(i["starts"], i["ends"]), make_intervals),
    **{
        f"combine_{op.name.lower()}": Comparison(
            run_combine(op),
            spans,
            lambda i, op=op: combine_ref(
                op, list(zip(*i["a"], strict=True)), list(zip(*i["b"], strict=True))
            ),
            make_two_sets,
        )
        for op in overlap.SetOp
    },
    "gaps": Comparison(
        run_gaps, spans, lambda i: gaps_ref(i["starts"], i["ends"], i["lo"], i["hi"]), make_gaps
    ),
    **{
        f"steps_{name}": Comparison(
            run_steps,
            _steps_out,
            lambda i: step_totals_ref(i["starts"], i["ends"], i["steps"], i["mode"]),
            make_steps(mode),
        )
        for name, mode in (("clip", overlap.CLIP), ("by_start", overlap.BY_START))
    },
    "hwts": Comparison(
        run_pairs(pairing.pair_hwts, pairing.pair_state), normalise_pairs, hwts_ref, make_task_logs
    ),
    "acsq": Comparison(
        run_pairs(pairing.pair_acsq, pairing.pair_state), normalise_pairs, acsq_ref, make_task_logs
    ),
    "ffts": Comparison(
        run_pairs(pairing.pair_ffts, pairing.FifoState.new), normalise_pairs, ffts_ref, make_subtask_logs
    ),
    "pta": Comparison(
        run_pta,
        lambda out: (sorted(pta_rows(out[0]), key=lambda r: r[5]), [int(c) for c in out[1].counts]),
        pta_ref,
        make_pta,
    ),
    "ge": Comparison(run_ge, lambda out: (ge_rows(out[0]), [int(c) for c in out[1].counts]), ge_ref, make_ge),
    "calls": Comparison(run_calls, closed_calls, calls_ref, make_calls),
}
