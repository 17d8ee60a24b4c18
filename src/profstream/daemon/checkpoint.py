"""The daemon's durable state: files made to appear whole, and the per-collection checkpoint.

A commit is durable in this order: the window's Parquet part files are written under temporary
names, renamed, and fsynced with their directories, and its layout directory (timeline and CSV
files) is written whole under a temporary name, fsynced and renamed; then the checkpoint (the
pipeline snapshot and the window number) is written to a temporary file, fsynced, renamed over the
old one and the directory fsynced. A crash before the checkpoint rename leaves part files or a
window directory of a window the checkpoint does not name; :func:`drop_uncommitted` deletes them at
the next start, and the pipeline resumed from the snapshot writes that window again. So every row is
in exactly one committed window.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
import zlib
from pathlib import Path
from typing import cast

import msgspec
import pyarrow as pa

from profstream.errors import ProfstreamError

CHECKPOINT_NAME = "checkpoint.msgpack"
#: the daemon's part file names: the window number, zero-padded so names sort by window
PART_NAME = re.compile(r"^part-(\d+)\.parquet$")
#: a window's layout directory (timeline and CSV files of that window's rows)
WINDOW_DIR = re.compile(r"^window-(\d+)$")
#: temporary files of :class:`~profstream.sinks._base.StagedFile` and of :func:`write_atomic`, and
#: layout directories being written
_TEMP = re.compile(r"^\..*\.part$|^\.window-\d+\.tmp$")


def part_name(window: int) -> str:
    return f"part-{window:08d}.parquet"


def window_dir_name(window: int) -> str:
    return f"window-{window:08d}"


class Gap(msgspec.Struct, frozen=True):
    """Raw data lost before the daemon read it: a slice aged (forced) or gone, with its time range.

    ``start``/``end`` are the ``starttime``/``endtime`` of the slice's ``.done`` (the collector's
    own clock values; None when the ``.done`` has no times). ``bytes``, ``start`` and ``end`` are
    None for a slice that vanished while the daemon was down (it never saw the file).
    """

    file: str
    bytes: int | None
    start: int | None
    end: int | None
    reason: str


#: the layout of the operator states a checkpoint holds; raised whenever an operator's snapshot changes
#: (2: session 14's watermark promises and op-tree chain; 3: the L2Cache operator of a device with
#: l2_cache.data, and the row-by-row operators' skipped count; 4: the HbmBandwidth operator of a device
#: with hbm.data; 5: the settled-launch stores as held, text as codes; 6: Memory's name dictionary
#: limit; operator states compressed; 7: Communication's ops keep their node API's thread; 8: FrameworkOps'
#: kernels include communication ops, with their group, OperatorDetails holds ``comm`` batches, and
#: Overlap keeps the first torch op's start; 9: the PythonTracer and GcRecords operators of a collection
#: with torch.python_tracer_func / torch.gc_record, and FrameworkSteps' kernels waiting for their flows;
#: 10: the settled-launch stores at their held integer widths, validity only where a null came; 11:
#: CommAnalysis holds each batch with its arrival; 12: Memory's open GE allocations keep the sequence
#: number of their key's first allocation; 13: FrameworkOps' waiting ops carry their flops text,
#: HostJoin's settled launches their kernel name and memcpy size and operation, HostJoin holds the
#: memcpy_info records still to match, OperatorDetails the kernels of its held ops, and FrameworkOps,
#: FrameworkSteps and OperatorDetails the flow ids of their recent kernels; 14: HostJoin holds
#: tensor_info one row per record with its texts joined, and its device tasks in start order;
#: FrameworkOps' window is one batch in start order), so that another version refuses a checkpoint
#: instead of misreading it
STATE_FORMAT = 14


#: the codec of the operator states in the daemon's snapshots (Arrow's zstd): the state of a 1 GB
#: torch_npu run, 108 MB, becomes 9 MB in 0.09 s; up to three windows in flight hold one each
STATE_CODEC = "zstd"
_SIZE = struct.Struct("<Q")


def compress_state(state: bytes) -> bytes:
    """An operator state as the daemon's snapshots hold it: its size, then the state compressed."""
    return _SIZE.pack(len(state)) + cast(bytes, pa.compress(state, codec=STATE_CODEC, asbytes=True))


