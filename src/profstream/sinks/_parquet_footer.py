"""Parquet footers read and written, so that a row group can be assembled one column at a time.

pyarrow writes a row group only from a table held whole in memory: Arrow's C++ calls that write a
row group column by column, or append batches to an open one, are not bound in Python. A million
rows of a wide table (the tasks table, about 330 bytes a row) would then hold more memory than a
whole export may use. :class:`~profstream.sinks.parquet.ParquetSink` instead has pyarrow write each
column as a one-column file, copies that file's column chunk into its output, and writes the footer
that describes all the chunks; this module reads and writes those footers.

A footer is a Thrift ``FileMetaData`` struct in the compact protocol (Apache Thrift,
``doc/specs/thrift-compact-protocol.md``), followed by its length (4 bytes, little-endian) and
``PAR1``; field ids are parquet-format's ``parquet.thrift``. The codec is generic: a struct is a
list of ``(field id, type code, value)`` in the order read, so re-encoding what was decoded gives
the same bytes, and fields this module does not know pass through untouched. Written by hand: the
``thrift`` package decodes only into classes generated from an IDL, and pyarrow does not expose
its own footer codec.
"""

from __future__ import annotations

import struct as _struct
from typing import Any

MAGIC = b"PAR1"

# compact protocol type codes
BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)

#: a decoded struct: ``(field id, type code, value)`` in wire order; a bool field's type code is
#: BOOL_TRUE whatever its value
Struct = list[tuple[int, int, Any]]

# parquet.thrift field ids
FILE_NUM_ROWS, FILE_ROW_GROUPS = 3, 4
GROUP_COLUMNS, GROUP_TOTAL_BYTE_SIZE, GROUP_NUM_ROWS = 1, 2, 3
GROUP_FILE_OFFSET, GROUP_TOTAL_COMPRESSED_SIZE, GROUP_ORDINAL = 5, 6, 7
CHUNK_META_DATA = 3
#: ColumnChunk fields holding absolute file offsets: file_offset, offset_index_offset, column_index_offset
CHUNK_OFFSETS = (2, 4, 6)
META_DATA_PAGE_OFFSET, META_DICTIONARY_PAGE_OFFSET = 9, 11
#: ColumnMetaData fields holding absolute file offsets: data, index and dictionary page, bloom filter
META_OFFSETS = (9, 10, 11, 14)


