"""Control files: real 310B / 910 / 910B files parse; broken ones fail naming file and key."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from profstream.engine import metadata as md
from profstream.errors import DecodeError
from tests.engine.profdirs import PROF_310B, PROF_910, PT_310B, PT_910B, make_prof, needs_realdata

pytestmark = needs_realdata

DEV0 = PROF_310B / "device_0"


def test_real_310b_device_info_json() -> None:
    """The 310B info.json.0: numeric strings become numbers, 48 MHz stays exact."""
    info = md.read_info_json(DEV0 / "info.json.0")
    assert info.platform_version == 7
    assert info.version == "1.0"
    assert info.host_freq_mhz == 48
    assert info.process_id == 18323
    assert info.rank_id == -1
    assert info.hostname == "orangepiaipro"
    device = info.device_info[0]
    assert (device.device_id, device.ai_core_num, device.aiv_num) == (0, 1, 1)
    assert device.hwts_mhz == 48
    assert device.aic_mhz == 1224
    assert device.aiv_mhz == 1224


def test_real_910_info_json_numeric_frequency() -> None:
    """The 910 info.json.0 has CPU Frequency as a JSON number (1000) and rank_id 0."""
    info = md.read_info_json(PROF_910 / "device_0" / "info.json.0")
    assert info.platform_version == 1
    assert info.host_freq_mhz == 1000
    assert info.rank_id == 0
    assert info.device_info[0].hwts_mhz == 100
    assert info.device_info[0].ai_core_num == 32
    assert info.device_info[0].aiv_mhz == 1000


def test_real_310b_host_dir() -> None:
    """The host dir: empty DeviceInfo, host sample.json devices 64, no host_start.log."""
    meta = md.load_dir_metadata(PROF_310B / "host", None)
    assert meta.is_host
    assert meta.info.device_info == ()
    assert meta.sample.device_ids == (md.HOST_ID,)
    assert meta.host_start is None
    assert meta.dev_start is None
    assert meta.start_info.collection_time_begin == 1763720840813460
    assert meta.end_info is not None
    assert meta.end_info.clock_monotonic_raw == 23724462602000


def test_real_310b_device_dir() -> None:
    """The device dir: sample.json switches and the full time-sync tuple."""
    meta = md.load_dir_metadata(DEV0, 0)
    assert meta.sample.level == "l0"
    assert not meta.sample.sample_based
    assert meta.sample.device_ids == (0,)
    assert meta.start_info.clock_monotonic_raw == 23516400831449
    assert meta.start_info.collection_date_begin == "2025-11-21 18:27:20.813399"
    assert meta.host_start == md.HostStartLog(
        section="Device0", clock_monotonic_raw=23516386666407, cntvct=1129057640705, cntvct_diff=50
    )
    assert meta.dev_start == md.DevStartLog(clock_monotonic_raw=23516386668240, cntvct=1129057640888)


def test_start_end_info_wall_offsets() -> None:
    """start_info/end_info: Unix µs * 1000 - monotonic ns, with the 910's real values."""
    start = md.read_start_info(PROF_910 / "device_0" / "start_info.0")
    end = md.read_end_info(PROF_910 / "device_0" / "end_info.0")
    assert start.wall_offset_ns == 1692340024324979 * 1000 - 56579931060630
    assert end.wall_offset_ns == 1692340082430569 * 1000 - 56638036649460
    assert end.collection_date_end == "2023-08-18 14:28:02.430569"


def test_legacy_host_start_log(tmp_path: Path) -> None:
    """The 2020 layout ([Device0], clock_realtime, no cntvct) parses with cntvct None."""
    path = tmp_path / "host_start.log.1"
    path.write_text("[Device0]\nclock_realtime: 1591183963784568740\nclock_monotonic_raw: 261003032627\n")
    log = md.read_host_start_log(path)
    assert log.section == "Device0"
    assert log.cntvct is None
    assert log.cntvct_diff == 0
    assert log.clock_realtime == 1591183963784568740


def test_host_start_log_keeps_first_section(tmp_path: Path) -> None:
    """Like configparser use in msprof, only the first section's keys count."""
    path = tmp_path / "host_start.log"
    path.write_text("[Host]\nclock_monotonic_raw: 5\ncntvct: 7\n[Other]\ncntvct: 99\n")
    assert md.read_host_start_log(path).cntvct == 7


