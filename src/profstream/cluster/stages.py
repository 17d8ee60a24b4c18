"""Pipeline stages of a cluster: the ``stage`` rows of ``cluster_step_trace_time.csv`` and
``communication_group.json`` (framework_outputs.md §4d).

Communication groups are msprof-analyze's (MPA ``communication_group/base_communication_group.py``):
the ranks that report ops of a group (the op-name suffix after ``@``) in their ``communication.json`` /
``communication_matrix.json``, split into ``p2p`` and ``collective``. Each rank's ``profiler_metadata.json``
(torch_npu, beside ``ASCEND_PROFILER_OUTPUT``) names them in ``parallel_group_info``: ``{group id:
{"group_name": pg_name, "group_rank", "global_ranks"}}``, where the group id is HCCL's communicator
id and the group's name in ``communication.json`` is :func:`double_hash` of it. The first rank (lowest
rank id) that describes a group wins; a described group's rank set is its ``global_ranks``.

Stages, two rules (which one msprof-analyze applies depends on its version):

* **pg_names known** (msprof-analyze 26.x, MPA ``analysis/stage_group_analysis.py``): the p2p groups whose
  pg_name starts with ``pp`` (any case) are pipeline links, unioned into pipelines; every collective
  group that holds at most one rank of each pipeline belongs to one stage, and stages are the connected
  components of those groups, sorted by their smallest rank. No ``pp`` p2p group: no stages.
* **no pg_name known** (no ``parallel_group_info``, or none of its ids hashes to a reported group):
  older msprof-analyze (``analysis/step_trace_time_analysis.py`` before stage_group_analysis existed;
  realdata/msinsight-torchnpu-910b ``cluster_analysis_output`` is its output) takes every p2p group as a
  stage. profstream does the same, with the p2p groups ordered by (smallest rank, ranks), where
  msprof-analyze keeps the order it first met them in. Choice: 26.x writes no stage rows here (it
  finds no ``pp`` group); profstream keeps what the older versions wrote, since without pg_names the
  p2p groups are the only pipeline information there is.

Stage rows (MPA ``analyze_step_time``, ``get_max_data_row``): a rank belongs to the first stage that
holds it; for each (step, stage), every column is the max over the stage's rank rows; the rows come
in the order their (step, stage) first appears among the rank rows. The ``Index`` is the stage's ranks
as Python prints a tuple, ascending (``"(0, 1, 2, 3)"``; msprof-analyze prints a set's iteration
order, which is ascending for the small rank ids of a cluster). With stages, ranks in none form one
more stage, ``"()"``, as in msprof-analyze.

Where profstream differs: msprof-analyze unions the pipeline links in one pass over the links sorted
by smallest rank, so a chain of links met out of order can leave two overlapping pipelines; profstream
takes the connected components (the same result whenever each pipeline is one ``pp`` group, as
Megatron creates them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from profstream.errors import DecodeError

METADATA_JSON = "profiler_metadata.json"
COMMUNICATION_GROUP_JSON = "communication_group.json"
#: the p2p groups of pipeline parallelism (MPA ``extract_infos``: pg_name, lower-cased, starts with it)
PIPELINE_PREFIX = "pp"
P2P, COLLECTIVE = "p2p", "collective"
#: the Index of the ranks in no stage (Python's ``str(tuple())``)
NO_STAGE = "()"
_MASK32 = 0xFFFFFFFF


def double_hash(text: str) -> int:
    """The 64-bit name HCCL gives a communicator id: two 32-bit polynomial hashes (primes 29 and 131)
    side by side (MPA ``common_func/utils.py`` ``double_hash``)."""
    high = low = 0
    for char in text:
        high = (high * 29 + ord(char)) & _MASK32
        low = (low * 131 + ord(char)) & _MASK32
    return (high << 32) | low


@dataclass(frozen=True, slots=True)
class ParallelGroup:
    """One entry of ``parallel_group_info``."""

    group_id: str  # HCCL's communicator id
    pg_name: str  # the framework's name for it: "pp", "tp", "dp", "default_group", ...
    global_ranks: tuple[int, ...]

    @property
    def group(self) -> str:
        """The group's name in ``communication.json``."""
        return str(double_hash(self.group_id))


@dataclass(frozen=True, slots=True)
class CommGroup:
    """A row of ``comm_group_parallel_info`` (MPA ``analyze_parallel_group_info``)."""

    type: str  # p2p / collective
    members: tuple[int, ...]  # the ranks that report the group, ascending
    rank_set: tuple[int, ...]  # its global_ranks when described, else the members
    group_name: str
    group_id: str  # "" when no rank describes the group
    pg_name: str


