"""The host join: device tasks of one device get their launch, op and tensor description -> ``tasks@d``.

Sources: msprof's C++ association (``analysis/csrc/domain/services/association/cann/tree_builder.cpp``,
``tree_analyzer.cpp``, ``parser/host/cann/event_grouper.cpp``, ``tensor_desc_formatter.cpp``) and the
Python one it mirrors (``analysis/mscalculate/cann/cann_analysis_gear.py`` ``TaskGear``); spec
msprof_outputs.md §2.1, §3.4, §3.7; cann_raw_formats.md §2.7-§2.10.

**The host tree** (per thread): acl, model, node and communication APIs (the ``api`` stream) nest by
time. A record attaches to the innermost API of its level on its thread with ``start < time <= end``
(msprof attaches node-level records -- node_basic_info, tensor_info -- to node APIs that way, and a
task_track to the deepest API containing it). A record in no API is dropped and counted, as msprof
drops it. Choice: all node records go to the innermost node API; msprof gives only node_basic_info
to the inner one of two nested node APIs (HCCL AI CPU launches) and the rest to the outer one, where
the inner launch does not look for them.

**A launch** (task_track row of this device) is described from its tree path:

* inside a communication API: an HCCL task. ``op_name`` = that API's item id, ``task_type`` = ``HCCL``
  (``HCCL_AI_CPU`` for a ``KERNEL_AICPU`` task); C++ rewrites both the same way
  (``UpdateComputeDescForHcclSituation``). Its op type and block dims come from the node_basic_info of
  its node API when there is one.
* else a kernel (runtime type ``KERNEL*``, ``STARS_COMMON`` or ``FFTS_PLUS``) inside a node API that is
  not ``step_info`` and whose item does not start with ``Lccl``: a compute task. Its op is the
  node_basic_info of that API (FFTS_PLUS placeholder records ignored; of several, the last): op name
  and type through hash_dic, GE task type (``GeTaskType``; ``HCCL`` run on ``KERNEL_AICPU`` becomes
  ``AI_CPU``, the "helper" case), ``op_state`` ``static`` for a record from an ``unaging`` file and
  ``dynamic`` for ``aging`` (C++ overwrites the record's field so, cann_raw_formats.md §2.8),
  ``block_dim``, ``mix_block_dim`` = block dim x mix ratio, ``hf32_eligible`` YES when ``op_flag`` is
  set. Without node_basic_info (prof level 0) the op name is the node API's item, the op type ``N/A``,
  the block dims 0 and the rest null, as msprof keeps such an op (the real Level0 kernel_details.csv
  in shared/realdata lists every kernel so, Type and Accelerator Core ``N/A``, Block Dim ``0``, and the
  same run's db has them in COMPUTE_TASK_INFO with opType/taskType ``N/A``, blockDim 0).
* else a kernel outside any node API: op name and type = the kernel name (task_track
  ``kernelName``), task type from the runtime type (KERNEL_AICORE -> AI_CORE, ...) as msprof's
  Python ``add_kernel_task_only_task_track`` does.
* anything else (memcpy, event record, ...): op name = the kernel name when the launch has one, else
  null; no op type or task type.

Every launch also keeps its own ``kernel_name``: task_track ``kernelName`` through hash_dic, null
when 0 or not in hash_dic (msprof's Python ``TaskTrackParser`` stores ``N/A`` then); task_time
prints it (``TaskOpViewer._reformat_task_info``).

Tensors: tensor_info records of the node API with the op's name; records with equal (op name,
timestamp, thread) are one op's tensors split five at a time and are concatenated in order. Text as
msprof's C++ prints it: dims joined by ``,`` up to the first 0, tensors by ``;``, formats and data
types by their ``GeDataFormat`` / ``GeDataType`` names (``common_func/ms_constant/ge_enum_constant.py``)
with ``:<sub-format>`` when one is set; a list with no tensor is null (msprof prints N/A). msprof
also wraps shapes in quotes; that is the CSV sink's business. A scalar's shape is empty (the real
kernel_details.csv quotes an empty shape, and ``;`` alone for two scalars). Format 2 is ``ND`` as current
msprof names it (Python ``GeDataFormat``, C++ ``NumberMapping`` ``geFormatMap``); the CANN 8.0-era
exports in shared/realdata (msinsight-torchnpu-910b, text and db) print ``FORMAT_ND`` beside ``NCHW``
and ``NC1HWC0``, a naming of that generation that is not reproduced.

``model_id`` = the item id of the model API containing the launch, else NO_ID (msprof's other source,
the capture-stream table, is not implemented). ``connection_id`` / ``launch_ns`` = the id and start
of the node API containing the launch, else of the innermost acl API (Python ``add_host_task``; C++
uses the innermost enclosing API, which is the same in practice), else null; ``launch_level`` says
which (``node`` or ``acl``): msprof's timeline starts a flow at every node-level API, and at another
API only for the MEMCPY_ASYNC tasks it launched (``CannAssembler::GenerateConnectionTrace``).

**The temporal join**: task ids wrap, so a device task joins the latest launch with its (stream,
task, batch) strictly before its device start. A device task that joins nothing is still emitted,
with null host columns, and counted.

**Streaming**: a launch is located once the ``api`` stream is complete up to its time (``api_progress``
of :class:`~profstream.engine.operators.api.ApiEvents`) and described once the watermark passes the
end of its node API (all its node records are in). A device task is final when every launch before
its start is described. State: APIs that still end after the oldest undescribed launch, node records
of those APIs (or not yet placed), undescribed launches, described launches (per (stream, task) only
the newest older than the join point, so at most one per task id), and device tasks waiting for
their launches, in start order (they arrive so; a batch that does not is sorted in), so the tasks
that can join are a prefix of them. Unaging node info can be given up front (``node_info``,
``tensor_info``): the feeds deliver unaging slices before aging ones, so streaming both would break
time order; such tables are held until their APIs pass. Not used: ``context_id_info`` (the device
side already gives the context ids; every context of a task gets the launch's op).

**Memcpy sizes** (``memcpy_info``, streamed): the runtime reports one record per copy API, on the
API's thread at the time stamp of the task_track of the MEMCPY_ASYNC task(s) it launched. A
MEMCPY_ASYNC launch takes the record of its exact (thread, time), the last one read when several
share it (msprof's C++ ``MemcpyInfoDumper::GenerateData`` in
``analysis/csrc/domain/services/persistence/host/memcpy_info_dumper.cpp`` keys them so in a map). A
copy larger than the record's ``max_size`` runs as several tasks of one key: in (batch, task id)
order each takes ``max_size`` bytes of what is left, the last one the rest, any further one 0 bytes
(``GenerateMemcpyRecordByTimestamp``). ``memcpy_operation`` names the direction
(:data:`~profstream.codecs.compact.MEMCPY_OPERATIONS`), ``other`` for a value above 7 or a task
left 0 bytes. A launch with no record gets nulls; the timeline prints those as msprof does
(:mod:`~profstream.engine.layouts.timeline`). Choice: a record of the old layout has no
``max_size`` (0, :mod:`~profstream.codecs.compact`); its first task takes the whole size, as the
old runtime reported one task per copy (msprof's C++ reads the new layout only).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.codecs.additional import MAX_TENSORS, SHAPE_DIMS, TENSOR_INPUT, TENSOR_OUTPUT
from profstream.codecs.compact import GE_TASK_TYPES, MAX_MEMCPY_DIRECTION, MEMCPY_OPERATIONS
from profstream.engine import schema
from profstream.engine.operators import pmu
from profstream.engine.operators.api import (
    ACL_LEVEL,
    COMMUNICATION_LEVEL,
    I64,
    LEVEL_NUMBERS,
    MODEL_LEVEL,
    NODE_LEVEL,
    RUNTIME_LEVEL,
    Array,
    Dictionaries,
    Intervals,
    append,
    column,
    dense_ids,
    empty,
    encode,
    enum_names,
    first_rows,
    frozen,
    gather,
    group_ranks,
    last_index,
    latest_before,
    log_unmatched,
    progress_time,
    thawed,
)
from profstream.engine.operators.settled import SettledLaunches
from profstream.engine.runtime import DONE, START, Emit, Operator, at, pack_state, unpack_state

#: GeDataType ([MSP] analysis/common_func/ms_constant/ge_enum_constant.py)
GE_DATA_TYPES = {
    0: "FLOAT", 1: "FLOAT16", 2: "INT8", 3: "INT32", 4: "UINT8", 6: "INT16", 7: "UINT16", 8: "UINT32",
    9: "INT64", 10: "UINT64", 11: "DOUBLE", 12: "BOOL", 13: "STRING", 14: "DUAL_SUB_INT8",
    15: "DUAL_SUB_UINT8", 16: "COMPLEX64", 17: "COMPLEX128", 18: "QINT8", 19: "QINT16", 20: "QINT32",
    21: "QUINT8", 22: "QUINT16", 23: "RESOURCE", 24: "STRING_REF", 25: "DUAL", 26: "DT_VARIANT",
    27: "DT_BF16", 28: "DT_UNDEFINED", 29: "DT_INT4", 30: "DT_UINT1", 31: "DT_INT2", 32: "DT_UINT2",
    33: "DT_COMPLEX32", 34: "DT_HIFLOAT8", 35: "DT_FLOAT8_E5M2", 36: "DT_FLOAT8_E4M3FN",
    37: "DT_FLOAT8_E8M0", 38: "DT_FLOAT6_E3M2", 39: "DT_FLOAT6_E2M3", 40: "DT_FLOAT4_E2M1",
    41: "DT_FLOAT4_E1M2", 42: "DT_HIFLOAT4", 43: "DT_MAX", 229: "NUMBER_TYPE_BEGIN_", 230: "BOOL_",
    231: "INT_", 232: "INT8_", 233: "INT16_", 234: "INT32_", 235: "INT64_", 236: "UINT_", 237: "UINT8_",
    238: "UINT16_", 239: "UINT32_", 240: "UINT64_", 241: "FLOAT_", 242: "FLOAT16_", 243: "FLOAT32_",
    244: "FLOAT64_", 245: "COMPLEX_", 246: "NUMBER_TYPE_END_", 0xFFFFFFFF: "UNDEFINED",
}  # fmt: skip
#: GeDataFormat (same file); the record keeps 8 bits of it, so 0xFFFFFFFF arrives as 255 / 0xFFFF
GE_FORMATS = {
    0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 5: "NC1C0HWPAD", 6: "NHWC1C0",
    7: "FSR_NCHW", 8: "FRACTAL_DECONV", 9: "C1HWNC0", 10: "FRACTAL_DECONV_TRANSPOSE",
    11: "FRACTAL_DECONV_SP_STRIDE_TRANS", 12: "NC1HWC0_C04", 13: "FRACTAL_Z_C04", 14: "CHWN",
    15: "FRACTAL_DECONV_SP_STRIDE8_TRANS", 16: "HWCN", 17: "NC1KHKWHWC0", 18: "BN_WEIGHT",
    19: "FILTER_HWCK", 20: "HASHTABLE_LOOKUP_LOOKUPS", 21: "HASHTABLE_LOOKUP_KEYS",
    22: "HASHTABLE_LOOKUP_VALUE", 23: "HASHTABLE_LOOKUP_OUTPUT", 24: "HASHTABLE_LOOKUP_HITS",
    25: "C1HWNCoC0", 26: "MD", 27: "NDHWC", 28: "FRACTAL_ZZ", 29: "FRACTAL_NZ", 30: "NCDHW",
    31: "DHWCN", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 34: "CN", 35: "NC", 36: "DHWNC",
    37: "FRACTAL_Z_3D_TRANSPOSE", 38: "FRACTAL_ZN_LSTM", 39: "FRACTAL_Z_G", 40: "RESERVED", 41: "ALL",
    42: "NULL", 43: "ND_RNN_BIAS", 44: "FRACTAL_ZN_RNN", 45: "NYUV", 46: "NYUV_A", 47: "NCL",
    48: "FRACTAL_Z_WINO", 49: "C1HWC0", 50: "FRACTAL_NZ_C0_16", 51: "FRACTAL_NZ_C0_32",
    52: "FRACTAL_NZ_C0_2", 53: "FRACTAL_NZ_C0_4", 54: "FRACTAL_NZ_C0_8", 55: "END", 200: "UNKNOWN_",
    201: "DEFAULT_", 202: "NC1KHKWHWC0_", 203: "ND_", 204: "NCHW_", 205: "NHWC_", 206: "HWCN_",
    207: "NC1HWC0_", 208: "FRAC_Z_", 209: "C1HWNCOC0_", 210: "FRAC_NZ_", 211: "NC1HWC0_C04_",
    212: "FRACTAL_Z_C04_", 213: "NDHWC_", 214: "FRACTAL_ZN_LSTM_", 215: "FRACTAL_ZN_RNN_",
    216: "ND_RNN_BIAS_", 217: "NDC1HWC0_", 218: "NCDHW_", 219: "FRACTAL_Z_3D_", 220: "DHWNC_",
    221: "DHWCN_", 255: "MAX",
}  # fmt: skip
UNDEFINED_FORMAT = (0xFF, 0xFFFF)
#: the op type of a compute task without node_basic_info (prof level 0; module docstring)
NA = "N/A"
#: runtime kernel types and the GE task type msprof's Python gives a kernel without node info
RUNTIME_TO_GE = {
    "KERNEL_AICORE": "AI_CORE",
    "KERNEL_AIVEC": "AI_VECTOR_CORE",
    "KERNEL_MIX_AIC": "MIX_AIC",
    "KERNEL_MIX_AIV": "MIX_AIV",
    "KERNEL_AICPU": "AI_CPU",
}
GE_FFTS_PLUS, GE_HCCL = 6, 9
TENSOR_COLUMNS = (
    "input_shapes",
    "input_data_types",
    "input_formats",
    "output_shapes",
    "output_data_types",
    "output_formats",
)
OPTIONAL_INPUTS = ("api", "node_basic_info", "tensor_info", "memcpy_info")
#: the runtime task type of a copy, whose launch takes a memcpy_info record
MEMCPY_ASYNC = "MEMCPY_ASYNC"
#: the operation of a copy task whose direction is not known (C++ ``OTHER_DIRECTION``)
OTHER_OPERATION = "other"
#: the levels of the host tree, as small codes in the API state
TREE_LEVELS = (NODE_LEVEL, COMMUNICATION_LEVEL, MODEL_LEVEL, ACL_LEVEL)

I64T, U64T, STR = pa.int64(), pa.uint64(), pa.string()
_LAUNCHES = pa.schema(
    [
        ("thread_id", I64T),
        ("time_ns", I64T),
        ("stream_id", I64T),
        ("task_id", I64T),
        ("batch_id", I64T),
        ("task_type", U64T),
        ("kernel_name_hash", U64T),
    ]
)
API_STATE = pa.schema(
    [
        ("level", I64T),
        ("thread_id", I64T),
        ("start_ns", I64T),
        ("end_ns", I64T),
        ("item_id", U64T),
        ("connection_id", I64T),
        ("struct_type", STR),
    ]
)
_BASIC = pa.schema(
    [
        ("thread_id", I64T),
        ("time_ns", I64T),
        ("seq", I64T),
        ("op_name_hash", U64T),
        ("task_type", I64T),
        ("op_type_hash", U64T),
        ("block_dim", I64T),
        ("mix_block_dim", I64T),
        ("op_flag", I64T),
        ("aging", pa.bool_()),
    ]
)
#: memcpy_info records not yet past (module docstring), in reading order
_MEMCPY = pa.schema(
    [
        ("thread_id", I64T),
        ("time_ns", I64T),
        ("data_size", I64T),
        ("max_size", I64T),
        ("direction", I64T),
    ]
)
#: one row per tensor_info record with a tensor, the texts of its tensors already joined
_TENSORS = pa.schema(
    [
        ("thread_id", I64T),
        ("time_ns", I64T),
        ("seq", I64T),
        ("op_name_hash", U64T),
        ("tensors", I64T),
        *[(name, STR) for name in TENSOR_COLUMNS],
    ]
)
HOST_COLUMNS = (
    "host_task_type",
    "op_name",
    "kernel_name",
    "op_type",
    "task_type",
    "op_state",
    "block_dim",
    "mix_block_dim",
    "hf32_eligible",
    *TENSOR_COLUMNS,
    "model_id",
    "connection_id",
    "launch_ns",
    "launch_thread_id",
    "launch_level",
    "memcpy_size",
    "memcpy_operation",
)
_DESCRIBED = pa.schema(
    [
        ("key", I64T),
        ("stream_id", I64T),
        ("task_id", I64T),
        ("time_ns", I64T),
        *[(name, STR) for name in HOST_COLUMNS[:6]],
        ("block_dim", I64T),
        ("mix_block_dim", I64T),
        *[(name, STR) for name in ("hf32_eligible", *TENSOR_COLUMNS)],
        ("model_id", I64T),
        ("connection_id", I64T),
        ("launch_ns", I64T),
        ("launch_thread_id", I64T),
        ("launch_level", STR),
        ("memcpy_size", I64T),
        ("memcpy_operation", STR),
    ]
)


def task_key(stream: Array, task: Array, batch: Array) -> I64:
    """(stream, task, batch) packed into one int64 (task ids up to 32 bits, batch 16, stream 15)."""
    stream = np.asarray(stream, np.int64)
    batch = np.asarray(batch, np.int64) & 0xFFFF
    task = np.asarray(task, np.int64) & 0xFFFFFFFF
    return np.asarray((stream << 48) | (batch << 32) | task, np.int64)


def _optional(batch: pa.RecordBatch, name: str, dtype: npt.DTypeLike, default: object) -> Array:
    if name in batch.schema.names:
        return column(batch, name, dtype)
    return np.full(batch.num_rows, default, dtype)


def _matrix(batch: pa.RecordBatch, name: str, width: int) -> Array:
    """A (nested) FixedSizeList column as an ``(n, ...)`` numpy array."""
    values = batch.column(name)
    while pa.types.is_fixed_size_list(values.type) or pa.types.is_list(values.type):
        values = values.flatten()
    return np.asarray(values.to_numpy(zero_copy_only=False)).reshape(batch.num_rows, width, -1)


def _join_lists(texts: pa.Array, groups: I64, count: int, separator: str) -> pa.Array:
    """``texts`` (sorted by group) joined per group 0..count-1; null for a group with none."""
    sizes = np.bincount(groups, minlength=count)
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int32)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), texts), separator)
    return pc.if_else(pa.array(sizes > 0), joined, pa.scalar(None, STR))


def tensor_records(batch: pa.RecordBatch, first_seq: int) -> pa.Table:
    """tensor_info records with an input or output tensor (of the first ``tensor_num`` slots), one row
    each with the six texts of its tensors in slot order (msprof's text; null for a side with none).

    A training step launches the same ops on the same shapes again and again (a simulated batch of
    16,500 tensors holds 41 distinct descriptions), so each distinct (dims, format, sub-format, data
    type) is formatted once, and each distinct list of them on a record's side joined once.
    """
    n = batch.num_rows
    used = np.arange(MAX_TENSORS) < column(batch, "tensor_num")[:, None]
    kind = _matrix(batch, "tensor_type", MAX_TENSORS).reshape(n, MAX_TENSORS)
    used &= (kind == TENSOR_INPUT) | (kind == TENSOR_OUTPUT)
    record, slot = np.nonzero(used)
    dims = _matrix(batch, "shape", MAX_TENSORS).reshape(n, MAX_TENSORS, SHAPE_DIMS)[record, slot]
    fmt, sub, dtype = (
        _matrix(batch, name, MAX_TENSORS).reshape(n, MAX_TENSORS)[record, slot].astype(np.int64)
        for name in ("format", "sub_format", "data_type")
    )
    which = dense_ids(*dims.T, fmt, sub, dtype)  # one id per distinct description
    first = first_rows(which)  # a tensor of each description
    texts = tensor_descriptions(dims[first], fmt[first], sub[first], dtype[first])
    # each (record, side) as the description in each of its slots, -1 where a slot is not its
    sides = np.full((n, 2, MAX_TENSORS), -1, np.int64)
    sides[record, (kind[record, slot] == TENSOR_OUTPUT).astype(np.int64), slot] = which
    sides = sides.reshape(2 * n, MAX_TENSORS)
    side = dense_ids(*sides.T)  # one id per distinct list of descriptions
    one = first_rows(side)  # a (record, side) of each distinct list
    count = len(one)
    owner, _ = np.nonzero(sides[one] >= 0)
    members = pa.array(sides[one][sides[one] >= 0])
    kept = np.flatnonzero(used.any(axis=1))
    side = side.reshape(n, 2)[kept]
    columns = {
        "thread_id": pa.array(column(batch, "thread_id")[kept]),
        "time_ns": pa.array(column(batch, "time_ns")[kept]),
        "seq": pa.array(first_seq + kept * MAX_TENSORS),
        "op_name_hash": pa.array(column(batch, "op_name_hash", np.uint64)[kept]),
        "tensors": pa.array(used.sum(axis=1)[kept]),
    }
    for s, prefix in enumerate(("input", "output")):
        for field, name in (("shape", "shapes"), ("data_type", "data_types"), ("format", "formats")):
            joined = _join_lists(texts[field].take(members), owner, count, ";")
            columns[f"{prefix}_{name}"] = joined.take(pa.array(side[:, s]))
    return pa.table(columns).cast(_TENSORS)


def tensor_descriptions(dims: Array, fmt: I64, sub: I64, dtype: Array) -> dict[str, pa.Array]:
    """msprof's shape, format and data type texts of tensors (see the module docstring)."""
    kept = np.cumprod(dims != 0, axis=1).astype(np.bool_)  # up to the first 0
    offsets = np.r_[0, np.cumsum(kept.sum(axis=1))].astype(np.int32)
    dim_text = pa.array(dims[kept].astype(np.int64)).cast(STR)
    shape = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), dim_text), ",")
    undefined = (fmt == UNDEFINED_FORMAT[0]) & (sub == UNDEFINED_FORMAT[1])
    names = enum_names(np.where(undefined, 0xFFFFFFFF, fmt), {**GE_FORMATS, 0xFFFFFFFF: "UNDEFINED"})
    with_sub = pc.binary_join_element_wise(names, pa.array(sub).cast(STR), ":")
    formats = pc.if_else(pa.array((sub > 0) & ~undefined), with_sub, names)
    return {"shape": shape, "format": formats, "data_type": enum_names(dtype, GE_DATA_TYPES)}


