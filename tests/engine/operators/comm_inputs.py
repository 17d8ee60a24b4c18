"""Hand-built ``comm`` / ``comm_tasks`` batches for the communication analysis tests.

Two ops of device 0 (expected values derived by hand in the tests from msprof's rules):

* ``hcom_allReduce__123_0_1`` (group g1, [1000, 11000)): a Notify_Wait, an HCCS copy 0->1, a Notify_Wait
  and an on-chip copy 0->0 on plane 0 (master), an HCCS copy 0->2 on plane 1 (not master);
* ``hcom_send__123_1_1`` (group g1, [20000, 30000)): two RDMA payload sends 0->8, the closing
  ``RDMASend`` and ``Notify_Wait`` (no barrier: jump 3).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from profstream.engine.schema import TABLES, conform

ALL_REDUCE, SEND = "hcom_allReduce__123_0_1", "hcom_send__123_1_1"

#: (op, plane, name, start, end, src, dst, transport, size, link, master)
TASKS: list[tuple[Any, ...]] = [
    (ALL_REDUCE, 0, "Notify_Wait", 1000, 3000, 0, 1, "SDMA", 4, "HCCS", True),
    (ALL_REDUCE, 0, "Memcpy", 3000, 5000, 0, 1, "SDMA", 2_000_000, "HCCS", True),
    (ALL_REDUCE, 1, "Memcpy", 3500, 4500, 0, 2, "SDMA", 2_000_000, "HCCS", False),
    (ALL_REDUCE, 0, "Notify_Wait", 5000, 6000, 0, 1, "SDMA", 4, "HCCS", True),
    (ALL_REDUCE, 0, "Memcpy", 6000, 6500, 0, 0xFFFF_FFFF, "SDMA", 1_000_000, "OnChip", True),
    (SEND, 0, "RDMASend", 20000, 20100, 0, 8, "RDMA", 3_000_000, "RoCE", True),
    (SEND, 0, "RDMASend", 20100, 20200, 0, 8, "RDMA", 1_000_000, "RoCE", True),
    (SEND, 0, "RDMASend", 20200, 20300, 0, 8, "RDMA", 4, "RoCE", True),
    (SEND, 0, "Notify_Wait", 20300, 25000, 0, 8, "RDMA", 4, "RoCE", True),
]


def comm_ops(names: tuple[str, ...] = (ALL_REDUCE, SEND)) -> pa.RecordBatch:
    """The ``comm`` rows of ``names``."""
    spans = {ALL_REDUCE: (1000, 11000, "HcomAllReduce"), SEND: (20000, 30000, "HcomSend")}
    return conform(
        TABLES["comm"],
        {
            "device_id": pa.array([0] * len(names), pa.int32()),
            "op_name": list(names),
            "op_type": [spans[n][2] for n in names],
            "group_name": ["g1"] * len(names),
            "start_ns": [spans[n][0] for n in names],
            "end_ns": [spans[n][1] for n in names],
        },
    )


def comm_tasks(
    names: tuple[str, ...] = (ALL_REDUCE, SEND),
    *,
    master: bool = True,
    rdma_type: list[str | None] | None = None,
) -> pa.RecordBatch:
    """The ``comm_tasks`` rows of ops ``names`` (in start order); the ``master`` flags are null unless
    asked for, ``rdma_type`` null unless given (one per row)."""
    rows = sorted((t for t in TASKS if t[0] in names), key=lambda t: t[3])
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(11)]
    return conform(
        TABLES["comm_tasks"],
        {
            "device_id": pa.array([0] * len(rows), pa.int32()),
            "op_name": pa.array(columns[0], pa.string()),
            "group_name": pa.array(["g1"] * len(rows), pa.string()),
            "plane_id": pa.array(columns[1], pa.int64()),
            "name": pa.array(columns[2], pa.string()),
            "start_ns": pa.array(columns[3], pa.int64()),
            "end_ns": pa.array(columns[4], pa.int64()),
            "src_rank": pa.array(columns[5], pa.int64()),
            "dst_rank": pa.array(columns[6], pa.int64()),
            "transport_type": pa.array(columns[7], pa.string()),
            "size_bytes": pa.array(columns[8], pa.int64()),
            "link_type": pa.array(columns[9], pa.string()),
            "master": pa.array(columns[10], pa.bool_()) if master else None,
            "rdma_type": pa.array(rdma_type, pa.string()) if rdma_type is not None else None,
        },
    )
