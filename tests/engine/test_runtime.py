"""The pipeline runtime: pull order by watermark, operator advancement, snapshots, wiring errors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.engine.runtime import (
    DONE,
    START,
    WAIT,
    Emit,
    Feed,
    Operator,
    Pipeline,
    PipelineError,
    at,
    pack_state,
    unpack_state,
)


def _batches(chunks: list[list[int]]) -> Iterator[pa.RecordBatch]:
    for chunk in chunks:
        yield pa.record_batch({"t": pa.array(chunk, pa.int64())})


class SortedMerge(Operator):
    """Emits every time below the watermark, sorted: the smallest useful watermark-driven operator."""

    def __init__(self, inputs: tuple[str, ...], output: str = "merged") -> None:
        self.inputs = inputs
        self.outputs = (output,)
        self.pending = np.empty(0, np.int64)
        self.watermarks: list[int] = []

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        self.pending = np.concatenate([self.pending, batch.column("t").to_numpy()])

    def advance(self, watermark: int) -> list[Emit]:
        self.watermarks.append(watermark)
        ready = self.pending < watermark
        out = np.sort(self.pending[ready])
        self.pending = self.pending[~ready]
        return [(self.outputs[0], pa.record_batch({"t": out}))]

    def finish(self) -> list[Emit]:
        out, self.pending = np.sort(self.pending), np.empty(0, np.int64)
        return [(self.outputs[0], pa.record_batch({"t": out}))]

    def snapshot(self) -> bytes:
        return pack_state({"pending": self.pending})

    def restore(self, state: bytes) -> None:
        self.pending = unpack_state(state)["pending"]


def _merged(pipeline: Pipeline, stream: str = "merged") -> list[int]:
    return [t for _, b in pipeline.run([stream]) for t in b.column("t").to_pylist()]


def _feeds(a: list[list[int]], b: list[list[int]]) -> list[Feed]:
    return [Feed("a", _batches(a), "t"), Feed("b", _batches(b), "t")]


def test_output_is_in_order_when_each_feed_is() -> None:
    merge = SortedMerge(("a", "b"))
    pipeline = Pipeline(_feeds([[1, 2], [5, 6], [9]], [[3], [4, 7], [8, 10]]), [merge])
    assert _merged(pipeline) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    # an operator is never advanced past what its slowest input promised
    assert merge.watermarks == sorted(merge.watermarks)


def test_the_lowest_watermark_feed_is_pulled_first() -> None:
    pulled: list[str] = []

    class Spy(SortedMerge):
        def push(self, stream: str, batch: pa.RecordBatch) -> None:
            pulled.append(stream)
            super().push(stream, batch)

    pipeline = Pipeline(_feeds([[1], [2], [30]], [[10], [20], [25]]), [Spy(("a", "b"))])
    _merged(pipeline)
    assert pulled == ["a", "b", "a", "a", "b", "b"]


def test_chained_operators_carry_watermarks() -> None:
    first = SortedMerge(("a", "b"), "mid")
    second = SortedMerge(("mid",), "out")
    pipeline = Pipeline(_feeds([[1, 5], [9]], [[2], [7]]), [second, first])  # any declaration order
    assert _merged(pipeline, "out") == [1, 2, 5, 7, 9]
    assert second.watermarks == sorted(second.watermarks)


def test_run_hands_an_operator_output_on_before_the_next_operator_advances() -> None:
    """The last step releases every operator's held rows: run()'s caller gets (and can drop) each
    operator's output before the next one advances, while step() returns them together."""
    seen: list[str] = []

    class Logged(SortedMerge):
        def advance(self, watermark: int) -> list[Emit]:
            seen.append(f"advance {self.outputs[0]}")
            return super().advance(watermark)

        def finish(self) -> list[Emit]:
            seen.append(f"finish {self.outputs[0]}")
            return super().finish()

    def pipeline() -> Pipeline:
        ops = [Logged(("a",), "first"), Logged(("a",), "second")]
        return Pipeline([Feed("a", _batches([[1, 2], [3]]), "t")], ops, advance_bytes=0)

    for name, batch in pipeline().run(["first", "second"]):
        seen.append(f"got {name} {batch.column('t').to_pylist()}")
    last = ["advance first", "got first [3]", "advance second", "got second [3]"]
    assert seen[-6:] == [*last, "finish first", "finish second"]  # the feed's end released the rest
    seen.clear()
    stepped = pipeline()
    while not stepped.finished:
        seen += [f"got {name} {batch.column('t').to_pylist()}" for name, batch in stepped.step()]
    assert seen[-6:-2] == ["advance first", "advance second", "got first [3]", "got second [3]"]


