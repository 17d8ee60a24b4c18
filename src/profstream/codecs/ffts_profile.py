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
value).

Sample-based collections (sample.json ``ai_core_profiling_mode`` =
sample-based) write the 96-byte (V6: 112-byte) sample record of §2.3 into
``ffts_profile.data`` instead (``ParsingFftsAICoreSampleData``); families
``ffts_profile_sample`` / ``ffts_profile_sample_v6`` reuse the sample codec of
``aicore``. Splitting those rows into AIC and AIV by core id is left to the
operators.
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
from profstream.codecs._ids import reconstruct_ids, unique_ids
from profstream.codecs.aicore import pmu_names, sample_codec
from profstream.codecs.stars_soc import join_header, split_header

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


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, DTYPE)
    func_type, cnt, _ = split_header(records["header"])
    stream_id, task_id = reconstruct_ids(records["stream"], records["task"], ctx.traits)
    context = func_type == CONTEXT_PMU
    block = func_type == BLOCK_PMU
    w16, core = records["w16"], records["core"]
    # multiplying by a boolean mask keeps the dtype and zeroes the rows it does not apply to
    out = batch(
        {
            "func_type": func_type,
            "cnt": cnt,
            "stream_raw": records["stream"],
            "task_raw": records["task"],
            "stream_id": stream_id,
            "task_id": task_id,
            "subtask_type": (w16 & 0xFF).astype(np.uint8),
            "subtask_id": records["subtask_id"],
            "ffts_type": records["ffts"] >> np.uint8(5),
            "ov_flag": ((w16 >> 10) & 1).astype(np.uint8) * context,
            "core_type": (core & np.uint8(1)) * block,
            "core_id": (core >> np.uint8(1)) * block,
            "sub_block_id": records["sub_block_id"] * block,
            "block_id": records["block_id"] * block,
            "total_cycle": records["total_cycle"],
            **{name: records[name] for name in PMU},
            "start_syscnt": records["start_syscnt"],
            "end_syscnt": records["end_syscnt"],
        }
    )
    return Decoded(out, consumed)


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
    records, consumed = as_records(buf, DTYPE_V6)
    func_type, cnt, _ = split_header(records["header"])
    stream_id, task_id = unique_ids(records["stream"], records["task"])
    flags = records["flags"]
    out = batch(
        {
            "func_type": func_type,
            "cnt": cnt,
            "stream_raw": records["stream"],
            "task_raw": records["task"],
            "stream_id": stream_id,
            "task_id": task_id,
            "ctx_type": records["ctx_type"],
            "mst": flags & np.uint8(1),
            "mix": (flags >> np.uint8(1)) & np.uint8(1),
            "ov_flag": (flags >> np.uint8(2)) & np.uint8(1),
            "core_type": records["core_type"] & np.uint8(1),
            "core_id": records["core_id"],
            "sub_block_id": records["sub_block_id"],
            "block_id": records["block_id"],
            "total_cycle": records["total_cycle"],
            **{name: records[name] for name in PMU_V6},
            "start_syscnt": records["start_syscnt"],
            "end_syscnt": records["end_syscnt"],
        }
    )
    return Decoded(out, consumed)


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

FFTS_PROFILE = Codec(
    family="ffts_profile",
    side="device",
    patterns=_PATTERNS,
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    counter="cnt",
    applies=lambda traits: not traits.sample_based and not traits.is_v6,
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
    applies=lambda traits: not traits.sample_based and traits.is_v6,
    description="STARS PMU counters per task and per block, chip V6 (ten counters)",
)

CODECS = (
    FFTS_PROFILE,
    FFTS_PROFILE_V6,
    sample_codec("ffts_profile_sample", _PATTERNS, False, "STARS AI Core / AI Vector"),
    sample_codec("ffts_profile_sample_v6", _PATTERNS, True, "STARS AI Core / AI Vector"),
)
