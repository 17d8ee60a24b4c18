"""What every sink shares: the open/write/close lifecycle and files that appear only when complete.

A sink writes each of its files under a hidden temporary name (``.{stem}.{pid}.{token}.part``) in
the final directory and renames it (``os.replace``, atomic on one filesystem) only when
:meth:`Sink.close` succeeds, so a reader never mistakes a partial file for a finished one: msprof's
consumers pick ``^msprof_\\d{14}\\.json$`` and ``*.csv`` names (msprof_outputs.md §1.2), and
pyarrow.dataset and DuckDB skip dot files. :meth:`Sink.abort` (called by ``with`` on an exception)
removes the temporary files. Sliced outputs (msprof's ``{module}_slice_{n}_{ts}`` files) learn their
final names only at close, when the number of slices is known (``csv_writer.cpp`` omits ``_slice_``
when the whole table fits one file); a :data:`SliceNaming` callback gives them.

Errors while writing raise :class:`~profstream.errors.SinkError` naming the file; a sink whose file
failed is aborted at once, since what it holds can no longer be trusted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pyarrow as pa

from profstream.errors import SchemaMismatchError, SinkError

#: ``(index, count) -> file name`` of slice ``index`` (from 0) out of ``count`` slices
SliceNaming = Callable[[int, int], str]


def msprof_slice_names(module: str, timestamp: str, suffix: str) -> SliceNaming:
    """msprof's names: ``{module}_{ts}{suffix}``, or ``{module}_slice_{n}_{ts}{suffix}`` when sliced.

    msprof_outputs.md §1.2 (AM ``common_func/file_slice_helper.py``, ``csv_writer.cpp``
    ``GetSliceFileName``); ``suffix`` includes the dot (``.csv``, ``.json``).
    """

    def name(index: int, count: int) -> str:
        if count == 1:
            return f"{module}_{timestamp}{suffix}"
        return f"{module}_slice_{index}_{timestamp}{suffix}"

    return name


def sink_error(path: Path, err: OSError, action: str) -> SinkError:
    """A :class:`SinkError` that says what failed on which file, keeping the OS reason."""
    reason = err.strerror or str(err)
    return SinkError(f"cannot {action} {path}: {reason}")


class StagedFile:
    """One output file, written under a hidden temporary name next to where it will live."""

    def __init__(self, directory: Path, stem: str) -> None:
        self.directory = directory
        self.temp = directory / f".{stem}.{os.getpid()}.{secrets.token_hex(4)}.part"
        self.bytes_written = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._file: IO[bytes] | None = self.temp.open("xb")
        except OSError as err:
            raise sink_error(self.temp, err, "create") from err

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data``; the file must still be open."""
        if self._file is None:
            msg = f"{self.temp} is already finished"
            raise SinkError(msg)
        try:
            self._file.write(data)
        except OSError as err:
            raise sink_error(self.temp, err, "write") from err
        self.bytes_written += len(data)

    def finish(self) -> None:
        """Close the file handle; the data stays under the temporary name until :meth:`commit`."""
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as err:
                raise sink_error(self.temp, err, "write") from err

    def commit(self, name: str) -> Path:
        """Finish and rename to ``name`` in the same directory (replacing an older file of that name)."""
        self.finish()
        final = self.directory / name
        try:
            self.temp.replace(final)
        except OSError as err:
            raise sink_error(final, err, "rename into") from err
        return final

    def discard(self) -> None:
        """Close and remove the temporary file; never raises for a file that is already gone."""
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # the file is thrown away: its flush error does not matter
                file.close()
        self.temp.unlink(missing_ok=True)


