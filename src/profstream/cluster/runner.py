"""Running a cluster analysis: rank tasks, the reduction tree, the cluster files.

With a ``dask.distributed`` client, each rank is one task (:func:`~profstream.cluster.rank.analyse_rank`
then :func:`~profstream.cluster.reduce.from_rank` on the worker) and the partials are merged on the
workers in a fan-in tree (:data:`~profstream.cluster.reduce.DEFAULT_FAN_IN` at a time), so no node,
scheduler or client, ever holds more than ``fan_in`` partials at once; only the root comes back to the
client, which writes the files. Without a client the same functions run in this process, in the same
tree: the two give identical files (tests/cluster check it).

Outputs under ``output``: the four msprof-analyze files (:mod:`.outputs`), ``slow_rank.json``
(:mod:`.slow_rank`) and the Parquet dataset ``parquet/{table}/rank={rank}/part-0.parquet``. With
``layout`` ``msprof`` or ``torch_npu`` every raw rank is also exported in that layout (timeline and
summary, :func:`profstream.export.export`) to ``ranks/rank{rank}/``, in the same rank task: one more
pass over that rank's raw data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profstream import events
from profstream.cluster import outputs
from profstream.cluster.discovery import RankDir, find_ranks
from profstream.cluster.rank import analyse_rank
from profstream.cluster.reduce import DEFAULT_FAN_IN, Partial, from_rank, merge, tree
from profstream.cluster.slow_rank import slow_ranks
from profstream.engine.layouts import Layout
from profstream.export import export

DATASET_DIR = "parquet"
SLOW_RANK_JSON = "slow_rank.json"


@dataclass(frozen=True, slots=True)
class ClusterReport:
    """What a cluster run produced."""

    ranks: tuple[RankDir, ...]
    files: tuple[Path, ...]
    slow_rank: dict[str, Any] = field(default_factory=dict)


RANKS_DIR = "ranks"


def rank_partial(rank_dir: RankDir, dataset: Path, layout: Layout = "parquet") -> Partial:
    """The whole per-rank task: run the rank (and export it in ``layout``), keep its small result."""
    partial = from_rank(analyse_rank(rank_dir, dataset))
    if layout != "parquet" and rank_dir.kind == "raw":
        exports = dataset.parent / RANKS_DIR / f"rank{rank_dir.rank}"
        export(rank_dir.path, kind="both", layout=layout, output=exports)
    return partial


def analyse_cluster(
    root: Path | str,
    output: Path | str,
    *,
    client: Any = None,
    fan_in: int = DEFAULT_FAN_IN,
    layout: Layout = "parquet",
) -> ClusterReport:
    """Analyse every rank under ``root`` into ``output`` (see the module docstring).

    ``client`` is a ``distributed.Client``; None runs everything in this process.
    """
    output = Path(output)
    dataset = output / DATASET_DIR
    ranks = find_ranks(root)
    log = events.get_logger(component="cluster", output=str(output))
    log.info(events.CLUSTER_STARTED, ranks=len(ranks), distributed=client is not None)
    if client is None:
        cluster = tree([rank_partial(r, dataset, layout) for r in ranks], merge, fan_in)
    else:
        cluster = _on_dask(client, ranks, dataset, fan_in, layout)
    return write_outputs(output, cluster, ranks)


def _on_dask(client: Any, ranks: Sequence[RankDir], dataset: Path, fan_in: int, layout: Layout) -> Partial:
    """Rank tasks, then merges of ``fan_in`` futures at a time, all on the workers."""
    level = [client.submit(rank_partial, r, dataset, layout, key=f"rank-{r.rank}", pure=False) for r in ranks]
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [
            client.submit(merge, *level[i : i + fan_in], key=f"merge-{depth}-{i // fan_in}", pure=False)
            for i in range(0, len(level), fan_in)
        ]
    result: Partial = level[0].result()
    return result


def write_outputs(output: Path, cluster: Partial, ranks: Sequence[RankDir]) -> ClusterReport:
    """The cluster files and the slow-rank report of a reduced cluster."""
    report = slow_ranks(cluster.steps)
    files = (
        outputs.write_step_trace(output, cluster),
        outputs.write_communication(output, cluster, output / DATASET_DIR),
        outputs.write_matrix(output, cluster),
        outputs.write_communication_group(output, cluster),
        outputs.write_json(output / SLOW_RANK_JSON, report),
    )
    log = events.get_logger(component="cluster", output=str(output))
    for path in files:
        log.info(events.FILE_WRITTEN, file=str(path))
    return ClusterReport(ranks=tuple(ranks), files=files, slow_rank=report)
