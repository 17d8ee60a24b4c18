"""Host compact records (``(aging|unaging).compact.<kind>.slice_N``), 64 bytes each, one family per kind.

Layout: specs/cann_raw_formats.md §2.8. Every record is ``MsprofCompactInfo``: the 24-byte host
header (§2.7, :mod:`profstream.codecs._host`; ``data_len`` at 12, host-counter ``timestamp`` at 16)
and a 40-byte payload whose meaning the file name gives. Payloads ([MSP]
``analysis/csrc/infrastructure/utils/prof_common.h``; Python formats in
``analysis/msparser/data_struct_size_constant.py``):

- ``task_track`` (``MsprofRuntimeTrack``): 24 u16 device word (``device_id`` bits 0-11,
  ``dev_type`` bits 12-15: 0 NPU, 1 DPU), 26 u16 ``stream_id``, 28 u32 task word, 32 u64
  ``task_type`` (type id, named through type_info_dic at level 5000), 40 u64 ``kernel_name_hash``,
  48 extInfo: u16 ``num_blocks``, u16 ``args_size``, u8 {``ratio`` bits 0-2, ``sched_mode`` bits 3-4}.
  The task word is exposed three ways: ``task_id`` (low 16 bits) and ``batch_id`` (high 16 bits,
  the flip number) as on non-V6 chips, and ``task_id_raw`` (the whole u32, the task id on V6,
  where the batch id is 0); encode builds the word from ``task_id`` and ``batch_id``. The SIMT
  variant of extInfo (a union in the header) cannot be told apart in the data and is not decoded;
  files older than the kernelName/extInfo fields hold zeros or garbage there (§2.8 note).
- ``task_track_v2`` (``MsprofRuntimeTrackV2``, [MSP] ``prof_struct.h``; Python ``TASK_TRACK_V2_FMT
  "HHIIIQHHIHHIQ"`` + 16 B, ``TaskTrackV2Bean``): task_track with wider stream ids and a narrower
  type: 24 u16 device word (as task_track), 26 two reserved bytes, 28 u32 ``stream_id``, 32 u32 task
  word (exposed as in task_track), 36 u32 ``task_type``, 40 u64 ``kernel_name_hash``, 48 the same
  extInfo. Its columns are task_track's, in the same order (``stream_id`` u32 and ``task_type`` u32
  here), so the engine reads it as the ``task_track`` feed. msprof reads V2 only when the collection's
  host has no V1 task_track file in either aging group (Python ``TaskTrackParser.parse_task_track``,
  ``analysis/msparser/compact_info/task_track_parser.py``; C++ ``TaskTrackParser`` in
  ``compact_info_parser.h``, ``filePrefix_`` checked before ``filePrefixV2_``); that choice is the
  planner's (:mod:`profstream.engine.plan`).
- ``node_basic_info`` (``MsprofNodeBasicInfo``, pack 1): 24 u64 ``op_name_hash``, 32 u32
  ``task_type`` (GeTaskType, :data:`GE_TASK_TYPES`), 36 u64 ``op_type_hash``, 44 u32 block word
  (``block_dim`` low 16 bits, ``mix_ratio`` high 16 bits, and the derived ``mix_block_dim =
  block_dim * mix_ratio``), 48 u32 ``op_flag``, 52 u8 ``op_state`` as written. msprof's C++ replaces
  ``op_state`` by 0 for ``unaging`` and 1 for ``aging`` files (static / dynamic shape, §1.3); that
  is the engine's job, from the ``aging`` group of the file name.
- ``node_attr_info`` (``MsprofAttrInfo``): 24 u64 ``op_name_hash``, 32 u32 ``attr_type`` (0 =
  OP_ATTR), 36 u64 ``attr_hash`` (hash of the attribute string).
- ``memcpy_info`` (``MsprofMemcpyInfo``): 24 u64 ``data_size``, 32 u64 ``max_size``, 40 u16
  ``direction``. Open point #3 of the spec: before the header change of 2024-12-17 the payload was
  u64 dataSize, u16 direction at 32 (msprof's Python ``MEMCPY_INFO_FMT`` still reads that).
  Choice: the newer layout, which msprof's C++ uses, with a per-record data-driven fallback: a
  record whose u64 at 32 is a direction value (1..7) and whose u16 at 40 is 0 is read in the old
  layout (``direction`` = that value, ``max_size`` = 0). An old record has zeros after its
  direction (the compact buffer is zero-initialised), and a real ``max_size`` of a copy task is
  never 1..7 bytes, so the two cannot be confused in practice; when the u64 at 32 is 0 both
  readings agree. The one ambiguous new-layout record (max_size 1..7 and direction 0) is read as old.
- ``hccl_op_info`` (``MsprofHcclOPInfo``, pack 1): 24 u8 flags (``relay`` bit 0, ``retry`` bit 1),
  25 u8 ``data_type``, 26 u64 ``alg_type_hash`` (hash of the "-"-joined algorithm string), 34 u64
  ``count``, 42 u64 ``group_name_hash``.
- ``capture_stream_info`` (``MsprofCaptureStreamInfo``): 24 u16 ``capture_status`` (1 = destroyed,
  then both stream ids are 0xFFFF), 26 ``model_stream_id``, 28 ``original_stream_id``, 30
  ``model_id``, 32 ``device_id`` (all u16; msprof's Python reads only the low byte of the last one,
  the C struct has 16 bits, which are kept).
- ``expand_stream_spec``: 24 u8 ``expand_status`` (1 = stream expand on, selects the §2.0 id rules).
- ``dpu_track`` (``MsprofDpuTrack``): 24 u16 device word (as task_track), 26 u16 ``stream_id``, 28
  u32 ``task_id``, 32 u32 ``task_type``, 40 u64 ``start_time`` (host counter value).

Legacy task track: ``Runtime.task_track.<dev>.slice_N`` (and the ``Runtime.runtime.<dev>.<n>`` /
``Runtime.host.runtime.<dev>.slice_N`` names, §1.3) are not compact records: msprof reads them
with a separate parser (``RtsDataBean``, ``RTS_TRACK_FMT "HHIQ32sHHHHQ"``; the collector struct
``MsprofRuntimeProfTrackData``): 0 u16 magic 0x5A5A, 2 u16 ``data_tag`` (41), 4 u32
``thread_id``, 8 u64 ``timestamp``, 16 char[32] ``task_type`` (NUL-terminated name), 48 u32 task
word (``task_id`` low 16, ``batch_id`` high 16), 52 u16 ``stream_id``. Decoding them with the
compact layout would be wrong, so they are their own family ``runtime_track``. Bytes of a task
type name that are not valid UTF-8 are replaced by '?' (msprof drops them).

extInfo is a union ([MSP] ``analysis/csrc/infrastructure/utils/prof_struct.h``
``MsprofRuntimeTrack``); only the kernel form above is decoded. The SIMT form is u16 gridDim
x/y/z at 48, blockDim x/y/z at 54, argsSize at 60, schedMode bits 0-1 of byte 62; the newer
model form is a u32 ``modelId`` at 48, which msprof's Python reads (``TaskTrackBean.model_id``) for
MODEL_EXECUTE / MODEL_WAIT_COMPLETE tasks and which equals ``num_blocks | args_size << 16``; the
event and notify forms hold a u64 key at 48.

Not covered: ``capture_stream_info_v2`` files of msprof builds newer than the spec (their names do
not match these patterns, so they are left alone rather than misread).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs._base import Codec, named_patterns, packed_dtype
from profstream.codecs._host import (
    Bits,
    Columns,
    Convert,
    HostRecord,
    Records,
    bit_fields,
    host_dtype,
    host_file_pattern,
)

RECORD_SIZE = 64

DEV_TYPE_NPU, DEV_TYPE_DPU = 0, 1
#: GeTaskType ([MSP] ``analysis/common_func/ms_constant/ge_enum_constant.py``).
GE_TASK_TYPES = {
    0: "AI_CORE",
    1: "AI_CPU",
    2: "AI_VECTOR_CORE",
    3: "WRITE_BACK",
    4: "MIX_AIC",
    5: "MIX_AIV",
    6: "FFTS_PLUS",
    7: "DSA_SQE",
    8: "DVPP",
    9: "HCCL",
    10: "FUSION",
    11: "INVALID",
}
OP_ATTR = 0
CAPTURE_DESTROYED = 1
STREAM_EXPANDED = 1
#: largest memcpy direction value; a u64 at 32 in 1..7 marks the old memcpy_info layout.
MAX_MEMCPY_DIRECTION = 7
#: memcpy_info ``direction`` -> msprof's operation text (C++ ``MEMCPY_OPERATIONS`` of
#: ``analysis/csrc/application/timeline/ascend_hardware_assembler.cpp``); any other value is ``other``
MEMCPY_OPERATIONS = (
    "host to host",
    "host to device",
    "device to host",
    "device to device",
    "managed memory",
    "addr device to device",
    "host to device ex",
    "device to host ex",
)
RUNTIME_TRACK_TAG = 41  # MSPROF_RUNTIME_DATA_TAG_TRACK

_DEVICE = bit_fields("device", Bits("device_id", 0, 12, "u2"), Bits("dev_type", 12, 4, "u1"))
_TASK = bit_fields("task_id_raw", Bits("task_id", 0, 16, "u2"), Bits("batch_id", 16, 16, "u2"), raw=True)

#: what task_track and task_track_v2 share after the type: the kernel name and extInfo (kernel form)
_KERNEL_INFO = [
    ("kernel_name_hash", "<u8"),
    ("num_blocks", "<u2"),
    ("args_size", "<u2"),
    ("kernel_flags", "u1"),
    ("_ext_rsv", "V11"),
]
_TRACK_FIELDS = {
    "device": _DEVICE,
    "task_id_raw": _TASK,
    "kernel_flags": bit_fields("kernel_flags", Bits("ratio", 0, 3, "u1"), Bits("sched_mode", 3, 2, "u1")),
}

TASK_TRACK = HostRecord(
    "task_track",
    host_dtype(
        [
            ("device", "<u2"),
            ("stream_id", "<u2"),
            ("task_id_raw", "<u4"),
            ("task_type", "<u8"),
            *_KERNEL_INFO,
        ],
        RECORD_SIZE,
    ),
    _TRACK_FIELDS,
)

TASK_TRACK_V2 = HostRecord(
    "task_track_v2",
    host_dtype(
        [
            ("device", "<u2"),
            ("_rsv", "V2"),
            ("stream_id", "<u4"),
            ("task_id_raw", "<u4"),
            ("task_type", "<u4"),
            *_KERNEL_INFO,
        ],
        RECORD_SIZE,
    ),
    _TRACK_FIELDS,
)

_BLOCK = bit_fields("block_num", Bits("block_dim", 0, 16, "u2"), Bits("mix_ratio", 16, 16, "u2"))


def _split_block(records: Records) -> Columns:
    out = _BLOCK.split(records)
    out["mix_block_dim"] = out["block_dim"].astype(np.uint32) * out["mix_ratio"]
    return out


NODE_BASIC_INFO = HostRecord(
    "node_basic_info",
    host_dtype(
        [
            ("op_name_hash", "<u8"),
            ("task_type", "<u4"),
            ("op_type_hash", "<u8"),
            ("block_num", "<u4"),
            ("op_flag", "<u4"),
            ("op_state", "u1"),
            ("_rsv", "V11"),
        ],
        RECORD_SIZE,
    ),
    {"block_num": Convert(_split_block, _BLOCK.join)},
)

NODE_ATTR_INFO = HostRecord(
    "node_attr_info",
    host_dtype(
        [("op_name_hash", "<u8"), ("attr_type", "<u4"), ("attr_hash", "<u8"), ("_rsv", "V20")], RECORD_SIZE
    ),
)


def _split_memcpy(records: Records) -> Columns:
    at32, at40 = records["max_size"], records["direction"]
    old = (at32 <= MAX_MEMCPY_DIRECTION) & (at40 == 0)
    return {
        "max_size": np.where(old, np.uint64(0), at32),
        "direction": np.where(old, at32, at40).astype(np.uint16),
    }


MEMCPY_INFO = HostRecord(
    "memcpy_info",
    host_dtype(
        [("data_size", "<u8"), ("max_size", "<u8"), ("direction", "<u2"), ("_rsv", "V22")], RECORD_SIZE
    ),
    {"direction": Convert(_split_memcpy)},
)

HCCL_OP_INFO = HostRecord(
    "hccl_op_info",
    host_dtype(
        [
            ("flags", "u1"),
            ("data_type", "u1"),
            ("alg_type_hash", "<u8"),
            ("count", "<u8"),
            ("group_name_hash", "<u8"),
            ("_rsv", "V14"),
        ],
        RECORD_SIZE,
    ),
    {"flags": bit_fields("flags", Bits("relay", 0, 1, "?"), Bits("retry", 1, 1, "?"))},
)

CAPTURE_STREAM_INFO = HostRecord(
    "capture_stream_info",
    host_dtype(
        [
            ("capture_status", "<u2"),
            ("model_stream_id", "<u2"),
            ("original_stream_id", "<u2"),
            ("model_id", "<u2"),
            ("device_id", "<u2"),
            ("_rsv", "V30"),
        ],
        RECORD_SIZE,
    ),
)

EXPAND_STREAM_SPEC = HostRecord(
    "expand_stream_spec", host_dtype([("expand_status", "u1"), ("_rsv", "V39")], RECORD_SIZE)
)

DPU_TRACK = HostRecord(
    "dpu_track",
    host_dtype(
        [
            ("device", "<u2"),
            ("stream_id", "<u2"),
            ("task_id", "<u4"),
            ("task_type", "<u4"),
            ("_rsv0", "V4"),
            ("start_time", "<u8"),
            ("_rsv1", "V16"),
        ],
        RECORD_SIZE,
    ),
    {"device": _DEVICE},
)

TASK_TYPE_NAME_SIZE = 32


def _split_task_type(records: Records) -> Columns:
    """The NUL-terminated names as one string column, without a per-record loop."""
    raw = np.ascontiguousarray(records["task_type"]).view(np.uint8).reshape(-1, TASK_TYPE_NAME_SIZE)
    nul = raw == 0
    lengths = np.where(nul.any(axis=1), nul.argmax(axis=1), TASK_TYPE_NAME_SIZE)
    data = raw[np.arange(TASK_TYPE_NAME_SIZE) < lengths[:, None]]
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])

    def strings(payload: npt.NDArray[np.uint8]) -> pa.Array:
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(payload)]
        return pa.Array.from_buffers(pa.binary(), len(raw), buffers).cast(pa.string())

    try:
        names = strings(data)
    except pa.ArrowInvalid:
        names = strings(np.where(data < 0x80, data, np.uint8(ord("?"))).astype(np.uint8))
    return {"task_type": names}


def _join_task_type(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
    value = columns.get("task_type")
    if value is None:
        return np.zeros(n, f"S{TASK_TYPE_NAME_SIZE}")
    if isinstance(value, pa.Array | pa.ChunkedArray):
        value = value.to_pylist()
    names = np.char.encode(np.asarray(value, dtype=str), "utf-8")
    if names.dtype.itemsize > TASK_TYPE_NAME_SIZE:
        msg = f"task_type: names are at most {TASK_TYPE_NAME_SIZE} bytes"
        raise ValueError(msg)
    return names.astype(f"S{TASK_TYPE_NAME_SIZE}")


RUNTIME_TRACK = HostRecord(
    "runtime_track",
    packed_dtype(
        [
            ("magic", "<u2"),
            ("data_tag", "<u2"),
            ("thread_id", "<u4"),
            ("timestamp", "<u8"),
            ("task_type", f"S{TASK_TYPE_NAME_SIZE}"),
            ("task_id_raw", "<u4"),
            ("stream_id", "<u2"),
            ("_rsv", "V10"),
        ],
        RECORD_SIZE,
    ),
    {"task_type": Convert(_split_task_type, _join_task_type), "task_id_raw": _TASK},
)


def _compact(record: HostRecord, description: str) -> Codec:
    return record.codec(named_patterns(host_file_pattern(f"compact.{record.family}")), description)


CODECS = (
    _compact(TASK_TRACK, "host runtime task launches (MsprofRuntimeTrack)"),
    _compact(TASK_TRACK_V2, "host runtime task launches, 32-bit stream ids (MsprofRuntimeTrackV2)"),
    _compact(NODE_BASIC_INFO, "host op basic info: name, type, block dim (MsprofNodeBasicInfo)"),
    _compact(NODE_ATTR_INFO, "host op attribute hashes (MsprofAttrInfo)"),
    _compact(MEMCPY_INFO, "host memcpy sizes and directions (MsprofMemcpyInfo)"),
    _compact(HCCL_OP_INFO, "host HCCL op info (MsprofHcclOPInfo)"),
    _compact(CAPTURE_STREAM_INFO, "host graph-capture stream mapping (MsprofCaptureStreamInfo)"),
    _compact(EXPAND_STREAM_SPEC, "host stream-expand switch"),
    _compact(DPU_TRACK, "host DPU task launches (MsprofDpuTrack)"),
    RUNTIME_TRACK.codec(
        named_patterns(
            r"^[rR]untime\.task_track\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
            r"^[rR]untime\.host\.runtime\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
            r"^[rR]untime\.runtime\.(?P<dev>\d+)\.(?P<slice>\d+)$",
        ),
        "legacy host runtime task track (MsprofRuntimeProfTrackData)",
    ),
)
