"""The one exception hierarchy of profstream.

Every error says what was expected, what was found and where. The classes also
inherit the matching builtin so that callers who catch ``ValueError`` or
``OSError`` keep working.
"""

from __future__ import annotations

from pathlib import Path


class ProfstreamError(Exception):
    """Base class of every error profstream raises on purpose."""


class DecodeError(ProfstreamError, ValueError):
    """A raw record, file or control file could not be decoded.

    ``offset`` is the byte offset in ``path`` (or in the concatenated stream of
    slices when ``path`` names the first slice of a stream), ``record_index``
    the index of the record in that stream, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        offset: int | None = None,
        record_index: int | None = None,
        family: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.offset = offset
        self.record_index = record_index
        self.family = family
        where = []
        if self.path is not None:
            where.append(self.path)
        if offset is not None:
            where.append(f"byte offset {offset}")
        if record_index is not None:
            where.append(f"record {record_index}")
        self.reason = message
        super().__init__(f"{message} - at {', '.join(where)}" if where else message)


class ConfigError(ProfstreamError, ValueError):
    """A setting, option string or configuration file is invalid.

    ``key`` is the dotted path of the offending key (``export.timeline_limit``,
    ``PROFILING_OPTIONS.aic_metrics``).
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        self.reason = message
        super().__init__(f"{key}: {message}" if key else message)


class SchemaMismatchError(ProfstreamError, TypeError):
    """A batch handed to a sink or operator does not have the schema it was opened with."""


class SinkError(ProfstreamError, OSError):
    """An output could not be written."""


class InputPathError(ProfstreamError, ValueError):
    """An input path is missing, not a profiler directory, or escapes the input directory."""
