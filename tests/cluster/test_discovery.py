"""Rank discovery: rank ids from profiler_info / info.json, duplicates and missing ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profstream.cluster.discovery import find_ranks
from profstream.errors import InputPathError


def _run(root: Path, name: str, *, info_name: str | None = None, rank_field: int | None = None) -> Path:
    """A torch_npu run dir with one PROF dir holding a host dir (enough to count as raw)."""
    run = root / name
    (run / "PROF_000001_20250101000000000_ABC" / "host").mkdir(parents=True)
    if info_name is not None:
        body = {} if rank_field is None else {"rank_id": rank_field}
        (run / info_name).write_text(json.dumps(body))
    return run


def test_rank_from_the_file_name_then_the_field(tmp_path: Path) -> None:
    a = _run(tmp_path, "a_ascend_pt", info_name="profiler_info_3.json", rank_field=7)
    b = _run(tmp_path / "node2", "b_ascend_pt", info_name="profiler_info.json", rank_field=1)
    ranks = find_ranks(tmp_path)
    assert [(r.rank, r.path, r.kind) for r in ranks] == [(1, b, "raw"), (3, a, "raw")]
    assert ranks[1].rank_source.endswith("profiler_info_3.json")


def test_rank_from_info_json_of_a_plain_prof_dir(tmp_path: Path) -> None:
    prof = tmp_path / "PROF_000001_20250101000000000_XYZ"
    (prof / "host").mkdir(parents=True)
    (prof / "host" / "info.json").write_text(json.dumps({"rank_id": 5}))
    (ranks,) = find_ranks(tmp_path)
    assert (ranks.rank, ranks.path) == (5, prof)


def test_exported_only_dir(tmp_path: Path) -> None:
    run = tmp_path / "x_ascend_pt"
    (run / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (run / "profiler_info_2.json").write_text("{}")
    (found,) = find_ranks(tmp_path)
    assert (found.rank, found.kind) == (2, "exported")


def test_duplicate_rank_is_an_error_naming_both(tmp_path: Path) -> None:
    a = _run(tmp_path, "a_ascend_pt", info_name="profiler_info_0.json")
    b = _run(tmp_path, "b_ascend_pt", info_name="profiler_info_0.json")
    with pytest.raises(InputPathError, match="rank 0 appears twice") as err:
        find_ranks(tmp_path)
    assert str(a) in str(err.value) and str(b) in str(err.value)


def test_some_ranks_without_id_is_an_error(tmp_path: Path) -> None:
    _run(tmp_path, "a_ascend_pt", info_name="profiler_info_0.json")
    lost = _run(tmp_path, "b_ascend_pt", info_name="profiler_info.json")
    with pytest.raises(InputPathError, match="no rank id") as err:
        find_ranks(tmp_path)
    assert str(lost) in str(err.value)


def test_no_rank_ids_at_all_numbers_in_path_order(tmp_path: Path) -> None:
    b = _run(tmp_path, "b_ascend_pt")
    a = _run(tmp_path, "a_ascend_pt", info_name="profiler_info.json", rank_field=-1)
    assert [(r.rank, r.path, r.rank_source) for r in find_ranks(tmp_path)] == [
        (0, a, "path order"),
        (1, b, "path order"),
    ]


def test_nothing_to_analyse(tmp_path: Path) -> None:
    (tmp_path / "empty_ascend_pt").mkdir()
    with pytest.raises(InputPathError, match="no rank directories"):
        find_ranks(tmp_path)
    with pytest.raises(InputPathError, match="not a directory"):
        find_ranks(tmp_path / "missing")
