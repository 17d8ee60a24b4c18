"""The pipeline runtime: feeds -> operators -> named output streams, pulled by the consumer.

A :class:`Pipeline` is a DAG. Its leaves are :class:`Feed` s (decoded, time-converted record
batches of one record family); its nodes are :class:`Operator` s, each consuming named streams
(feeds or other operators' outputs) and producing named streams (canonical tables or
intermediate streams). The consumer iterates :meth:`Pipeline.run`, which does the work lazily:

1. pull one batch from the live feed whose watermark is lowest, so no feed races ahead of the
   others and buffers stay bounded by the skew between families, not by the input size;
2. push it to every operator that consumes that feed;
3. once ``advance_bytes`` of feed batches were pulled since the last advance (or a feed ended, or
   every live feed is waiting), advance every operator (in topological order) to the minimum
   watermark of its inputs; an operator emits everything that can no longer change once no input
   will deliver anything older; its outputs carry that watermark on to its consumers. An operator
   that got no batch since its last advance and whose input watermark has not moved is skipped: it
   would emit nothing and promise the same (advancing is a function of its state and the
   watermark). Advancing after every read chunk would pay each operator's fixed cost per advance
   (its passes over held state) once per chunk: on a 1 GB export, a 4 MiB budget instead of none
   took a third less time for about 12 MiB more peak RSS (bench/README.md, "Export", session 10).
   8 MiB, with 1 MiB read windows (``sources.DEFAULT_CHUNK_BYTES``), was the default from session 13;
   16 MiB is since session 30, when dropping LLVM's code pages (``_allocator.LoaderPages``) gave back
   more memory than it costs: the 1 GB torch_npu summary about 0.6 s faster, its main process about
   40 MB larger (bench/README.md, "Session 30").
   Which rows come out does not depend on it; batch boundaries, and the order of rows that leave
   an operator as they settle rather than in time order, do;
4. yield the output batches of the wanted streams.

When every feed is exhausted the operators are finished in topological order.

Watermarks: a feed's watermark is the largest time seen minus its reorder allowance (``slack_ns``);
an exhausted feed's is :data:`DONE`. An operator output's watermark is what
:meth:`Operator.output_watermark` promises after its last advance (by default the input
watermark). A derived stream's rows need not come in start order (pairing emits a task when it
ends, a step arrives when it closes): an operator that holds rows back promises no more than the
earliest start it holds (task pairing, the host join, communication ops, framework ops, memory),
and consumers of derived streams may still allow some lateness. Side
inputs (dictionaries, unaging node info) are not streams: operators get them when they are built.

Live feeds (the daemon's follow mode): a feed whose input is still being written yields
:data:`WAIT` when it has nothing new yet. It keeps its watermark and is not exhausted; the
pipeline then pulls the next-lowest feed that has data (a timeless follower never goes ahead of a
waiting leader) and :attr:`Pipeline.stalled` says when every live feed is waiting, so the caller
can sleep and poll again. A waiting feed may still move its watermark (a stage's feed reports the
watermarks of the stage's pipeline, :class:`StageFeeds`): each step takes every live feed's
watermark as it is.

Stages: a pipeline's first operators can run as a pipeline of their own (an export runs it in
another process), whose output streams and their watermarks (:func:`stage_messages`) the rest of
the pipeline reads as feeds (:class:`StageFeeds`). The messages are the same wherever the stage runs,
so the rest pulls, advances and emits the same batches. Its last operators can too, reading the
streams and watermarks of the rest the same way (an export's writer).

Snapshots: :meth:`Pipeline.snapshot` captures every feed's read position and every operator's
state; a pipeline built the same way and restored from it continues with exactly the output the
original would have produced. Operator state goes through :func:`pack_state` / :func:`unpack_state`
(msgpack of named numpy arrays and plain values), so a snapshot is the same bytes whenever the
state is the same.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from profstream._allocator import trim_heap
from profstream.errors import ProfstreamError

#: the watermark of a stream that will deliver nothing more
DONE = np.iinfo(np.int64).max
#: the watermark before anything was seen
START = np.iinfo(np.int64).min
#: decoded feed bytes pulled between two advances of the operators (module docstring, step 3)
ADVANCE_BYTES = 16 << 20

Emit = tuple[str, pa.RecordBatch]
#: what a live feed's batches yield when nothing new has been written yet (compared by identity)
WAIT = pa.RecordBatch.from_pydict({})


def at(stream: str, device_id: int | None) -> str:
    """The name of a per-device stream: ``tasks@0``; host and framework streams have no suffix."""
    return stream if device_id is None else f"{stream}@{device_id}"


class Operator(abc.ABC):
    """A streaming operator; instances set ``inputs`` and ``outputs`` (stream names, see :func:`at`).

    Lifecycle: any number of :meth:`push` and :meth:`advance` calls, then one :meth:`finish`.
    ``advance(w)`` returns every output row that no input older than ``w`` can still change.
    :meth:`snapshot` / :meth:`restore` round-trip the state byte for byte (see :func:`pack_state`).
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @abc.abstractmethod
    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        """Take one batch of input ``stream``; emit nothing yet."""

    def unknown_input(self, stream: str) -> KeyError:
        """The error :meth:`push` raises for a stream that is not one of :attr:`inputs`."""
        return KeyError(f"{type(self).__name__} does not read {stream!r}")

    @abc.abstractmethod
    def advance(self, watermark: int) -> list[Emit]:
        """Emit what is final once no input will deliver a time below ``watermark``."""

    @abc.abstractmethod
    def finish(self) -> list[Emit]:
        """Every input is exhausted: emit the rest (and report what never matched)."""

    @abc.abstractmethod
    def snapshot(self) -> bytes:
        """The operator state as bytes (use :func:`pack_state`)."""

    @abc.abstractmethod
    def restore(self, state: bytes) -> None:
        """Replace the state by one :meth:`snapshot` returned."""

    def output_watermark(self, watermark: int) -> int:
        """What the outputs promise after ``advance(watermark)``: nothing older will follow.

        The input watermark by default; an operator that holds rows back (open starts, a
        reorder window) returns the time of the oldest row it still holds.
        """
        return watermark


