"""Discovery: the four entry shapes, stream grouping and order, traits, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from profstream import events
from profstream.codecs import CODECS, get_codec
from profstream.engine.discovery import Discovery, discover, file_kind
from profstream.errors import DecodeError, InputPathError
from tests.engine.profdirs import hwts_records, make_ascend_pt, make_prof, needs_realdata

pytestmark = needs_realdata


def test_entry_prof_dir(tmp_path: Path) -> None:
    """A PROF dir on its own: one profile, host + device_0, no framework (it lies outside the input)."""
    pt = make_ascend_pt(tmp_path)
    prof = next(pt.glob("PROF_*"))
    (profile,) = discover(prof)
    assert profile.path == prof.resolve()
    assert profile.host is not None
    assert [d.device_id for d in profile.devices] == [0]
    assert profile.framework is None
    assert profile.profiler_info is None


def test_entry_parent_dir(tmp_path: Path) -> None:
    """The parent of PROF dirs: every PROF dir below it."""
    make_prof(tmp_path / "runs", "PROF_000001_A")
    make_prof(tmp_path / "runs", "PROF_000002_B", devices=(0, 3))
    profiles = discover(tmp_path / "runs")
    assert [p.path.name for p in profiles] == ["PROF_000001_A", "PROF_000002_B"]
    assert [d.device_id for d in profiles[1].devices] == [0, 3]
    meta = profiles[1].device(3).metadata
    assert meta is not None
    assert meta.host_start is not None
    assert meta.host_start.section == "Device3"


def test_entry_ascend_pt_dir(tmp_path: Path) -> None:
    """An *_ascend_pt dir: its PROF dir plus FRAMEWORK/ and profiler_info.json beside it."""
    pt = make_ascend_pt(tmp_path)
    (pt / "FRAMEWORK" / "torch.op_range").write_bytes(b"")
    (profile,) = discover(pt)
    assert profile.framework is not None
    assert [s.family for s in profile.framework.streams] == ["torch_op_range"]
    assert profile.profiler_info is not None
    assert profile.profiler_info.cann_version == "8.3.RC1"
    assert profile.framework_clock().start_cnt == 1129056766461


def test_entry_dir_of_many(tmp_path: Path) -> None:
    """A cluster dir of several *_ascend_pt dirs: one profile each, each with its framework dir."""
    for rank in range(3):
        make_ascend_pt(tmp_path / "cluster", f"rank{rank}_ascend_pt")
    profiles = discover(tmp_path / "cluster")
    assert [p.path.parent.name for p in profiles] == ["rank0_ascend_pt", "rank1_ascend_pt", "rank2_ascend_pt"]
    assert all(p.framework is not None for p in profiles)


def test_no_profile_found(tmp_path: Path) -> None:
    """A dir with nothing that looks like a PROF dir, or a missing path, is an InputPathError."""
    (tmp_path / "empty" / "a" / "b").mkdir(parents=True)
    with pytest.raises(InputPathError, match="no PROF_XXX"):
        discover(tmp_path / "empty")
    with pytest.raises(InputPathError, match="no such"):
        discover(tmp_path / "missing")


def test_device_slices_order_and_grouping(tmp_path: Path) -> None:
    """hwts slices sort by the number after the last '_' (slice_10 after slice_2); markers are skipped."""
    prof = make_prof(tmp_path)
    data = prof / "device_0" / "data"
    for n in (10, 2, 0, 1):
        (data / f"hwts.data.0.slice_{n}").write_bytes(hwts_records(1))
    (data / "hwts.data.0.slice_2.done").write_text("filesize:64\n")
    (data / "hwts.aiv_data.0.slice_0").write_bytes(hwts_records(1))
    (data / "all_file.complete").write_text("")
    (profile,) = discover(prof)
    device = profile.device(0)
    assert [s.family for s in device.streams] == ["hwts", "hwts_aiv"]
    stream = device.stream("hwts")
    assert stream is not None
    assert [f.name for f in stream.files] == [f"hwts.data.0.slice_{n}" for n in (0, 1, 2, 10)]
    assert [f.slice for f in stream.files] == [0, 1, 2, 10]
    assert stream.device_id == 0
    assert stream.aging is None


def test_host_aging_groups_unaging_first(tmp_path: Path) -> None:
    """Host files form one stream per aging group, unaging before aging."""
    prof = make_prof(tmp_path)
    data = prof / "host" / "data"
    for group in ("aging", "unaging"):
        for n in (1, 0):
            (data / f"{group}.compact.node_basic_info.slice_{n}").write_bytes(b"")
    (profile,) = discover(prof)
    assert profile.host is not None
    streams = [s for s in profile.host.streams if s.family == "node_basic_info"]
    assert [s.aging for s in streams] == [False, True]
    assert [f.name for f in streams[0].files] == [
        f"unaging.compact.node_basic_info.slice_{n}" for n in (0, 1)
    ]


def test_unknown_names_logged_once(tmp_path: Path) -> None:
    """An unknown data file is ignored and logged once, even when the same Discovery scans again."""
    prof = make_prof(tmp_path)
    (prof / "device_0" / "data" / "mystery.bin").write_bytes(b"x")
    finder = Discovery(prof)
    with capture_logs() as logs:
        finder.profiles()
        finder.profiles()
    ignored = [e for e in logs if e["event"] == events.FILE_IGNORED]
    assert len(ignored) == 1
    assert ignored[0]["file"].endswith("mystery.bin")


def test_files_no_codec_reads_are_kept_per_dir(tmp_path: Path) -> None:
    """Data files of families without a codec (ddr, llc) are listed by their dir, not dropped unseen."""
    pt = make_ascend_pt(tmp_path)
    [prof] = pt.glob("PROF_*")
    device = prof / "device_0" / "data"
    for name in ("ddr.data.0.slice_0", "ddr.data.0.slice_1", "llc.data.0.slice_0"):
        (device / name).write_bytes(b"\0" * 24)
    (device / "ddr.data.0.slice_0.done").write_text("")  # a marker is not data
    (prof / "host" / "data" / "unaging.additional.mystery.slice_0").write_bytes(b"x")
    (device / "hwts.data.0.slice_0").write_bytes(hwts_records(2))
    (pt / "FRAMEWORK" / "torch.unknown_kind").write_bytes(b"x")
    [profile] = discover(pt)
    assert [p.name for p in profile.device(0).not_decoded] == [
        "ddr.data.0.slice_0",
        "ddr.data.0.slice_1",
        "llc.data.0.slice_0",
    ]
    assert [s.family for s in profile.device(0).streams] == ["hwts"]
    assert profile.host is not None and profile.framework is not None
    assert [p.name for p in profile.host.not_decoded] == ["unaging.additional.mystery.slice_0"]
    assert [p.name for p in profile.framework.not_decoded] == ["torch.unknown_kind"]
    assert {p.name for p in profile.not_decoded} == {
        "ddr.data.0.slice_0",
        "ddr.data.0.slice_1",
        "llc.data.0.slice_0",
        "unaging.additional.mystery.slice_0",
        "torch.unknown_kind",
    }


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ddr.data.0.slice_3", "ddr.data"),
        ("llc.data.12.slice_10", "llc.data"),
        ("aging.additional.mystery.slice_0", "aging.additional.mystery"),
        ("torch.op_range", "torch.op_range"),
    ],
)
def test_file_kind_drops_device_and_slice(name: str, kind: str) -> None:
    assert file_kind(name) == kind


@pytest.mark.parametrize(
    ("aic_mode", "aiv_mode"), [("sample-based", "task-based"), ("task-based", "sample-based")]
)
def test_traits_from_metadata(tmp_path: Path, aic_mode: str, aiv_mode: str) -> None:
    """platform_version, version and each core kind's sample-based mode come from each dir's
    info.json / sample.json (ai_core_profiling_mode, aiv_profiling_mode)."""
    prof = make_prof(tmp_path)
    sample = prof / "device_0" / "sample.json"
    data = json.loads(sample.read_text())
    data["ai_core_profiling_mode"], data["aiv_profiling_mode"] = aic_mode, aiv_mode
    sample.write_text(json.dumps(data))
    (profile,) = discover(prof)
    traits = profile.device(0).traits
    assert (traits.platform, traits.version, traits.stream_expand) == (7, "1.0", False)
    sampled = "sample-based"
    assert (traits.sample_based, traits.aiv_sample_based) == (aic_mode == sampled, aiv_mode == sampled)


@pytest.mark.skipif("expand_stream_spec" not in CODECS, reason="expand_stream_spec codec not registered yet")
def test_stream_expand_from_host_compact(tmp_path: Path) -> None:
    """unaging.compact.expand_stream_spec with expandStatus 1 turns stream expand on for every device."""
    prof = make_prof(tmp_path, devices=(0, 1))
    raw = get_codec("expand_stream_spec").encode({"expand_status": np.array([1], np.uint8)})
    (prof / "host" / "data" / "unaging.compact.expand_stream_spec.slice_0").write_bytes(raw)
    (profile,) = discover(prof)
    assert profile.host is not None
    assert profile.host.traits.stream_expand
    assert all(d.traits.stream_expand for d in profile.devices)


def test_symlink_escaping_refused(tmp_path: Path) -> None:
    """A data file symlinked to outside the input dir is refused, naming the path."""
    prof = make_prof(tmp_path / "in")
    outside = tmp_path / "secret.bin"
    outside.write_bytes(hwts_records(1))
    link = prof / "device_0" / "data" / "hwts.data.0.slice_0"
    link.symlink_to(outside)
    with pytest.raises(InputPathError) as info:
        discover(prof)
    assert str(link) in str(info.value)


def test_symlinked_dir_escaping_refused(tmp_path: Path) -> None:
    """A device dir that is a symlink to elsewhere is refused too."""
    real = make_prof(tmp_path / "elsewhere")
    prof = make_prof(tmp_path / "in")
    (prof / "device_5").symlink_to(real / "device_0")
    with pytest.raises(InputPathError, match="device_5"):
        discover(prof)


def test_symlink_inside_input_allowed(tmp_path: Path) -> None:
    """A symlink that stays inside the input dir is followed."""
    prof = make_prof(tmp_path)
    stash = prof / "stash.bin"
    stash.write_bytes(hwts_records(2))
    (prof / "device_0" / "data" / "hwts.data.0.slice_0").symlink_to(stash)
    (profile,) = discover(prof)
    stream = profile.device(0).stream("hwts")
    assert stream is not None
    assert stream.files[0].path == stash.resolve()


def test_malformed_control_file_names_file(tmp_path: Path) -> None:
    """A broken device info.json stops discovery with a DecodeError naming it."""
    prof = make_prof(tmp_path)
    (prof / "device_0" / "info.json.0").write_text("{not json")
    with pytest.raises(DecodeError) as info:
        discover(prof)
    assert info.value.path is not None
    assert info.value.path.endswith("info.json.0")


def test_host_clock_borrows_device_sync(tmp_path: Path) -> None:
    """The real 310B host dir has no host_start.log: its clock uses host_start.log.0 of device_0."""
    (profile,) = discover(make_prof(tmp_path))
    assert profile.host is not None
    host_clock = profile.clock(profile.host)
    device_clock = profile.clock(profile.device(0))
    assert host_clock.host_mono == device_clock.host_mono == 23516386667449
    assert host_clock.wall_offset == 1763697324412586447  # the host's own start_info
    assert profile.wall_offset_ns == host_clock.wall_offset  # the host's offset goes before a device's
