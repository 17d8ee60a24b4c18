"""Multi-rank analysis on Dask: one rank per task, tree-shaped reductions, msprof-analyze's cluster files.

:func:`analyse_cluster` is the library entry point (``client=None`` runs in this process);
``profstream cluster`` (:mod:`.command`) is the command. Dask is needed only for a client: install
the extra ``profstream[cluster]``.
"""

from profstream.cluster.discovery import RankDir, find_ranks
from profstream.cluster.runner import ClusterReport, analyse_cluster

__all__ = ["ClusterReport", "RankDir", "analyse_cluster", "find_ranks"]
