"""The Chrome trace writer: exact bytes, valid JSON in every file, rolling, the budget and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.errors import ConfigError, SinkError
from profstream.sinks import (
    ChromeTraceWriter,
    CompleteEvents,
    CounterEvents,
    FlowEvents,
    MetadataEvents,
    msprof_slice_names,
)

NAMING = msprof_slice_names("msprof", "20240101120000", ".json")


def complete(n: int, start: int = 0) -> CompleteEvents:
    """``n`` X events on two threads, 1 µs apart, names from a small dictionary."""
    rows = np.arange(start, start + n)
    names = pa.DictionaryArray.from_arrays(
        pa.array(rows % 3, pa.int32()), pa.array(["MatMul", "Add", "Cast"])
    )
    return CompleteEvents(
        name=names,
        pid=100,
        tid=rows % 2,
        ts_ns=rows * 1000 + 1_700_000_000_000_000_000,
        dur_ns=np.full(n, 500),
        args={"Task Id": rows},
    )


def thread_names(tids: list[int]) -> MetadataEvents:
    return MetadataEvents(
        "thread_name", pid=100, tid=np.array(tids), value=pa.array([f"Stream {t}" for t in tids])
    )


def files(directory: Path) -> list[Path]:
    """The final output files, in slice order (hidden temporary files must not be among them)."""
    names = sorted(p.name for p in directory.iterdir())
    assert not [n for n in names if n.startswith(".")], names
    return [directory / n for n in sorted(names, key=lambda n: (len(n), n))]


def test_exact_bytes_of_every_event_kind(tmp_path: Path) -> None:
    """Key order, ts strings, dur numbers, optional cat, flows' bp, and the file framing, byte for byte."""
    with ChromeTraceWriter(tmp_path, NAMING) as writer:
        writer.write_events(MetadataEvents("process_name", pid=2080782, tid=0, value="Ascend Hardware"))
        writer.write_events(MetadataEvents("process_sort_index", pid=2080782, tid=0, value=14))
        writer.write_events(
            CompleteEvents(
                name=pa.array(['Mat"Mul', "Add"]).dictionary_encode(),
                pid=2080782,
                tid=np.array([2, 3]),
                ts_ns=np.array([1_700_000_000_000_001_500, -1]),
                dur_ns=np.array([12_340, 12_000]),
                cat=pa.array(["op", None]),
                args={"Task Id": np.array([7, 8]), "Task Type": pa.array(["AI_CORE", None])},
            )
        )
        writer.write_events(
            CounterEvents(name="AI Core Freq", pid=5, tid=0, ts_ns=2000, series={"MHz": 1800})
        )
        writer.write_events(
            FlowEvents(
                "s",
                name="HostToDevice4294967296",
                pid=9,
                tid=1,
                ts_ns=1000,
                cat="HostToDevice",
                id="4294967296",
            )
        )
        writer.write_events(
            FlowEvents(
                "f",
                name="HostToDevice4294967296",
                pid=2080782,
                tid=2,
                ts_ns=1500,
                cat="HostToDevice",
                id="4294967296",
            )
        )
    expected = (
        b"[\n"
        b'{"name":"process_name","pid":2080782,"tid":0,"ph":"M","args":{"name":"Ascend Hardware"}},\n'
        b'{"name":"process_sort_index","pid":2080782,"tid":0,"ph":"M","args":{"sort_index":14}},\n'
        b'{"name":"Mat\\"Mul","pid":2080782,"tid":2,"ts":"1700000000000001.500","dur":12.34,"ph":"X",'
        b'"cat":"op","args":{"Task Id":7,"Task Type":"AI_CORE"}},\n'
        b'{"name":"Add","pid":2080782,"tid":3,"ts":"-0.001","dur":12.0,"ph":"X","args":{"Task Id":8}},\n'
        b'{"name":"AI Core Freq","pid":5,"tid":0,"ts":"2.000","ph":"C","args":{"MHz":1800}},\n'
        b'{"name":"HostToDevice4294967296","pid":9,"tid":1,"ph":"s","cat":"HostToDevice","id":"4294967296",'
        b'"ts":"1.000"},\n'
        b'{"name":"HostToDevice4294967296","pid":2080782,"tid":2,"ph":"f","cat":"HostToDevice",'
        b'"id":"4294967296","ts":"1.500","bp":"e"}\n'
        b"]\n"
    )
    [path] = files(tmp_path)
    assert path.name == "msprof_20240101120000.json"
    assert path.read_bytes() == expected
    assert writer.paths == [path]
    assert writer.events_written == 7
    assert writer.bytes_written == len(expected)


