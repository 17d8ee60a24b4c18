"""Device memory samples: ``npu_mem.data`` / ``npu_mem.app`` (32 B) and ``npu_module_mem.data`` (24 B).

Layouts: specs/cann_raw_formats.md §2.11.

``npu_mem`` ([MSP] ``analysis/msparser/npu_mem/npu_mem_bean.py``,
``npu_mem_parser.py``; struct ``"IIQQQ"``) depends on the collection version
(info.json ``version``, :attr:`StreamTraits.version`):

- "1.0": u32 timestamp at 0, u32 event at 4, u64 at 8 unused, u64 ddr at 16,
  u64 hbm at 24;
- "2.0": u32 at 0 unused, u32 event at 4, u64 timestamp at 8, ddr, hbm as above.

Any version other than "2.0", including a missing one, selects the 1.0 layout:
that is what msprof does (``VersionedStructParser.DEFAULT_VERSION = "1.0"``).
``timestamp`` is in µs without the device monotonic base added (spec §3.2
caveat); ``ddr`` and ``hbm`` are bytes (msprof divides by 1024 for its KB
columns, ``analysis/viewer/npu_mem/npu_mem_viewer.py``); ``event`` is 0 for
the application, 1 for the whole device.

``npu_module_mem`` ([MSP] ``npu_module_mem_bean.py``, ``npu_module_mem_parser.py``;
struct ``"IIQQ"``): u32 module id (msprof's ``ModuleName`` enum), u32
reserved, u64 ``cpu_cycle_count`` (converted as msprof's
``time_from_host_syscnt(..., is_host=False)`` does), u64 total size in bytes.
Sizes above the int64 maximum become -1, as msprof stores them.
"""

from __future__ import annotations

from collections.abc import Mapping
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

NPU_MEM_SIZE = 32
DTYPE_V1 = packed_dtype(
    [("timestamp", "<u4"), ("event", "<u4"), ("_rsv", "V8"), ("ddr", "<u8"), ("hbm", "<u8")],
    NPU_MEM_SIZE,
)
DTYPE_V2 = packed_dtype(
    [("_rsv", "V4"), ("event", "<u4"), ("timestamp", "<u8"), ("ddr", "<u8"), ("hbm", "<u8")],
    NPU_MEM_SIZE,
)
#: the collection version whose records carry a u64 timestamp at byte 8.
VERSION_2 = "2.0"
#: npu_mem ``event`` values (``NpuMemViewer``).
EVENT_APP, EVENT_DEVICE = 0, 1
NPU_MEM_COLUMNS = {"event": np.uint32, "timestamp": np.uint64, "ddr": np.uint64, "hbm": np.uint64}

MODULE_MEM_SIZE = 24
MODULE_DTYPE = packed_dtype(
    [("module_id", "<u4"), ("_rsv", "V4"), ("cpu_cycle_count", "<u8"), ("total_size", "<u8")],
    MODULE_MEM_SIZE,
)


def npu_mem_dtype(version: str | None) -> np.dtype[Any]:
    """The npu_mem layout of a collection with info.json ``version``."""
    return DTYPE_V2 if version == VERSION_2 else DTYPE_V1


def decode_npu_mem(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, npu_mem_dtype(ctx.traits.version))
    out = batch({name: records[name].astype(dtype, copy=False) for name, dtype in NPU_MEM_COLUMNS.items()})
    return Decoded(out, consumed)


def encode_npu_mem(columns: Mapping[str, Any], *, version: str | None = None) -> bytes:
    """Records in the layout of ``version`` (the 1.0 layout truncates timestamps to 32 bits)."""
    dtype = npu_mem_dtype(version)
    n = row_count(columns)
    records = np.zeros(n, dtype)
    for name in NPU_MEM_COLUMNS:
        records[name] = column(columns, name, n, np.uint64).astype(dtype[name])
    return records.tobytes()


def decode_module_mem(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, MODULE_DTYPE)
    total = records["total_size"].view(np.int64)  # sizes above the int64 maximum turn negative
    out = batch(
        {
            "module_id": records["module_id"],
            "cpu_cycle_count": records["cpu_cycle_count"],
            "total_size": np.where(total < 0, np.int64(-1), total),
        }
    )
    return Decoded(out, consumed)


def encode_module_mem(columns: Mapping[str, Any]) -> bytes:
    """Records from decoded columns; a total size of -1 is written as all ones."""
    n = row_count(columns)
    records = np.zeros(n, MODULE_DTYPE)
    records["module_id"] = column(columns, "module_id", n, np.uint32)
    records["cpu_cycle_count"] = column(columns, "cpu_cycle_count", n, np.uint64)
    records["total_size"] = column(columns, "total_size", n, np.int64).view(np.uint64)
    return records.tobytes()


NPU_MEM = Codec(
    family="npu_mem",
    side="device",
    patterns=named_patterns(r"^npu_mem\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode_npu_mem,
    encode=encode_npu_mem,
    record_size=NPU_MEM_SIZE,
    description="device memory (DDR/HBM) samples",
)

NPU_MEM_APP = Codec(
    family="npu_mem_app",
    side="device",
    patterns=named_patterns(r"^npu_mem\.app\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode_npu_mem,
    encode=encode_npu_mem,
    record_size=NPU_MEM_SIZE,
    description="application memory (DDR/HBM) samples",
)

NPU_MODULE_MEM = Codec(
    family="npu_module_mem",
    side="device",
    patterns=named_patterns(r"^npu_module_mem\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode_module_mem,
    encode=encode_module_mem,
    record_size=MODULE_MEM_SIZE,
    description="device memory per software module",
)

CODECS = (NPU_MEM, NPU_MEM_APP, NPU_MODULE_MEM)
