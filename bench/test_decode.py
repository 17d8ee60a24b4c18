"""Decode throughput of the fixed-size codecs, per family, from memory (page cache equivalent).

    pytest bench/test_decode.py --benchmark-enable --benchmark-columns=mean,ops
The reported MB/s is in ``extra_info``; CI runs this file with timing disabled as a smoke test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from profstream.codecs import CODECS
from profstream.codecs._base import Codec, DecodeContext
from profstream.engine.sources import DEFAULT_CHUNK_BYTES

RECORDS = 1_000_000
FIXED = sorted((c for c in CODECS.values() if c.record_size and c.side == "device"), key=lambda c: c.family)


def sample(codec: Codec) -> np.ndarray:
    """RECORDS valid records of ``codec`` (every field 1), made with its own encoder from its schema."""
    columns = {field.name: np.ones(RECORDS, field.type.to_pandas_dtype()) for field in codec.schema}
    return np.frombuffer(codec.encode(columns), np.uint8)


@pytest.mark.parametrize("codec", FIXED, ids=lambda c: c.family)
def test_decode_throughput(benchmark: Any, codec: Codec) -> None:
    """Decode 1M records of each fixed-size device family."""
    buf = sample(codec)
    ctx = DecodeContext()
    window = DEFAULT_CHUNK_BYTES // codec.record_size * codec.record_size

    def decode_all() -> int:
        """Decode in the source's window size, as StreamReader does."""
        return sum(
            codec.decode(buf[at : at + window], ctx).batch.num_rows for at in range(0, buf.nbytes, window)
        )

    assert benchmark(decode_all) == RECORDS
    stats = getattr(benchmark, "stats", None)
    if stats:
        benchmark.extra_info["MB/s"] = round(buf.nbytes / stats.stats.mean / 2**20)


def test_plain_read_baseline(benchmark: Any, tmp_path: Any) -> None:
    """Reading the same number of bytes from a file: the floor decode is compared with."""
    path = tmp_path / "blob"
    path.write_bytes(b"\0" * (64 * RECORDS))
    data = benchmark(path.read_bytes)
    assert len(data) == 64 * RECORDS