def test_json_loads_gives_back_the_events(tmp_path: Path) -> None:
    """A file parses to exactly the events written, in order, with args from columns."""
    with ChromeTraceWriter(tmp_path, NAMING) as writer:
        writer.write_events(thread_names([0, 1]))
        writer.write_events(complete(4))
        writer.write_events(
            FlowEvents(
                "t",
                name="Data_aug Bound 1",
                pid=3,
                tid=70002,
                ts_ns=np.array([5000, 6000]),
                cat="Data_aug Bound 3_70002",
                id=np.array([1, 2]),
                args={"Iteration ID": np.array([1, 2])},
            )
        )
    events = json.loads(files(tmp_path)[0].read_text())
    assert events[:2] == [
        {"name": "thread_name", "pid": 100, "tid": t, "ph": "M", "args": {"name": f"Stream {t}"}}
        for t in (0, 1)
    ]
    assert events[2:6] == [
        {
            "name": ["MatMul", "Add", "Cast"][i % 3],
            "pid": 100,
            "tid": i % 2,
            "ts": f"1700000000000{i:03d}.000",
            "dur": 0.5,
            "ph": "X",
            "args": {"Task Id": i},
        }
        for i in range(4)
    ]
    assert events[6:] == [
        {
            "name": "Data_aug Bound 1",
            "pid": 3,
            "tid": 70002,
            "ph": "t",
            "cat": "Data_aug Bound 3_70002",
            "id": k,
            "ts": f"{k + 4}.000",
            "args": {"Iteration ID": k},
        }
        for k in (1, 2)
    ]


def test_an_empty_timeline_is_an_empty_array(tmp_path: Path) -> None:
    """No events: one valid file holding []."""
    ChromeTraceWriter(tmp_path, NAMING).close()
    assert json.loads(files(tmp_path)[0].read_text()) == []


@pytest.mark.parametrize(("max_bytes", "max_events"), [(2000, None), (None, 7), (1500, 9)])
def test_rolling_repeats_the_metadata_at_every_head(
    tmp_path: Path, max_bytes: int | None, max_events: int | None
) -> None:
    """Every file is valid JSON within its limits and opens with all M events so far; data stays in order."""
    with ChromeTraceWriter(tmp_path, NAMING, max_file_bytes=max_bytes, max_file_events=max_events) as writer:
        writer.write_events(thread_names([0, 1]))
        writer.write_events(complete(20))
        writer.write_events(thread_names([2]))  # a thread that appears mid-stream
        writer.write_events(complete(25, start=20))
    paths = files(tmp_path)
    assert len(paths) > 2
    assert [p.name for p in paths] == [f"msprof_slice_{i}_20240101120000.json" for i in range(len(paths))]
    seen_meta: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    for path in paths:
        events = json.loads(path.read_text())
        meta = [e for e in events if e["ph"] == "M"]
        head = events[: len(seen_meta)]
        assert head == seen_meta  # every M event so far opens the file
        seen_meta += [m for m in meta if m not in seen_meta]
        data += [e for e in events if e["ph"] != "M"]
        if max_bytes is not None:
            assert path.stat().st_size <= max_bytes
        if max_events is not None:
            assert len(events) <= max_events
    assert [e["args"]["Task Id"] for e in data] == list(range(45))
    assert [m["tid"] for m in seen_meta] == [0, 1, 2]
    assert writer.events_written == 48
    assert sum(p.stat().st_size for p in paths) == writer.bytes_written


