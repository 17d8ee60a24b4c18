"""TS track records (``ts_track.data``, ``ts_track.aiv_data``): step trace, flips, block nums, ...

Layouts: specs/cann_raw_formats.md §2.6 ([MSP] ``analysis/msparser/step_trace/
ts_track_parser.py`` and the C structs ``analysis/csrc/domain/services/parser/
parser_item/{step_trace,task_memcpy,task_type,task_flip,task_block_num}_parser_item.h``;
collector header ``TsProfileDataHead`` and timeline record in [COL]
``collector/dvvp/analyze/inc/data_struct.h``).

Every record starts with an 8-byte header: u8 ``mode`` (0 host, 1 device), u8
``rptType`` (the tag), u16 ``bufSize`` (the record length), 4 reserved bytes.

Framing (spec open point 2). The collector's own analyzer walks the stream by
``bufSize``; msprof's ``TstrackParser`` cuts it into fixed 40-byte records. We
walk by ``bufSize`` (``record_size=None``), which gives the same records as
msprof whenever all records are 40 bytes and stays in step when they are not
(tag 3 timeline records are 32 bytes). A header is valid when ``bufSize`` is
between 8 and :data:`MAX_BUF_SIZE` and, for a tag whose size is documented
(:data:`TAG_SIZES`), equal to that size. An invalid header raises under the
``error`` policy (file, byte offset, record index); under ``skip`` it is
counted as one dropped record and decoding resumes at the next byte offset
that holds a plausible header (mode 0/1, a documented tag with its documented
size), so a corrupt length never makes us allocate or skip blindly (the
collector's analyzer discards its whole buffer on a bufSize of 0).

Speed: the walk jumps over runs of 40-byte records with strided views (every
header in the run has ``bufSize`` 40 and a tag that may be 40 bytes long),
checking windows that double in size. Only records outside such runs - mixed
32/40-byte stretches, corrupt headers - are visited one by one by a Python
loop over headers; the fields are then decoded per tag with vectorised views.

Output, one row per record of a tag with a documented layout, in stream
order: ``tag``, ``mode``, ``syscnt`` (device ticks; the struct calls it
timestamp), ``stream_id``, ``task_id`` and the tag's own columns, null on rows
of other tags: ``index_id``, ``model_id``, ``tag_id`` (10), ``task_status``
(11, 12: u8 taskStatus; 3: u16 taskState), ``task_type`` (12, 3),
``flip_num`` (14), ``block_num`` (15), ``thread_id``, ``device_id`` (3).
Ids, as msprof's Python beans read them: step trace, memcpy and task type
declare ``streamId:11`` and msprof takes ``Utils.get_stream_id`` (stream masked
to 11 bits), and so does the timeline record (``TimeLineData``); task-flip
stream ids are kept raw (``TaskFlipBean``, and the C++ ``TaskFlipParseItem``
copies the whole u16), so flips of expanded streams (ids from 2048) stay on
their stream; block-num records get the STARS id reconstruction of §2.0 as
msprof's Python ``BlockNumBean`` does (the C++ ``BlockNum`` struct masks the
stream to 11 bits instead, which would lose the flag bits the reconstruction
needs); chip-V6 step-trace ids are kept raw (V6 step trace: tagId at 32, u16
streamId at 34, u32 taskId at 36, ``StepTraceChipV6``). ``task_id`` is uint32
for all rows so that V6 fits.

Records whose tag has no documented layout (4 AI Core event counts on chip 0,
6 runtime, 7 ts usage, 8/9 core status, 13 old flip) are stepped over by their
``bufSize`` and counted in ``dropped`` (reason "tag without a documented
layout") under both policies, as msprof skips them too.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from profstream.codecs._base import (
    ByteBuffer,
    Codec,
    DecodeContext,
    Decoded,
    StreamTraits,
    batch,
    column,
    named_patterns,
    packed_dtype,
    row_count,
)
from profstream.codecs._ids import legacy_stream_id, reconstruct_ids
from profstream.errors import DecodeError

#: tags (header ``rptType``), [MSP] ``TsTrackTag`` and ``create_runtime_db.py``.
TAG_TIMELINE = 3
TAG_AIC_EVENT_COUNT = 4
TAG_RUNTIME = 6
TAG_TS_USAGE = 7
TAG_AIC_STATUS = 8
TAG_AIV_STATUS = 9
TAG_STEP_TRACE = 10
TAG_TS_MEMCPY = 11
TAG_TASK_TYPE = 12
TAG_TASK_FLIP_OLD = 13
TAG_TASK_FLIP = 14
TAG_BLOCK_NUM = 15

#: step-trace ``tag_id`` values (tag 10), [MSP] ``step_trace_constant.py``.
MODEL_START_TAG = 0
MODEL_END_TAG = 1
FP_START_TAG = 2
BP_END_TAG = 3
ITERATION_END_TAG = 4
MSTX_TAG = 11
ALL_REDUCE_TAGS = range(10000, 20000)  # HCCL start/end tags
GET_NEXT_MIN_TAG = 20000  # get-next tags are >= 20000
STEP_START_TAG = 60000
STEP_END_TAG = 60001
#: task-flip ``flip_num`` that marks a destroyed stream (§4).
FLIP_STREAM_DESTROYED = 65535
#: timeline (tag 3) ``task_status`` values, collector ``TS_TIMELINE_*_TASK_STATE``.
TIMELINE_START, TIMELINE_END, TIMELINE_AIC_START, TIMELINE_AIC_END = 2, 3, 7, 8

HEADER_SIZE = 8
RECORD_SIZE = 40  # tags 10, 11, 12, 14, 15
TIMELINE_SIZE = 32  # tag 3
#: the largest bufSize accepted for any tag: far above every documented size (112).
MAX_BUF_SIZE = 512
#: the bufSize each tag must carry, where the spec documents it.
TAG_SIZES = {
    TAG_TIMELINE: TIMELINE_SIZE,
    TAG_AIC_EVENT_COUNT: 112,
    TAG_STEP_TRACE: RECORD_SIZE,
    TAG_TS_MEMCPY: RECORD_SIZE,
    TAG_TASK_TYPE: RECORD_SIZE,
    TAG_TASK_FLIP: RECORD_SIZE,
    TAG_BLOCK_NUM: RECORD_SIZE,
}

_HEADER = [("mode", "u1"), ("tag", "u1"), ("buf_size", "<u2"), ("_hdr_rsv", "V4")]
STEP_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("index_id", "<u8"),
        ("model_id", "<u8"),
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("tag_id", "<u2"),
        ("_rsv", "V2"),
    ],
    RECORD_SIZE,
)
STEP_V6_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("index_id", "<u8"),
        ("model_id", "<u8"),
        ("tag_id", "<u2"),
        ("stream_id", "<u2"),
        ("task_id", "<u4"),
    ],
    RECORD_SIZE,
)
MEMCPY_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("task_status", "u1"),
        ("_rsv", "V19"),
    ],
    RECORD_SIZE,
)
TASK_TYPE_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("task_type", "<u2"),
        ("task_status", "u1"),
        ("_rsv", "V17"),
    ],
    RECORD_SIZE,
)
FLIP_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("stream_id", "<u2"),
        ("flip_num", "<u2"),
        ("_rsv0", "V2"),
        ("task_id", "<u2"),
        ("_rsv1", "V16"),
    ],
    RECORD_SIZE,
)
BLOCK_NUM_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("syscnt", "<u8"),
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("block_num", "<u4"),
        ("_rsv", "V16"),
    ],
    RECORD_SIZE,
)
TIMELINE_DTYPE = packed_dtype(
    [
        *_HEADER,
        ("task_type", "<u2"),
        ("task_status", "<u2"),  # the collector's taskState
        ("stream_id", "<u2"),
        ("task_id", "<u2"),
        ("syscnt", "<u8"),
        ("thread_id", "<u4"),
        ("device_id", "<u4"),
    ],
    TIMELINE_SIZE,
)

#: how a layout's raw ids become stream_id / task_id: "raw" as stored, "masked"
#: stream to 11 bits (msprof's ``Utils.get_stream_id``), "stars" the §2.0 reconstruction.
IdRule = Literal["raw", "masked", "stars"]
LAYOUTS: dict[int, tuple[np.dtype[Any], IdRule]] = {
    TAG_TIMELINE: (TIMELINE_DTYPE, "masked"),
    TAG_STEP_TRACE: (STEP_DTYPE, "masked"),
    TAG_TS_MEMCPY: (MEMCPY_DTYPE, "masked"),
    TAG_TASK_TYPE: (TASK_TYPE_DTYPE, "masked"),
    TAG_TASK_FLIP: (FLIP_DTYPE, "raw"),
    TAG_BLOCK_NUM: (BLOCK_NUM_DTYPE, "stars"),
}
LAYOUTS_V6 = {**LAYOUTS, TAG_STEP_TRACE: (STEP_V6_DTYPE, "raw")}

COLUMNS: dict[str, type[np.unsignedinteger[Any]]] = {
    "tag": np.uint8,
    "mode": np.uint8,
    "syscnt": np.uint64,
    "stream_id": np.uint16,
    "task_id": np.uint32,
    "index_id": np.uint64,
    "model_id": np.uint64,
    "tag_id": np.uint16,
    "task_status": np.uint16,
    "task_type": np.uint16,
    "flip_num": np.uint16,
    "block_num": np.uint32,
    "thread_id": np.uint32,
    "device_id": np.uint32,
}
_ID_COLUMNS = ("stream_id", "task_id")
_TAG_COLUMNS = tuple(name for name in COLUMNS if name not in ("tag", "mode", "syscnt", *_ID_COLUMNS))

_EXPECTED = np.zeros(256, np.int64)  # documented bufSize per tag, 0 = not documented
for _tag, _size in TAG_SIZES.items():
    _EXPECTED[_tag] = _size
_EXPECTED_LIST: list[int] = _EXPECTED.tolist()
_IN_40_RUN = (_EXPECTED == 0) | (_EXPECTED == RECORD_SIZE)  # tags a run of 40-byte records may hold
_HEADER_STRUCT = struct.Struct("<BBH")
_FIRST_RUN_WINDOW = 64  # records checked by the first strided look; doubles while the run goes on
_MAX_RUN_WINDOW = 1 << 16
_STREAK = 16  # consecutive 40-byte records seen by the loop before it tries a strided run again


def _run_of_40(buf: ByteBuffer, start: int) -> int:
    """How many records from ``start`` on are 40-byte records that the walk would accept as is."""
    count, window = 0, _FIRST_RUN_WINDOW
    while True:
        k = min(window, (len(buf) - start) // RECORD_SIZE)
        if k == 0:
            return count
        head = buf[start : start + k * RECORD_SIZE].reshape(k, RECORD_SIZE)
        good = (head[:, 2] == RECORD_SIZE) & (head[:, 3] == 0) & _IN_40_RUN[head[:, 1]]
        run = k if good.all() else int(np.argmin(good))
        count += run
        start += run * RECORD_SIZE
        if run < k:
            return count
        window = min(2 * window, _MAX_RUN_WINDOW)


def _walk(buf: ByteBuffer, ctx: DecodeContext) -> tuple[npt.NDArray[np.int64], int, int]:
    """Offsets of the whole, well-framed records of ``buf``; bytes consumed; invalid headers skipped.

    ``buf`` must be C-contiguous (headers are read through its buffer).
    """
    n, pos, streak, walked, invalid = len(buf), 0, _STREAK, 0, 0
    chunks: list[npt.NDArray[np.int64]] = []
    singles: list[int] = []
    plausible: npt.NDArray[np.bool_] | None = None
    view = buf.data
    while pos + 4 <= n:
        if streak >= _STREAK:
            streak = 0
            run = _run_of_40(buf, pos)
            if run:
                chunks += [np.asarray(singles, np.int64), pos + RECORD_SIZE * np.arange(run, dtype=np.int64)]
                singles = []
                walked += run
                pos += run * RECORD_SIZE
                continue
        _, tag, size = _HEADER_STRUCT.unpack_from(view, pos)
        expected = _EXPECTED_LIST[tag]
        if HEADER_SIZE <= size <= MAX_BUF_SIZE and (not expected or size == expected):
            if pos + size > n:
                break  # straddles the end of the buffer: left for the next one
            singles.append(pos)
            walked += 1
            pos += size
            streak = streak + 1 if size == RECORD_SIZE else 0
            continue
        if ctx.on_invalid == "error":
            wanted = f"{expected}" if expected else f"between {HEADER_SIZE} and {MAX_BUF_SIZE}"
            msg = f"ts_track: expected bufSize {wanted} for tag {tag} at bytes 2-3, found {size}"
            raise DecodeError(
                msg,
                path=ctx.path,
                offset=ctx.offset + pos,
                record_index=ctx.record_index + walked,
                family="ts_track",
            )
        invalid += 1
        walked += 1
        if plausible is None:
            plausible = _plausible_headers(buf)
        rest = plausible[pos + 1 :]
        pos = pos + 1 + int(np.argmax(rest)) if rest.any() else len(plausible)
    return np.concatenate([*chunks, np.asarray(singles, np.int64)]), pos, invalid


def _plausible_headers(buf: ByteBuffer) -> npt.NDArray[np.bool_]:
    """Per byte offset holding a whole 4-byte header: mode 0/1 and a documented tag with its size."""
    last = len(buf) - 3
    sizes = buf[2 : last + 2].astype(np.int64) | (buf[3 : last + 3].astype(np.int64) << 8)
    expected: npt.NDArray[np.int64] = _EXPECTED[buf[1 : last + 1]]
    plausible: npt.NDArray[np.bool_] = (buf[:last] <= 1) & (expected != 0) & (expected == sizes)
    return plausible


def decode(buf: ByteBuffer, ctx: DecodeContext) -> Decoded:
    data = np.ascontiguousarray(buf)
    offsets, consumed, invalid = _walk(data, ctx)
    tags = data[offsets + 1]
    layouts = LAYOUTS_V6 if ctx.traits.is_v6 else LAYOUTS
    documented = np.isin(tags, list(layouts))
    undocumented = len(tags) - int(documented.sum())
    offsets, tags = offsets[documented], tags[documented]
    n = len(offsets)
    values = {name: np.zeros(n, dtype) for name, dtype in COLUMNS.items()}
    present = {name: np.zeros(n, np.bool_) for name in _TAG_COLUMNS}
    values["tag"], values["mode"] = tags, data[offsets]
    for tag, (dtype, rule) in layouts.items():
        rows = np.flatnonzero(tags == tag)
        if not len(rows):
            continue
        windows = np.lib.stride_tricks.sliding_window_view(data, dtype.itemsize)
        records = windows[offsets[rows]].view(dtype).reshape(-1)
        stream, task = _ids(records["stream_id"], records["task_id"], rule, ctx.traits)
        values["stream_id"][rows], values["task_id"][rows] = stream, task
        values["syscnt"][rows] = records["syscnt"]
        for name in _TAG_COLUMNS:
            if name in (dtype.names or ()):
                values[name][rows] = records[name]
                present[name][rows] = True
    out = batch(
        {
            name: pa.array(array, mask=~present[name]) if name in present else array
            for name, array in values.items()
        }
    )
    reasons = [
        reason
        for count, reason in ((invalid, "bad bufSize"), (undocumented, "tag without a documented layout"))
        if count
    ]
    return Decoded(out, consumed, invalid + undocumented, "; ".join(reasons))


def _ids(
    stream: npt.NDArray[Any], task: npt.NDArray[Any], rule: IdRule, traits: StreamTraits
) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint32]]:
    if rule == "stars":
        return reconstruct_ids(stream, task, traits)
    task32 = task.astype(np.uint32)
    if rule == "masked":
        return legacy_stream_id(stream), task32
    return stream.astype(np.uint16), task32


def encode(columns: Mapping[str, Any], *, v6: bool = False) -> bytes:
    """Records in stream order; ``v6`` selects the chip-V6 step-trace layout.

    Ids are written as given (the identity case of the block-num id packing);
    stream ids of the 40-byte layouts are masked to their 11 bits.
    """
    n = row_count(columns)
    tags = column(columns, "tag", n, np.uint8)
    layouts = LAYOUTS_V6 if v6 else LAYOUTS
    unknown = np.setdiff1d(tags, list(layouts))
    if len(unknown):
        msg = f"ts_track encode: no layout for tag {int(unknown[0])}; known tags {sorted(layouts)}"
        raise ValueError(msg)
    rows = np.zeros((n, RECORD_SIZE), np.uint8)
    sizes = np.zeros(n, np.int64)
    for tag, (dtype, rule) in layouts.items():
        picked = np.flatnonzero(tags == tag)
        records = np.zeros(len(picked), dtype)
        records["tag"], records["buf_size"] = tag, dtype.itemsize
        for name in dtype.names or ():
            if name in COLUMNS and name != "tag":
                records[name] = column(columns, name, n, np.uint64)[picked].astype(dtype[name])
        if rule == "masked":
            records["stream_id"] &= 0x7FF
        rows[picked, : dtype.itemsize] = records.view(np.uint8).reshape(-1, dtype.itemsize)
        sizes[picked] = dtype.itemsize
    return rows[np.arange(RECORD_SIZE) < sizes[:, None]].tobytes()


TS_TRACK = Codec(
    family="ts_track",
    side="device",
    patterns=named_patterns(
        r"^ts_track\.data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
        r"^ts_track\.data\.\d+\.dev\.profiler_default_tag\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$",
        r"^ts_track\.data\.\d+\.(?P<dev>\d+)\.(?P<slice>\d+)$",
    ),
    decode=decode,
    encode=encode,
    record_size=None,
    description="TS track: step trace, task type/flip/block num, timeline",
)

TS_TRACK_AIV = Codec(
    family="ts_track_aiv",
    side="device",
    patterns=named_patterns(r"^ts_track\.aiv_data\.(?P<dev>\d+)\.slice_(?P<slice>\d+)$"),
    decode=decode,
    encode=encode,
    record_size=None,
    description="TS track of the AI Vector cores",
)

CODECS = (TS_TRACK, TS_TRACK_AIV)
