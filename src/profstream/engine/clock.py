"""Clocks: device syscnt, host counter and framework timestamps to int64 ns on one host clock.

Formulas: specs/cann_raw_formats.md §3 ([MSP] C++
``analysis/csrc/infrastructure/utils/time_utils.cpp``, ``Context::GetSyscntConversionParams``;
Python ``analysis/common_func/info_conf_reader.py``, ``profiling_bean/basic_info/host_start.py``)
and specs/framework_outputs.md §1.4 (torch_npu ``analysis/_profiler_config.py``):

- device syscnt -> host monotonic: ``host_mono_corr + (syscnt - dev_cntvct) * 1000 / hwts_MHz``
  with ``host_mono_corr = host_mono + cntvct_diff * 1000 / host_MHz``;
- durations: ``ticks * 1000 / hwts_MHz``;
- host counter -> host monotonic: the identity when ``CPU[0].Frequency`` is empty or the
  default 1000 MHz (both msprof paths treat 1000 MHz as "already ns"), else
  ``host_mono_corr + (value - host_cntvct) * 1000 / host_MHz``;
- device monotonic sampling timestamps: ``ts + host_mono_corr - dev_mono``;
- host monotonic -> Unix ns: ``+ collectionTimeBegin_us * 1000 - clockMonotonicRaw`` (start_info);
- torch_npu framework timestamps (``syscnt_enable``): ``trunc((cnt - start_cnt) * 1000 / freq)
  + time_offset``, wall clock ``+ localtime_diff``.

Everything is exact integer arithmetic on int64 arrays: a frequency becomes an exact
fraction (38.4 MHz -> 625/24 ns per tick) and ``delta * num / den`` is computed as
``(delta // den) * num + (delta % den) * num / den`` so it cannot overflow where the naive
``delta * 10_000`` would; deltas beyond ±2^62 ns (146 years, i.e. garbage) raise instead
of wrapping. Negative deltas (timestamps before the sync point) are handled; uint64
counters are subtracted modulo 2^64 and read as signed.

Choices (msprof computes in float64; specs/msprof_behaviour.md allows a constant difference):
- rounding: device and host conversions round to the nearest ns (half up) — msprof's
  Python keeps fractional ns and rounds to 3 decimals of µs on output; the framework
  conversion truncates toward zero like torch_npu's ``int()``;
- ``cntvct_diff * 1000 / host_MHz`` is rounded to the nearest ns like msprof's Python
  ``TimerBean`` (its C++ truncates: up to 1 ns apart);
- msprof's Python clamps negative host times to 0; we do not (a negative time is a fact
  about the data that later stages can see).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from profstream.engine.metadata import (
    DirMetadata,
    HostStartLog,
    InfoJson,
    ProfilerInfo,
    StartInfo,
    control_name,
)
from profstream.errors import DecodeError

Int64Array = npt.NDArray[np.int64]
Rounding = Literal["nearest", "trunc"]

#: host counter frequency msprof treats as "timestamps are already ns" (C++ ``DEFAULT_FREQ``).
DEFAULT_HOST_MHZ = Fraction(1000)
#: largest |delta| in ns a conversion accepts (146 years); beyond it the input is garbage.
MAX_DELTA_NS = 2**62
#: how far from the collection's start torch_npu's first timestamp may land, read one way, for that
#: reading to be believed (:func:`framework_counts_syscnt`)
FRAMEWORK_START_SPREAD_NS = 3600 * 1_000_000_000
_MASK64 = 2**64 - 1


def _signed_delta(values: npt.ArrayLike, ref: int) -> Int64Array:
    """``values - ref`` as int64, for uint64 or int64 inputs, modulo 2^64 then signed."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        msg = f"expected an integer array of counter values, got dtype {array.dtype}"
        raise TypeError(msg)
    unsigned = array.astype(np.uint64, copy=False)
    delta: Int64Array = (unsigned - np.uint64(ref & _MASK64)).view(np.int64)
    return delta


