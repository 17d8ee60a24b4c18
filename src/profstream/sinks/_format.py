"""What the summary sinks print in each cell, and the float text they share.

The canonical tables hold times as int64 nanoseconds (engine/schema.py); msprof prints microseconds:

* ``timestamp_us``: exactly three decimals, exact (the ns integer with a decimal point inserted, like
  msprof's ``trans_into_local_time`` -> ``Decimal.quantize('0.000')``), followed by a TAB because
  msprof appends ``'\\t'`` to every timestamp cell so that spreadsheets keep all 16 digits
  (``format_high_precision_for_csv``, AM ``common_func/msvp_common.py``; msprof_outputs.md §1.4). The
  exporters append it to the row data itself, so ``--format json`` summaries carry it too.
* ``duration_us``: the same exact decimal without trailing zeros but with at least one decimal
  (``12.34``, ``12.0``): what Python prints for msprof's ``round(ns / 1000, 3)`` floats, without
  the binary rounding.
* ``number``: a string column holding numbers already printed (a column where msprof mixes the
  integer ``0`` with floats): as it is in a CSV, unquoted in JSON, where msprof's ``json.dump``
  writes the numbers as numbers.

Both are integer arithmetic in the numba writer (:mod:`~profstream.sinks._numbers`), exact for
negative values and the int64 extremes too. Floats print as Python's ``repr`` prints them (``21.0``,
``1e-05``, ``10000000000.0``; see :func:`float_text`); NaN and infinities have no msprof or JSON
text and count as absent. Absent cells print a column's ``null`` text, ``N/A`` by default, as
msprof does, or are left out when it is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from profstream.sinks._numbers import GIVEN, NO_TEXT, float_kinds, float_texts

I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]
Unit = Literal["raw", "duration_us", "timestamp_us", "number"]
UNITS: tuple[Unit, ...] = ("raw", "duration_us", "timestamp_us", "number")

#: msprof's text for an absent value
NA = "N/A"
#: rows the summary sinks format at once (the text of that many rows is held in memory); smaller
#: batches are joined up to this many first (:class:`~profstream.sinks._base.TableSink` ``coalesce_rows``)
FORMAT_ROWS = 16_384


@dataclass(frozen=True)
class Column:
    """One output column of a summary: which batch column, under which header, in which unit."""

    name: str  #: the column of the sink's schema
    header: str | None = None  #: the display name; the column name when None
    unit: Unit = "raw"  #: ``duration_us``/``timestamp_us`` read an int64 ns column, ``number`` a string one
    #: the text of an absent value; None leaves an absent cell out of its row (a JSON member out of its
    #: object), for trailing cells that only some rows have (msprof's Python step_trace Reduce pairs)
    null: str | None = NA

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
        kind = schema.field(column.name).type
        if column.unit == "number" and not is_text(kind.value_type if pa.types.is_dictionary(kind) else kind):
            msg = f"column {column.name!r}: unit number needs a string column"
            raise ValueError(msg)
        if column.unit in ("duration_us", "timestamp_us") and not pa.types.is_integer(kind):
            msg = f"column {column.name!r}: unit {column.unit} needs an integer ns column"
            raise ValueError(msg)
    return columns


def doubles(values: pa.Array) -> F64:
    """Numbers as float64, NaN where absent (NaN has no text either): Arrow's own NaN fill, and no
    copy for a float64 column without nulls."""
    if not pa.types.is_float64(values.type):
        values = pc.cast(values, pa.float64())
    return np.asarray(values.to_numpy(zero_copy_only=False), np.float64)


def float_table(values: pa.Array) -> tuple[I32, U8, npt.NDArray[np.bool_]]:
    """Python's ``repr`` of each float as Arrow string offsets and data, and which values have one
    (NaN and infinities do not; see :func:`float_text`)."""
    numbers = doubles(values)
    kinds = float_kinds(numbers)
    given = kinds == GIVEN
    given_texts = pa.array([repr(v) for v in numbers[given].tolist()] if given.any() else [], pa.string())
    offsets, data = float_texts(
        numbers,
        kinds,
        np.frombuffer(given_texts.buffers()[1], np.int32),
        np.frombuffer(given_texts.buffers()[2] or b"", np.uint8),
    )
    return offsets, data, kinds != NO_TEXT


def float_text(values: pa.Array) -> pa.Array:
    """Python's ``repr`` of each float (how msprof's Python path and ``json.dumps`` print them);
    NaN and infinities -> null.

    The numba kernel of :mod:`~profstream.sinks._numbers` prints every value from 1e-9 to 1e16
    (nearly all); ``repr`` itself prints the rest. Floats narrower than 64 bits print as the double
    they widen to, as Python's ``float()`` does.
    """
    offsets, data, present = float_table(values)
    validity = pa.array(present).buffers()[1]
    return pa.Array.from_buffers(
        pa.string(), len(present), [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def is_text(kind: pa.DataType) -> bool:
    """Whether ``kind`` is one of Arrow's string types."""
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))
