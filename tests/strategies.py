"""Hypothesis strategies shared by the codec and kernel tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


def uint_column(n: int, dtype: Any, max_value: int | None = None) -> st.SearchStrategy[np.ndarray]:
    """An array of ``n`` unsigned ints of ``dtype``, optionally capped at ``max_value``."""
    info = np.iinfo(dtype)
    top = info.max if max_value is None else max_value
    return hnp.arrays(dtype, n, elements=st.integers(0, top))


@st.composite
def columns(
    draw: st.DrawFn, spec: dict[str, tuple[Any, int | None]], max_rows: int = 50
) -> dict[str, np.ndarray]:
    """A dict of equally long columns; ``spec`` maps name -> (dtype, max value or None)."""
    n = draw(st.integers(0, max_rows))
    return {name: draw(uint_column(n, dtype, top)) for name, (dtype, top) in spec.items()}
