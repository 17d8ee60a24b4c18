"""Legacy step-trace records (``training_trace.46.dev.profiler_default_tag.N.slice_N``), 20 bytes.

Layout: specs/cann_raw_formats.md §2.6 (pre-2021 collections; [MI]
``mindinsight/profiler/parser/step_trace_parser.py``, struct ``'=QHHQ'``):
u64 tag_id, u16 task_id, u16 stream_id, u64 sys_count. The records carry no
magic number, so nothing can be checked; ``syscnt`` is in device ticks. Stream
ids are output raw, as MindInsight reads them (it groups all-reduce tags by the
unmasked stream id). Current collections write step trace into ts_track (tag
10) instead, whose tag numbering differs (see :mod:`profstream.codecs.ts_track`).
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

RECORD_SIZE = 20
DTYPE = packed_dtype(
    [("tag_id", "<u8"), ("task_id", "<u2"), ("stream_id", "<u2"), ("syscnt", "<u8")],
    RECORD_SIZE,
)

#: legacy tag ids as MindInsight reads them: 1 FP start, 2 BP end, 255 iteration
#: end; 0 or any tag above 255 starts a step (the value is the job id); every
#: other tag is an all-reduce start/end point.
FP_START_TAG = 1
BP_END_TAG = 2
ITERATION_END_TAG = 255


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    """Whole 20-byte records of ``buf``; there is nothing to validate."""
    records, consumed = as_records(buf, DTYPE)
    return Decoded(batch({name: records[name] for name in DTYPE.names or ()}), consumed)


def encode(columns: Mapping[str, Any]) -> bytes:
    n = row_count(columns)
    records = np.zeros(n, DTYPE)
    for name in DTYPE.names or ():
        records[name] = column(columns, name, n, DTYPE[name])
    return records.tobytes()


TRAINING_TRACE = Codec(
    family="training_trace",
    side="device",
    patterns=named_patterns(
        r"^training_trace\.\d+\.dev\.profiler_default_tag\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
    ),
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    description="legacy step-trace tags (pre-2021 collections)",
)

CODECS = (TRAINING_TRACE,)
