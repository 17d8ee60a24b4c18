"""The whole operator stage on simulated collections: tables against the simulator's truth, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import profstream
from profstream.engine.discovery import Profile
from profstream.engine.operators.task_rows import is_op_row
from profstream.engine.plan import OUTPUT_STREAMS, TABLE_NAMES, Planner, split_work
from profstream.engine.runtime import DONE, Emit, Feed, Operator, Pipeline, StageFeeds, stage_messages
from profstream.engine.schema import NO_ID
from profstream.simulate import SimulationConfig, simulate
from profstream.workers import BatchPipe, PipeReader, Worker, send_messages


@pytest.fixture(scope="module", params=["910A", "910B"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"plan_{request.param}")
    config = SimulationConfig(chip=request.param, steps=4, framework="torch_npu", seed=11)
    simulate(config, root / "prof", root / "truth")
    return root / "prof", root / "truth"


def _table(run: tuple[Path, Path], name: str) -> pa.Table:
    return profstream.open(run[0]).table(name).read_all()


def _truth(run: tuple[Path, Path], name: str) -> pa.Table:
    return pq.read_table(run[1] / f"{name}.parquet")


def test_every_table_has_its_declared_schema(run: tuple[Path, Path]) -> None:
    profile = profstream.open(run[0])
    for name in TABLE_NAMES:
        reader = profile.table(name)
        table = reader.read_all()
        assert table.schema == reader.schema, name


def test_tasks_are_the_simulated_tasks_with_their_ops(run: tuple[Path, Path]) -> None:
    """Every task with its times; op name, type and GE task type where the simulator wrote node info.

    The simulator writes node_basic_info for compute operators and all-reduces, so: tasks without a
    GE type (the H2D memcpy, step-trace tasks) have no op at all, as in msprof; HCCL tasks take their
    op name from the communication API that launched them, their task type is HCCL and their op type
    comes from the all-reduce's node info (HcomAllReduce).
    """
    tasks = _table(run, "tasks").filter(pc.equal(pc.field("context_id"), NO_ID))
    truth = _truth(run, "tasks")
    keys = ["device_id", "stream_id", "task_id", "batch_id", "start_ns", "end_ns"]
    order = [(k, "ascending") for k in keys]
    got = tasks.select([*keys, "op_name", "op_type", "task_type"]).sort_by(order)
    want = truth.select([*keys, "op_name", "op_type", "ge_task_type"]).sort_by(order)
    assert got.num_rows == want.num_rows
    for key in keys:
        assert got.column(key).to_pylist() == want.column(key).cast(pa.int64()).to_pylist(), key
    ge = np.array(want.column("ge_task_type").cast(pa.string()).to_pylist(), object)
    named = ge != "-"
    assert named.sum() > got.num_rows // 2
    for column, truth_column in (
        ("op_name", "op_name"),
        ("op_type", "op_type"),
        ("task_type", "ge_task_type"),
    ):
        have = np.array(got.column(column).cast(pa.string()).to_pylist(), object)
        expected = np.array(want.column(truth_column).cast(pa.string()).to_pylist(), object)
        assert (have[named] == expected[named]).all(), column
        assert all(v is None for v in have[~named]), column
    hccl = np.array(got.column("task_type").cast(pa.string()).to_pylist(), object) == "HCCL"
    assert hccl.sum() == (ge == "HCCL").sum() > 0
    assert set(np.array(got.column("op_type").cast(pa.string()).to_pylist())[hccl]) == {"HcomAllReduce"}


def test_step_windows_and_overlap_sums_equal_the_truth(run: tuple[Path, Path]) -> None:
    steps = _table(run, "steps").filter(pc.equal(pc.field("kind"), "step"))
    truth = _truth(run, "steps")
    assert steps.column("start_ns").to_pylist() == truth.column("step_start_ns").to_pylist()
    assert steps.column("end_ns").to_pylist() == truth.column("step_end_ns").to_pylist()


def _drain(
    pipeline: Pipeline, wanted: list[str], stop: int | None = None
) -> tuple[list[tuple[str, pa.RecordBatch]], int]:
    """The wanted emits of up to ``stop`` steps (all when None), and how many steps ran."""
    out = []
    steps = 0
    while not pipeline.finished and (stop is None or steps < stop):
        out += [(n, b) for n, b in pipeline.step() if n in wanted]
        steps += 1
    return out, steps


def _rows(emits: list[tuple[str, pa.RecordBatch]]) -> dict[str, list[dict[str, object]]]:
    rows: dict[str, list[dict[str, object]]] = {}
    for name, batch in emits:
        rows.setdefault(name, []).extend(batch.to_pylist())
    return rows


def _uninterrupted(
    run: tuple[Path, Path],
) -> tuple[Profile, list[str], dict[str, list[dict[str, object]]], int]:
    """Every table of the run's collection in one uninterrupted pipeline: its rows and step count."""
    collection = profstream.open(run[0]).collections[0]
    tables = [*TABLE_NAMES, *OUTPUT_STREAMS]
    pipeline, wanted = Planner(collection, chunk_bytes=4096).pipeline(tables)
    emits, count = _drain(pipeline, wanted)
    return collection, tables, _rows(emits), count


