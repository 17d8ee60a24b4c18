"""Cell text of the summary sinks, computed column-wise with pyarrow.compute (never per row in Python).

The canonical tables hold times as int64 nanoseconds (engine/schema.py); msprof prints microseconds:

* ``timestamp_us``: exactly three decimals, exact (the ns integer with a decimal point inserted, like
  msprof's ``trans_into_local_time`` -> ``Decimal.quantize('0.000')``), followed by a TAB because
  msprof appends ``'\\t'`` to every timestamp cell so that spreadsheets keep all 16 digits
  (``format_high_precision_for_csv``, AM ``common_func/msvp_common.py``; msprof_outputs.md §1.4). The
  exporters append it to the row data itself, so ``--format json`` summaries carry it too.
* ``duration_us``: the same exact decimal without trailing zeros but with at least one decimal
  (``12.34``, ``12.0``): what Python prints for msprof's ``round(ns / 1000, 3)`` floats, without
  the binary rounding.

The exact text comes from reading the int64 as the unscaled value of a ``decimal128(20, 3)`` (the
same bits sign-extended to 128), whose string cast inserts the point; this also covers negative
values and the int64 extremes. Floats print as Python's ``repr`` prints them (``21.0``, ``1e-05``,
``10000000000.0``; see :func:`float_text`); NaN and infinities have no msprof or JSON text and count
as absent. Absent cells print a column's ``null`` text, ``N/A`` by default, as
msprof does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Unit = Literal["raw", "duration_us", "timestamp_us"]
UNITS: tuple[Unit, ...] = ("raw", "duration_us", "timestamp_us")

#: msprof's text for an absent value
NA = "N/A"


@dataclass(frozen=True)
class Column:
    """One output column of a summary: which batch column, under which header, in which unit."""

    name: str  #: the column of the sink's schema
    header: str | None = None  #: the display name; the column name when None
    unit: Unit = "raw"  #: ``duration_us``/``timestamp_us`` read an int64 ns column
    null: str = NA  #: the text of an absent value

    @property
    def title(self) -> str:
        """The header text."""
        return self.name if self.header is None else self.header


def resolve_columns(schema: pa.Schema, columns: list[Column] | None) -> list[Column]:
    """``columns`` checked against ``schema`` (every schema column, raw, when None)."""
    if columns is None:
        return [Column(name) for name in schema.names]
    for column in columns:
        if column.name not in schema.names:
            msg = f"column {column.name!r} is not in the sink's schema {schema.names}"
            raise ValueError(msg)
        if column.unit not in UNITS:
            msg = f"column {column.name!r}: unit must be one of {UNITS}, got {column.unit!r}"
            raise ValueError(msg)
        if column.unit != "raw" and not pa.types.is_integer(schema.field(column.name).type):
            msg = f"column {column.name!r}: unit {column.unit} needs an integer ns column"
            raise ValueError(msg)
    return columns


def micros_fixed(ns: pa.Array) -> pa.Array:
    """int64 ns as exact microseconds with three decimals: ``-1500`` -> ``"-1.500"``."""
    values = pc.cast(ns, pa.int64())
    words = np.empty((len(values), 2), np.int64)
    words[:, 0] = values.fill_null(0).to_numpy(zero_copy_only=False)
    words[:, 1] = words[:, 0] >> 63  # sign extension to 128 bits
    # the validity bitmap re-based at offset 0, as the new array expects
    validity = pc.is_valid(values).buffers()[1] if values.null_count else None
    decimal = pa.Array.from_buffers(pa.decimal128(20, 3), len(values), [validity, pa.py_buffer(words)])
    return pc.cast(decimal, pa.string())


def micros_number(ns: pa.Array) -> pa.Array:
    """int64 ns as the exact microsecond decimal without trailing zeros: ``12300`` -> ``"12.3"``."""
    return pc.replace_substring_regex(micros_fixed(ns), pattern="0{1,2}$", replacement="")


def float_text(values: pa.Array) -> pa.Array:
    """Python's ``repr`` of each float (how msprof's Python path and ``json.dumps`` print them);
    NaN and infinities -> null.

    Arrow's cast gives the same shortest round-trip digits, laid out differently only outside
    ``1e-4 <= |v| < 1e10`` (``1e+10`` for Python's ``10000000000.0``, ``0.00001`` for ``1e-05``,
    ``1e-9`` for ``1e-09``) and without Python's ``.0`` on integral values. So the ``.0`` is added
    column-wise, and the rare cells outside that range are printed by ``repr`` itself.
    """
    finite = pc.is_finite(values).fill_null(False)
    magnitude = pc.abs(values)
    outside = pc.and_(
        finite,
        pc.or_(pc.greater_equal(magnitude, 1e10), pc.and_(pc.less(magnitude, 1e-4), pc.not_equal(values, 0))),
    ).fill_null(False)
    whole = pc.and_(pc.and_(finite, pc.invert(outside)), pc.equal(values, pc.floor(values))).fill_null(False)
    text = pc.cast(values, pa.string())
    if pc.any(whole).as_py():
        text = pc.replace_with_mask(text, whole, pc.binary_join_element_wise(text.filter(whole), ".0", ""))
    if pc.any(outside).as_py():
        text = pc.replace_with_mask(
            text, outside, pa.array([repr(v) for v in values.filter(outside).to_pylist()])
        )
    return pc.if_else(finite, text, pa.scalar(None, pa.string()))


def is_text(kind: pa.DataType) -> bool:
    """Whether ``kind`` is one of Arrow's string types."""
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def cell_text(values: pa.Array, unit: Unit) -> pa.Array:
    """The text of each cell of ``values`` (null where absent), strings unquoted.

    A dictionary column is formatted once per dictionary entry and taken by index.
    """
    if pa.types.is_dictionary(values.type):
        return pc.take(cell_text(values.dictionary, unit), values.indices)
    if unit == "timestamp_us":
        return pc.binary_join_element_wise(micros_fixed(values), "\t", "")
    if unit == "duration_us":
        return micros_number(values)
    if pa.types.is_floating(values.type):
        return float_text(values)
    if pa.types.is_string(values.type):
        return values
    return pc.cast(values, pa.string())
