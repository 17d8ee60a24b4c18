"""storage_limit aging (specs/msprof_outputs.md §4g): one test per rule, then properties over random runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.daemon.aging import (
    MB,
    NEVER_AGED,
    RESERVE_BYTES,
    AgingDecision,
    AgingPolicy,
    age_windows,
    parse_storage_limit,
)
from profstream.errors import ConfigError

DEV = Path("/prof/device_0/data")
HOST = Path("/prof/host/data")


def _policy(limit: int = 1000, *, volume: int = 10**12, reserve: int = 100) -> AgingPolicy:
    """Upper threshold ``limit - reserve`` (900 by default)."""
    return AgingPolicy(limit, volume, reserve_bytes=reserve)


def _slice(name: str, n: int, where: Path = DEV) -> Path:
    return where / f"{name}.slice_{n}"


def _names(decision: AgingDecision) -> list[str]:
    return [f.path.name for f in (*decision.aged, *decision.forced)]


def test_nothing_is_aged_up_to_the_upper_threshold() -> None:
    policy = _policy()
    for n in range(9):
        policy.add(_slice("stars_soc.data.0", n), 100)
    assert policy.upper_bytes == 900
    assert policy.total_bytes == 900
    assert not policy.to_delete()


def test_over_the_threshold_the_oldest_go_first_until_the_excess_is_gone() -> None:
    policy = _policy()
    for n in range(12):
        policy.add(_slice("stars_soc.data.0", n), 100)
    decision = policy.to_delete()  # 1200 stored, 300 over: three slices of 100
    assert _names(decision) == [f"stars_soc.data.0.slice_{n}" for n in range(3)]
    assert decision.bytes == 300
    assert policy.total_bytes == 900
    assert not policy.to_delete()


def test_fifo_order_is_the_write_order_across_families() -> None:
    policy = _policy()
    order = [("stars_soc.data.0", 0), ("ffts_profile.data.0", 0), ("stars_soc.data.0", 1)]
    order += [("ffts_profile.data.0", 1), ("stars_soc.data.0", 2), ("ffts_profile.data.0", 2)]
    for name, n in order:
        policy.add(_slice(name, n), 200)
    decision = policy.to_delete()  # 1200 stored, 300 over: the two oldest (200 + 200)
    assert _names(decision) == ["stars_soc.data.0.slice_0", "ffts_profile.data.0.slice_0"]


def test_the_limit_is_capped_by_the_volume_size() -> None:
    policy = _policy(limit=10_000, volume=1000)
    assert policy.limit_bytes == 1000
    assert policy.upper_bytes == 900


def test_the_default_reserve_is_20_mb() -> None:
    policy = AgingPolicy(200 * MB, 10**15)
    assert policy.reserve_bytes == RESERVE_BYTES == 20 * MB
    assert policy.upper_bytes == 180 * MB


def test_low_free_space_triggers_aging_below_the_limit() -> None:
    policy = _policy()
    for n in range(5):
        policy.add(_slice("hbm.data.0", n), 100)
    assert not policy.to_delete(free_bytes=100)  # exactly the reserve: fine
    decision = policy.to_delete(free_bytes=30)  # 70 short of the reserve: one slice of 100
    assert _names(decision) == ["hbm.data.0.slice_0"]
    assert policy.total_bytes == 400


def test_a_zero_limit_disables_aging() -> None:
    policy = _policy(limit=0)
    for n in range(50):
        policy.add(_slice("hbm.data.0", n), 100)
    assert not policy.enabled
    assert not policy.to_delete(free_bytes=0)


def test_a_limit_within_the_reserve_is_refused() -> None:
    with pytest.raises(ConfigError, match="must exceed the reserve"):
        _policy(limit=100, reserve=100)


@pytest.mark.parametrize("marker", NEVER_AGED)
def test_never_aged_files_count_but_are_never_deleted(marker: str) -> None:
    policy = _policy()
    kept = [HOST / f"aging.additional.{marker}.slice_{n}" for n in range(5)]
    for path in kept:
        policy.add(path, 300)
    policy.add(_slice("hbm.data.0", 0), 100)
    policy.add(_slice("hbm.data.0", 1), 100)
    assert policy.total_bytes == 1700
    decision = policy.to_delete()
    assert _names(decision) == ["hbm.data.0.slice_0"]  # the only one that may go
    assert policy.total_bytes == 1600


def test_control_files_never_age() -> None:
    policy = _policy()
    controls = [
        "info.json.0",
        "sample.json",
        "start_info.0",
        "end_info.0",
        "host_start.log.0",
        "dev_start.log.0",
    ]
    for name in controls:
        policy.add(DEV.parent / name, 400, 10)
    assert not policy.to_delete()


def test_the_last_file_of_each_family_stays() -> None:
    policy = _policy()
    policy.add(_slice("hbm.data.0", 0), 500)
    policy.add(_slice("hbm.data.0", 1), 500)
    policy.add(_slice("llc.data.0", 0), 500)
    decision = policy.to_delete()  # 600 over, but only hbm slice_0 may go
    assert _names(decision) == ["hbm.data.0.slice_0"]
    assert policy.total_bytes == 1000
    assert not policy.to_delete()  # still over, nothing left that may go


def test_families_are_per_directory() -> None:
    policy = _policy()
    policy.add(_slice("aging.api_event.data", 0, HOST), 600)
    policy.add(_slice("aging.api_event.data", 0, Path("/other/host/data")), 600)
    assert not policy.to_delete()  # each is the last of its own family


def test_a_family_is_the_name_without_its_last_suffix() -> None:
    policy = _policy()
    policy.add(DEV / "hbm.data.0.slice_0", 500)
    policy.add(DEV / "hbm.data.1.slice_0", 500)  # another device: another family
    assert not policy.to_delete()


def test_the_done_file_goes_with_its_data_file() -> None:
    policy = _policy()
    policy.add(_slice("hbm.data.0", 0), 450, 50)
    policy.add(_slice("hbm.data.0", 1), 450, 50)
    decision = policy.to_delete()
    assert decision.paths == [DEV / "hbm.data.0.slice_0", DEV / "hbm.data.0.slice_0.done"]
    assert decision.bytes == 500


def test_hwts_and_aicore_slices_are_paired_and_age_together() -> None:
    policy = _policy()
    for path in (_slice("hwts.data.0", 0), _slice("hwts.data.0", 1), _slice("llc.data.0", 0)):
        policy.add(path, 100)
    # aicore slice_0 is placed next to hwts slice_0, aicore slice_1 next to hwts slice_1:
    # the list is hwts0 aicore0 hwts1 aicore1 llc0 llc1
    policy.add(_slice("aicore.data.0", 0), 100)
    policy.add(_slice("aicore.data.0", 1), 100)
    policy.add(_slice("llc.data.0", 1), 450)
    decision = policy.to_delete()  # 950 stored, 50 over: the first pair (both, though one would do)
    assert _names(decision) == ["hwts.data.0.slice_0", "aicore.data.0.slice_0"]
    policy.add(_slice("llc.data.0", 2), 250)
    decision = policy.to_delete()  # 1000 stored, 100 over: hwts1/aicore1 are the last: llc goes
    assert _names(decision) == ["llc.data.0.slice_0"]


def test_a_late_aicore_slice_is_placed_by_its_hwts_slice_not_at_the_end() -> None:
    policy = _policy()
    policy.add(_slice("hwts.data.0", 0), 100)
    policy.add(_slice("llc.data.0", 0), 100)
    policy.add(_slice("llc.data.0", 1), 100)
    policy.add(_slice("hwts.data.0", 1), 100)
    policy.add(_slice("aicore.data.0", 0), 100)  # after hwts slice_0, ahead of both llc slices
    policy.add(_slice("aicore.data.0", 1), 100)
    policy.add(_slice("llc.data.0", 2), 400)
    decision = policy.to_delete()  # 1000 stored, 100 over
    assert _names(decision) == ["hwts.data.0.slice_0", "aicore.data.0.slice_0"]


def test_hwts_written_after_aicore_pairs_with_the_oldest_unpaired_aicore() -> None:
    policy = _policy()
    policy.add(_slice("aicore.data.0", 0), 100)
    policy.add(_slice("aicore.data.0", 1), 100)
    policy.add(_slice("llc.data.0", 0), 100)
    policy.add(_slice("hwts.data.0", 0), 100)  # right after aicore slice_0
    policy.add(_slice("hwts.data.0", 1), 100)  # right after aicore slice_1
    policy.add(_slice("llc.data.0", 1), 500)
    decision = policy.to_delete()  # 1000 stored, 100 over
    assert _names(decision) == ["aicore.data.0.slice_0", "hwts.data.0.slice_0"]


def test_an_aged_unpaired_slice_leaves_its_place_to_its_late_partner() -> None:
    policy = _policy()
    policy.add(_slice("hwts.data.0", 0), 300)
    policy.add(_slice("hwts.data.0", 1), 300)
    policy.add(_slice("llc.data.0", 0), 200)
    policy.add(_slice("llc.data.0", 1), 200)
    assert _names(policy.to_delete()) == ["hwts.data.0.slice_0"]  # 1000 stored, unpaired, aged alone
    policy.add(_slice("aicore.data.0", 0), 100)  # takes hwts slice_0's place, first in the queue
    policy.add(_slice("aicore.data.0", 1), 100)  # pairs with hwts slice_1
    policy.add(_slice("llc.data.0", 2), 100)
    decision = policy.to_delete()  # 1000 stored, 100 over
    assert _names(decision) == ["aicore.data.0.slice_0"]


def test_files_deleted_by_someone_else_leave_the_books() -> None:
    """The profiler ages its own slices: forgotten, they neither count towards the limit nor come
    up for aging again; the other side of a forgotten pair ages alone."""
    policy = _policy()
    policy.add(_slice("llc.data.0", 0), 300)
    policy.add(_slice("hwts.data.0", 0), 100)
    policy.add(_slice("aicore.data.0", 0), 100)  # pairs with hwts slice_0
    policy.add(_slice("aicore.data.0", 1), 100)
    policy.add(_slice("llc.data.0", 1), 300)
    policy.forget({_slice("llc.data.0", 0), _slice("hwts.data.0", 0)})
    assert policy.total_bytes == 500
    policy.add(_slice("llc.data.0", 2), 450)  # 950 stored, 50 over: aicore slice_0 goes alone
    assert _names(policy.to_delete()) == ["aicore.data.0.slice_0"]
    policy.forget({_slice("llc.data.0", 1)})  # llc slice_2 is now the last of its family
    policy.add(_slice("hwts.data.0", 1), 400)  # 950 stored again, but every file left is a last one
    assert policy.total_bytes == 950
    assert not policy.to_delete()


def test_pairs_are_per_device() -> None:
    policy = _policy()
    policy.add(_slice("hwts.data.0", 0), 100)
    policy.add(_slice("hwts.data.0", 1), 100)
    policy.add(_slice("llc.data.0", 0), 100)
    policy.add(_slice("aicore.data.1", 0), 100)  # device 1: not hwts.data.0's partner, appended
    policy.add(_slice("aicore.data.1", 1), 100)
    policy.add(_slice("llc.data.0", 1), 500)
    decision = policy.to_delete()  # 1000 stored, 100 over
    assert _names(decision) == ["hwts.data.0.slice_0"]


def test_protected_files_are_skipped_while_others_can_go() -> None:
    policy = _policy()
    policy.add(_slice("hbm.data.0", 0), 200)
    policy.add(_slice("llc.data.0", 0), 200)
    policy.add(_slice("hbm.data.0", 1), 200)
    policy.add(_slice("llc.data.0", 1), 200)
    policy.add(_slice("llc.data.0", 2), 200)
    policy.protect(lambda path: path.name.startswith("hbm"))
    decision = policy.to_delete()  # 1000 stored, 100 over
    assert _names(decision) == ["llc.data.0.slice_0"]
    assert decision.forced == ()


def test_a_protected_file_holds_back_the_newer_files_of_its_stream() -> None:
    policy = _policy()
    for n in range(4):
        policy.add(_slice("hbm.data.0", n), 250)
    policy.protect(lambda path: path.name.endswith("slice_0"))
    assert not policy.to_delete()  # 1000 stored, 100 over the upper threshold: slice_1 may not go first
    policy.add(_slice("hbm.data.0", 4), 250)
    decision = policy.to_delete()  # 1250 stored, 250 over the limit itself: slice_0 is forced out
    assert [f.path.name for f in decision.forced] == ["hbm.data.0.slice_0"]
    assert decision.aged == ()


def test_protected_files_are_forced_out_when_nothing_else_is_left() -> None:
    policy = _policy(limit=900)
    for n in range(3):
        policy.add(_slice("hbm.data.0", n), 300)
    policy.add(_slice("llc.data.0", 0), 300)
    policy.add(_slice("llc.data.0", 1), 300)
    policy.protect(lambda path: path.name.startswith("hbm"))
    # 1500 stored, 700 over the upper threshold (800), 600 over the limit: llc slice_0 goes, then
    # protected files only until the total is back at the limit
    decision = policy.to_delete()
    assert [f.path.name for f in decision.aged] == ["llc.data.0.slice_0"]
    assert [f.path.name for f in decision.forced] == ["hbm.data.0.slice_0"]
    assert policy.total_bytes == 900
    policy.protect(None)  # all processed now: down to the upper threshold
    assert [f.path.name for f in policy.to_delete().aged] == ["hbm.data.0.slice_1"]
    assert policy.total_bytes == 600


def test_protection_never_overrides_the_last_file_rule() -> None:
    policy = _policy()
    policy.add(_slice("hbm.data.0", 0), 2000)
    policy.protect(lambda path: True)
    assert not policy.to_delete()


@pytest.mark.parametrize(
    ("value", "free", "expected"),
    [
        ("200MB", 0, 200 * MB),
        ("4294967295MB", 0, 4294967295 * MB),
        ("0MB", 10**12, 0),
        (None, 1000 * MB, 900 * MB),  # unset: 90 % of the free space
        ("", 1000 * MB, 900 * MB),
        (None, 22 * MB, 0),  # 90 % is under 20 MB: disabled
        (None, 23 * MB, 20 * MB),
    ],
)
def test_storage_limit_values(value: str | None, free: int, expected: int) -> None:
    assert parse_storage_limit(value, free) == expected


@pytest.mark.parametrize("value", ["199MB", "4294967296MB", "300", "300GB", "-5MB", "MB"])
def test_bad_storage_limits_are_refused(value: str) -> None:
    with pytest.raises(ConfigError):
        parse_storage_limit(value, 10**12)


def test_timeline_windows_age_oldest_first() -> None:
    windows = [(Path(f"w{n}.json"), 100) for n in range(5)]
    assert age_windows(windows, 500) == []
    assert age_windows(windows, 350) == [Path("w0.json"), Path("w1.json")]


def test_the_newest_timeline_window_is_kept_even_over_the_limit() -> None:
    windows = [(Path("w0.json"), 100), (Path("w1.json"), 900)]
    assert age_windows(windows, 500) == [Path("w0.json")]
    assert age_windows([(Path("w0.json"), 900)], 500) == []
    assert age_windows([], 0) == []


# --- properties over random write sequences ------------------------------------------------------

FAMILIES = (
    "hwts.data.0",
    "aicore.data.0",
    "hwts.data.1",
    "aicore.data.1",
    "stars_soc.data.0",
    "aging.api_event.data",
    "unaging.additional.hash_dic",
    "ts_track.data.0",
)
PAIR_OF = {"hwts.data.0": "aicore.data.0", "aicore.data.0": "hwts.data.0"}
PAIR_OF |= {"hwts.data.1": "aicore.data.1", "aicore.data.1": "hwts.data.1"}

add_op = st.tuples(st.just("add"), st.sampled_from(FAMILIES), st.integers(1, 300), st.booleans())
age_op = st.tuples(st.just("age"), st.none() | st.integers(0, 200), st.just(0), st.just(False))


class _Model:
    """What the test knows from outside: files alive, their order, the k-th hwts/aicore partners."""

    def __init__(self) -> None:
        self.alive: dict[Path, int] = {}
        self.written: dict[str, list[Path]] = {f: [] for f in FAMILIES}
        self.protected: set[Path] = set()
        self.together: list[tuple[Path, Path]] = []  # partners that were alive at the same time

    def add(self, family: str, size: int, protected: bool) -> Path:
        files = self.written[family]
        path = DEV / f"{family}.slice_{len(files)}"
        files.append(path)
        self.alive[path] = size
        if protected:
            self.protected.add(path)
        partner_family = PAIR_OF.get(family)
        if partner_family is not None and len(self.written[partner_family]) >= len(files):
            partner = self.written[partner_family][len(files) - 1]
            if partner in self.alive:
                self.together.append((path, partner))
        return path

    def alive_of(self, family: str) -> list[Path]:
        return [p for p in self.written[family] if p in self.alive]


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(add_op, age_op), max_size=80), protecting=st.booleans())
def test_aging_invariants(ops: list[tuple[str, object, int, bool]], protecting: bool) -> None:
    policy = _policy(limit=1500, reserve=100)
    model = _Model()
    if protecting:
        policy.protect(model.protected.__contains__)
    for kind, arg, size, protect in ops:
        if kind == "add":
            assert isinstance(arg, str)
            policy.add(model.add(arg, size, protect and protecting), size)
            continue
        assert arg is None or isinstance(arg, int)
        decision = policy.to_delete(arg)
        gone = [f.path for f in (*decision.aged, *decision.forced)]
        assert len(set(gone)) == len(gone)
        assert all(path in model.alive for path in gone)
        assert not any(marker in path.name for path in gone for marker in NEVER_AGED)
        assert all(path not in model.protected for path in (f.path for f in decision.aged))
        assert all(path in model.protected for path in (f.path for f in decision.forced))
        for first, second in model.together:
            if first in model.alive and second in model.alive:
                assert (first in gone) == (second in gone), (first, second)
        for family in FAMILIES:  # each stream loses its oldest files only, and never its last
            alive = model.alive_of(family)
            doomed = [p for p in alive if p in gone]
            assert doomed == alive[: len(doomed)]
            assert len(doomed) < max(len(alive), 1)
        for path in gone:
            del model.alive[path]
        assert policy.total_bytes == sum(model.alive.values())
        # protected files are forced out only down to the limit, the others down to the upper threshold
        if arg is None and policy.total_bytes > (policy.limit_bytes if protecting else policy.upper_bytes):
            _assert_nothing_left_to_age(model)


def _assert_nothing_left_to_age(model: _Model) -> None:
    """Over the limit after aging: every stream with files to spare is held by a partner's last file."""
    alive_count = Counter(family for family in FAMILIES for _ in model.alive_of(family))
    for family in FAMILIES:
        alive = model.alive_of(family)
        if len(alive) < 2 or any(marker in family for marker in NEVER_AGED):
            continue
        oldest = alive[0]
        partners = [b if a == oldest else a for a, b in model.together if oldest in (a, b)]
        assert partners, f"{oldest} could have been aged"
        assert all(alive_count[PAIR_OF[family]] == 1 and p in model.alive for p in partners), oldest