def test_an_operator_is_advanced_only_when_fed_or_its_watermark_moved() -> None:
    only_a = SortedMerge(("a",), "from_a")
    both = SortedMerge(("a", "b"), "from_both")
    # pulls: a(1) b(1) a(4) b(7) a(9) b(8) b(end) a(end); every pull of b leaves "a" alone
    pipeline = Pipeline(_feeds([[1], [4], [9]], [[1], [7], [8]]), [only_a, both], advance_bytes=0)
    assert [t for _, b in pipeline.run(["from_both"]) for t in b.column("t").to_pylist()] == [
        1,
        1,
        4,
        7,
        8,
        9,
    ]
    assert only_a.watermarks == [1, 4, 9, DONE]
    # a(4) arrives while b holds the mark at 1: same watermark, but fed, so advanced again
    assert both.watermarks == [START, 1, 1, 4, 7, 8, 9, DONE]
    # a batch alone (same watermark) still advances: it may hold rows the operator can emit now
    late = SortedMerge(("a",), "late")
    list(Pipeline([Feed("a", _batches([[5], [3], [5]]), "t")], [late], advance_bytes=0).run())
    assert late.watermarks == [5, 5, 5, DONE]


def test_operators_advance_once_per_advance_bytes_pulled_and_when_a_feed_ends() -> None:
    """Advancing waits for ``advance_bytes`` of pulled batches (or a feed's end); the rows are the same."""
    chunks_a, chunks_b = [[1], [4], [9], [12]], [[2], [7], [8], [15]]
    eager, lazy = SortedMerge(("a", "b")), SortedMerge(("a", "b"))
    one_batch = pa.record_batch({"t": pa.array([0], pa.int64())}).nbytes
    eager_rows = _merged(Pipeline(_feeds(chunks_a, chunks_b), [eager], advance_bytes=0))
    lazy_rows = _merged(Pipeline(_feeds(chunks_a, chunks_b), [lazy], advance_bytes=3 * one_batch))
    assert lazy_rows == eager_rows == [1, 2, 4, 7, 8, 9, 12, 15]
    # pulls: a1 b2 a4 | b7 a9 b8 | b15 a12 a(end) | b(end): three batches, or a feed's end, advance
    assert eager.watermarks == [START, 1, 2, 4, 7, 8, 9, 12, 15, DONE]
    assert lazy.watermarks == [2, 8, 15, DONE]


def test_a_stall_advances_what_was_read_before_it() -> None:
    """A live feed's rows go out when every feed waits, though less than advance_bytes was read."""

    def live() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"t": pa.array([1, 2], pa.int64())})
        yield WAIT

    merge = SortedMerge(("a",))
    pipeline = Pipeline([Feed("a", live(), "t")], [merge])
    pipeline.step()
    assert merge.watermarks == []  # one small batch: not advanced yet
    emitted = pipeline.step()
    assert pipeline.stalled
    assert merge.watermarks == [2]
    assert [t for name, batch in emitted if name == "merged" for t in batch["t"].to_pylist()] == [1]


def test_a_negative_advance_budget_is_refused() -> None:
    with pytest.raises(PipelineError, match="advance_bytes"):
        Pipeline(_feeds([[1]], [[2]]), [SortedMerge(("a", "b"))], advance_bytes=-1)


def test_slack_holds_back_the_watermark() -> None:
    feed = Feed("a", _batches([[100, 90]]), "t", slack_ns=15)
    feed.pull()
    assert feed.watermark == 85
    assert feed.pull() is None
    assert feed.watermark == DONE


