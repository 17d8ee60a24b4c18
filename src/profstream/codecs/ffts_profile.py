"""STARS / FFTS PMU counters (``ffts_profile.data``), 128-byte records, chips 5, 7, 8, 11, 15, 16.

Layout: specs/cann_raw_formats.md §2.5. The u16 header carries funcType (bits
0-5) and the rolling counter (bits 6-9) as in STARS logs; bytes 2-3 are not a
checked magic here ([MSP] ``analysis/csrc/domain/services/parser/pmu/
ffts_profile_parser.cpp`` ``FftsProfileHeader``), so there is no invalid-record
check; ``encode`` writes them as 0.

Non-V6 (family ``ffts_profile``), one schema for both record types:

- context PMU, funcType 40 ([MSP] ``parser_item/chip4_pmu_parser_item.h``
  ``ContextPmu``; ``analysis/profiling_bean/stars/ffts_pmu.py``): u16 at 16 =
  ``subtask_type`` (bits 0-7) and ``ov_flag`` (bit 10, counter overflow);
  ``subtask_id`` u16 at 18 (the context id, meaningful only when ffts_type is
  4; msprof substitutes 4294967295 otherwise, this codec keeps the raw value);
  ``ffts_type`` = bits 13-15 of u16 at 20; ``total_cycle`` at 32;
  ``pmu_0..pmu_7`` at 48; start/end syscnt at 112/120;
- block PMU, funcType 41 (``BlockPmu``, ``ffts_block_pmu.py``): the same
  fields except ov_flag (bits 8-15 at 16 are reserved), plus byte 20 =
  ``core_type`` (bit 0: 0 AIC, 1 AIV) and ``core_id`` (bits 1-7),
  ``sub_block_id`` u16 at 28, ``block_id`` u16 at 30.

``ov_flag`` is 0 on block records and the four block fields are 0 on context
records (those bytes are reserved there). Ids are reconstructed per §2.0 with
SQE type 0, as the PMU parsers do; ``stream_raw``/``task_raw`` keep bytes 4-7
and are what ``encode`` writes (the reconstruction is lossy). Records of other
func types (msprof warns and skips them) are kept with their func_type and the
fields common to both layouts, so consumers filter on ``func_type``.

V6 (family ``ffts_profile_v6``; [MSP] ``parser_item/chip6_pmu_parser_item.h``
``Chip6Pmu``, ``analysis/profiling_bean/stars/pmu_bean_v6.py``): funcType 42 =
task (context) PMU, 41 = block PMU, one layout: ``total_cycle`` at 8,
``ctx_type`` u8 at 16, flags u8 at 17 (bit 0 ``mst`` main core, bit 1 ``mix``,
bit 2 ``ov_flag``), ``core_type`` (bit 0 of byte 20), ``core_id`` u8 at 21,
``sub_block_id`` u16 at 24, ``block_id`` u16 at 26, ten counters
``pmu_0..pmu_9`` at 32, start/end syscnt at 112/120. The task id is the unique
id ``(task << 16) | stream`` (the C++ reads it as one u32 at 4, the same
value). Times are hwts-tick syscnts as on the other chips: msprof converts
both with ``time_from_syscnt`` and the task time with ``duration_from_syscnt(end
- start)`` (``analysis/mscalculate/stars/chip6_pmu_calculator.py``), and the
C++ takes ``endTime`` as the record's timestamp. msprof keeps overflowed V6
records: the C++ only warns, and the Python's ``PmuBeanV6.ov_flag`` compares a
string with 1, so its overflow skip never fires; ``ov_flag`` here is the bit.

Sample-based collections (sample.json ``ai_core_profiling_mode`` =
sample-based) write the 96-byte (V6: 112-byte) sample record of §2.3 into
``ffts_profile.data`` instead (``ParsingFftsAICoreSampleData``); families
``ffts_profile_sample`` / ``ffts_profile_sample_v6`` reuse the sample codec of
``aicore``. Splitting those rows into AIC and AIV by core id is left to the
operators. When only ``aiv_profiling_mode`` is sample-based, msprof reads the
file in neither form (``FftsPmuCalculator.ms_run`` returns when either mode is
sample-based; the sample parser runs on the AI Core's mode), so no codec
applies and the file is listed as not decoded.

Both record forms are decoded in one numba pass each (:func:`_unpack`,
:func:`_unpack_v6`) that reconstructs the ids and writes every output column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from profstream._numba import kernel
from profstream.codecs._base import (
    U8,
    U16,
    U32,
    U64,
    ByteBuffer,
    Codec,
    ColumnSet,
    DecodeContext,
    Decoded,
    StreamTraits,
    Words,
    column,
    named_patterns,
    packed_dtype,
    record_words,
    row_count,
)
from profstream.codecs._ids import UNIQUE, id_rule, true_ids
from profstream.codecs.aicore import aic_sampled, pmu_names, sample_codec
from profstream.codecs.stars_soc import join_header

RECORD_SIZE = 128
PMU = pmu_names(8)
PMU_V6 = pmu_names(10)

#: funcType values ([MSP] ``stars_constant.py``; ``chip6_pmu_parser_item.h``).
CONTEXT_PMU, BLOCK_PMU, V6_PMU = 40, 41, 42

_ID_FIELDS = [("header", "<u2"), ("_rsv0", "V2"), ("stream", "<u2"), ("task", "<u2")]
_TIME_FIELDS = [("start_syscnt", "<u8"), ("end_syscnt", "<u8")]
DTYPE = packed_dtype(
    [
        *_ID_FIELDS,
        ("_rsv1", "V8"),
        ("w16", "<u2"),  # subtask_type bits 0-7; context: ov_flag bit 10
        ("subtask_id", "<u2"),
        ("core", "u1"),  # block: core_type bit 0, core_id bits 1-7
        ("ffts", "u1"),  # ffts_type bits 5-7
        ("_rsv2", "V6"),
        ("sub_block_id", "<u2"),  # block only
        ("block_id", "<u2"),  # block only
        ("total_cycle", "<u8"),
        ("_rsv3", "V8"),
        *[(name, "<u8") for name in PMU],
        *_TIME_FIELDS,
    ],
    RECORD_SIZE,
)
DTYPE_V6 = packed_dtype(
    [
        *_ID_FIELDS,
        ("total_cycle", "<u8"),
        ("ctx_type", "u1"),
        ("flags", "u1"),  # bit 0 mst, bit 1 mix, bit 2 ov_flag
        ("_rsv1", "V2"),
        ("core_type", "u1"),  # bit 0
        ("core_id", "u1"),
        ("_rsv2", "V2"),
        ("sub_block_id", "<u2"),
        ("block_id", "<u2"),
        ("_rsv3", "V4"),
        *[(name, "<u8") for name in PMU_V6],
        *_TIME_FIELDS,
    ],
    RECORD_SIZE,
)


_ID_COLUMNS = {
    "func_type": np.uint8,
    "cnt": np.uint8,
    "stream_raw": np.uint16,
    "task_raw": np.uint16,
    "stream_id": np.uint16,
    "task_id": np.uint32,
}
_TIME_COLUMNS = {"start_syscnt": np.uint64, "end_syscnt": np.uint64}
COLUMNS = ColumnSet.of(
    **_ID_COLUMNS,
    subtask_type=np.uint8,
    subtask_id=np.uint16,
    ffts_type=np.uint8,
    ov_flag=np.uint8,
    core_type=np.uint8,
    core_id=np.uint8,
    sub_block_id=np.uint16,
    block_id=np.uint16,
    total_cycle=np.uint64,
    **dict.fromkeys(PMU, np.uint64),
    **_TIME_COLUMNS,
)
COLUMNS_V6 = ColumnSet.of(
    **_ID_COLUMNS,
    ctx_type=np.uint8,
    mst=np.uint8,
    mix=np.uint8,
    ov_flag=np.uint8,
    core_type=np.uint8,
    core_id=np.uint8,
    sub_block_id=np.uint16,
    block_id=np.uint16,
    total_cycle=np.uint64,
    **dict.fromkeys(PMU_V6, np.uint64),
    **_TIME_COLUMNS,
)


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    words, consumed = record_words(buf, RECORD_SIZE)
    columns = COLUMNS.empty(len(words))
    if len(words):
        _unpack(words, id_rule(ctx.traits), *columns)
    return Decoded(COLUMNS.batch(columns, len(words)), consumed)


@kernel
def _unpack(  # noqa: PLR0917 (numba kernels take their arrays positionally)
    words: Words,
    rule: int,
    func_type: U8,
    cnt: U8,
    stream_raw: U16,
    task_raw: U16,
    stream_id: U16,
    task_id: U32,
    subtask_type: U8,
    subtask_id: U16,
    ffts_type: U8,
    ov_flag: U8,
    core_type: U8,
    core_id: U8,
    sub_block_id: U16,
    block_id: U16,
    total_cycle: U64,
    *pmu_and_times: U64,
) -> None:
    """Fill the columns from non-V6 records: PMU counters at words 6-13, start/end at 14-15.

    Fields of only one record type are zeroed by multiplying with 0/1 flags, not by
    branching (context and block records alternate).
    """
    for i in range(len(words)):
        head = words[i, 0]  # header, reserved, raw stream, raw task
        func = head & 0x3F
        stream, task = (head >> 32) & 0xFFFF, (head >> 48) & 0xFFFF
        context, block = np.int64(func == CONTEXT_PMU), np.int64(func == BLOCK_PMU)
        body = words[i, 2]  # u16 at 16, subtask id at 18, core byte at 20, ffts byte at 21
        ids = words[i, 3]  # sub_block_id at 28, block_id at 30
        func_type[i] = func
        cnt[i] = (head >> 6) & 0x0F
        stream_raw[i] = stream
        task_raw[i] = task
        stream_id[i], task_id[i] = true_ids(stream, task, 0, rule)
        subtask_type[i] = body
        subtask_id[i] = body >> 16
        ffts_type[i] = (body >> 45) & 0x07
        ov_flag[i] = ((body >> 10) & 1) * context
        core_type[i] = ((body >> 32) & 1) * block
        core_id[i] = ((body >> 33) & 0x7F) * block
        sub_block_id[i] = ((ids >> 32) & 0xFFFF) * block
        block_id[i] = ((ids >> 48) & 0xFFFF) * block
        total_cycle[i] = words[i, 4]
        for k in range(len(pmu_and_times)):
            pmu_and_times[k][i] = words[i, 6 + k]


def encode(columns: Mapping[str, Any]) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, DTYPE)
    records["header"] = join_header(columns, n)
    records["stream"] = column(columns, "stream_raw", n, np.uint16)
    records["task"] = column(columns, "task_raw", n, np.uint16)
    records["w16"] = (column(columns, "subtask_type", n, np.uint16) & 0xFF) | (
        (column(columns, "ov_flag", n, np.uint16) & 1) << 10
    )
    records["core"] = (column(columns, "core_type", n, np.uint8) & 1) | (
        (column(columns, "core_id", n, np.uint8) & 0x7F) << 1
    )
    records["ffts"] = (column(columns, "ffts_type", n, np.uint8) & 0x07) << 5
    for name in ("subtask_id", "sub_block_id", "block_id", "total_cycle", *PMU, "start_syscnt", "end_syscnt"):
        records[name] = column(columns, name, n, DTYPE[name])
    return records.tobytes()


def decode_v6(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    words, consumed = record_words(buf, RECORD_SIZE)
    columns = COLUMNS_V6.empty(len(words))
    if len(words):
        _unpack_v6(words, *columns)
    return Decoded(COLUMNS_V6.batch(columns, len(words)), consumed)


@kernel
def _unpack_v6(  # noqa: PLR0917 (numba kernels take their arrays positionally)
    words: Words,
    func_type: U8,
    cnt: U8,
    stream_raw: U16,
    task_raw: U16,
    stream_id: U16,
    task_id: U32,
    ctx_type: U8,
    mst: U8,
    mix: U8,
    ov_flag: U8,
    core_type: U8,
    core_id: U8,
    sub_block_id: U16,
    block_id: U16,
    total_cycle: U64,
    *pmu_and_times: U64,
) -> None:
    """Fill the columns from V6 records: PMU counters at words 4-13, start/end at 14-15."""
    for i in range(len(words)):
        head = words[i, 0]  # header, reserved, raw stream, raw task
        stream, task = (head >> 32) & 0xFFFF, (head >> 48) & 0xFFFF
        body = words[i, 2]  # ctx_type at 16, flags at 17, core_type at 20, core_id at 21
        ids = words[i, 3]  # sub_block_id at 24, block_id at 26
        func_type[i] = head & 0x3F
        cnt[i] = (head >> 6) & 0x0F
        stream_raw[i] = stream
        task_raw[i] = task
        stream_id[i], task_id[i] = true_ids(stream, task, 0, UNIQUE)
        ctx_type[i] = body
        mst[i] = (body >> 8) & 1
        mix[i] = (body >> 9) & 1
        ov_flag[i] = (body >> 10) & 1
        core_type[i] = (body >> 32) & 1
        core_id[i] = body >> 40
        sub_block_id[i] = ids
        block_id[i] = ids >> 16
        total_cycle[i] = words[i, 1]
        for k in range(len(pmu_and_times)):
            pmu_and_times[k][i] = words[i, 4 + k]


def encode_v6(columns: Mapping[str, Any]) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, DTYPE_V6)
    records["header"] = join_header(columns, n)
    records["stream"] = column(columns, "stream_raw", n, np.uint16)
    records["task"] = column(columns, "task_raw", n, np.uint16)
    records["flags"] = (
        (column(columns, "mst", n, np.uint8) & 1)
        | ((column(columns, "mix", n, np.uint8) & 1) << 1)
        | ((column(columns, "ov_flag", n, np.uint8) & 1) << 2)
    )
    records["core_type"] = column(columns, "core_type", n, np.uint8) & 1
    for name in (
        "ctx_type",
        "core_id",
        "sub_block_id",
        "block_id",
        "total_cycle",
        *PMU_V6,
        "start_syscnt",
        "end_syscnt",
    ):
        records[name] = column(columns, name, n, DTYPE_V6[name])
    return records.tobytes()


_PATTERNS = named_patterns(r"^ffts_profile\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$")


def _task_based(traits: StreamTraits) -> bool:
    """Both PMU modes per task, as msprof needs to read task PMU (the module docstring)."""
    return not traits.sample_based and not traits.aiv_sample_based


FFTS_PROFILE = Codec(
    family="ffts_profile",
    side="device",
    patterns=_PATTERNS,
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    counter="cnt",
    views_input=False,
    applies=lambda traits: _task_based(traits) and not traits.is_v6,
    description="STARS PMU counters per task (context PMU) and per block (block PMU)",
)

FFTS_PROFILE_V6 = Codec(
    family="ffts_profile_v6",
    side="device",
    patterns=_PATTERNS,
    decode=decode_v6,
    encode=encode_v6,
    record_size=RECORD_SIZE,
    counter="cnt",
    views_input=False,
    applies=lambda traits: _task_based(traits) and traits.is_v6,
    description="STARS PMU counters per task and per block, chip V6 (ten counters)",
)

CODECS = (
    FFTS_PROFILE,
    FFTS_PROFILE_V6,
    sample_codec("ffts_profile_sample", _PATTERNS, False, "STARS AI Core / AI Vector", aic_sampled),
    sample_codec("ffts_profile_sample_v6", _PATTERNS, True, "STARS AI Core / AI Vector", aic_sampled),
)