@dataclass
class Feed:
    """One input stream: time-converted batches and how to read its watermark.

    ``batches`` yields batches whose ``time_column`` is int64 ns; ``position`` returns the
    resumable read position (anything msgpack can encode) and ``resume`` is how the pipeline
    was told to start from one (the builder passes it to the reader).
    """

    name: str
    batches: Iterator[pa.RecordBatch]
    time_column: str  # "" for a family with no time of its own: it takes ``follows``'s watermark
    slack_ns: int = 0
    position: Callable[[], Any] = field(default=lambda: None)
    follows: str | None = None
    watermark: int = START
    waiting: bool = False  # the last pull met :data:`WAIT`: more may come later

    def pull(self) -> pa.RecordBatch | None:
        """The next non-empty batch, advancing the watermark; None (and DONE) at the end.

        None with the watermark not DONE (and ``waiting`` set) means a live feed has nothing yet.
        """
        self.waiting = False
        for batch in self.batches:
            if batch is WAIT:
                self.waiting = True
                return None
            if batch.num_rows == 0:
                continue
            if not self.time_column:
                return batch
            column = batch.column(self.time_column)
            high = np.max(column.to_numpy(zero_copy_only=False)) if column.null_count == 0 else None
            if high is not None:
                self.watermark = max(self.watermark, int(high) - self.slack_ns)
            return batch
        self.watermark = DONE
        return None


#: what a stage sends: a batch of one of its streams, or that stream's watermark (DONE: its end)
StageMessage = tuple[str, pa.RecordBatch | int]


def stage_messages(
    pipeline: Pipeline, streams: Sequence[str], marked: Sequence[str] | None = None
) -> Iterator[StageMessage]:
    """Run a stage's ``pipeline`` to the end: the batches of ``streams`` and, after each step, the
    watermark of each of ``marked`` (default: ``streams``) that moved (module docstring, "Stages").
    Each batch is yielded as soon as it is routed, as :meth:`Pipeline.run` does."""
    wanted = set(streams)
    sent = dict.fromkeys(streams if marked is None else marked, int(START))
    while not pipeline.finished:
        for name, batch in pipeline._step():
            if name in wanted:
                yield name, batch
        for name, before in sent.items():
            # an operator's outputs are DONE once its inputs are, yet its finish may still emit:
            # the end of a stream goes out only when the pipeline has finished
            mark = pipeline.mark(name) if pipeline.finished else min(pipeline.mark(name), DONE - 1)
            if mark != before:
                yield name, mark
                sent[name] = mark


