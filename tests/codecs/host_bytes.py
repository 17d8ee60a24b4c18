"""Hand-built host records for the host codec tests: bytes placed at the spec's offsets with struct."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from profstream.codecs import Codec
from profstream.codecs._base import DecodeContext

HOST_MAGIC = 0x5A5A
HEADER = {"level": 10000, "type": 3, "thread_id": 4242, "data_len": 40, "timestamp": 123456789012345}


def host_record(size: int, *, magic: int = HOST_MAGIC) -> bytearray:
    """A zeroed ``size``-byte record with the §2.7 header: 0 magic, 2 level, 4 type, 8 tid, 12 len, 16 ts."""
    raw = bytearray(size)
    struct.pack_into("<HHIIIQ", raw, 0, magic, *HEADER.values())
    return raw


def put(raw: bytearray, offset: int, fmt: str, *values: Any) -> None:
    """Little-endian ``values`` packed at ``offset``."""
    struct.pack_into("<" + fmt, raw, offset, *values)


def decode_one(codec: Codec, raw: bytes | bytearray) -> dict[str, Any]:
    """The single row ``codec`` decodes from ``raw``."""
    rows = codec.decode(np.frombuffer(bytes(raw), np.uint8), DecodeContext()).batch.to_pylist()
    assert len(rows) == 1
    return rows[0]


def assert_header(row: dict[str, Any]) -> None:
    """The header fields of ``host_record`` came back."""
    for name, value in HEADER.items():
        assert row[name] == value, name


def round_trip(codec: Codec, cols: dict[str, Any]) -> dict[str, list[Any]]:
    """decode(encode(cols)) as python lists, after checking size and consumption."""
    raw = codec.encode(cols)
    n = len(next(iter(cols.values())))
    assert len(raw) == (codec.record_size or 0) * n
    out = codec.decode(np.frombuffer(raw, np.uint8), DecodeContext())
    assert out.consumed == len(raw)
    assert out.dropped == 0
    return out.batch.to_pydict()
