"""AI Core / AI Vector Core PMU counters (``aicore.data``, ``aiVectorCore.data``), chips 1-4.

Two collection modes write the same file names; sample.json says which, per
file: ``ai_core_profiling_mode`` for ``aicore.data`` (``StreamTraits.sample_based``)
and ``aiv_profiling_mode`` for ``aiVectorCore.data``
(``StreamTraits.aiv_sample_based``), as msprof's ``ParsingAICoreSampleData`` and
``ParsingAIVectorCoreSampleData`` each read their own mode:

Task-based, 128-byte records (specs/cann_raw_formats.md §2.2; [MSP]
``analysis/msparser/data_struct_size_constant.py`` ``AIC_PMU_FMT =
'BBHHHII10Q8I'``, ``AIV_FMT = 'BBHHHIIqqqqqqqqqqIIIIIIII'``; beans
``analysis/profiling_bean/struct_info/aic_pmu.py``, ``aiv_pmu.py``): byte 0
bits 4-7 rolling counter ``cnt``; u16 ``task_id`` at 6; ``total_cycle`` at 16;
eight PMU event counters ``pmu_0..pmu_7`` at 32 (in the order of sample.json
``ai_core_profiling_events`` / ``aiv_profiling_events``); u32 stream id at 96,
taken ``% 2048`` as msprof does. Bytes 1-5, 8-15, 24-31, 100-127 and the low
nibble of byte 0 are unused by msprof and their meaning is unknown (§6 point
6), so they are not output. The AIV format string declares all ten u64 slots
signed (``q``), so ``total_cycle`` and the counters of ``aiv`` are int64;
for ``aicore`` they are uint64.

Sample-based, 96-byte records, 112 bytes on chip V6 (§2.3; [MSP]
``analysis/profiling_bean/struct_info/aicore_sample.py``, fmt
``'BBHHH8QQQBB6B'`` / ``'BBHHH10QQQBB6B'``): ``mode`` (u8 at 0), eight (V6:
ten) event counters at 8, ``task_cyc``, a time field, ``count_num`` (how many
counters are valid) and ``core_id``. The time field is device-monotonic ns
on non-V6 (msprof adds host_mono - dev_mono), so it is the ``timestamp``
column; on V6 it is a syscnt in hwts ticks, so it is the ``syscnt`` column.
msprof stops reading a file at the first record whose first byte (``mode``)
is 0 (``if not binary_data[0]: break`` in
``analysis/msparser/aic_sample/ai_core_sample_parser.py``). Here a buffer is
what the decoder sees of a file, so: from the first zero-mode record on, the
buffer's whole records are consumed but not returned, and they are reported
in ``Decoded.dropped`` (so nothing is dropped silently). The ffts_profile
sample form on STARS chips is the same record (``ffts_profile`` imports the
sample codec from here).

Task-based records are decoded in one numba pass (:func:`_unpack_task`) that
writes every output column; sample records are few and stay numpy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from profstream._numba import kernel
from profstream.codecs._base import (
    U8,
    U16,
    ByteBuffer,
    Codec,
    ColumnSet,
    DecodeContext,
    Decoded,
    StreamTraits,
    Words,
    as_records,
    batch,
    column,
    named_patterns,
    pack_records,
    packed_dtype,
    record_words,
    row_count,
)
from profstream.codecs._ids import STREAM_ID_MODULUS

Patterns = tuple[re.Pattern[str], ...]

RECORD_SIZE = 128
SAMPLE_RECORD_SIZE = 96
SAMPLE_RECORD_SIZE_V6 = 112


def pmu_names(count: int) -> tuple[str, ...]:
    """Column names of ``count`` numbered PMU counters: pmu_0, pmu_1, ..."""
    return tuple(f"pmu_{i}" for i in range(count))


def _task_dtype(counter: str) -> np.dtype[Any]:
    return packed_dtype(
        [
            ("head", "u1"),
            ("_rsv0", "V5"),
            ("task_id", "<u2"),
            ("_rsv1", "V8"),
            ("total_cycle", counter),
            ("_rsv2", "V8"),
            *[(name, counter) for name in pmu_names(8)],
            ("stream_id", "<u4"),
            ("_rsv3", "V28"),
        ],
        RECORD_SIZE,
    )


def _sample_dtype(counters: int, time_field: str, size: int) -> np.dtype[Any]:
    return packed_dtype(
        [
            ("mode", "u1"),
            ("_rsv0", "V7"),
            *[(name, "<u8") for name in pmu_names(counters)],
            ("task_cyc", "<u8"),
            (time_field, "<u8"),
            ("count_num", "u1"),
            ("core_id", "u1"),
            ("_rsv1", "V6"),
        ],
        size,
    )


DTYPE_AIC = _task_dtype("<u8")
DTYPE_AIV = _task_dtype("<i8")
DTYPE_SAMPLE = _sample_dtype(8, "timestamp", SAMPLE_RECORD_SIZE)
DTYPE_SAMPLE_V6 = _sample_dtype(10, "syscnt", SAMPLE_RECORD_SIZE_V6)


def _fields(records: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]:
    """The non-reserved fields of structured records, by name, in layout order."""
    names = records.dtype.names or ()
    return {name: records[name] for name in names if not name.startswith("_")}


def _task_columns(dtype: np.dtype[Any]) -> ColumnSet:
    """The output columns of task-based records of ``dtype`` (its counters' signedness)."""
    counter = dtype["total_cycle"]
    return ColumnSet.of(
        cnt=np.uint8,
        stream_id=np.uint16,
        task_id=np.uint16,
        total_cycle=counter,
        **dict.fromkeys(pmu_names(8), counter),
    )


def _decode_task(buf: ByteBuffer, ctx: DecodeContext, *, columns: ColumnSet) -> Decoded:
    words, consumed = record_words(buf, RECORD_SIZE)
    arrays = columns.empty(len(words))
    if len(words):
        _unpack_task(words, *arrays)
    return Decoded(columns.batch(arrays, len(words)), consumed)


@kernel
def _unpack_task(
    words: Words,
    cnt: U8,
    stream_id: U16,
    task_id: U16,
    total_cycle: npt.NDArray[np.integer[Any]],
    *pmu: npt.NDArray[np.integer[Any]],
) -> None:
    """Fill the columns from 128-byte task-based records (16 words each)."""
    for i in range(len(words)):
        head = words[i, 0]  # byte 0 head, u16 task id at 6
        cnt[i] = (head >> 4) & 0x0F
        task_id[i] = head >> 48
        total_cycle[i] = words[i, 2]
        for k in range(len(pmu)):
            pmu[k][i] = words[i, 4 + k]
        stream_id[i] = (words[i, 12] & 0xFFFFFFFF) % STREAM_ID_MODULUS


def _encode_task(columns: Mapping[str, Any], *, dtype: np.dtype[Any]) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, dtype)
    records["head"] = (column(columns, "cnt", n, np.uint8) & 0x0F) << 4
    for name in _fields(records):
        if name != "head":
            records[name] = column(columns, name, n, dtype[name])
    return records.tobytes()


