"""``profstream cluster DIR --output OUT [--scheduler ADDRESS | --workers N] [--layout ...]``.

Dask is the optional extra ``profstream[cluster]``; it is imported only here, when the command
runs, and its absence is a usage error (exit 2) naming the extra. Without ``--scheduler`` a
``LocalCluster`` of ``--workers`` single-threaded worker processes runs on this machine (default:
``cluster.workers`` of the settings, 2); with it, the ranks run on that scheduler's workers, which
must see ``DIR`` and ``OUT`` at the same paths (a shared filesystem).

``--layout``: the cluster files and the Parquet dataset are always written; ``parquet`` (the default)
asks for nothing more. ``torch_npu`` / ``msprof`` also export each raw rank in that layout to
``OUT/ranks/rank{N}/`` (see :mod:`.runner`).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from types import ModuleType

from profstream.engine.layouts import Layout
from profstream.errors import ConfigError

EXTRA_MESSAGE = "profstream cluster needs the 'cluster' extra: pip install 'profstream[cluster]'"
DEFAULT_WORKERS = 2


def import_distributed() -> ModuleType:
    """``dask.distributed``, or a ConfigError (exit 2) that names the extra."""
    try:
        return importlib.import_module("distributed")
    except ImportError as err:
        raise ConfigError(EXTRA_MESSAGE) from err


def run(args: argparse.Namespace) -> int:
    """The command's handler (cli.py dispatches ``cluster`` here)."""
    distributed = import_distributed()
    from profstream.cluster.runner import analyse_cluster
    from profstream.cluster.slow_rank import render

    output = Path(args.output)
    layout: Layout = args.layout or "parquet"
    if args.scheduler:
        with distributed.Client(args.scheduler) as client:
            report = analyse_cluster(args.dir, output, client=client, layout=layout)
    else:
        workers = args.workers or DEFAULT_WORKERS
        with (
            distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as local,
            distributed.Client(local) as client,
        ):
            report = analyse_cluster(args.dir, output, client=client, layout=layout)
    print(f"analysed {len(report.ranks)} ranks into {output}")
    for path in report.files:
        print(f"  {path}")
    print(render(report.slow_rank))
    return 0