@dataclass(frozen=True, slots=True)
class TickRate:
    """Nanoseconds per tick as the exact fraction ``num / den`` (in lowest terms)."""

    num: int
    den: int

    @classmethod
    def from_mhz(cls, mhz: Fraction, *, source: str = "") -> TickRate:
        """The rate of a counter running at ``mhz`` MHz; refuses fractions too fine to scale in int64."""
        ns = Fraction(1000) / mhz
        if 2 * ns.numerator * ns.denominator >= 2**62:
            msg = f"frequency {mhz} MHz has too many significant digits to convert exactly in int64"
            raise DecodeError(msg, path=source or None)
        return cls(ns.numerator, ns.denominator)

    @property
    def is_identity(self) -> bool:
        return self.num == self.den == 1

    def scale(self, ticks: Int64Array, rounding: Rounding = "nearest") -> Int64Array:
        """``ticks * num / den`` in ns, exactly, rounded to nearest (half up) or toward zero."""
        quotient, remainder = np.divmod(ticks, self.den)
        limit = MAX_DELTA_NS // self.num
        if quotient.size and (quotient.max() > limit or quotient.min() < -limit):
            msg = f"tick delta beyond ±{MAX_DELTA_NS} ns; the counter values are not plausible"
            raise DecodeError(msg)
        part = remainder * self.num
        if rounding == "nearest":
            out: Int64Array = quotient * self.num + (2 * part + self.den) // (2 * self.den)
            return out
        floor = quotient * self.num + part // self.den
        inexact = (part % self.den) != 0
        truncated: Int64Array = floor + ((ticks < 0) & inexact)
        return truncated

    def scale_int(self, ticks: int, rounding: Rounding = "nearest") -> int:
        """:meth:`scale` for one Python int (control-file values)."""
        return int(self.scale(np.array([ticks], np.int64), rounding)[0])


def _host_rate(info: InfoJson, source: str) -> TickRate | None:
    """The host counter rate, or None when host timestamps are already monotonic ns."""
    mhz = info.host_freq_mhz
    if mhz is None or mhz == DEFAULT_HOST_MHZ:
        return None
    return TickRate.from_mhz(mhz, source=source)


