"""Builders of small PROF_XXX trees for the engine tests, from real control files and HWTS bytes."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from profstream.codecs import hwts

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
PT_310B = (
    REALDATA / "dora-robo-310b-torchnpu/export_only_prof_dir/orangepiaipro_18323_20251121182720764_ascend_pt"
)
PROF_310B = PT_310B / "PROF_000001_20251121182720782_DLGNOIPHQIDIELOB"
PROF_910 = REALDATA / "mindinsight-prof-2023-910-timeline/PROF_000001_20230818142704322_COJGGGCANRMICFBC"
PROF_910_RANK1 = (
    REALDATA / "mindinsight-prof-2023-910-timeline/PROF_000001_20230818142704567_GQFAMHBKGODKJMLA"
)
PT_910B = REALDATA / "msinsight-torchnpu-910b"

needs_realdata = pytest.mark.skipif(not PROF_310B.is_dir(), reason="shared/realdata is not checked out")

HOST_FILES = ("info.json", "sample.json", "start_info", "end_info")
DEVICE_FILES = (
    "info.json.0",
    "sample.json",
    "start_info.0",
    "end_info.0",
    "host_start.log.0",
    "dev_start.log.0",
)


def make_prof(parent: Path, name: str = "PROF_000001_TEST", devices: tuple[int, ...] = (0,)) -> Path:
    """A PROF dir with the real 310B control files in host/ and device_N/, and empty data/ dirs."""
    prof = parent / name
    host = prof / "host"
    (host / "data").mkdir(parents=True)
    for file in HOST_FILES:
        shutil.copy(PROF_310B / "host" / file, host / file)
    for device in devices:
        target = prof / f"device_{device}"
        (target / "data").mkdir(parents=True)
        for file in DEVICE_FILES:
            text = (PROF_310B / "device_0" / file).read_text()
            if file.startswith("host_start"):
                text = text.replace("[Device0]", f"[Device{device}]")
            name = f"{file[:-2]}.{device}" if file.endswith(".0") else file
            (target / name).write_text(text)
    return prof


def make_ascend_pt(parent: Path, name: str = "host_1_20250101000000000_ascend_pt") -> Path:
    """An ``*_ascend_pt`` dir: a PROF dir, FRAMEWORK/ and the real 310B profiler_info.json."""
    pt = parent / name
    pt.mkdir(parents=True)
    make_prof(pt)
    (pt / "FRAMEWORK").mkdir()
    shutil.copy(PT_310B / "profiler_info.json", pt / "profiler_info.json")
    return pt


def hwts_records(count: int, *, first_task: int = 0, first_cnt: int = 0, syscnt0: int = 1000) -> bytes:
    """``count`` valid HWTS records: task ids and syscnt ascending, counter stepping by one."""
    task = np.arange(first_task, first_task + count, dtype=np.uint16)
    return hwts.encode(
        {
            "task_id": task,
            "cnt": ((np.arange(count) + first_cnt) % 16).astype(np.uint8),
            "syscnt": (syscnt0 + 10 * np.arange(count)).astype(np.uint64),
            "stream_id": np.full(count, 3, np.uint16),
        }
    )


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given byte offsets."""
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]
