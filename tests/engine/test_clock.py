"""Clock conversions: exact integer arithmetic, and golden values from the real 310B and 910 files."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.engine import metadata as md
from profstream.engine.clock import (
    MAX_DELTA_NS,
    DeviceClock,
    FrameworkClock,
    TickRate,
    framework_counts_syscnt,
)
from profstream.errors import DecodeError
from tests.engine.profdirs import PROF_310B, PROF_910, PROF_910_RANK1, PT_310B, needs_realdata

U64 = np.uint64


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


@pytest.mark.parametrize(
    ("mhz", "num", "den"),
    [
        (Fraction(48), 125, 6),
        (Fraction("38.4"), 625, 24),
        (Fraction("19.2"), 625, 12),
        (Fraction(100), 10, 1),
    ],
)
def test_tick_rate_is_exact(mhz: Fraction, num: int, den: int) -> None:
    """1000 / MHz as a reduced fraction: 38.4 MHz is 625/24 ns per tick, not a float."""
    assert TickRate.from_mhz(mhz) == TickRate(num, den)


def test_fractional_frequency_does_not_overflow() -> None:
    """10^16 ticks at 38.4 MHz: the naive delta * 10_000 // 384 wraps int64, the split form is exact."""
    ticks = _i64(10**16, -(10**16), 10**16 + 7)
    # by hand: 10^16 * 625 / 24 = 260416666666666666.67 -> 260416666666666667 (nearest);
    # (10^16 + 7) * 625 / 24 = 6250000000000004375 / 24 = 260416666666666848.96 -> ...849
    got = TickRate.from_mhz(Fraction("38.4")).scale(ticks)
    assert got.tolist() == [260416666666666667, -260416666666666667, 260416666666666849]
    naive = ticks * np.int64(10_000) // np.int64(384)  # 10^20 does not fit in int64
    assert naive[0] != got[0]


def test_nearest_and_trunc_rounding() -> None:
    """48 MHz: 1 tick = 20.83 ns -> 21 (nearest) or 20 (trunc); halves round up; negatives too."""
    rate = TickRate.from_mhz(Fraction(48))
    ticks = _i64(1, -1, 3, -3, 48, 0)
    # 3 ticks = 62.5 ns: half up -> 63; -62.5 -> -62
    assert rate.scale(ticks).tolist() == [21, -21, 63, -62, 1000, 0]
    assert rate.scale(ticks, "trunc").tolist() == [20, -20, 62, -62, 1000, 0]


