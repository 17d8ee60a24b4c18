"""AI Core frequency changes (``lpmFreqConv.data``), 888-byte records, chips 5, 7, 15, 16.

Layout: specs/cann_raw_formats.md §2.5 ([MSP] ``analysis/csrc/domain/services/
parser/parser_item/freq_lpm_parser_item.h``, ``analysis/msparser/freq/
freq_parser.py``): u32 ``count``, u32 reserved, then 55 slots of {u64
``sysCnt``, u32 ``freq`` (MHz), u32 reserved}; only the first ``count`` slots
are filled. The output has one row per filled slot, in record then slot order:
``syscnt`` (device ticks) and ``freq_mhz``.

A ``count`` above 55 is cut to 55 and the record kept, as msprof's current C++
parser does (``FreqLpmParseItem`` bounds the count by the array, and its
``FreqParser`` logs one warning with the number of such records); here each
such record counts in ``Decoded.replaced`` (logged as ``values_replaced``).
Older msprof versions copied ``count`` slots without a bound check. Which
entries precede the collection start (msprof folds those into the initial
``aic_frequency``) is decided downstream, where ``dev_start.log`` is known.
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

RECORD_SIZE = 888
SLOTS = 55
SLOT_DTYPE = packed_dtype([("syscnt", "<u8"), ("freq_mhz", "<u4"), ("_rsv", "V4")], 16)
DTYPE = packed_dtype(
    [("count", "<u4"), ("_rsv", "V4"), ("slots", f"({SLOTS},)V{SLOT_DTYPE.itemsize}")],
    RECORD_SIZE,
)


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    records, consumed = as_records(buf, DTYPE)
    count = records["count"]
    cut = int((count > SLOTS).sum())
    slots = records["slots"].view(SLOT_DTYPE)
    filled = np.arange(SLOTS) < np.minimum(count, SLOTS)[:, None]
    out = batch({"syscnt": slots["syscnt"][filled], "freq_mhz": slots["freq_mhz"][filled]})
    reason = f"count above {SLOTS}, cut to {SLOTS}" if cut else ""
    return Decoded(out, consumed, replaced=cut, replace_reason=reason)


def encode(columns: Mapping[str, Any]) -> bytes:
    """Rows packed 55 to a record; the last record holds the remainder."""
    n = row_count(columns)
    records = np.zeros(-(-n // SLOTS), DTYPE)
    records["count"] = np.minimum(SLOTS, n - SLOTS * np.arange(len(records)))
    slots = np.zeros(len(records) * SLOTS, SLOT_DTYPE)
    slots["syscnt"][:n] = column(columns, "syscnt", n, np.uint64)
    slots["freq_mhz"][:n] = column(columns, "freq_mhz", n, np.uint32)
    records["slots"] = slots.view(f"V{SLOT_DTYPE.itemsize}").reshape(len(records), SLOTS)
    return records.tobytes()


LPM_FREQ = Codec(
    family="lpm_freq",
    side="device",
    patterns=named_patterns(r"^lpmFreqConv\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode,
    encode=encode,
    record_size=RECORD_SIZE,
    description="AI Core frequency changes (DVFS)",
)

CODECS = (LPM_FREQ,)
