"""Stages of a cluster: the real older msprof-analyze output, hand-built pg_name cases, the reduction."""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
import pytest

from profstream.cluster import outputs
from profstream.cluster.rank import MATRIX_SCHEMA, STEP_COLUMNS, STEP_SCHEMA, RankResult
from profstream.cluster.reduce import from_rank, merge, tree
from profstream.cluster.stages import (
    CommGroup,
    ParallelGroup,
    comm_groups,
    double_hash,
    find_stages,
    read_parallel_groups,
    stage_rows,
)
from profstream.errors import DecodeError

TEST_DATA = Path("/work/shared/realdata/msinsight-torchnpu-910b/server/src/test/test_data")
OLD_OUTPUT = TEST_DATA / "cluster_analysis_output"
METADATA = TEST_DATA / "metadata" / "profiler_metadata.json"


def _groups(
    named: Iterable[tuple[str, str, Iterable[int]]],
) -> tuple[dict[tuple[str, str], list[int]], dict[str, ParallelGroup]]:
    """(kind, pg_name, ranks) -> communication groups named as HCCL names them, and their descriptions."""
    groups: dict[tuple[str, str], list[int]] = {}
    described: dict[str, ParallelGroup] = {}
    for i, (kind, pg_name, ranks) in enumerate(named):
        entry = ParallelGroup(f"10.0.0.1%eth0_60000_0_{i}", pg_name, tuple(ranks))
        groups[(kind, entry.group)] = list(ranks)
        described[entry.group] = entry
    return groups, described


def _stages(named: Iterable[tuple[str, str, Iterable[int]]]) -> list[tuple[int, ...]]:
    return find_stages(comm_groups(*_groups(named)))


# -- the older msprof-analyze: p2p groups are the stages -------------------------------------------


@pytest.mark.skipif(not OLD_OUTPUT.is_dir(), reason="realdata not available")
def test_stage_rows_of_the_real_older_output_from_its_rank_rows_and_groups() -> None:
    with (OLD_OUTPUT / "cluster_step_trace_time.csv").open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)[3:]
        rows = list(reader)
    rank_rows = [r for r in rows if r[1] == "rank"]
    columns: dict[str, list[float | int]] = {
        "rank": [int(r[2]) for r in rank_rows],
        "step": [int(r[0]) for r in rank_rows],
    }
    for i, name in enumerate(header):
        columns[name] = [float(r[3 + i]) for r in rank_rows]
    document = json.loads((OLD_OUTPUT / "communication_group.json").read_text())
    assert "comm_group_parallel_info" not in document  # the older format: no pg_name anywhere
    groups = {
        (kind, f"{kind}{i}"): ranks
        for kind in ("collective", "p2p")
        for i, ranks in enumerate(document[kind])
    }
    stages = find_stages(comm_groups(groups, {}))
    assert stages == [tuple(range(8)), tuple(range(8, 16))]

    ours = stage_rows(pa.table(columns), stages).to_pylist()
    theirs = [r for r in rows if r[1] == "stage"]
    assert [(str(r["step"]), r["index"]) for r in ours] == [(r[0], r[2]) for r in theirs]
    for mine, real in zip(ours, theirs, strict=True):
        for i, name in enumerate(header):
            assert math.isclose(mine[name], float(real[3 + i]), rel_tol=1e-9), (real[2], name)


def test_without_pg_names_each_p2p_group_is_a_stage_and_a_rank_keeps_the_first() -> None:
    groups = {
        ("p2p", "b"): [3, 1],
        ("p2p", "a"): [1, 2],
        ("collective", "w"): [0, 1, 2, 3],
        ("p2p", "c"): [1, 2],
    }
    assert find_stages(comm_groups(groups, {})) == [(1, 2), (1, 3)]
    assert find_stages(comm_groups({("collective", "w"): [0, 1]}, {})) == []


# -- msprof-analyze 26.x: stages from pp links and collective groups -----------------------------------

#: Megatron tp=2, pp=2, dp=2 on 8 ranks, the groups of realdata's profiler_metadata.json
MEGATRON = [
    ("collective", "default_group", range(8)),
    *(("collective", "tp", (r, r + 1)) for r in (0, 2, 4, 6)),
    *(("collective", "dp", (r, r + 2)) for r in (0, 1, 4, 5)),
    *(("collective", "tp_dp", range(r, r + 4)) for r in (0, 4)),
    *(("collective", "mp", (r, r + 1, r + 4, r + 5)) for r in (0, 2)),  # spans both stages
    *(("collective", "embd", (r, r + 4)) for r in range(4)),  # first and last stage
    *(("p2p", "pp", (r, r + 4)) for r in range(4)),
    *(("p2p", "pp_new_stream", (r, r + 4)) for r in range(4)),
]


