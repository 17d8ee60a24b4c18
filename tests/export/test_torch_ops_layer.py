"""trace_view.json's "Python" process as torch_npu describes it (``TraceEventManager.create_m_event``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from profstream.engine.layouts._outputs import Context, Processes
from profstream.engine.layouts.timeline import TorchOps
from profstream.sinks.chrome_trace import CompleteEvents, MetadataEvents


def _ops(rows: list[tuple[int, str]]) -> pa.RecordBatch:
    """Ops of process 100, one per (tid, kind)."""
    n = len(rows)
    texts = pa.nulls(n, pa.string())
    return pa.record_batch(
        {
            "pid": pa.array([100] * n, pa.int64()),
            "tid": pa.array([t for t, _ in rows], pa.int64()),
            "kind": pa.array([k for _, k in rows]),
            "name": pa.array(["Dequeue@aten::add" if k == "dequeue" else "aten::add" for _, k in rows]),
            "start_ns": pa.array(range(n), pa.int64()),
            "end_ns": pa.array(range(1, n + 1), pa.int64()),
            "sequence_number": pa.array([-1] * n, pa.int64()),
            "fwd_thread_id": pa.array([0] * n, pa.int64()),
            "input_shapes": texts,
            "input_dtypes": texts,
            "call_stack": texts,
            "module_hierarchy": texts,
            "flops": pa.array(["flops:64;"] + [None] * (n - 1), pa.string()),
            "correlation_id": pa.array([1] * n, pa.int64()),
        }
    )


def test_a_dequeue_thread_first_seen_in_a_later_batch_sorts_after_every_thread_seen(tmp_path: Path) -> None:
    """torch_npu gives the dequeue thread the largest tid of all torch op, enqueue and dequeue threads
    plus one, as the real Level2 trace does (dequeue thread 3181770 sorted 3186524, after the autograd
    thread 3186523); a dequeue thread whose rows come in a later batch than a larger thread's too."""
    context = Context(tmp_path, "20260101000000", 0, (0,), [], stars=False, process_id=0)
    layer = TorchOps(context, Processes())
    events = [
        *layer.events(_ops([(200, "cpu_op"), (300, "cpu_op"), (200, "enqueue")])),
        *layer.events(_ops([(250, "dequeue")])),
    ]
    sort = {
        tid: index
        for e in events
        if isinstance(e, MetadataEvents) and e.name == "thread_sort_index"
        for tid, index in zip(e.tid.to_pylist(), e.value.to_pylist(), strict=True)
    }
    assert sort == {200: 200, 300: 300, 250: 301}


def test_a_torch_ops_flops_text_is_its_flops_arg(tmp_path: Path) -> None:
    """torch_npu's trace_view.json op args end with ``flops``, the op's extra-args text as written
    (``TorchOpBean.get_args``), where the op has one."""
    context = Context(tmp_path, "20260101000000", 0, (0,), [], stars=False, process_id=0)
    [ops] = [
        e
        for e in TorchOps(context, Processes()).events(_ops([(200, "cpu_op"), (200, "cpu_op")]))
        if isinstance(e, CompleteEvents)
    ]
    assert list(ops.args)[-1] == "flops"
    assert pa.array(ops.args["flops"]).to_pylist() == ["flops:64;", None]
