"""One rank's communication entries for the cluster files: the rows of its torch_npu
``communication.json`` and ``communication_matrix.json`` (framework_outputs.md §3.6, §4d) as two small
Arrow tables.

There is one communication analysis: the engine's
:class:`~profstream.engine.operators.comm_analysis.CommAnalysis` (``comm_ops`` / ``comm_links``) rendered
by the pure functions of :mod:`profstream.sinks.communication_json`, which also write the torch_npu
export. From raw data :func:`analyse` renders the rank's tables into the same two documents the export
writes and flattens them, so msprof-analyze run on profstream's per-rank export and profstream's own
cluster files see the same per-op values; from an exported rank, :func:`read_exported` flattens the
files that torch_npu (or profstream) wrote. ``Total Op Info`` entries are left out: the cluster writer
totals the ops of each group per rank itself, as msprof-analyze does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from profstream.errors import DecodeError
from profstream.sinks.communication_json import (
    BW,
    COMMUNICATION,
    MATRIX,
    OP_NAME,
    SIZE,
    START,
    TIME,
    TRANSIT,
    TRANSPORT,
    communication,
    communication_matrix,
)

#: one row per op of one rank: its communication.json entry (``info``, JSON text)
OPS_SCHEMA = pa.schema(
    [
        ("step", pa.string()),  # "step<id>" or "step"
        ("kind", pa.string()),  # p2p / collective
        ("op", pa.string()),  # op_name@group
        ("group", pa.string()),
        ("start_ns", pa.int64()),  # Unix ns (Start Timestamp): orders a rank's ops
        ("info", pa.string()),
    ]
)
#: one row per (summary op, link) of one rank: its communication_matrix.json entry
MATRIX_SCHEMA = pa.schema(
    [
        ("step", pa.string()),
        ("kind", pa.string()),
        ("op", pa.string()),  # e.g. allreduce-top1@group
        ("group", pa.string()),
        ("src", pa.int64()),  # local ranks of the group
        ("dst", pa.int64()),
        ("transport", pa.string()),
        ("size_mb", pa.float64()),
        ("time_ms", pa.float64()),
        ("bandwidth", pa.float64()),
        ("op_name", pa.string()),  # the instance's name without @group; "" for -total@
    ]
)


def analyse(
    comm_ops: pa.Table, comm_links: pa.Table, steps: pa.Table, wall_offset_ns: int
) -> tuple[pa.Table, pa.Table]:
    """(ops, matrix) of one rank from its ``comm_ops``, ``comm_links`` and ``framework_steps`` tables."""
    if comm_ops.num_rows == 0:
        return OPS_SCHEMA.empty_table(), MATRIX_SCHEMA.empty_table()
    return tables(
        communication(comm_ops, comm_links, steps, wall_offset_ns=wall_offset_ns),
        communication_matrix(comm_ops, comm_links, steps),
    )


def tables(comm: Mapping[str, Any], matrix: Mapping[str, Any]) -> tuple[pa.Table, pa.Table]:
    """(ops, matrix) rows of the documents of communication.json and communication_matrix.json."""
    ops: dict[str, list[Any]] = {name: [] for name in OPS_SCHEMA.names}
    for step, kind, op, info in _entries(comm):
        start_us = float(info.get(TIME, {}).get(START, 0))
        _add(ops, step, kind, op, op.rsplit("@", 1)[-1], round(start_us * 1000), json.dumps(info))
    links: dict[str, list[Any]] = {name: [] for name in MATRIX_SCHEMA.names}
    for step, kind, op, entries in _entries(matrix):
        for link, entry in entries.items():
            src, _, dst = link.partition("-")
            _add(links, step, kind, op, op.rsplit("@", 1)[-1], int(src), int(dst),
                 str(entry.get(TRANSPORT, "")), float(entry.get(SIZE, 0)), float(entry.get(TRANSIT, 0)),
                 float(entry.get(BW, 0)), str(entry.get(OP_NAME, "")))  # fmt: skip
    return pa.table(ops, schema=OPS_SCHEMA), pa.table(links, schema=MATRIX_SCHEMA)


def _add(columns: dict[str, list[Any]], *values: Any) -> None:
    for column, value in zip(columns.values(), values, strict=True):
        column.append(value)


def _entries(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(step, kind, op, value) of a communication document, ``Total Op Info`` left out."""
    for step, kinds in doc.items():
        for kind, op_dict in kinds.items():
            for op, value in op_dict.items():
                if not op.startswith("Total"):
                    yield step, kind, op, value


def read_exported(output_dir: Path) -> tuple[pa.Table, pa.Table] | None:
    """(ops, matrix) of the ``communication.json`` / ``communication_matrix.json`` in ``output_dir``,
    or None when it has neither."""
    paths = (output_dir / COMMUNICATION, output_dir / MATRIX)
    if not any(path.is_file() for path in paths):
        return None
    try:
        return tables(*(json.loads(path.read_bytes()) if path.is_file() else {} for path in paths))
    except (ValueError, AttributeError, TypeError) as err:
        msg = f"expected {COMMUNICATION} and {MATRIX} as step -> p2p/collective -> op -> value: {err}"
        raise DecodeError(msg, path=output_dir) from err