def test_megatron_groups_give_the_two_pipeline_stages() -> None:
    assert _stages(MEGATRON) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_a_collective_group_spanning_two_stages_is_ignored() -> None:
    """Without the check, mp {0, 1, 4, 5} would join both stages into one."""
    pp = [("p2p", "pp", (0, 2)), ("p2p", "pp", (1, 3))]
    assert _stages([*pp, ("collective", "tp", (0, 1)), ("collective", "tp", (2, 3))]) == [(0, 1), (2, 3)]
    spanning = ("collective", "mp", (0, 1, 2))
    assert _stages([*pp, spanning, ("collective", "tp", (0, 1)), ("collective", "tp", (2, 3))]) == [
        (0, 1),
        (2, 3),
    ]
    # a pipeline of three stages from chained links: {0, 4} holds two ranks of the pipeline {0, 2, 4}
    chained = [("p2p", "PP", (0, 2)), ("p2p", "pp", (2, 4)), ("collective", "x", (0, 4))]
    assert _stages([*chained, ("collective", "tp", (0, 1)), ("collective", "tp", (4, 5))]) == [(0, 1), (4, 5)]


def test_stages_are_connected_components_sorted_by_smallest_rank() -> None:
    pp = [("p2p", "pp", (r, r + 6)) for r in range(6)]
    collective = [("collective", "a", (4, 5)), ("collective", "b", (0, 2)), ("collective", "c", (2, 1))]
    collective += [("collective", "d", (3,)), ("collective", "e", (5, 3))]
    assert _stages(pp + collective) == [(0, 1, 2), (3, 4, 5)]


def test_pg_names_without_a_pp_p2p_group_give_no_stages() -> None:
    assert _stages([("collective", "tp", (0, 1)), ("p2p", "dp", (0, 2)), ("collective", "pp", (0, 2))]) == []
    # one described group is enough to use the current rule: the undescribed p2p group is no pp link
    groups, described = _groups([("collective", "tp", (0, 1))])
    groups[("p2p", "unnamed")] = [0, 2]
    assert find_stages(comm_groups(groups, described)) == []


def test_global_ranks_replace_the_reporting_ranks() -> None:
    entry = ParallelGroup("id", "tp", (3, 2))
    rows = comm_groups({("collective", entry.group): [2], ("p2p", "x"): [5, 4]}, {entry.group: entry})
    assert rows == [
        CommGroup("collective", (2,), (2, 3), entry.group, "id", "tp"),
        CommGroup("p2p", (4, 5), (4, 5), "x", "", ""),
    ]


def test_double_hash_is_msprof_analyzes() -> None:
    # values printed by msprof_analyze.cluster_analyse.common_func.utils.double_hash
    assert double_hash("10.174.216.241%enp189s0f1_55000_0_1738895507756334") == 9609979115979062393
    assert double_hash("a") == 416611827809
    assert double_hash("") == 0


@pytest.mark.skipif(not METADATA.is_file(), reason="realdata not available")
def test_read_parallel_groups_of_a_real_profiler_metadata(tmp_path: Path) -> None:
    shutil.copy(METADATA, tmp_path / METADATA.name)
    found = read_parallel_groups(tmp_path)
    assert len(found) == 21
    pp = [g for g in found if g.pg_name == "pp"]
    assert pp == [ParallelGroup("10.174.216.241%enp189s0f1_55000_0_1738895507756334", "pp", (0, 4))]
    assert pp[0].group == "9609979115979062393"
    assert read_parallel_groups(tmp_path / "missing") == ()
    (tmp_path / METADATA.name).write_text('{"parallel_group_info": {"x": {"global_ranks": "all"}}}')
    with pytest.raises(DecodeError, match="parallel_group_info"):
        read_parallel_groups(tmp_path)


# -- stage rows -----------------------------------------------------------------------------------


