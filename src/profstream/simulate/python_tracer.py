"""torch_npu's Python tracer (``with_stack``) and GC detection, as the simulated training loop calls them.

One step of the Python thread that runs the torch ops (the same calls every step, on every such thread)::

    main.py(57): train_step                         from the step origin + 200 ns
      <built-in method to of Tensor object ...>     around the input copy (aten::copy_)
      nn.Module: Model                              around the forward ops
        nn.Module: Block (two or more instances)    around a run of forward ops each
          per forward op, by its type: a module call (nn.Module: Linear / LayerNorm, one
          instance per op) around a C call, a Python call (functional.softmax) or a C call
          (<built-in method add of type object ...>), around the op
      torch/_tensor.py(522): backward               around the backward ops and all-reduces,
        torch/autograd/__init__.py(267): backward   which the autograd engine runs from C++,
          <built-in method run_backward ...>        so they have no Python frames of their own
      torch/optim/sgd.py(75): step                  1 µs after the last op, 4-12 µs long

Each level of wrapping starts 100 ns before what it encloses and ends 100 ns after it; the Python
thread leaves at least 1 µs between ops (:mod:`profstream.simulate.workload`), so calls nest with the
torch ops (a call encloses the op it issues) and the order of a step's records is the same every step.
That fixed order is what the truth uses: a call's ``Python id`` (its record's position among its
thread's records, returns counted) is ``P + k * R + r`` for run step ``k``, ``R`` records per step and
the record's rank ``r`` in the step, after the ``P`` start frames.

Start frames: ``main.py(1): <module>``, ``main.py(88): main`` and ``main.py(52): train`` are on the
thread's stack when the tracer starts (the collection start), never return while it runs, and are
appended at the end of the file at stop, timed at the tracer start (20 ns apart), as
``PythonTracer::stop`` does. torch_npu closes them at the thread's last record (the last
``train_step`` return). The names file (``torch.python_tracer_hash``) is written at stop too.

Module calls are written as ``<class>######<object id>``; torch_npu prints them as
``nn.Module: <class>_<n>``, ``n`` numbering the objects of the class on the thread in the order of
their first call, with ``Python module id`` ``n``. Each thread drives its own model replica, so
object ids differ between threads.

GC (``torch.gc_record``, written at stop by ``_profiler_gc_detect.py``): on steps ``k`` with
``k % 1024`` in (0, 2), one collection of the process between two steps, after every thread's
``train_step`` returned, 40-400 µs long and cut to end 1 µs before the step does; at least 3.9 µs
(the Python thread is idle for at least the 20 µs host synchronisation), above the 1 µs
threshold written in profiler_info.json.

Every time is a multiple of 20 ns (the host counter converts exactly). The random durations come
from generators of their own, so the other streams are the same with or without these files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs.framework import C_CALL, C_RETURN, PY_CALL, PY_RETURN
from profstream.simulate.clock import HostClock
from profstream.simulate.records import Rows, hash_id
from profstream.simulate.workload import GRID_NS, ITEM_MEMCPY, Chunk, Template

I64 = npt.NDArray[np.int64]

#: what the tracer writes between a module's class name and its object id
MODULE_DELIMITER = "######"
#: profiler_info.json ``_gc_detect_threshold`` (ms): every simulated collection is longer
GC_THRESHOLD_MS = 0.001
#: run steps ``k`` with a collection: ``k % GC_PERIOD in GC_STEPS``
GC_PERIOD, GC_STEPS = 1024, (0, 2)
START_FRAMES = ("main.py(1): <module>", "main.py(88): main", "main.py(52): train")
LEVEL_NS = 100  # each level of wrapping starts this long before what it encloses, ends this long after
OPTIMIZER_AFTER_NS = 1_000  # from the last op's end to the optimizer step
STEP_START_NS = 200  # from the step origin to train_step
GC_AFTER_NS = 15_000  # from the last op's end to a collection (train_step has returned by then)

_TYPE = "type object at 0xffffa3bfcf10"
_CAPSULE = "PyCapsule object at 0xfffdb8c9bf30"
_TENSOR = "Tensor object at 0xfffdb9ec7270"
#: torch op -> (module class or "", the call(s) inside it, innermost last): (name, is C call)
FORWARD_CALLS: dict[str, tuple[str, tuple[tuple[str, bool], ...]]] = {
    "aten::matmul": ("Linear", (("<built-in function linear>", True),)),
    "aten::layer_norm": ("LayerNorm", ((f"<built-in method layer_norm of {_TYPE}>", True),)),
    "aten::softmax": ("", (("torch/nn/functional.py(1885): softmax", False),)),
    "npu::npu_fusion_attention": ("", ((f"<built-in method npu_fusion_attention of {_CAPSULE}>", True),)),
    "aten::bmm": ("", ((f"<built-in method bmm of {_TYPE}>", True),)),
    "aten::add": ("", ((f"<built-in method add of {_TYPE}>", True),)),
    "aten::mul": ("", ((f"<built-in method mul of {_TYPE}>", True),)),
    "aten::to": ("", ((f"<built-in method to of {_TENSOR}>", True),)),
    "aten::nonzero": ("", ((f"<built-in method nonzero of {_TYPE}>", True),)),
}
KINDS = ("python", "module", "c")  # python_calls.kind, as the engine names them
PYTHON, MODULE, C_FUNCTION = range(3)

CALLS_SCHEMA = pa.schema(
    [
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("name", pa.dictionary(pa.int32(), pa.string())),
        ("kind", pa.dictionary(pa.int32(), pa.string())),
        ("python_id", pa.int64()),
        ("parent_id", pa.int64()),
        ("module_id", pa.int64()),
    ]
)
GC_SCHEMA = pa.schema(
    [("pid", pa.int64()), ("tid", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64())]
)


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the step: what it is, what it encloses (anchor columns and offsets), its parent."""

    name: str  # as written (a module call: the class; its key adds the object)
    kind: int  # PYTHON, MODULE or C_FUNCTION
    parent: int  # index of the enclosing call; -1: the innermost start frame
    start: int  # anchor column of the start (see :meth:`CallModel.anchors`)
    start_off: int
    end: int
    end_off: int
    instance: int = -1  # module calls: the object, numbered over the step's objects


