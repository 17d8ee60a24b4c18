"""Control files of a PROF_XXX directory, typed and frozen, read the way msprof reads them.

Files and keys: specs/cann_raw_formats.md §1.2 (``info.json[.N]``, ``sample.json``,
``start_info[.N]``, ``end_info[.N]``, ``host_start.log[.N]``, ``dev_start.log.N``) and §3.1
(which value feeds which clock); specs/framework_outputs.md §1.4 and §3.8 (torch_npu's
``profiler_info[_<rank>].json``). How msprof reads them: [MSP]
``analysis/common_func/info_conf_reader.py`` (Python: one ``readline`` of at most
``MAX_READ_LINE_BYTES`` per JSON file, the first INI section of ``host_start.log``,
``key: value`` lines of ``dev_start.log``) and
``analysis/csrc/domain/services/environment/context.cpp`` (C++: exactly one file of each
kind, ``.done`` markers excluded, ``end_info`` optional, ``cntvct_diff`` defaulting to 0,
exactly one ``DeviceInfo`` entry in a device dir, non-empty ``hwts_frequency`` and
``aic_frequency``).

Structure is strict, values are lenient: a missing file or key, malformed JSON, an
over-long line or a non-numeric number raise :class:`~profstream.errors.DecodeError`
naming the file and the key; numbers may be JSON numbers or numeric strings because real
files have both (``"platform_version": "7"``; ``"Frequency": "48.000000"`` on a 310B,
``"Frequency": 1000`` on a 910). Unknown keys are ignored: the files carry dozens of keys
the engine never needs.

Choices where the sources differ:
- ``CPU[0].Frequency`` (host counter, MHz): the empty string means "no host counter"
  (collector ``NOT_SUPPORT_FREQUENCY``) and reads as ``None``; any other value must be a
  number > 0 (the C++ loader refuses 0; the Python one silently falls back).
- ``info.json``, ``sample.json`` and ``start_info`` are required in every dir (C++
  ``Context::LoadJsonData``); ``end_info``, ``host_start.log`` and ``dev_start.log`` are
  optional here (msprof's Python reads dirs without them, and the real 910 sample has
  none) and :mod:`profstream.engine.clock` demands the ones a conversion needs.
- ``host_start.log`` keeps the keys of its first section only (Python ``configparser``
  use); ``cntvct`` may be absent (legacy 2020 files carry ``clock_realtime`` instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

from profstream.errors import DecodeError

#: msprof's ``Constant.MAX_READ_LINE_BYTES`` (8196 KiB): the longest control-file line it reads.
MAX_LINE_BYTES = 8196 * 1024
#: msprof's id for the host directory (``HOST_ID`` in the C++ context).
HOST_ID = 64

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Mhz = Annotated[float, msgspec.Meta(gt=0)]


class _Lenient(msgspec.Struct, frozen=True, kw_only=True):
    """Base of the control-file structs: immutable; unknown keys ignored."""


def parse_mhz(value: str | float, key: str) -> Fraction | None:
    """A frequency in MHz as an exact fraction; ``None`` for the empty string.

    ``"38.4"`` becomes 192/5, not the float 38.4, so tick conversions stay exact.
    Raises ``ValueError`` naming ``key`` for a non-numeric or non-positive value.
    """
    text = value.strip() if isinstance(value, str) else repr(float(value))
    if not text:
        return None
    try:
        mhz = Fraction(text)
    except ValueError:
        msg = f"{key}: expected a frequency in MHz (a number or an empty string), got {value!r}"
        raise ValueError(msg) from None
    if mhz <= 0:
        msg = f"{key}: expected a frequency > 0 MHz, got {value!r}"
        raise ValueError(msg)
    return mhz


class CpuInfo(_Lenient, frozen=True):
    """One ``CPU[i]`` entry of info.json; ``Frequency`` is the host counter's MHz."""

    frequency: str | float = msgspec.field(name="Frequency", default="")
    cpu_id: int = msgspec.field(name="Id", default=0)
    name: str = msgspec.field(name="Name", default="")

    def __post_init__(self) -> None:
        parse_mhz(self.frequency, "Frequency")

    @property
    def frequency_mhz(self) -> Fraction | None:
        return parse_mhz(self.frequency, "Frequency")


