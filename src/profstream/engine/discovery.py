"""Finding profiles: PROF_XXX dirs, their host and device dirs, metadata, traits and streams.

Accepted inputs: a PROF_XXX dir; its parent; an ``*_ascend_pt`` / ``*_ascend_ms`` dir
(PROF_XXX inside, ``FRAMEWORK/`` and ``profiler_info[_<rank>].json`` beside it); a
directory of many of these (searched :data:`MAX_DEPTH` levels down). A PROF dir is any
directory with a ``host`` or ``device_<id>`` sub-directory, as msprof's C++
``Context::Load`` enumerates them (specs/cann_raw_formats.md §1.1); the device id comes
from the directory name.

Per dir, the control files are read (:mod:`profstream.engine.metadata`), the
:class:`~profstream.codecs.StreamTraits` computed (``platform_version`` and ``version``
from info.json, ``sample-based`` from sample.json, stream expand from the host's
``expand_stream_spec`` compact records) and ``data/`` grouped into streams
(:func:`~profstream.engine.sources.scan_data_dir`): per (dir, family), and on the host
per aging group, ``unaging`` first (§1.3, §1.4).

Choices:
- The input directory is the containment root: an entry that resolves outside it (a
  symlink) raises :class:`~profstream.errors.InputPathError`. So a PROF dir given on its
  own is read without the ``FRAMEWORK/`` beside it, as msprof reads it; give the
  ``*_ascend_pt`` dir to include the framework data.
- Stream expand: the first ``expandStatus`` of the stream (msprof stores the first record
  of each file; one switch per collection); absent file -> off.
- Unknown names in ``data/`` and ``FRAMEWORK/`` (a family no codec reads, such as ``llc.data``)
  are not decoded: each dir keeps them in :attr:`DataDir.not_decoded`, so ``inspect`` and the
  export summary name them, and they are logged once per :class:`Discovery` (a rescan does not
  log them again).
- A host dir without ``host_start.log`` borrows the host clock sync of the lowest device
  (``host_start.log.N`` samples the same host clocks); msprof's Python would treat host
  counter values as ns there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from profstream import events
from profstream.codecs import StreamTraits
from profstream.engine.clock import DeviceClock, FrameworkClock
from profstream.engine.metadata import (
    PROFILER_INFO_NAME,
    DirMetadata,
    ProfilerInfo,
    load_dir_metadata,
    read_profiler_info,
)
from profstream.engine.sources import Stream, StreamReader, resolve_inside, scan_data_dir
from profstream.errors import DecodeError, InputPathError

DEVICE_DIR = re.compile(r"^device_(\d+)$")
HOST_DIR = "host"
DATA_DIR = "data"
FRAMEWORK_DIR = "FRAMEWORK"
#: levels below the input searched for PROF dirs (dir of many ``*_ascend_pt`` -> PROF -> ...).
MAX_DEPTH = 3
#: the ``.<device id>.slice_<n>`` (or ``.slice_<n>``) ending of a data file's name
SLICE_SUFFIX = re.compile(r"(\.\d+)?\.slice_\d+$")
EXPAND_FAMILY = "expand_stream_spec"
EXPAND_COLUMN = "expand_status"


@dataclass(frozen=True, slots=True)
class DataDir:
    """One ``host``, ``device_N`` or ``FRAMEWORK`` dir: its control files, traits and streams."""

    path: Path
    device_id: int | None  # None: host (or FRAMEWORK)
    metadata: DirMetadata | None  # None: FRAMEWORK (no control files)
    traits: StreamTraits
    streams: tuple[Stream, ...]
    not_decoded: tuple[Path, ...] = ()  #: data files no codec reads

    def stream(self, family: str, aging: bool | None = None) -> Stream | None:
        return next((s for s in self.streams if s.family == family and s.aging == aging), None)


@dataclass(frozen=True, slots=True)
class Profile:
    """One PROF_XXX collection (and the torch_npu framework data around it, if any)."""

    path: Path
    host: DataDir | None
    devices: tuple[DataDir, ...]  # by device id
    framework: DataDir | None
    profiler_info: ProfilerInfo | None
    profiler_info_path: Path | None

    def device(self, device_id: int) -> DataDir:
        found = next((d for d in self.devices if d.device_id == device_id), None)
        if found is None:
            msg = f"no device_{device_id} in {self.path}"
            raise InputPathError(msg)
        return found

    def clock(self, data_dir: DataDir) -> DeviceClock:
        """The clock of ``data_dir``; a host dir without host_start.log borrows a device's sync."""
        if data_dir.metadata is None:
            msg = "the FRAMEWORK dir has no clock of its own; use framework_clock()"
            raise InputPathError(msg)
        borrowed = None
        if data_dir.metadata.is_host and data_dir.metadata.host_start is None:
            borrowed = next((d.metadata.host_start for d in self.devices if d.metadata), None)
        return DeviceClock.from_metadata(data_dir.metadata, host_sync=borrowed)

    @property
    def not_decoded(self) -> tuple[Path, ...]:
        """The data files of every dir that no codec reads (not part of any output)."""
        dirs = (self.host, *self.devices, self.framework)
        return tuple(path for d in dirs if d is not None for path in d.not_decoded)

    @property
    def controls(self) -> tuple[DirMetadata, ...]:
        """The control files of the host dir, then of each device dir: collection-wide values are
        read from the first (msprof's ``GetLocalTime`` takes the host start_info, else device 0's)."""
        dirs = (self.host, *self.devices)
        return tuple(d.metadata for d in dirs if d is not None and d.metadata is not None)

    @property
    def wall_offset_ns(self) -> int:
        """Unix ns minus host monotonic ns of the first control files (msprof_outputs.md §3.5); 0 without."""
        controls = self.controls
        return controls[0].start_info.wall_offset_ns if controls else 0

    @property
    def collection_starts_ns(self) -> dict[int, int]:
        """Per device, its start_info ``clockMonotonicRaw`` (host ns): msprof's outputs leave out what
        ran before it (msprof_outputs.md §3.5 item 3; ``InfoConfReader.get_collect_time`` reads each
        dir's own start_info)."""
        return {
            d.device_id: d.metadata.start_info.clock_monotonic_raw
            for d in self.devices
            if d.device_id is not None and d.metadata is not None
        }

    def framework_clock(self) -> FrameworkClock:
        """torch_npu's conversion: host/info.json, host/host_start.log, the CANN start_info."""
        if self.profiler_info is None:
            msg = f"no profiler_info*.json beside {self.path}"
            raise InputPathError(msg)
        host = self.host.metadata if self.host is not None else None
        first = next((d.metadata for d in self.devices if d.metadata), None)
        cann_start = host.start_info if host is not None else first.start_info if first else None
        return FrameworkClock.from_files(
            self.profiler_info,
            host_info=None if host is None else host.info,
            host_start=None if host is None else host.host_start,
            cann_start=cann_start,
            source=str(self.profiler_info_path),
        )