def remove_temporaries(directory: Path, pid: int) -> list[Path]:
    """Remove the temporary files (:class:`StagedFile`) process ``pid`` made in ``directory`` and
    below it (Parquet partitions): an export part stopped by a signal may be stopped while a sink
    creates one, before the sink knows its file, so aborting the sinks alone could leave it behind."""
    removed = []
    for path in directory.rglob(f".*.{pid}.*.part"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


class SlicedOutput:
    """The files of one sliced output: opened in order, named by ``naming`` when committed.

    Temporary names start with the single-file name (``.op_summary_{ts}.csv.0.…part``), so an
    error message says which output it was.
    """

    def __init__(self, directory: Path, naming: SliceNaming) -> None:
        self.directory = directory
        self.naming = naming
        self.stem = naming(0, 1)
        self.files: list[StagedFile] = []

    def new_file(self) -> StagedFile:
        """Open the next slice (after finishing the current one)."""
        if self.files:
            self.files[-1].finish()
        staged = StagedFile(self.directory, f"{self.stem}.{len(self.files)}")
        self.files.append(staged)
        return staged

    def finish(self) -> None:
        """Finish the slice written last (the earlier ones were finished when the next opened)."""
        if self.files:
            self.files[-1].finish()

    def commit(self) -> list[Path]:
        """Rename every slice to its final name; the names depend on how many slices there are.

        If one rename fails, the slices already renamed are removed again: an output appears whole
        or not at all.
        """
        count = len(self.files)
        names = [self.naming(index, count) for index in range(count)]
        if len(set(names)) < count:  # a later slice would replace an earlier one: rows lost
            msg = f"{self.directory / self.stem}: {count} slices but only the names {sorted(set(names))}"
            raise SinkError(msg)
        done: list[Path] = []
        try:
            for staged, name in zip(self.files, names, strict=True):
                done.append(staged.commit(name))
        except SinkError:
            for path in done:
                path.unlink(missing_ok=True)
            raise
        return done

    def discard(self) -> None:
        """Remove every slice written so far."""
        for staged in self.files:
            staged.discard()


class Sink(ABC):
    """The lifecycle every sink shares: write, optionally :meth:`finish`, then :meth:`close` (commit)
    or :meth:`abort`.

    ``finish``, ``close`` and ``abort`` are idempotent; ``close`` or ``abort`` ends the sink. As a
    context manager a sink closes on normal exit and aborts when the block raises.
    """

    def __init__(self) -> None:
        self._status = "open"
        self.paths: list[Path] = []  #: the final files, once closed

    @property
    def closed(self) -> bool:
        """True once the sink was closed or aborted."""
        return self._status in ("closed", "aborted")

    def finish(self) -> None:
        """Write everything the sink still holds into its temporary files, so that :meth:`close` only
        renames them (an export's worker finishes before it is told to commit, so its rendering
        overlaps the other parts' runs); a failure aborts and re-raises."""
        if self._status != "open":
            return
        with self._guard():
            self._finish()
        self._status = "finished"

    def close(self) -> None:
        """Finish every file and give it its final name; a failure aborts and re-raises."""
        self.finish()
        if self.closed:
            return
        with self._guard():
            self.paths = self._commit()
        self._status = "closed"

    def abort(self) -> None:
        """Remove every temporary file; nothing of this sink appears under a final name."""
        if self.closed:
            return
        self._status = "aborted"
        self._discard()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def _require_open(self) -> None:
        if self._status != "open":
            msg = f"{type(self).__name__} is already {self._status}"
            raise SinkError(msg)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Abort on a failed write: a file that saw an I/O error holds an unknown prefix."""
        try:
            yield
        except BaseException:
            self.abort()
            raise

    def _finish(self) -> None:  # noqa: B027 (a hook: most sinks write as they go)
        """Write what the sink holds (:meth:`finish`)."""

    @abstractmethod
    def _commit(self) -> list[Path]:
        """Flush, finish and rename every file; return the final paths."""

    @abstractmethod
    def _discard(self) -> None:
        """Remove every temporary file."""


class TableSink(Sink):
    """A sink of record batches of one schema, fixed when it opens.

    A sink whose per-batch cost is high (a text template per batch) sets ``coalesce_rows``: smaller
    batches are then held, at most about that many rows, and reach :meth:`_write` joined, in order.
    Pipelines emit batches of a few thousand rows, and a text template costs about 2.5 times as
    much per row at 2,000 rows as at 16,384 (bench/README.md, "Export", session 10).
    """

    coalesce_rows = 0

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self.schema = schema
        self.rows_written = 0
        self._held: list[pa.RecordBatch] = []
        self._held_rows = 0

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Write a batch (or every batch of a table); its schema must equal the sink's."""
        self._require_open()
        if not data.schema.equals(self.schema):
            msg = f"expected batches of schema\n{self.schema}\ngot\n{data.schema}"
            raise SchemaMismatchError(msg)
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        with self._guard():
            for batch in batches:
                if not batch.num_rows:
                    continue
                self.rows_written += batch.num_rows
                if not self._held and batch.num_rows >= self.coalesce_rows:
                    self._write(batch)
                    continue
                self._held.append(batch)
                self._held_rows += batch.num_rows
                if self._held_rows >= self.coalesce_rows:
                    self._write_held()

    def _finish(self) -> None:
        if self._held:
            self._write_held()

    def _write_held(self) -> None:
        joined = pa.Table.from_batches(self._held).combine_chunks()
        self._held, self._held_rows = [], 0
        for batch in joined.to_batches():
            self._write(batch)

    @abstractmethod
    def _write(self, batch: pa.RecordBatch) -> None:
        """Write one non-empty batch of the sink's schema."""