def launched_on(batch: pa.RecordBatch, device_id: int) -> npt.NDArray[np.bool_]:
    """Which task_track rows launch on NPU ``device_id`` (device type 0, cann_raw_formats.md §2.8)."""
    mine = column(batch, "device_id") == device_id
    return np.asarray(mine & (_optional(batch, "dev_type", np.int64, 0) == 0), np.bool_)


def api_rows(batch: pa.RecordBatch, levels: Collection[int]) -> pa.Table:
    """Rows of an ``api`` batch at ``levels``, in the operators' API state layout."""
    level_names = pa.array(list(LEVEL_NUMBERS), STR)
    numbers = np.array(list(LEVEL_NUMBERS.values()), np.int64)
    position = pc.index_in(batch.column("level").cast(STR), value_set=level_names)
    level = np.where(
        position.is_valid().to_numpy(zero_copy_only=False),
        numbers[np.asarray(position.fill_null(0).to_numpy(zero_copy_only=False))],
        -1,
    )
    keep = np.isin(level, list(levels))
    rows = batch.filter(pa.array(keep))
    return pa.table(
        {
            "level": pa.array(level[keep]),
            "thread_id": rows.column("thread_id"),
            "start_ns": rows.column("start_ns"),
            "end_ns": rows.column("end_ns"),
            "item_id": pa.array(column(rows, "item_id").view(np.uint64)),
            "connection_id": rows.column("connection_id"),
            "struct_type": rows.column("struct_type").cast(STR),
        }
    ).cast(API_STATE)


