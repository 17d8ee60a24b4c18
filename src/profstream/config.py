"""Typed, frozen settings and their loading.

Settings come, lowest to highest, from ``configs/default.toml`` (shipped in the
package), an optional user TOML file, ``PROFSTREAM_*`` environment variables and
CLI flags. Unknown keys are errors that name the key path. The profiler's own
option strings (PROFILING_OPTIONS, MS_PROFILER_OPTIONS) are parsed in
:mod:`profstream.options`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from profstream.errors import ConfigError

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every settings section: immutable, keyword-only, unknown keys rejected."""


class DecodeSettings(_Section, frozen=True):
    on_invalid: Literal["error", "skip"] = "error"  # what a corrupt record does
    chunk_mb: PositiveInt = 1  # bytes decoded at once, per stream (sources.DEFAULT_CHUNK_BYTES)
    advance_mb: Annotated[int, msgspec.Meta(ge=0)] = 16  # decoded input between operator advances


class ExportSettings(_Section, frozen=True):
    layout: Literal["msprof", "torch_npu", "parquet"] = "msprof"
    format: Literal["csv", "json"] = "csv"  # summary format, as msprof's --format
    timeline_limit_mb: PositiveInt = 500  # MindSpore's timeline_limit default
    timeline_file_mb: PositiveInt = 256  # roll timeline files at a viewer-safe size
    timeline_file_events: PositiveInt = 1_000_000
    csv_slice_rows: PositiveInt = 1_000_000  # msprof-layout summary CSVs slice at this many rows
    processes: Annotated[int, msgspec.Meta(ge=0)] = 0  # for independent output groups; 0: one per core


class DaemonSettings(_Section, frozen=True):
    poll_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    window_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0  # output commit window
    storage_limit_mb: Annotated[int, msgspec.Meta(ge=200)] | None = None  # as PROFILING_OPTIONS
    status_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None


class ClusterSettings(_Section, frozen=True):
    workers: PositiveInt = 2
    scheduler: str | None = None  # a dask.distributed scheduler address; None: a LocalCluster


class LoggingSettings(_Section, frozen=True):
    format: Literal["console", "json"] = "console"
    verbosity: Annotated[int, msgspec.Meta(ge=0, le=2)] = 0


class Settings(_Section, frozen=True):
    decode: DecodeSettings = msgspec.field(default_factory=DecodeSettings)
    export: ExportSettings = msgspec.field(default_factory=ExportSettings)
    daemon: DaemonSettings = msgspec.field(default_factory=DaemonSettings)
    cluster: ClusterSettings = msgspec.field(default_factory=ClusterSettings)
    logging: LoggingSettings = msgspec.field(default_factory=LoggingSettings)


ENV_PREFIX = "PROFSTREAM_"


def _read_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"invalid TOML in {source}: {exc}"
        raise ConfigError(msg) from None


def default_toml() -> str:
    """The text of the shipped configs/default.toml."""
    return resources.files("profstream").joinpath("configs", "default.toml").read_text(encoding="utf-8")


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """``PROFSTREAM_EXPORT__TIMELINE_LIMIT_MB=100`` -> {"export": {"timeline_limit_mb": 100}}.

    Values are parsed as TOML values (numbers, booleans, quoted or bare strings).
    """
    out: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def to_settings(data: Mapping[str, Any], source: str) -> Settings:
    """Validate a settings mapping; errors name the key path (``export.timeline_limit_mb``)."""
    try:
        return msgspec.convert(data, Settings)
    except msgspec.ValidationError as exc:
        text = str(exc)
        key = None
        if " - at `$." in text:
            text, _, where = text.rpartition(" - at `$.")
            key = where.rstrip("`")
        if "unknown field" in text:
            field = text.split("`")[1]
            key = f"{key}.{field}" if key else field
            text = "unknown key"
        msg = f"{text} (in {source})"
        raise ConfigError(msg, key=key) from None


def load_settings(
    user_file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Settings from default.toml, then ``user_file``, then the environment, then ``overrides`` (CLI)."""
    data = _read_toml(default_toml(), "configs/default.toml")
    sources = ["configs/default.toml"]
    if user_file is not None:
        path = Path(user_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"cannot read config file {path}: {exc.strerror}"
            raise ConfigError(msg) from None
        data = _merge(data, _read_toml(text, str(path)))
        sources.append(str(path))
    if env:
        from_env = _from_environment(env)
        if from_env:
            data = _merge(data, from_env)
            sources.append("environment")
    if overrides:
        data = _merge(data, overrides)
        sources.append("command line")
    return to_settings(data, " + ".join(sources))