class DeviceInfo(_Lenient, frozen=True):
    """The ``DeviceInfo[0]`` entry of a device's info.json (frequencies in MHz)."""

    hwts_frequency: Mhz
    aic_frequency: Mhz
    aiv_frequency: str | float = ""
    device_id: int | None = msgspec.field(name="id", default=None)
    ai_core_num: NonNegative = 0
    aiv_num: NonNegative = 0
    ai_cpu_core_num: NonNegative = 0

    def __post_init__(self) -> None:
        parse_mhz(self.aiv_frequency, "aiv_frequency")

    @property
    def hwts_mhz(self) -> Fraction:
        """The device syscnt frequency (HWTS/STARS timestamps), exact."""
        return Fraction(repr(self.hwts_frequency))

    @property
    def aic_mhz(self) -> Fraction:
        return Fraction(repr(self.aic_frequency))

    @property
    def aiv_mhz(self) -> Fraction | None:
        return parse_mhz(self.aiv_frequency, "aiv_frequency")


class InfoJson(_Lenient, frozen=True):
    """``info.json`` (host) / ``info.json.N`` (device): the collection's machine description."""

    platform_version: int
    cpu: tuple[CpuInfo, ...] = msgspec.field(name="CPU")
    device_info: tuple[DeviceInfo, ...] = msgspec.field(name="DeviceInfo")
    version: str = ""
    hostname: str = ""
    pid: int | str = "NA"
    pid_name: str = ""
    rank_id: int = -1
    devices: str | int = ""
    drv_version: int = msgspec.field(name="drvVersion", default=0)
    cann_version: str = msgspec.field(name="cannVersion", default="")
    hwtype: str = ""

    def __post_init__(self) -> None:
        if not self.cpu:
            msg = "CPU: expected at least one entry (CPU[0].Frequency is the host counter), got []"
            raise ValueError(msg)
        if isinstance(self.pid, str) and self.pid != "NA" and not self.pid.strip().isdigit():
            msg = f"pid: expected a process id or 'NA', got {self.pid!r}"
            raise ValueError(msg)

    @property
    def host_freq_mhz(self) -> Fraction | None:
        """``CPU[0].Frequency``; ``None`` when the host counter is not supported."""
        return self.cpu[0].frequency_mhz

    @property
    def process_id(self) -> int | None:
        """The profiled process id; ``None`` when info.json says ``NA``."""
        if isinstance(self.pid, int):
            return self.pid
        return None if self.pid == "NA" else int(self.pid)


