"""The library entry point: ``profstream.open(path)``.

A :class:`Profile` covers every PROF_XXX collection found under ``path`` (one
dir, its parent, an ``*_ascend_pt`` dir, or a directory of many). It lists
devices and record families and reads any family as a
``pyarrow.RecordBatchReader`` of decoded records in native units; nothing
prints, errors are exceptions from :mod:`profstream.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pyarrow as pa

from profstream.codecs._base import OnInvalid
from profstream.engine import discovery
from profstream.engine.clock import DeviceClock, FrameworkClock
from profstream.engine.sources import DEFAULT_CHUNK_BYTES, Stream, StreamReader, StreamStats
from profstream.errors import InputPathError

#: where a family's records live: a device id, the host dir, or the torch_npu FRAMEWORK dir.
Place = int | Literal["host", "framework"]


class FamilyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``inspect`` says about one record family in one directory."""

    family: str
    aging: bool | None  # host streams: aging.* (True) or unaging.* (False) files
    files: int
    bytes: int
    records: int
    lost: int  # records missing according to the rolling counter
    dropped: dict[str, int]  # reason -> invalid records skipped
    truncated_bytes: int  # a partial record at the end of the stream
    leading_bytes_dropped: int  # an aged stream that began mid-record
    time_column: str | None
    first_ns: int | None  # host-monotonic ns where the clock is known, else native units
    last_ns: int | None
    time_unit: str  # "ns" (converted) or "native"


class DirReport(msgspec.Struct, frozen=True, kw_only=True):
    place: str  # "host", "device_N" or "FRAMEWORK"
    path: str
    families: list[FamilyReport]
    not_decoded: list[str] = msgspec.field(default_factory=list)  # data file names no codec reads


