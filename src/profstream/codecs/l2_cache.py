"""L2 cache counters per device task (``l2_cache.data``), 72-byte records.

Layout (msprof ``analysis/profiling_bean/struct_info/l2_cache.py`` ``L2CacheDataBean`` and
``analysis/msparser/data_struct_size_constant.py``: struct ``"HHHH8Q"``, 72 bytes, native order, which
is little-endian on every Ascend host): u16 ``task_type``, u16 ``stream_id``, u16 ``task_id``, u16
unused, then eight u64 event counters. Counter ``i`` counts the ``i``-th event of the collection's
``l2CacheTaskProfilingEvents`` list (sample.json, for example ``0xF6,0xFB,0xFC,0xBF,0x90,0x91,0x9C,0x9D``
on 910B); counters past the configured events are unused. The records carry no time: one is written
per task as the task log's records are, so the feed follows the device's task log.

msprof reads ``l2_cache.data.<dev>.slice_<n>`` (``DataTag.L2CACHE``,
``analysis/common_func/file_name_manager.py``); its parser logs a file whose size is not a whole number
of records and reads the whole records, as every codec here does with its trailing partial record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from profstream.codecs._base import (
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    as_records,
    batch,
    named_patterns,
    pack_records,
    packed_dtype,
)

RECORD_SIZE = 72
#: event counters per record (msprof ``Constant.L2_CACHE_ITEM``: at most 8 events may be configured)
EVENTS = 8
EVENT_COLUMNS = tuple(f"event_{i}" for i in range(EVENTS))
DTYPE = packed_dtype(
    [
        ("task_type", "<u2"),
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("_rsv", "V2"),
        *[(name, "<u8") for name in EVENT_COLUMNS],
    ],
    RECORD_SIZE,
)
_IDS = ("task_type", "stream_id", "task_id")


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, DTYPE)
    return Decoded(batch({name: records[name] for name in (*_IDS, *EVENT_COLUMNS)}), consumed)


def encode(columns: Mapping[str, Any]) -> bytes:
    return pack_records(columns, DTYPE)


L2_CACHE = Codec(
    family="l2_cache",
    side="device",
    patterns=named_patterns(r"^l2_cache\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    description="L2 cache event counters per task",
)

CODECS = (L2_CACHE,)
