"""The AI Core frequency over the collection (``lpm_freq@<d>``, possibly absent) -> ``aicore_freq@<d>``.

msprof's C++ (``analysis/csrc/domain/data_process/system/aicore_freq_processor.cpp``
``AicoreFreqProcessor::FormatData``, drawn by ``aicore_freq_assembler.cpp``), for 910B and 310B
(platform_version 5 and 7) only:

* a row at the collection start (the device's start_info ``collectionTimeBegin``) with the frequency in
  force then: that of the last change before the start, else info.json's ``aic_frequency``;
* a row per change (lpmFreqConv record) from the start on;
* a row at the collection end (end_info ``collectionTimeEnd``) with the last change's frequency (or
  ``aic_frequency``), when end_info is there (looked up at the end of the input, as a live collection
  writes it last).

So a device without lpmFreqConv data still gets its start and end rows. Rows leave as soon as they are
final: the start row once the watermark passes the start, the changes in their order, the end row at the
end (after any change recorded past the collection end, which msprof would sort before it). Times are
host-monotonic ns; the start and end come from the wall-clock µs of start_info / end_info less the
collection's wall-clock offset, so the layouts print them as those µs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from profstream.engine.kernels._dispatch import Int64Array
from profstream.engine.metadata import DirMetadata
from profstream.engine.operators._state import ints
from profstream.engine.runtime import DONE, Emit, Operator, at, pack_state, unpack_state
from profstream.engine.schema import TABLES, conform

#: chips whose AI Core frequency msprof draws (C++ ``CHIP_V4_1_0`` 910B, ``CHIP_V1_1_1`` 310B)
CHIPS = (5, 7)


def drawn(metadata: DirMetadata) -> bool:
    """Whether msprof draws the AI Core frequency of this device."""
    return metadata.info.platform_version in CHIPS


class AicoreFreq(Operator):
    """``lpm_freq@<d>`` (when the device recorded changes) -> ``aicore_freq@<d>`` (module docstring)."""

    def __init__(self, device_id: int, metadata: DirMetadata, wall_offset_ns: int, *, changes: bool) -> None:
        self.device_id = device_id
        self.inputs = (at("lpm_freq", device_id),) if changes else ()
        self.outputs = (at("aicore_freq", device_id),)
        self.start_ns = metadata.start_info.collection_time_begin * 1000 - wall_offset_ns
        self._metadata, self._wall_offset_ns = metadata, wall_offset_ns
        self._freq = int(float(metadata.device_info.aic_frequency))  # in force at the start
        self._last = self._freq  # the last change seen (the end row's)
        self._started = False  # the start row has left
        self._ended = False  # finished: the end row has left
        self._pending: list[tuple[Int64Array, Int64Array]] = []  # changes from the start on

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream not in self.inputs:
            raise self.unknown_input(stream)
        if not batch.num_rows:
            return
        times, freqs = ints(batch.column("time_ns")), ints(batch.column("freq_mhz"))
        before = times < self.start_ns
        if before.any():
            self._freq = int(freqs[before][-1])
        self._last = int(freqs[-1])
        if not before.all():
            self._pending.append((times[~before], freqs[~before]))

    def advance(self, watermark: int) -> list[Emit]:
        if self._ended or (not self._started and watermark < self.start_ns):
            return []
        times, freqs = [], []
        if not self._started:
            times.append(np.array([self.start_ns], np.int64))
            freqs.append(np.array([self._freq], np.int64))
            self._started = True
        for t, f in self._pending:
            times.append(t)
            freqs.append(f)
        self._pending = []
        return [(self.outputs[0], self._rows(np.concatenate(times), np.concatenate(freqs)))] if times else []

    def output_watermark(self, watermark: int) -> int:
        return min(watermark, self.start_ns) if not self._started else watermark

    def finish(self) -> list[Emit]:
        out = self.advance(DONE)
        if self._ended:
            return out
        self._ended = True
        end = self._metadata.end_info_now()  # read now: the collector daemon plans before it exists
        if end is None:
            return out
        end_ns = end.collection_time_end * 1000 - self._wall_offset_ns
        return [*out, (self.outputs[0], self._rows(np.array([end_ns]), np.array([self._last])))]

    def _rows(self, times: Int64Array, freqs: Int64Array) -> pa.RecordBatch:
        return conform(
            TABLES["aicore_freq"],
            {"device_id": np.full(len(times), self.device_id, np.int32), "time_ns": times, "freq_mhz": freqs},
        )

    def snapshot(self) -> bytes:
        times = [t for t, _ in self._pending]
        freqs = [f for _, f in self._pending]
        return pack_state(
            {
                "freq": self._freq,
                "last": self._last,
                "started": self._started,
                "ended": self._ended,
                "times": np.concatenate(times) if times else np.empty(0, np.int64),
                "freqs": np.concatenate(freqs) if freqs else np.empty(0, np.int64),
            }
        )

    def restore(self, state: bytes) -> None:
        doc = unpack_state(state)
        self._freq, self._last = int(doc["freq"]), int(doc["last"])
        self._started, self._ended = bool(doc["started"]), bool(doc["ended"])
        times, freqs = np.asarray(doc["times"], np.int64), np.asarray(doc["freqs"], np.int64)
        self._pending = [(times, freqs)] if len(times) else []
