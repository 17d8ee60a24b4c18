"""Finding every rank of a cluster run and its rank id.

A *rank directory* is one ``*_ascend_pt`` / ``*_ascend_ms`` directory (torch_npu / MindSpore: one
per process, so one per rank) or one ``PROF_XXX`` directory that is not inside such a directory
(a plain ``msprof`` collection). The search descends from the input directory, stops at the first
rank directory on each path, and goes at most :data:`MAX_DEPTH` levels down.

Each rank directory is either *raw* (it holds a ``PROF_XXX`` with ``host``/``device_N`` data, run
through the engine pipeline) or *exported* (only ``ASCEND_PROFILER_OUTPUT/`` or
``mindstudio_profiler_output/``, read back with :mod:`profstream.engine.imports` and the
``communication*.json`` files). When both are there, the raw data wins: it is complete, while an
export depends on the options it was made with.

Rank id, first found (framework_outputs.md §3.8, §4d — msprof-analyze takes it from
``profiler_info_<rank>.json``):

1. the ``<rank>`` in a ``profiler_info_<rank>.json`` file name;
2. the ``rank_id`` field of ``profiler_info*.json`` when it is not -1;
3. the ``rank_id`` of the PROF dir's ``host/info.json`` (or else of the first ``device_N/info.json.N``)
   when it is not -1.

Choices where the tools differ or say nothing:

* No rank id in *any* rank directory (a single-process run per directory, ``RANK`` unset): the
  ranks are numbered 0, 1, ... in path order and the numbering is logged. msprof-analyze would skip
  such directories; numbering them keeps the analysis usable and is visible in the log.
* Some directories with and some without a rank id: an :class:`InputPathError` naming the
  directories without one (a silent guess could collide with a real rank).
* Two directories with the same rank id: an :class:`InputPathError` naming both. msprof-analyze
  keeps the one with the newest timestamp in its name; here a duplicate is more likely two runs
  mixed in one directory, which the user should resolve.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from profstream import events
from profstream.engine.metadata import PROFILER_INFO_NAME
from profstream.errors import InputPathError

#: levels below the input searched for rank directories
MAX_DEPTH = 4
FRAMEWORK_RUN = re.compile(r".+_ascend_(pt|ms)$")
PROF_DIR = re.compile(r"^PROF_")
EXPORT_DIRS = ("ASCEND_PROFILER_OUTPUT", "mindstudio_profiler_output")
DEVICE_DIR = re.compile(r"^device_\d+$")

RankKind = Literal["raw", "exported"]


@dataclass(frozen=True, slots=True, order=True)
class RankDir:
    """One rank's directory, how it is read, and where its rank id came from."""

    rank: int
    path: Path
    kind: RankKind
    rank_source: str  # the file the rank id was read from, or "path order"


class _RankId(msgspec.Struct):
    rank_id: int = -1


def find_ranks(root: Path | str) -> list[RankDir]:
    """Every rank directory under ``root`` with its rank id, sorted by rank (see the module docstring)."""
    root = Path(root)
    if not root.is_dir():
        msg = f"cluster input {root} is not a directory"
        raise InputPathError(msg)
    candidates = [(path, kind) for path in _rank_dirs(root, 0) if (kind := _kind(path)) is not None]
    if not candidates:
        msg = (
            f"no rank directories under {root}: expected *_ascend_pt or PROF_XXX directories with raw data "
            f"or an {' / '.join(EXPORT_DIRS)} export"
        )
        raise InputPathError(msg)
    found = [(path, kind, *_rank_id(path)) for path, kind in candidates]
    missing = [path for path, _, rank, _ in found if rank is None]
    log = events.get_logger(component="cluster.discovery")
    if missing and len(missing) < len(found):
        listed = ", ".join(str(p) for p in missing)
        msg = f"no rank id (profiler_info_<rank>.json or info.json rank_id) in {listed}"
        raise InputPathError(msg)
    if missing:
        log.warning(events.RANKS_NUMBERED, ranks=len(found), root=str(root))
        return [RankDir(i, path, kind, "path order") for i, (path, kind, _, _) in enumerate(found)]
    ranks: dict[int, RankDir] = {}
    for path, kind, rank, source in ((p, k, r, s) for p, k, r, s in found if r is not None):
        if rank in ranks:
            msg = f"rank {rank} appears twice: {ranks[rank].path} and {path}"
            raise InputPathError(msg)
        ranks[rank] = RankDir(rank, path, kind, source)
    return sorted(ranks.values())


def _rank_dirs(directory: Path, depth: int) -> list[Path]:
    """Rank directories at or below ``directory``, in path order."""
    if FRAMEWORK_RUN.match(directory.name) or PROF_DIR.match(directory.name):
        return [directory]
    if depth >= MAX_DEPTH:
        return []
    found = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            found += _rank_dirs(Path(entry.path), depth + 1)
    return found


def _prof_dirs(path: Path) -> list[Path]:
    """The PROF dirs of a rank directory with host or device data (itself, if it is one)."""
    candidates = [path] if PROF_DIR.match(path.name) else sorted(path.glob("PROF_*"))
    return [p for p in candidates if (p / "host").is_dir() or any(_device_dirs(p))]


def _device_dirs(prof: Path) -> list[Path]:
    return sorted(p for p in prof.iterdir() if p.is_dir() and DEVICE_DIR.match(p.name))


def _kind(path: Path) -> RankKind | None:
    if _prof_dirs(path):
        return "raw"
    exported = [path / name for name in EXPORT_DIRS] + [p / EXPORT_DIRS[1] for p in path.glob("PROF_*")]
    return "exported" if any(p.is_dir() for p in exported) else None


def _rank_id(path: Path) -> tuple[int | None, str]:
    """The rank id of a rank directory and the file it came from; None when no file has one."""
    infos = sorted(p for p in path.iterdir() if PROFILER_INFO_NAME.match(p.name)) if path.is_dir() else []
    for info in infos:
        match = PROFILER_INFO_NAME.match(info.name)
        if match and match.group("rank") is not None:
            return int(match.group("rank")), str(info)
    for info in infos:
        rank = _read_rank(info)
        if rank >= 0:
            return rank, str(info)
    for prof in _prof_dirs(path):
        for info in [
            prof / "host" / "info.json",
            *(d / f"info.json.{d.name[7:]}" for d in _device_dirs(prof)),
        ]:
            if info.is_file() and (rank := _read_rank(info)) >= 0:
                return rank, str(info)
    return None, ""


def _read_rank(path: Path) -> int:
    """``rank_id`` of a JSON control file (-1 when absent); a file that is not JSON is an error."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=_RankId).rank_id
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        msg = f"cannot read rank_id from {path}: {err}"
        raise InputPathError(msg) from err
