"""L2 cache hit and victim rates per task record (``l2_cache@<d>`` raw) -> ``l2_cache@<d>``.

msprof (``analysis/mscalculate/l2_cache/l2_cache_calculator.py``, ``analysis/msconfig/l2_cache_config.py``;
specs/msprof_outputs.md §4c): one row per record, no aggregation. Each rate sums the counters of the
chip's events, a ``-`` event subtracted, and is ``round(numerator / requests, 6)``, 0 when no request
was counted. The events are found by name in the collection's ``l2CacheTaskProfilingEvents`` list
(sample.json; lower-cased, first match), so counter ``i`` is the ``i``-th configured event:

=================  ===================  ===========================================  ===========
chip (info.json)   requests             hits                                         victims
=================  ===================  ===========================================  ===========
1 (910A)           0x59                 0x5b                                         0x5c
2, 3, 4            0x78 + 0x79          0x6a                                         0x71
5, 7, 8, 11        0xfb + 0xfc          0x90 + 0x91                                  0x9c
15, 16             0x00                 0x00 - 0x81 - 0x82 - 0x83 - 0x74 - 0x75      0x74 + 0x75
=================  ===================  ===========================================  ===========

A chip without a formula, more than 8 configured events, or an event of the formula missing from the
list gives no rows, as msprof then skips the calculation; the reason is logged once. The table keeps
the hit rate on every chip; msprof prints it as ``N/A`` on STARS chips (``get_l2_cache_data.py``
``process_hit_rate``), which is the layouts' business, and so is the op name, which msprof takes at
the end of the run from the last launch of each (stream, task) (``DataManager.get_op_dict``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from profstream import events
from profstream.codecs.l2_cache import EVENT_COLUMNS, EVENTS
from profstream.engine.operators._state import RowByRow
from profstream.engine.runtime import Emit, at
from profstream.engine.schema import TABLES, conform

#: msprof's rounding of both rates (``NumberConstant.DECIMAL_ACCURACY``)
RATE_DECIMALS = 6
#: (requests, hits, victims) by platform_version; a leading ``-`` subtracts the event
FORMULAS: dict[int, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    1: (("0x59",), ("0x5b",), ("0x5c",)),
    **dict.fromkeys((2, 3, 4), (("0x78", "0x79"), ("0x6a",), ("0x71",))),
    **dict.fromkeys((5, 7, 8, 11), (("0xfb", "0xfc"), ("0x90", "0x91"), ("0x9c",))),
    **dict.fromkeys(
        (15, 16), (("0x00",), ("0x00", "-0x81", "-0x82", "-0x83", "-0x74", "-0x75"), ("0x74", "0x75"))
    ),
}


def configured_events(events_text: str) -> list[str]:
    """sample.json's ``l2CacheTaskProfilingEvents`` as msprof reads it: split, stripped, lower-cased."""
    return [event.strip().lower() for event in events_text.split(",") if event.strip()]


def counter_terms(chip: int, events_text: str) -> tuple[list[tuple[int, int]], ...] | str:
    """Per rate part (requests, hits, victims) the (counter index, sign) terms, or why there are none."""
    formula = FORMULAS.get(chip)
    if formula is None:
        return f"no L2 cache formula for chip {chip}"
    configured = configured_events(events_text)
    if len(configured) > EVENTS:
        return f"{len(configured)} events configured, at most {EVENTS}"
    parts = []
    for part in formula:
        terms = []
        for event in part:
            name = event.lstrip("-")
            if name not in configured:
                return f"event {name} of chip {chip}'s formula is not among the configured {configured}"
            terms.append((configured.index(name), -1 if event.startswith("-") else 1))
        parts.append(terms)
    return tuple(parts)


def _sum(counters: np.ndarray, terms: list[tuple[int, int]]) -> np.ndarray:
    total = np.zeros(len(counters), np.float64)
    for index, sign in terms:
        total += sign * counters[:, index]
    return total


def rates(counters: np.ndarray, terms: tuple[list[tuple[int, int]], ...]) -> tuple[np.ndarray, np.ndarray]:
    """Hit and victim rates of each record (``counters``: records x 8 counters, float64)."""
    requests, hits, victims = (_sum(counters, part) for part in terms)
    with np.errstate(divide="ignore", invalid="ignore"):
        hit = np.where(requests != 0, hits / requests, 0.0)
        victim = np.where(requests != 0, victims / requests, 0.0)
    return np.round(hit, RATE_DECIMALS), np.round(victim, RATE_DECIMALS)


class L2Cache(RowByRow):
    """``l2_cache_raw@<d>`` -> ``l2_cache@<d>``, row by row (module docstring); ``chip`` is info.json's
    platform_version and ``events_text`` sample.json's ``l2CacheTaskProfilingEvents``."""

    def __init__(self, device_id: int, chip: int, events_text: str) -> None:
        super().__init__(at("l2_cache_raw", device_id), at("l2_cache", device_id))
        self.device_id = device_id
        self._terms = counter_terms(chip, events_text)
        self._log = events.get_logger(component="l2_cache", device_id=device_id)

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if isinstance(self._terms, str):
            return None  # not computed (module docstring): counted as skipped
        counters = np.column_stack(
            [batch.column(name).to_numpy(zero_copy_only=False).astype(np.float64) for name in EVENT_COLUMNS]
        )
        hit, victim = rates(counters, self._terms)
        return conform(
            TABLES["l2_cache"],
            {
                "device_id": np.full(batch.num_rows, self.device_id, np.int32),
                "stream_id": batch.column("stream_id"),
                "task_id": batch.column("task_id"),
                "task_type": batch.column("task_type"),
                "hit_rate": hit,
                "victim_rate": victim,
            },
        )

    def finish(self) -> list[Emit]:
        if self.skipped:
            self._log.warning(events.L2_CACHE_NOT_COMPUTED, records=self.skipped, reason=self._terms)
        return super().finish()
