"""Finding the files of an export and handing out its canonical tables.

Layouts (DESIGN.md "Outputs"):

* torch_npu: ``<run>_ascend_pt/ASCEND_PROFILER_OUTPUT/`` with ``trace_view.json``,
  ``kernel_details.csv``, ``step_trace_time.csv``, ``op_statistic.csv``, ``api_statistic.csv``
  (framework_outputs.md §3);
* msprof: ``PROF_XXX/mindstudio_profiler_output/`` with ``msprof_<ts>.json`` (or
  ``msprof_slice_<n>_<ts>.json``), ``op_summary_<ts>.csv``, ``step_trace_<ts>.csv``,
  ``op_statistic_<ts>.csv``, ``api_statistic_<ts>.csv`` (msprof_outputs.md §1.2). The directory is
  never emptied between exports, so, like msprof-analyze, the newest timestamp of each module is
  taken, with all of its slices in slice order.

``open_export`` accepts the output directory itself or a directory above it (``*_ascend_pt``, a
``PROF_XXX``); when a torch_npu run holds both layouts, ``ASCEND_PROFILER_OUTPUT`` (which already
merges the framework and CANN parts) is used.

Imported times are the files' own: local wall-clock ns, not host-monotonic as in tables built from
raw data (the exports do not say which offset they applied, specs/msprof_outputs.md §3.5 step 2).

Device ids: a ``Device_id`` column or an ``NPU <id>`` process label when the file has one; else the
``device_id`` given to :func:`open_export`; else the only ``NPU <id>`` label of the trace, or the
only ``device_<id>`` directory of a ``PROF_*`` directory next to the output; else null.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from profstream.codecs._base import OnInvalid
from profstream.engine.imports import csv_tables, trace
from profstream.errors import InputPathError

TORCH_DIR = "ASCEND_PROFILER_OUTPUT"
MSPROF_DIR = "mindstudio_profiler_output"

#: file roles of torch_npu's ASCEND_PROFILER_OUTPUT
_TORCH_FILES = {
    "trace": "trace_view.json",
    "kernel_details": "kernel_details.csv",
    "step_trace_time": "step_trace_time.csv",
    "op_statistic": "op_statistic.csv",
    "api_statistic": "api_statistic.csv",
}
#: file roles of msprof's mindstudio_profiler_output: module name and extension
_MSPROF_FILES = {
    "trace": ("msprof", "json"),
    "op_summary": ("op_summary", "csv"),
    "step_trace": ("step_trace", "csv"),
    "op_statistic": ("op_statistic", "csv"),
    "api_statistic": ("api_statistic", "csv"),
}
_MSPROF_NAME = re.compile(
    r"^(?P<module>[a-z_]+?)(?:_slice_(?P<slice>\d+))?_(?P<ts>\d{14})\.(?P<ext>csv|json)$"
)

#: table -> file roles that can provide it, preferred first
SOURCES: Mapping[str, tuple[str, ...]] = {
    "tasks": ("kernel_details", "op_summary", "trace"),
    "comm": ("trace",),
    "overlap": ("trace",),
    "ops": ("trace",),
    "step_time": ("step_trace_time",),
    "steps": ("step_trace",),
    "op_statistic": ("op_statistic",),
    "api_statistic": ("api_statistic",),
}


def newest_module_files(directory: Path, module: str, ext: str) -> list[Path]:
    """The files of ``module`` with the newest timestamp, slices in slice order."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for path in directory.iterdir():
        match = _MSPROF_NAME.match(path.name)
        if match and match["module"] == module and match["ext"] == ext:
            found.setdefault(match["ts"], []).append((int(match["slice"] or 0), path))
    if not found:
        return []
    return [path for _, path in sorted(found[max(found)])]


def _locate(path: Path) -> tuple[Path, dict[str, list[Path]]]:
    """The output directory under ``path`` and its files by role."""
    candidates = [path, path / TORCH_DIR, path / MSPROF_DIR, *sorted(path.glob(f"PROF_*/{MSPROF_DIR}"))]
    for directory in candidates:
        if not directory.is_dir():
            continue
        files: dict[str, list[Path]] = {}
        if directory.name != MSPROF_DIR:
            files = {role: [directory / n] for role, n in _TORCH_FILES.items() if (directory / n).is_file()}
        if not files:
            files = {
                role: found
                for role, (module, ext) in _MSPROF_FILES.items()
                if (found := newest_module_files(directory, module, ext))
            }
        if files:
            return directory, files
    msg = (
        f"expected a torch_npu {TORCH_DIR} or an msprof {MSPROF_DIR} directory (or one containing it), "
        f"found no export files in {path}"
    )
    raise InputPathError(msg)


