"""``--format json`` summaries: the bytes Python's json.dump gives msprof's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.sinks import Column, SummaryJsonSink

SCHEMA = pa.schema(
    [
        ("device_id", pa.int32()),
        ("name", pa.dictionary(pa.int32(), pa.string())),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("ratio", pa.float64()),
    ]
)
COLUMNS = [
    Column("device_id", "Device_id"),
    Column("name", "Op Name"),
    Column("start_ns", "Task Start Time(us)", "timestamp_us"),
    Column("dur_ns", "Task Duration(us)", "duration_us"),
    Column("ratio", "Ratio"),
]


def batch(
    devices: list[int | None],
    names: list[str | None],
    starts: list[int | None],
    durs: list[int | None],
    ratios: list[float | None],
) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(devices, pa.int32()),
            pa.array(names, pa.string()).dictionary_encode(),
            pa.array(starts, pa.int64()),
            pa.array(durs, pa.int64()),
            pa.array(ratios, pa.float64()),
        ],
        schema=SCHEMA,
    )


def test_rows_are_objects_keyed_by_header_like_json_dump(tmp_path: Path) -> None:
    """Same bytes as msprof's create_json: json.dump of header->value rows (numbers stay numbers, N/A,
    non-ASCII escaped)."""
    path = tmp_path / "op_summary_20240101120000.json"
    with SummaryJsonSink(path, SCHEMA, columns=COLUMNS) as sink:
        sink.write(
            batch([0, 1], ['Mat"Mul', None], [1_700_000_000_000_001_500, None], [12_340, 12_000], [0.5, None])
        )
        sink.write(batch([None], ["é\n"], [-1], [None], [21.0]))
    keys = ["Device_id", "Op Name", "Task Start Time(us)", "Task Duration(us)", "Ratio"]
    values = [
        (0, 'Mat"Mul', "1700000000000001.500\t", 12.34, 0.5),
        (1, "N/A", "N/A", 12.0, "N/A"),
        ("N/A", "é\n", "-0.001\t", "N/A", 21.0),
    ]
    rows = [dict(zip(keys, row, strict=True)) for row in values]
    assert path.read_text(encoding="utf-8") == json.dumps(rows)
    assert '"\\u00e9\\n"' in path.read_text()  # json.dump's default ensure_ascii
    assert json.loads(path.read_text()) == rows
    assert sink.paths == [path]


def test_an_empty_summary_is_an_empty_array(tmp_path: Path) -> None:
    """No rows: []."""
    path = tmp_path / "s.json"
    SummaryJsonSink(path, SCHEMA).close()
    assert path.read_text() == "[]"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-(2**40), 2**40), st.text(max_size=8)), max_size=200), st.integers(1, 64)
)
def test_streamed_batches_equal_one_json_dumps(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, str]], batch_rows: int
) -> None:
    """Any split into batches, and a tiny buffer, give json.dumps of all rows."""
    schema = pa.schema([("n", pa.int64()), ("s", pa.string())])
    path = tmp_path_factory.mktemp("json") / "t.json"
    with SummaryJsonSink(path, schema, buffer_bytes=1) as sink:
        for start in range(0, len(rows), batch_rows):
            chunk = rows[start : start + batch_rows]
            sink.write(
                pa.record_batch(
                    [pa.array([r[0] for r in chunk]), pa.array([r[1] for r in chunk])], schema=schema
                )
            )
    assert path.read_text(encoding="utf-8") == json.dumps([{"n": n, "s": s} for n, s in rows])


def test_number_cells_are_json_numbers(tmp_path: Path) -> None:
    """A ``number`` column (msprof's int ``0`` among floats, as text) is written unquoted, its absent
    value as its null text (``-1``, a number too), as ``json.dump`` writes msprof's mixed values."""
    schema = pa.schema([("kb", pa.string())])
    path = tmp_path / "npu_module_mem_20240101120000.json"
    with SummaryJsonSink(path, schema, columns=[Column("kb", "KB", "number", null="-1")]) as sink:
        sink.write(pa.record_batch([pa.array(["0", "1.465", None, "1e-05"])], schema=schema))
    assert path.read_text() == json.dumps([{"KB": 0}, {"KB": 1.465}, {"KB": -1}, {"KB": 1e-05}])


def test_a_number_column_must_be_text() -> None:
    with pytest.raises(ValueError, match="number needs a string column"):
        SummaryJsonSink("x.json", pa.schema([("kb", pa.float64())]), columns=[Column("kb", "KB", "number")])


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    """An aborted summary leaves neither the file nor its temporary."""
    path = tmp_path / "s.json"
    with pytest.raises(ValueError, match="x"), SummaryJsonSink(path, SCHEMA) as sink:
        sink.write(batch([0], ["a"], [1], [1], [1.0]))
        msg = "x"
        raise ValueError(msg)
    assert list(tmp_path.iterdir()) == []