def _steps(values: Mapping[tuple[int, int | None], float]) -> pa.Table:
    """(rank, step) -> Computing; the other columns are Computing + column index."""
    keys = list(values)
    columns: dict[str, list[float | int | None]] = {
        "rank": [r for r, _ in keys],
        "step": [s for _, s in keys],
    }
    for i, (name, _) in enumerate(STEP_COLUMNS):
        columns[name] = [values[k] + i for k in keys]
    return pa.table(columns, schema=STEP_SCHEMA)


def test_stage_rows_take_the_max_per_step_in_first_appearance_order() -> None:
    steps = _steps(
        {(0, 2): 5.0, (0, 1): 7.0, (1, 1): 9.0, (1, 2): 1.0, (2, 1): 4.0, (3, None): 3.0, (3, 1): 8.0}
    )
    rows = stage_rows(steps, [(0, 1), (2, 5)]).to_pylist()
    got = [(r["step"], r["index"], r["Computing"], r["Preparing"]) for r in rows]
    assert got == [
        (2, "(0, 1)", 5.0, 13.0),
        (1, "(0, 1)", 9.0, 17.0),
        (1, "(2, 5)", 4.0, 12.0),
        (None, "()", 3.0, 11.0),  # rank 3 is in no stage
        (1, "()", 8.0, 16.0),
    ]
    assert stage_rows(steps, []).num_rows == 0


# -- through the reduction to the files ------------------------------------------------------------


def _result(rank: int, groups: Iterable[tuple[str, str]], described: Iterable[ParallelGroup]) -> RankResult:
    return RankResult(
        rank=rank,
        steps=_steps({(rank, 1): float(rank), (rank, 2): float(10 - rank)}),
        matrix=MATRIX_SCHEMA.empty_table(),
        groups=tuple(sorted(groups)),
        comm_ops=0,
        parallel_groups=tuple(described),
    )


def _cluster_results() -> list[RankResult]:
    """4 ranks, tp=2 x pp=2; rank 3 describes tp {2, 3} under another pg_name than rank 2 does."""
    tp = [ParallelGroup(f"tp{s}", "tp", (2 * s, 2 * s + 1)) for s in (0, 1)]
    pp = [ParallelGroup(f"pp{r}", "pp", (r, r + 2)) for r in (0, 1)]
    results = []
    for rank in range(4):
        mine = [tp[rank // 2], pp[rank % 2]]
        if rank == 3:
            mine[0] = ParallelGroup("tp1", "tp_from_rank3", (2, 3))
        results.append(_result(rank, [("collective", mine[0].group), ("p2p", mine[1].group)], mine))
    return results


def test_the_lowest_rank_describes_a_group_whatever_the_merge_order() -> None:
    results = _cluster_results()
    flat = merge(*(from_rank(r) for r in results))
    tp1 = ParallelGroup("tp1", "tp", (2, 3))
    assert flat.parallel_groups[tp1.group] == (2, tp1)
    for order in (results, results[::-1], [results[3], results[0], results[2], results[1]]):
        for fan_in in (2, 3):
            assert tree([from_rank(r) for r in order], merge, fan_in).parallel_groups == flat.parallel_groups


def test_step_trace_csv_gets_stage_rows_and_the_group_file(tmp_path: Path) -> None:
    cluster = merge(*(from_rank(r) for r in _cluster_results()))
    with outputs.write_step_trace(tmp_path, cluster).open(newline="") as f:
        rows = list(csv.reader(f))
    stage = [r for r in rows if r[1] == "stage"]
    assert [r[:4] for r in stage] == [
        ["1", "stage", "(0, 1)", "1.0"],
        ["2", "stage", "(0, 1)", "10.0"],
        ["1", "stage", "(2, 3)", "3.0"],
        ["2", "stage", "(2, 3)", "8.0"],
    ]
    assert [r[1] for r in rows[1:]] == ["rank"] * 8 + ["stage"] * 4
    document = json.loads(outputs.write_communication_group(tmp_path, cluster).read_text())
    assert sorted(document["collective"]) == [[0, 1], [2, 3]]
    assert sorted(document["p2p"]) == [[0, 2], [1, 3]]
    info = {row["group_id"]: row for row in document["comm_group_parallel_info"]}
    assert info["tp1"] == {
        "type": "collective",
        "rank_set": [2, 3],
        "group_name": str(double_hash("tp1")),
        "group_id": "tp1",
        "pg_name": "tp",
    }
    assert sorted(info) == ["pp0", "pp1", "tp0", "tp1"]
