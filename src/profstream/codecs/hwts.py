"""HWTS task logs (``hwts.data``, ``hwts.aiv_data``), 64-byte records, chips 1-4.

Layout: specs/cann_raw_formats.md §2.1 (collector ``HwtsProfileType01/2/3``;
msprof ``HWTS_LOG_FMT = 'BBHHHQ12I'``). Byte 0 packs the log type (bits 0-2),
a warn flag (bit 3) and the rolling counter (bits 4-7). Byte 1 is reserved for
log types 0/1 and the core id for types 2/3 (msprof's Python names it
task_type; the collector and MindSpore call it core id; it is 0 in every record
of the real 910A sample), so it is exposed as ``core_id``. Stream ids are
masked ``% 2048`` as msprof does (``Utils.get_stream_id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from profstream.codecs._base import (
    DEVICE_LOG_MAGIC,
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
    valid_mask,
)
from profstream.codecs._ids import legacy_stream_id

RECORD_SIZE = 64
DTYPE = packed_dtype(
    [
        ("head", "u1"),
        ("core_id", "u1"),
        ("magic", "<u2"),
        ("block_id", "<u2"),
        ("task_id", "<u2"),
        ("syscnt", "<u8"),
        ("stream_id", "<u4"),
        ("_rsv0", "V4"),
        ("warn_status", "<u8"),
        ("_rsv1", "V32"),
    ],
    RECORD_SIZE,
)

#: log types (collector HWTS_TASK_START_TYPE / END_TYPE; MindSpore names 2-4).
TASK_START, TASK_END, BLOCK_START, BLOCK_END, BLOCK_PMU = range(5)


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, DTYPE)
    mask, dropped = valid_mask(
        records["magic"] == DEVICE_LOG_MAGIC,
        ctx,
        record_size=RECORD_SIZE,
        family="hwts",
        expected=f"magic {DEVICE_LOG_MAGIC:#x} at bytes 2-3",
        found=records["magic"],
    )
    if mask is not None:
        records = records[mask]
    head = records["head"]
    out = batch(
        {
            "log_type": head & np.uint8(0x07),
            "warn": (head >> np.uint8(3)) & np.uint8(1),
            "cnt": head >> np.uint8(4),
            "core_id": records["core_id"],
            "block_id": records["block_id"],
            "task_id": records["task_id"],
            "stream_id": legacy_stream_id(records["stream_id"]),
            "syscnt": records["syscnt"],
            "warn_status": records["warn_status"],
        }
    )
    return Decoded(out, consumed, dropped, "bad magic" if dropped else "")


def encode(columns: Mapping[str, Any]) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, DTYPE)
    records["head"] = (
        (column(columns, "log_type", n, np.uint8) & 0x07)
        | ((column(columns, "warn", n, np.uint8) & 1) << 3)
        | ((column(columns, "cnt", n, np.uint8) & 0x0F) << 4)
    )
    records["core_id"] = column(columns, "core_id", n, np.uint8)
    records["magic"] = DEVICE_LOG_MAGIC
    for name in ("block_id", "task_id", "syscnt", "stream_id", "warn_status"):
        records[name] = column(columns, name, n, DTYPE[name])
    return records.tobytes()


HWTS = Codec(
    family="hwts",
    side="device",
    patterns=named_patterns(
        r"^hwts\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
        r"^hwts\.log\.data\.\d+\.(?:dev|host)\.profiler_default_tag\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
        r"^hwts\.log\.data\.\d+\.(?P<dev>\d+)\.(?P<slice>\d+)$",
    ),
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    counter="cnt",
    description="HWTS task start/end log (AI Core)",
)

HWTS_AIV = Codec(
    family="hwts_aiv",
    side="device",
    patterns=named_patterns(
        r"^hwts\.aiv_data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
        r"^hwts\.log\.aiv\.data\.\d+\.(?P<dev>\d+)\.(?P<slice>\d+)$",
    ),
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    counter="cnt",
    description="HWTS task start/end log (AI Vector Core)",
)

CODECS = (HWTS, HWTS_AIV)
