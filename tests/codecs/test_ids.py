"""Stream/task id reconstruction (specs §2.0): worked examples per rule and a scalar cross-check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs._base import StreamTraits
from profstream.codecs._ids import legacy_stream_id, reconstruct_ids, unique_ids

STARS = StreamTraits(platform=5)
EXPAND = StreamTraits(platform=5, stream_expand=True)
V6 = StreamTraits(platform=15)


def one(stream: int, task: int, traits: StreamTraits, sqe: int | None = None) -> tuple[int, int]:
    sqe_arr = None if sqe is None else np.array([sqe], np.uint8)
    s, t = reconstruct_ids(np.array([stream], np.uint16), np.array([task], np.uint16), traits, sqe_arr)
    return int(s[0]), int(t[0])


def reference(stream: int, task: int, sqe: int, expand: bool) -> tuple[int, int]:
    """The §2.0 rules transcribed one record at a time."""
    if expand:
        if sqe in (3, 4):
            return stream & 0x7FFF, task
        if stream & 0x8000:
            return task & 0x7FFF, (task & 0x8000) | (stream & 0x7FFF)
        return stream & 0x7FFF, task
    if stream & 0x1000:
        return stream % 2048, (task & 0x1FFF) | (stream & 0xE000)
    if stream & 0x2000:
        return (task & 0x0FFF) % 2048, (stream & 0x0FFF) | (task & 0xF000)
    return stream % 2048, task


@pytest.mark.parametrize(
    ("stream", "task", "expected"),
    [
        (5, 100, (5, 100)),  # no flag bits
        (0x0805, 100, (5, 100)),  # stream % 2048
        (0x5009, 0x2ABC, (9, 0x4ABC)),  # bit 12: task low 13 bits | stream high 3 bits
        (0x2123, 0x7456, (0x456, 0x7123)),  # bit 13: low 12 bits swapped
        (0x2123, 0x7900, (0x100, 0x7123)),  # bit 13: the swapped-in stream is taken % 2048
        (0x3005, 0x1234, (5, 0x3234)),  # bits 12 and 13: bit 12 wins
    ],
)
def test_stream_expand_off(stream: int, task: int, expected: tuple[int, int]) -> None:
    """Stream expand off: the 0x1000 / 0x2000 rules, worked examples."""
    assert one(stream, task, STARS) == expected


@pytest.mark.parametrize(
    ("stream", "task", "sqe", "expected"),
    [
        (0x8ABC, 0x8123, 0, (0x0123, 0x8ABC)),  # bit 15: stream from task, task = task bit 15 | stream low 15
        (0x8ABC, 0x8123, None, (0x0123, 0x8ABC)),  # no SQE type means 0 (PMU records)
        (0x8ABC, 0x8123, 3, (0x0ABC, 0x8123)),  # PLACE_HOLDER exempt
        (0x8ABC, 0x8123, 4, (0x0ABC, 0x8123)),  # EVENT_RECORD exempt
        (0x8ABC, 0x8123, 5, (0x0123, 0x8ABC)),  # other SQE types are not exempt
        (0x1ABC, 0x0042, 0, (0x1ABC, 0x0042)),  # no bit 15: 15-bit stream, bits 12/13 mean nothing
    ],
)
def test_stream_expand_on(stream: int, task: int, sqe: int | None, expected: tuple[int, int]) -> None:
    """Stream expand on: the 0x8000 rule with SQE types 3 and 4 exempt."""
    assert one(stream, task, EXPAND, sqe) == expected


def test_v6_unique_id() -> None:
    """Chip V6: no bit tricks, task id = (task << 16) | stream, even with flag bits set."""
    assert one(0x9102, 0x0304, V6) == (0x9102, 0x03049102)
    assert one(0x9102, 0x0304, StreamTraits(platform=16, stream_expand=True), 3) == (0x9102, 0x03049102)
    stream, task = unique_ids(np.array([0xFFFF], np.uint16), np.array([0xFFFF], np.uint16))
    assert task.dtype == np.uint32
    assert int(task[0]) == 0xFFFFFFFF
    assert int(stream[0]) == 0xFFFF


def test_non_stars_platform_masks_only() -> None:
    """Chips without STARS: stream % 2048, task unchanged, flag bits ignored."""
    assert one(0x5005, 77, StreamTraits(platform=1)) == (5, 77)
    assert one(0x5005, 77, STARS) == (5, 77 | 0x4000)
    assert legacy_stream_id(np.array([2048 + 13, 0xFFFF], np.uint32)).tolist() == [13, 2047]


def test_unknown_platform_uses_stars_rules() -> None:
    """Without a platform the STARS rules apply (every STARS-family file implies a STARS chip)."""
    assert one(0x5009, 0x2ABC, StreamTraits()) == (9, 0x4ABC)


def test_dtypes() -> None:
    """Streams come back uint16 and tasks uint32 under every rule."""
    for traits in (STARS, EXPAND, V6, StreamTraits(platform=1)):
        s, t = reconstruct_ids(np.zeros(3, np.uint16), np.zeros(3, np.uint16), traits)
        assert s.dtype == np.dtype(np.uint16)
        assert t.dtype == np.dtype(np.uint32)


ids = st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 63)), max_size=40)


@given(ids, st.booleans())
def test_vectorised_matches_scalar_rules(rows: list[tuple[int, int, int]], expand: bool) -> None:
    """The array implementation equals the rules applied record by record."""
    stream = np.array([r[0] for r in rows], np.uint16)
    task = np.array([r[1] for r in rows], np.uint16)
    sqe = np.array([r[2] for r in rows], np.uint8)
    s, t = reconstruct_ids(stream, task, EXPAND if expand else STARS, sqe)
    assert list(zip(s.tolist(), t.tolist(), strict=True)) == [reference(*r, expand=expand) for r in rows]
