"""HBM traffic samples (``hbm.data``): per sample, one record per (HBM unit, read|write) counter.

msprof (``analysis/msparser/hardware/hbm_parser.py``, ``msparser/data_struct_size_constant.py``;
``VersionedStructParser``) picks the layout by info.json ``version``; any version other than "2.0",
including a missing one, reads as "1.0" (its ``DEFAULT_VERSION``), as :mod:`.npu_mem` does:

- "1.0" (24 bytes, struct ``"QQII"``): u64 sampling timestamp in µs without the device monotonic base
  (msprof converts it with ``get_absolute_time_by_sampling_timestamp``), u64 count, u32 event,
  u32 HBM id;
- "2.0" (32 bytes, struct ``"IIIIQQ"``): two unused u32, u32 event, u32 HBM id, u64 count, u64
  timestamp in ns, which msprof keeps as it is (already its absolute time).

``event`` 0 counts reads, any other value writes. ``count`` is in units of 32 bytes (msprof's
``HbmModel.SCALE`` = 256 / 8 / 1024 / 1024 MB per count). Files: ``hbm.data.<dev>.slice_<n>``
(``DataTag.HBM``). The two layouts are two families, ``hbm`` and ``hbm_v2``, chosen by the collection's
version; both give the same columns.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from profstream.codecs._base import (
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    DecodeFn,
    StreamTraits,
    as_records,
    batch,
    named_patterns,
    pack_records,
    packed_dtype,
)

RECORD_SIZE_V1, RECORD_SIZE_V2 = 24, 32
DTYPE_V1 = packed_dtype(
    [("timestamp", "<u8"), ("count", "<u8"), ("event", "<u4"), ("hbm_id", "<u4")], RECORD_SIZE_V1
)
DTYPE_V2 = packed_dtype(
    [("_rsv", "V8"), ("event", "<u4"), ("hbm_id", "<u4"), ("count", "<u8"), ("timestamp", "<u8")],
    RECORD_SIZE_V2,
)
#: the collection version whose records are the 32-byte layout
VERSION_2 = "2.0"
#: ``event`` of a read counter (any other value counts writes)
EVENT_READ = 0
COLUMNS = {"timestamp": np.uint64, "count": np.uint64, "event": np.uint32, "hbm_id": np.uint32}
PATTERN = r"^hbm\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"


def _decoder(dtype: np.dtype[Any]) -> DecodeFn:
    def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
        records, consumed = as_records(buf, dtype)
        columns = {name: records[name].astype(kind, copy=False) for name, kind in COLUMNS.items()}
        return Decoded(batch(columns), consumed)

    return decode


def _is_v2(traits: StreamTraits) -> bool:
    return traits.version == VERSION_2


def _codec(family: str, dtype: np.dtype[Any], applies: Callable[[StreamTraits], bool], version: str) -> Codec:
    return Codec(
        family=family,
        side="device",
        patterns=named_patterns(PATTERN),
        decode=_decoder(dtype),
        encode=partial(pack_records, dtype=dtype),
        record_size=dtype.itemsize,
        applies=applies,
        description=f"HBM read/write counts per sample (collection version {version})",
    )


HBM = _codec("hbm", DTYPE_V1, lambda traits: not _is_v2(traits), "1.0")
HBM_V2 = _codec("hbm_v2", DTYPE_V2, _is_v2, VERSION_2)

CODECS = (HBM, HBM_V2)
