"""Host additional records (``(aging|unaging).additional.<kind>.slice_N``), 256 bytes, one family per kind.

Layout: specs/cann_raw_formats.md §2.9. Every record is ``MsprofAdditionalInfo``: the 24-byte host
header (§2.7, :mod:`profstream.codecs._host`) and a 232-byte payload whose meaning the file name
gives. Family names are the file kinds in snake_case (``Multi_Thread`` -> ``multi_thread``).
Payloads ([MSP] ``analysis/csrc/infrastructure/utils/prof_common.h``; Python formats in
``analysis/msparser/data_struct_size_constant.py``), offsets from the record start:

- ``tensor_info`` (``MsprofTensorInfo``): 24 u64 ``op_name_hash``, 32 u32 ``tensor_num``, then 5
  tensors of 44 bytes at 36: u32 tensorType (0 input, 1 output), u32 format (bits 0-7 format,
  bits 8-23 sub-format; GeDataFormat), u32 dataType (GeDataType), u32 shape[8] (zero-padded).
  Columns: ``tensor_type``, ``format``, ``sub_format``, ``data_type`` as FixedSizeList<5> and
  ``shape`` as FixedSizeList<FixedSizeList<u32, 8>, 5>, built from reshaped numpy arrays: five
  slots and eight dims are what the record holds, and the engine slices the first ``tensor_num``
  slots. FixedSizeList rather than numbered columns because ops with more than five tensors span
  several records with equal (op_name_hash, timestamp, thread_id) that the ENGINE concatenates
  (C++ ``addition_info_parser.cpp`` ``TensorInfoParser``); list columns keep that a list
  operation. ``tensor_num`` counts this record's tensors, so ``tensor_num > 5`` is invalid.
- ``context_id_info`` (``MsprofContextIdInfo``): 24 u64 ``op_name_hash``, 32 u32 ctxIdNum, 36 u32
  ctxIds[55] -> list column ``ctx_ids`` of the first ctxIdNum ids; a ctxIdNum above 55 is cut to
  55 (counted in ``Decoded.replaced``), as msprof's C++ ``ParserAdditionalInfoAdapter`` copies at
  most the array (the same for fusionOpNum and threadNum below).
- ``graph_id_map`` (``MsprofGraphIdInfo``): 24 u64 ``model_name_hash``, 32 u32 ``graph_id``, 36
  u32 ``model_id``.
- ``fusion_op_info`` (``ProfFusionOpInfo``, pack 1, so the u64s sit unaligned): 24 u64
  ``op_name_hash``, 32 u32 fusionOpNum, 36/44/52/60/68 u64 ``input_mem_size``, ``output_mem_size``,
  ``weight_mem_size``, ``workspace_mem_size``, ``total_mem_size``, 76 u64 fusionOpId[8] (hashes of
  the fused op names) -> list column ``fusion_op_hashes`` of the first fusionOpNum. GE writes one
  record per 8 fused ops, each with its own count; a count above 8 is cut to 8.
- ``hccl_info`` (``MsprofHcclInfo``, pack 4): 24 u64 ``item_hash`` (itemId, a hash_dic id), 32
  ``ccl_tag_hash``, 40 ``group_name_hash``, 48 u32 ``local_rank``, ``remote_rank``, ``rank_size``,
  ``work_flow_mode``, ``plane_id``, ``ctx_id``, 72 u64 ``notify_id``, 80 u32 ``stage``, 84 u32
  ``role`` (:data:`HCCL_ROLES`), 88 f64 ``duration_estimated``, 96 u64 ``src_addr``, ``dst_addr``,
  ``data_size`` (bytes), 120 u32 ``op_type``, ``data_type``, ``link_type``, ``transport_type``,
  ``rdma_type`` (enums below).
- ``multi_thread`` (``MsprofMultiThread``): 24 u32 threadNum, 28 u32 threadId[25] -> list column
  ``thread_ids``; a threadNum above 25 is cut to 25.
- ``task_memory_info`` (``MsprofMemoryInfo``, operator memory): 24 u64 ``addr``, 32 i64 ``size``
  (> 0 allocation, < 0 release), 40 u64 ``node_id_hash`` (op name hash), 48 u64
  ``total_allocate_memory``, 56 u64 ``total_reserve_memory``, 64 u32 ``device_id``, 68 u32
  ``device_type``. msprof's C++ also discards records whose ``data_len`` is below the struct's 48
  bytes; ``data_len`` is a column, so that rule stays with the engine.
- ``static_op_mem`` (``MsprofStaticOpMem``): 24 i64 ``size``, 32 u64 ``op_name_hash``, 40 u64
  ``life_start``, 48 u64 ``life_end`` (4294967294 is output as 4294967295, as msprof rewrites it),
  56 u64 ``total_allocate_memory``, 64 u64 ``dyn_op_name_hash`` (0 = none), 72 u32 ``graph_id``.
- ``memory_application``: open point #4 of the spec (msprof's Python steps through the file in
  66-byte ``MEMORY_APPLICATION_FMT`` records; its C++ chunks it into 256-byte
  ``MsprofAdditionalInfo``). Choice: 256-byte records, because the collector writes every additional
  record as a whole ``MsprofAdditionalInfo`` (the 256-byte framing is the writer's, not a parser's
  choice), with the fields at the Python format's offsets: 24 u64 ``node_id_hash``, 32 u64
  ``ptr``, 40 u64 ``memory_size``, 48 u64 ``total_memory_size``, 56 u64 ``used_memory_size``, 64 u8
  ``device_type``, 65 u8 ``device_id`` (single chars in the Python format, numbers here). Neither
  msprof path yields rows from such a file: the Python one (``MemoryApplicationParser``,
  ``analysis/msparser/add_info/memory_application_parser.py``) trims ``total % 66`` leading bytes
  and its ``check_magic_num`` raises at the first 66-byte chunk without the 0x5A5A magic, which ends
  the parse; it is also skipped whenever the C++ host parsing is on
  (``ConfigDataParsers._load_can_cpp_parse_or_calculate_host_data``), and the C++ parser only
  chunks the file into 256-byte records, whose payload nothing decodes. The Python parser is not
  registered for chips 15/16 (``analysis/msconfig/data_parsers_config.py``).

- ``logic_stream_info`` (``MsprofLogicStreamInfo``, model level type 7): 24 u32
  ``logic_stream_id``, 28 u32 physicStreamNum, 32 u32 physicStreamId[56] -> list column
  ``physic_stream_ids`` of the first physicStreamNum (Python ``GeLogicStreamInfoBean``,
  ``analysis/msparser/ge/ge_logic_stream_info_bean.py``, reads them so). GE writes one record per
  56 physical streams of a logic stream when it loads a model, with ``data_len`` left 0
  (``GlobalProfilingWrapper::ReportLogicStreamInfo``); a count above 56 is cut to 56.

Other additional kinds (msproftx, capture_op_info, mc2_comm_info, ccu_*,
dpu_hccl_info, model_exeom) are not decoded by this module; hash_dic and type_info_dic are text
(:mod:`profstream.codecs.dictionaries`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs._base import Codec, named_patterns
from profstream.codecs._host import (
    Columns,
    Convert,
    HostRecord,
    Records,
    counted_list,
    host_dtype,
    host_file_pattern,
)

RECORD_SIZE = 256

TENSOR_INPUT, TENSOR_OUTPUT = 0, 1
MAX_TENSORS = 5
SHAPE_DIMS = 8
#: u32 words of one tensor: type, format, data type, shape[8].
TENSOR_WORDS = 3 + SHAPE_DIMS
MAX_CTX_IDS = 55
MAX_FUSION_OPS = 8
MAX_THREADS = 25
MAX_PHYSIC_STREAMS = 56
#: ``life_end`` value msprof rewrites, and what it becomes ([MSP] ``static_op_mem_bean.py``).
LIFE_END_RAW, LIFE_END_OUTPUT = 4294967294, 4294967295
HCCL_ROLES = {0: "dst", 1: "src"}
HCCL_OP_TYPES = {0: "sum", 1: "mul", 2: "max", 3: "min"}
HCCL_DATA_TYPES = {0: "INT8", 1: "INT16", 2: "INT32", 3: "FP16", 4: "FP32", 5: "INT64", 6: "UINT64"}
HCCL_LINK_TYPES = {0: "OnChip", 1: "HCCS", 2: "PCIe", 3: "RoCE", 4: "SIO"}
HCCL_TRANSPORT_TYPES = {0: "SDMA", 1: "RDMA", 2: "LOCAL"}
HCCL_RDMA_TYPES = {0: "RDMASendNotify", 1: "RDMASendPayload"}


def fixed_lists(values: npt.NDArray[Any]) -> pa.Array:
    """An ``(n, a, b, ...)`` array as nested FixedSizeList<...<b>, a> column over one contiguous buffer."""
    out: pa.Array = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, size)
    return out


def fixed_lists_column(
    columns: Mapping[str, Any], name: str, shape: tuple[int, ...], n: int
) -> npt.NDArray[Any]:
    """Column ``name`` of an encode() input (nested FixedSizeLists or an array) as ``(n, *shape)``."""
    value = columns.get(name)
    if value is None:
        return np.zeros((n, *shape), np.uint64)
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    if isinstance(value, pa.Array):
        while pa.types.is_fixed_size_list(value.type):
            value = value.flatten()
        value = value.to_numpy(zero_copy_only=False)
    return np.asarray(value).reshape(n, *shape)


def _split_tensors(records: Records) -> Columns:
    words = records["tensors"]  # (n, 5, 11) u32
    fmt = words[:, :, 1]
    return {
        "tensor_type": fixed_lists(words[:, :, 0]),
        "format": fixed_lists((fmt & 0xFF).astype(np.uint8)),
        "sub_format": fixed_lists(((fmt >> 8) & 0xFFFF).astype(np.uint16)),
        "data_type": fixed_lists(words[:, :, 2]),
        "shape": fixed_lists(words[:, :, 3:]),
    }


def _join_tensors(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
    words = np.zeros((n, MAX_TENSORS, TENSOR_WORDS), np.uint32)
    slots = (MAX_TENSORS,)
    words[:, :, 0] = fixed_lists_column(columns, "tensor_type", slots, n)
    words[:, :, 1] = (fixed_lists_column(columns, "format", slots, n).astype(np.uint32) & 0xFF) | (
        (fixed_lists_column(columns, "sub_format", slots, n).astype(np.uint32) & 0xFFFF) << 8
    )
    words[:, :, 2] = fixed_lists_column(columns, "data_type", slots, n)
    words[:, :, 3:] = fixed_lists_column(columns, "shape", (MAX_TENSORS, SHAPE_DIMS), n)
    return words


TENSOR_INFO = HostRecord(
    "tensor_info",
    host_dtype(
        [
            ("op_name_hash", "<u8"),
            ("tensor_num", "<u4"),
            ("tensors", f"({MAX_TENSORS},{TENSOR_WORDS})<u4"),
        ],
        RECORD_SIZE,
    ),
    {"tensors": Convert(_split_tensors, _join_tensors)},
    {"tensor_num": MAX_TENSORS},
)

_CONTEXT_ID_DTYPE = host_dtype(
    [("op_name_hash", "<u8"), ("ctx_id_num", "<u4"), ("ctx_ids", f"({MAX_CTX_IDS},)<u4")], RECORD_SIZE
)
CONTEXT_ID_INFO = HostRecord(
    "context_id_info",
    _CONTEXT_ID_DTYPE,
    counted_list(_CONTEXT_ID_DTYPE, "ctx_id_num", "ctx_ids"),
    cut={"ctx_id_num": MAX_CTX_IDS},
)

GRAPH_ID_MAP = HostRecord(
    "graph_id_map",
    host_dtype(
        [("model_name_hash", "<u8"), ("graph_id", "<u4"), ("model_id", "<u4"), ("_rsv", "V216")], RECORD_SIZE
    ),
)

_FUSION_DTYPE = host_dtype(
    [
        ("op_name_hash", "<u8"),
        ("fusion_op_num", "<u4"),
        ("input_mem_size", "<u8"),
        ("output_mem_size", "<u8"),
        ("weight_mem_size", "<u8"),
        ("workspace_mem_size", "<u8"),
        ("total_mem_size", "<u8"),
        ("fusion_op_hashes", f"({MAX_FUSION_OPS},)<u8"),
        ("_rsv", "V116"),
    ],
    RECORD_SIZE,
)
FUSION_OP_INFO = HostRecord(
    "fusion_op_info",
    _FUSION_DTYPE,
    counted_list(_FUSION_DTYPE, "fusion_op_num", "fusion_op_hashes"),
    cut={"fusion_op_num": MAX_FUSION_OPS},
)

HCCL_INFO = HostRecord(
    "hccl_info",
    host_dtype(
        [
            ("item_hash", "<u8"),
            ("ccl_tag_hash", "<u8"),
            ("group_name_hash", "<u8"),
            ("local_rank", "<u4"),
            ("remote_rank", "<u4"),
            ("rank_size", "<u4"),
            ("work_flow_mode", "<u4"),
            ("plane_id", "<u4"),
            ("ctx_id", "<u4"),
            ("notify_id", "<u8"),
            ("stage", "<u4"),
            ("role", "<u4"),
            ("duration_estimated", "<f8"),
            ("src_addr", "<u8"),
            ("dst_addr", "<u8"),
            ("data_size", "<u8"),
            ("op_type", "<u4"),
            ("data_type", "<u4"),
            ("link_type", "<u4"),
            ("transport_type", "<u4"),
            ("rdma_type", "<u4"),
            ("_rsv", "V116"),
        ],
        RECORD_SIZE,
    ),
)

_MULTI_THREAD_DTYPE = host_dtype(
    [("thread_num", "<u4"), ("thread_ids", f"({MAX_THREADS},)<u4"), ("_rsv", "V128")], RECORD_SIZE
)
MULTI_THREAD = HostRecord(
    "multi_thread",
    _MULTI_THREAD_DTYPE,
    counted_list(_MULTI_THREAD_DTYPE, "thread_num", "thread_ids"),
    cut={"thread_num": MAX_THREADS},
)

TASK_MEMORY_INFO = HostRecord(
    "task_memory_info",
    host_dtype(
        [
            ("addr", "<u8"),
            ("size", "<i8"),
            ("node_id_hash", "<u8"),
            ("total_allocate_memory", "<u8"),
            ("total_reserve_memory", "<u8"),
            ("device_id", "<u4"),
            ("device_type", "<u4"),
            ("_rsv", "V184"),
        ],
        RECORD_SIZE,
    ),
)


def _split_life_end(records: Records) -> Columns:
    life_end = records["life_end"]
    return {"life_end": np.where(life_end == LIFE_END_RAW, np.uint64(LIFE_END_OUTPUT), life_end)}


STATIC_OP_MEM = HostRecord(
    "static_op_mem",
    host_dtype(
        [
            ("size", "<i8"),
            ("op_name_hash", "<u8"),
            ("life_start", "<u8"),
            ("life_end", "<u8"),
            ("total_allocate_memory", "<u8"),
            ("dyn_op_name_hash", "<u8"),
            ("graph_id", "<u4"),
            ("_rsv", "V180"),
        ],
        RECORD_SIZE,
    ),
    {"life_end": Convert(_split_life_end)},
)

MEMORY_APPLICATION = HostRecord(
    "memory_application",
    host_dtype(
        [
            ("node_id_hash", "<u8"),
            ("ptr", "<u8"),
            ("memory_size", "<u8"),
            ("total_memory_size", "<u8"),
            ("used_memory_size", "<u8"),
            ("device_type", "u1"),
            ("device_id", "u1"),
            ("_rsv", "V190"),
        ],
        RECORD_SIZE,
    ),
)


_LOGIC_STREAM_DTYPE = host_dtype(
    [
        ("logic_stream_id", "<u4"),
        ("physic_stream_num", "<u4"),
        ("physic_stream_ids", f"({MAX_PHYSIC_STREAMS},)<u4"),
    ],
    RECORD_SIZE,
)
LOGIC_STREAM_INFO = HostRecord(
    "logic_stream_info",
    _LOGIC_STREAM_DTYPE,
    counted_list(_LOGIC_STREAM_DTYPE, "physic_stream_num", "physic_stream_ids"),
    cut={"physic_stream_num": MAX_PHYSIC_STREAMS},
)


def _additional(record: HostRecord, kind: str, description: str) -> Codec:
    return record.codec(named_patterns(host_file_pattern(f"additional.{kind}")), description)


CODECS = (
    _additional(TENSOR_INFO, "tensor_info", "host op tensor shapes, formats, data types (MsprofTensorInfo)"),
    _additional(CONTEXT_ID_INFO, "context_id_info", "host op FFTS+ context ids (MsprofContextIdInfo)"),
    _additional(GRAPH_ID_MAP, "graph_id_map", "host model name -> graph id / model id (MsprofGraphIdInfo)"),
    _additional(FUSION_OP_INFO, "fusion_op_info", "host fused ops and memory sizes (ProfFusionOpInfo)"),
    _additional(HCCL_INFO, "hccl_info", "host HCCL task details (MsprofHcclInfo)"),
    _additional(MULTI_THREAD, "Multi_Thread", "host thread ids of multi-thread ops (MsprofMultiThread)"),
    _additional(TASK_MEMORY_INFO, "task_memory_info", "host operator memory events (MsprofMemoryInfo)"),
    _additional(STATIC_OP_MEM, "static_op_mem", "host static-graph op memory (MsprofStaticOpMem)"),
    _additional(MEMORY_APPLICATION, "memory_application", "host memory applications"),
    _additional(
        LOGIC_STREAM_INFO,
        "logic_stream_info",
        "host GE logic stream -> physical streams (MsprofLogicStreamInfo)",
    ),
)
