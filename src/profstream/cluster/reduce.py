"""The tree reduction of rank results into one :class:`Partial`.

:func:`merge` combines any number of partials (ranks in any order) into one; it is associative and
its result does not depend on how the ranks were grouped, so a fan-in tree of merges
(:func:`tree`) gives the same cluster as one sequential pass. What a partial holds, and why it stays
small:

* ``steps``: the ranks' ``step_trace_time`` rows (ranks x steps: the size of
  ``cluster_step_trace_time.csv`` itself);
* ``matrix``: communication-matrix link sums per (step, kind, op, group, src, dst) of local ranks,
  summed over the ranks that reported them (msprof-analyze ``CommMatrixAnalysis.merge_same_links``),
  so it grows with the number of links, not with ranks x ops;
* ``self_links``: (group, local rank, rank) for every ``i-i`` link, which maps local ranks to
  global ones;
* ``groups``: the ranks of each (kind, group) — the communication groups of msprof-analyze
  (``collective_group_dict`` / ``p2p_group_dict``);
* ``parallel_groups``: group name -> (rank, entry) of the lowest rank whose ``profiler_metadata.json``
  describes the group (msprof-analyze keeps the first rank's entry), one per group.

The per-op communication entries are not in a partial: they stay in the rank's Parquet partition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from profstream.cluster.rank import MATRIX_SCHEMA, STEP_SCHEMA, RankResult, concat
from profstream.cluster.stages import ParallelGroup

MATRIX_KEYS = ("step", "kind", "op", "group", "src", "dst")
#: the reduced matrix: link sums without the reporting rank
LINK_SCHEMA = pa.schema(
    [
        *(MATRIX_SCHEMA.field(k) for k in MATRIX_KEYS),
        pa.field("size_mb", pa.float64()),
        pa.field("time_ms", pa.float64()),
        pa.field("transport", pa.string()),
        pa.field("op_name", pa.string()),
    ]
)
SELF_LINK_SCHEMA = pa.schema([("group", pa.string()), ("local", pa.int64()), ("rank", pa.int64())])
#: merges per tree node
DEFAULT_FAN_IN = 8

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Partial:
    """The reduction of some ranks (see the module docstring)."""

    ranks: tuple[int, ...]
    steps: pa.Table  # STEP_SCHEMA, sorted by (rank, step)
    matrix: pa.Table  # LINK_SCHEMA
    self_links: pa.Table  # SELF_LINK_SCHEMA
    groups: dict[tuple[str, str], frozenset[int]]
    comm_ops: int
    parallel_groups: dict[str, tuple[int, ParallelGroup]]

    def described(self) -> dict[str, ParallelGroup]:
        """Group name -> its ``parallel_group_info`` entry."""
        return {group: entry for group, (_, entry) in self.parallel_groups.items()}


def from_rank(result: RankResult) -> Partial:
    """A rank's result as a partial of one rank."""
    matrix = result.matrix
    is_self = pc.equal(matrix["src"], matrix["dst"])
    self_links = (
        matrix.filter(is_self).select(["group", "src", "rank"]).rename_columns(SELF_LINK_SCHEMA.names)
    )
    return Partial(
        ranks=(result.rank,),
        steps=result.steps,
        matrix=_sum_links(matrix.select(list(LINK_SCHEMA.names))),
        self_links=self_links.cast(SELF_LINK_SCHEMA),
        groups={group: frozenset([result.rank]) for group in result.groups},
        comm_ops=result.comm_ops,
        parallel_groups={entry.group: (result.rank, entry) for entry in reversed(result.parallel_groups)},
    )


def merge(*parts: Partial) -> Partial:
    """One partial of all ``parts`` (ranks must be disjoint)."""
    parts = tuple(sorted(parts, key=lambda p: p.ranks[0]))
    ranks = tuple(sorted(r for p in parts for r in p.ranks))
    if len(set(ranks)) != len(ranks):
        msg = f"rank results overlap: {ranks}"
        raise ValueError(msg)
    groups: dict[tuple[str, str], frozenset[int]] = {}
    described: dict[str, tuple[int, ParallelGroup]] = {}
    for part in parts:
        for group, members in part.groups.items():
            groups[group] = groups.get(group, frozenset()) | members
        for name, (rank, entry) in part.parallel_groups.items():
            if name not in described or rank < described[name][0]:
                described[name] = (rank, entry)
    steps = concat((p.steps for p in parts), STEP_SCHEMA)
    return Partial(
        ranks=ranks,
        steps=steps.sort_by([("rank", "ascending"), ("step", "ascending")]),
        matrix=_sum_links(concat((p.matrix for p in parts), LINK_SCHEMA)),
        self_links=concat((p.self_links for p in parts), SELF_LINK_SCHEMA),
        groups=dict(sorted(groups.items())),
        comm_ops=sum(p.comm_ops for p in parts),
        parallel_groups=dict(sorted(described.items())),
    )


def _sum_links(links: pa.Table) -> pa.Table:
    """Sizes and times summed per link key; transport and op name of the last (highest) rank."""
    if links.num_rows == 0:
        return LINK_SCHEMA.empty_table()
    summed = links.group_by(list(MATRIX_KEYS), use_threads=False).aggregate(
        [("size_mb", "sum"), ("time_ms", "sum"), ("transport", "last"), ("op_name", "last")]
    )
    summed = summed.rename_columns([*MATRIX_KEYS, *LINK_SCHEMA.names[len(MATRIX_KEYS) :]])
    return summed.select(list(LINK_SCHEMA.names)).sort_by([(k, "ascending") for k in MATRIX_KEYS])


def tree(items: Sequence[T], combine: Callable[..., T], fan_in: int = DEFAULT_FAN_IN) -> T:
    """Combine ``items`` level by level, ``fan_in`` at a time (the sequential twin of the Dask tree)."""
    level = list(items)
    if not level:
        msg = "nothing to reduce"
        raise ValueError(msg)
    while len(level) > 1:
        level = [combine(*level[i : i + fan_in]) for i in range(0, len(level), fan_in)]
    return level[0]
