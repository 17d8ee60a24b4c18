"""ApiEvents (host API table) and the host-side join helpers, on hand-built records."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.engine.operators.api import (
    ACL_LEVEL,
    COMMUNICATION_LEVEL,
    MODEL_LEVEL,
    NODE_LEVEL,
    RUNTIME_LEVEL,
    ApiEvents,
    Dictionaries,
    dense_ids,
    innermost,
    latest_before,
)
from profstream.engine.runtime import DONE
from tests.engine.operators.harness import Step, check_snapshot, drive, table
from tests.engine.operators.host_batches import OneOutput, apis, dictionaries, event_records, rows

HCCL_ITEM, OP_ITEM = 77, 88
NAMES = dictionaries(
    {HCCL_ITEM: "hcom_allReduce_", OP_ITEM: "Add_1"},
    [
        (ACL_LEVEL, 0x50001, "aclnnAdd"),
        (NODE_LEVEL, 5, "launch"),
        (COMMUNICATION_LEVEL, 0x10001, "master"),
        (MODEL_LEVEL, 1, "ModelExecute"),
        (RUNTIME_LEVEL, 1, "KernelLaunch"),
    ],
)


def _api(*batches: pa.RecordBatch) -> pa.Table | None:
    """All of ``batches``, one at a time, the watermark passing each."""
    return table(drive(ApiEvents(NAMES), [("api_event", b, DONE) for b in batches]), "api")


def test_api_rows_get_level_names_type_names_and_item_names() -> None:
    """Names as msprof's C++ writes its API table (ApiEventDBDumper::GenerateData): an acl row's
    struct type is its category (the type's high 16 bits: 5 ACL_NN, 3 ACL_RTS, else the number),
    the others' their type name; item is the hash_dic name, "0" for 0, the number when unknown and
    always at the model level."""
    batch = apis(
        [
            (ACL_LEVEL, 0x50001, 1, 100, 200, 0),
            (NODE_LEVEL, 5, 1, 110, 150, OP_ITEM),
            (COMMUNICATION_LEVEL, 0x10001, 1, 120, 140, HCCL_ITEM),
            (RUNTIME_LEVEL, 1, 1, 160, 170, 0),
            (RUNTIME_LEVEL, 999, 1, 180, 190, 0),  # type not in type_info_dic
            (COMMUNICATION_LEVEL, 0x10001, 1, 300, 310, 12345),  # item not in hash_dic
            (ACL_LEVEL, 0x80001, 1, 320, 330, 0),  # category 8: no name
            (MODEL_LEVEL, 1, 1, 340, 350, OP_ITEM),  # model items print as the number
        ]
    )
    assert rows(_api(batch), "level", "name", "struct_type", "start_ns", "end_ns", "item_id", "item") == [
        ("acl", "aclnnAdd", "ACL_NN", 100, 200, 0, "0"),
        ("node", "launch", "launch", 110, 150, OP_ITEM, "Add_1"),
        ("communication", "hcom_allReduce_", "master", 120, 140, HCCL_ITEM, "hcom_allReduce_"),
        ("runtime", "KernelLaunch", "KernelLaunch", 160, 170, 0, "0"),
        ("runtime", "999", "999", 180, 190, 0, "0"),
        ("communication", "12345", "master", 300, 310, 12345, "12345"),
        ("acl", "524289", "8", 320, 330, 0, "0"),
        ("model", "ModelExecute", "ModelExecute", 340, 350, OP_ITEM, str(OP_ITEM)),
    ]


def test_connection_ids_follow_start_then_level_descending() -> None:
    # same start: the higher level first (C++ SortByTimeAndLevel); ids count from 0 across batches
    first = apis([(RUNTIME_LEVEL, 1, 1, 100, 105, 0), (ACL_LEVEL, 0x50001, 1, 100, 200, 0)])
    second = apis([(NODE_LEVEL, 5, 1, 110, 150, OP_ITEM)])
    assert rows(_api(first, second), "level", "connection_id") == [("acl", 0), ("runtime", 1), ("node", 2)]


def test_api_records_with_begin_zero_are_dropped_and_counted() -> None:
    operator = ApiEvents(NAMES)
    batch = apis([(ACL_LEVEL, 0x50001, 1, 0, 50, 0), (ACL_LEVEL, 0x50001, 1, 10, 50, 0)])
    assert rows(table(drive(operator, [("api_event", batch, DONE)]), "api"), "start_ns") == [(10,)]
    assert operator.counts["zero_begin"] == 1


def test_events_pair_per_key_first_opens_second_closes() -> None:
    # key (level, type, thread, request, item); two keys interleave; a third event reopens its key
    events = event_records(
        [
            (MODEL_LEVEL, 1, 1, 1, 100, 7),
            (MODEL_LEVEL, 1, 1, 2, 150, 7),  # other request id: another key
            (MODEL_LEVEL, 1, 1, 1, 400, 7),
            (MODEL_LEVEL, 1, 1, 2, 500, 7),
            (MODEL_LEVEL, 1, 1, 1, 600, 7),  # opens again, never closes
        ]
    )
    operator = ApiEvents(NAMES)
    found = table(drive(operator, [("api_event", events, 0)]), "api")
    assert rows(found, "level", "name", "start_ns", "end_ns", "request_id", "item_id") == [
        ("model", "ModelExecute", 100, 400, 1, 7),
        ("model", "ModelExecute", 150, 500, 2, 7),
    ]
    assert operator.counts["unclosed_events"] == 1


def test_events_pair_across_batches_and_thread_is_part_of_the_key() -> None:
    first = event_records([(MODEL_LEVEL, 1, 1, 1, 100, 7), (MODEL_LEVEL, 1, 2, 1, 110, 7)])
    second = event_records([(MODEL_LEVEL, 1, 2, 1, 300, 7), (MODEL_LEVEL, 1, 1, 1, 320, 7)])
    assert rows(_api(first, second), "thread_id", "start_ns", "end_ns") == [(1, 100, 320), (2, 110, 300)]


def test_an_open_event_holds_back_later_rows_until_it_closes() -> None:
    operator = ApiEvents(NAMES)
    operator.push("api_event", apis([(ACL_LEVEL, 0x50001, 1, 50, 60, 0)]))
    operator.push("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 100, 7)]))
    operator.push("api_event", apis([(NODE_LEVEL, 5, 1, 120, 130, OP_ITEM)]))
    held = operator.advance(1000)
    assert rows(table(held, "api"), "start_ns") == [(50,)]  # the node API starts after the open event
    assert rows(table(held, "api_progress"), "time_ns") == [(100,)]  # complete below the open event
    operator.push("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 900, 7)]))
    released = operator.advance(1000)
    assert rows(table(released, "api"), "level", "start_ns", "connection_id") == [
        ("model", 100, 1),
        ("node", 120, 2),
    ]
    assert rows(table(released, "api_progress"), "time_ns") == [(1000,)]
    assert table(operator.advance(1000), "api_progress") is None  # said once
    assert rows(table(operator.finish(), "api_progress"), "time_ns") == [(DONE,)]


def test_an_event_open_past_the_limit_stops_holding_and_its_pair_comes_late() -> None:
    operator = ApiEvents(NAMES, open_limit_ns=100)
    operator.push("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 100, 7)]))
    operator.push("api_event", apis([(NODE_LEVEL, 5, 1, 120, 130, OP_ITEM)]))
    assert table(operator.advance(150), "api") is None
    assert rows(table(operator.advance(500), "api"), "start_ns") == [(120,)]
    operator.push("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 600, 7)]))
    assert rows(table(operator.advance(700), "api"), "start_ns", "end_ns") == [(100, 600)]
    assert operator.counts["late_pairs"] == 1


def test_snapshot_round_trip_continues_like_an_uninterrupted_run() -> None:
    steps: list[Step] = [
        ("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 100, 7)]), 90),
        ("api_event", apis([(NODE_LEVEL, 5, 1, 120, 130, OP_ITEM), (ACL_LEVEL, 0x50001, 1, 50, 60, 0)]), 140),
        ("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 300, 7), (MODEL_LEVEL, 1, 1, 1, 310, 7)]), 310),
        ("api_event", apis([(RUNTIME_LEVEL, 1, 2, 320, 330, 0)]), 400),
        ("api_event", event_records([(MODEL_LEVEL, 1, 1, 1, 500, 7)]), 500),
    ]
    for cut in range(1, len(steps)):
        for stream in ("api", "api_progress"):
            check_snapshot(lambda stream=stream: OneOutput(ApiEvents(NAMES), stream), steps, cut)


# -- pairing against a plain reference -------------------------------------------------------------

keys = st.tuples(st.integers(0, 1), st.integers(0, 2))  # (thread, request)


@settings(max_examples=60, deadline=None)
@given(st.lists(keys, min_size=1, max_size=30), st.lists(st.integers(1, 29), max_size=4))
def test_event_pairing_matches_a_sequential_reference(
    sequence: list[tuple[int, int]], cuts: list[int]
) -> None:
    times = 100 + 10 * np.arange(len(sequence))
    records = [(MODEL_LEVEL, 1, t, r, int(time), 7) for (t, r), time in zip(sequence, times, strict=True)]
    expected, open_at = [], {}
    for level, kind, thread, request, time, item in records:
        key = (level, kind, thread, request, item)
        if key in open_at:
            expected.append((thread, request, open_at.pop(key), time))
        else:
            open_at[key] = time
    steps: list[Step] = []
    bounds = [0, *sorted({c for c in cuts if c < len(records)}), len(records)]
    for a, b in itertools.pairwise(bounds):
        if b > a:
            steps.append(("api_event", event_records(records[a:b]), 0))
    operator = ApiEvents(NAMES)
    found = table(drive(operator, steps), "api")
    assert sorted(rows(found, "thread_id", "request_id", "start_ns", "end_ns")) == sorted(expected)
    assert operator.counts["unclosed_events"] == len(open_at)


# -- helpers ---------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 20)), max_size=20),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 22)), max_size=20),
)
def test_latest_before_is_the_latest_strictly_earlier_row_of_the_key(
    left: list[tuple[int, int]], right: list[tuple[int, int]]
) -> None:
    found = latest_before(
        np.array([k for k, _ in left], np.int64),
        np.array([t for _, t in left], np.int64),
        np.array([k for k, _ in right], np.int64),
        np.array([t for _, t in right], np.int64),
    )
    for (key, time), index in zip(right, found, strict=True):
        candidates = [i for i, (k, t) in enumerate(left) if k == key and t < time]
        if not candidates:
            assert index == -1
        else:
            best = max(left[i][1] for i in candidates)
            assert left[index] == (key, best)
            assert index == max(i for i in candidates if left[i][1] == best)


@st.composite
def nested(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Properly nested or disjoint intervals (group, start, end), as API calls on threads are."""
    out = []
    for group in range(draw(st.integers(1, 2))):
        stack: list[tuple[int, int]] = []
        time = 0
        for _ in range(draw(st.integers(0, 12))):
            time += draw(st.integers(1, 3))
            if stack and draw(st.booleans()):
                start = stack.pop()[0]
                out.append((group, start, time))
            else:
                stack.append((time, 0))
        while stack:
            time += 1
            out.append((group, stack.pop()[0], time))
    return out


@settings(max_examples=80, deadline=None)
@given(nested(), st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40)), max_size=15))
def test_innermost_finds_the_shortest_interval_with_start_before_and_end_at_or_after(
    intervals: list[tuple[int, int, int]], queries: list[tuple[int, int]]
) -> None:
    found = innermost(
        np.array([g for g, _, _ in intervals], np.int64),
        np.array([s for _, s, _ in intervals], np.int64),
        np.array([e for _, _, e in intervals], np.int64),
        np.array([g for g, _ in queries], np.int64),
        np.array([t for _, t in queries], np.int64),
    )
    for (group, time), index in zip(queries, found, strict=True):
        containing = [i for i, (g, s, e) in enumerate(intervals) if g == group and s < time <= e]
        if not containing:
            assert index == -1
        else:
            assert index in containing
            assert intervals[index][2] - intervals[index][1] == min(
                intervals[i][2] - intervals[i][1] for i in containing
            )


def test_dense_ids_are_equal_exactly_for_equal_rows() -> None:
    ids = dense_ids(np.array([1, 1, 2, 1], np.uint64), np.array([5, 6, 5, 5]))
    assert ids[0] == ids[3]
    assert len({int(ids[0]), int(ids[1]), int(ids[2])}) == 3


def test_dictionaries_fall_back_to_numbers_and_to_the_runtime_type_fallbacks() -> None:
    names = Dictionaries()
    assert names.names(np.array([5, 7], np.uint64)).to_pylist() == ["5", "7"]
    assert names.type_names(
        np.array([RUNTIME_LEVEL, RUNTIME_LEVEL, NODE_LEVEL]), np.array([27, 3, 28])
    ).to_pylist() == [
        "DYNAMIC_ENABLE",
        "3",
        "28",
    ]
    # the last duplicate of a type wins, as in msprof's C++
    twice = dictionaries({}, [(NODE_LEVEL, 5, "old"), (NODE_LEVEL, 5, "launch")])
    assert twice.type_names(np.array([NODE_LEVEL]), np.array([5])).to_pylist() == ["launch"]
