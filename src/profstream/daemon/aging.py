"""storage_limit aging of a PROF_XXX directory, as the Ascend collector does it, and timeline_limit aging.

The rules are specs/msprof_outputs.md §4g (KC ``collector/dvvp/transport/
file_ageing.cpp``, ``FileAgeing``):

* ``limit = min(storage_limit, volume size)``; the upper threshold is ``limit -
  20 MB`` (the reserve), the lower one 20 MB of free space. A limit of 0
  disables aging.
* Every written file is told to the policy with its ``.done`` companion
  (:meth:`AgingPolicy.add`); both sizes count in the stored total, never-aged
  files included. Aging triggers when the total exceeds the upper threshold or
  free space drops below the reserve, and deletes until the excess is gone.
* Deletion order is the order files were written (a FIFO list); files whose
  name contains a :data:`NEVER_AGED` substring never enter the list; the last
  remaining file of each family (the name without its last ``.``-suffix, so
  ``hwts.data.0`` for ``hwts.data.0.slice_7``) is never deleted; deleting a
  file deletes its ``.done``.
* ``hwts.data`` and ``aicore.data`` slices are kept paired: a new slice of one
  side is inserted right after the oldest still-unpaired slice of the other
  side (after the last paired one), so the two age together. When an unpaired
  slice is aged before its partner arrives, it leaves a placeholder in the
  list and the partner, when it comes, takes that (old) place, so it is aged
  next.

Choices where the collector is looser than the issue asks, or does not apply:

* A pair is deleted as one unit: both or neither (the collector deletes list
  entries one at a time and may stop between the two, and it checks the
  last-file rule per entry). So a pair whose one side is the last of its family
  stays whole.
* Each stream ages oldest first: a file that has to stay (the last of its
  family, its pair partner, or a protected file) holds back the newer files of
  its family in that round, so aging never cuts a hole in the middle of a
  stream. The collector only skips such an entry and moves on.
* Families and pairs are keyed per directory (host, device_N) and pairs also
  per device id, since one policy covers a whole PROF directory (the collector
  runs one ``FileAgeing`` per storage directory).
* :meth:`AgingPolicy.protect` is the daemon's addition: protected files (slices
  the daemon has not processed yet) are aged only when nothing else can be (a
  second round over the list), and are then returned as ``forced`` so the
  caller records the gap. That second round runs only while the stored total is
  over the limit itself (or free space is under the reserve), not merely over
  the upper threshold: the reserve is the reader's headroom, so a daemon a
  commit behind the writer loses nothing (processed files still age from the
  upper threshold, as in the collector).
* The never-aged list is the one §4g gives (the current collector's); the 2021
  collector had ``step_info`` instead of ``ts_track`` and ``unaging``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profstream.errors import ConfigError

MB = 1 << 20
#: ``STORAGE_LIMIT_DOWN_THD / 10`` MB: kept free below the limit, and the free-space floor (§4g).
RESERVE_BYTES = 20 * MB
#: the accepted ``--storage-limit`` range, in MB (§4g, ``param_validation.cpp``).
STORAGE_LIMIT_MB_RANGE = (200, 4_294_967_295)
#: name substrings of files the collector never ages (§4g, ``noAgeingFile_``).
NEVER_AGED = (
    "model_load_info",
    "task_desc_info",
    "id_map_info",
    "fusion_op_info",
    "tensor_data_info",
    "ts_track",
    "training_trace",
    "info.json",
    "hash_dic",
    "start_info",
    "end_info",
    "host_start",
    "dev_start",
    "sample.json",
    "unaging",
)
#: the two raw families aged as pairs (a task log slice and its PMU slice).
PAIRED = ("hwts.data", "aicore.data")
DONE_SUFFIX = ".done"


def is_never_aged(name: str) -> bool:
    """Whether the collector keeps ``name`` whatever the limit (substring match, as it does)."""
    return any(part in name for part in NEVER_AGED)


def done_path(path: Path) -> Path:
    """The ``.done`` companion of a data or control file."""
    return path.with_name(path.name + DONE_SUFFIX)


def parse_storage_limit(value: str | None, free_bytes: int) -> int:
    """The storage limit in bytes for a ``--storage-limit`` value (``"<N>MB"``); 0 disables aging.

    Unset (None or ""), the collector uses 90 % of the free space of the output
    volume, and disables aging when that is under 20 MB or over UINT32_MAX MB
    (§4g). ``"0MB"`` (what sample.json's ``storageLimit`` holds when unset)
    disables aging.
    """
    if not value:
        default_mb = free_bytes * 9 // 10 // MB
        return default_mb * MB if RESERVE_BYTES // MB <= default_mb <= STORAGE_LIMIT_MB_RANGE[1] else 0
    digits = value.removesuffix("MB")
    if digits == value or not digits.isdigit():
        msg = f"expected '<N>MB', got {value!r}"
        raise ConfigError(msg, key="storage_limit")
    mb = int(digits)
    low, high = STORAGE_LIMIT_MB_RANGE
    if mb != 0 and not low <= mb <= high:
        msg = f"expected 0 or {low}..{high} MB, got {mb} MB"
        raise ConfigError(msg, key="storage_limit")
    return mb * MB


@dataclass(frozen=True, slots=True)
class AgedFile:
    """One file the policy chose to delete, with its ``.done`` and their bytes together."""

    path: Path
    done: Path
    size: int


@dataclass(frozen=True, slots=True)
class AgingDecision:
    """What one :meth:`AgingPolicy.to_delete` call chose.

    ``forced`` files were protected (not yet processed by the daemon) but had
    to go to meet the limit: the caller records the gap they leave.
    """

    aged: tuple[AgedFile, ...] = ()
    forced: tuple[AgedFile, ...] = ()

    @property
    def paths(self) -> list[Path]:
        """Every path to unlink: each data file followed by its ``.done``."""
        return [p for f in (*self.aged, *self.forced) for p in (f.path, f.done)]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in (*self.aged, *self.forced))

    def __bool__(self) -> bool:
        return bool(self.aged or self.forced)


@dataclass(eq=False, slots=True)
class _Entry:
    """A file in the aging list; ``path`` None is the placeholder an aged unpaired slice leaves."""

    path: Path | None
    size: int  # data + .done bytes
    family: tuple[Path, str]
    pair: tuple[str, Path, str] | None = None  # (own side, directory, device part) for hwts/aicore
    paired: bool = False
    partner: _Entry | None = None


Protected = Callable[[Path], bool]


@dataclass
class AgingPolicy:
    """The collector's aging list for one PROF_XXX directory (module docstring for the rules).

    Tell it every file as it is completed (:meth:`add`), then ask
    :meth:`to_delete` with the volume's free space; the decision is already
    applied to the policy's books, the caller unlinks ``decision.paths``.
    """

    storage_limit_bytes: int
    volume_bytes: int
    reserve_bytes: int = RESERVE_BYTES
    total_bytes: int = field(default=0, init=False)  # every file told to add() and not aged since
    _entries: list[_Entry] = field(default_factory=list, init=False)
    _family_files: Counter[tuple[Path, str]] = field(default_factory=Counter, init=False)
    _placeholders: Counter[tuple[str, Path, str]] = field(default_factory=Counter, init=False)
    _protected: Protected | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.enabled and self.limit_bytes <= self.reserve_bytes:
            msg = (
                f"the storage limit ({self.limit_bytes} bytes) must exceed the reserve "
                f"({self.reserve_bytes} bytes) kept free below it"
            )
            raise ConfigError(msg, key="storage_limit")

    @property
    def limit_bytes(self) -> int:
        return min(self.storage_limit_bytes, self.volume_bytes)

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    @property
    def upper_bytes(self) -> int:
        """Aging starts when the stored total exceeds this."""
        return self.limit_bytes - self.reserve_bytes

    def protect(self, predicate: Protected | None) -> None:
        """Age files where ``predicate(path)`` holds only when nothing else is left (None: none protected)."""
        self._protected = predicate

    def add(self, path: Path, size: int, done_size: int = 0) -> None:
        """Record a completed file (``size`` bytes) and its ``.done`` (``done_size`` bytes)."""
        self.total_bytes += size + done_size
        if is_never_aged(path.name):
            return
        entry = _Entry(path, size + done_size, (path.parent, path.name.rpartition(".")[0]))
        self._family_files[entry.family] += 1
        side = next((tag for tag in PAIRED if tag in path.name), None)
        if side is None:
            self._entries.append(entry)
            return
        entry.pair = (side, path.parent, path.name.split(side, 1)[1].rpartition(".")[0])
        self._insert_paired(entry)

    def forget(self, paths: Collection[Path]) -> None:
        """Drop from the books files someone else deleted (the profiler's own aging): left in, they
        would count towards the limit for ever and be chosen for aging again."""
        gone = [entry for entry in self._entries if entry.path is not None and entry.path in paths]
        for entry in gone:
            self._family_files[entry.family] -= 1
            self.total_bytes -= entry.size
            if entry.partner is not None:
                entry.partner.partner = None  # the other side now ages alone
        self._drop(gone)

    def to_delete(self, free_bytes: int | None = None) -> AgingDecision:
        """Choose the files to age now, oldest first, and drop them from the books.

        ``free_bytes`` is the free space of the volume (None: not checked).
        Unprotected files go first, down to the upper threshold; protected ones
        only while the total is still over the limit (or free space under the
        reserve), and are returned as ``forced``.
        """
        excess = self._excess(free_bytes)
        if excess <= 0:
            return AgingDecision()
        hard = max(self.total_bytes - self.limit_bytes, self._free_excess(free_bytes))
        aged, _ = self._age(excess, allow_protected=False)  # the first round never takes protected files
        forced: list[AgedFile] = []
        removed = sum(f.size for f in aged)
        if removed < hard:
            more, forced = self._age(hard - removed, allow_protected=True)
            aged += more
        return AgingDecision(tuple(aged), tuple(forced))

    def _excess(self, free_bytes: int | None) -> int:
        if not self.enabled:
            return 0
        if self.total_bytes > self.upper_bytes:
            return self.total_bytes - self.upper_bytes
        return self._free_excess(free_bytes)

    def _free_excess(self, free_bytes: int | None) -> int:
        if free_bytes is not None and free_bytes < self.reserve_bytes:
            return self.reserve_bytes - free_bytes
        return 0

    def _insert_paired(self, entry: _Entry) -> None:
        assert entry.pair is not None
        side, where, device = entry.pair
        other = (PAIRED[1] if side == PAIRED[0] else PAIRED[0], where, device)
        if self._placeholders[other]:  # the partner was aged already: take its place in the queue
            self._placeholders[other] -= 1
            index = next(i for i, e in enumerate(self._entries) if e.path is None and e.pair == other)
            entry.paired = True
            self._entries[index] = entry
            return
        oldest_unpaired = None
        for index in range(len(self._entries) - 1, -1, -1):
            candidate = self._entries[index]
            if candidate.pair != other:
                continue
            if candidate.paired:
                break
            oldest_unpaired = index
        if oldest_unpaired is None:
            self._entries.append(entry)
            return
        partner = self._entries[oldest_unpaired]
        partner.paired = entry.paired = True
        partner.partner, entry.partner = entry, partner
        self._entries.insert(oldest_unpaired + 1, entry)

    def _units(self) -> Iterator[tuple[_Entry, ...]]:
        """Aging units in list order: single files, or the two sides of a pair together."""
        seen: set[int] = set()
        for entry in self._entries:
            if entry.path is None or id(entry) in seen:
                continue
            unit = (entry,) if entry.partner is None else (entry, entry.partner)
            seen.update(id(e) for e in unit)
            yield unit

    def _age(self, excess: int, *, allow_protected: bool) -> tuple[list[AgedFile], list[AgedFile]]:
        """Age units in list order until ``excess`` bytes are gone: (unprotected, protected) files.

        A unit that must stay holds back the newer files of its families, so
        each stream loses only its oldest files, never one in the middle.
        """
        chosen: list[tuple[_Entry, bool]] = []
        held: set[tuple[Path, str]] = set()
        removed = 0
        for unit in self._units():
            if removed >= excess:
                break
            families = {e.family for e in unit}
            protected = [self._protected is not None and self._protected(e.path) for e in unit if e.path]
            last = any(self._family_files[e.family] <= 1 for e in unit)
            if last or families & held or (any(protected) and not allow_protected):
                held |= families
                continue
            for entry, forced in zip(unit, protected, strict=True):
                self._family_files[entry.family] -= 1
                removed += entry.size
                chosen.append((entry, forced))
        self._drop([entry for entry, _ in chosen])
        self.total_bytes -= removed
        files = [(AgedFile(e.path, done_path(e.path), e.size), p) for e, p in chosen if e.path is not None]
        return [f for f, forced in files if not forced], [f for f, forced in files if forced]

    def _drop(self, chosen: list[_Entry]) -> None:
        """Remove aged entries; an aged unpaired hwts/aicore slice leaves its placeholder."""
        gone = {id(e) for e in chosen}
        kept = []
        for entry in self._entries:
            if id(entry) not in gone:
                kept.append(entry)
            elif entry.pair is not None and not entry.paired:
                self._placeholders[entry.pair] += 1
                kept.append(_Entry(None, 0, entry.family, entry.pair))
        self._entries = kept


def age_windows(windows: Sequence[tuple[Path, int]], limit_bytes: int) -> list[Path]:
    """The output windows to delete so that ``windows`` fit ``limit_bytes``: oldest first, newest kept.

    ``windows`` are ``(path, bytes)`` oldest first (the daemon's timeline
    windows under ``timeline_limit``, DESIGN.md "Outputs"). The newest window
    is never deleted, even when it alone exceeds the limit.
    """
    total = sum(size for _, size in windows)
    doomed = []
    for path, size in windows[:-1]:
        if total <= limit_bytes:
            break
        doomed.append(path)
        total -= size
    return doomed