def test_task_rows_are_the_tasks_then_the_communication_ops_in_start_order(run: tuple[Path, Path]) -> None:
    """op_summary's merged stream: every task in its order and every comm op, sorted by start."""
    collection = profstream.open(run[0]).collections[0]
    pipeline, wanted = Planner(collection, chunk_bytes=4096).pipeline(["tasks", "comm", "task_rows"])
    emitted: dict[str, list[pa.RecordBatch]] = {}
    for stream, batch in pipeline.run(wanted):
        emitted.setdefault(stream, []).append(batch)
    devices = sorted({s.partition("@")[2] for s in wanted})
    assert devices
    for device in devices:
        merged = pa.Table.from_batches(emitted[f"task_rows@{device}"]).combine_chunks()
        tasks = pa.Table.from_batches(emitted[f"tasks@{device}"])
        comm = pa.Table.from_batches(emitted[f"comm@{device}"])
        starts = merged.column("start_ns").to_numpy()
        assert (np.diff(starts) >= 0).all()
        ops = is_op_row(merged.to_batches()[0])
        keys = ["start_ns", "end_ns", "stream_id", "task_id", "context_id"]
        assert merged.filter(pc.invert(ops)).select(keys) == tasks.select(keys)
        op_rows = merged.filter(ops)
        assert 0 < op_rows.num_rows == comm.num_rows
        pairs = sorted(
            zip(op_rows.column("start_ns").to_pylist(), op_rows.column("op_name").to_pylist(), strict=True)
        )
        want = sorted(
            zip(comm.column("start_ns").to_pylist(), comm.column("op_name").to_pylist(), strict=True)
        )
        assert pairs == want


@pytest.mark.parametrize("fraction", [0.25, 0.6])
def test_a_snapshot_resumes_every_operator_exactly(run: tuple[Path, Path], fraction: float) -> None:
    """Stop the whole pipeline part way, snapshot, rebuild from the snapshot: the output is unchanged."""
    collection, tables, whole, count = _uninterrupted(run)
    first, wanted = Planner(collection, chunk_bytes=4096).pipeline(tables)
    before, _ = _drain(first, wanted, stop=int(count * fraction))
    blob = first.snapshot()
    resumed, _ = Planner(collection, chunk_bytes=4096, positions=Pipeline.feed_positions(blob)).pipeline(
        tables
    )
    resumed.restore(blob)
    after, _ = _drain(resumed, wanted)
    assert _rows(before + after) == whole


def test_per_step_overlap_sums_equal_the_truth(run: tuple[Path, Path]) -> None:
    """step_time (torch_npu's text rule over framework steps) against the simulator's per-step sums.

    Every task of a step lies inside its window, so the lanes bucketed by start give the truth's
    Computing, Communication, Not Overlapped and Overlapped exactly. Free differs by design: the
    text rule credits a gap crossing into the next step wholly to the step where it starts.
    """
    got = _table(run, "step_time").sort_by("step")
    truth = _truth(run, "steps")
    assert got.num_rows == truth.num_rows
    pairs = {
        "computing_ns": "computing_ns",
        "communication_ns": "communication_ns",
        "communication_not_overlapped_ns": "comm_not_overlapped_ns",
        "overlapped_ns": "overlapped_ns",
    }
    for mine, theirs in pairs.items():
        assert got.column(mine).to_pylist() == truth.column(theirs).to_pylist(), mine


