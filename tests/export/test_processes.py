"""An export split across worker processes: the same files as one process, and failures in any part
leave nothing behind (profstream/workers.py, plan.split_work)."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

import profstream
from profstream import events
from profstream import export as export_module
from profstream.config import ExportSettings
from profstream.engine.layouts import Output, outputs
from profstream.engine.layouts.msprof import TaskRows
from profstream.engine.plan import Planner
from profstream.engine.runtime import PipelineError, stage_messages
from profstream.errors import DecodeError
from profstream.export import ExportReport, export
from profstream.workers import Worker

from .conftest import Run


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The pid of every worker an export starts; any group of outputs, however small, may get one."""
    monkeypatch.setattr(export_module, "MIN_PART_WORK", 0)
    started: list[int | None] = []

    class Recorded(Worker[Any]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self.pid)

    monkeypatch.setattr(export_module, "Worker", Recorded)
    return started


def _content(path: Path) -> bytes | pa.Table | list[str]:
    """A file's bytes; a Parquet file's rows instead, as its row groups (and their dictionaries) end
    where its process's shared buffer budget and its pipeline's batches made them end
    (sinks/parquet.py), which depends on the tables that process makes; a timeline's events, each
    as written, in sorted order: events go out as the pipeline emits them, and its schedule depends
    on which tables each process's pipeline makes (the code before the writer ran a last stage wrote
    a 50 MB simulation's timeline in another order with one process than with two, too)."""
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        decoded = [
            f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema
        ]
        return table.cast(pa.schema(decoded))
    data = path.read_bytes()
    if path.name.startswith(("trace_view", "msprof_")) and path.suffix == ".json":
        return sorted(line.rstrip(",") for line in data.decode().splitlines())
    return data


def _files(report: ExportReport, root: Path) -> dict[str, bytes | pa.Table | list[str]]:
    """The written files by path under ``root`` (the export's timestamp left out) and their content
    (:func:`_content`)."""
    paths = [Path(f.path) for c in report.collections for f in c.files]
    return {re.sub(r"_\d{14}", "", p.relative_to(root).as_posix()): _content(p) for p in paths}


@pytest.mark.parametrize(
    ("layout", "kind"),
    [
        ("msprof", "summary"),
        ("msprof", "both"),
        ("torch_npu", "summary"),
        ("torch_npu", "both"),
        ("parquet", "both"),
    ],
)
def test_worker_processes_write_what_one_process_writes(
    torch_run: Run, tmp_path: Path, workers: list[int | None], layout: str, kind: str
) -> None:
    def run(processes: int, out: Path) -> ExportReport:
        settings = ExportSettings(processes=processes)
        return export(torch_run.raw, kind=kind, layout=layout, output=out, settings=settings)  # type: ignore[arg-type]

    alone = run(1, tmp_path / "one")
    assert not workers
    split = run(2, tmp_path / "two")
    # the writer of the first group's outputs, the first stage of its pipeline (task pairing, API
    # events), and a part for another group: msprof: GE memory and step trace share no pipeline with
    # the task outputs; torch_npu: operator_memory and memory_record (the op tree without the
    # kernels' flows), or with the timeline, which wants the flows, npu_module_mem alone (tiny, but
    # no least size here); parquet (one output per table): the memory tables' datasets
    assert len(workers) == 3
    assert _files(split, tmp_path / "two") == _files(alone, tmp_path / "one")
    assert split.collections[0].rows == alone.collections[0].rows
    assert not [p for p in (tmp_path / "two").rglob(".*")]  # no spool or temporary file left


def test_torch_npu_memory_outputs_run_apart_from_the_task_outputs(
    torch_run: Run, tmp_path: Path, workers: list[int | None]
) -> None:
    """operator_memory and memory_record need the op tree but not the kernels, so their part reads
    no device task log (plan: FrameworkOps without tasks where no flow is wanted)."""
    settings = ExportSettings(processes=2)
    with capture_logs() as logs:
        export(torch_run.raw, kind="summary", layout="torch_npu", output=tmp_path / "out", settings=settings)
    parts = {e["worker"]: set(e["tables"]) for e in logs if e["event"] == events.EXPORT_PART_STARTED}
    assert parts.keys() == {"export-writer", "export-part-1", "export-front"}
    assert parts["export-front"] == {"device_tasks@0", "api", "api_progress"}
    assert {"memory", "memory_record"} <= parts["export-part-1"]
    assert "task_rows" not in parts["export-part-1"]
    assert "task_rows" in parts["export-writer"] and "memory" not in parts["export-writer"]