def decompress_state(packed: bytes) -> bytes:
    """The inverse of :func:`compress_state`."""
    (size,) = _SIZE.unpack_from(packed)
    return cast(bytes, pa.decompress(memoryview(packed)[_SIZE.size :], size, codec=STATE_CODEC, asbytes=True))


class _Format(msgspec.Struct):
    """The state format of a checkpoint, the rest left undecoded (any version's file has it)."""

    state_format: int


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """What one collection's last commit made durable.

    ``window`` is the last committed window (-1: none); ``snapshot`` the pipeline snapshot after
    it; ``streams`` the stream keys the pipeline was planned with (a restart plans the same ones);
    ``finished`` that the collection is complete and every row committed; ``assumed_syscnt`` the
    torch_npu clock the pipeline was planned on before profiler_info.json existed (None: its own);
    ``snapshot_crc32`` the snapshot's CRC-32, which :func:`save` sets and :func:`load` checks (a
    flipped byte in a compressed operator state can decompress into another valid-looking state).
    """

    state_format: int  #: :data:`STATE_FORMAT` of the profstream that wrote it
    window: int
    snapshot: bytes
    streams: list[str]
    side_bytes: int
    finished: bool = False
    gaps: list[Gap] = msgspec.field(default_factory=list)
    assumed_syscnt: bool | None = None
    snapshot_crc32: int | None = None  # None: written before checkpoints had one


class CheckpointError(ProfstreamError):
    """A checkpoint file exists but cannot be read: the daemon will not guess where to resume."""


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(paths: list[Path]) -> None:
    """Make renamed files and their directory entries durable."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for directory in sorted({p.parent for p in paths}):
        fsync_dir(directory)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: write a temporary file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with temp.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    fsync_dir(path.parent)


def save(path: Path, checkpoint: Checkpoint) -> None:
    checked = msgspec.structs.replace(checkpoint, snapshot_crc32=zlib.crc32(checkpoint.snapshot))
    write_atomic(path, msgspec.msgpack.encode(checked))


def load(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``; None when there is none yet."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    unreadable = f"cannot read the checkpoint {path}: {{}}; move it away to start this collection over"
    try:
        state_format = msgspec.msgpack.decode(blob, type=_Format).state_format
        checkpoint = msgspec.msgpack.decode(blob, type=Checkpoint) if state_format == STATE_FORMAT else None
    except msgspec.DecodeError as err:
        raise CheckpointError(unreadable.format(err)) from err
    if checkpoint is not None:
        found = zlib.crc32(checkpoint.snapshot)
        if checkpoint.snapshot_crc32 not in (None, found):
            said = f"its snapshot's CRC-32 is {found:#010x}, it says {checkpoint.snapshot_crc32:#010x}"
            raise CheckpointError(unreadable.format(said))
        return checkpoint
    msg = (
        f"the checkpoint {path} holds operator state format {state_format}, this profstream"
        f" reads format {STATE_FORMAT}; finish the collection with the version that wrote it, or move"
        " the checkpoint away to start the collection over"
    )
    raise CheckpointError(msg)


def drop_uncommitted(directory: Path, window: int) -> list[Path]:
    """Delete part files and window directories of windows after ``window``, and leftover temporary
    files and directories, under ``directory``."""
    if not directory.exists():
        return []
    dropped = []
    for path in sorted(directory.rglob("*")):  # a directory sorts before what it holds
        if not path.exists():  # inside a directory dropped already
            continue
        match = PART_NAME.match(path.name) or WINDOW_DIR.match(path.name)
        if (match is not None and int(match.group(1)) > window) or _TEMP.match(path.name):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            dropped.append(path)
    return dropped