@dataclass(frozen=True, slots=True)
class CallModel:
    """The calls of one step (identical every step) and the fixed order of their records."""

    calls: tuple[Call, ...]
    n_ops: int
    last_op: int
    order: I64  # record index (2c: call c's call, 2c + 1: its return) of each rank
    rank: I64  # rank of each record index
    module_number: I64  # per call: n of "nn.Module: <class>_<n>" (-1: not a module)

    @property
    def records(self) -> int:
        return 2 * len(self.calls)

    @classmethod
    def of(cls, template: Template) -> CallModel:
        """The call tree of a step of ``template`` (module docstring)."""
        n_ops = template.n_ops
        origin, opt_start, opt_end = 2 * n_ops, 2 * n_ops + 1, 2 * n_ops + 2
        calls: list[Call] = []

        def add(
            name: str, kind: int, parent: int, span: tuple[int, int, int, int], instance: int = -1
        ) -> int:
            calls.append(Call(name, kind, parent, *span, instance=instance))
            return len(calls) - 1

        def around(first: int, last: int, level: int) -> tuple[int, int, int, int]:
            return (first, -level * LEVEL_NS, n_ops + last, level * LEVEL_NS)

        names = _torch_names(template)
        forward = [
            o
            for o in range(n_ops)
            if template.op_catalog[o] >= 0 and template.op_name[o].startswith("model/")
        ]
        memcpy = [o for o in range(n_ops) if template.item_kind[template.op_item[o]] == ITEM_MEMCPY]
        last = n_ops - 1
        step = add("main.py(57): train_step", PYTHON, -1, (origin, STEP_START_NS, opt_end, LEVEL_NS))
        for op in memcpy:
            add(f"<built-in method to of {_TENSOR}>", C_FUNCTION, step, around(op, op, 1))
        instances = 0
        model = add("Model", MODULE, step, around(forward[0], forward[-1], 4), instances)
        instances += 1
        blocks = max(2, len(forward) // 8)
        for b in range(blocks):
            ops = forward[b * len(forward) // blocks : (b + 1) * len(forward) // blocks]
            block = add("Block", MODULE, model, around(ops[0], ops[-1], 3), instances)
            instances += 1
            for op in ops:
                module, inner = FORWARD_CALLS[names[op]]
                parent = block
                if module:
                    parent = add(module, MODULE, block, around(op, op, len(inner) + 1), instances)
                    instances += 1
                for depth, (name, is_c) in enumerate(inner):
                    kind = C_FUNCTION if is_c else PYTHON
                    parent = add(name, kind, parent, around(op, op, len(inner) - depth))
        backward = forward[-1] + 1
        tensor = add("torch/_tensor.py(522): backward", PYTHON, step, around(backward, last, 3))
        autograd = add("torch/autograd/__init__.py(267): backward", PYTHON, tensor, around(backward, last, 2))
        engine = "<built-in method run_backward of torch._C._EngineBase object at 0xfffdb9e3c0a0>"
        add(engine, C_FUNCTION, autograd, around(backward, last, 1))
        add("torch/optim/sgd.py(75): step", PYTHON, step, (opt_start, 0, opt_end, 0))
        return cls._ordered(tuple(calls), n_ops, last)

    @classmethod
    def _ordered(cls, calls: tuple[Call, ...], n_ops: int, last_op: int) -> CallModel:
        """Fix the record order with a step whose ops leave the least room: 20 ns ops, 1 µs apart."""
        begin = np.arange(n_ops, dtype=np.int64) * 1_020 + 1_000
        end = begin + GRID_NS
        tail = end[last_op] + OPTIMIZER_AFTER_NS
        anchors = np.concatenate([begin, end, [0, tail, tail + 4_000]])[None, :]
        times = _record_times(calls, anchors)[0]
        order = np.argsort(times, kind="stable")
        if not (np.diff(times[order]) > 0).all():
            msg = "simulated Python calls share a time on one thread"
            raise AssertionError(msg)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        number = np.full(len(calls), -1, np.int64)
        seen: dict[str, list[int]] = {}
        for c in sorted(range(len(calls)), key=lambda c: rank[2 * c]):
            call = calls[c]
            if call.kind == MODULE:
                objects = seen.setdefault(call.name, [])
                if call.instance not in objects:
                    objects.append(call.instance)
                number[c] = objects.index(call.instance)
        return cls(calls, n_ops, last_op, order.astype(np.int64), rank.astype(np.int64), number)

    def anchors(self, chunk: Chunk, optimizer_ns: I64) -> I64:
        """``[steps, 2 n_ops + 3]``: op begins, op ends, step origin, the optimizer step's start and end."""
        tail = chunk.py_end[:, self.last_op] + OPTIMIZER_AFTER_NS
        columns = [
            chunk.py_begin,
            chunk.py_end,
            chunk.origin[:, None],
            tail[:, None],
            (tail + optimizer_ns)[:, None],
        ]
        return np.concatenate(columns, axis=1).astype(np.int64)


def _record_times(calls: tuple[Call, ...], anchors: I64) -> I64:
    """``[steps, 2 calls]``: each call's start and end."""
    start = anchors[:, [c.start for c in calls]] + np.array([c.start_off for c in calls], np.int64)
    end = anchors[:, [c.end for c in calls]] + np.array([c.end_off for c in calls], np.int64)
    return np.stack([start, end], axis=2).reshape(len(anchors), -1)


def _torch_names(template: Template) -> list[str]:
    return [template.catalog[c].torch_op if c >= 0 else "" for c in template.op_catalog]


@dataclass
class ThreadTracer:
    """One Python thread's tracer: its keys, its start frames and the last time it recorded."""

    model: CallModel
    host: HostClock
    pid: int
    tid: int
    objects: I64  # object id of each module instance
    last_ns: int = 0
    keys: I64 = field(init=False)
    names: dict[int, str] = field(init=False)

    def __post_init__(self) -> None:
        written = [
            f"{c.name}{MODULE_DELIMITER}{int(self.objects[c.instance])}" if c.kind == MODULE else c.name
            for c in self.model.calls
        ]
        self.keys = np.array([hash_id(n) for n in written], np.uint64).astype(np.int64)
        self.names = {hash_id(n): n for n in (*written, *START_FRAMES)}

    def rows(self, chunk: Chunk, optimizer_ns: I64) -> tuple[Rows, dict[str, Any]]:
        """The records of ``chunk`` (in the order written) and their truth (one row per call)."""
        m = self.model
        times = _record_times(m.calls, m.anchors(chunk, optimizer_ns))
        steps, records = times.shape
        ordered = times[:, m.order]
        if not (np.diff(ordered, axis=1) > 0).all():
            msg = "a simulated Python call does not nest with the torch ops"
            raise AssertionError(msg)
        self.last_ns = int(ordered[-1, -1])
        tags = np.array(
            [[PY_CALL, PY_RETURN] if c.kind != C_FUNCTION else [C_CALL, C_RETURN] for c in m.calls]
        )
        keys = np.repeat(self.keys, 2)[m.order]
        n = steps * records
        columns = {
            "ts": self.host.to_host_cnt(ordered.ravel()),
            "thread_id": np.full(n, self.tid, np.int64),
            "process_id": np.full(n, self.pid, np.int64),
            "key_hash": np.tile(keys, steps).view(np.uint64),
            "tag": np.tile(tags.ravel()[m.order], steps).astype(np.uint8),
        }
        rows = Rows("torch_python_tracer_func", columns, ordered.ravel())
        # ids: the start frames, then every step's records
        base = len(START_FRAMES) + (chunk.first_step + np.arange(steps, dtype=np.int64)) * records
        own = m.rank[0::2]
        parent = np.array([c.parent for c in m.calls])
        parent_id = np.where(parent >= 0, base[:, None] + own[np.maximum(parent, 0)], len(START_FRAMES) - 1)
        truth = {
            "start_ns": times[:, 0::2].ravel(),
            "end_ns": times[:, 1::2].ravel(),
            "python_id": (base[:, None] + own).ravel(),
            "parent_id": parent_id.ravel(),
            **self._described(steps),
        }
        return rows, truth

    def _described(self, steps: int) -> dict[str, Any]:
        m = self.model
        shown = [
            f"nn.Module: {c.name}_{m.module_number[i]}" if c.kind == MODULE else c.name
            for i, c in enumerate(m.calls)
        ]
        n = steps * len(m.calls)
        values, index = np.unique(shown, return_inverse=True)
        return {
            "pid": np.full(n, self.pid, np.int64),
            "tid": np.full(n, self.tid, np.int64),
            "name": _dictionary(np.tile(index, steps), values.tolist()),
            "kind": _dictionary(np.tile([c.kind for c in m.calls], steps), list(KINDS)),
            "module_id": pa.array(
                np.tile(m.module_number, steps), pa.int64(), mask=np.tile(m.module_number < 0, steps)
            ),
        }

    def start_frames(self, at_ns: int) -> tuple[Rows, dict[str, Any]]:
        """The frames on the stack at the tracer start (``at_ns``), appended at stop, and their truth."""
        n = len(START_FRAMES)
        times = at_ns + GRID_NS * np.arange(n, dtype=np.int64)
        columns = {
            "ts": self.host.to_host_cnt(times),
            "thread_id": np.full(n, self.tid, np.int64),
            "process_id": np.full(n, self.pid, np.int64),
            "key_hash": np.array([hash_id(f) for f in START_FRAMES], np.uint64),
            "tag": np.full(n, PY_CALL, np.uint8),
        }
        truth = {
            "pid": np.full(n, self.pid, np.int64),
            "tid": np.full(n, self.tid, np.int64),
            "start_ns": times,
            "end_ns": np.full(n, self.last_ns, np.int64),
            "name": _dictionary(np.arange(n), list(START_FRAMES)),
            "kind": _dictionary(np.full(n, PYTHON), list(KINDS)),
            "python_id": np.arange(n, dtype=np.int64),
            "parent_id": np.maximum(np.arange(n, dtype=np.int64) - 1, 0),
            "module_id": pa.nulls(n, pa.int64()),
        }
        return Rows("torch_python_tracer_func", columns, times), truth


def _dictionary(indices: npt.ArrayLike, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(indices, np.int32)), pa.array(values, pa.string())
    )


def optimizer_ns(seed: int, rank: int, device_index: int, chunk_index: int, steps: int) -> I64:
    """The optimizer step's duration in each step of a chunk (4-12 µs)."""
    rng = np.random.default_rng([seed, rank, device_index, chunk_index, 0x9E7])
    return rng.integers(4_000 // GRID_NS, 12_000 // GRID_NS + 1, steps).astype(np.int64) * GRID_NS


def module_objects(pid: int, device_index: int, count: int) -> I64:
    """Object ids (``id(module)``) of a thread's module instances: 16-byte aligned heap addresses."""
    return 0xFFFF_2C00_0000 + (pid % 4096) * 0x100_0000 + device_index * 0x10_0000 + np.arange(count) * 0x4B0


def gc_rows(
    chunks: list[Chunk], host: HostClock, pid: int, *, seed: int, rank: int, index: int
) -> tuple[Rows, dict[str, Any]]:
    """The collections of a chunk of steps (module docstring), shared by the devices of one process."""
    first = chunks[0]
    steps = first.first_step + np.arange(first.steps)
    chosen = np.isin(steps % GC_PERIOD, GC_STEPS)
    rng = np.random.default_rng([seed, rank, index, 0x6C])
    want = rng.integers(40_000 // GRID_NS, 400_000 // GRID_NS + 1, first.steps).astype(np.int64) * GRID_NS
    last_op = np.max([c.py_end[:, -1] for c in chunks], axis=0)
    start = last_op + GC_AFTER_NS
    end = np.minimum(start + want, first.origin + first.length - GRID_NS - 1_000)
    start, end = start[chosen], end[chosen]
    n = len(start)
    columns = {
        "process_id": np.full(n, pid, np.int64),
        "start_ns": host.to_host_cnt(start),
        "end_ns": host.to_host_cnt(end),
    }
    truth = {
        "pid": np.full(n, pid, np.int64),
        "tid": np.full(n, pid, np.int64),
        "start_ns": start,
        "end_ns": end,
    }
    return Rows("torch_gc_record", columns, start), truth


def hash_rows(names: dict[int, str]) -> Rows:
    """``torch.python_tracer_hash``: one record per key."""
    keys = sorted(names)
    columns = {
        "key_hash": np.array(keys, np.uint64),
        "value": pa.array([names[k] for k in keys], pa.string()),
    }
    return Rows("torch_python_tracer_hash", columns, np.zeros(len(keys), np.int64))
