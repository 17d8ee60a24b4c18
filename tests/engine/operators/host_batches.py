"""Host-side operator test support: hand-built host batches, simulated runs, a step recorder.

Hand-built columns go through the family's real codec (encode, then decode) and get the ``aging``
column and the ns columns of ``TIME_SPECS``; host counter values are taken as ns already (identity
clock), so a test states times directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import profstream
from profstream.codecs import get_codec
from profstream.codecs._base import DecodeContext
from profstream.codecs.additional import MAX_TENSORS, SHAPE_DIMS, fixed_lists
from profstream.engine import schema
from profstream.engine.feeds import TIME_SPECS, FeedSet, convert
from profstream.engine.operators.api import Dictionaries
from profstream.engine.runtime import START, Emit, Feed, Operator, at
from profstream.simulate import SimulationConfig, simulate
from tests.engine.operators.harness import Step

IDENTITY = {"host": lambda values: np.asarray(values).astype(np.int64)}


def host_batch(family: str, *, aging: bool = True, **columns: Any) -> pa.RecordBatch:
    """``columns`` of ``family`` as a feed delivers them: decoded, ``aging``, ns times."""
    codec = get_codec(family)
    n = len(next(iter(columns.values())))
    decoded = codec.decode(np.frombuffer(codec.encode(columns), np.uint8), DecodeContext()).batch
    decoded = decoded.append_column("aging", pa.array(np.full(n, aging)))
    return convert(decoded, TIME_SPECS[family], IDENTITY)


def apis(rows: Sequence[tuple[int, int, int, int, int, int]]) -> pa.RecordBatch:
    """Api records (level, type, thread, begin, end, item)."""
    level, kind, thread, begin, end, item = (list(c) for c in zip(*rows, strict=True))
    return host_batch(
        "api_event",
        level=np.array(level, np.uint16),
        type=np.array(kind, np.uint32),
        thread_id=np.array(thread, np.uint32),
        request_id=np.zeros(len(rows), np.uint32),
        begin_time=np.array(begin, np.uint64),
        end_time=np.array(end, np.uint64),
        is_event=np.zeros(len(rows), np.bool_),
        item_id=np.array(item, np.uint64),
    )


def event_records(rows: Sequence[tuple[int, int, int, int, int, int]]) -> pa.RecordBatch:
    """Event records (level, type, thread, request, time, item)."""
    level, kind, thread, request, time, item = (list(c) for c in zip(*rows, strict=True))
    return host_batch(
        "api_event",
        level=np.array(level, np.uint16),
        type=np.array(kind, np.uint32),
        thread_id=np.array(thread, np.uint32),
        request_id=np.array(request, np.uint32),
        begin_time=np.array(time, np.uint64),
        end_time=np.zeros(len(rows), np.uint64),
        is_event=np.ones(len(rows), np.bool_),
        item_id=np.array(item, np.uint64),
    )


def launches(
    rows: Sequence[tuple[int, int, int, int, int, int]], *, device: int = 0, kernel: Sequence[int] = ()
) -> pa.RecordBatch:
    """task_track records (thread, time, stream, task, batch, runtime type)."""
    thread, time, stream, task, batch, kind = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    return host_batch(
        "task_track",
        level=np.full(n, 5000, np.uint16),
        type=np.full(n, 802, np.uint32),
        thread_id=np.array(thread, np.uint32),
        timestamp=np.array(time, np.uint64),
        device_id=np.full(n, device, np.uint16),
        stream_id=np.array(stream, np.uint16),
        task_id=np.array(task, np.uint16),
        batch_id=np.array(batch, np.uint16),
        task_type=np.array(kind, np.uint64),
        kernel_name_hash=np.array(list(kernel) or [0] * n, np.uint64),
    )


def node_info(
    rows: Sequence[tuple[int, int, int, int, int]],
    *,
    aging: bool = True,
    block: Sequence[tuple[int, int]] = (),
    op_flag: Sequence[int] = (),
) -> pa.RecordBatch:
    """node_basic_info records (thread, time, op name hash, GE task type, op type hash)."""
    thread, time, name, kind, op_type = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    dims = list(block) or [(0, 0)] * n
    return host_batch(
        "node_basic_info",
        aging=aging,
        level=np.full(n, 10000, np.uint16),
        thread_id=np.array(thread, np.uint32),
        timestamp=np.array(time, np.uint64),
        op_name_hash=np.array(name, np.uint64),
        task_type=np.array(kind, np.uint32),
        op_type_hash=np.array(op_type, np.uint64),
        block_dim=np.array([d[0] for d in dims], np.uint16),
        mix_ratio=np.array([d[1] for d in dims], np.uint16),
        op_flag=np.array(list(op_flag) or [0] * n, np.uint32),
    )


Tensor = tuple[int, int, int, int, Sequence[int]]  # (kind 0 in / 1 out, format, sub format, data type, dims)


def tensor_info(
    rows: Sequence[tuple[int, int, int, Sequence[Tensor]]], *, aging: bool = True
) -> pa.RecordBatch:
    """tensor_info records (thread, time, op name hash, up to five tensors)."""
    n = len(rows)
    words = np.zeros((n, MAX_TENSORS, 4), np.uint32)
    shape = np.zeros((n, MAX_TENSORS, SHAPE_DIMS), np.uint32)
    for r, (_, _, _, tensors) in enumerate(rows):
        for k, (kind, fmt, sub, dtype, dims) in enumerate(tensors):
            words[r, k] = (kind, fmt, sub, dtype)
            shape[r, k, : len(dims)] = dims
    return host_batch(
        "tensor_info",
        aging=aging,
        level=np.full(n, 10000, np.uint16),
        type=np.ones(n, np.uint32),
        thread_id=np.array([r[0] for r in rows], np.uint32),
        timestamp=np.array([r[1] for r in rows], np.uint64),
        op_name_hash=np.array([r[2] for r in rows], np.uint64),
        tensor_num=np.array([len(r[3]) for r in rows], np.uint32),
        tensor_type=fixed_lists(words[:, :, 0]),
        format=fixed_lists(words[:, :, 1].astype(np.uint8)),
        sub_format=fixed_lists(words[:, :, 2].astype(np.uint16)),
        data_type=fixed_lists(words[:, :, 3]),
        shape=fixed_lists(shape),
    )


def memcpy_infos(rows: Sequence[tuple[int, int, int, int, int]]) -> pa.RecordBatch:
    """memcpy_info records (thread, time, data size, max size, direction), the newer layout."""
    thread, time, size, most, direction = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    return host_batch(
        "memcpy_info",
        level=np.full(n, 5000, np.uint16),
        type=np.full(n, 801, np.uint32),
        thread_id=np.array(thread, np.uint32),
        timestamp=np.array(time, np.uint64),
        data_size=np.array(size, np.uint64),
        max_size=np.array(most, np.uint64),
        direction=np.array(direction, np.uint16),
    )


def hccl_infos(rows: Sequence[dict[str, int]]) -> pa.RecordBatch:
    """hccl_info records; each row gives thread_id and time and any MsprofHcclInfo fields by name."""
    names = sorted({k for r in rows for k in r})
    columns = {
        k: np.array([r.get(k, 0) for r in rows], np.uint64) for k in names if k not in ("time", "thread_id")
    }
    return host_batch(
        "hccl_info",
        level=np.full(len(rows), 5500, np.uint16),
        thread_id=np.array([r["thread_id"] for r in rows], np.uint32),
        timestamp=np.array([r["time"] for r in rows], np.uint64),
        **columns,
    )


def hccl_op_infos(rows: Sequence[tuple[int, int, bool, bool, int, int, int, int]]) -> pa.RecordBatch:
    """hccl_op_info records (thread, time, relay, retry, data type, alg hash, count, group hash)."""
    thread, time, relay, retry, dtype, alg, count, group = (list(c) for c in zip(*rows, strict=True))
    return host_batch(
        "hccl_op_info",
        level=np.full(len(rows), 10000, np.uint16),
        type=np.full(len(rows), 10, np.uint32),
        thread_id=np.array(thread, np.uint32),
        timestamp=np.array(time, np.uint64),
        relay=np.array(relay, np.bool_),
        retry=np.array(retry, np.bool_),
        data_type=np.array(dtype, np.uint8),
        alg_type_hash=np.array(alg, np.uint64),
        count=np.array(count, np.uint64),
        group_name_hash=np.array(group, np.uint64),
    )


def device_tasks(
    rows: Sequence[tuple[int, int, int, int, int]],
    *,
    device: int = 0,
    metrics: dict[str, list[float]] | None = None,
    contexts: Sequence[int] | None = None,
) -> pa.RecordBatch:
    """device_tasks rows (stream, task, batch, start, end) of ``device``, context NO_ID unless given."""
    stream, task, batch, start, end = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    metrics = metrics or {}
    return schema.conform(
        schema.device_tasks_schema(list(metrics)),
        {
            "device_id": pa.array(np.full(n, device, np.int32)),
            "stream_id": pa.array(stream),
            "task_id": pa.array(task),
            "batch_id": pa.array(batch),
            "context_id": pa.array(
                np.full(n, schema.NO_ID) if contexts is None else list(contexts), pa.int64()
            ),
            "start_ns": pa.array(start),
            "end_ns": pa.array(end),
            "device_task_type": pa.array(["AI_CORE"] * n),
            **{name: pa.array(values, pa.float64()) for name, values in metrics.items()},
        },
    )


def dictionaries(hashes: dict[int, str], types: Iterable[tuple[int, int, str]]) -> Dictionaries:
    rows = list(types)
    return Dictionaries(
        pa.table(
            {
                "hash": pa.array(list(hashes), pa.uint64()),
                "value": pa.array(list(hashes.values()), pa.string()),
            }
        ),
        pa.table(
            {
                "level": pa.array([r[0] for r in rows], pa.uint16()),
                "type": pa.array([r[1] for r in rows], pa.uint64()),
                "name": pa.array([r[2] for r in rows], pa.string()),
            }
        ),
    )


def rows(table: pa.Table | None, *names: str) -> list[tuple[Any, ...]]:
    """Selected columns of ``table`` as tuples (dictionary values decoded)."""
    if table is None:
        return []
    columns = [table.column(n).to_pylist() for n in names]
    return list(zip(*columns, strict=True))


# -- simulated runs --------------------------------------------------------------------------------


def table_feed(name: str, rows_: pa.Table, time_column: str, chunk: int = 64) -> Feed:
    """A feed of ``rows_`` in time order, ``chunk`` rows per batch."""
    ordered = rows_.sort_by(time_column)
    return Feed(name, iter(ordered.to_batches(max_chunksize=chunk)), time_column)


def truth_device_tasks(truth: pa.Table, device: int) -> pa.Table:
    """The truth's tasks of ``device`` as ``device_tasks`` rows (context NO_ID, no metrics)."""
    mine = truth.filter(pc.equal(truth["device_id"], device))
    batch = schema.conform(
        schema.device_tasks_schema(),
        {
            "device_id": mine["device_id"],
            "stream_id": mine["stream_id"],
            "task_id": mine["task_id"],
            "batch_id": mine["batch_id"],
            "context_id": pa.array(np.full(mine.num_rows, schema.NO_ID)),
            "start_ns": mine["start_ns"],
            "end_ns": mine["end_ns"],
            "device_task_type": mine["task_type"],
        },
    )
    return pa.Table.from_batches([batch])


