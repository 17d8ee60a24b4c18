"""The newest launch of each (stream, task) that is older than every device task still to join.

Task ids wrap, so a device task joins the latest launch of its key before its start (host_join.py).
Once a launch is older than every task still to come, only the newest one of its (stream, task) can
still be that latest launch: a graph replayed by the device runs the same launched task ids again
long after their launch. HostJoin and Communication keep those launches here.

The store holds up to one row per (stream, task), so it fills as slowly as a stream's task ids wrap:
for most of a long run it grows, and at 65,536 task ids per stream it can reach hundreds of
thousands of rows. Each pair therefore owns a fixed slot, and a newer launch overwrites its slot in
place: nothing is ever compacted or copied as a whole. An Arrow table with appended rows and periodic
compaction needed a copy of each column that grew with the store, and most of the operator stage's
late peak-RSS rise on long inputs came during those copies (bench/README.md, "Operator stage",
session 7). Slots live in blocks
of ``SLOT_BLOCK`` rows that are allocated as they fill; text is kept as codes into one word list per
column (a few dozen distinct op names and shapes, against about 200 bytes a row as plain strings).
Integer columns and codes are held at the narrowest width their values so far need, widened when a
value does not fit, and a column keeps validity only once it has held a null: the host join's rows
take about 80 bytes instead of 138 (block and model ids, stream ids and codes fit a byte or two).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.engine import schema
from profstream.engine.operators.api import I64, column

#: rows per storage block (a block of the host join's store is about 9 MB)
SLOT_BLOCK_BITS = 16
SLOT_BLOCK = 1 << SLOT_BLOCK_BITS
#: distinct words a text column may collect before those no kept row uses are forgotten (dynamic shapes
#: give a new shape text per sequence length, and overwritten rows leave theirs behind)
WORDS_KEPT = 4096
STR = pa.string()
#: one block of a column (values, validity or text codes)
Block = npt.NDArray[Any]
#: the widths an integer column (or a text column's codes) is held at, narrowest first, with bounds
WIDTHS = tuple(
    (np.dtype(t), int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.int16, np.int32, np.int64)
)
NARROWEST = WIDTHS[0][0]


def _width_for(values: Block, held: np.dtype[Any]) -> np.dtype[Any]:
    """The narrowest of :data:`WIDTHS`, no narrower than ``held``, that holds every one of ``values``."""
    if not len(values):
        return held
    low, high = int(values.min()), int(values.max())
    return next(
        width
        for width, least, most in WIDTHS  # int64 holds any value of an int64 column
        if width.itemsize >= held.itemsize and least <= low <= high <= most
    )


class _Placement:
    """Where each of some slots lives: per block, the positions asking for it and its offsets there."""

    def __init__(self, slots: I64) -> None:
        block = slots >> SLOT_BLOCK_BITS
        order = np.argsort(block, kind="stable")
        bounds = np.searchsorted(block[order], np.arange(int(block.max(initial=-1)) + 2))
        offset = slots & (SLOT_BLOCK - 1)
        self.count = len(slots)
        self.parts = [
            (b, order[low:high], offset[order[low:high]])
            for b, (low, high) in enumerate(itertools.pairwise(bounds))
            if high > low
        ]

    def gather(self, blocks: list[Block]) -> Block:
        out = np.empty(self.count, blocks[0].dtype)
        for b, positions, offsets in self.parts:
            out[positions] = blocks[b][offsets]
        return out

    def scatter(self, blocks: list[Block], values: Block) -> None:
        for b, positions, offsets in self.parts:
            blocks[b][offsets] = values[positions]


class SettledLaunches:
    """Per (stream, task) the newest settled launch, in a slot of its own (see the module docstring)."""

    def __init__(self, described: pa.Schema) -> None:
        self.described = described  #: the rows' schema as added and as :meth:`live` returns them
        self._text = {f.name for f in described if f.type == STR}
        self._dtypes = {
            f.name: np.dtype(f.type.to_pandas_dtype()) for f in described if f.name not in self._text
        }
        #: the dtype each column's blocks hold (text: its codes); integers start at the narrowest width
        self._held = {name: NARROWEST for name in self._text}
        self._held.update({name: NARROWEST if d.kind == "i" else d for name, d in self._dtypes.items()})
        self._blocks: dict[str, list[Block]] = {f.name: [] for f in described}
        self._valid: dict[str, list[Block]] = {}  # only columns that have held a null
        self._words: dict[str, dict[str, int]] = {name: {} for name in self._text}
        self._word_limit = dict.fromkeys(self._text, WORDS_KEPT)
        self._word_arrays: dict[str, pa.Array] = {}  # the words as Arrow strings, while unchanged
        self._pairs = np.empty(0, np.int64)  # sorted (stream << 32 | task)
        self._at = np.empty(0, np.int64)  # the slot of each pair

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, described: pa.Table) -> None:
        """Settle rows (all older than any task to come): per pair the newest one replaces the kept one."""
        if not described.num_rows:
            return
        stream, task = column(described, "stream_id"), column(described, "task_id")
        order = np.lexsort((column(described, "time_ns"), task, stream))
        pairs = (stream[order] << 32) | task[order]
        newest = np.r_[pairs[1:] != pairs[:-1], True]
        chosen, pairs = order[newest], pairs[newest]
        where = np.searchsorted(self._pairs, pairs)
        known = where < len(self._pairs)
        known[known] = self._pairs[where[known]] == pairs[known]
        slots = np.empty(len(pairs), np.int64)
        slots[known] = self._at[where[known]]
        slots[~known] = len(self._pairs) + np.arange(int((~known).sum()), dtype=np.int64)
        self._pairs = np.insert(self._pairs, where[~known], pairs[~known])
        self._at = np.insert(self._at, where[~known], slots[~known])
        self._reserve(len(self._pairs))
        placement = _Placement(slots)
        for name in self.described.names:  # each column read whole, its chosen rows picked in numpy
            values = described.column(name).combine_chunks()
            if name in self._text:
                self._scatter(name, placement, self._codes(name, values, chosen))
                if len(self._words[name]) > self._word_limit[name]:
                    self._forget_words(name)
            else:
                valid = values.is_valid().to_numpy(zero_copy_only=False)[chosen]
                if not valid.all() and name not in self._valid:
                    self._valid[name] = [np.ones(SLOT_BLOCK, np.bool_) for _ in self._blocks[name]]
                if name in self._valid:
                    placement.scatter(self._valid[name], valid)
                dtype = self._dtypes[name]
                filled = values.fill_null(dtype.type(0).item()).to_numpy(zero_copy_only=False)
                self._scatter(name, placement, np.asarray(filled[chosen], dtype))

    def _scatter(self, name: str, placement: _Placement, values: Block) -> None:
        """Write a column's ``values`` to their slots, first widening its blocks if one does not fit."""
        held = self._held[name]
        if held.kind == "i" and (width := _width_for(values, held)) != held:
            self._blocks[name] = [block.astype(width) for block in self._blocks[name]]
            self._held[name] = width
        placement.scatter(self._blocks[name], values)

    def _reserve(self, slots: int) -> None:
        """Blocks for ``slots`` slots (new blocks come zeroed: untouched pages cost no memory)."""
        while len(next(iter(self._blocks.values()))) * SLOT_BLOCK < slots:
            for name, blocks in self._blocks.items():
                blocks.append(np.zeros(SLOT_BLOCK, self._held[name]))
            for valid in self._valid.values():
                valid.append(np.zeros(SLOT_BLOCK, np.bool_))

    def _codes(self, name: str, values: pa.Array, chosen: I64) -> Block:
        """The column's codes of ``values[chosen]`` (-1 for null), adding words it has not seen (in
        the order they first appear there)."""
        if not pa.types.is_dictionary(values.type):  # known words map in one hash lookup each
            found = pc.index_in(values, value_set=self._word_array(name))
            if found.null_count == values.null_count:
                return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), np.int32)[chosen]
        # (a dictionary column comes back as it is)
        encoded = values.take(pa.array(chosen)).dictionary_encode()
        codes = self._words[name]
        words = encoded.dictionary.to_pylist()
        mapping = np.array([codes.setdefault(word, len(codes)) for word in words] + [-1], np.int32)
        indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        return np.asarray(mapping[indices])

    def _forget_words(self, name: str) -> None:
        """Renumber the column's words to those its kept rows use (at most once per doubling)."""
        codes = self._filled(name)
        used = np.unique(codes[codes >= 0])
        renumbered = np.full(len(self._words[name]) + 1, -1, np.int32)  # the last entry maps -1 (null)
        renumbered[used] = np.arange(len(used), dtype=np.int32)
        for block in self._blocks[name]:
            block[:] = renumbered[block]
        words = list(self._words[name])
        self._words[name] = {words[code]: i for i, code in enumerate(used.tolist())}
        self._word_limit[name] = max(WORDS_KEPT, 2 * len(used))
        self._word_arrays.pop(name, None)

    def _word_array(self, name: str) -> pa.Array:
        words = self._word_arrays.get(name)
        if words is None or len(words) != len(self._words[name]):
            words = self._word_arrays[name] = pa.array(list(self._words[name]), STR)
        return words

    def slots(self, stream: I64, task: I64) -> I64:
        """The slot of each query's (stream, task) pair, else -1."""
        if not len(self._pairs):
            return np.full(len(stream), -1, np.int64)
        pairs = (np.asarray(stream, np.int64) << 32) | np.asarray(task, np.int64)
        where = np.minimum(np.searchsorted(self._pairs, pairs), len(self._pairs) - 1)
        return np.where(self._pairs[where] == pairs, self._at[where], -1)

    def find(self, stream: I64, task: I64, keys: I64) -> I64:
        """The slot of each query's pair whose full key (with the batch id) matches, else -1."""
        slot = self.slots(stream, task)
        same = slot >= 0
        same[same] = self.values("key", slot[same]) == keys[same]
        return np.where(same, slot, -1)

    def values(self, name: str, slots: I64 | None = None) -> Block:
        """A numeric column at ``slots`` (every kept pair's when None; nulls read as 0)."""
        if slots is None:
            held = self._filled(name)
        elif not len(slots):
            held = np.empty(0, self._held[name])
        else:
            held = _Placement(slots).gather(self._blocks[name])
        return held.astype(self._dtypes[name], copy=False)

    def _filled(self, name: str) -> Block:
        """A column's values (or codes) of every used slot, in slot order, as held."""
        return _joined(self._blocks[name], len(self._pairs), self._held[name])

    def take(self, slots: I64) -> pa.Table:
        """The rows at ``slots``, a null row where a slot is -1; text dictionary-encoded."""
        if not len(self._pairs):
            kinds = [schema.DICT if f.name in self._text else f.type for f in self.described]
            return pa.Table.from_arrays([pa.nulls(len(slots), kind) for kind in kinds], self.described.names)
        missing = slots < 0
        placement = _Placement(np.where(missing, 0, slots))
        columns = []
        for field in self.described:
            if field.name in self._text:
                codes = placement.gather(self._blocks[field.name])
                words = self._word_array(field.name)
                indices = pa.array(codes.astype(np.int32, copy=False), mask=missing | (codes < 0))
                columns.append(pa.DictionaryArray.from_arrays(indices, words))
            else:
                values = placement.gather(self._blocks[field.name]).astype(
                    self._dtypes[field.name], copy=False
                )
                null = missing
                if field.name in self._valid:
                    null = missing | ~placement.gather(self._valid[field.name])
                columns.append(pa.array(values, field.type, mask=null))
        return pa.Table.from_arrays(columns, names=self.described.names)

    def live(self) -> pa.Table:
        """The kept rows in pair order, text decoded."""
        return self.take(self._at).cast(self.described)

    def state(self) -> dict[str, Any]:
        """The store as it is held (pairs, slots, numeric values and text codes at their held widths,
        validity where kept, words), for :func:`~profstream.engine.runtime.pack_state`. The daemon
        snapshots every operator at each commit, and decoding the text of a few hundred thousand kept
        rows made this store most of the bytes and time of each snapshot; its codes are a fraction of
        that."""
        count = len(self._pairs)
        return {
            "pairs": self._pairs,
            "at": self._at,
            "values": {name: self._filled(name) for name in self._blocks},
            "valid": {name: _joined(blocks, count, np.bool_) for name, blocks in self._valid.items()},
            "words": {name: list(words) for name, words in self._words.items()},
            "word_limit": dict(self._word_limit),
        }

    @classmethod
    def restored(cls, described: pa.Schema, state: dict[str, Any]) -> SettledLaunches:
        """The store :meth:`state` saved (its state again, byte for byte)."""
        store = cls(described)
        store._pairs = np.asarray(state["pairs"], np.int64)
        store._at = np.asarray(state["at"], np.int64)
        store._held.update({name: np.asarray(values).dtype for name, values in state["values"].items()})
        store._valid = {name: [] for name in state["valid"]}
        store._reserve(len(store._pairs))
        for blocks, saved in ((store._blocks, state["values"]), (store._valid, state["valid"])):
            for name, values in saved.items():
                for start in range(0, len(values), SLOT_BLOCK):
                    chunk = values[start : start + SLOT_BLOCK]
                    blocks[name][start >> SLOT_BLOCK_BITS][: len(chunk)] = chunk
        store._words = {
            name: {word: i for i, word in enumerate(words)} for name, words in state["words"].items()
        }
        store._word_limit = {name: int(limit) for name, limit in state["word_limit"].items()}
        return store

    def join(
        self, recent: pa.Table, found: I64, stream: I64, task: I64, keys: I64
    ) -> tuple[pa.Table, npt.NDArray[np.bool_]]:
        """The launch of each query: row ``found`` of ``recent`` (the latest before it there), else the
        settled one of its key, which is older than any task still to join; and which have one.

        Text columns may come dictionary-encoded (the settled rows' own encoding).
        """
        settled = np.where(found < 0, self.find(stream, task, keys), -1)
        older = settled >= 0
        if not older.any():
            return recent.take(pa.array(found, mask=found < 0)), found >= 0
        if older.all():
            return self.take(settled), older
        # the few settled rows go after the recent ones, and one take picks each query's row
        at = np.flatnonzero(older)
        rows = pa.concat_tables([recent, self.take(settled[at]).cast(self.described)])
        found = found.copy()
        found[at] = recent.num_rows + np.arange(len(at))
        return rows.take(pa.array(found, mask=found < 0)), found >= 0


def _joined(blocks: list[Block], count: int, dtype: npt.DTypeLike) -> Block:
    """The first ``count`` slots of a column's blocks as one array (empty of ``dtype`` before any block)."""
    return np.concatenate(blocks)[:count] if blocks else np.empty(0, dtype)