@dataclass(frozen=True, slots=True)
class DeviceClock:
    """Time conversions of one ``host`` or ``device_N`` dir, built from its control files.

    ``hwts`` is None for the host dir (it has no device syscnt); ``host`` is None when
    host timestamps are already CLOCK_MONOTONIC_RAW ns.
    """

    source: str  # the dir, for error messages
    device_id: int | None
    hwts: TickRate | None  # device syscnt: ns per tick
    host: TickRate | None  # host counter: ns per tick
    host_mono: int | None  # host CLOCK_MONOTONIC_RAW at the sync instant, cntvct_diff-corrected
    host_cnt: int | None  # host counter at the sync instant
    dev_mono: int | None  # device CLOCK_MONOTONIC_RAW at the sync instant
    dev_cnt: int | None  # device syscnt at the sync instant
    wall_offset: int  # Unix ns minus host monotonic ns (start_info)

    @classmethod
    def from_metadata(cls, meta: DirMetadata, *, host_sync: HostStartLog | None = None) -> DeviceClock:
        """The clock of a dir; ``host_sync`` stands in for a host dir's missing host_start.log.

        A device dir needs ``host_start.log.N`` and ``dev_start.log.N``; a host dir needs
        ``host_start.log`` only when its host counter is not already ns.
        """
        source = str(meta.path)
        host_rate = _host_rate(meta.info, source)
        sync = meta.host_start or host_sync
        host_file = meta.file("host_start.log")
        if sync is None and (not meta.is_host or host_rate is not None):
            why = "device syscnt" if not meta.is_host else f"host counter ({meta.info.host_freq_mhz} MHz)"
            name = control_name("host_start.log", meta.device_id)
            msg = f"missing {name}: needed to convert {why} to host time"
            raise DecodeError(msg, path=meta.path)
        if sync is not None and host_rate is not None and sync.cntvct is None:
            msg = "host_start.log: key cntvct missing; the host counter runs at a non-default frequency"
            raise DecodeError(msg, path=host_file)
        host_mono = None
        if sync is not None:
            correction = (host_rate or TickRate(1, 1)).scale_int(sync.cntvct_diff)
            host_mono = sync.clock_monotonic_raw + correction
        hwts = dev_mono = dev_cnt = None
        if not meta.is_host:
            if meta.dev_start is None:
                name = control_name("dev_start.log", meta.device_id)
                msg = f"missing {name}: needed to convert device syscnt to host time"
                raise DecodeError(msg, path=meta.path)
            hwts = TickRate.from_mhz(meta.device_info.hwts_mhz, source=source)
            dev_mono, dev_cnt = meta.dev_start.clock_monotonic_raw, meta.dev_start.cntvct
        return cls(
            source=source,
            device_id=meta.device_id,
            hwts=hwts,
            host=host_rate,
            host_mono=host_mono,
            host_cnt=None if sync is None else sync.cntvct,
            dev_mono=dev_mono,
            dev_cnt=dev_cnt,
            wall_offset=meta.start_info.wall_offset_ns,
        )

    def _device(self) -> tuple[TickRate, int, int, int]:
        if self.hwts is None or self.dev_cnt is None or self.dev_mono is None or self.host_mono is None:
            msg = "the host dir has no device syscnt clock"
            raise DecodeError(msg, path=self.source)
        return self.hwts, self.dev_cnt, self.dev_mono, self.host_mono

    def syscnt_to_ns(self, syscnt: npt.ArrayLike) -> Int64Array:
        """Device syscnt ticks (HWTS, STARS, ts_track, ...) -> host monotonic ns."""
        hwts, dev_cnt, _, host_mono = self._device()
        return hwts.scale(_signed_delta(syscnt, dev_cnt)) + np.int64(host_mono)

    def syscnt_duration_ns(self, ticks: npt.ArrayLike) -> Int64Array:
        """A syscnt difference -> ns."""
        hwts = self._device()[0]
        return hwts.scale(_signed_delta(ticks, 0))

    def host_to_ns(self, values: npt.ArrayLike) -> Int64Array:
        """Host counter values (MsprofApi/Event, compact/additional headers) -> host monotonic ns."""
        if self.host is None:
            return _signed_delta(values, 0)
        if self.host_cnt is None or self.host_mono is None:  # guaranteed by from_metadata
            msg = "no host time-sync values"
            raise DecodeError(msg, path=self.source)
        return self.host.scale(_signed_delta(values, self.host_cnt)) + np.int64(self.host_mono)

    def host_duration_ns(self, ticks: npt.ArrayLike) -> Int64Array:
        """A host counter difference -> ns."""
        delta = _signed_delta(ticks, 0)
        return delta if self.host is None else self.host.scale(delta)

    def sampling_to_ns(self, device_ns: npt.ArrayLike) -> Int64Array:
        """Device CLOCK_MONOTONIC_RAW ns (sample-based PMU, DDR, HBM, ...) -> host monotonic ns."""
        _, _, dev_mono, host_mono = self._device()
        return _signed_delta(device_ns, 0) + np.int64(host_mono - dev_mono)

    def to_wall_ns(self, monotonic_ns: npt.ArrayLike) -> Int64Array:
        """Host monotonic ns -> Unix ns (local wall clock at the start of collection)."""
        return _signed_delta(monotonic_ns, 0) + np.int64(self.wall_offset)


