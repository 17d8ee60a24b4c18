"""HBM bandwidth per sample, unit and direction (``hbm_raw@<d>``) -> ``hbm@<d>``.

msprof's Python computes it once the whole run is parsed (``analysis/msmodel/hardware/hbm_model.py``
``HbmModel.insert_bw_data``, ``_filter_abnormal_timestamps``, ``_get_hbm_data``), and so does this
operator:

1. Records equal in (time, direction, HBM id, count) count once (its ``GROUP BY``).
2. Each sample time has one record per (HBM id, direction); a time with another number of records lost
   some, and every time whose record count is not the run's most common count is left out (ties: the
   larger count). This needs the whole run, so the device's records are held until the end (about 20
   bytes each: 800 records a second at 100 Hz on four HBM units, 58 MB an hour of sampling); the
   ``hbm`` table is then written at once. msprof logs the records it leaves out; so does profstream
   (``records_unmatched``).
3. Within a time the records are ordered by HBM id, reads first, then count: the order of the HBM
   counters in the timelines of the real traces in shared/realdata (msinsight-torchnpu-910b,
   ``HBM 0/Read, HBM 0/Write, HBM 1/Read, ...``). Record ``i`` is paired with record ``i - n`` (``n``
   the records per time): the same counter one sample earlier. Its bandwidth is
   ``count * 2**-15 / Δt_ns * 1e9`` MB/s (``SCALE`` = 256 / 8 / 1024 / 1024, one count being 32 bytes),
   at least 0. The first sample has no earlier one: msprof pairs it with the last sample (Python's
   negative index), which gives a negative Δt and so 0; with a single sample Δt is 0 and msprof keeps
   the raw count as the bandwidth, which profstream reproduces.
4. sample.json ``hbm_profiling_events`` must name one or two events (``read``/``write``; an empty value
   is one); otherwise msprof computes nothing, and neither does profstream (logged).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from profstream import events
from profstream.codecs.hbm import EVENT_READ
from profstream.engine.kernels._dispatch import Int64Array
from profstream.engine.operators._state import ints
from profstream.engine.runtime import START, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: MB per count (msprof ``HbmModel.SCALE``: HBMC 256 / HBM_EVENT 8 / 1024 / 1024)
SCALE = 0.000030517578125
NS_PER_S = 1e9
DIRECTIONS = ("read", "write")
_FIELDS = ("time", "count", "key")  # key: HBM id * 2 + (1 for writes)


def event_count_ok(events_text: str) -> bool:
    """msprof's check of sample.json ``hbm_profiling_events``: one or two comma-separated names."""
    return len(events_text.split(",")) in (1, 2)


def bandwidths(time: Int64Array, count: Int64Array, per_sample: int) -> np.ndarray:
    """MB/s of each record, paired with the record ``per_sample`` before it (module docstring, 3)."""
    previous = np.roll(time, per_sample)  # the first sample pairs with the last, as msprof's index does
    elapsed = (time - previous).astype(np.float64)
    counts = count.astype(np.uint64).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = counts * SCALE / elapsed * NS_PER_S
    return np.where(elapsed == 0, counts, np.where(rate > 0, rate, 0.0))


def kept_samples(time: Int64Array) -> tuple[np.ndarray, int]:
    """Which records belong to times with the run's most common record count, and that count."""
    _, sizes = np.unique(time, return_counts=True)
    frequency = Counter(sizes.tolist())
    most = max(frequency.values())
    per_sample = max(size for size, seen in frequency.items() if seen == most)
    keep = np.repeat(sizes == per_sample, sizes)
    return keep, per_sample


class HbmBandwidth(Operator):
    """``hbm_raw@<d>`` -> ``hbm@<d>`` at the end of the run (module docstring); ``events_text`` is
    sample.json's ``hbm_profiling_events``."""

    def __init__(self, device_id: int, events_text: str) -> None:
        self.device_id = device_id
        self.inputs = (at("hbm_raw", device_id),)
        self.outputs = (at("hbm", device_id),)
        self._computed = event_count_ok(events_text)
        self._events_text = events_text
        self._chunks: list[dict[str, Int64Array]] = []
        self._log = events.get_logger(component="hbm", device_id=device_id)

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream not in self.inputs:
            raise self.unknown_input(stream)
        if not batch.num_rows:
            return
        write = (ints(batch.column("event")) != EVENT_READ).astype(np.int64)
        self._chunks.append(
            {
                "time": ints(batch.column("time_ns")),
                "count": ints(batch.column("count")),
                "key": ints(batch.column("hbm_id")) * 2 + write,
            }
        )

    def advance(self, watermark: int) -> list[Emit]:
        return []  # every row waits for the whole run (module docstring, 2)

    def output_watermark(self, watermark: int) -> int:
        return START if self._chunks else watermark

    def finish(self) -> list[Emit]:
        held = self._held()
        self._chunks = []
        if not len(held["time"]):
            return []
        if not self._computed:
            self._log.warning(
                events.RECORDS_UNMATCHED,
                not_computed=len(held["time"]),
                reason=f"hbm_profiling_events {self._events_text!r} names neither one nor two events",
            )
            return []
        time, count, key = held["time"], held["count"], held["key"]
        order = np.lexsort((count, key, time))
        time, count, key = time[order], count[order], key[order]
        repeated = np.r_[False, (time[1:] == time[:-1]) & (key[1:] == key[:-1]) & (count[1:] == count[:-1])]
        time, count, key = time[~repeated], count[~repeated], key[~repeated]
        keep, per_sample = kept_samples(time)
        if not keep.all():
            self._log.warning(
                events.RECORDS_UNMATCHED, incomplete_samples=int((~keep).sum()), per_sample=per_sample
            )
        time, count, key = time[keep], count[keep], key[keep]
        rows = conform(
            TABLES["hbm"],
            {
                "device_id": np.full(len(time), self.device_id, np.int32),
                "time_ns": time,
                "hbm_id": key >> 1,
                "event": pa.DictionaryArray.from_arrays(pa.array(key & 1, pa.int32()), pa.array(DIRECTIONS)),
                "bandwidth": bandwidths(time, count, per_sample),
            },
        )
        return [(self.outputs[0], rows)]

    def _held(self) -> dict[str, Int64Array]:
        if not self._chunks:
            return {name: np.empty(0, np.int64) for name in _FIELDS}
        return {name: np.concatenate([chunk[name] for chunk in self._chunks]) for name in _FIELDS}

    def snapshot(self) -> bytes:
        return pack_state(self._held())

    def restore(self, state: bytes) -> None:
        held = unpack_state(state)
        self._chunks = (
            [{name: np.asarray(held[name], np.int64) for name in _FIELDS}] if len(held["time"]) else []
        )
