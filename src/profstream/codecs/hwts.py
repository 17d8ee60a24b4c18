"""HWTS task logs (``hwts.data``, ``hwts.aiv_data``), 64-byte records, chips 1-4.

Layout: specs/cann_raw_formats.md §2.1 (collector ``HwtsProfileType01/2/3``;
msprof ``HWTS_LOG_FMT = 'BBHHHQ12I'``). Byte 0 packs the log type (bits 0-2),
a warn flag (bit 3) and the rolling counter (bits 4-7). Byte 1 is reserved for
log types 0/1 and the core id for types 2/3 (msprof's Python names it
task_type; the collector and MindSpore call it core id; it is 0 in every record
of the real 910A sample), so it is exposed as ``core_id``. Stream ids are
masked ``% 2048`` as msprof does (``Utils.get_stream_id``).

Choice where msprof is more lenient: msprof checks neither the magic nor the
warn fields. ``HwtsCalculator._parse`` ([MSP] ``analysis/mscalculate/hwts/
hwts_calculator.py``) keeps every record whose log type is 0 or 1
(``HwtsLogBean.is_log_type``, ``analysis/profiling_bean/struct_info/
hwts_log.py``) whatever bytes 2-3 hold, and never reads the warn bit or
``warnStatus`` (u64 at 24 of the collector's ``HwtsProfileType3``). Here the
magic is checked as for STARS logs (whose reader, ``StarsLogCalCulator``,
counts and skips a bad one): a record without it means a misaligned or corrupt
stream, so the ``on_invalid`` policy applies (error, or skip and count in
``Decoded.dropped``); on an intact stream both read the same records. ``warn``
and ``warn_status`` are decoded as columns and, as in msprof, used by no
operator; every log type is kept, and the operators keep types 0 and 1.

Decoding is one numba pass (:func:`_unpack`) that checks the magic, drops bad
records under the ``skip`` policy and writes every output column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from profstream._numba import kernel
from profstream.codecs._base import (
    DEVICE_LOG_MAGIC,
    U8,
    U16,
    U64,
    ByteBuffer,
    Codec,
    ColumnSet,
    DecodeContext,
    Decoded,
    Words,
    column,
    device_magic_policy,
    named_patterns,
    packed_dtype,
    record_words,
    row_count,
)
from profstream.codecs._ids import STREAM_ID_MODULUS

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


COLUMNS = ColumnSet.of(
    log_type=np.uint8,
    warn=np.uint8,
    cnt=np.uint8,
    core_id=np.uint8,
    block_id=np.uint16,
    task_id=np.uint16,
    stream_id=np.uint16,
    syscnt=np.uint64,
    warn_status=np.uint64,
)


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    words, consumed = record_words(buf, RECORD_SIZE)
    columns = COLUMNS.empty(len(words))
    kept = _unpack(words, *columns) if len(words) else 0
    dropped = device_magic_policy(words, kept, ctx, family="hwts")
    return Decoded(COLUMNS.batch(columns, kept), consumed, dropped, "bad magic" if dropped else "")


@kernel
def _unpack(  # noqa: PLR0917 (numba kernels take their arrays positionally)
    words: Words,
    log_type: U8,
    warn: U8,
    cnt: U8,
    core_id: U8,
    block_id: U16,
    task_id: U16,
    stream_id: U16,
    syscnt: U64,
    warn_status: U64,
) -> int:
    """Fill the columns from the records whose magic is right; returns how many there are.

    Every record is written at ``kept``, which then advances only past good ones (no branch).
    """
    kept = 0
    for i in range(len(words)):
        ids = words[i, 0]  # head, core id, magic, block id, task id
        log_type[kept] = ids & 0x07
        warn[kept] = (ids >> 3) & 1
        cnt[kept] = (ids >> 4) & 0x0F
        core_id[kept] = ids >> 8
        block_id[kept] = ids >> 32
        task_id[kept] = ids >> 48
        syscnt[kept] = words[i, 1]
        stream_id[kept] = (words[i, 2] & 0xFFFFFFFF) % STREAM_ID_MODULUS
        warn_status[kept] = words[i, 3]
        kept += ((ids >> 16) & 0xFFFF) == DEVICE_LOG_MAGIC
    return kept


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
    views_input=False,
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
    views_input=False,
    description="HWTS task start/end log (AI Vector Core)",
)

CODECS = (HWTS, HWTS_AIV)