def test_an_event_larger_than_the_file_limit_gets_a_file_of_its_own(tmp_path: Path) -> None:
    """A file always takes one event after its head, so an oversize event never stalls the writer."""
    big = CompleteEvents(
        name=pa.array(["x" * 500, "y", "z" * 500]), pid=1, tid=1, ts_ns=np.array([1, 2, 3]), dur_ns=0
    )
    with ChromeTraceWriter(tmp_path, NAMING, max_file_bytes=200) as writer:
        writer.write_events(big)
    names = [[e["name"][0] for e in json.loads(p.read_text())] for p in files(tmp_path)]
    assert names == [["x"], ["y"], ["z"]]


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(6, 3000), max_bytes=st.one_of(st.none(), st.integers(400, 1200)))
def test_the_budget_is_never_exceeded_and_the_drop_report_is_exact(
    tmp_path_factory: pytest.TempPathFactory, budget: int, max_bytes: int | None
) -> None:
    """Total bytes <= budget; written + dropped = all events; drops are the tail, with its time range."""
    directory = tmp_path_factory.mktemp("trace")
    with ChromeTraceWriter(directory, NAMING, max_file_bytes=max_bytes, budget_bytes=budget) as writer:
        writer.write_events(thread_names([0, 1]))
        writer.write_events(complete(15))
        writer.write_events(
            CounterEvents(name="c", pid=1, tid=0, ts_ns=np.arange(5) * 100, series={"v": np.arange(5)})
        )
    paths = files(directory)
    assert sum(p.stat().st_size for p in paths) <= budget
    written = [e for p in paths for e in json.loads(p.read_text())]
    meta_rows = sum(1 for e in written if e["ph"] == "M")
    x_written = [e for e in written if e["ph"] == "X"]
    c_written = [e for e in written if e["ph"] == "C"]
    report = writer.drop_report
    assert report.budget_bytes == budget
    dropped = report.dropped
    # M events: 2 written at most once per file head (repeats do not count as written events)
    m_unique = len({e["tid"] for e in written if e["ph"] == "M"})
    assert m_unique + (dropped["M"].count if "M" in dropped else 0) == 2
    assert len(x_written) + (dropped["X"].count if "X" in dropped else 0) == 15
    assert len(c_written) + (dropped["C"].count if "C" in dropped else 0) == 5
    assert report.count == 22 - writer.events_written
    assert meta_rows >= m_unique
    if "X" in dropped:  # the dropped X events are the tail: [first dropped start, last end]
        first = len(x_written)
        assert dropped["X"].first_ns == first * 1000 + 1_700_000_000_000_000_000
        assert dropped["X"].last_ns == 14 * 1000 + 500 + 1_700_000_000_000_000_000
        assert "C" in dropped  # nothing is written once the budget is spent
    if "C" in dropped:
        assert dropped["C"].first_ns == len(c_written) * 100
        assert dropped["C"].last_ns == 400
    if "M" in dropped:
        assert dropped["M"].first_ns is None


def test_a_budget_hit_drops_every_later_event_and_logs_it(tmp_path: Path) -> None:
    """Once the budget stops the timeline, later batches are dropped whole, and close logs the count."""
    from structlog.testing import capture_logs

    with capture_logs() as logs, ChromeTraceWriter(tmp_path, NAMING, budget_bytes=600) as writer:
        writer.write_events(complete(10))
        assert writer.exhausted
        writer.write_events(complete(3, start=100))
    written = json.loads(files(tmp_path)[0].read_text())
    dropped = writer.drop_report.dropped["X"]
    assert dropped.count == 13 - len(written)
    assert dropped.first_ns == len(written) * 1000 + 1_700_000_000_000_000_000
    assert dropped.last_ns == 102 * 1000 + 500 + 1_700_000_000_000_000_000
    [event] = [e for e in logs if e["event"] == "timeline_events_dropped"]
    assert event["count"] == dropped.count
    assert event["dropped"]["X"]["count"] == dropped.count


