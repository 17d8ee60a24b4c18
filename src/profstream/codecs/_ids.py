"""Stream and task ids of device records: undoing the hardware's id packing.

specs/cann_raw_formats.md §2.0 ([MSP] ``analysis/csrc/domain/services/parser/
parser_item/stars_common.h``, Python twin ``analysis/profiling_bean/stars/
stars_common.py``). Device logs carry a raw u16 ``streamId`` and u16
``taskId``; on STARS chips flag bits in the stream id say how the true ids are
spread over the two fields:

- stream expand off (default): bit 12 of the stream set -> task = low 13 bits
  of the task | high 3 bits of the stream; else bit 13 set -> the low 12 bits
  of stream and task are swapped (task keeps its high 4 bits); the stream is
  then taken ``% 2048``;
- stream expand on (``expand_stream_spec`` expandStatus 1): bit 15 of the
  stream set -> stream = task & 0x7FFF and task = (task & 0x8000) |
  (stream & 0x7FFF); SQE types 3 (PLACE_HOLDER) and 4 (EVENT_RECORD) are
  exempt; the PMU parsers pass SQE type 0;
- chip V6 (platform 15/16): no flag bits; the stream stays, the task id is the
  unique 32-bit id ``(task << 16) | stream``;
- chips without STARS (HWTS, task-based AI Core PMU, ts_track on chips 1-4):
  stream ``% 2048``, task unchanged (``Utils.get_stream_id``).

Task ids are returned as uint32 for every rule, so that V6 and non-V6 batches
share one schema; stream ids are uint16. When ``traits.platform`` is unknown
the STARS rules are used: every STARS-family file implies a STARS chip, and for
stream ids below 0x1000 they agree with the ``% 2048`` rule anyway.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profstream.codecs._base import STARS_PLATFORMS, StreamTraits

U32 = npt.NDArray[np.uint32]
StreamIds = npt.NDArray[np.uint16]
TaskIds = npt.NDArray[np.uint32]

STREAM_ID_MODULUS = 2048
#: SQE types whose ids are never packed when stream expand is on.
PLACE_HOLDER_SQE, EVENT_RECORD_SQE = 3, 4


def legacy_stream_id(stream_raw: npt.ArrayLike) -> StreamIds:
    """Stream ids of non-STARS records: the raw value ``% 2048``."""
    return (np.asarray(stream_raw) % STREAM_ID_MODULUS).astype(np.uint16)


def unique_ids(stream_raw: npt.ArrayLike, task_raw: npt.ArrayLike) -> tuple[StreamIds, TaskIds]:
    """Chip V6 ids: the stream as is, the task as ``(task << 16) | stream``."""
    stream = np.asarray(stream_raw).astype(np.uint32)
    task = np.asarray(task_raw).astype(np.uint32)
    return stream.astype(np.uint16), (task << np.uint32(16)) | stream


def reconstruct_ids(
    stream_raw: npt.ArrayLike,
    task_raw: npt.ArrayLike,
    traits: StreamTraits,
    sqe_type: npt.ArrayLike | None = None,
) -> tuple[StreamIds, TaskIds]:
    """True ``(stream_id, task_id)`` of raw u16 ids for a collection with ``traits``.

    ``sqe_type`` (the record's SQE type, header bits 10-15) only matters when
    stream expand is on; ``None`` means SQE type 0, as the PMU parsers use.
    """
    if traits.is_v6:
        return unique_ids(stream_raw, task_raw)
    stream = np.asarray(stream_raw).astype(np.uint32)
    task = np.asarray(task_raw).astype(np.uint32)
    if traits.platform is not None and traits.platform not in STARS_PLATFORMS:
        return legacy_stream_id(stream), task
    if traits.stream_expand:
        return _expanded(stream, task, sqe_type)
    return _packed(stream, task)


def _packed(stream: U32, task: U32) -> tuple[StreamIds, TaskIds]:
    """Stream expand off: the 0x1000 / 0x2000 flag rules."""
    bit12 = (stream & 0x1000) != 0
    bit13 = ~bit12 & ((stream & 0x2000) != 0)
    new_task = np.where(bit12, (task & 0x1FFF) | (stream & 0xE000), task)
    new_task = np.where(bit13, (stream & 0x0FFF) | (task & 0xF000), new_task)
    new_stream = np.where(bit13, task & 0x0FFF, stream)
    return legacy_stream_id(new_stream), new_task.astype(np.uint32)


def _expanded(stream: U32, task: U32, sqe_type: npt.ArrayLike | None) -> tuple[StreamIds, TaskIds]:
    """Stream expand on: the 0x8000 rule, SQE types 3 and 4 exempt."""
    swapped = (stream & 0x8000) != 0
    if sqe_type is not None:
        swapped &= ~np.isin(np.asarray(sqe_type), (PLACE_HOLDER_SQE, EVENT_RECORD_SQE))
    new_stream = np.where(swapped, task & 0x7FFF, stream & 0x7FFF)
    new_task = np.where(swapped, (task & 0x8000) | (stream & 0x7FFF), task)
    return new_stream.astype(np.uint16), new_task.astype(np.uint32)
