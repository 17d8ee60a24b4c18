"""What every kernel wrapper shares: the njit decorators (profstream._numba), sentinels, validation.

Kernels (DESIGN.md "Kernels in engine/kernels/", specs/aesthetics.md §2 item 5) are pure numba loops over
numpy arrays: they never take Arrow objects, never log and never raise for bad input. The public
function next to each kernel validates its arguments here (raising :class:`ValueError` that names the
argument and the offending value), allocates the outputs and calls the kernel.

Columns come in as anything ``np.asarray`` accepts (numpy arrays, or pyarrow arrays without nulls, which
convert without a copy). They must hold integers: a float or object column (an Arrow column with nulls
becomes one) is refused rather than cast, so no value is silently rounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from profstream._numba import inline, kernel

__all__ = ["inline", "kernel"]  # the kernels' decorators, shared with the codecs

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
#: several equally long columns: a sequence of columns or a ``(width, n)`` array
Columns = Sequence[npt.ArrayLike] | npt.NDArray[Any]

#: an absent time or value in a kernel output (an empty cell downstream); also "no open interval".
NULL = int(np.iinfo(np.int64).min)
#: the watermark that ends a stream: everything still open is emitted.
FLUSH = int(np.iinfo(np.int64).max)
#: an absent record index (sequence number).
NO_SEQ = -1


def int_column(
    name: str, values: npt.ArrayLike, length: int | None = None, *, bits: bool = False
) -> Int64Array:
    """``values`` as a contiguous 1-D int64 array; ``length`` if given must match.

    With ``bits``, a uint64 column (ids, hashes, addresses: compared, never computed with) keeps its
    bit pattern as int64 (view it back as uint64); otherwise a value above the int64 range is refused.
    """
    arr = np.asarray(values)
    if bits and arr.dtype == np.uint64:
        arr = arr.view(np.int64)
    if arr.ndim != 1:
        msg = f"{name}: expected a 1-D column, got shape {arr.shape}"
        raise ValueError(msg)
    if arr.size == 0 and arr.dtype.kind == "f":
        return np.empty(0, np.int64)  # an empty list: nothing to round
    if arr.dtype.kind not in "iub":
        msg = f"{name}: expected integers, got dtype {arr.dtype}"
        raise ValueError(msg)
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > FLUSH:
        msg = f"{name}: value {int(arr.max())} does not fit int64"
        raise ValueError(msg)
    if length is not None and arr.size != length:
        msg = f"{name}: expected {length} values, got {arr.size}"
        raise ValueError(msg)
    return np.ascontiguousarray(arr, dtype=np.int64)


def flag_column(name: str, values: npt.ArrayLike, length: int) -> BoolArray:
    """``values`` as a contiguous bool array of ``length`` (0/1 integers are accepted)."""
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size != length:
        msg = f"{name}: expected a 1-D column of {length} flags, got shape {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind not in "iub" and arr.size:
        msg = f"{name}: expected booleans, got dtype {arr.dtype}"
        raise ValueError(msg)
    if arr.dtype.kind != "b" and arr.size and (arr.min() < 0 or arr.max() > 1):
        msg = f"{name}: expected 0/1 flags, got values in [{arr.min()}, {arr.max()}]"
        raise ValueError(msg)
    return np.ascontiguousarray(arr, dtype=np.bool_)


def int_rows(name: str, values: Columns | None, length: int, width: int | None = None) -> Int64Array:
    """Columns stacked as a ``(width, length)`` int64 array, one row per column.

    ``values`` is a sequence of columns, a 2-D array of that shape, one numpy column (width 1) or None
    (width 0). Each column is converted on its own, so mixing int64 and uint64 columns never goes
    through float; these are identity columns (keys, payload), so uint64 keeps its bits. ``width``
    if given must match.
    """
    if (
        isinstance(values, np.ndarray)
        and values.dtype == np.int64
        and values.flags.c_contiguous
        and values.ndim == 2
        and values.shape[1] == length
        and (width is None or values.shape[0] == width)
    ):
        return values  # already in the kernels' layout: no copy
    if values is None:
        cols: list[Any] = []
    elif isinstance(values, np.ndarray):
        cols = [values] if values.ndim == 1 else list(values)
    else:
        cols = list(values)
    if width is not None and len(cols) != width:
        msg = f"{name}: expected {width} columns, got {len(cols)}"
        raise ValueError(msg)
    if not cols:
        return np.empty((0, length), np.int64)
    return np.stack([int_column(f"{name}[{k}]", col, length, bits=True) for k, col in enumerate(cols)])


def require_times(name: str, values: Int64Array) -> None:
    """Times must stay clear of the :data:`NULL` and :data:`FLUSH` sentinels."""
    if values.size and (int(values.min()) == NULL or int(values.max()) == FLUSH):
        msg = f"{name}: values {NULL} and {FLUSH} are reserved sentinels, got one of them"
        raise ValueError(msg)


def require_sorted(name: str, values: Int64Array, not_before: int = NULL) -> None:
    """``values`` ascending, and its first value not below ``not_before`` (the previous batch's last)."""
    if values.size and int(values[0]) < not_before:
        msg = (
            f"{name}: expected values from {not_before} on (the previous batch ended there), got {values[0]}"
        )
        raise ValueError(msg)
    bad = np.flatnonzero(values[1:] < values[:-1])
    if bad.size:
        i = int(bad[0])
        msg = f"{name}: expected ascending values, got {values[i]} then {values[i + 1]} at index {i + 1}"
        raise ValueError(msg)


def require_intervals(starts_name: str, starts: Int64Array, ends: Int64Array) -> None:
    """Every interval ends at or after its start."""
    bad = np.flatnonzero(ends < starts)
    if bad.size:
        i = int(bad[0])
        msg = f"{starts_name}: interval {i} ends before it starts: [{starts[i]}, {ends[i]}]"
        raise ValueError(msg)
