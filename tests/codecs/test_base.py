"""Helpers of the numba decoders: record words, column allocation, the rolling-counter check."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from profstream.codecs._base import ColumnSet, counter_gaps, record_words

COLUMNS = ColumnSet.of(a=np.uint8, b=np.uint16, c=np.uint64, d=np.uint64, e=np.uint32)


def test_record_words_are_a_read_only_view_of_whole_records() -> None:
    """Little-endian int64 words of the whole records, the partial record left out, even unaligned."""
    raw = np.zeros(3 + 2 * 16 + 5, np.uint8)
    buf = raw[3:]  # not 8-byte aligned
    buf[0] = 1
    buf[16 + 8 : 16 + 16] = np.frombuffer((2**63 + 5).to_bytes(8, "little"), np.uint8)
    words, consumed = record_words(buf, 16)
    assert consumed == 32
    assert words.shape == (2, 2)
    assert not words.flags.writeable
    assert np.shares_memory(words, buf)
    assert words[0, 0] == 1
    assert words[1, 1] == np.int64(2**63 + 5 - 2**64)  # bits kept, read signed


def test_empty_columns_are_aligned_and_staggered() -> None:
    """Each column is writable, 64-byte aligned, and starts at a different offset modulo 4 KiB."""
    for rows in (0, 1, 1000, 4096, 65536):
        arrays = COLUMNS.empty(rows)
        assert [a.dtype for a in arrays] == [dtype for _, dtype in COLUMNS.fields]
        assert all(len(a) == rows and a.flags.writeable for a in arrays)
        addresses = [a.ctypes.data for a in arrays]
        assert all(address % 64 == 0 for address in addresses)
        assert len({address % 4096 for address in addresses}) == len(arrays)
        ends = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(ends))


def test_batch_wraps_the_columns_without_copying() -> None:
    """The batch's buffers are the kernel's columns, cut to the rows it kept."""
    arrays = COLUMNS.empty(10)
    for k, values in enumerate(arrays):
        values[:] = np.arange(10) + k
    out = COLUMNS.batch(arrays, 7)
    assert out.schema.names == ["a", "b", "c", "d", "e"]
    assert out.schema.field("c").type == pa.uint64()
    assert out.num_rows == 7
    assert out.column("d").to_pylist() == list(range(3, 10))
    assert out.column("b").buffers()[1].address == arrays[1].ctypes.data


@given(st.lists(st.integers(0, 15), max_size=50), st.one_of(st.none(), st.integers(0, 15)))
def test_counter_gaps_match_the_rule(values: list[int], previous: int | None) -> None:
    """Lost records = sum over steps of (step - 1) mod 16, from ``previous`` when given."""
    chain = ([] if previous is None else [previous]) + values
    expected = sum((b - a - 1) % 16 for a, b in itertools.pairwise(chain))
    cnt = np.array(values, np.uint8)
    assert counter_gaps(cnt, previous) == expected
    cnt.flags.writeable = False  # Arrow columns come back read-only
    assert counter_gaps(cnt, previous) == expected