def test_a_resumed_pipeline_can_be_snapshot_and_resumed_again(run: tuple[Path, Path]) -> None:
    """Snapshot right after a resume (before every feed was read again), resume a second time.

    A resumed feed that has not reopened its reader yet must still report the offsets it resumes
    from, or the second resume re-reads that stream from the start.
    """
    collection, tables, whole, count = _uninterrupted(run)
    first, wanted = Planner(collection, chunk_bytes=4096).pipeline(tables)
    before, _ = _drain(first, wanted, stop=count // 3)
    blob = first.snapshot()
    for stop in (1, None):  # one step, then snapshot again; then to the end
        resumed, _ = Planner(collection, chunk_bytes=4096, positions=Pipeline.feed_positions(blob)).pipeline(
            tables
        )
        resumed.restore(blob)
        more, _ = _drain(resumed, wanted, stop=stop)
        before += more
        blob = resumed.snapshot()
    assert _rows(before) == whole


def test_work_names_shared_feeds_and_operators_alike(run: tuple[Path, Path]) -> None:
    planner = Planner(profstream.open(run[0]).collections[0], read_framework=False)
    tasks, statistic, memory = (
        planner.work(["tasks"]),
        planner.work(["op_statistic"]),
        planner.work(["memory"]),
    )
    assert set(tasks) < set(statistic)  # the statistic adds its own operator to the task pipeline
    added = set(statistic) - set(tasks)
    assert [statistic[k] for k in added] == [0]  # which takes no feed: it costs nothing
    assert not set(tasks) & set(memory)  # GE memory shares nothing with the tasks
    raw = run[0]
    tracks = sum(p.stat().st_size for p in raw.rglob("host/data/*task_track.slice_*") if p.suffix != ".done")
    assert tasks["feed task_track"] == tracks > 0
    assert memory["feed task_memory_info"] == memory["op Memory -> memory,memory_record"] > 0


def test_ops_without_flows_read_no_device_data_and_are_the_same_rows(run: tuple[Path, Path]) -> None:
    """PTA memory needs the op tree, not the kernels' flows: its plan runs no device pipeline, which
    lets an export run it in a process apart from the tasks; its rows do not change."""
    collection = profstream.open(run[0]).collections[0]
    planner = Planner(collection, chunk_bytes=4096)
    alone, alone_wanted = planner.pipeline(["ops", "memory", "memory_record"])
    device_tasks = {"DeviceTasks", "HostJoin"}
    assert not device_tasks & {type(op).__name__ for op in alone.operators}
    whole, _ = planner.pipeline(["ops", "flows", "memory", "memory_record", "tasks"])
    assert device_tasks <= {type(op).__name__ for op in whole.operators}  # the flows take the tasks
    one, _ = _drain(alone, alone_wanted)
    both, _ = _drain(whole, ["ops", "memory", "memory_record"])
    rows_alone, rows_whole = _rows(one), _rows(both)
    assert rows_alone["ops"] and rows_alone["memory"] and rows_alone["memory_record"]
    assert rows_alone == rows_whole
    assert set(planner.work(["memory"])).isdisjoint(planner.work(["tasks"]))


def test_the_first_stage_in_a_process_of_its_own_gives_the_same_rows(run: tuple[Path, Path]) -> None:
    """Task pairing and API events (Planner.front) run in a forked worker that sends its streams and
    their watermarks; the rest of the pipeline reads them as feeds and makes the same rows, and the
    same batches as when the stage runs in this process."""
    collection = profstream.open(run[0]).collections[0]
    planner = Planner(collection, chunk_bytes=4096)
    tables = ["tasks", "comm", "task_rows", "op_statistic", "api_statistic", "overlap"]
    front = planner.front(tables)
    assert sorted(front) == ["api", "api_progress", "device_tasks@0"]
    pipe = BatchPipe()

    def send() -> None:
        pipe.forked(sends=True)
        send_messages(stage_messages(planner.front_pipeline(front), front), pipe)

    worker = Worker("front", send, lambda: None, lambda: None)
    pipe.forked(sends=False)
    reader = PipeReader(pipe, worker.wait_ran)
    try:
        rest, wanted = planner.pipeline(tables, received=StageFeeds(reader, front).feeds)
        assert not {"DeviceTasks", "ApiEvents"} & {type(op).__name__ for op in rest.operators}
        assert not {"api_event", "stars_soc@0", "hwts@0"} & set(rest.feeds)  # read by the worker only
        split = _drain(rest, wanted)[0]
        worker.commit()
        worker.result()
    finally:
        reader.close()
        worker.abort()  # a failed assertion leaves no child waiting for its word
    # the same stage run here, as the rest asks, gives the same batches
    here = StageFeeds(stage_messages(planner.front_pipeline(front), front), front)
    staged, staged_wanted = planner.pipeline(tables, received=here.feeds)
    assert [(n, b.to_pylist()) for n, b in _drain(staged, staged_wanted)[0]] == [
        (n, b.to_pylist()) for n, b in split
    ]
    whole, whole_wanted = planner.pipeline(tables)
    split_rows = _rows(split)
    assert split_rows == _rows(_drain(whole, whole_wanted)[0])
    assert split_rows["tasks@0"] and split_rows["task_rows@0"] and split_rows["overlap@0"]


def test_the_last_stage_apart_gives_the_same_rows(run: tuple[Path, Path]) -> None:
    """The operators whose outputs only the wanted tables read (Planner.last_stage: per-op and
    per-step sums, statistics, row merges) run on the rest's streams, taken in the order the rest sent
    them, and make the same rows as one pipeline; the producers of ``here`` tables stay with the rest."""
    collection = profstream.open(run[0]).collections[0]
    planner = Planner(collection, chunk_bytes=4096)
    tables = ["operator_details", "overlap", "op_statistic", "task_rows", "framework_steps", "api_statistic"]
    sent = planner.last_stage(tables)
    assert {"ops", "flows", "tasks@0", "comm@0"} <= set(sent)
    rest, rest_wanted = planner.pipeline(sorted({name.partition("@")[0] for name in sent}))
    moved = {"OperatorDetails", "Overlap", "OpStatistic", "TaskRowMerge", "FrameworkSteps", "ApiStatistic"}
    assert not moved & {type(op).__name__ for op in rest.operators}
    messages = [m for m in stage_messages(rest, rest_wanted, marked=sent) if m[0] in set(sent)]
    last, wanted = planner.pipeline(tables, received=StageFeeds(messages, sent, in_order=True).feeds)
    assert {type(op).__name__ for op in last.operators} == moved
    assert set(last.feeds) == set(sent)  # it reads no raw record
    whole, whole_wanted = planner.pipeline(tables)
    staged_rows = _rows(_drain(last, wanted)[0])
    assert staged_rows == _rows(_drain(whole, whole_wanted)[0])
    assert staged_rows["operator_details"] and staged_rows["overlap@0"] and staged_rows["task_rows@0"]
    kept = planner.last_stage(tables, here=["framework_steps"])  # e.g. read by communication.json
    assert "framework_steps@0" in kept  # made by the rest, not by the stage


def test_in_order_stage_feeds_take_the_messages_as_sent() -> None:
    """A feed whose stream's batch is not next waits, so batches reach the pipeline in the order sent,
    not in the order of the feeds' watermarks (a last stage's operators may rely on that order); a
    watermark goes to its feed as soon as any feed reads it."""
    first, second = (pa.RecordBatch.from_pydict({"start_ns": [t]}) for t in (5, 1))
    messages: list[tuple[str, pa.RecordBatch | int]] = [
        ("b", first),
        ("b", 4),
        ("a", second),
        ("a", DONE),
        ("b", DONE),
    ]
    a, b = StageFeeds(messages, ["a", "b"], in_order=True).feeds
    assert a.pull() is None and a.waiting  # b's batch comes first
    assert b.pull() is first
    assert a.pull() is second  # past b's watermark, which b now has
    assert b.watermark == 4
    assert a.pull() is None and a.watermark == DONE
    assert b.pull() is None and b.watermark == DONE


def test_a_stage_ends_its_streams_only_when_it_has_finished() -> None:
    """An operator's outputs are DONE once its inputs are, yet its finish may still emit (statistics
    do): stage_messages holds the end back until the pipeline has finished."""
    batch = pa.RecordBatch.from_pydict({"start_ns": [1, 2]})
    pipeline = Pipeline([Feed("raw", iter([batch]), "start_ns")], [_AtFinish()])
    messages = list(stage_messages(pipeline, ["out"]))
    assert [m for m in messages if isinstance(m[1], pa.RecordBatch)] == [("out", batch)]
    marks = [m[1] for m in messages if not isinstance(m[1], pa.RecordBatch)]
    assert marks[-1] == DONE and DONE not in marks[:-1]
    assert messages.index(("out", batch)) < messages.index(("out", DONE))


class _AtFinish(Operator):
    """Holds every row until finish, promising nothing in its watermark."""

    inputs = ("raw",)
    outputs = ("out",)

    def __init__(self) -> None:
        self.held: list[pa.RecordBatch] = []

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        self.held.append(batch)

    def advance(self, watermark: int) -> list[Emit]:
        return []

    def finish(self) -> list[Emit]:
        return [("out", b) for b in self.held]

    def snapshot(self) -> bytes:
        return b""

    def restore(self, state: bytes) -> None:
        pass


def test_no_first_stage_apart_where_the_rest_reads_a_task_log_too(tmp_path: Path) -> None:
    """The L2 cache feed follows the task log, so its pipeline reads that log: a front would decode
    it a second time. Without it the front reads every task log, API event and step tag."""
    config = SimulationConfig(chip="910B", steps=2, ops_per_step=8, framework="torch_npu", l2_cache=True)
    simulate(config, tmp_path / "raw", tmp_path / "truth")
    planner = Planner(profstream.open(tmp_path / "raw").collections[0])
    assert planner.front(["l2_cache", "tasks"]) == []
    front = planner.front(["tasks", "steps"])
    assert sorted(front) == ["api", "api_progress", "device_tasks@0", "steps@0"]
    rest, _ = planner.pipeline(
        ["tasks", "steps"], received=[Feed(name, iter(()), "start_ns") for name in front]
    )
    assert set(rest.feeds) == {*front, "task_track", "node_basic_info", "tensor_info", "memcpy_info"}
    assert planner.front(["memory_record"]) == []  # no task pairing or API events to move


def test_split_work_keeps_shared_pipelines_together_and_moves_the_rest() -> None:
    chain = {"feed log": 500, "op pair": 500, "feed launches": 300, "op join": 300}
    works = [
        chain | {"op summary rows": 0},  # op_summary
        chain | {"op statistic": 0},  # op_statistic: same pipeline
        {"feed memory": 200, "op memory": 200},  # independent
        {"feed steps": 5, "op steps": 5},  # small and independent
        {"feed log": 500, "op pair": 500, "op wait": 40},  # shares most of the chain
    ]
    assert split_work(works, 1) == [[0, 1, 2, 3, 4]]
    assert split_work(works, 2) == [[0, 1, 4], [2, 3]]
    assert split_work(works, 2, min_part=500) == [[0, 1, 2, 3, 4]]  # memory (400) alone is too small
    assert split_work(works, 4) == [[0, 1, 4], [2, 3]]  # a third process would not be shorter


def test_split_work_runs_a_pipeline_twice_only_when_that_pays() -> None:
    shared = {"feed big": 1000, "op big": 1000}
    works = [shared | {"op a": 10}, shared | {"op b": 10}]
    assert split_work(works, 2) == [[0, 1]]  # a second copy of the big pipeline saves 10
    costly = [shared | {"op a": 3000}, shared | {"op b": 3000}]
    assert sorted(split_work(costly, 2)) == [[0], [1]]  # it saves more than it costs


#: a cost per key, and outputs that each need some of the keys (a key costs the same wherever it is)
_WORKS = st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 1000), min_size=1).flatmap(
    lambda costs: st.lists(
        st.sets(st.sampled_from(sorted(costs))).map(lambda keys: {k: costs[k] for k in keys}),
        min_size=1,
        max_size=9,
    )
)


@given(_WORKS, st.integers(1, 4))
def test_split_work_is_a_partition_costliest_group_first(works: list[dict[str, int]], parts: int) -> None:
    groups = split_work(works, parts)
    assert 1 <= len(groups) <= parts
    assert sorted(i for group in groups for i in group) == list(range(len(works)))
    costs = [sum({k: v for i in group for k, v in works[i].items()}.values()) for group in groups]
    assert costs == sorted(costs, reverse=True)