def test_every_part_renders_its_files_before_the_commit_word(
    torch_run: Run, tmp_path: Path, workers: list[int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part that ends early renders what it held (spools, per-step documents) while the others
    still run: when the parent says commit, every byte is already in a temporary file. The outputs
    that render only at the end are shared out: the writer renders kernel_details while the
    pipeline's process renders communication.json."""
    out = tmp_path / "out"
    hidden: dict[str, int] = {}

    def commit(self: Worker[Any]) -> None:
        if not hidden:  # the first commit word: every part has run
            hidden.update({p.name: p.stat().st_size for p in out.rglob(".*.part")})
        original(self)

    original = Worker.commit
    monkeypatch.setattr(Worker, "commit", commit)
    report = export(
        torch_run.raw, kind="summary", layout="torch_npu", output=out, settings=ExportSettings(processes=2)
    )
    final = {Path(f.path).name: Path(f.path).stat().st_size for c in report.collections for f in c.files}
    staged = {name.split(".")[1]: size for name, size in hidden.items()}  # .{stem}.{pid}.{token}.part
    assert {"kernel_details", "memory_record", "communication"} <= staged.keys()
    assert staged == {Path(name).stem: size for name, size in final.items() if name != "profiler_info.json"}
    rendered_by = {name.split(".")[1]: int(name.split(".")[-3]) for name in hidden}
    assert rendered_by["communication"] == rendered_by["communication_matrix"] == os.getpid()
    assert rendered_by["kernel_details"] in workers


def _corrupted(run: Run, tmp_path: Path, pattern: str) -> tuple[Path, Path]:
    """A copy of ``run`` whose largest file matching ``pattern`` has a record with a bad magic number."""
    raw = tmp_path / "raw"
    shutil.copytree(run.raw, raw)
    victim = max(raw.rglob(pattern), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[0:2] = b"\xff\xff"
    victim.write_bytes(bytes(data))
    return raw, victim


@pytest.mark.parametrize(
    "pattern",
    [
        "host/data/*task_memory_info.slice_*[0-9]",  # read by the worker (memory outputs)
        "host/data/*task_track.slice_*[0-9]",  # read by the parent (task outputs, sent to the writer)
        "host/data/*api_event.data.slice_*[0-9]",  # read by the front (API events, sent to the parent)
    ],
)
def test_a_corrupt_record_in_any_part_fails_the_export_and_leaves_no_file(
    torch_run: Run, tmp_path: Path, workers: list[int | None], pattern: str
) -> None:
    raw, victim = _corrupted(torch_run, tmp_path, pattern)
    out = tmp_path / "out"
    with pytest.raises(DecodeError, match=re.escape(victim.name)) as raised:
        export(raw, kind="summary", output=out, settings=ExportSettings(processes=2))
    assert raised.value.offset == 0
    assert len(workers) == 3
    assert not [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in out.rglob(".spool-*")]


def test_the_default_is_one_process_per_core_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_module, "can_fork", lambda: True)
    monkeypatch.setattr(export_module.os, "sched_getaffinity", lambda _: {3}, raising=False)
    monkeypatch.setattr(export_module.os, "cpu_count", lambda: 64)
    assert export_module._processes(ExportSettings()) == 1  # pinned to one core of 64 (taskset, cpuset)
    assert export_module._processes(ExportSettings(processes=3)) == 3
    monkeypatch.delattr(export_module.os, "sched_getaffinity")  # macOS has no affinity mask
    assert export_module._processes(ExportSettings()) == 64


def test_processes_1_or_a_daemonic_process_forks_nothing(
    torch_run: Run, tmp_path: Path, workers: list[int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    export(torch_run.raw, kind="summary", output=tmp_path / "a", settings=ExportSettings(processes=1))
    monkeypatch.setattr(export_module, "can_fork", lambda: False)  # as in a Dask worker
    export(torch_run.raw, kind="summary", output=tmp_path / "b", settings=ExportSettings(processes=2))
    assert not workers


def test_a_failure_in_the_writer_process_fails_the_export_and_leaves_no_file(
    torch_run: Run, tmp_path: Path, workers: list[int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: TaskRows, batch: Any) -> Any:
        msg = "the writer broke"
        raise ValueError(msg)

    monkeypatch.setattr(TaskRows, "_listed", broken)  # op_summary's rows: only the writer runs it
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="the writer broke"):
        export(torch_run.raw, kind="summary", output=out, settings=ExportSettings(processes=2))
    assert len(workers) == 3
    assert not [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in out.rglob(".spool-*")]


def test_only_the_parts_off_the_longest_path_run_at_a_lower_priority(
    torch_run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task pipeline, its writer and its first stage are the export's longest path; the memory
    part yields them the CPU (export.SIDE_PART_NICE)."""
    monkeypatch.setattr(export_module, "MIN_PART_WORK", 0)
    nice: dict[str, int] = {}

    class Recorded(Worker[Any]):
        def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
            super().__init__(name, *args, **kwargs)
            nice[name] = kwargs.get("nice", 0)

    monkeypatch.setattr(export_module, "Worker", Recorded)
    export(torch_run.raw, kind="summary", output=tmp_path / "out", settings=ExportSettings(processes=2))
    assert nice == {"export-part-1": export_module.SIDE_PART_NICE, "export-writer": 0, "export-front": 0}
    assert export_module.SIDE_PART_NICE > 0


def test_a_last_stage_offered_a_stream_it_does_not_read_refuses_to_start(
    torch_run: Run, tmp_path: Path
) -> None:
    """The last stage takes its messages in the order sent, so a message no feed of it takes would
    stall it for good: a stream it would not read is refused before anything runs."""
    collection = profstream.open(torch_run.raw).collections[0]
    context = export_module.layout_context(collection, tmp_path / "out", None)
    built = outputs(context, "torch_npu", "summary")
    planner = Planner(collection)
    written, here = export_module._Part(planner, built, None, context).shared()
    streams = planner.last_stage(sorted(written.sources()), here=sorted(here.sources()))
    assert "memory_record@0" not in streams  # made by the rest of the pipeline and read by no stage operator
    with pytest.raises(PipelineError, match=r"reads none of \['memory_record@0'\]"):
        written.run_last_stage(iter(()), [*streams, "memory_record@0"])
    written.run_last_stage(  # the same streams alone are taken
        stage_messages(*planner.pipeline(sorted({s.partition("@")[0] for s in streams}))), streams
    )
    for output in written.outputs:
        output.abort()


class _Finishing(Output):
    """An output that records the thread its finish ran on (and may fail there)."""

    def __init__(self, rows: int, fail: bool = False) -> None:
        self.tables = ("tasks",)
        self.rows, self.fail = rows, fail
        self.thread: str | None = None

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        pass

    @property
    def finish_rows(self) -> int:
        return self.rows

    def finish(self) -> None:
        self.thread = threading.current_thread().name
        if self.fail:
            msg = "the dataset broke"
            raise OSError(msg)

    def close(self) -> list[Path]:
        return []

    def abort(self) -> None:
        pass


def test_a_part_finishes_its_largest_parquet_output_in_a_thread_while_the_others_finish() -> None:
    """Parquet encodes without the GIL, so the output with the most rows left to encode (the tasks
    dataset's last row group) finishes beside the others, not after them; its failure is raised."""
    here = threading.current_thread().name
    small, large, python = _Finishing(10), _Finishing(1000), _Finishing(0)
    export_module._Part(None, [small, large, python], None, None).finish()  # type: ignore[arg-type]
    assert large.thread is not None and large.thread.startswith("finish")
    assert (small.thread, python.thread) == (here, here)
    alone = [_Finishing(0), _Finishing(0)]
    export_module._Part(None, alone, None, None).finish()  # type: ignore[arg-type]
    assert [output.thread for output in alone] == [here, here]
    with pytest.raises(OSError, match="the dataset broke"):
        export_module._Part(None, [_Finishing(5), _Finishing(50, fail=True)], None, None).finish()  # type: ignore[arg-type]