def test_real_profiler_info_310b() -> None:
    """profiler_info.json (torch_npu 2.8): syscnt time base, end info, list export type."""
    info = md.read_profiler_info(PT_310B / "profiler_info.json")
    assert info.start_info == md.FrameworkStartInfo(
        syscnt_enable=True, freq=48.0, start_cnt=1129056766461, start_monotonic=23516368458803
    )
    assert info.start_info.freq_mhz == 48
    assert info.end_info == md.FrameworkEndInfo(
        collection_time_end=1763721048879948976, monotonic_time_end=23724758785938
    )
    assert info.npu_activity
    assert info.config.experimental_config.export_types == ("text",)
    assert info.config.experimental_config.data_simplification is True
    assert (info.torch_npu_version, info.cann_version) == ("2.8.0", "8.3.RC1")


def test_real_profiler_info_910b_variants() -> None:
    """profiler_info_N.json: a string export type; an older one without start_info and null flags."""
    text = md.read_profiler_info(
        PT_910B / "test/data/pytorch/text/level0/rank0_ascend_pt/profiler_info_0.json"
    )
    assert text.config.experimental_config.export_types == ("text",)
    assert text.start_info is not None
    assert text.start_info.freq_mhz == 100
    assert text.rank_id == 0
    old = md.read_profiler_info(PT_910B / "server/src/test/test_data/test_rank_0/profiler_info_0.json")
    assert old.start_info is None
    assert old.config.experimental_config.data_simplification is None
    assert old.config.experimental_config.profiler_level == "Level1"
    assert old.end_info is not None
    assert md.PROFILER_INFO_NAME.match("profiler_info_0.json")


def _device_copy(tmp_path: Path) -> Path:
    return make_prof(tmp_path) / "device_0"


def _rewrite_info(device: Path, **changes: object) -> Path:
    path = device / "info.json.0"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


def test_missing_required_file_names_it(tmp_path: Path) -> None:
    """A device dir without sample.json fails naming the file and the dir."""
    device = _device_copy(tmp_path)
    (device / "sample.json").unlink()
    with pytest.raises(DecodeError) as info:
        md.load_dir_metadata(device, 0)
    assert "sample.json" in str(info.value)
    assert info.value.path == str(device)


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    """info.json without platform_version fails naming the file and the key."""
    device = _device_copy(tmp_path)
    data = json.loads((device / "info.json.0").read_text())
    del data["platform_version"]
    (device / "info.json.0").write_text(json.dumps(data))
    with pytest.raises(DecodeError) as info:
        md.load_dir_metadata(device, 0)
    assert info.value.path == str(device / "info.json.0")
    assert "platform_version" in str(info.value)


def test_non_numeric_value_names_key(tmp_path: Path) -> None:
    """A non-numeric hwts_frequency fails naming DeviceInfo[0].hwts_frequency and what was expected."""
    device = _device_copy(tmp_path)
    data = json.loads((device / "info.json.0").read_text())
    data["DeviceInfo"][0]["hwts_frequency"] = "fast"
    (device / "info.json.0").write_text(json.dumps(data))
    with pytest.raises(DecodeError) as info:
        md.read_info_json(device / "info.json.0")
    assert "DeviceInfo[0].hwts_frequency" in str(info.value)
    assert "float" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"), [("", None), ("38.4", Fraction(192, 5)), (19.2, Fraction(96, 5))]
)
def test_cpu_frequency_forms(tmp_path: Path, value: object, expected: Fraction | None) -> None:
    """CPU[0].Frequency may be empty (no host counter), a numeric string or a number, read exactly."""
    path = _rewrite_info(_device_copy(tmp_path), CPU=[{"Frequency": value}])
    assert md.read_info_json(path).host_freq_mhz == expected


@pytest.mark.parametrize("value", ["fast", "0", "-1"])
def test_cpu_frequency_invalid(tmp_path: Path, value: str) -> None:
    """A non-numeric or non-positive CPU Frequency fails naming the key."""
    path = _rewrite_info(_device_copy(tmp_path), CPU=[{"Frequency": value}])
    with pytest.raises(DecodeError, match="Frequency"):
        md.read_info_json(path)


def test_empty_cpu_list_refused(tmp_path: Path) -> None:
    """CPU: [] leaves no host counter frequency; refused naming CPU."""
    path = _rewrite_info(_device_copy(tmp_path), CPU=[])
    with pytest.raises(DecodeError, match="CPU"):
        md.read_info_json(path)


