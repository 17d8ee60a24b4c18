"""Summary CSV: msprof's cell text, quoting conventions, slicing and file naming."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profstream.errors import SchemaMismatchError, SinkError
from profstream.sinks import Column, CsvSink, msprof_slice_names
from profstream.sinks._base import StagedFile, remove_temporaries
from profstream.sinks._format import FORMAT_ROWS

DICT = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema(
    [
        ("device_id", pa.int32()),
        ("op_name", DICT),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("ratio", pa.float64()),
        ("input_shapes", DICT),
    ]
)
COLUMNS = [
    Column("device_id", "Device_id"),
    Column("op_name", "Op Name"),
    Column("start_ns", "Task Start Time(us)", "timestamp_us"),
    Column("dur_ns", "Task Duration(us)", "duration_us"),
    Column("ratio", "aic_mac_ratio"),
    Column("input_shapes", "Input Shapes"),
]
NAMING = msprof_slice_names("op_summary", "20240101120000", ".csv")


def batch(rows: list[tuple[object, ...]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in SCHEMA]
    arrays = [
        pa.array(list(values)).dictionary_encode()
        if field.type == DICT
        else pa.array(list(values), field.type)
        for values, field in zip(columns, SCHEMA, strict=True)
    ]
    return pa.record_batch(arrays, schema=SCHEMA)


ROWS = [
    (0, "MatMul", 1_700_000_000_000_001_500, 12_340, 0.5, '"81920,4096;8192,512"'),
    (0, "Add,1", -1, 12_000, 21.0, None),
    (1, None, None, 5, None, "4096"),
]


def test_exact_bytes_with_msprof_cells_and_minimal_quoting(tmp_path: Path) -> None:
    """Header, TAB after timestamps, exact µs, N/A, Python-like floats, RFC 4180 minimal quoting."""
    with CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS) as sink:
        sink.write(batch(ROWS))
    [path] = sink.paths
    assert path.name == "op_summary_20240101120000.csv"
    assert path.read_bytes() == (
        b"Device_id,Op Name,Task Start Time(us),Task Duration(us),aic_mac_ratio,Input Shapes\n"
        b'0,MatMul,1700000000000001.500\t,12.34,0.5,"""81920,4096;8192,512"""\n'
        b'0,"Add,1",-0.001\t,12.0,21.0,N/A\n'
        b"1,N/A,N/A,0.005,N/A,4096\n"
    )


def test_no_quoting_is_msprof_cpp_and_tab_quoting_is_torch_npu(tmp_path: Path) -> None:
    """quote_chars=None writes cells as they are; adding TAB quotes every timestamp cell."""
    with CsvSink(tmp_path / "cpp", SCHEMA, NAMING, columns=COLUMNS, quote_chars=None) as plain:
        plain.write(batch(ROWS[:2]))
    assert plain.paths[0].read_bytes().splitlines()[1:] == [
        b'0,MatMul,1700000000000001.500\t,12.34,0.5,"81920,4096;8192,512"',
        b"0,Add,1,-0.001\t,12.0,21.0,N/A",
    ]
    with CsvSink(tmp_path / "pt", SCHEMA, NAMING, columns=COLUMNS, quote_chars=',"\r\n\t') as tabbed:
        tabbed.write(batch(ROWS[:1]))
    assert tabbed.paths[0].read_bytes().splitlines()[1] == (
        b'0,MatMul,"1700000000000001.500\t",12.34,0.5,"""81920,4096;8192,512"""'
    )


def test_without_columns_every_schema_column_is_written_raw(tmp_path: Path) -> None:
    """No column list: schema names as headers, values as they are."""
    with CsvSink(tmp_path, SCHEMA, NAMING) as sink:
        sink.write(batch(ROWS[:1]))
    assert sink.paths[0].read_text().splitlines() == [
        "device_id,op_name,start_ns,dur_ns,ratio,input_shapes",
        '0,MatMul,1700000000000001500,12340,0.5,"""81920,4096;8192,512"""',
    ]


@pytest.mark.parametrize(("rows", "files"), [(4, 1), (5, 1), (6, 2), (10, 2), (11, 3)])
def test_slicing_at_the_row_limit_and_names(tmp_path: Path, rows: int, files: int) -> None:
    """Files of slice_rows rows each, each with the header; no _slice_ suffix when one file holds all."""
    data = [(0, f"op{i}", i * 1000, 1000, 1.0, "1") for i in range(rows)]
    with CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS, slice_rows=5) as sink:
        for start in range(0, rows, 3):  # batches cross slice boundaries
            sink.write(batch(data[start : start + 3]))
    names = sorted(p.name for p in tmp_path.iterdir())
    if files == 1:
        assert names == ["op_summary_20240101120000.csv"]
    else:
        assert names == [f"op_summary_slice_{i}_20240101120000.csv" for i in range(files)]
    read = []
    for path in sink.paths:
        lines = path.read_text().splitlines()
        assert lines[0].startswith("Device_id,")
        assert 1 <= len(lines) - 1 <= 5
        read += [line.split(",")[1] for line in lines[1:]]
    assert read == [f"op{i}" for i in range(rows)]
    assert sink.rows_written == rows


def test_an_empty_table_writes_no_file(tmp_path: Path) -> None:
    """msprof writes no summary without data."""
    with CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS) as sink:
        sink.write(batch([]))
    assert sink.paths == []
    assert list(tmp_path.iterdir()) == []


def test_schema_mismatch_is_refused_and_the_sink_stays_usable(tmp_path: Path) -> None:
    """A batch of another schema raises SchemaMismatchError naming both; later good batches still go out."""
    with CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS) as sink:
        with pytest.raises(SchemaMismatchError, match="expected batches of schema"):
            sink.write(pa.record_batch([pa.array([1])], names=["x"]))
        sink.write(batch(ROWS[:1]))
    assert len(sink.paths[0].read_text().splitlines()) == 2


def test_unknown_columns_and_units_are_refused(tmp_path: Path) -> None:
    """Columns must exist; time units need integer columns."""
    with pytest.raises(ValueError, match="'nope'"):
        CsvSink(tmp_path, SCHEMA, NAMING, columns=[Column("nope")])
    with pytest.raises(ValueError, match="integer ns column"):
        CsvSink(tmp_path, SCHEMA, NAMING, columns=[Column("ratio", unit="duration_us")])


def test_abort_and_exceptions_remove_every_slice(tmp_path: Path) -> None:
    """Temporary slices are hidden while writing and gone after abort or an exception in the block."""
    sink = CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS, slice_rows=FORMAT_ROWS // 2)
    sink.write(pa.Table.from_batches([batch(ROWS)] * (FORMAT_ROWS // len(ROWS) + 1)))  # 1.5 slices
    assert len(list(tmp_path.iterdir())) == 3
    assert all(p.name.startswith(".") for p in tmp_path.iterdir())
    sink.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError), CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS) as failing:
        failing.write(batch(ROWS))
        msg = "x"
        raise KeyError(msg)
    assert list(tmp_path.iterdir()) == []


def test_finish_renders_under_temporary_names_and_close_only_renames(tmp_path: Path) -> None:
    """An export worker finishes its sinks before it is told to commit: every byte is then in the
    hidden files, nothing has its final name, no more rows are taken, and close renames."""
    sink = CsvSink(tmp_path, SCHEMA, NAMING, columns=COLUMNS)
    sink.write(batch(ROWS))  # fewer than FORMAT_ROWS rows: held, no file yet
    assert list(tmp_path.iterdir()) == []
    sink.finish()
    sink.finish()  # idempotent
    (hidden,) = tmp_path.iterdir()
    assert hidden.name.startswith(".")
    rendered = hidden.read_bytes()
    assert rendered.count(b"\n") == len(ROWS) + 1
    with pytest.raises(SinkError, match="already finished"):
        sink.write(batch(ROWS))
    sink.close()
    assert [p.read_bytes() for p in sink.paths] == [rendered]
    assert [p.name for p in tmp_path.iterdir()] == [sink.paths[0].name]
    aborted = CsvSink(tmp_path / "a", SCHEMA, NAMING, columns=COLUMNS)
    aborted.write(batch(ROWS))
    aborted.finish()
    aborted.abort()
    assert list((tmp_path / "a").iterdir()) == []


def test_small_batches_are_held_and_written_joined_with_the_same_bytes(tmp_path: Path) -> None:
    """Batches under FORMAT_ROWS rows wait (no file is opened yet) and are rendered together, in
    order, at FORMAT_ROWS rows or at close; the files equal those of one sink fed one whole batch."""
    parts = [batch([(i, f"op{i % 7}", i * 1_000, i, i / 3, str(i % 5))]) for i in range(FORMAT_ROWS + 5)]
    with CsvSink(tmp_path / "whole", SCHEMA, NAMING, columns=COLUMNS, slice_rows=10_000) as whole:
        whole.write(pa.Table.from_batches(parts))
    pieces = CsvSink(tmp_path / "pieces", SCHEMA, NAMING, columns=COLUMNS, slice_rows=10_000)
    for part in parts[:100]:
        pieces.write(part)
    assert list((tmp_path / "pieces").glob("*")) == []  # nothing rendered yet, no file opened
    for part in parts[100:]:
        pieces.write(part)
    assert pieces.rows_written == len(parts)
    pieces.close()
    assert [p.name for p in pieces.paths] == [p.name for p in whole.paths]
    assert len(whole.paths) == 2
    for mine, theirs in zip(pieces.paths, whole.paths, strict=True):
        assert mine.read_bytes() == theirs.read_bytes()


TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), TEXT), st.one_of(st.none(), st.integers(-(2**62), 2**62))), max_size=20
    )
)
def test_python_csv_reads_back_every_cell(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str | None, int | None]]
) -> None:
    """Whatever the strings hold (commas, quotes, newlines), csv.reader gets the exact cells back,
    from a dictionary column (quoted per dictionary entry) and from a plain one (quoted per cell)."""
    schema = pa.schema([("name", DICT), ("plain", pa.string()), ("start_ns", pa.int64())])
    directory = tmp_path_factory.mktemp("csv")
    columns = [
        Column("name", "Name"),
        Column("plain", "Plain"),
        Column("start_ns", "Start(us)", "timestamp_us"),
    ]
    names = pa.array([r[0] for r in rows], pa.string())
    data = pa.record_batch(
        [names.dictionary_encode(), names, pa.array([r[1] for r in rows], pa.int64())], schema=schema
    )
    with CsvSink(directory, schema, NAMING, columns=columns) as sink:
        sink.write(data)
    if not rows:
        assert sink.paths == []
        return
    read = list(csv.reader(io.StringIO(sink.paths[0].read_bytes().decode(), newline="")))
    assert read[0] == ["Name", "Plain", "Start(us)"]

    def micros(ns: int) -> str:
        return f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}\t"

    expected = [
        ["N/A" if name is None else name] * 2 + ["N/A" if ns is None else micros(ns)] for name, ns in rows
    ]
    assert read[1:] == expected


@pytest.mark.parametrize("char", ["]", "^", "-", "\\", "\t", "|"])
def test_any_quoting_character_is_matched_literally(tmp_path: Path, char: str) -> None:
    """Quoting characters that mean something in a regex character class quote only their own cells."""
    schema = pa.schema([("name", pa.string())])
    data = pa.record_batch([pa.array([f"a{char}b", "plain", "x,y"])], schema=schema)
    with CsvSink(tmp_path, schema, NAMING, quote_chars=f",{char}") as sink:
        sink.write(data)
    assert sink.paths[0].read_bytes() == f'name\n"a{char}b"\nplain\n"x,y"\n'.encode()


def test_a_failed_rename_removes_the_slices_already_renamed(tmp_path: Path) -> None:
    """If one slice cannot take its final name, the others are removed again: all slices or none."""

    def naming(index: int, count: int) -> str:
        return f"op_{index}.csv" if index == 0 else f"missing/op_{index}.csv"

    sink = CsvSink(tmp_path, SCHEMA, naming, columns=COLUMNS, slice_rows=2)
    sink.write(batch(ROWS))
    with pytest.raises(SinkError, match=r"missing/op_1\.csv"):
        sink.close()
    assert list(tmp_path.iterdir()) == []
    assert sink.closed


def test_a_naming_that_repeats_a_name_is_refused_rather_than_losing_slices(tmp_path: Path) -> None:
    """Two slices under one name would leave only the last one's rows: close fails, nothing stays."""
    sink = CsvSink(tmp_path, SCHEMA, lambda _index, _count: "op.csv", columns=COLUMNS, slice_rows=2)
    sink.write(batch(ROWS))
    with pytest.raises(SinkError, match="slices but only the names"):
        sink.close()
    assert list(tmp_path.iterdir()) == []


def test_remove_temporaries_takes_only_the_files_of_that_process(tmp_path: Path) -> None:
    """An export part stopped while a sink created its file still removes it (export._Part.abort)."""
    mine = StagedFile(tmp_path, "op_summary_1.csv.0")
    mine.finish()  # the file exists; its sink never got to know it
    other = tmp_path / f".op_summary_1.csv.0.{os.getpid() + 1}.abcd.part"
    other.write_bytes(b"")
    final = tmp_path / "op_summary_1.csv"
    final.write_bytes(b"kept")
    partition = StagedFile(tmp_path / "tasks" / "device_id=0", "part-0.parquet.rows")  # Parquet's spill
    partition.finish()
    assert sorted(remove_temporaries(tmp_path, os.getpid())) == sorted([mine.temp, partition.temp])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([other.name, final.name, "tasks"])
    assert list((tmp_path / "tasks").rglob("*.part")) == []
