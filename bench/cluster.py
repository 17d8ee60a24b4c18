"""Cluster benchmark: a simulated many-rank run analysed on a LocalCluster of 1 and of 2 workers.

    python bench/cluster.py --work /tmp/psclu --ranks 64 --steps 3 --workers 1 --workers 2

Each worker is its own process with one thread. Before the clock starts, every worker imports the
engine and loads the numba kernels (a fixed per-process cost, ~1 s, paid once per worker in a real
run). Reported per worker count: wall time of ``analyse_cluster`` (rank tasks, reduction tree and
the cluster files), time per rank, the speed-up over the first worker count, and the peak RSS of
every worker process (``ru_maxrss``) and of the client.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

from profstream.cluster import analyse_cluster
from profstream.simulate import SimulationConfig, simulate


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _warm() -> None:
    """Import the engine and touch the kernels, as a worker's first rank would."""
    import profstream.cluster.rank
    import profstream.engine.plan  # noqa: F401
    from profstream.engine.kernels import overlap, pairing  # noqa: F401


def run(run_dir: Path, out: Path, workers: int) -> tuple[float, float, list[float]]:
    """Wall seconds of one analysis, the workers' CPU seconds in it, and their peak RSS in MB."""
    import distributed

    shutil.rmtree(out, ignore_errors=True)
    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        client.run(_warm)
        cpu = sum(client.run(_cpu_seconds).values())
        start = time.perf_counter()
        analyse_cluster(run_dir, out, client=client)
        wall = time.perf_counter() - start
        cpu = sum(client.run(_cpu_seconds).values()) - cpu
        rss = sorted(client.run(_peak_rss_mb).values())
    return wall, cpu, rss


def simulate_ranks(run_dir: Path, ranks: int, steps: int, ops_per_step: int) -> int:
    """``ranks`` torch_npu ranks in batches of 32 (the simulator's limit is 63 devices per run).

    Each batch is its own simulated run (its own seed); the ranks of batch ``b`` are renumbered
    ``32 b ...`` in their ``profiler_info_<rank>.json``. Every batch is one ring of 32 ranks, so the
    communication groups are not a real 64-rank job; the per-rank work is.
    """
    batch = 32
    for first in range(0, ranks, batch):
        count = min(batch, ranks - first)
        config = SimulationConfig(
            chip="910B",
            steps=steps,
            ops_per_step=ops_per_step,
            framework="torch_npu",
            ranks=count,
            seed=first,
        )
        part = run_dir / f"batch{first // batch}"
        simulate(config, part)
        for info in part.glob("*_ascend_pt/profiler_info_*.json"):
            rank = int(info.stem.rsplit("_", 1)[1])
            body = json.loads(info.read_text())
            body["rank_id"] = first + rank
            info.unlink()
            (info.parent / f"profiler_info_{first + rank}.json").write_text(json.dumps(body))
    return sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/psclu"))
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ops-per-step", type=int, default=64)
    parser.add_argument("--workers", type=int, action="append", help="worker counts (default 1 and 2)")
    args = parser.parse_args()
    run_dir = args.work / "run"
    if not run_dir.exists():
        size = simulate_ranks(run_dir, args.ranks, args.steps, args.ops_per_step)
        print(f"simulated {args.ranks} ranks, {size / 2**20:.1f} MB raw in {run_dir}")
    base = None
    for workers in args.workers or [1, 2]:
        wall, cpu, rss = run(run_dir, args.work / f"out-{workers}", workers)
        base = base or wall
        print(
            f"workers={workers} wall={wall:.2f}s per-rank={wall / args.ranks * 1000:.0f}ms "
            f"speed-up={base / wall:.2f}x workers' CPU={cpu:.1f}s "
            f"worker peak RSS MB={', '.join(f'{r:.0f}' for r in rss)} client peak RSS MB={_peak_rss_mb():.0f}"
        )


if __name__ == "__main__":
    main()