class Simulated:
    """A simulated torch_npu run (two devices), its truth, and host feeds as a pipeline builder needs them.

    Node info is split the way the host join wants it: unaging records as tables given up front,
    aging records as time-ordered feeds.
    """

    def __init__(self, root: Path, chip: str) -> None:
        config = SimulationConfig(chip=chip, steps=3, ops_per_step=48, devices=2, framework="torch_npu")
        simulate(config, root / "out", root / "truth")
        self.collection = profstream.open(root / "out").collections[0]
        self.truth = pq.read_table(root / "truth" / "tasks.parquet")
        feeds = FeedSet(self.collection)
        host = self.collection.host
        self.names = Dictionaries(feeds.table(host, "hash_dic"), feeds.table(host, "type_info_dic"))
        self.node_info = feeds.table(host, "node_basic_info")
        self.tensor_info = feeds.table(host, "tensor_info")
        self.devices = sorted(set(self.truth["device_id"].to_pylist()))

    def static(self, family: str) -> pa.Table:
        rows_ = self.node_info if family == "node_basic_info" else self.tensor_info
        return rows_.filter(pc.invert(rows_["aging"]))

    def feeds(self, families: Sequence[str]) -> list[Feed]:
        """Host feeds of ``families``; node info families carry only their aging records."""
        feed_set = FeedSet(self.collection)
        out = []
        for family in families:
            if family in ("node_basic_info", "tensor_info"):
                rows_ = self.node_info if family == "node_basic_info" else self.tensor_info
                out.append(table_feed(family, rows_.filter(rows_["aging"]), "time_ns"))
            else:
                out.append(feed_set.feed(self.collection.host, family))
        return out

    def truth_feeds(self) -> list[Feed]:
        return [
            table_feed(at("device_tasks", d), truth_device_tasks(self.truth, d), "start_ns")
            for d in self.devices
        ]