def _decode_sample(buf: ByteBuffer, ctx: DecodeContext, *, dtype: np.dtype[Any]) -> Decoded:
    records, consumed = as_records(buf, dtype)
    zero_mode = np.flatnonzero(records["mode"] == 0)
    kept = int(zero_mode[0]) if len(zero_mode) else len(records)
    dropped = len(records) - kept
    reason = "records from the first zero mode byte on (end of sample data)" if dropped else ""
    return Decoded(batch(_fields(records[:kept])), consumed, dropped, reason)


#: whether a stream's PMU was sampled by time, from the traits (the module docstring)
Sampled = Callable[[StreamTraits], bool]


def aic_sampled(traits: StreamTraits) -> bool:
    return traits.sample_based


def _aiv_sampled(traits: StreamTraits) -> bool:
    return traits.aiv_sample_based


_AIC_PATTERNS = named_patterns(
    r"^aicore\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
    r"^aicore\.data\.\d+\.dev\.profiler_default_tag\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
    r"^aicore\.data\.\d+\.(?P<dev>\d+)\.(?P<slice>\d+)$",
)
_AIV_PATTERNS = named_patterns(
    r"^aiVectorCore\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
    r"^aiVectorCore\.data\.\d+\.(?P<dev>\d+)\.(?P<slice>\d+)$",  # msprof's AIV_INFER_FILE_PATTERN
)


def _task_codec(family: str, patterns: Patterns, dtype: np.dtype[Any], what: str, sampled: Sampled) -> Codec:
    return Codec(
        family=family,
        side="device",
        patterns=patterns,
        decode=partial(_decode_task, columns=_task_columns(dtype)),
        encode=partial(_encode_task, dtype=dtype),
        record_size=RECORD_SIZE,
        counter="cnt",
        views_input=False,
        applies=lambda traits: not sampled(traits),
        description=f"{what} PMU counters per task (task-based)",
    )


def sample_codec(family: str, patterns: Patterns, v6: bool, what: str, sampled: Sampled) -> Codec:
    """A sample-based PMU codec (96 B, or 112 B when ``v6``) for the files ``patterns`` match, where
    ``sampled`` says the collection sampled them."""
    dtype = DTYPE_SAMPLE_V6 if v6 else DTYPE_SAMPLE
    return Codec(
        family=family,
        side="device",
        patterns=patterns,
        decode=partial(_decode_sample, dtype=dtype),
        encode=partial(pack_records, dtype=dtype),
        record_size=dtype.itemsize,
        applies=lambda traits: sampled(traits) and traits.is_v6 == v6,
        description=f"{what} PMU counters per sampling interval (sample-based{', V6' if v6 else ''})",
    )


CODECS = (
    _task_codec("aicore", _AIC_PATTERNS, DTYPE_AIC, "AI Core", aic_sampled),
    _task_codec("aiv", _AIV_PATTERNS, DTYPE_AIV, "AI Vector Core", _aiv_sampled),
    sample_codec("aicore_sample", _AIC_PATTERNS, False, "AI Core", aic_sampled),
    sample_codec("aiv_sample", _AIV_PATTERNS, False, "AI Vector Core", _aiv_sampled),
    sample_codec("aicore_sample_v6", _AIC_PATTERNS, True, "AI Core", aic_sampled),
    sample_codec("aiv_sample_v6", _AIV_PATTERNS, True, "AI Vector Core", _aiv_sampled),
)