class Discovery:
    """Finds the profiles under one input directory; remembers which unknown names it logged."""

    def __init__(self, path: Path | str) -> None:
        given = Path(path)
        if not given.exists():
            msg = f"{given}: no such file or directory"
            raise InputPathError(msg)
        if not given.is_dir():
            msg = f"{given}: expected a directory (a PROF_XXX dir, its parent or an *_ascend_pt dir)"
            raise InputPathError(msg)
        self.root = given.resolve()
        self._logged: set[Path] = set()
        self._log = events.get_logger(component="discovery", root=str(self.root))

    def profiles(self) -> tuple[Profile, ...]:
        found = self._prof_dirs(self.root, MAX_DEPTH)
        if not found:
            msg = f"{self.root}: no PROF_XXX directory (one with host/ or device_<id>/) found"
            raise InputPathError(msg)
        return tuple(self._profile(p) for p in found)

    def _checked(self, entries: list[Path]) -> list[Path]:
        """``entries`` sorted, each verified to resolve inside the input directory."""
        for entry in entries:
            resolve_inside(self.root, entry)
        return sorted(entries)

    def _subdirs(self, path: Path) -> list[Path]:
        """The sub-directories of ``path`` (names as listed, not resolved)."""
        return self._checked([e for e in path.iterdir() if e.is_dir()])

    def _prof_dirs(self, path: Path, depth: int) -> list[Path]:
        subdirs = self._subdirs(path)
        if any(d.name == HOST_DIR or DEVICE_DIR.match(d.name) for d in subdirs):
            return [path]
        if depth == 0:
            return []
        found: list[Path] = []
        for sub in subdirs:
            found.extend(p for p in self._prof_dirs(sub, depth - 1) if p not in found)
        return found

    def _profile(self, path: Path) -> Profile:
        self._log.debug(events.DIR_DISCOVERED, path=str(path))  # the daemon logs it once per collection
        entries = self._subdirs(path)
        host_path = next((e for e in entries if e.name == HOST_DIR), None)
        host = None
        if host_path is not None:
            host = self._data_dir(host_path, None, StreamTraits())
            traits = replace(host.traits, stream_expand=self._stream_expand(host))
            host = replace(
                host, traits=traits, streams=tuple(replace(s, traits=traits) for s in host.streams)
            )
        expand = host is not None and host.traits.stream_expand
        devices = []
        for entry in entries:
            matched = DEVICE_DIR.match(entry.name)
            if matched:
                device = self._data_dir(entry, int(matched.group(1)), StreamTraits(stream_expand=expand))
                devices.append(device)
        # by name, as msprof merges its per-device summaries (device_10 before device_2, msprof_outputs.md
        # §1.4; its C++ sorts Device_id as text too): every per-device output follows this order
        devices.sort(key=lambda d: d.path.name)
        framework, info, info_path = self._framework(path.parent)
        return Profile(path, host, tuple(devices), framework, info, info_path)

    def _data_dir(self, path: Path, device_id: int | None, base: StreamTraits) -> DataDir:
        names = [e.name for e in self._checked(list(path.iterdir()))]
        meta = load_dir_metadata(path, device_id, names)
        traits = replace(
            base,
            platform=meta.info.platform_version,
            sample_based=meta.sample.sample_based,
            aiv_sample_based=meta.sample.aiv_sample_based,
            version=meta.info.version or None,
        )
        return self._scanned(path, path / DATA_DIR, device_id, meta, traits)

    def _scanned(
        self,
        path: Path,
        data_dir: Path,
        device_id: int | None,
        meta: DirMetadata | None,
        traits: StreamTraits,
    ) -> DataDir:
        """The dir with the streams of ``data_dir``, and the files there that no codec reads."""
        if not data_dir.is_dir():
            return DataDir(path, device_id, meta, traits, ())
        scan = scan_data_dir(data_dir, self.root, traits)
        for entry in scan.unknown:
            if entry not in self._logged:
                self._logged.add(entry)
                self._log.info(events.FILE_IGNORED, file=str(entry), reason="no codec owns this name")
        streams = [
            Stream(scan.codecs[family], device_id, aging, data_dir, self.root, files, traits)
            for (family, aging), files in scan.slices.items()
        ]
        ordered = tuple(sorted(streams, key=lambda s: (s.family, s.aging is True)))
        return DataDir(path, device_id, meta, traits, ordered, scan.unknown)

    def _stream_expand(self, host: DataDir) -> bool:
        """expandStatus of the host's expand_stream_spec stream (unaging first); off when absent."""
        for stream in host.streams:
            if stream.family != EXPAND_FAMILY:
                continue
            for batch in StreamReader(stream):
                if EXPAND_COLUMN not in batch.schema.names:
                    msg = f"{EXPAND_FAMILY} codec has no {EXPAND_COLUMN!r} column"
                    raise DecodeError(msg, path=stream.files[0].path, family=EXPAND_FAMILY)
                return bool(batch.column(EXPAND_COLUMN)[0].as_py() == 1)
        return False

    def _framework(self, parent: Path) -> tuple[DataDir | None, ProfilerInfo | None, Path | None]:
        """FRAMEWORK/ and profiler_info*.json beside a PROF dir, when that dir is inside the input."""
        if not parent.is_relative_to(self.root):
            return None, None, None
        infos = self._checked([e for e in parent.iterdir() if PROFILER_INFO_NAME.match(e.name)])
        if len(infos) > 1:
            msg = f"expected one profiler_info*.json, found {', '.join(p.name for p in infos)}"
            raise DecodeError(msg, path=parent)
        info_path = infos[0] if infos else None
        info = read_profiler_info(info_path) if info_path is not None else None
        fwk = parent / FRAMEWORK_DIR
        framework = None
        if fwk in self._subdirs(parent):
            framework = self._scanned(fwk, fwk, None, None, StreamTraits())
        return framework, info, info_path


def file_kind(name: str) -> str:
    """A data file's name without its device id and slice number (``llc.data.0.slice_3`` -> ``llc.data``)."""
    return SLICE_SUFFIX.sub("", name)


def discover(path: Path | str) -> tuple[Profile, ...]:
    """Every profile under ``path`` (see the module docstring for the accepted shapes)."""
    return Discovery(path).profiles()
