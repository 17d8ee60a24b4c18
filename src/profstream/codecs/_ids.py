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

The rules are written once, for one record (:func:`true_ids`), so the codecs'
single-pass kernels inline them; :func:`reconstruct_ids` applies them to arrays.
numba's cache does not see a change to :func:`true_ids` from the modules that
inline it: after editing it, delete ``codecs/__pycache__/*.nbi`` and ``*.nbc``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from profstream._numba import inline, kernel
from profstream.codecs._base import STARS_PLATFORMS, StreamTraits

StreamIds = npt.NDArray[np.uint16]
TaskIds = npt.NDArray[np.uint32]

STREAM_ID_MODULUS = 2048
#: SQE types whose ids are never packed when stream expand is on.
PLACE_HOLDER_SQE, EVENT_RECORD_SQE = 3, 4
#: which rule of the module docstring applies (see :func:`id_rule`).
LEGACY, PACKED, EXPANDED, UNIQUE = range(4)


def id_rule(traits: StreamTraits) -> int:
    """The id rule of a collection with ``traits``: LEGACY, PACKED, EXPANDED or UNIQUE."""
    if traits.is_v6:
        return UNIQUE
    if traits.platform is not None and traits.platform not in STARS_PLATFORMS:
        return LEGACY
    return EXPANDED if traits.stream_expand else PACKED


@inline
def true_ids(stream: int, task: int, sqe_type: int, rule: int) -> tuple[int, int]:
    """``(stream_id, task_id)`` of one record's raw ids under ``rule``.

    The caller stores the stream as uint16 and the task as uint32, which truncates the
    UNIQUE rule's values exactly as the array form does.
    """
    if rule == UNIQUE:
        return stream, (task << 16) | stream
    if rule == LEGACY:
        return stream % STREAM_ID_MODULUS, task
    if rule == EXPANDED:
        if stream & 0x8000 and sqe_type not in (PLACE_HOLDER_SQE, EVENT_RECORD_SQE):
            return task & 0x7FFF, (task & 0x8000) | (stream & 0x7FFF)
        return stream & 0x7FFF, task
    # PACKED: selects rather than branches, as the flag bits vary record by record
    high = (task & 0x1FFF) | (stream & 0xE000)
    swapped = (stream & 0x2000) != 0 and (stream & 0x1000) == 0
    low = (stream & 0x0FFF) | (task & 0xF000) if swapped else task
    return (task & 0x0FFF if swapped else stream) % STREAM_ID_MODULUS, high if stream & 0x1000 else low


@kernel
def _apply(  # noqa: PLR0917 (numba kernels take their arrays positionally)
    stream: npt.NDArray[np.int64],
    task: npt.NDArray[np.int64],
    sqe_type: npt.NDArray[np.int64],
    rule: int,
    stream_out: StreamIds,
    task_out: TaskIds,
) -> None:
    for i in range(len(stream)):
        stream_out[i], task_out[i] = true_ids(stream[i], task[i], sqe_type[i], rule)


def legacy_stream_id(stream_raw: npt.ArrayLike) -> StreamIds:
    """Stream ids of non-STARS records: the raw value ``% 2048``."""
    return (np.asarray(stream_raw) % STREAM_ID_MODULUS).astype(np.uint16)


def unique_ids(stream_raw: npt.ArrayLike, task_raw: npt.ArrayLike) -> tuple[StreamIds, TaskIds]:
    """Chip V6 ids: the stream as is, the task as ``(task << 16) | stream``."""
    return _ids(stream_raw, task_raw, None, UNIQUE)


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
    return _ids(stream_raw, task_raw, sqe_type, id_rule(traits))


def _ids(
    stream_raw: npt.ArrayLike, task_raw: npt.ArrayLike, sqe_type: npt.ArrayLike | None, rule: int
) -> tuple[StreamIds, TaskIds]:
    stream = _int64(stream_raw)
    count = len(stream)
    sqe = np.zeros(count, np.int64) if sqe_type is None else _int64(sqe_type)
    stream_out, task_out = np.empty(count, np.uint16), np.empty(count, np.uint32)
    _apply(stream, _int64(task_raw), sqe, rule, stream_out, task_out)
    return stream_out, task_out


def _int64(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Raw ids as one contiguous int64 array, so the kernel is compiled for one type only."""
    array: npt.NDArray[Any] = np.ascontiguousarray(values, dtype=np.int64)
    return array