class StageFeeds:
    """A stage's ``streams``, from its ``messages``, as feeds of the rest of the pipeline.

    Each feed yields its stream's batches and takes the watermarks the stage gave it; a watermark
    alone makes the feed wait (:data:`WAIT`'s meaning), so the pipeline goes on with its other feeds
    at the new watermark. Reading one feed's next item takes messages until it comes, keeping those
    of the other streams (the stage sends in its own watermark order, so that is a batch or two).

    ``in_order``: the feeds take the messages strictly in the order sent, a feed whose stream's batch
    is not next waiting, so the pipeline sees the batches of all its streams interleaved as the stage
    made them. A last stage needs this: its operators may rely on the order in which the rest's
    operators emit (OperatorDetails takes the ops before the flows that start at them). A watermark
    goes to its feed as soon as any feed reads it: one that waited for another feed's turn would make
    the pipeline stop and advance for nothing.
    """

    def __init__(
        self, messages: Iterable[StageMessage], streams: Sequence[str], *, in_order: bool = False
    ) -> None:
        self._messages = iter(messages)
        self._pending: dict[str, deque[pa.RecordBatch | int]] = {name: deque() for name in streams}
        self._in_order = in_order
        self._next: StageMessage | None = None  # in order: the message no feed has taken yet
        # a time column, so the pipeline does not take the feeds for timeless followers; their
        # watermarks come from the stage, not from the rows
        self.feeds: list[Feed] = [_StageFeed(name, iter(()), "start_ns", source=self) for name in streams]
        self._feed_of = {feed.name: feed for feed in self.feeds}

    def next(self, name: str) -> pa.RecordBatch | int | None:
        """The next batch or watermark of stream ``name``; None when, in order, another stream's
        batch comes first."""
        if not self._in_order:
            return self._next_of(name)
        while True:
            if self._next is None:
                self._next = self._take(name)
            stream, item = self._next
            if isinstance(item, pa.RecordBatch) and stream != name:
                return None
            self._next = None
            if stream == name:
                return item
            feed = self._feed_of[stream]  # another stream's watermark: its feed takes it now
            feed.watermark, feed.waiting = item, item != DONE

    def _next_of(self, name: str) -> pa.RecordBatch | int:
        pending = self._pending[name]
        while not pending:
            stream, item = self._take(name)
            self._pending[stream].append(item)
        return pending.popleft()

    def _take(self, name: str) -> StageMessage:
        message = next(self._messages, None)
        if message is None:
            msg = f"the stage ended without finishing stream {name}"
            raise PipelineError(msg)
        if message[0] not in self._pending:
            msg = f"the stage sent stream {message[0]!r}, expected one of {sorted(self._pending)}"
            raise PipelineError(msg)
        return message


@dataclass
class _StageFeed(Feed):
    source: StageFeeds | None = None

    def pull(self) -> pa.RecordBatch | None:
        assert self.source is not None
        item = self.source.next(self.name)
        if item is None:  # another stream's message comes first
            self.waiting = True
            return None
        if isinstance(item, pa.RecordBatch):
            self.waiting = False
            return item
        self.watermark = item
        self.waiting = item != DONE
        return None


class PipelineError(ProfstreamError):
    """A pipeline wired wrongly: an input nobody produces, two producers of one stream, a cycle."""