def test_a_timeless_feed_takes_its_leaders_watermark() -> None:
    follower = Feed("pmu", _batches([[0], [0]]), "", follows="a")
    merge = SortedMerge(("a", "pmu"))
    pipeline = Pipeline([Feed("a", _batches([[1], [2], [3]]), "t"), follower], [merge])
    assert sorted(_merged(pipeline)) == [0, 0, 1, 2, 3]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=60),
    st.lists(st.integers(0, 1000), min_size=1, max_size=60),
    st.integers(1, 7),
    st.data(),
)
def test_snapshot_and_restore_continue_exactly(
    a: list[int], b: list[int], size: int, data: st.DataObject
) -> None:
    """Stop anywhere, snapshot, rebuild, restore: the rest of the output is what an unbroken run gives,
    also with the operator states packed (here reversed) and unpacked."""
    chunks_a = [sorted(a)[i : i + size] for i in range(0, len(a), size)]
    chunks_b = [sorted(b)[i : i + size] for i in range(0, len(b), size)]
    budget = data.draw(st.integers(0, 3)) * 8 * size  # advance every 0-3 batches of `size` int64s
    whole = _merged(Pipeline(_feeds(chunks_a, chunks_b), [SortedMerge(("a", "b"))], advance_bytes=budget))

    class Positioned:
        def __init__(self, chunks: list[list[int]], start: int = 0) -> None:
            self.chunks, self.index = chunks, start

        def __iter__(self) -> Iterator[pa.RecordBatch]:
            while self.index < len(self.chunks):
                self.index += 1
                yield from _batches([self.chunks[self.index - 1]])

    reads = {"a": Positioned(chunks_a), "b": Positioned(chunks_b)}
    feeds = [Feed(n, iter(r), "t", position=lambda r=r: r.index) for n, r in reads.items()]
    pipeline = Pipeline(feeds, [SortedMerge(("a", "b"))], advance_bytes=budget)
    stops = data.draw(st.integers(0, len(chunks_a) + len(chunks_b)))
    before = []
    for _ in range(stops):
        before += [t for name, batch in pipeline.step() if name == "merged" for t in batch["t"].to_pylist()]
    packing = data.draw(st.booleans())
    pack = (lambda state: state[::-1]) if packing else None
    blob = pipeline.snapshot(pack=pack)
    positions = Pipeline.feed_positions(blob)
    resumed = {n: Positioned(c, positions[n]) for n, c in (("a", chunks_a), ("b", chunks_b))}
    again = Pipeline(
        [Feed(n, iter(r), "t", position=lambda r=r: r.index) for n, r in resumed.items()],
        [SortedMerge(("a", "b"))],
        advance_bytes=budget,
    )
    again.restore(blob, unpack=pack)
    assert again.snapshot(pack=pack) == blob
    assert before + _merged(again) == whole


def test_pack_state_is_deterministic_and_round_trips() -> None:
    state = {"b": np.arange(5, dtype=np.int64), "a": {"y": [1, "x"], "x": np.uint32(7)}, "t": None}
    blob = pack_state(state)
    assert pack_state(unpack_state(blob)) == blob
    back = unpack_state(blob)
    assert back["b"].tolist() == [0, 1, 2, 3, 4]
    assert back["a"] == {"x": 7, "y": [1, "x"]}
    back["b"][0] = 9  # restored arrays are writable copies


def test_pack_state_keeps_arrow_tables() -> None:
    table = pa.table({"s": pa.array(["a", "b"]).dictionary_encode(), "n": [1, 2]})
    assert unpack_state(pack_state({"t": table}))["t"].equals(table)


def test_wiring_errors_name_the_stream() -> None:
    with pytest.raises(PipelineError, match="'nowhere'"):
        Pipeline([Feed("a", _batches([]), "t")], [SortedMerge(("a", "nowhere"))])
    with pytest.raises(PipelineError, match="two producers"):
        Pipeline([Feed("a", _batches([]), "t")], [SortedMerge(("a",)), SortedMerge(("a",))])
    with pytest.raises(PipelineError, match="cycle"):
        Pipeline([], [SortedMerge(("y",), "x"), SortedMerge(("x",), "y")])
    pipeline = Pipeline([Feed("a", _batches([[1]]), "t")], [SortedMerge(("a",))])
    with pytest.raises(PipelineError, match="no stream named"):
        list(pipeline.run(["tasks"]))


def test_per_device_stream_names() -> None:
    assert at("tasks", 3) == "tasks@3"
    assert at("api", None) == "api"