class SampleJson(_Lenient, frozen=True):
    """``sample.json``: the collection switches the engine needs."""

    ai_core_profiling_mode: str
    ai_core_profiling_events: str = ""
    ai_core_metrics: str = ""
    aiv_profiling_mode: str = ""
    aiv_profiling_events: str = ""
    aiv_metrics: str = ""
    devices: str | int = ""
    prof_level: str = msgspec.field(name="profLevel", default="")
    prof_level_hisi: str = msgspec.field(name="prof_level", default="")
    instr_profiling_freq: int | None = None
    llc_profiling: str = ""
    qos_events: str = msgspec.field(name="qosEvents", default="")
    storage_limit: str = msgspec.field(name="storageLimit", default="")
    hwts_log: str = ""
    stars_acsq_task: str = ""
    l2_cache_events: str = msgspec.field(name="l2CacheTaskProfilingEvents", default="")
    hbm_events: str = msgspec.field(name="hbm_profiling_events", default="")

    def __post_init__(self) -> None:
        _ = self.device_ids

    @property
    def sample_based(self) -> bool:
        """AI Core PMU sampled by time rather than per task (selects the 96/112-B layouts)."""
        return self.ai_core_profiling_mode == "sample-based"

    @property
    def aiv_sample_based(self) -> bool:
        """AI Vector Core PMU sampled by time: msprof reads aiVectorCore.data by this mode, not the AI
        Core's (``ParsingAIVectorCoreSampleData.get_aicore_type``)."""
        return self.aiv_profiling_mode == "sample-based"

    @property
    def level(self) -> str:
        """``profLevel`` (products) or ``prof_level`` (hisi), as msprof's ``_get_prof_level``."""
        return self.prof_level or self.prof_level_hisi

    @property
    def device_ids(self) -> tuple[int, ...]:
        if isinstance(self.devices, int):
            return (self.devices,)
        parts = [p.strip() for p in self.devices.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            msg = f"devices: expected comma-separated device ids, got {self.devices!r}"
            raise ValueError(msg)
        return tuple(int(p) for p in parts)


class StartInfo(_Lenient, frozen=True):
    """``start_info[.N]``: the wall clock and CLOCK_MONOTONIC_RAW at the start of collection."""

    collection_time_begin: NonNegative = msgspec.field(name="collectionTimeBegin")  # Unix µs
    clock_monotonic_raw: NonNegative = msgspec.field(name="clockMonotonicRaw")  # ns
    collection_date_begin: str = msgspec.field(name="collectionDateBegin", default="")

    @property
    def wall_offset_ns(self) -> int:
        """Unix ns minus monotonic ns (§3.2 "Monotonic -> local wall clock"), exact."""
        return self.collection_time_begin * 1000 - self.clock_monotonic_raw


class EndInfo(_Lenient, frozen=True):
    """``end_info[.N]``: the same pair at the end of collection."""

    collection_time_end: NonNegative = msgspec.field(name="collectionTimeEnd")  # Unix µs
    clock_monotonic_raw: NonNegative = msgspec.field(name="clockMonotonicRaw")  # ns
    collection_date_end: str = msgspec.field(name="collectionDateEnd", default="")

    @property
    def wall_offset_ns(self) -> int:
        return self.collection_time_end * 1000 - self.clock_monotonic_raw


class HostStartLog(_Lenient, frozen=True):
    """``host_start.log[.N]``: the host clocks sampled at the time-sync instant.

    ``section`` is ``Host`` in host/, ``DeviceN`` in device_N/; ``cntvct`` is the host
    counter (absent in legacy files), ``cntvct_diff`` a quarter of the shortest counter
    window around the device query, in host ticks (§3.1).
    """

    section: str
    clock_monotonic_raw: NonNegative  # host ns
    cntvct: NonNegative | None = None  # host counter ticks
    cntvct_diff: NonNegative = 0  # host counter ticks
    clock_realtime: NonNegative | None = None  # legacy: Unix ns


class DevStartLog(_Lenient, frozen=True):
    """``dev_start.log.N``: the device clocks sampled at the same instant."""

    clock_monotonic_raw: NonNegative  # device ns
    cntvct: NonNegative  # device syscnt ticks


class FrameworkStartInfo(_Lenient, frozen=True):
    """``start_info`` of profiler_info.json: how torch_npu's own timestamps are counted."""

    syscnt_enable: bool = False
    freq: Mhz | None = None
    start_cnt: NonNegative = 0
    start_monotonic: NonNegative = 0

    @property
    def freq_mhz(self) -> Fraction | None:
        return None if self.freq is None else Fraction(repr(self.freq))


class FrameworkEndInfo(_Lenient, frozen=True):
    """``end_info`` of profiler_info.json: wall clock and monotonic at the end, both ns."""

    collection_time_end: NonNegative = msgspec.field(name="collectionTimeEnd")
    monotonic_time_end: NonNegative = msgspec.field(name="MonotonicTimeEnd")


class CommonConfig(_Lenient, frozen=True):
    activities: tuple[str, ...] = ()
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False


class ExperimentalConfig(_Lenient, frozen=True):
    profiler_level: str = msgspec.field(name="_profiler_level", default="Level0")
    aic_metrics: str = msgspec.field(name="_aic_metrics", default="ACL_AICORE_NONE")
    l2_cache: bool = msgspec.field(name="_l2_cache", default=False)
    msprof_tx: bool = msgspec.field(name="_msprof_tx", default=False)
    op_attr: bool = msgspec.field(name="_op_attr", default=False)
    data_simplification: bool | None = msgspec.field(name="_data_simplification", default=None)
    export_type: str | tuple[str, ...] = msgspec.field(name="_export_type", default="text")

    @property
    def export_types(self) -> tuple[str, ...]:
        """``_export_type`` is a string in older torch_npu, a list in newer ones."""
        return (self.export_type,) if isinstance(self.export_type, str) else self.export_type


class FrameworkConfig(_Lenient, frozen=True):
    common_config: CommonConfig = msgspec.field(default_factory=CommonConfig)
    experimental_config: ExperimentalConfig = msgspec.field(default_factory=ExperimentalConfig)


class ProfilerInfo(_Lenient, frozen=True):
    """``profiler_info[_<rank>].json`` at the top of an ``*_ascend_pt`` dir (framework_outputs §3.8)."""

    config: FrameworkConfig = msgspec.field(default_factory=FrameworkConfig)
    start_info: FrameworkStartInfo | None = None
    end_info: FrameworkEndInfo | None = None
    rank_id: int = -1
    torch_npu_version: str = ""
    cann_version: str = ""

    @property
    def npu_activity(self) -> bool:
        return "ProfilerActivity.NPU" in self.config.common_config.activities


@dataclass(frozen=True, slots=True)
class DirMetadata:
    """Every control file of one ``host`` or ``device_N`` directory."""

    path: Path
    device_id: int | None  # None: the host dir
    info: InfoJson
    sample: SampleJson
    start_info: StartInfo
    end_info: EndInfo | None
    host_start: HostStartLog | None
    dev_start: DevStartLog | None

    @property
    def is_host(self) -> bool:
        return self.device_id is None

    def end_info_now(self) -> EndInfo | None:
        """end_info as the directory holds it now: a live collection writes it last, after the plan."""
        if self.end_info is not None or not self.path.is_dir():
            return self.end_info
        path = _find(self.path, sorted(p.name for p in self.path.iterdir()), "end_info", self.device_id)
        return None if path is None else read_end_info(path)

    @property
    def device_info(self) -> DeviceInfo:
        """``DeviceInfo[0]`` (a device dir has exactly one entry)."""
        if not self.info.device_info:
            msg = "DeviceInfo: the host dir describes no device"
            raise DecodeError(msg, path=self.path / control_name("info.json", self.device_id))
        return self.info.device_info[0]

    def file(self, stem: str) -> Path:
        """Where control file ``stem`` (``host_start.log``, ...) of this dir lives."""
        return self.path / control_name(stem, self.device_id)


def control_name(stem: str, device_id: int | None) -> str:
    """The file name of a control file: ``info.json`` in host/, ``info.json.N`` in device_N/."""
    if device_id is None or stem == "sample.json":
        return stem
    return f"{stem}.{device_id}"


_T = TypeVar("_T")


def _read_bounded(path: Path, *, first_line: bool) -> bytes:
    """The first line (or the whole file) of ``path``, refusing more than MAX_LINE_BYTES."""
    try:
        with path.open("rb") as handle:
            data = handle.readline(MAX_LINE_BYTES + 1) if first_line else handle.read(MAX_LINE_BYTES + 1)
    except OSError as exc:
        msg = f"cannot read control file: {exc.strerror or exc}"
        raise DecodeError(msg, path=path) from exc
    if len(data.rstrip(b"\r\n")) > MAX_LINE_BYTES:
        what = "line" if first_line else "file"
        msg = f"expected a {what} of at most {MAX_LINE_BYTES} bytes (msprof's MAX_READ_LINE_BYTES)"
        raise DecodeError(msg, path=path)
    return data


def _decode_json(path: Path, kind: type[_T], *, first_line: bool) -> _T:
    data = _read_bounded(path, first_line=first_line)
    try:
        return msgspec.json.decode(data, type=kind, strict=False)
    except msgspec.DecodeError as exc:
        msg = f"invalid {kind.__name__}: {exc}"
        raise DecodeError(msg, path=path) from None


def _convert(path: Path, values: dict[str, Any], kind: type[_T]) -> _T:
    try:
        return msgspec.convert(values, type=kind, strict=False)
    except msgspec.ValidationError as exc:
        msg = f"invalid {kind.__name__}: {exc}"
        raise DecodeError(msg, path=path) from None


def _key_values(path: Path, *, sectioned: bool) -> tuple[str | None, dict[str, Any]]:
    """``key: value`` lines, of the first ``[section]`` when ``sectioned``.

    Like ``configparser``, keys are lower-cased and a repeated key is an error.
    """
    text = _read_bounded(path, first_line=False).decode("utf-8", errors="replace")
    section: str | None = None
    values: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            if section is not None:
                break  # msprof reads the first section only
            section = line[1:-1].strip()
            continue
        if sectioned and section is None:
            msg = f"line {number}: expected a [Host] or [DeviceN] section header first, got {line!r}"
            raise DecodeError(msg, path=path)
        key, sep, value = line.partition(":")
        if not sep:
            msg = f"line {number}: expected 'key: value', got {line!r}"
            raise DecodeError(msg, path=path)
        key = key.strip().lower()
        if key in values:
            msg = f"line {number}: key {key!r} appears twice"
            raise DecodeError(msg, path=path)
        values[key] = value.strip()
    if sectioned and section is None:
        msg = "expected a [Host] or [DeviceN] section, found none"
        raise DecodeError(msg, path=path)
    return section, values


def read_info_json(path: Path) -> InfoJson:
    """info.json[.N]: its first line only, as msprof's ``InfoConfReader`` reads it."""
    return _decode_json(path, InfoJson, first_line=True)


def read_sample_json(path: Path) -> SampleJson:
    return _decode_json(path, SampleJson, first_line=True)


def read_start_info(path: Path) -> StartInfo:
    return _decode_json(path, StartInfo, first_line=True)


def read_end_info(path: Path) -> EndInfo:
    return _decode_json(path, EndInfo, first_line=True)


def read_host_start_log(path: Path) -> HostStartLog:
    section, values = _key_values(path, sectioned=True)
    return _convert(path, {**values, "section": section}, HostStartLog)


def read_dev_start_log(path: Path) -> DevStartLog:
    _, values = _key_values(path, sectioned=False)
    return _convert(path, values, DevStartLog)


def read_profiler_info(path: Path) -> ProfilerInfo:
    """profiler_info[_<rank>].json: pretty-printed, so read whole (bounded)."""
    return _decode_json(path, ProfilerInfo, first_line=False)


PROFILER_INFO_NAME = re.compile(r"^profiler_info(?:_(?P<rank>\d+))?\.json$")


def _find(directory: Path, names: list[str], stem: str, device_id: int | None) -> Path | None:
    """The one control file ``stem`` (``stem`` or ``stem.N``) in ``names``; ``.done`` markers excluded."""
    pattern = re.compile(rf"^{re.escape(stem)}(?:\.\d+)?$")
    found = sorted(n for n in names if pattern.match(n))
    if len(found) > 1:
        msg = f"expected one {control_name(stem, device_id)}, found {len(found)}: {', '.join(found)}"
        raise DecodeError(msg, path=directory)
    return directory / found[0] if found else None


def _require(directory: Path, names: list[str], stem: str, device_id: int | None) -> Path:
    path = _find(directory, names, stem, device_id)
    if path is None:
        msg = f"missing required control file {control_name(stem, device_id)}"
        raise DecodeError(msg, path=directory)
    return path


def load_dir_metadata(directory: Path, device_id: int | None, names: list[str] | None = None) -> DirMetadata:
    """Read the control files of a ``host`` (``device_id`` None) or ``device_N`` dir.

    ``names`` is the dir's listing when the caller already has it (and checked it).
    """
    listing = sorted(p.name for p in directory.iterdir()) if names is None else names
    info_path = _require(directory, listing, "info.json", device_id)
    info = read_info_json(info_path)
    if device_id is not None and len(info.device_info) != 1:
        msg = f"DeviceInfo: expected exactly one entry in a device dir, found {len(info.device_info)}"
        raise DecodeError(msg, path=info_path)
    end_path = _find(directory, listing, "end_info", device_id)
    host_path = _find(directory, listing, "host_start.log", device_id)
    dev_path = _find(directory, listing, "dev_start.log", device_id) if device_id is not None else None
    return DirMetadata(
        path=directory,
        device_id=device_id,
        info=info,
        sample=read_sample_json(_require(directory, listing, "sample.json", device_id)),
        start_info=read_start_info(_require(directory, listing, "start_info", device_id)),
        end_info=None if end_path is None else read_end_info(end_path),
        host_start=None if host_path is None else read_host_start_log(host_path),
        dev_start=None if dev_path is None else read_dev_start_log(dev_path),
    )
