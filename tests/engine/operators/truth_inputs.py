"""A small simulated collection and operator inputs built from its truth tables.

The ``tasks`` and ``comm`` streams are built from the simulator's ``tasks.parquet`` (not from the
task-pairing and HCCL operators), so the step and overlap tests do not depend on those: truth
``task_type`` is the runtime (host) task type, ``ge_task_type`` the GE task type (``-`` = none), and
an all-reduce's interval is its first task start to its last task end (as ``truth.py`` defines it).

The step-trace tags are profiler-trace tasks (``PROFILER_TRACE_EX``, not a kernel type) but the
simulator writes no device log for them; :func:`task_batches` adds them as zero-length tasks at the
tag times so that Free's window ``[begin, end]`` reaches from the first step start to the last step
end, as truth's per-step Free (window minus busy) assumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import profstream
from profstream.engine.discovery import Profile
from profstream.engine.feeds import FeedSet
from profstream.engine.runtime import Feed, at
from profstream.engine.schema import TABLES, conform
from profstream.simulate import SimulationConfig, simulate
from profstream.simulate.config import Chip, Framework
from profstream.simulate.truth import STEP_TAGS


@dataclass(frozen=True)
class Simulated:
    collection: Profile
    tasks: pa.Table  # truth tasks.parquet
    steps: pa.Table  # truth steps.parquet, by iteration


def simulated(root: Path, chip: Chip = "910B", steps: int = 4, framework: Framework = "none") -> Simulated:
    out, truth = root / "out", root / "truth"
    config = SimulationConfig(chip=chip, steps=steps, ops_per_step=64, seed=5, framework=framework)
    simulate(config, out, truth)
    (collection,) = profstream.open(out).collections
    steps_table = pq.read_table(truth / "steps.parquet").sort_by("iteration")
    return Simulated(collection, pq.read_table(truth / "tasks.parquet"), steps_table)


def ts_track_feed(sim: Simulated) -> Feed:
    return FeedSet(sim.collection).feed(sim.collection.device(0), "ts_track", name=at("ts_track", 0))


def task_batches(sim: Simulated, rows_per_batch: int = 97) -> list[pa.RecordBatch]:
    """Truth tasks plus zero-length tag tasks, in start order, as ``tasks`` batches."""
    t = sim.tasks
    ge = pc.cast(t["ge_task_type"], pa.string())
    tags = np.concatenate([sim.steps[name].to_numpy() for name in STEP_TAGS])
    n, m = t.num_rows, tags.size
    table = pa.Table.from_batches(
        [
            conform(
                TABLES["tasks"],
                {
                    "device_id": pa.array(np.zeros(n + m, np.int32)),
                    "stream_id": pa.array(
                        np.concatenate([t["stream_id"].to_numpy(), np.full(m, 2)]), pa.int32()
                    ),
                    "start_ns": pa.array(np.concatenate([t["start_ns"].to_numpy(), tags])),
                    "end_ns": pa.array(np.concatenate([t["end_ns"].to_numpy(), tags])),
                    "host_task_type": pa.concat_arrays(
                        [
                            pc.cast(t["task_type"], pa.string()).combine_chunks(),
                            pa.array(["PROFILER_TRACE_EX"] * m),
                        ]
                    ),
                    "task_type": pa.concat_arrays(
                        [pc.if_else(pc.equal(ge, "-"), None, ge).combine_chunks(), pa.nulls(m, pa.string())]
                    ),
                    "op_name": pa.concat_arrays(
                        [pc.cast(t["op_name"], pa.string()).combine_chunks(), pa.nulls(m, pa.string())]
                    ),
                    "op_type": pa.concat_arrays(  # an op type where the truth has a GE task type
                        [pc.if_else(pc.equal(ge, "-"), None, ge).combine_chunks(), pa.nulls(m, pa.string())]
                    ),
                },
            )
        ]
    ).sort_by("start_ns")
    return table.to_batches(max_chunksize=rows_per_batch)


def comm_ops(sim: Simulated) -> pa.Table:
    """One row per all-reduce: (iteration, op name, first task start, last task end), by start."""
    t = sim.tasks
    hccl = t.filter(pc.equal(pc.cast(t["ge_task_type"], pa.string()), "HCCL"))
    hccl = hccl.set_column(
        hccl.schema.get_field_index("op_name"), "op_name", pc.cast(hccl["op_name"], pa.string())
    )
    grouped = hccl.group_by(["iteration", "op_name"]).aggregate([("start_ns", "min"), ("end_ns", "max")])
    return grouped.rename_columns(["iteration", "op_name", "start_ns", "end_ns"]).sort_by("start_ns")


def comm_batches(sim: Simulated, rows_per_batch: int = 3) -> list[pa.RecordBatch]:
    ops = comm_ops(sim)
    batch = conform(
        TABLES["comm"],
        {
            "device_id": pa.array(np.zeros(ops.num_rows, np.int32)),
            "op_name": ops["op_name"],
            "op_type": pa.array(["HcomAllReduce"] * ops.num_rows),
            "start_ns": ops["start_ns"],
            "end_ns": ops["end_ns"],
        },
    )
    return pa.Table.from_batches([batch]).to_batches(max_chunksize=rows_per_batch)


def profiler_steps(sim: Simulated) -> pa.RecordBatch:
    """The ``ProfilerStep#<n>`` ops of the decoded ``torch.op_range`` file, as top-level ``ops`` rows."""
    framework = sim.collection.framework
    assert framework is not None
    ops = FeedSet(sim.collection).table(framework, "torch_op_range")
    assert ops is not None
    steps = ops.filter(pc.starts_with(pc.cast(ops["name"], pa.string()), "ProfilerStep#"))
    columns = {"name": steps["name"], "start_ns": steps["start_ns"], "end_ns": steps["end_ns"]}
    return conform(TABLES["ops"], columns | {"kind": pa.array(["cpu_op"] * steps.num_rows)})


def launched_tasks(sim: Simulated) -> pa.RecordBatch:
    """Truth tasks with ``launch_ns`` = the time of their host ``task_track`` record, a connection id,
    and the truth's op name and task types, as the host join gives them."""
    track = FeedSet(sim.collection).table(sim.collection.host, "task_track")
    assert track is not None
    keys = ["stream_id", "task_id", "batch_id"]
    launches = track.select([*keys, "time_ns"]).rename_columns([*keys, "launch_ns"])
    texts = ["op_name", "task_type", "ge_task_type"]
    joined = sim.tasks.select([*keys, "start_ns", "end_ns", "iteration", *texts]).join(launches, keys)
    ge_type = joined["ge_task_type"].cast(pa.string())
    return conform(
        TABLES["tasks"],
        {
            "device_id": pa.array(np.zeros(joined.num_rows, np.int32)),
            "start_ns": joined["start_ns"],
            "end_ns": joined["end_ns"],
            "launch_ns": joined["launch_ns"],
            "connection_id": pa.array(np.arange(joined.num_rows) + 1),
            "op_name": joined["op_name"],
            "task_type": pc.if_else(pc.equal(ge_type, "-"), None, ge_type),
            "host_task_type": joined["task_type"],
        },
    )