@dataclass(frozen=True, slots=True)
class FrameworkClock:
    """torch_npu FRAMEWORK timestamps -> host monotonic ns and Unix ns (framework_outputs §1.4)."""

    rate: TickRate | None  # None: syscnt_enable is off, timestamps are monotonic ns already
    start_cnt: int
    time_offset: int
    localtime_diff: int

    @classmethod
    def from_files(
        cls,
        profiler_info: ProfilerInfo,
        *,
        host_info: InfoJson | None = None,
        host_start: HostStartLog | None = None,
        cann_start: StartInfo | None = None,
        source: str = "profiler_info.json",
    ) -> FrameworkClock:
        """Build it the way torch_npu's ``ProfilerConfig.load_info`` does.

        freq: ``host/info.json`` CPU[0].Frequency, else profiler_info ``start_info.freq``;
        start_cnt / time_offset: ``host/host_start.log`` ``[Host]`` cntvct /
        clock_monotonic_raw (not corrected by cntvct_diff), else profiler_info
        ``start_info``; localtime_diff: CANN ``start_info`` when NPU activity was on,
        else (or when absent) profiler_info ``end_info``. Choice: where host/info.json
        exists without a numeric Frequency torch_npu keeps a hard-coded 100 MHz; we use
        ``start_info.freq`` (the driver's value it recorded) instead.
        """
        start = profiler_info.start_info
        rate = None
        start_cnt = time_offset = 0
        if start is not None and start.syscnt_enable:
            mhz = host_info.host_freq_mhz if host_info is not None else None
            mhz = mhz or start.freq_mhz
            if mhz is None:
                msg = "start_info.freq: missing, and host/info.json has no CPU[0].Frequency"
                raise DecodeError(msg, path=source)
            rate = TickRate.from_mhz(mhz, source=source)
            if host_start is not None and host_start.section == "Host" and host_start.cntvct is not None:
                start_cnt, time_offset = host_start.cntvct, host_start.clock_monotonic_raw
            else:
                start_cnt, time_offset = start.start_cnt, start.start_monotonic
        diff = None
        if profiler_info.npu_activity and cann_start is not None:
            diff = cann_start.wall_offset_ns or None
        if diff is None and profiler_info.end_info is not None:
            end = profiler_info.end_info
            diff = end.collection_time_end - end.monotonic_time_end
        if diff is None:
            msg = "end_info: missing, and no CANN start_info gives the wall-clock offset"
            raise DecodeError(msg, path=source)
        return cls(rate=rate, start_cnt=start_cnt, time_offset=time_offset, localtime_diff=diff)

    def to_ns(self, values: npt.ArrayLike) -> Int64Array:
        """Framework raw timestamps (syscnt or ns) -> host monotonic ns."""
        if self.rate is None:
            return _signed_delta(values, 0)
        return self.rate.scale(_signed_delta(values, self.start_cnt), "trunc") + np.int64(self.time_offset)

    def to_wall_ns(self, values: npt.ArrayLike) -> Int64Array:
        """Framework raw timestamps -> Unix ns (torch_npu ``get_local_time``)."""
        return self.to_ns(values) + np.int64(self.localtime_diff)


def framework_counts_syscnt(
    first: int, *, freq_mhz: Fraction, start_cnt: int, start_monotonic: int, collection_start_ns: int
) -> bool | None:
    """Whether torch_npu counts its timestamps in syscnt ticks (profiler_info.json
    ``start_info.syscnt_enable``), told from its first timestamp before that file exists.

    Read as ticks through the host counter's sync point (``start_cnt`` at ``start_monotonic``) and
    read as monotonic ns, only the right reading lands near the collection's start: a counter at
    tens of MHz stands at a few percent of the ns since boot, so the wrong reading is off by most of
    the machine's uptime. None when neither reading, or both, land within
    :data:`FRAMEWORK_START_SPREAD_NS` (a machine up for less than about an hour).
    """

    def near(rate: TickRate | None) -> bool:
        """Whether torch_npu's own conversion, at ``rate`` (None: ns), puts it near the start."""
        clock = FrameworkClock(rate=rate, start_cnt=start_cnt, time_offset=start_monotonic, localtime_diff=0)
        return (
            abs(int(clock.to_ns(np.array([first & _MASK64], np.uint64))[0]) - collection_start_ns)
            <= FRAMEWORK_START_SPREAD_NS
        )

    try:
        ticks_near = near(TickRate.from_mhz(freq_mhz))
    except DecodeError:  # a frequency too fine to convert with, or ticks beyond any plausible delta
        return None
    ns_near = near(None)
    return ticks_near if ticks_near != ns_near else None