class Recorder(Operator):
    """Passes everything to ``inner`` and records it as harness steps, to replay one operator alone.

    A push is recorded with the watermark the operator last saw (a repeated advance), so the replay
    gives the operator the same input in the same order.
    """

    def __init__(self, inner: Operator) -> None:
        self.inner = inner
        self.inputs, self.outputs = inner.inputs, inner.outputs
        self.steps: list[Step] = []
        self._mark = START

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        self.steps.append((stream, batch, self._mark))
        self.inner.push(stream, batch)

    def advance(self, watermark: int) -> list[Emit]:
        self._mark = watermark
        self.steps.append((self.inputs[0], None, watermark))
        return self.inner.advance(watermark)

    def finish(self) -> list[Emit]:
        return self.inner.finish()

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, state: bytes) -> None:
        self.inner.restore(state)


class OneOutput(Operator):
    """``inner`` with only its emits of ``stream``: the harness compares one table per check."""

    def __init__(self, inner: Operator, stream: str) -> None:
        self.inner, self.stream = inner, stream
        self.inputs, self.outputs = inner.inputs, (stream,)

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        self.inner.push(stream, batch)

    def advance(self, watermark: int) -> list[Emit]:
        return [e for e in self.inner.advance(watermark) if e[0] == self.stream]

    def finish(self) -> list[Emit]:
        return [e for e in self.inner.finish() if e[0] == self.stream]

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, state: bytes) -> None:
        self.inner.restore(state)