class FooterError(ValueError):
    """Bytes that are not a Parquet file's footer."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            msg = f"Parquet footer ends at byte {self.pos} inside a value"
            raise FooterError(msg)
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        result = shift = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            msg = f"Parquet footer ends at byte {len(self.data)}, inside a {size}-byte value at {self.pos}"
            raise FooterError(msg)
        self.pos += size
        return self.data[self.pos - size : self.pos]

    def value(self, ctype: int) -> Any:
        if ctype in (BOOL_TRUE, BOOL_FALSE):  # an element of a collection: one byte
            return self.byte() == BOOL_TRUE
        if ctype == BYTE:
            return self.byte()
        if ctype in (I16, I32, I64):
            return self.zigzag()
        if ctype == DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if ctype == BINARY:
            return self.take(self.varint())
        if ctype in (LIST, SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (element, [self.value(element) for _ in range(size)])
        if ctype == MAP:
            size = self.varint()
            if size == 0:
                return (0, 0, [])
            kinds = self.byte()
            key, value = kinds >> 4, kinds & 0x0F
            return (key, value, [(self.value(key), self.value(value)) for _ in range(size)])
        if ctype == STRUCT:
            return self.struct()
        msg = f"Parquet footer has an unknown Thrift type {ctype} at byte {self.pos}"
        raise FooterError(msg)

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while (head := self.byte()) != 0:
            ctype, delta = head & 0x0F, head >> 4
            field_id = last + delta if delta else self.zigzag()
            if ctype in (BOOL_TRUE, BOOL_FALSE):  # the value is the type code: kept as a bool
                fields.append((field_id, BOOL_TRUE, ctype == BOOL_TRUE))
            else:
                fields.append((field_id, ctype, self.value(ctype)))
            last = field_id
        return fields


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while n > 0x7F:
            self.out.append(n & 0x7F | 0x80)
            n >>= 7
        self.out.append(n)

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, ctype: int, value: Any) -> None:
        if ctype in (BOOL_TRUE, BOOL_FALSE):
            self.out.append(BOOL_TRUE if value else BOOL_FALSE)
        elif ctype == BYTE:
            self.out.append(value & 0xFF)
        elif ctype in (I16, I32, I64):
            self.zigzag(value)
        elif ctype == DOUBLE:
            self.out += _struct.pack("<d", value)
        elif ctype == BINARY:
            self.varint(len(value))
            self.out += value
        elif ctype in (LIST, SET):
            element, items = value
            if len(items) < 15:
                self.out.append(len(items) << 4 | element)
            else:
                self.out.append(0xF0 | element)
                self.varint(len(items))
            for item in items:
                self.value(element, item)
        elif ctype == MAP:
            key, kind, pairs = value
            self.varint(len(pairs))
            if pairs:
                self.out.append(key << 4 | kind)
            for k, v in pairs:
                self.value(key, k)
                self.value(kind, v)
        elif ctype == STRUCT:
            self.struct(value)
        else:
            msg = f"no Thrift compact type {ctype}"
            raise FooterError(msg)

    def struct(self, fields: Struct) -> None:
        last = 0
        for field_id, kind, value in fields:
            is_bool = kind in (BOOL_TRUE, BOOL_FALSE)
            ctype = (BOOL_TRUE if value else BOOL_FALSE) if is_bool else kind  # a bool is its type code
            delta = field_id - last
            if 0 < delta <= 15:
                self.out.append(delta << 4 | ctype)
            else:
                self.out.append(ctype)
                self.zigzag(field_id)
            if not is_bool:
                self.value(ctype, value)
            last = field_id
        self.out.append(0)


def decode(data: bytes) -> Struct:
    """The struct ``data`` encodes (all of it: trailing bytes are an error)."""
    reader = _Reader(data)
    fields = reader.struct()
    if reader.pos != len(data):
        msg = f"Parquet footer has {len(data) - reader.pos} bytes after its struct ends at {reader.pos}"
        raise FooterError(msg)
    return fields


def encode(fields: Struct) -> bytes:
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)


def split_file(data: bytes | memoryview) -> tuple[memoryview, Struct]:
    """A whole Parquet file as (its body between the leading ``PAR1`` and the footer, its decoded
    ``FileMetaData``)."""
    view = memoryview(data)
    if len(view) < 12 or view[:4] != MAGIC or view[-4:] != MAGIC:
        msg = f"a Parquet file starts and ends with {MAGIC!r}; these {len(view)} bytes do not"
        raise FooterError(msg)
    length = int.from_bytes(view[-8:-4], "little")
    start = len(view) - 8 - length
    if start < 4:
        msg = f"Parquet footer length {length} is longer than the {len(view)}-byte file"
        raise FooterError(msg)
    return view[4:start], decode(bytes(view[start:-8]))


def footer(metadata: Struct) -> bytes:
    """The bytes that end a file: the encoded ``FileMetaData``, its length and ``PAR1``."""
    body = encode(metadata)
    return body + len(body).to_bytes(4, "little") + MAGIC


def field(fields: Struct, field_id: int, default: Any = None) -> Any:
    """The value of field ``field_id``, or ``default`` when the struct has none."""
    return next((value for fid, _, value in fields if fid == field_id), default)


def with_fields(fields: Struct, changes: dict[int, tuple[int, Any]]) -> Struct:
    """``fields`` with the values of ``changes`` (field id: (type code, value)) replaced or added,
    in field-id order."""
    kept = [(fid, ctype, value) for fid, ctype, value in fields if fid not in changes]
    added = [(fid, ctype, value) for fid, (ctype, value) in changes.items()]
    return sorted(kept + added, key=lambda item: item[0])


def shifted(fields: Struct, offsets: tuple[int, ...], shift: int) -> Struct:
    """``fields`` with ``shift`` added to the i64 offset fields listed in ``offsets``; an offset of 0
    (where the file's magic is) means none: parquet-cpp writes the deprecated
    ``ColumnChunk.file_offset`` as 0."""
    return [(fid, kind, value + shift if fid in offsets and value else value) for fid, kind, value in fields]


def moved_chunk(chunk: Struct, shift: int) -> Struct:
    """A ``ColumnChunk`` whose bytes moved ``shift`` bytes further into the file."""
    moved = shifted(chunk, CHUNK_OFFSETS, shift)
    return [
        (fid, ctype, shifted(value, META_OFFSETS, shift) if fid == CHUNK_META_DATA else value)
        for fid, ctype, value in moved
    ]


def chunk_start(chunk: Struct) -> int:
    """Where a column chunk's first page starts: its dictionary page if it has one."""
    meta = field(chunk, CHUNK_META_DATA)
    return int(field(meta, META_DICTIONARY_PAGE_OFFSET) or field(meta, META_DATA_PAGE_OFFSET))