class _GroupInfo(msgspec.Struct):
    group_name: str = ""
    global_ranks: list[int] = msgspec.field(default_factory=list)


class _Metadata(msgspec.Struct):
    parallel_group_info: dict[str, _GroupInfo] = msgspec.field(default_factory=dict)


def read_parallel_groups(rank_path: Path) -> tuple[ParallelGroup, ...]:
    """``parallel_group_info`` of the ``profiler_metadata.json`` in a rank directory (none when absent)."""
    path = rank_path / METADATA_JSON
    if not path.is_file():
        return ()
    try:
        metadata = msgspec.json.decode(path.read_bytes(), type=_Metadata)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        msg = f"expected parallel_group_info as {{group id: {{group_name, global_ranks}}}}: {err}"
        raise DecodeError(msg, path=path) from err
    return tuple(
        ParallelGroup(group_id, info.group_name, tuple(info.global_ranks))
        for group_id, info in metadata.parallel_group_info.items()
    )


def comm_groups(
    groups: Mapping[tuple[str, str], Iterable[int]], described: Mapping[str, ParallelGroup]
) -> list[CommGroup]:
    """The communication groups ((kind, group) -> reporting ranks), named by ``described`` (group -> its
    ``parallel_group_info`` entry); collective groups first, each kind by group name."""
    rows = []
    for (kind, group), members in sorted(groups.items()):
        info = described.get(group)
        reporting = tuple(sorted(set(members)))
        rows.append(
            CommGroup(
                type=kind,
                members=reporting,
                rank_set=tuple(sorted(set(info.global_ranks))) if info and info.global_ranks else reporting,
                group_name=group,
                group_id=info.group_id if info is not None else "",
                pg_name=info.pg_name if info is not None else "",
            )
        )
    return rows


def find_stages(groups: Sequence[CommGroup]) -> list[tuple[int, ...]]:
    """The stages, by the rule the groups allow (see the module docstring)."""
    if any(group.pg_name for group in groups):
        return _pipeline_stages(groups)
    p2p = {group.members for group in groups if group.type == P2P}
    return sorted(p2p, key=lambda ranks: (ranks[0], ranks))


def _pipeline_stages(groups: Sequence[CommGroup]) -> list[tuple[int, ...]]:
    links = [
        set(g.rank_set) for g in groups if g.type == P2P and g.pg_name.lower().startswith(PIPELINE_PREFIX)
    ]
    pipelines = _components(links)
    if not pipelines:
        return []
    within = [
        set(g.rank_set)
        for g in groups
        if g.type == COLLECTIVE and all(len(pipeline.intersection(g.rank_set)) <= 1 for pipeline in pipelines)
    ]
    return sorted(tuple(sorted(stage)) for stage in _components(within))


def _components(sets: Iterable[set[int]]) -> list[set[int]]:
    """Connected components of overlapping rank sets (empty sets are none)."""
    found: list[set[int]] = []
    for ranks in sets:
        merged = set(ranks)
        rest = []
        for component in found:
            if component & merged:
                merged |= component
            else:
                rest.append(component)
        found = [*rest, merged] if merged else rest
    return found


def stage_rows(steps: pa.Table, stages: Sequence[tuple[int, ...]]) -> pa.Table:
    """``step``, ``index`` and the max of every other column of ``steps`` (rank rows: ``rank``, ``step``,
    values) per (step, stage), in first-appearance order; no rows without stages."""
    values = [name for name in steps.column_names if name not in ("rank", "step")]
    if not stages:
        steps = steps.slice(0, 0)
    first: dict[int, str] = {}
    for stage in stages:
        for rank in stage:
            first.setdefault(rank, str(stage))
    index = pa.array([first.get(rank, NO_STAGE) for rank in steps["rank"].to_pylist()], pa.string())
    grouped = (
        steps.append_column("index", index)
        .group_by(["step", "index"], use_threads=False)
        .aggregate([(name, "max") for name in values])
    )
    return grouped.select(["step", "index", *(f"{name}_max" for name in values)]).rename_columns(
        ["step", "index", *values]
    )


def communication_group_json(groups: Sequence[CommGroup]) -> dict[str, Any]:
    """``communication_group.json`` (MPA ``communication_json_group.py`` ``dump_data``)."""
    return {
        COLLECTIVE: [list(g.members) for g in groups if g.type == COLLECTIVE],
        P2P: [list(g.members) for g in groups if g.type == P2P],
        "comm_group_parallel_info": [
            {
                "type": g.type,
                "rank_set": list(g.rank_set),
                "group_name": g.group_name,
                "group_id": g.group_id,
                "pg_name": g.pg_name,
            }
            for g in groups
        ],
    }
