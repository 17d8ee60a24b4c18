"""Synthetic PROF_XXX collections in the real raw formats, with their ground truth.

:func:`simulate` writes, for each rank, a PROF_XXX directory (inside a
``*_ascend_pt`` directory with FRAMEWORK files when the framework is
torch_npu) whose raw files are produced by the codecs' ``encode``, sliced and
marked as the collector does; with ``truth_dir`` it also writes Parquet truth
tables (:mod:`profstream.simulate.truth`). Generation is vectorised per chunk
of steps, so memory stays bounded and large outputs (``target_bytes``) are
cheap to make. :func:`live` writes the same collection over time, at a given
rate and with the collector's storage_limit aging (:mod:`profstream.simulate.live`);
:mod:`profstream.simulate.run` holds the per-rank machinery both share.

Families written: device ``hwts``, ``aicore`` (910A) or ``stars_soc``,
``ffts_profile``, ``lpm_freq`` (910B); ``ts_track``, ``npu_mem``,
``npu_module_mem``; host ``api_event``, ``task_track``, ``node_basic_info``,
``hccl_op_info``, ``memcpy_info``, ``expand_stream_spec`` (910B),
``tensor_info``, ``hccl_info``, ``task_memory_info``, ``graph_id_map``,
``hash_dic``, ``type_info_dic``; framework ``torch_op_range``,
``torch_op_mark``, ``torch_memory_usage`` and, unless switched off
(``with_stack``, ``gc_detect``), ``torch_python_tracer_func``,
``torch_python_tracer_hash``, ``torch_gc_record``
(:mod:`profstream.simulate.python_tracer`).
"""

from __future__ import annotations

import time
from pathlib import Path

from profstream.simulate.config import SimulationConfig
from profstream.simulate.live import LiveResult, live
from profstream.simulate.records import Names
from profstream.simulate.run import FamilyCount, RankRun, SimulationResult, fresh_out_dir, result_of
from profstream.simulate.truth import Truth
from profstream.simulate.workload import build_template

__all__ = ["FamilyCount", "LiveResult", "SimulationConfig", "SimulationResult", "live", "simulate"]


def simulate(
    config: SimulationConfig, out_dir: str | Path, truth_dir: str | Path | None = None
) -> SimulationResult:
    """Write the collection ``config`` describes under ``out_dir`` (and its truth under ``truth_dir``).

    Without ``target_bytes`` every device runs ``config.steps`` steps; with it,
    steps are added a chunk at a time until each rank has written about
    ``target_bytes / ranks`` bytes of raw data. The output is a function of
    ``config`` alone: the same config gives byte-identical directories.
    """
    started = time.perf_counter()
    out = fresh_out_dir(out_dir)
    template = build_template(config)
    names = Names.of(template)
    truth = None if truth_dir is None else Truth(Path(truth_dir), template)
    budget = None if config.target_bytes is None else -(-config.target_bytes // config.ranks)
    runs = []
    for rank in range(config.ranks):
        run = RankRun(config, template, names, rank, out, truth)
        run.run(budget)
        runs.append(run)
    return result_of(out, runs, truth, started)