def _device_dirs(output: Path) -> set[int]:
    """Device ids of the ``device_<id>`` dirs of the ``PROF_*`` dirs beside or above the output."""
    ids = set()
    for base in (output.parent, output.parent.parent):
        for device in base.glob("PROF_*/device_*"):
            suffix = device.name.removeprefix("device_")
            if suffix.isdigit():
                ids.add(int(suffix))
    return ids


@dataclass
class ExportedRun:
    """The canonical tables an export holds, each read on demand as a stream of batches."""

    directory: Path
    files: Mapping[str, Sequence[Path]]
    device_id: int | None = None
    chunk_bytes: int = trace.DEFAULT_CHUNK_BYTES
    csv_options: csv_tables.CsvOptions = field(default_factory=csv_tables.CsvOptions)

    @cached_property
    def trace_metadata(self) -> trace.TraceMetadata:
        """Process and thread names of the trace (one pass over it, done once)."""
        if "trace" not in self.files:
            return trace.TraceMetadata()
        return trace.read_metadata(self.files["trace"], self.chunk_bytes)

    @cached_property
    def default_device(self) -> int | None:
        """The device id for rows whose file does not name one (see the module docstring)."""
        if self.device_id is not None:
            return self.device_id
        for found in (self.trace_metadata.device_ids(), _device_dirs(self.directory)):
            if len(found) == 1:
                return next(iter(found))
        return None

    @property
    def tables(self) -> tuple[str, ...]:
        """Names of the canonical tables this export can provide."""
        return tuple(name for name in SOURCES if self.sources(name))

    def sources(self, table: str) -> tuple[str, ...]:
        """The file roles that can provide ``table``, preferred first."""
        roles = [role for role in SOURCES.get(table, ()) if role in self.files]
        if "trace" in roles and table not in self._trace_tables.available():
            roles.remove("trace")
        return tuple(roles)

    def table(self, name: str, *, source: str | None = None) -> pa.RecordBatchReader:
        """A fresh reader of table ``name`` from ``source`` (default: the preferred one there is)."""
        available = self.sources(name)
        if not available:
            msg = f"this export has no {name!r} table; it has {list(self.tables)}"
            raise KeyError(msg)
        role = available[0] if source is None else source
        if role not in available:
            msg = f"table {name!r} can come from {list(available)} here, not from {source!r}"
            raise KeyError(msg)
        paths = self.files[role]
        device = self.default_device
        if role == "trace":
            return self._trace_tables.reader(name)
        options = self.csv_options
        if name == "tasks":
            return csv_tables.task_batches(paths, device, options)
        if name == "step_time":
            return csv_tables.step_time_batches(paths, device, options)
        if name == "steps":
            return csv_tables.step_trace_batches(paths, device, options)
        if name == "op_statistic":
            return csv_tables.op_statistic_batches(paths, device, options)
        return csv_tables.api_statistic_batches(paths, options)

    @cached_property
    def _trace_tables(self) -> trace.TraceTables:
        paths = self.files.get("trace", ())
        return trace.TraceTables(paths, self.trace_metadata, self.default_device, self.chunk_bytes)


def open_export(
    path: Path | str,
    *,
    device_id: int | None = None,
    on_invalid: OnInvalid = "error",
    chunk_bytes: int = trace.DEFAULT_CHUNK_BYTES,
) -> ExportedRun:
    """The export under ``path`` (see the module docstring for the layouts and device ids).

    ``on_invalid``: what a malformed CSV row does, raise :class:`~profstream.errors.DecodeError`
    (``"error"``) or get skipped and counted (``"skip"``); malformed trace JSON always raises.
    """
    directory, files = _locate(Path(path))
    options = csv_tables.CsvOptions(on_invalid=on_invalid)
    return ExportedRun(directory, files, device_id, chunk_bytes, options)
