"""STARS SoC logs (``stars_soc.data``): 64-byte records, 32 bytes on chip V6.

Layout: specs/cann_raw_formats.md §2.4. Every record opens with a u16 header
(funcType bits 0-5, rolling counter bits 6-9, SQE type bits 10-15; [MSP]
``analysis/csrc/domain/services/parser/log/stars_soc_parser.cpp``
``StarsSocHeader``), the magic 0x6BD3 at bytes 2-3, a raw u16 stream id at 4,
a raw u16 task id at 6 and a u64 syscnt (hwts ticks) at 8. The record type
(funcType) decides the rest:

- ACSQ task start/end (0/1; [MSP] ``acsq_log_parser_item.h`` ``AcsqLog`` /
  ``AcsqLogV6``, ``analysis/profiling_bean/stars/acsq_task.py``): u16 at 16 =
  ``acc_id`` (bits 0-5) and ``acsq_id`` (bits 6-15, of which only the low 7
  bits are valid, so the column keeps 7 bits as msprof does);
- FFTS+ sub-task start/end (34/35; ``FftsPlusLog``,
  ``analysis/profiling_bean/stars/ffts_plus_log.py``): ``subtask_type`` (u16
  at 16, bits 0-7), ``subtask_id`` (u16 at 18, the context id),
  ``ffts_type`` (u16 at 20, bits 13-15), ``thread_id`` (u16 at 22).

Every other func type (QoS 24, SIO 25, ACC PMU 26, chip trans 27, inter-SoC
28, low power 29, block log 36/37, fusion task 22/23, topic blk 2/3, ...) is
kept as a row with its func_type, counter, SQE type, raw ids and syscnt (u64
at 8 in all their layouts) but its body is not parsed, as msprof's C++ parser
does not parse them either; func types msprof does not know are kept the same
way (msprof only logs them). One batch holds all func types in file order, so
the rolling counter (which spans all of them) can be checked on it.

Ids: ``stream_id``/``task_id`` are reconstructed per §2.0 (``_ids``) for ACSQ
and FFTS+ records, with the record's SQE type. Fusion task start/end records
(22/23; [MSP] ``analysis/profiling_bean/stars/fusion_task_bean.py``
``FusionTaskBean``, ``FUSION_TASK_FMT = "HHLQHHLLL"``) carry a u32 task id at
4 that msprof reads whole, on every chip, with stream id 0 (and
``FusionTaskParser.preprocess_data`` skips the host stream lookup): so their
``task_id`` is ``(task_raw << 16) | stream_raw`` and ``stream_id`` is 0; their
body (u16 at 16: fusion_task_type bits 0-4, mission_id bits 5-8; u16 acc id at
18) is not parsed. Ids are 0 for other func types, whose bytes 4-7 mean
something else. ``stream_raw``/``task_raw`` keep
bytes 4-7 of every record, and ``encode`` writes those: the reconstruction is
lossy (``% 2048``), so the raw ids are what round-trips. On V6 the task id is
the unique id ``(task << 16) | stream``; V6 has no FFTS+ log (34/35 are not in
msprof's V6 list of known func types), so the sub-task columns are 0 there.
Both forms share one schema so the start/end pairing reads either.

Column fields that do not apply to a record's func_type are 0.

Decoding is one numba pass (:func:`_unpack`) that checks the magic, drops bad
records under the ``skip`` policy, reconstructs the ids and writes every
output column.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from profstream._numba import kernel
from profstream.codecs._base import (
    DEVICE_LOG_MAGIC,
    U8,
    U16,
    U32,
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
from profstream.codecs._ids import UNIQUE, id_rule, true_ids

RECORD_SIZE = 64
RECORD_SIZE_V6 = 32
_HEAD = [
    ("header", "<u2"),
    ("magic", "<u2"),
    ("stream", "<u2"),
    ("task", "<u2"),
    ("syscnt", "<u8"),
    # bytes 16-23: meaning depends on the func type (see the module docstring);
    # reserved on V6 except the ACSQ acc/acsq word at 16.
    ("w16", "<u2"),
    ("w18", "<u2"),
    ("w20", "<u2"),
    ("w22", "<u2"),
]
DTYPE = packed_dtype([*_HEAD, ("_rsv", "V40")], RECORD_SIZE)
DTYPE_V6 = packed_dtype([*_HEAD, ("_rsv", "V8")], RECORD_SIZE_V6)

#: funcType values ([MSP] ``analysis/msconfig/stars_config.py``, ``stars_constant.py``).
ACSQ_START, ACSQ_END = 0, 1
TOPIC_BLK_START, TOPIC_BLK_END = 2, 3  # V6
FUSION_TASK_START, FUSION_TASK_END = 22, 23  # V6
QOS, SIO, ACC_PMU, CHIP_TRANS, INTER_SOC, LOW_POWER = range(24, 30)
FFTS_LOG_START, FFTS_LOG_END = 34, 35
BLOCK_LOG_START, BLOCK_LOG_END = 36, 37

#: SQE types (header bits 10-15) by name, as msprof prints them
#: ([MSP] ``analysis/msmodel/sqe_type_map.py`` ``StarsSqeType``).
SQE_TYPE_NAMES = {
    0: "AI_CORE",
    1: "AI_CPU",
    2: "AIV_SQE",
    3: "PLACE_HOLDER_SQE",
    4: "EVENT_RECORD_SQE",
    5: "EVENT_WAIT_SQE",
    6: "NOTIFY_RECORD_SQE",
    7: "NOTIFY_WAIT_SQE",
    8: "WRITE_VALUE_SQE",
    9: "VQ6_SQE",
    10: "TOF_SQE",
    11: "SDMA_SQE",
    12: "VPC_SQE",
    13: "JPEGE_SQE",
    14: "JPEGD_SQE",
    15: "DSA_SQE",
    16: "ROCCE_SQE",
    17: "PCIE_DMA_SQE",
    18: "HOST_CPU_SQE",
    19: "CDQM_SQE",
    20: "C_CORE_SQE",
}
#: SQE types on chip V6 (``sqe_type_map.py`` ``ChipV6SqeType``).
SQE_TYPE_NAMES_V6 = {
    0: "AI_CORE",
    1: "AIV_SQE",
    2: "FUSION",
    3: "PLACE_HOLDER_SQE",
    4: "AICPU_H",
    5: "AICPU_D",
    6: "NOTIFY_RECORD_SQE",
    7: "NOTIFY_WAIT_SQE",
    8: "WRITE_VALUE_SQE",
    9: "UBDMA",
    10: "ASYNCDMA",
    11: "SDMA_SQE",
    12: "VPC_SQE",
    13: "JPEGE_SQE",
    14: "JPEGD_SQE",
    15: "CMO_SQE",
    16: "CCU_SQE",
    20: "CONDITION_SQE",
    21: "END_SQE",
}
#: FFTS+ sub-task types and FFTS types (``stars_constant.py``); also used by ffts_profile.
SUBTASK_TYPE_NAMES = {
    0: "AIC",
    1: "AIV",
    3: "Notify Wait",
    4: "Notify Record",
    5: "Write Value",
    6: "MIX_AIC",
    7: "MIX_AIV",
    8: "SDMA",
    9: "Data Context",
    10: "Invalidate Data Context",
    11: "Writeback Data Context",
    12: "AI_CPU",
    13: "Load Context",
    15: "DSA",
}
FFTS_TYPE_NAMES = {
    0: "AIC only",
    1: "AIV only",
    2: "Automatic Threading Mode",
    3: "Manual Threading Mode",
    4: "FFTS+",
}


def join_header(columns: Mapping[str, Any], n: int) -> npt.NDArray[np.uint16]:
    """The u16 STARS header of ``n`` records from their func_type / cnt / sqe_type columns."""
    return (
        (column(columns, "func_type", n, np.uint16) & 0x3F)
        | ((column(columns, "cnt", n, np.uint16) & 0x0F) << 6)
        | ((column(columns, "sqe_type", n, np.uint16) & 0x3F) << 10)
    ).astype(np.uint16)


COLUMNS = ColumnSet.of(
    func_type=np.uint8,
    cnt=np.uint8,
    sqe_type=np.uint8,
    stream_raw=np.uint16,
    task_raw=np.uint16,
    stream_id=np.uint16,
    task_id=np.uint32,
    syscnt=np.uint64,
    acc_id=np.uint8,
    acsq_id=np.uint8,
    subtask_type=np.uint8,
    subtask_id=np.uint16,
    ffts_type=np.uint8,
    thread_id=np.uint16,
)


def _decode(buf: ByteBuffer, ctx: DecodeContext, *, v6: bool) -> Decoded:
    size, family = (RECORD_SIZE_V6, "stars_soc_v6") if v6 else (RECORD_SIZE, "stars_soc")
    words, consumed = record_words(buf, size)
    columns = COLUMNS.empty(len(words))
    # V6 has no FFTS+ log and always uses the unique task id
    rule = UNIQUE if v6 else id_rule(ctx.traits)
    kept = _unpack(words, rule, not v6, *columns) if len(words) else 0
    dropped = device_magic_policy(words, kept, ctx, family=family)
    return Decoded(COLUMNS.batch(columns, kept), consumed, dropped, "bad magic" if dropped else "")


@kernel
def _unpack(  # noqa: PLR0917 (numba kernels take their arrays positionally)
    words: Words,
    rule: int,
    with_ffts: bool,
    func_type: U8,
    cnt: U8,
    sqe_type: U8,
    stream_raw: U16,
    task_raw: U16,
    stream_id: U16,
    task_id: U32,
    syscnt: U64,
    acc_id: U8,
    acsq_id: U8,
    subtask_type: U8,
    subtask_id: U16,
    ffts_type: U8,
    thread_id: U16,
) -> int:
    """Fill the columns from the records whose magic is right; returns how many there are.

    Every record is written at ``kept``, which then advances only past good ones; the
    columns that do not apply are zeroed by multiplying with 0/1 flags. Both keep the
    loop free of unpredictable branches (func types alternate record by record).
    """
    kept = 0
    for i in range(len(words)):
        head = words[i, 0]  # header, magic, raw stream, raw task
        func = head & 0x3F
        sqe = (head >> 10) & 0x3F
        stream, task = (head >> 32) & 0xFFFF, (head >> 48) & 0xFFFF
        acsq = np.int64(func <= ACSQ_END)
        ffts = np.int64(with_ffts and func in (FFTS_LOG_START, FFTS_LOG_END))
        fusion = np.int64(func in (FUSION_TASK_START, FUSION_TASK_END))
        task_log = acsq | ffts
        body = words[i, 2]  # the u16 words at 16, 18, 20, 22
        func_type[kept] = func
        cnt[kept] = (head >> 6) & 0x0F
        sqe_type[kept] = sqe
        stream_raw[kept] = stream
        task_raw[kept] = task
        true_stream, true_task = true_ids(stream, task, sqe, rule)
        stream_id[kept] = true_stream * task_log
        task_id[kept] = true_task * task_log + ((task << 16) | stream) * fusion
        syscnt[kept] = words[i, 1]
        acc_id[kept] = (body & 0x3F) * acsq
        acsq_id[kept] = ((body >> 6) & 0x7F) * acsq
        subtask_type[kept] = (body & 0xFF) * ffts
        subtask_id[kept] = ((body >> 16) & 0xFFFF) * ffts
        ffts_type[kept] = ((body >> 45) & 0x07) * ffts
        thread_id[kept] = ((body >> 48) & 0xFFFF) * ffts
        kept += ((head >> 16) & 0xFFFF) == DEVICE_LOG_MAGIC
    return kept


def _encode(columns: Mapping[str, Any], *, v6: bool) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, DTYPE_V6 if v6 else DTYPE)
    records["header"] = join_header(columns, n)
    records["magic"] = DEVICE_LOG_MAGIC
    records["stream"] = column(columns, "stream_raw", n, np.uint16)
    records["task"] = column(columns, "task_raw", n, np.uint16)
    records["syscnt"] = column(columns, "syscnt", n, np.uint64)
    acsq_word = (column(columns, "acc_id", n, np.uint16) & 0x3F) | (
        (column(columns, "acsq_id", n, np.uint16) & 0x7F) << 6
    )
    acsq = (column(columns, "func_type", n, np.uint8) & 0x3F) <= ACSQ_END
    records["w16"] = np.where(acsq, acsq_word, column(columns, "subtask_type", n, np.uint16) & 0xFF)
    records["w18"] = column(columns, "subtask_id", n, np.uint16)
    records["w20"] = (column(columns, "ffts_type", n, np.uint16) & 0x07) << 13
    records["w22"] = column(columns, "thread_id", n, np.uint16)
    return records.tobytes()


decode = partial(_decode, v6=False)
encode = partial(_encode, v6=False)
decode_v6 = partial(_decode, v6=True)
encode_v6 = partial(_encode, v6=True)

_PATTERNS = named_patterns(r"^stars_soc\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$")

STARS_SOC = Codec(
    family="stars_soc",
    side="device",
    patterns=_PATTERNS,
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    counter="cnt",
    views_input=False,
    applies=lambda traits: not traits.is_v6,
    description="STARS SoC log: ACSQ task and FFTS+ sub-task start/end, other SoC records by func type",
)

STARS_SOC_V6 = Codec(
    family="stars_soc_v6",
    side="device",
    patterns=_PATTERNS,
    decode=decode_v6,
    encode=encode_v6,
    record_size=RECORD_SIZE_V6,
    counter="cnt",
    views_input=False,
    applies=lambda traits: traits.is_v6,
    description="STARS SoC log, chip V6 (32-byte records): ACSQ task start/end, other records by func type",
)

CODECS = (STARS_SOC, STARS_SOC_V6)
