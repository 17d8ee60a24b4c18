"""Host API and event records (``(aging|unaging).api_event.data.slice_N``), 40 bytes each.

Layout: specs/cann_raw_formats.md §2.7 ([MSP] ``analysis/csrc/infrastructure/utils/prof_common.h``
``MsprofApi`` / ``MsprofEvent``). Both kinds share one stream and one layout:

    0 u16 magic 0x5A5A | 2 u16 level | 4 u32 type | 8 u32 threadId | 12 u32 reserve (Api) / requestId
    (Event) | 16 u64 beginTime (Api) / timeStamp (Event) | 24 u64 endTime (Api) / reserve = all ones
    (Event) | 32 u64 itemId

Bytes 24-31 all ones mark an Event, anything else an Api (msprof ``_check_reserve_num``,
``analysis/msparser/api_event/api_event_parser.py``; C++ ``api_event_parser.cpp``). One schema
holds both: ``is_event``; ``request_id`` = the Event's requestId or the Api's reserve word;
``begin_time`` = the Api's beginTime or the Event's timeStamp; ``end_time`` = the Api's endTime,
and 0 for an Event (its bytes 24-31 are the flag, not a time); ``item_id`` raw. Times are host
counter values (§3). ``item_id`` is a hash id resolved through ``hash_dic`` except at the model
level and for node-level ``step_info``, where it is a plain number (model id / iteration), so it
keeps its raw name rather than a ``_hash`` suffix.

Not done here, on purpose (engine rules, not layout): msprof's Python drops Api records whose
beginTime is 0 (they are decoded and kept), and the C++ pairs Events into Api intervals by
(level, type, thread_id, request_id, item_id). ``encode`` writes the flag for ``is_event`` rows, so
an Api row whose ``end_time`` is all ones cannot round-trip (it would read back as an Event).

Older API files (``Runtime.api.*``, ``AclModule.*``) have other layouts and are not this family.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from profstream.codecs._base import column, named_patterns
from profstream.codecs._host import Columns, Convert, HostRecord, Records, host_dtype, host_file_pattern

RECORD_SIZE = 40
#: bytes 24-31 of an Event (``MSPROF_EVENT_FLAG``).
EVENT_FLAG = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
#: an Event's requestId for a single (unpaired) event.
SINGLE_EVENT_REQUEST = 0xFFFF
DTYPE = host_dtype(
    [("end_time", "<u8"), ("item_id", "<u8")], RECORD_SIZE, length="request_id", time="begin_time"
)


def _split_end(records: Records) -> Columns:
    end = records["end_time"]
    is_event = end == EVENT_FLAG
    return {"is_event": is_event, "end_time": np.where(is_event, np.uint64(0), end)}


def _join_end(columns: Mapping[str, Any], n: int) -> npt.NDArray[Any]:
    is_event = column(columns, "is_event", n, np.bool_)
    return np.where(is_event, EVENT_FLAG, column(columns, "end_time", n, np.uint64))


API_EVENT = HostRecord("api_event", DTYPE, {"end_time": Convert(_split_end, _join_end)})
decode = API_EVENT.decode
encode = API_EVENT.encode

CODECS = (
    API_EVENT.codec(
        named_patterns(host_file_pattern("api_event.data")), "host API intervals and events (MsprofApi/Event)"
    ),
)
