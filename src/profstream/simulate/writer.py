"""Writing raw streams the way the collector does: sliced files, arbitrary chunks, ``.done`` markers.

specs/cann_raw_formats.md §1.2 and §1.4 ([COL] ``collector/dvvp/transport/
file_slice.cpp`` ``WriteToLocalFiles``, ``CreateDoneFile``): data arrives in
chunks cut from driver buffers, not at record boundaries; each chunk is
appended to ``<name>.slice_<n>``; after a write, once the file holds at least
``slice_bytes`` (``sliceFileMaxKByte * 1024``), the slice is closed with a
``<slice>.done`` file (``filesize:<bytes>``, then ``starttime:<ns>`` and
``endtime  :<ns>`` lines holding the first chunk's start and the last chunk's
end time) and the next write opens ``slice_{n+1}``. So records straddle slice
boundaries and slices end slightly above ``slice_bytes``. Control files are
written whole with a ``.done`` holding only ``filesize:<bytes>``.

The writers are incremental (every ``write`` appends and may roll), so a live
simulation can drive them over time through a :class:`WriteObserver` (told of
every chunk and every completed slice); memory stays bounded by one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

#: chunk sizes the simulated driver hands over, as fractions of the slice size.
CHUNK_FRACTION = (1 / 24, 1 / 5)


def done_text(size: int, start_ns: int | None = None, end_ns: int | None = None) -> str:
    """The body of a ``.done`` file (with the time lines only for data slices)."""
    text = f"filesize:{size}\n"
    if start_ns is not None:
        text += f"starttime:{start_ns}\nendtime  :{end_ns}\n"
    return text


def write_control(path: Path, text: str) -> int:
    """A control file written whole, with its ``.done`` marker; returns its size."""
    data = text.encode()
    path.write_bytes(data)
    Path(f"{path}.done").write_text(done_text(len(data)))
    return len(data)


class WriteObserver(Protocol):
    """Told of every chunk a writer appends and every slice it completes (the live simulator)."""

    def wrote(self, nbytes: int) -> None:
        """``nbytes`` were just appended to a raw file."""

    def completed(self, path: Path, size: int) -> None:
        """Slice ``path`` (``size`` bytes) is complete and its ``.done`` written."""


@dataclass
class SliceWriter:
    """One raw stream ``<directory>/<name>.slice_<n>``, rolled at ``slice_bytes``.

    ``seed`` fixes the chunk sizes, so the same data gives byte-identical slices.
    """

    directory: Path
    name: str
    slice_bytes: int
    seed: int
    observer: WriteObserver | None = None
    slices: list[Path] = field(default_factory=list)
    total_bytes: int = 0
    _size: int = 0  # bytes in the open slice
    _start_ns: int = 0
    _end_ns: int = 0
    _open: bool = False
    _rng: np.random.Generator = field(init=False)
    _chunk: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng([self.seed, *self.name.encode()])
        low, high = (max(1, int(self.slice_bytes * f)) for f in CHUNK_FRACTION)
        self._chunk = (low, max(low + 1, high))

    def write(self, data: bytes, start_ns: int, end_ns: int) -> None:
        """Append ``data`` (records whose times span ``start_ns..end_ns``) in driver-sized chunks."""
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            size = int(self._rng.integers(*self._chunk))
            piece = view[pos : pos + size]
            pos += len(piece)
            if not self._open:
                self.slices.append(self.directory / f"{self.name}.slice_{len(self.slices)}")
                self._open, self._size, self._start_ns = True, 0, start_ns
            with self.slices[-1].open("ab") as out:
                out.write(piece)
            self._size += len(piece)
            self.total_bytes += len(piece)
            self._end_ns = end_ns
            if self.observer is not None:
                self.observer.wrote(len(piece))
            if self._size >= self.slice_bytes:
                self._finish()

    def close(self) -> None:
        """Mark the last slice done (the collector's flush at the end of the collection)."""
        if self._open:
            self._finish()

    def _finish(self) -> None:
        Path(f"{self.slices[-1]}.done").write_text(done_text(self._size, self._start_ns, self._end_ns))
        self._open = False
        if self.observer is not None:
            self.observer.completed(self.slices[-1], self._size)


@dataclass
class PlainWriter:
    """A stream appended to one file without slicing or markers (torch_npu's FRAMEWORK files)."""

    path: Path
    observer: WriteObserver | None = None
    total_bytes: int = 0

    @property
    def slices(self) -> list[Path]:
        return [self.path] if self.total_bytes else []

    def write(self, data: bytes, start_ns: int, end_ns: int) -> None:
        del start_ns, end_ns  # FRAMEWORK files carry no time markers
        with self.path.open("ab") as out:
            out.write(data)
        self.total_bytes += len(data)
        if self.observer is not None:
            self.observer.wrote(len(data))

    def close(self) -> None:
        """Nothing to finish: the DataDumper writes no marker files."""