class ProfReport(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    platform: int | None
    dirs: list[DirReport]


class InspectReport(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    profiles: list[ProfReport]

    def render(self) -> str:
        """A table for people: one line per family."""
        lines = []
        for prof in self.profiles:
            lines.append(f"{prof.path}  (platform_version {prof.platform})")
            lines.append(
                f"  {'dir':<10} {'family':<26} {'files':>5} {'bytes':>12} {'records':>11} {'lost':>6}"
                f" {'dropped':>7}  time range (ms)"
            )
            for place in prof.dirs:
                for fam in place.families:
                    name = f"{fam.family} (aging)" if fam.aging else fam.family
                    span = ""
                    if fam.first_ns is not None and fam.last_ns is not None:
                        if fam.time_unit == "ns":
                            span = f"{fam.first_ns / 1e6:.3f} .. {fam.last_ns / 1e6:.3f}"
                        else:
                            span = f"{fam.first_ns} .. {fam.last_ns} ({fam.time_column}, native)"
                    lines.append(
                        f"  {place.place:<10} {name:<26} {fam.files:>5} {fam.bytes:>12,} "
                        f"{fam.records:>11,} {fam.lost:>6} {sum(fam.dropped.values()):>7}  {span}"
                    )
                if place.not_decoded:
                    names = ", ".join(place.not_decoded)
                    lines.append(f"  {place.place:<10} not decoded (no codec): {names}")
        return "\n".join(lines)


def _place_name(data_dir: discovery.DataDir) -> str:
    if data_dir.metadata is None:
        return "FRAMEWORK"
    return "host" if data_dir.device_id is None else f"device_{data_dir.device_id}"


class Profile:
    """Every collection under one input path; see the module docstring."""

    def __init__(
        self, path: Path | str, *, on_invalid: OnInvalid = "error", chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ):
        self.path = Path(path)
        self.collections = discovery.discover(self.path)
        self.on_invalid: OnInvalid = on_invalid
        self.chunk_bytes = chunk_bytes

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(
            sorted({d.device_id for c in self.collections for d in c.devices if d.device_id is not None})
        )

    def _dirs(self, place: Place) -> list[tuple[discovery.Profile, discovery.DataDir]]:
        found = []
        for collection in self.collections:
            if place == "host":
                candidates = [collection.host]
            elif place == "framework":
                candidates = [collection.framework]
            else:
                candidates = [d for d in collection.devices if d.device_id == place]
            found += [(collection, d) for d in candidates if d is not None]
        return found

    def families(self, place: Place) -> tuple[str, ...]:
        """Record families present for a device id, ``"host"`` or ``"framework"``."""
        return tuple(sorted({s.family for _, d in self._dirs(place) for s in d.streams}))

    def _streams(self, family: str, place: Place) -> list[Stream]:
        dirs = self._dirs(place)
        if len({id(c) for c, _ in dirs}) > 1:
            msg = f"{place} appears in several collections under {self.path}; open one PROF_XXX dir"
            raise InputPathError(msg)
        streams = [s for _, d in dirs for s in d.streams if s.family == family]
        # unaging before aging, as msprof's host C++ orders them (specs/cann_raw_formats.md §1.4)
        return sorted(streams, key=lambda s: bool(s.aging))

    def read(self, family: str, device: Place | None = None) -> pa.RecordBatchReader:
        """Decoded records of ``family`` as a RecordBatchReader.

        ``device`` is a device id, ``"host"`` or ``"framework"``; None means the host or
        framework dir for their families, and the only device for device families.
        """
        from profstream.codecs import get_codec

        codec = get_codec(family)
        place: Place
        if device is not None:
            place = device
        elif codec.side in ("host", "framework"):
            place = codec.side
        elif len(self.devices) == 1:
            place = self.devices[0]
        else:
            msg = f"{family} is a device family; say which device ({', '.join(map(str, self.devices))})"
            raise InputPathError(msg)
        streams = self._streams(family, place)
        if not streams:
            msg = f"no {family} data for {place} under {self.path}"
            raise InputPathError(msg)
        readers = [StreamReader(s, on_invalid=self.on_invalid, chunk_size=self.chunk_bytes) for s in streams]

        def batches() -> Iterator[pa.RecordBatch]:
            for reader in readers:
                yield from reader

        return pa.RecordBatchReader.from_batches(_schema_of(streams[0]), batches())

    def table(self, name: str, *, devices: Sequence[int] | None = None) -> pa.RecordBatchReader:
        """A canonical table (engine/schema.py) of every collection, computed as it is read.

        Device tables (``tasks``, ``steps``, ``overlap``, ...) cover ``devices`` (all when None);
        batches arrive per collection in pipeline order. See :mod:`profstream.engine.plan` for
        which records each table comes from.
        """
        from profstream.engine.plan import Planner
        from profstream.engine.schema import TABLES, conform, tasks_schema

        planners = [
            Planner(
                c,
                devices=self._devices_in(c, devices),
                on_invalid=self.on_invalid,
                chunk_bytes=self.chunk_bytes,
            )
            for c in self.collections
        ]
        planners[0].streams([name])  # refuses an unknown table name before anything is read
        schema = TABLES[name]
        if name == "tasks":
            metrics = next((p.metric_columns(d) for p in planners for d in p.devices), [])
            schema = tasks_schema(metrics)

        def batches() -> Iterator[pa.RecordBatch]:
            for planner in planners:
                pipeline, streams = planner.pipeline([name])
                for _, batch in pipeline.run(streams):
                    yield (
                        batch
                        if batch.schema == schema
                        else conform(schema, dict(zip(batch.schema.names, batch.columns, strict=True)))
                    )

        return pa.RecordBatchReader.from_batches(schema, batches())

    @staticmethod
    def _devices_in(collection: discovery.Profile, devices: Sequence[int] | None) -> list[int] | None:
        if devices is None:
            return None
        present = {d.device_id for d in collection.devices}
        return [d for d in devices if d in present]

    def inspect(self) -> InspectReport:
        """Decode every stream once and report counts, losses and time ranges."""
        profiles = []
        for collection in self.collections:
            dirs = [d for d in (collection.host, *collection.devices, collection.framework) if d is not None]
            reports = []
            for data_dir in dirs:
                clock = _clock_of(collection, data_dir)
                families = [self._inspect_stream(s, clock) for s in sorted(data_dir.streams, key=_stream_key)]
                reports.append(
                    DirReport(
                        place=_place_name(data_dir),
                        path=str(data_dir.path),
                        families=families,
                        not_decoded=[path.name for path in data_dir.not_decoded],
                    )
                )
            platform = next((d.traits.platform for d in dirs if d.traits.platform is not None), None)
            profiles.append(ProfReport(path=str(collection.path), platform=platform, dirs=reports))
        return InspectReport(path=str(self.path), profiles=profiles)

    def _inspect_stream(self, stream: Stream, clock: DeviceClock | FrameworkClock | None) -> FamilyReport:
        reader = StreamReader(stream, on_invalid=self.on_invalid, chunk_size=self.chunk_bytes)
        for _ in reader:
            pass
        stats = reader.stats
        first, last, unit = _time_range(stats, stream, clock)
        return FamilyReport(
            family=stream.family,
            aging=stream.aging,
            files=len(stream.files),
            bytes=sum(f.path.stat().st_size for f in stream.files),
            records=stats.records,
            lost=stats.lost,
            dropped=dict(stats.dropped),
            truncated_bytes=stats.truncated_bytes,
            leading_bytes_dropped=stats.leading_bytes_dropped,
            time_column=stats.time_column,
            first_ns=first,
            last_ns=last,
            time_unit=unit,
        )


def _schema_of(stream: Stream) -> pa.Schema:
    schema = stream.codec.schema
    return schema if stream.aging is None else schema.append(pa.field("aging", pa.bool_()))


def _stream_key(stream: Stream) -> tuple[str, bool]:
    return stream.family, bool(stream.aging)


def _clock_of(
    collection: discovery.Profile, data_dir: discovery.DataDir
) -> DeviceClock | FrameworkClock | None:
    """The clock a directory's timestamps convert with; None when its sync files are absent."""
    if data_dir.metadata is not None:
        return collection.clock(data_dir)
    try:
        return collection.framework_clock()
    except InputPathError:
        return None


def _time_range(
    stats: StreamStats, stream: Stream, clock: DeviceClock | FrameworkClock | None
) -> tuple[int | None, int | None, str]:
    """The stream's time range, converted to host-monotonic ns where its unit is known."""
    low, high, column = stats.time_min, stats.time_max, stats.time_column or ""
    if low is None or high is None or clock is None:
        return low, high, "native"
    values = np.array([low, high], np.int64 if low < 0 else np.uint64)
    if isinstance(clock, FrameworkClock):
        converted = clock.to_ns(values)
    elif column.endswith("syscnt"):
        converted = clock.syscnt_to_ns(values)
    elif column in ("timestamp", "begin_time") and stream.codec.side == "host":
        converted = clock.host_to_ns(values)
    else:
        return low, high, "native"
    return int(converted[0]), int(converted[1]), "ns"


def open_profile(
    path: Path | str, *, on_invalid: OnInvalid = "error", chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Profile:
    """See :func:`profstream.open`."""
    return Profile(path, on_invalid=on_invalid, chunk_bytes=chunk_bytes)