def test_two_device_info_entries_refused(tmp_path: Path) -> None:
    """A device dir's info.json must describe exactly one device (msprof's C++ check)."""
    device = _device_copy(tmp_path)
    data = json.loads((device / "info.json.0").read_text())
    data["DeviceInfo"] *= 2
    (device / "info.json.0").write_text(json.dumps(data))
    with pytest.raises(DecodeError, match="DeviceInfo"):
        md.load_dir_metadata(device, 0)


def test_bad_json_names_file(tmp_path: Path) -> None:
    """Malformed JSON fails naming the file."""
    path = tmp_path / "start_info.0"
    path.write_text('{"collectionTimeBegin": 12,')
    with pytest.raises(DecodeError) as info:
        md.read_start_info(path)
    assert info.value.path == str(path)
    assert "malformed" in str(info.value) or "truncated" in str(info.value)


def test_empty_start_value_refused(tmp_path: Path) -> None:
    """start_info with collectionTimeBegin "" (as end_info has) fails naming the key."""
    path = tmp_path / "start_info"
    path.write_text('{"collectionTimeBegin": "", "clockMonotonicRaw": "5"}')
    with pytest.raises(DecodeError, match="collectionTimeBegin"):
        md.read_start_info(path)


def test_info_json_first_line_only(tmp_path: Path) -> None:
    """Only the first line is read, like msprof: trailing garbage lines are ignored."""
    path = tmp_path / "info.json.0"
    shutil.copy(DEV0 / "info.json.0", path)
    with path.open("a") as handle:
        handle.write("\nnot json at all\n")
    assert md.read_info_json(path).platform_version == 7


def test_over_long_line_refused(tmp_path: Path) -> None:
    """A first line longer than msprof's MAX_READ_LINE_BYTES is refused without reading it all."""
    path = tmp_path / "info.json"
    path.write_bytes(b"{" + b" " * md.MAX_LINE_BYTES + b"}\n")
    with pytest.raises(DecodeError, match="MAX_READ_LINE_BYTES"):
        md.read_info_json(path)


def test_zero_length_control_file(tmp_path: Path) -> None:
    """An empty info.json is a clear DecodeError, not a crash."""
    path = tmp_path / "info.json"
    path.write_bytes(b"")
    with pytest.raises(DecodeError) as info:
        md.read_info_json(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("clock_monotonic_raw: 1\ncntvct: 2\n", "section"),
        ("[Host]\nclock_monotonic_raw: 1\ncntvct: soon\n", "cntvct"),
        ("[Host]\ncntvct: 2\n", "clock_monotonic_raw"),
        ("[Host]\nclock_monotonic_raw 1\n", "key: value"),
        ("[Host]\ncntvct: 1\ncntvct: 2\nclock_monotonic_raw: 1\n", "twice"),
    ],
)
def test_bad_host_start_log(tmp_path: Path, text: str, needle: str) -> None:
    """host_start.log without a section, with a non-numeric / missing / repeated key fails naming it."""
    path = tmp_path / "host_start.log"
    path.write_text(text)
    with pytest.raises(DecodeError, match=needle) as info:
        md.read_host_start_log(path)
    assert info.value.path == str(path)


def test_dev_start_log_missing_cntvct(tmp_path: Path) -> None:
    """dev_start.log needs both clock_monotonic_raw and cntvct."""
    path = tmp_path / "dev_start.log.0"
    path.write_text("clock_monotonic_raw: 23516386668240\n")
    with pytest.raises(DecodeError, match="cntvct"):
        md.read_dev_start_log(path)


def test_two_candidate_files_refused(tmp_path: Path) -> None:
    """Both info.json and info.json.0 in one dir is ambiguous (msprof's C++ wants exactly one)."""
    device = _device_copy(tmp_path)
    shutil.copy(device / "info.json.0", device / "info.json")
    with pytest.raises(DecodeError, match="expected one"):
        md.load_dir_metadata(device, 0)


def test_done_markers_are_not_control_files(tmp_path: Path) -> None:
    """info.json.0.done beside info.json.0 does not count as a second info.json."""
    device = _device_copy(tmp_path)
    (device / "info.json.0.done").write_text("filesize:872\n")
    assert md.load_dir_metadata(device, 0).info.platform_version == 7
