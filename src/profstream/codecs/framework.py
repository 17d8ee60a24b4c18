"""PyTorch adapter (torch_npu) FRAMEWORK files: ``<worker>_<ts>_ascend_pt/FRAMEWORK/torch.*``.

Layouts: specs/framework_outputs.md §1.1-§1.5. Each file is named exactly by its tag
(``torch.op_range``, ...; torch_npu ``prof_config/_fwk_file_parser_config.py`` matches them by
prefix). Most are TLV files (framing in :mod:`profstream.codecs._tlv`); ``torch.python_tracer_func``
(33-byte ``<4QB`` events, torch_npu ``_binary_decoder.py``) and ``torch.gc_record`` (24-byte
``<3Q``, written by ``_profiler_gc_detect.py``) are plain fixed-size records.

Every historical layout of §1.5 decodes, recognised per buffer from the data
(:meth:`~profstream.codecs._tlv.TlvLayout.detect`), onto one schema per family; columns a
generation lacks are null. Generations are named after the first torch_npu branch that wrote them
(:data:`V5_0_RC3` = ``v2.1.0-5.0.rc3``, ..., :data:`MASTER` = ``v2.3.1-6.0.0`` onwards, the
renumbering of field ids when ``FwkDataType`` was introduced). ``encode`` writes the current layout,
or any older one with ``generation=``.

Times stay raw: ``start_ns``/``end_ns``/``time_ns``/``ts`` are syscnt ticks when the collection had
``syscnt_enable`` set and ``CLOCK_MONOTONIC_RAW`` ns otherwise (§1.4); converting them is the
engine's job.

Choices where the spec is silent or unsure:

* ``torch.python_tracer_hash`` and ``torch.param_tensor_info`` also changed field ids at
  ``v2.3.1-6.0.0`` (read from ``data_reporter.h``: v2.1.0-6.0.rc3 hash value id 2, module params 2,
  optimizer params 3; master 1, 1, 2), although §1.5 lists them "as master". Both are decoded. A
  param buffer holding only field-2 records is told apart by its text (:class:`ParamTensorLayout`);
  if every such value is empty it is read as the current layout.
* ``device_index`` was u8 in v2.1.0-5.0.rc3/6.0.rc1 and i8 since 6.0.rc3; it is an int16 column so
  both fit.
* ``op_range`` field 10 (older: 8) is written as "extra args" (``key:value;...``) and read by
  torch_npu as ``flops``; the column is ``extra_args``.
* Record types are ignored when decoding (the file name decides), as torch_npu does; ``encode``
  writes the type each generation's writer used (1 before ``FwkDataType``, 1-5 after).
* A trailing partial fixed-size record is left unconsumed; at the end of the stream it is an
  error or, under ``skip``, a counted drop, like a truncated TLV record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from profstream.codecs._base import (
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    as_records,
    batch,
    column,
    named_patterns,
    packed_dtype,
    row_count,
)
from profstream.codecs._tlv import (
    DETECT_SAMPLE,
    TRUNCATED,
    Generation,
    Records,
    TlvLayout,
    scan_fields,
    settle_tail,
)

#: layout generations (specs/framework_outputs.md §1.5), oldest first.
V5_0_RC3 = "v2.1.0-5.0.rc3"
V6_0_RC1 = "v2.1.0-6.0.rc1"
V6_0_RC3 = "v2.1.0-6.0.rc3"
MASTER = "master"  # v2.3.1-6.0.0 onwards; torch.memory_usage: the 77-byte layout of master

#: op_mark ``category``.
ENQUEUE_START, ENQUEUE_END, DEQUEUE_START, DEQUEUE_END = range(4)
#: memory_usage ``data_type``: MALLOC carries +size, FREE and BLOCK_FREE negative sizes (§1.3).
MALLOC, FREE, BLOCK_FREE = range(3)
#: memory_usage ``component_type``.
CACHING_ALLOCATOR, WORKSPACE_ALLOCATOR = range(2)
#: memory_usage ``allocator_type``.
INNER_ALLOCATOR, EXTERNAL_ALLOCATOR = range(2)
#: memory_usage ``device_type`` of an NPU (c10 PrivateUse1; torch_npu ``_memory_use_bean.py`` NPU_ID).
NPU_DEVICE_TYPE = 20
#: python_tracer_func ``tag`` (torch_npu ``prof_parse/_python_trace_parser.py``).
PY_CALL, PY_RETURN, C_CALL, C_RETURN = range(4)

# --------------------------------------------------------------------------- torch.op_range

_OP_RANGE_HEAD = [
    ("start_ns", "<i8"),
    ("end_ns", "<i8"),
    ("sequence_number", "<i8"),
    ("process_id", "<u8"),
    ("start_thread_id", "<u8"),
    ("end_thread_id", "<u8"),
    ("forward_thread_id", "<u8"),
]
OP_RANGE = TlvLayout(
    family="torch_op_range",
    numbers=dict([*_OP_RANGE_HEAD, ("scope", "u1"), ("is_async", "?")]),
    texts=(
        "name",
        "input_dtypes",
        "input_shapes",
        "input_tensors",
        "input_tensor_lists",
        "input_scalars",
        "call_stack",
        "module_hierarchy",
        "extra_args",
    ),
    generations=(
        Generation(  # also v2.1.0-6.0.rc1
            V5_0_RC3,
            packed_dtype([*_OP_RANGE_HEAD, ("is_async", "?")], 57),  # <3q4Q?
            {
                3: "name",
                4: "input_dtypes",
                5: "input_shapes",
                6: "call_stack",
                7: "module_hierarchy",
                8: "extra_args",
            },
            frozenset({3}),
        ),
        Generation(
            V6_0_RC3,
            packed_dtype([*_OP_RANGE_HEAD, ("scope", "u1"), ("is_async", "?")], 58),  # <3q4QB?
            {
                3: "name",
                4: "input_dtypes",
                5: "input_shapes",
                6: "input_tensors",
                7: "input_scalars",
                8: "call_stack",
                9: "module_hierarchy",
                10: "extra_args",
            },
            frozenset({3}),
        ),
        Generation(
            MASTER,
            packed_dtype([*_OP_RANGE_HEAD, ("scope", "u1"), ("is_async", "?")], 58),  # <3q4QB?
            {
                2: "name",
                3: "input_dtypes",
                4: "input_shapes",
                5: "input_tensors",
                6: "input_tensor_lists",
                7: "input_scalars",
                8: "call_stack",
                9: "module_hierarchy",
                10: "extra_args",
            },
            frozenset({2}),
        ),
    ),
)

# --------------------------------------------------------------------------- torch.op_mark

_OP_MARK_DTYPE = packed_dtype(  # <q4Q
    [
        ("time_ns", "<i8"),
        ("category", "<u8"),
        ("correlation_id", "<u8"),
        ("thread_id", "<u8"),
        ("process_id", "<u8"),
    ],
    40,
)
OP_MARK = TlvLayout(
    family="torch_op_mark",
    numbers={name: str(_OP_MARK_DTYPE[name]) for name in _OP_MARK_DTYPE.names or ()},
    texts=("name",),
    generations=(
        Generation(V5_0_RC3, _OP_MARK_DTYPE, {2: "name"}, frozenset({2})),  # until v2.1.0-6.0.rc3
        Generation(MASTER, _OP_MARK_DTYPE, {1: "name"}, frozenset({1}), record_type=2),
    ),
)

# --------------------------------------------------------------------------- torch.memory_usage

_MEMORY_HEAD = [
    ("ptr", "<i8"),
    ("time_ns", "<i8"),
    ("alloc_size", "<i8"),
    ("total_allocated", "<i8"),
    ("total_reserved", "<i8"),
]
_MEMORY_ADDED = [("total_active", "<i8"), ("stream_ptr", "<i8")]  # since v2.1.0-6.0.rc1
_MEMORY_IDS = [("thread_id", "<u8"), ("process_id", "<u8")]
MEMORY_USAGE = TlvLayout(
    family="torch_memory_usage",
    numbers={
        **dict(_MEMORY_HEAD + _MEMORY_ADDED),
        "device_type": "i1",
        "device_index": "<i2",
        "component_type": "u1",
        "data_type": "u1",
        "allocator_type": "u1",
        **dict(_MEMORY_IDS),
    },
    texts=(),
    generations=(
        Generation(  # <5qbB2Q
            V5_0_RC3,
            packed_dtype([*_MEMORY_HEAD, ("device_type", "i1"), ("device_index", "u1"), *_MEMORY_IDS], 58),
            {},
        ),
        Generation(  # <7qb2B2Q
            V6_0_RC1,
            packed_dtype(
                [
                    *_MEMORY_HEAD,
                    *_MEMORY_ADDED,
                    ("device_type", "i1"),
                    ("device_index", "u1"),
                    ("data_type", "u1"),
                    *_MEMORY_IDS,
                ],
                75,
            ),
            {},
        ),
        Generation(  # <7q2b2B2Q, also v2.3.1-6.0.0
            V6_0_RC3,
            packed_dtype(
                [
                    *_MEMORY_HEAD,
                    *_MEMORY_ADDED,
                    ("device_type", "i1"),
                    ("device_index", "i1"),
                    ("data_type", "u1"),
                    ("allocator_type", "u1"),
                    *_MEMORY_IDS,
                ],
                76,
            ),
            {},
        ),
        Generation(  # <7q2b3B2Q
            MASTER,
            packed_dtype(
                [
                    *_MEMORY_HEAD,
                    *_MEMORY_ADDED,
                    ("device_type", "i1"),
                    ("device_index", "i1"),
                    ("component_type", "u1"),
                    ("data_type", "u1"),
                    ("allocator_type", "u1"),
                    *_MEMORY_IDS,
                ],
                77,
            ),
            {},
            record_type=3,
        ),
    ),
)

# --------------------------------------------------------------------------- Python tracer, params

_KEY_DTYPE = packed_dtype([("key_hash", "<u8")], 8)  # <Q
PYTHON_TRACER_HASH = TlvLayout(
    family="torch_python_tracer_hash",
    numbers={"key_hash": "<u8"},
    texts=("value",),
    generations=(
        Generation(V6_0_RC3, _KEY_DTYPE, {2: "value"}, frozenset({2})),
        Generation(MASTER, _KEY_DTYPE, {1: "value"}, frozenset({1}), record_type=4),
    ),
)


class ParamTensorLayout(TlvLayout):
    """torch.param_tensor_info, whose field 2 means module params in v2.1.0-6.0.rc3 and optimizer
    params in master.

    A buffer holding only field-2 records ties the generation vote. The text then decides
    (``data_reporter.h`` ``encodeModuleParams``/``encodeOptimizerParams``): module params start
    with the parameter name and ``)``, optimizer params with tensor metadata
    ``impl;ptr;dtype;...``, so a ``;`` before the first ``)`` of the first non-empty value means
    optimizer params (master), its absence module params (v2.1.0-6.0.rc3).
    """

    __slots__ = ()

    def detect(self, buf: ByteBuffer, records: Records) -> Generation:
        sample = scan_fields(
            buf, records.starts[:DETECT_SAMPLE], records.lengths[:DETECT_SAMPLE], self.current.size
        )
        if set(np.unique(sample.kind).tolist()) != {2}:
            return TlvLayout.detect(self, buf, records)
        filled = np.flatnonzero(sample.length > 0)
        if not len(filled):
            return self.current
        start = int(sample.start[filled[0]])
        head = bytes(buf[start : start + int(sample.length[filled[0]])]).split(b")", 1)[0]
        return self.generation(MASTER if b";" in head else V6_0_RC3)


_PARAM_DTYPE = packed_dtype([("key", "<u8")], 8)  # <Q
PARAM_TENSOR_INFO = ParamTensorLayout(
    family="torch_param_tensor_info",
    numbers={"key": "<u8"},
    texts=("module_params", "optimizer_params"),
    generations=(
        Generation(V6_0_RC3, _PARAM_DTYPE, {2: "module_params", 3: "optimizer_params"}),
        Generation(MASTER, _PARAM_DTYPE, {1: "module_params", 2: "optimizer_params"}, record_type=5),
    ),
)

_FUNC_CALL_DTYPE = packed_dtype(  # <3QB
    [("start_ns", "<u8"), ("thread_id", "<u8"), ("process_id", "<u8"), ("trace_tag", "u1")], 25
)
PYTHON_FUNC_CALL = TlvLayout(
    family="torch_python_func_call",
    numbers={name: str(_FUNC_CALL_DTYPE[name]) for name in _FUNC_CALL_DTYPE.names or ()},
    texts=("name",),
    generations=(Generation(V6_0_RC1, _FUNC_CALL_DTYPE, {2: "name"}, frozenset({2})),),
)

_MODULE_CALL_DTYPE = packed_dtype([("idx", "<u8"), ("thread_id", "<u8"), ("process_id", "<u8")], 24)  # <3Q
PYTHON_MODULE_CALL = TlvLayout(
    family="torch_python_module_call",
    numbers={name: str(_MODULE_CALL_DTYPE[name]) for name in _MODULE_CALL_DTYPE.names or ()},
    texts=("module_uid", "module_name"),
    generations=(
        Generation(V6_0_RC1, _MODULE_CALL_DTYPE, {2: "module_uid", 3: "module_name"}, frozenset({2, 3})),
    ),
)

# --------------------------------------------------------------------------- fixed-size files


@dataclass(frozen=True, slots=True)
class FixedLayout:
    """A file of fixed-size records (no TLV framing)."""

    family: str
    dtype: np.dtype[Any]

    def decode(self, buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
        records, stop = as_records(buf, self.dtype)
        consumed = settle_tail(
            ctx,
            family=self.family,
            stop=stop,
            size=len(buf),
            record_index=ctx.record_index + len(records),
            expected=f"a {self.dtype.itemsize}-byte record",
        )
        truncated = int(consumed != stop)
        out = batch({name: records[name] for name in self.dtype.names or ()})
        return Decoded(out, consumed, truncated, TRUNCATED if truncated else "")

    def encode(self, columns: Mapping[str, Any]) -> bytes:
        count = row_count(columns)
        records = np.zeros(count, self.dtype)
        for name in self.dtype.names or ():
            records[name] = column(columns, name, count, self.dtype[name])
        return records.tobytes()


PYTHON_TRACER_FUNC = FixedLayout(
    "torch_python_tracer_func",
    packed_dtype(  # <4QB
        [("ts", "<u8"), ("thread_id", "<u8"), ("process_id", "<u8"), ("key_hash", "<u8"), ("tag", "u1")], 33
    ),
)
GC_RECORD = FixedLayout(
    "torch_gc_record",
    packed_dtype([("process_id", "<u8"), ("start_ns", "<u8"), ("end_ns", "<u8")], 24),  # <3Q
)


def _codec(layout: TlvLayout | FixedLayout, tag: str, description: str) -> Codec:
    return Codec(
        family=layout.family,
        side="framework",
        patterns=named_patterns("^" + tag.replace(".", r"\.")),
        decode=layout.decode,
        encode=layout.encode,
        record_size=layout.dtype.itemsize if isinstance(layout, FixedLayout) else None,
        description=description,
    )


CODECS = (
    _codec(OP_RANGE, "torch.op_range", "torch operator ranges (start/end, threads, name, inputs, stack)"),
    _codec(OP_MARK, "torch.op_mark", "task-queue enqueue/dequeue marks"),
    _codec(MEMORY_USAGE, "torch.memory_usage", "caching-allocator malloc/free records"),
    _codec(PYTHON_TRACER_FUNC, "torch.python_tracer_func", "Python tracer call/return events"),
    _codec(PYTHON_TRACER_HASH, "torch.python_tracer_hash", "Python tracer hash key -> function/module name"),
    _codec(PARAM_TENSOR_INFO, "torch.param_tensor_info", "module and optimizer parameter tensors"),
    _codec(GC_RECORD, "torch.gc_record", "Python garbage-collection intervals"),
    _codec(PYTHON_FUNC_CALL, "torch.python_func_call", "Python function calls (v2.1.0-6.0.rc1)"),
    _codec(PYTHON_MODULE_CALL, "torch.python_module_call", "Python module calls (v2.1.0-6.0.rc1)"),
)