class Pipeline:
    """A DAG of feeds and operators; see the module docstring."""

    def __init__(
        self, feeds: Sequence[Feed], operators: Sequence[Operator], *, advance_bytes: int = ADVANCE_BYTES
    ) -> None:
        if advance_bytes < 0:
            msg = f"advance_bytes: expected a byte count >= 0, got {advance_bytes}"
            raise PipelineError(msg)
        self.advance_bytes = advance_bytes
        self._pulled_bytes = 0  # feed batch bytes pulled since the last advance
        self.feeds = {f.name: f for f in feeds}
        if len(self.feeds) != len(feeds):
            msg = "two feeds with one name"
            raise PipelineError(msg)
        self.operators = _topological(operators, set(self.feeds))
        self._consumers: dict[str, list[Operator]] = {}
        for op in self.operators:
            for name in op.inputs:
                self._consumers.setdefault(name, []).append(op)
        self._marks: dict[str, int] = {name: START for name in self.feeds}
        for op in self.operators:
            for name in op.outputs:
                self._marks[name] = START
        self._finished = False
        self._stalled = False
        self._advanced: dict[int, int] = {}  # id(operator) -> the watermark of its last advance
        self._fed: set[int] = set()  # id(operator) of those pushed a batch since their last advance

    @property
    def stalled(self) -> bool:
        """The last :meth:`step` found every live feed waiting (live feeds only; see the docstring)."""
        return self._stalled

    @property
    def finished(self) -> bool:
        """Every feed is exhausted and every operator finished."""
        return self._finished

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(self._marks)

    def mark(self, stream: str) -> int:
        """The watermark of ``stream`` now: nothing older will come out of it."""
        return int(self._marks[stream])

    def run(self, wanted: Iterable[str] | None = None) -> Iterator[Emit]:
        """Drive the pipeline to the end, yielding batches of the ``wanted`` streams (all if None)."""
        keep = set(self._marks) if wanted is None else set(wanted)
        unknown = keep - set(self._marks)
        if unknown:
            msg = f"no stream named {sorted(unknown)}; this pipeline has {sorted(self._marks)}"
            raise PipelineError(msg)
        while not self._finished:
            for name, batch in self._step():
                if name in keep:
                    yield name, batch

    def step(self) -> list[Emit]:
        """Pull one feed batch and advance; at the end, finish the operators. Returns every emit."""
        return list(self._step())

    def _step(self) -> Iterator[Emit]:
        """:meth:`step`'s emits, each as soon as it is routed: a caller of :meth:`run` writes (and
        drops) one operator's output before the next operator advances, so the last step, which
        releases every operator's held rows, does not hold all of them at once."""
        trim_heap()
        live = [f for f in self.feeds.values() if f.watermark != DONE]
        if live:
            feed, batch = self._pull(live)
            for moved in live:  # a waiting feed may have moved its watermark (module docstring)
                self._marks[moved.name] = moved.watermark
            if feed is None:
                self._stalled = True
                yield from self._advance()  # what was read before the wait goes out now
                return
            self._stalled = False
            if batch is not None and not feed.time_column:
                leader = self.feeds.get(feed.follows or "")
                feed.watermark = DONE if leader is None else leader.watermark
            self._marks[feed.name] = feed.watermark
            if batch is not None:
                self._push(feed.name, batch)
                self._pulled_bytes += batch.nbytes
                yield feed.name, batch
            if self._pulled_bytes >= self.advance_bytes or feed.watermark == DONE:
                yield from self._advance()
            return
        for op in self.operators:
            yield from self._route(op.finish())
            for name in op.outputs:
                self._marks[name] = DONE
        self._finished = True
        trim_heap(force=True)  # the operators' state is gone

    def _advance(self) -> Iterator[Emit]:
        """Advance every operator whose input moved to the minimum watermark of its inputs."""
        self._pulled_bytes = 0
        for op in self.operators:
            mark = min((self._marks[name] for name in op.inputs), default=DONE)
            if self._advanced.get(id(op)) == mark and id(op) not in self._fed:
                continue
            self._advanced[id(op)] = mark
            self._fed.discard(id(op))
            yield from self._route(op.advance(mark))
            promised = op.output_watermark(mark)
            for name in op.outputs:
                self._marks[name] = promised

    def _pull(self, live: list[Feed]) -> tuple[Feed | None, pa.RecordBatch | None]:
        """Pull the lowest feed that has a batch or ends; (None, None) when every one is waiting."""
        # a timeless follower goes after its leader at equal marks, so it never reads ahead
        for feed in sorted(live, key=lambda f: (f.watermark, not f.time_column)):
            leader = self.feeds.get(feed.follows or "")
            if leader is not None and leader.waiting:
                continue
            batch = feed.pull()
            if batch is not None or not feed.waiting:
                return feed, batch
        return None, None

    def _route(self, emits: list[Emit]) -> Iterator[Emit]:
        for name, batch in emits:
            if batch.num_rows == 0:
                continue
            self._push(name, batch)
            yield name, batch

    def _push(self, name: str, batch: pa.RecordBatch) -> None:
        for consumer in self._consumers.get(name, ()):
            consumer.push(name, batch)
            self._fed.add(id(consumer))

    def snapshot(self, pack: Callable[[bytes], bytes] | None = None) -> bytes:
        """Feed positions, watermarks and operator states, as one msgpack document; ``pack`` (a
        compressor) is applied to each operator's state as it is taken, so that no more than one of
        them is ever held unpacked."""
        return msgspec.msgpack.encode(
            {
                "feeds": {name: [f.position(), f.watermark] for name, f in self.feeds.items()},
                "marks": self._marks,
                "operators": [
                    op.snapshot() if pack is None else pack(op.snapshot()) for op in self.operators
                ],
                "pulled_bytes": self._pulled_bytes,
            }
        )

    def restore(self, blob: bytes, unpack: Callable[[bytes], bytes] | None = None) -> None:
        """Restore operator states and watermarks (each state through ``unpack``, the inverse of the
        snapshot's ``pack``); the builder already resumed the feeds."""
        doc = msgspec.msgpack.decode(blob)
        if len(doc["operators"]) != len(self.operators):
            msg = "snapshot from a pipeline with other operators"
            raise PipelineError(msg)
        for op, state in zip(self.operators, doc["operators"], strict=True):
            op.restore(state if unpack is None else unpack(state))
        self._marks.update(doc["marks"])
        self._pulled_bytes = int(doc.get("pulled_bytes", 0))  # older checkpoints lack it
        self._advanced.clear()
        for name, (_, mark) in doc["feeds"].items():
            self.feeds[name].watermark = mark

    @staticmethod
    def feed_positions(blob: bytes) -> dict[str, Any]:
        """The read position of each feed in a snapshot, for building resumed feeds (the daemon asks
        at every commit: the operator states, most of the bytes, are skipped, not decoded)."""
        doc = msgspec.msgpack.decode(blob, type=_SnapshotFeeds)
        return {name: position for name, (position, _) in doc.feeds.items()}