def test_budget_below_one_file_is_a_config_error(tmp_path: Path) -> None:
    """A budget or file limit that cannot hold an empty file names the setting."""
    with pytest.raises(ConfigError, match="budget_bytes"):
        ChromeTraceWriter(tmp_path, NAMING, budget_bytes=5)
    with pytest.raises(ConfigError, match="max_file_events"):
        ChromeTraceWriter(tmp_path, NAMING, max_file_events=0)


def test_abort_and_exceptions_leave_no_file(tmp_path: Path) -> None:
    """Nothing appears under a final name, and no temporary file remains, after abort or an exception."""
    writer = ChromeTraceWriter(tmp_path, NAMING, max_file_events=3)
    writer.write_events(complete(10))
    assert len(list(tmp_path.iterdir())) == 4  # the temporary slices exist while writing
    assert all(p.name.startswith(".") and p.name.endswith(".part") for p in tmp_path.iterdir())
    writer.abort()
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="boom"), ChromeTraceWriter(tmp_path, NAMING) as failing:
        failing.write_events(complete(2))
        msg = "boom"
        raise RuntimeError(msg)
    assert list(tmp_path.iterdir()) == []
    assert failing.closed


def test_close_is_idempotent_and_writing_after_close_fails(tmp_path: Path) -> None:
    """A second close does nothing; a write after close is a SinkError."""
    writer = ChromeTraceWriter(tmp_path, NAMING)
    writer.close()
    writer.close()
    with pytest.raises(SinkError, match="already closed"):
        writer.write_events(complete(1))


def test_bad_events_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A missing required value or a mismatched length raises ValueError and leaves the writer usable."""
    with ChromeTraceWriter(tmp_path, NAMING) as writer:
        with pytest.raises(ValueError, match="'ts'"):
            writer.write_events(CompleteEvents(name="a", pid=1, tid=1, ts_ns=pa.array([1, None]), dur_ns=0))
        with pytest.raises(ValueError, match="'tid'"):
            writer.write_events(
                CompleteEvents(name="a", pid=1, tid=np.arange(3), ts_ns=np.arange(2), dur_ns=0)
            )
        writer.write_events(complete(1))
    assert len(json.loads(files(tmp_path)[0].read_text())) == 1


def test_an_unwritable_directory_is_a_sink_error_naming_the_path(tmp_path: Path) -> None:
    """A directory that cannot be created raises SinkError with the path in the message."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SinkError, match=str(blocker)):
        ChromeTraceWriter(blocker / "out", NAMING)


def test_buffer_flushes_and_growth_keep_the_bytes(tmp_path: Path) -> None:
    """A tiny buffer (many flushes) and a huge event (buffer growth) give the same file as a large buffer."""
    big = CompleteEvents(name="n" * 100_000, pid=1, tid=1, ts_ns=0, dur_ns=1)
    outputs = []
    for buffer_bytes in (1, 1 << 24):
        directory = tmp_path / str(buffer_bytes)
        with ChromeTraceWriter(directory, NAMING, buffer_bytes=buffer_bytes) as writer:
            writer.write_events(complete(3000))
            writer.write_events(big)
            writer.write_events(complete(10))
        outputs.append(files(directory)[0].read_bytes())
    assert outputs[0] == outputs[1]
    assert len(json.loads(outputs[0])) == 3011


def test_a_failing_write_is_a_sink_error_and_aborts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OS error while writing (disk full) raises SinkError naming the output; nothing is left behind."""
    writer = ChromeTraceWriter(tmp_path, NAMING, buffer_bytes=1)
    staged = writer._output.files[0]

    def full(data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staged._file, "write", full)
    with pytest.raises(SinkError, match=r"msprof_20240101120000\.json.*No space left on device"):
        writer.write_events(complete(5000))
    assert writer.closed
    assert list(tmp_path.iterdir()) == []
