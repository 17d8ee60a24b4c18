"""The clocks of one simulated PROF_XXX directory, and conversions from host ns to raw counters.

Spec cann_raw_formats.md §3: device syscnt -> ns uses ``host_mono_corr +
(syscnt - dev_cntvct) * 1000 / hwts_freq`` with ``host_mono_corr =
host_mono + cntvct_diff * 1000 / host_freq`` from ``host_start.log.N`` /
``dev_start.log.N``; host counter -> ns uses ``host_mono_corr + (value -
host_cntvct) * 1000 / host_freq``; wall clock = monotonic + ``collectionTimeBegin
* 1000 - clockMonotonicRaw`` from start_info.

Every pair written to a control file lies on one line per clock, so every
reading of the spec gives the same time:

- the host counter runs at 100 MHz (info.json ``CPU[0].Frequency``); the host
  file ``host/host_start.log`` has ``cntvct_diff: 0`` (no device query is made
  for it), so torch_npu's conversion, which ignores the diff
  (framework_outputs.md §1.4), agrees with msprof's;
- a device's ``host_start.log.N`` has a non-zero ``cntvct_diff``; its
  ``cntvct`` is the counter value at the corrected time ``clock_monotonic_raw +
  cntvct_diff * 10``, so converting host counters with it gives the same ns as
  with the host file;
- start/end info monotonic values are whole µs, so the wall-clock offset is an
  exact integer.

All simulated event times are multiples of 20 ns, so ``to_syscnt`` and
``to_host_cnt`` are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profstream.simulate.config import ChipProfile

HOST_FREQ_MHZ = 100
HOST_TICK_NS = 1000 // HOST_FREQ_MHZ
CNTVCT_DIFF = 50  # host ticks; real 310B sample: 50 (realdata dora-robo host_start.log.0)
WALL_EPOCH_NS = 1_736_380_800_000_000_000  # 2025-01-09 00:00:00 UTC


@dataclass(frozen=True, slots=True)
class HostClock:
    """Host monotonic ns, host counter and wall clock of one process."""

    mono0: int  # clock_monotonic_raw of host/host_start.log
    cnt0: int  # cntvct at mono0
    wall_offset: int  # wall ns - monotonic ns

    def to_host_cnt(self, ns: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        return (self.cnt0 + (np.asarray(ns, np.int64) - self.mono0) // HOST_TICK_NS).astype(np.uint64)

    def cnt_at(self, ns: int) -> int:
        return self.cnt0 + (ns - self.mono0) // HOST_TICK_NS


@dataclass(frozen=True, slots=True)
class DeviceClock:
    """A device's syscnt and monotonic clock, tied to the host clock at ``host_mono``."""

    device_id: int
    profile: ChipProfile
    host_mono: int  # host clock_monotonic_raw of host_start.log.N
    host_cnt: int  # host cntvct of host_start.log.N (at the corrected time)
    dev_mono: int  # device clock_monotonic_raw of dev_start.log.N
    dev_cnt: int  # device syscnt of dev_start.log.N

    @property
    def corrected_mono(self) -> int:
        return self.host_mono + CNTVCT_DIFF * HOST_TICK_NS

    def to_syscnt(self, ns: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        delta = np.asarray(ns, np.int64) - self.corrected_mono
        return (self.dev_cnt + delta // self.profile.tick_ns).astype(np.uint64)


def host_clock(seed: int, rank: int) -> HostClock:
    """Deterministic host clocks: a machine up for about two days, started on a fixed date."""
    rng = np.random.default_rng([seed, rank, 0xC10C])
    mono0 = int(rng.integers(150_000, 200_000)) * 1_000_000_000 + int(rng.integers(0, 50_000)) * 1000
    cnt0 = int(rng.integers(10**12, 2 * 10**13))
    wall = WALL_EPOCH_NS + int(rng.integers(0, 86_400)) * 1_000_000_000 + int(rng.integers(0, 10**6)) * 1000
    return HostClock(mono0=mono0, cnt0=cnt0, wall_offset=wall - mono0)


def device_clock(host: HostClock, profile: ChipProfile, device_id: int, local_index: int) -> DeviceClock:
    """The clocks of a device queried ``2 + local_index`` ms after the host start log."""
    rng = np.random.default_rng([host.cnt0, device_id, 0xDE1])
    host_mono = host.mono0 + (2 + local_index) * 1_000_000 + int(rng.integers(0, 5_000)) * 20
    corrected = host_mono + CNTVCT_DIFF * HOST_TICK_NS
    dev_mono = int(rng.integers(10_000, 50_000)) * 1_000_000_000 + int(rng.integers(0, 10**6)) * 20
    dev_cnt = dev_mono // profile.tick_ns + int(rng.integers(0, 10**6))
    return DeviceClock(
        device_id=device_id,
        profile=profile,
        host_mono=host_mono,
        host_cnt=host.cnt_at(corrected),
        dev_mono=dev_mono,
        dev_cnt=dev_cnt,
    )