class ApiTree:
    """API rows (``api`` batches at ``levels``) with an interval index per level, rebuilt on change."""

    def __init__(self, levels: Collection[int], rows: pa.Table | None = None) -> None:
        self.levels = tuple(levels)
        self.rows = empty(API_STATE) if rows is None else rows
        self._index: dict[int, tuple[I64, Intervals]] = {}
        self._columns: dict[tuple[str, npt.DTypeLike], Array] = {}
        self._placed: dict[int, tuple[pa.Table, I64]] = {}

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows = append(self.rows, api_rows(batch, self.levels))
        self._changed()

    def keep_ending_after(self, cutoff: int) -> None:
        """Drop the APIs that end before ``cutoff``."""
        ends = self.col("end_ns")
        if (ends < cutoff).any():
            self.rows = self.rows.filter(pa.array(ends >= cutoff))
            self._changed()

    def _changed(self) -> None:
        self._index.clear()
        self._columns.clear()
        self._placed.clear()

    def col(self, name: str, dtype: npt.DTypeLike = np.int64) -> Array:
        """A column as numpy, read once per change of the rows (every launch and record asks)."""
        key = (name, dtype)
        if key not in self._columns:
            self._columns[key] = column(self.rows, name, dtype)
        return self._columns[key]

    def node_of(self, records: pa.Table) -> I64:
        """:meth:`inner` node API of each record (``thread_id``, ``time_ns``). The answers for the
        last two tables asked are kept until the APIs change: node records are placed to describe
        launches and again to evict them."""
        if id(records) not in self._placed:
            if len(self._placed) == 2:
                del self._placed[next(iter(self._placed))]
            found = self.inner(NODE_LEVEL, column(records, "thread_id"), column(records, "time_ns"))
            self._placed[id(records)] = (records, found)  # the table held, so its id stays its own
        return self._placed[id(records)][1]

    def inner(self, level: int, threads: Array, times: Array) -> I64:
        """Row of the innermost API of ``level`` containing each (thread, time), or -1."""
        if level not in self._index:
            at_level = np.flatnonzero(self.col("level") == level)
            self._index[level] = (
                at_level,
                Intervals(*(self.col(name)[at_level] for name in ("thread_id", "start_ns", "end_ns"))),
            )
        rows, intervals = self._index[level]
        if not len(rows) or not len(times):
            return np.full(len(times), -1, np.int64)
        found = intervals.innermost(threads, times)
        return np.where(found >= 0, gather(rows, found), -1)