def test_implausible_delta_refused() -> None:
    """A delta beyond ±2^62 ns (garbage counters) raises instead of wrapping."""
    rate = TickRate(10, 1)
    with pytest.raises(DecodeError, match="not plausible"):
        rate.scale(_i64(MAX_DELTA_NS // 10 + 1))


def test_too_fine_frequency_refused() -> None:
    """A frequency with so many digits that num*den cannot stay in int64 is refused up front."""
    with pytest.raises(DecodeError, match="significant digits"):
        TickRate.from_mhz(Fraction("48.0000000000000001"))


def _meta(device_id: int | None = 0, **changes: object) -> md.DirMetadata:
    """A synthetic device dir: 50 MHz syscnt, host counter 25 MHz, simple sync values."""
    info = md.InfoJson(
        platform_version=5,
        cpu=(md.CpuInfo(frequency="25"),),
        device_info=(md.DeviceInfo(hwts_frequency=50.0, aic_frequency=800.0),)
        if device_id is not None
        else (),
    )
    base: dict[str, object] = {
        "path": Path("/prof/device_0"),
        "device_id": device_id,
        "info": info,
        "sample": md.SampleJson(ai_core_profiling_mode="task-based"),
        "start_info": md.StartInfo(
            collection_time_begin=1_700_000_000_000_000, clock_monotonic_raw=5_000_000_000
        ),
        "end_info": None,
        "host_start": md.HostStartLog(
            section="Device0", clock_monotonic_raw=1_000_000, cntvct=2_000, cntvct_diff=5
        ),
        "dev_start": md.DevStartLog(clock_monotonic_raw=900_000, cntvct=10**19)
        if device_id is not None
        else None,
    }
    return md.DirMetadata(**{**base, **changes})  # type: ignore[arg-type]


def test_synthetic_device_clock() -> None:
    """Every conversion on round numbers: 50 MHz = 20 ns/tick, 25 MHz = 40 ns/tick, diff 5 ticks = 200 ns."""
    clock = DeviceClock.from_metadata(_meta())
    assert clock.host_mono == 1_000_000 + 5 * 40
    ref = 10**19  # above 2^63: uint64 counters are subtracted modulo 2^64
    syscnt = np.array([ref, ref + 3, ref - 3], U64)
    assert clock.syscnt_to_ns(syscnt).tolist() == [1_000_200, 1_000_260, 1_000_140]
    assert clock.syscnt_duration_ns(np.array([3], U64)).tolist() == [60]
    assert clock.host_to_ns(np.array([2_000, 2_010, 1_990], U64)).tolist() == [1_000_200, 1_000_600, 999_800]
    assert clock.host_duration_ns(np.array([10], U64)).tolist() == [400]
    assert clock.sampling_to_ns(_i64(900_000, 900_050)).tolist() == [1_000_200, 1_000_250]
    wall = 1_700_000_000_000_000 * 1000 - 5_000_000_000
    assert clock.to_wall_ns(_i64(1_000_200)).tolist() == [1_000_200 + wall]


def test_host_counter_identity_when_frequency_empty_or_default() -> None:
    """CPU Frequency "" or 1000 MHz: host timestamps are already ns; cntvct_diff corrects by diff ns."""
    for freq in ("", 1000.0):
        info = md.InfoJson(platform_version=1, cpu=(md.CpuInfo(frequency=freq),), device_info=())
        clock = DeviceClock.from_metadata(_meta(None, info=info))
        assert clock.host is None
        assert clock.host_to_ns(np.array([123, 2**63 + 1], U64)).tolist() == [123, -(2**63) + 1]
        assert clock.host_mono == 1_000_000 + 5


def test_host_dir_without_sync_is_fine_when_identity() -> None:
    """A host dir whose counter is already ns needs no host_start.log."""
    info = md.InfoJson(platform_version=1, cpu=(md.CpuInfo(frequency=""),), device_info=())
    clock = DeviceClock.from_metadata(_meta(None, info=info, host_start=None))
    assert clock.host_to_ns(np.array([5], U64)).tolist() == [5]
    with pytest.raises(DecodeError, match="no device syscnt"):
        clock.syscnt_to_ns(np.array([5], U64))


def test_missing_sync_files_named() -> None:
    """Without host_start.log.N or dev_start.log.N there is no device clock; the error names the file."""
    with pytest.raises(DecodeError, match=r"host_start\.log\.0"):
        DeviceClock.from_metadata(_meta(host_start=None))
    with pytest.raises(DecodeError, match=r"dev_start\.log\.0"):
        DeviceClock.from_metadata(_meta(dev_start=None))
    with pytest.raises(DecodeError, match=r"host_start\.log"):
        DeviceClock.from_metadata(_meta(None, host_start=None))


def test_borrowed_host_sync() -> None:
    """A host dir without host_start.log can use a device's (same host clocks)."""
    borrowed = md.HostStartLog(section="Device0", clock_monotonic_raw=7_000, cntvct=100)
    clock = DeviceClock.from_metadata(_meta(None, host_start=None), host_sync=borrowed)
    assert clock.host_to_ns(np.array([101], U64)).tolist() == [7_040]


def test_legacy_sync_without_cntvct_refused_for_counter_hosts() -> None:
    """A legacy host_start.log (no cntvct) cannot convert host counter values; the error names cntvct."""
    legacy = md.HostStartLog(section="Device0", clock_monotonic_raw=1_000, clock_realtime=5)
    with pytest.raises(DecodeError, match="cntvct"):
        DeviceClock.from_metadata(_meta(host_start=legacy))


# --- golden: the real 310B time-sync tuple (48 MHz syscnt, 48 MHz host counter) -----------------

DEV0 = PROF_310B / "device_0"
# host_start.log.0: clock_monotonic_raw 23516386666407, cntvct 1129057640705, cntvct_diff 50
# dev_start.log.0:  clock_monotonic_raw 23516386668240, cntvct 1129057640888
# start_info.0:     collectionTimeBegin 1763720840813399 us, clockMonotonicRaw 23516400831449 ns
# host_mono_corr = 23516386666407 + round(50 * 1000 / 48 = 1041.67) = 23516386667449
HOST_MONO_310B = 23516386667449
DEV_CNT_310B = 1129057640888
HOST_CNT_310B = 1129057640705
# wall offset = 1763720840813399 * 1000 - 23516400831449 = 1763697324412567551
WALL_310B = 1763697324412567551


@needs_realdata
def test_golden_310b_device_clock() -> None:
    """Real 310B device_0: values derived by hand from host_start.log.0, dev_start.log.0, start_info.0."""
    clock = DeviceClock.from_metadata(md.load_dir_metadata(DEV0, 0))
    assert clock.hwts == TickRate(125, 6)  # 1000 / 48
    assert clock.host_mono == HOST_MONO_310B
    syscnt = np.array([DEV_CNT_310B, DEV_CNT_310B + 48_000_000, DEV_CNT_310B + 1, DEV_CNT_310B - 480], U64)
    # +48e6 ticks = 1 s; +1 tick = 20.83 -> 21 ns; -480 ticks = -10 us
    expected = [HOST_MONO_310B, HOST_MONO_310B + 10**9, HOST_MONO_310B + 21, HOST_MONO_310B - 10_000]
    assert clock.syscnt_to_ns(syscnt).tolist() == expected
    assert clock.syscnt_duration_ns(np.array([48, 1], U64)).tolist() == [1000, 21]
    # the host counter at the sync instant maps to the corrected host monotonic
    assert clock.host_to_ns(np.array([HOST_CNT_310B], U64)).tolist() == [HOST_MONO_310B]
    # device monotonic 23516386668240 is 791 ns ahead of the corrected host monotonic
    assert clock.sampling_to_ns(_i64(23516386668240)).tolist() == [HOST_MONO_310B]
    # 23516386667449 + 1763697324412567551 = 1763720840799235000 (14.164 ms before collectionTimeBegin)
    assert clock.to_wall_ns(_i64(HOST_MONO_310B)).tolist() == [1763720840799235000]


@needs_realdata
def test_golden_310b_shared_counter() -> None:
    """On the 310B SoC host and device count one 48 MHz counter: the two mappings differ by 183 ticks.

    dev cntvct - host cntvct = 1129057640888 - 1129057640705 = 183 ticks = 3812.5 ns, so
    syscnt_to_ns(x) - host_to_ns(x) is -3812.5 ns up to rounding, for every x.
    """
    meta = md.load_dir_metadata(DEV0, 0)
    assert meta.info.host_freq_mhz == meta.device_info.hwts_mhz == 48
    clock = DeviceClock.from_metadata(meta)
    values = np.array([DEV_CNT_310B, DEV_CNT_310B + 10**9, DEV_CNT_310B - 10**7], U64)
    diff = clock.syscnt_to_ns(values) - clock.host_to_ns(values)
    assert set(diff.tolist()) <= {-3812, -3813}


@needs_realdata
def test_golden_310b_profiler_info_consistency() -> None:
    """profiler_info.json's (start_cnt, start_monotonic) lies on host_start.log.0's counter line within 5 us.

    host_to_ns(start_cnt 1129056766461) = 23516386667449 + round((1129056766461 - 1129057640705) * 1000 / 48)
    = 23516386667449 - round(18213416.67) = 23516368454032; torch_npu says 23516368458803: 4771 ns apart
    (two clock reads that are not atomic).
    """
    clock = DeviceClock.from_metadata(md.load_dir_metadata(DEV0, 0))
    info = md.read_profiler_info(PT_310B / "profiler_info.json")
    assert info.start_info is not None
    assert info.start_info.freq_mhz == 48
    mapped = int(clock.host_to_ns(np.array([info.start_info.start_cnt], U64))[0])
    assert mapped == 23516368454032
    assert info.start_info.start_monotonic - mapped == 4771


@needs_realdata
def test_golden_310b_framework_clock() -> None:
    """torch_npu's conversion on the real files: no host/host_start.log, so profiler_info's start_info.

    to_ns(1129057640705) = trunc((1129057640705 - 1129056766461) * 1000 / 48 = 18213416.67) + 23516368458803
    = 23516386672219; localtime_diff from host/start_info = 1763720840813460 * 1000 - 23516400873553.
    """
    host = md.load_dir_metadata(PROF_310B / "host", None)
    info = md.read_profiler_info(PT_310B / "profiler_info.json")
    clock = FrameworkClock.from_files(
        info, host_info=host.info, host_start=host.host_start, cann_start=host.start_info
    )
    assert (clock.start_cnt, clock.time_offset) == (1129056766461, 23516368458803)
    assert clock.localtime_diff == 1763697324412586447
    assert clock.to_ns(np.array([HOST_CNT_310B], U64)).tolist() == [23516386672219]
    assert clock.to_wall_ns(np.array([HOST_CNT_310B], U64)).tolist() == [23516386672219 + 1763697324412586447]
    # the CANN device clock puts the same host counter value 4770 ns earlier
    device = DeviceClock.from_metadata(md.load_dir_metadata(DEV0, 0))
    assert 23516386672219 - int(device.host_to_ns(np.array([HOST_CNT_310B], U64))[0]) == 4770


@needs_realdata
def test_golden_310b_wall_offsets() -> None:
    """What holds between the real wall-clock anchors of one 310B run.

    host start_info: 1763720840813460000 - 23516400873553 = 1763697324412586447
    host end_info:   1763721048877780000 - 23724462602000 = 1763697324415178000 (+2.59 ms over 208 s)
    device start_info.0 (1763697324412567551) is 18.9 us from the host's.
    profiler_info end_info: 1763721048879948976 - 23724758785938 = 1763697324121163038, 291.4 ms off:
    torch_npu's MonotonicTimeEnd is CLOCK_MONOTONIC (NTP-slewed by 12.3 ppm over 23724 s of uptime,
    the same rate as the 2.59 ms / 208 s drift above), not CLOCK_MONOTONIC_RAW — so the CANN start_info
    is the right anchor and end_info only a fallback.
    """
    host = md.load_dir_metadata(PROF_310B / "host", None)
    device = md.load_dir_metadata(DEV0, 0)
    info = md.read_profiler_info(PT_310B / "profiler_info.json")
    assert host.end_info is not None
    assert info.end_info is not None
    start = host.start_info.wall_offset_ns
    assert start == 1763697324412586447
    assert host.end_info.wall_offset_ns - start == 2591553
    assert start - device.start_info.wall_offset_ns == 18896
    fallback = info.end_info.collection_time_end - info.end_info.monotonic_time_end
    assert fallback - start == -291423409
    drift_ppm = (host.end_info.wall_offset_ns - start) / (23724462602000 - 23516400873553) * 1e6
    assert abs(drift_ppm - 291423409 / 23724758785938 * 1e6) < 0.3


@needs_realdata
def test_framework_clock_fallbacks() -> None:
    """syscnt off -> identity; [Host] host_start.log wins over start_info; no NPU activity -> end_info."""
    info = md.read_profiler_info(PT_310B / "profiler_info.json")
    host_info = md.read_info_json(PROF_310B / "host" / "info.json")
    sync = md.HostStartLog(section="Host", clock_monotonic_raw=5_000, cntvct=480)
    clock = FrameworkClock.from_files(info, host_info=host_info, host_start=sync)
    assert clock.to_ns(np.array([480 + 48, 480 - 1], U64)).tolist() == [6_000, 4_980]  # -20.8 -> -20 (trunc)
    assert clock.localtime_diff == 1763721048879948976 - 23724758785938
    off = md.ProfilerInfo(end_info=info.end_info)
    assert FrameworkClock.from_files(off).to_ns(_i64(42)).tolist() == [42]
    with pytest.raises(DecodeError, match="end_info"):
        FrameworkClock.from_files(md.ProfilerInfo())
    no_freq = md.ProfilerInfo(start_info=md.FrameworkStartInfo(syscnt_enable=True), end_info=info.end_info)
    with pytest.raises(DecodeError, match="freq"):
        FrameworkClock.from_files(no_freq)


# --- golden: the real 910 control files (100 MHz syscnt, CPU Frequency 1000 = identity) -----------


def _real_910(tmp_path: Path, prof: Path, device: int) -> md.DirMetadata:
    """The real 910 info/start/end files plus SYNTHETIC sync logs (the sample has none) and sample.json."""
    src = prof / f"device_{device}"
    target = tmp_path / f"device_{device}"
    target.mkdir()
    for name in (f"info.json.{device}", f"start_info.{device}", f"end_info.{device}"):
        shutil.copy(src / name, target / name)
    (target / "sample.json").write_text(f'{{"ai_core_profiling_mode": "task-based", "devices": "{device}"}}')
    (target / f"host_start.log.{device}").write_text(
        f"[Device{device}]\nclock_monotonic_raw: 56579000000000\ncntvct: 777\ncntvct_diff: 3\n"
    )
    (target / f"dev_start.log.{device}").write_text(
        "clock_monotonic_raw: 56578000000000\ncntvct: 5657800000000\n"
    )
    return md.load_dir_metadata(target, device)


@needs_realdata
def test_golden_910_rank0(tmp_path: Path) -> None:
    """910 device_0: 100 MHz = 10 ns/tick exactly; host counter identity; real wall offset.

    wall offset = 1692340024324979 * 1000 - 56579931060630 = 1692283444393918370;
    host_mono_corr = 56579000000000 + 3 (identity host rate: diff ticks are ns).
    """
    clock = DeviceClock.from_metadata(_real_910(tmp_path, PROF_910, 0))
    assert clock.hwts == TickRate(10, 1)
    assert clock.host is None
    assert clock.host_mono == 56579000000003
    ticks = np.array([5657800000000, 5657800000001, 5657800000000 + 10**8], U64)
    assert clock.syscnt_to_ns(ticks).tolist() == [56579000000003, 56579000000013, 56580000000003]
    assert clock.host_to_ns(np.array([56579931060630], U64)).tolist() == [56579931060630]
    assert clock.wall_offset == 1692283444393918370
    assert clock.to_wall_ns(_i64(56579931060630)).tolist() == [1692340024324979000]


@needs_realdata
def test_golden_910_offsets_across_ranks() -> None:
    """The two ranks' start/end offsets agree within 1.2 us (one host, NTP quiet over 58 s).

    rank0: start 1692283444393918370, end 1692340082430569000 - 56638036649460 = 1692283444393919540
    rank1: start 1692340024570093000 - 56580176176190 = 1692283444393916810, end 1692283444393916930
    """
    offsets = []
    for prof, device in ((PROF_910, 0), (PROF_910_RANK1, 1)):
        base = prof / f"device_{device}"
        start = md.read_start_info(base / f"start_info.{device}").wall_offset_ns
        end = md.read_end_info(base / f"end_info.{device}").wall_offset_ns
        offsets.append((start, end))
    assert offsets == [
        (1692283444393918370, 1692283444393919540),
        (1692283444393916810, 1692283444393916930),
    ]
    assert max(max(o) for o in offsets) - min(min(o) for o in offsets) < 3_000


@needs_realdata
def test_real_910_dir_lacks_sync_files() -> None:
    """The real 910 sample has no host_start.log.0 / dev_start.log.0: the clock names the missing one."""
    base = PROF_910 / "device_0"
    meta = md.DirMetadata(
        path=base,
        device_id=0,
        info=md.read_info_json(base / "info.json.0"),
        sample=md.SampleJson(ai_core_profiling_mode="task-based"),
        start_info=md.read_start_info(base / "start_info.0"),
        end_info=md.read_end_info(base / "end_info.0"),
        host_start=None,
        dev_start=None,
    )
    with pytest.raises(DecodeError, match=r"host_start\.log\.0") as info:
        DeviceClock.from_metadata(meta)
    assert info.value.path == str(base)


def test_the_syscnt_flag_is_told_from_the_real_310b_framework_clock() -> None:
    """torch_npu's real start_info (48 MHz, start_cnt 1129056766461 at 23516368458803 ns, about 6.5 h
    after boot) and a host counter value of the same run: read as ticks it lands 18 ms after the sync
    point, read as ns it would lie 6.2 h before the collection started; its ns reading is told apart
    the other way."""
    sync = {"freq_mhz": Fraction(48), "start_cnt": 1129056766461, "start_monotonic": 23516368458803}
    start = 23516400873553  # host start_info clockMonotonicRaw of the same PROF dir
    assert framework_counts_syscnt(HOST_CNT_310B, collection_start_ns=start, **sync) is True
    assert framework_counts_syscnt(23516386672219, collection_start_ns=start, **sync) is False


@given(
    uptime_s=st.integers(3 * 3600, 400 * 86400),
    mhz=st.sampled_from([Fraction("19.2"), Fraction("38.4"), Fraction(48), Fraction(50), Fraction(100)]),
    after_s=st.integers(-60, 3000),
    counts_ticks=st.booleans(),
)
def test_the_syscnt_flag_is_told_on_machines_up_for_hours(
    uptime_s: int, mhz: Fraction, after_s: int, counts_ticks: bool
) -> None:
    """A counter started with the machine: a timestamp near the collection's start is told right
    either way it was counted."""
    start = uptime_s * 10**9
    cnt = int(start * mhz / 1000)
    at = start + after_s * 10**9
    first = int(cnt + (at - start) * mhz / 1000) if counts_ticks else at
    told = framework_counts_syscnt(
        first, freq_mhz=mhz, start_cnt=cnt, start_monotonic=start, collection_start_ns=start
    )
    assert told is counts_ticks


def test_the_syscnt_flag_is_not_guessed_when_both_readings_or_neither_fit() -> None:
    """Half an hour after boot both readings land near the start; a timestamp far from the collection
    fits neither; a counter at 1000 MHz reads the same either way. None each time."""
    half_hour = 1800 * 10**9
    sync = {"freq_mhz": Fraction(100), "start_cnt": half_hour // 10, "start_monotonic": half_hour}
    assert framework_counts_syscnt(half_hour // 10, collection_start_ns=half_hour, **sync) is None
    assert framework_counts_syscnt(10**18, collection_start_ns=half_hour, **sync) is None
    same = {"freq_mhz": Fraction(1000), "start_cnt": 7 * 10**13, "start_monotonic": 7 * 10**13}
    assert framework_counts_syscnt(7 * 10**13 + 5, collection_start_ns=7 * 10**13, **same) is None