class _SnapshotFeeds(msgspec.Struct):
    """The feeds of a :meth:`Pipeline.snapshot` document, the rest of it left undecoded."""

    feeds: dict[str, tuple[Any, Any]]


def _topological(operators: Sequence[Operator], feeds: set[str]) -> list[Operator]:
    """Operators ordered so each comes after the producers of its inputs."""
    producer: dict[str, Operator] = {}
    for op in operators:
        for name in op.outputs:
            if name in producer or name in feeds:
                msg = f"stream {name!r} has two producers"
                raise PipelineError(msg)
            producer[name] = op
    ordered: list[Operator] = []
    placed: set[int] = set()
    visiting: set[int] = set()

    def visit(op: Operator) -> None:
        if id(op) in placed:
            return
        if id(op) in visiting:
            msg = f"cycle through {type(op).__name__}"
            raise PipelineError(msg)
        visiting.add(id(op))
        for name in op.inputs:
            if name in feeds:
                continue
            if name not in producer:
                msg = f"{type(op).__name__} reads {name!r}, which no feed or operator produces"
                raise PipelineError(msg)
            visit(producer[name])
        visiting.discard(id(op))
        placed.add(id(op))
        ordered.append(op)

    for op in operators:
        visit(op)
    return ordered


# -- operator state ------------------------------------------------------------------------------


class _ArrayState(msgspec.Struct, array_like=True):
    dtype: str
    shape: list[int]
    data: bytes


def pack_state(state: Mapping[str, Any]) -> bytes:
    """Encode named numpy arrays, Arrow batches and plain values (ints, strings, lists, dicts).

    Keys are sorted and arrays are stored as (dtype, shape, C-order bytes), so equal states give
    equal bytes.
    """
    return msgspec.msgpack.encode({key: _pack(value) for key, value in sorted(state.items())})


def unpack_state(blob: bytes) -> dict[str, Any]:
    """The inverse of :func:`pack_state`; arrays come back writable."""
    return {key: _unpack(value) for key, value in msgspec.msgpack.decode(blob).items()}


def write_ipc(sink: pa.NativeFile, value: pa.RecordBatch | pa.Table) -> None:
    """``value`` into ``sink`` as one Arrow IPC stream: its schema and dictionaries travel with it."""
    with pa.ipc.new_stream(sink, value.schema) as writer:
        writer.write(value)


def ipc_size(value: pa.RecordBatch | pa.Table) -> int:
    """The bytes :func:`write_ipc` writes for ``value`` (a dry run, nothing allocated)."""
    measured = pa.MockOutputStream()
    write_ipc(measured, value)
    return int(measured.size())


def ipc_stream(value: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """``value`` as one Arrow IPC stream (:func:`write_ipc`) in a buffer.

    The stream is measured first and written into a buffer of its exact size: a growing
    ``BufferOutputStream`` reallocates by doubling, so a 32 MB batch passed through 1, 2, ... 32 MB
    copies and briefly held up to twice its size (half the time of a large batch; 6 µs more for a
    small one, a dry run)."""
    buffer = pa.allocate_buffer(ipc_size(value))
    write_ipc(pa.FixedSizeBufferWriter(buffer), value)
    return buffer


def _pack(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return {"__ndarray__": _ArrayState(array.dtype.str, list(array.shape), array.tobytes())}
    if isinstance(value, pa.RecordBatch | pa.Table):
        return {"__arrow__": ipc_stream(value).to_pybytes()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _pack(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_pack(v) for v in value]
    return value


def _unpack(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            dtype, shape, data = value["__ndarray__"]
            return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()
        if "__arrow__" in value:
            return pa.ipc.open_stream(value["__arrow__"]).read_all()
        return {k: _unpack(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unpack(v) for v in value]
    return value