class HostJoin(Operator):
    """Device tasks of device ``device_id`` joined to their host launch -> ``tasks@<device_id>``.

    Inputs: ``device_tasks@d``, ``task_track`` and those of ``streamed`` (default ``api``,
    ``node_basic_info``, ``tensor_info``). ``node_info`` / ``tensor_info`` tables (e.g. the unaging
    records, from ``FeedSet.table``) are placed like streamed records. ``metrics`` is the device's PMU
    layout: its columns are those of ``device_tasks`` and ``tasks``, and its ``*_time`` columns, which need
    the block dims only the host side knows, are filled on the joined rows (:func:`pmu.finish_metrics`).
    ``metric_columns`` alone gives the columns without filling any time.
    """

    def __init__(
        self,
        device_id: int,
        dictionaries: Dictionaries,
        *,
        metrics: pmu.MetricLayout | None = None,
        metric_columns: Sequence[str] = (),
        streamed: Collection[str] = OPTIONAL_INPUTS,
        node_info: pa.Table | None = None,
        tensor_info: pa.Table | None = None,
    ) -> None:
        unknown = set(streamed) - set(OPTIONAL_INPUTS)
        if unknown:
            msg = f"HostJoin streams only {OPTIONAL_INPUTS}, got {sorted(unknown)}"
            raise ValueError(msg)
        self.device_id = device_id
        self.names = dictionaries
        self.metrics = metrics
        self.metric_columns = tuple(metric_columns) or (metrics.columns if metrics else ())
        self._device_input = at("device_tasks", device_id)
        optional = [s for s in OPTIONAL_INPUTS if s in streamed]
        self.inputs = (
            self._device_input,
            "task_track",
            *optional,
            *(["api_progress"] if "api" in streamed else []),
        )
        self.outputs = (at("tasks", device_id),)
        self._device_schema = pa.schema(
            [
                pa.field(f.name, STR) if pa.types.is_dictionary(f.type) else f
                for f in schema.device_tasks_schema(self.metric_columns)
            ]
        )
        self._out_schema = schema.tasks_schema(self.metric_columns)
        self._device = empty(self._device_schema)
        self._launches = empty(_LAUNCHES)
        self._described = empty(_DESCRIBED)
        self._settled = SettledLaunches(_DESCRIBED)
        self._apis = ApiTree(TREE_LEVELS)
        self._basic = empty(_BASIC)
        self._tensors = empty(_TENSORS)
        self._memcpy = empty(_MEMCPY)
        self._api_done = np.iinfo(np.int64).min if "api" in streamed else DONE
        self._seq = 0
        self._evicted_at = (START, START)
        self.counts = {"unjoined_tasks": 0, "node_info_outside_apis": 0, "tensor_info_outside_apis": 0}
        for table, stream in ((node_info, "node_basic_info"), (tensor_info, "tensor_info")):
            for batch in [] if table is None else table.to_batches():
                self.push(stream, batch)

    # -- input ----------------------------------------------------------------------------------

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream == self._device_input:
            self._add_device(batch)
        elif stream == "task_track":
            self._add_launches(batch)
        elif stream == "api":
            self._apis.add(batch)
        elif stream == "api_progress":
            self._api_done = max(self._api_done, progress_time(batch))
        elif stream == "node_basic_info":
            self._add_basic(batch)
        elif stream == "tensor_info":
            self._tensors = append(self._tensors, tensor_records(batch, self._seq))
            self._seq += batch.num_rows * 5
        elif stream == "memcpy_info":
            self._add_memcpy(batch)
        else:
            msg = f"HostJoin has no input {stream!r}"
            raise ValueError(msg)

    def _add_device(self, batch: pa.RecordBatch) -> None:
        """Hold device tasks in start order (stable: equal starts keep their arrival order)."""
        held = self._device
        starts = column(batch, "start_ns")
        columns = {name: batch.column(name) for name in self._device_schema.names}
        self._device = append(held, pa.table(columns))
        latest = held.column("start_ns")[-1].as_py() if held.num_rows else np.iinfo(np.int64).min
        if len(starts) and (starts[0] < latest or (starts[1:] < starts[:-1]).any()):
            self._device = _in_start_order(self._device)

    def _add_launches(self, batch: pa.RecordBatch) -> None:
        rows = batch.filter(pa.array(launched_on(batch, self.device_id)))
        columns = {name: rows.column(name) for name in _LAUNCHES.names if name != "kernel_name_hash"}
        columns["kernel_name_hash"] = pa.array(_optional(rows, "kernel_name_hash", np.uint64, 0))
        self._launches = append(self._launches, pa.table(columns))

    def _add_memcpy(self, batch: pa.RecordBatch) -> None:
        top = np.iinfo(np.int64).max  # sizes are u64 in the record; none real comes near 2**63
        columns = {name: batch.column(name) for name in ("thread_id", "time_ns", "direction")}
        for name in ("data_size", "max_size"):
            columns[name] = pa.array(np.minimum(column(batch, name, np.uint64), top).astype(np.int64))
        self._memcpy = append(self._memcpy, pa.table(columns))

    def _add_basic(self, batch: pa.RecordBatch) -> None:
        columns = {name: batch.column(name) for name in _BASIC.names if name not in ("seq", "aging")}
        columns["seq"] = pa.array(self._seq + np.arange(batch.num_rows, dtype=np.int64))
        columns["aging"] = pa.array(_optional(batch, "aging", np.bool_, False))
        self._seq += batch.num_rows
        self._basic = append(self._basic, pa.table(columns))

    # -- progress -------------------------------------------------------------------------------

    def advance(self, watermark: int) -> list[Emit]:
        located = min(watermark, self._api_done)
        self._describe_ready(located, watermark)
        times = column(self._launches, "time_ns")
        until = min(watermark, int(times.min())) if len(times) else watermark
        out = self._join(self._whole_tasks(column(self._device, "start_ns") <= until))
        if (until, located) != self._evicted_at:
            self._evict(until, located)
        return out

    def output_watermark(self, watermark: int) -> int:
        """The earliest start of a device task still waiting for its launches (a launch inside a long
        API, such as a stream synchronisation, waits for that API to end): downstream operators must
        not pass it, or they would take its row for a late one."""
        starts = column(self._device, "start_ns")
        return min(watermark, int(starts.min())) if len(starts) else watermark

    def finish(self) -> list[Emit]:
        self._describe_ready(DONE, DONE)
        out = self._join(np.ones(self._device.num_rows, np.bool_))
        self._evict(DONE, DONE)
        log_unmatched("host_join", self.counts)
        return out

    def _describe_ready(self, located: int, watermark: int) -> None:
        """Describe the launches before ``located`` whose node API (if any) ended before ``watermark``."""
        times = column(self._launches, "time_ns")
        candidates = np.flatnonzero(times < located)
        if not len(candidates):
            return
        threads = column(self._launches, "thread_id")[candidates]
        node = self._apis.inner(NODE_LEVEL, threads, times[candidates])
        ends = self._apis.col("end_ns")
        ready = (node < 0) | (gather(ends, node) < watermark)
        rows = candidates[ready]
        if not len(rows):
            return
        described = self._describe(self._launches.take(pa.array(rows)), node[ready])
        self._described = append(self._described, described)
        keep = np.ones(self._launches.num_rows, np.bool_)
        keep[rows] = False
        self._launches = self._launches.filter(pa.array(keep))

    def _describe(self, launches: pa.Table, node: I64) -> pa.Table:
        """The host columns of ``launches`` (see the module docstring)."""
        threads, times = column(launches, "thread_id"), column(launches, "time_ns")
        apis = self._apis
        hccl = apis.inner(COMMUNICATION_LEVEL, threads, times)
        model = apis.inner(MODEL_LEVEL, threads, times)
        acl = apis.inner(ACL_LEVEL, threads, times)
        items = apis.col("item_id", np.uint64)
        starts, connections = apis.col("start_ns"), apis.col("connection_id")
        host_type = self.names.type_names(np.full(len(times), RUNTIME_LEVEL), column(launches, "task_type"))
        kernel_hash = column(launches, "kernel_name_hash", np.uint64)
        kernel = pc.if_else(pa.array(kernel_hash != 0), self.names.names(kernel_hash), pa.scalar(None, STR))
        node_item = self.names.names(pa.array(gather(items, node), mask=node < 0))
        hccl_item = self.names.names(pa.array(gather(items, hccl), mask=hccl < 0))
        node_struct = encode(apis.rows.column("struct_type").combine_chunks(), node)

        def flag(values: pa.Array) -> npt.NDArray[np.bool_]:
            return np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)

        is_kernel = flag(pc.starts_with(host_type, "KERNEL")) | flag(pc.equal(host_type, "STARS_COMMON"))
        is_kernel |= flag(pc.equal(host_type, "FFTS_PLUS")) & (hccl < 0)
        excluded = flag(pc.starts_with(node_item, "Lccl")) | flag(pc.equal(node_struct, "step_info"))
        in_hccl = hccl >= 0
        compute = is_kernel & (node >= 0) & ~excluded & ~in_hccl
        kernel_only = is_kernel & (node < 0) & ~in_hccl
        record = self._node_records(node, compute | in_hccl)
        has = record >= 0
        basic = self._basic
        op_hash = gather(column(basic, "op_name_hash", np.uint64), record)
        op_name_known = self.names.names(pa.array(op_hash, mask=~has))
        op_type_known = self.names.names(
            pa.array(gather(column(basic, "op_type_hash", np.uint64), record), mask=~has)
        )
        ge = gather(column(basic, "task_type"), record)
        aicpu = flag(pc.equal(host_type, "KERNEL_AICPU"))
        ge_name = enum_names(np.where((ge == GE_HCCL) & aicpu, 1, ge), GE_TASK_TYPES)
        runtime_ge = pc.coalesce(
            encode(list(RUNTIME_TO_GE.values()), _lookup(host_type, list(RUNTIME_TO_GE))), host_type
        )

        def pick(*choices: tuple[npt.NDArray[np.bool_], pa.Array | str | None]) -> pa.Array:
            out: pa.Array = pa.nulls(len(times), STR)
            for mask, value in reversed(choices):
                scalar = value if isinstance(value, pa.Array) else pa.scalar(value, STR)
                out = pc.if_else(pa.array(mask), scalar, out)
            return out

        described = has & (compute | in_hccl)
        op_name = pick(
            (in_hccl, hccl_item),
            (compute & has, op_name_known),
            (compute, node_item),
            (np.ones(len(times), np.bool_), kernel),
        )
        bare = compute & ~has  # prof level 0: no node_basic_info (module docstring)
        op_type = pick((described, op_type_known), (bare, NA), (kernel_only, kernel))
        unset = ~(described | bare)
        task_type = pick(
            (in_hccl & aicpu, "HCCL_AI_CPU"),
            (in_hccl, "HCCL"),
            (compute & has, ge_name),
            (kernel_only, runtime_ge),
        )
        aging = gather(column(basic, "aging", np.bool_), record)
        op_flag = gather(column(basic, "op_flag"), record)
        tensors = self._tensor_texts(
            np.where(compute | in_hccl, node, -1), np.where(has, op_hash, gather(items, node))
        )
        launch_api = np.where(node >= 0, node, acl)
        model_id = np.where(model >= 0, gather(items, model).view(np.int64), schema.NO_ID)
        missing = launch_api < 0
        columns: dict[str, pa.Array] = {
            "key": pa.array(
                task_key(
                    column(launches, "stream_id"), column(launches, "task_id"), column(launches, "batch_id")
                )
            ),
            "stream_id": launches.column("stream_id"),
            "task_id": launches.column("task_id"),
            "time_ns": launches.column("time_ns"),
            "host_task_type": host_type,
            "op_name": op_name,
            "kernel_name": self.names.found_names(kernel_hash),
            "op_type": op_type,
            "task_type": task_type,
            "op_state": pick((described & aging, "dynamic"), (described, "static")),
            "block_dim": pa.array(np.where(bare, 0, gather(column(basic, "block_dim"), record)), mask=unset),
            "mix_block_dim": pa.array(
                np.where(bare, 0, gather(column(basic, "mix_block_dim"), record)), mask=unset
            ),
            "hf32_eligible": pick((described & (op_flag != 0), "YES"), (described, "NO")),
            "model_id": pa.array(model_id),
            "connection_id": pa.array(gather(connections, launch_api), mask=missing),
            "launch_ns": pa.array(gather(starts, launch_api), mask=missing),
            **tensors,
            "launch_thread_id": pa.array(threads),
            "launch_level": pick((node >= 0, "node"), (acl >= 0, "acl")),
            **self._memcpy_shares(launches, flag(pc.equal(host_type, MEMCPY_ASYNC))),
        }
        return pa.table(columns).select(_DESCRIBED.names).cast(_DESCRIBED)

    def _memcpy_shares(self, launches: pa.Table, copies: npt.NDArray[np.bool_]) -> dict[str, pa.Array]:
        """``memcpy_size`` and ``memcpy_operation`` of each launch: a copy task's share of the
        memcpy_info record of its (thread, time) (module docstring); null without one."""
        n, records = launches.num_rows, self._memcpy
        record = np.full(n, -1, np.int64)
        launch_key = np.full(n, -1, np.int64)
        at = np.flatnonzero(copies)  # only copies look for a record
        if len(at) and records.num_rows:
            keys = dense_ids(
                np.r_[column(records, "thread_id"), column(launches, "thread_id")[at]],
                np.r_[column(records, "time_ns"), column(launches, "time_ns")[at]],
            )
            record_key, launch_key[at] = keys[: records.num_rows], keys[records.num_rows :]
            last = last_index(record_key, int(keys.max(initial=-1)) + 1)  # the last record read of a key
            record[at] = gather(last, launch_key[at])
        found = np.flatnonzero(record >= 0)
        size = np.zeros(n, np.int64)
        direction = np.full(n, -1, np.int64)
        if len(found):
            # the k-th task of a key, in (batch, task id) order, copies after k max_size chunks
            rank = group_ranks(
                launch_key[found], column(launches, "batch_id")[found], column(launches, "task_id")[found]
            )
            chosen = record[found]
            total = column(records, "data_size")[chosen]
            chunk = column(records, "max_size")[chosen]
            whole = chunk <= 0  # an old-layout record: one task copies it all
            left = np.where(whole, np.where(rank == 0, total, 0), total - rank * chunk)
            size[found] = np.where(whole, left, np.clip(left, 0, chunk))
            kind = column(records, "direction")[chosen]
            direction[found] = np.where(
                (left > 0) & (kind <= MAX_MEMCPY_DIRECTION), kind, len(MEMCPY_OPERATIONS)
            )
        missing = record < 0
        return {
            "memcpy_size": pa.array(size, mask=missing),
            "memcpy_operation": encode([*MEMCPY_OPERATIONS, OTHER_OPERATION], direction),
        }

    def _node_records(self, node: I64, wanted: npt.NDArray[np.bool_]) -> I64:
        """The node_basic_info row describing each launch's node API (the last non-FFTS_PLUS one), or -1."""
        basic = self._basic
        record_api = self._apis.node_of(basic)
        usable = (record_api >= 0) & (column(basic, "task_type") != GE_FFTS_PLUS)
        order = np.lexsort((column(basic, "seq"), column(basic, "time_ns")))
        order = order[usable[order]]
        last = last_index(record_api[order], len(self._apis))
        best = np.where(last >= 0, gather(order, last), -1)
        return np.where(wanted & (node >= 0), gather(best, node), -1)

    def _tensor_texts(self, node: I64, op_hash: Array) -> dict[str, pa.Array]:
        """The six tensor texts of each launch: the last tensor group of its node API and op name.

        Texts are joined only for the groups some launch picks: most held groups wait for launches
        still to come, and joining their texts on every call cost more than the rest of the join.
        """
        rows = self._tensors
        n = len(node)
        nothing = {name: pa.nulls(n, STR) for name in TENSOR_COLUMNS}
        if not rows.num_rows:
            return nothing
        threads, times = column(rows, "thread_id"), column(rows, "time_ns")
        hashes = column(rows, "op_name_hash", np.uint64)
        group = dense_ids(hashes, times, threads)
        count = int(group.max()) + 1
        first = np.unique(group, return_index=True)[1]
        group_api = self._apis.node_of(rows)[first]
        # the last group (by time) of each (API, op name) serves launches of that API and op
        keys = dense_ids(np.r_[group_api, node], np.r_[hashes[first], np.asarray(op_hash, np.uint64)])
        group_key, launch_key = keys[:count], keys[count:]
        by_time = np.argsort(times[first], kind="stable")
        placed = by_time[group_api[by_time] >= 0]
        last = last_index(group_key[placed], int(keys.max()) + 1)
        chosen = np.where(last >= 0, gather(placed, last), -1)
        pick = np.where(node >= 0, chosen[launch_key], -1)
        used = np.unique(pick[pick >= 0])
        if not len(used):
            return nothing
        slot = np.full(count, -1, np.int64)
        slot[used] = np.arange(len(used), dtype=np.int64)
        wanted = np.flatnonzero(slot[group] >= 0)
        wanted_group = slot[group[wanted]]
        order = np.lexsort((column(rows, "seq")[wanted], wanted_group))
        records, groups = pa.array(wanted[order]), wanted_group[order]
        launch_slot = np.where(pick >= 0, slot[np.maximum(pick, 0)], -1)
        texts: dict[str, pa.Array] = {}
        for name in TENSOR_COLUMNS:
            values = rows.column(name).take(records).combine_chunks()
            if len(groups) > len(used):  # a group of several records: their texts in order
                present = values.is_valid().to_numpy(zero_copy_only=False)
                values = _join_lists(values.filter(pa.array(present)), groups[present], len(used), ";")
            texts[name] = encode(values, launch_slot)
        return texts

    def _whole_tasks(self, ready: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """``ready`` without the rows from the first task row on whose sub-task rows (a MIX or FFTS+
        task's contexts, with its stream, task and batch id) are not all ready: op_summary and the
        timeline leave such a task row out only when one batch holds it and a sub-task row
        (statistics.sub_task_parents), and the rows go out in start order."""
        device = self._device
        sub = column(device, "context_id") != schema.NO_ID
        late = sub & ~ready
        if not late.any():
            return ready
        keys = task_key(column(device, "stream_id"), column(device, "task_id"), column(device, "batch_id"))
        split = ready & ~sub & np.isin(keys, keys[late])
        if not split.any():
            return ready
        starts = column(device, "start_ns")
        return np.asarray(ready & (starts < starts[split].min()), np.bool_)

    def _join(self, ready: npt.NDArray[np.bool_]) -> list[Emit]:
        """Emit the ``ready`` device tasks (a prefix of the held ones, which are in start order) with the
        latest described launch of their key before them."""
        count = int(ready.sum())
        if not count:
            return []
        tasks, self._device = self._device.slice(0, count), self._device.slice(count)
        stream, task = column(tasks, "stream_id"), column(tasks, "task_id")
        keys = task_key(stream, task, column(tasks, "batch_id"))
        found = latest_before(
            column(self._described, "key"),
            column(self._described, "time_ns"),
            keys,
            column(tasks, "start_ns"),
        )
        host, joined = self._settled.join(self._described, found, stream, task, keys)
        self.counts["unjoined_tasks"] += int((~joined).sum())
        columns = {name: tasks.column(name) for name in self._device_schema.names}
        columns |= {name: host.column(name) for name in HOST_COLUMNS}
        joined_tasks = schema.conform(self._out_schema, columns)
        if self.metrics is not None:
            joined_tasks = pmu.finish_metrics(joined_tasks, self.metrics)
        return [(self.outputs[0], joined_tasks)]

    def _evict(self, joined_until: int, located: int) -> None:
        """Drop state no launch or device task can need any more (see the module docstring)."""
        self._evicted_at = (joined_until, located)
        old = column(self._described, "time_ns") < joined_until
        if old.any():  # usually all of them (launches are mostly described in time order)
            self._settled.add(self._described if old.all() else self._described.filter(pa.array(old)))
            self._described = self._described.filter(pa.array(~old))
        pending = column(self._launches, "time_ns")
        cutoff = min(located, int(pending.min())) if len(pending) else located
        self._basic = self._keep_records(self._basic, cutoff, located, "node_info_outside_apis")
        self._tensors = self._keep_records(self._tensors, cutoff, located, "tensor_info_outside_apis")
        if self._memcpy.num_rows:  # a record shares its launches' time: none before cutoff is wanted
            self._memcpy = self._memcpy.filter(pa.array(column(self._memcpy, "time_ns") >= cutoff))
        self._apis.keep_ending_after(cutoff)

    def _keep_records(self, rows: pa.Table, cutoff: int, located: int, counter: str) -> pa.Table:
        """Node records whose API may still hold an undescribed launch, or whose API is still unknown."""
        if not rows.num_rows:
            return rows
        times = column(rows, "time_ns")
        api = self._apis.node_of(rows)
        ends = self._apis.col("end_ns")
        placed = api >= 0
        orphan = ~placed & (times < located)
        sizes = column(rows, "tensors") if "tensors" in rows.schema.names else 1  # counted per tensor
        self.counts[counter] += int((orphan * sizes).sum())
        keep = (placed & (gather(ends, api) >= cutoff)) | (~placed & ~orphan)
        return rows.filter(pa.array(keep))

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return pack_state(
            {
                "device": frozen(self._device),
                "launches": frozen(self._launches),
                "described": frozen(self._described),
                "settled": self._settled.state(),
                "apis": frozen(self._apis.rows),
                "basic": frozen(self._basic),
                "tensors": frozen(self._tensors),
                "memcpy": frozen(self._memcpy),
                "api_done": self._api_done,
                "seq": self._seq,
                "evicted_at": list(self._evicted_at),
                "counts": dict(self.counts),
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._device = _in_start_order(thawed(doc["device"], self._device_schema))
        self._launches = thawed(doc["launches"], _LAUNCHES)
        self._described = thawed(doc["described"], _DESCRIBED)
        self._settled = SettledLaunches.restored(_DESCRIBED, doc["settled"])
        self._apis = ApiTree(TREE_LEVELS, thawed(doc["apis"], API_STATE))
        self._basic = thawed(doc["basic"], _BASIC)
        self._tensors = thawed(doc["tensors"], _TENSORS)
        self._memcpy = thawed(doc["memcpy"], _MEMCPY)
        self._api_done = int(doc["api_done"])
        self._seq = int(doc["seq"])
        self._evicted_at = (int(doc["evicted_at"][0]), int(doc["evicted_at"][1]))
        self.counts = {k: int(v) for k, v in doc["counts"].items()}


def _in_start_order(tasks: pa.Table) -> pa.Table:
    return tasks.take(pa.array(np.argsort(column(tasks, "start_ns"), kind="stable")))


def _lookup(values: pa.Array, names: Sequence[str]) -> I64:
    """Position of each value in ``names``, -1 when absent or null."""
    position = pc.index_in(values, value_set=pa.array(list(names), STR))
    return np.asarray(position.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
