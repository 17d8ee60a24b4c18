"""Small shared helpers for operator tests: feeds of a simulated device, driving an operator by hand,
and the snapshot round-trip check every operator must pass (brief: run half, snapshot, restore into a fresh
operator, feed the rest, compare with an uninterrupted run)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from profstream.engine.discovery import DataDir, Profile
from profstream.engine.feeds import TIME_SPECS, FeedSet
from profstream.engine.runtime import Emit, Feed, Operator, at

#: one hand-fed step: push ``batch`` on ``stream`` (None: push nothing), then advance to ``watermark``
Step = tuple[str, pa.RecordBatch | None, int]


def device_feeds(
    collection: Profile,
    data_dir: DataDir,
    families: Iterable[str],
    *,
    leader: str | None = None,
    chunk_bytes: int | None = None,
    positions: dict[str, Any] | None = None,
) -> list[Feed]:
    """Feeds of ``families`` of one device dir, named ``at(family, device)``; families without a time of
    their own follow ``leader``; ``positions`` resumes them (``Pipeline.feed_positions``)."""
    options: dict[str, Any] = {"positions": positions}
    if chunk_bytes is not None:
        options["chunk_bytes"] = chunk_bytes
    feed_set = FeedSet(collection, **options)
    device = data_dir.device_id
    feeds = []
    # the leader first: on equal watermarks the pipeline pulls the first feed, so a follower (whose watermark
    # is its leader's) does not race ahead of it
    for family in sorted(families, key=lambda f: (f != leader, f)):
        spec = TIME_SPECS.get(family)
        timeless = spec is not None and spec.order is None
        follows = at(leader, device) if timeless and leader else None
        feeds.append(feed_set.feed(data_dir, family, name=at(family, device), follows=follows))
    return feeds


def drive(op: Operator, steps: Sequence[Step], *, finish: bool = True) -> list[Emit]:
    """Push and advance ``op`` through ``steps`` (then finish it); every emit in order."""
    out: list[Emit] = []
    for stream, batch, watermark in steps:
        if batch is not None:
            op.push(stream, batch)
        out += op.advance(watermark)
    if finish:
        out += op.finish()
    return out


def table(emits: Iterable[Emit], stream: str | None = None) -> pa.Table | None:
    """The emitted batches (of ``stream``) as one table with dictionary columns decoded to strings."""
    batches = [b for name, b in emits if stream is None or name == stream]
    if not batches:
        return None
    result = pa.Table.from_batches(batches)
    for i, field in enumerate(result.schema):
        if pa.types.is_dictionary(field.type):
            result = result.set_column(i, field.name, result.column(i).cast(field.type.value_type))
    return result


def check_snapshot(
    make: Callable[[], Operator], steps: Sequence[Step], cut: int, streams: Sequence[str | None] = (None,)
) -> None:
    """Uninterrupted run == run ``steps[:cut]``, snapshot, restore into ``make()``, run the rest (output
    compared per stream of ``streams``; None: all output as one table); and the restored operator's
    snapshot is byte-identical to the one it was restored from."""
    whole = drive(make(), steps)
    first = make()
    before = drive(first, steps[:cut], finish=False)
    blob = first.snapshot()
    second = make()
    second.restore(blob)
    assert second.snapshot() == blob
    after = drive(second, steps[cut:])
    for stream in streams:
        expected, got = table(whole, stream), table(before + after, stream)
        assert (expected is None) == (got is None)
        if expected is not None and got is not None:
            assert got.equals(expected)
