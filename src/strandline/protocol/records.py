"""A view of record batch v2 (magic 2) headers, and the one decoder of their records.

The broker never re-encodes records and decodes them only where Kafka's broker must look inside
a batch (ListOffsets by timestamp, ``__consumer_offsets``; Spark tasks use the same pieces): it
reads the 61-byte batch header, checks the CRC-32C, and stamps the two fields that lie outside
the CRC (base offset, partition leader epoch). Layout (Kafka's ``DefaultRecordBatch``)::

    0  baseOffset            int64   (outside CRC, set by the leader)
    8  batchLength           int32   (bytes after this field)
    12 partitionLeaderEpoch  int32   (outside CRC, set by the leader)
    16 magic                 int8    (= 2)
    17 crc                   uint32  (CRC-32C of bytes 21..end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records ...
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Callable, Iterator, NamedTuple

import cramjam
import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes before batchLength counts
MAGIC_OFFSET = 16
CRC_START = 21

#: Bytes that hold record batches: a request's, a log file's or a fetch answer's.
Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_LEN_PREFIX = struct.Struct(">qi")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in a log or a request."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: Buffer, pos: int = 0, _unpack: Callable[[Buffer, int], tuple[Any, ...]] = _HEADER.unpack_from,
                _new: Callable[..., BatchHeader] = tuple.__new__) -> BatchHeader:
    """Parse the batch header at ``pos``; the caller ensures 61 bytes are there."""
    return _new(BatchHeader, _unpack(buf, pos))


def peek_size(buf: Buffer, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` from its first 12 bytes, or -1 if fewer are there."""
    if len(buf) - pos < LOG_OVERHEAD:
        return -1
    length: int = _LEN_PREFIX.unpack_from(buf, pos)[1]
    return LOG_OVERHEAD + length


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches bytes ``attributes .. end`` of the batch."""
    end = pos + header.size
    with memoryview(buf) as view:
        return crc32c.crc32c(view[pos + CRC_START:end]) == header.crc


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    with memoryview(buf) as view:
        return crc32c.crc32c(view[pos + CRC_START:pos + size])


def iter_batches(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf[pos:end]``.

    Stops at the first incomplete batch (a partial tail, as a fetch response may carry) or at
    a header whose length field is impossible. CRCs are not checked here.
    """
    if end is None:
        end = len(buf)
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        size = header.size
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            return
        yield pos, header
        pos += size


def stamp(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Set base offset and partition leader epoch: both lie outside the CRC."""
    _OFFSET.pack_into(buf, pos, base_offset)
    _EPOCH.pack_into(buf, pos + LOG_OVERHEAD, leader_epoch)


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _OFFSET.pack_into(buf, pos, base_offset)


_ATTRS = struct.Struct(">h")
_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")


def set_log_append_time(buf: bytearray, pos: int, header: BatchHeader, now_ms: int) -> None:
    """Mark a batch LogAppendTime with ``now_ms`` as its max timestamp, then re-compute its CRC."""
    _ATTRS.pack_into(buf, pos + 21, header.attributes | TIMESTAMP_TYPE_BIT)
    _TS.pack_into(buf, pos + 35, now_ms)
    _CRC.pack_into(buf, pos + 17, compute_crc(buf, pos, header.size))


# -- records ------------------------------------------------------------------------------------

_XERIAL = b"\x82SNAPPY\x00"


class UndecodableRecordsError(ValueError):
    """A batch whose records cannot be decoded (its CRC covers them, but nothing checked their layout)."""


def decompress(codec: int, data: bytes) -> bytes:
    """The records of a batch compressed with ``codec`` (1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        if data.startswith(_XERIAL):                 # snappy-java's framing (Java producers)
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n]))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


_XERIAL_HEADER = _XERIAL + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def compress(codec: int, data: Buffer) -> bytes:
    """``data`` compressed as Kafka's producers do for ``codec`` (1 gzip, 2 snappy in snappy-java's
    framing, 3 an LZ4 frame of independent blocks, 4 zstd); 0 leaves it as it is."""
    if codec == 0:
        return bytes(data)
    if codec == 1:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)    # a gzip stream at Kafka's default level
        return packer.compress(data) + packer.flush()
    if codec == 2:
        out = bytearray(_XERIAL_HEADER)
        for pos in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[pos:pos + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data, level=0))   # LZ4's fast mode, as Kafka's producers
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def rebuild(batch: Buffer, header: BatchHeader, raw_records: Buffer, codec: int, count: int | None = None) -> bytearray:
    """The batch's header with ``raw_records`` (the records section, uncompressed) compressed with
    ``codec``: offsets, timestamps, the producer's id, epoch and sequence are kept; the length, the
    codec bits, the record count (when given) and the CRC are rewritten."""
    out = bytearray(memoryview(batch)[:HEADER_SIZE])
    out += compress(codec, raw_records)
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, CRC_START, (header.attributes & ~0x07) | codec)
    if count is not None:
        struct.pack_into(">i", out, HEADER_SIZE - 4, count)
    struct.pack_into(">I", out, MAGIC_OFFSET + 1, compute_crc(out, 0, len(out)))
    return out


def recompress(batch: Buffer, header: BatchHeader, codec: int) -> bytearray:
    """The batch with its records compressed with ``codec`` instead (a topic's
    ``compression.type``): the records themselves are unchanged."""
    body = bytes(memoryview(batch)[HEADER_SIZE:header.size])
    return rebuild(batch, header, decompress(header.compression, body) if header.compression else body, codec)


def write_varint(value: int) -> bytes:
    """Kafka's zig-zag varint (ByteUtils.writeVarint)."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``pos`` (Kafka's ByteUtils.readVarint)."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def records_section(buf: Buffer, pos: int, header: BatchHeader) -> tuple[Buffer, int, int]:
    """``(data, start, stop)``: where the records of the batch at ``pos`` lie, decompressed if need be."""
    if header.compression:
        data = decompress(header.compression, bytes(buf[pos + HEADER_SIZE:pos + header.size]))
        return data, 0, len(data)
    return buf, pos + HEADER_SIZE, pos + header.size


def walk_records(data: Buffer, p: int, stop: int, count: int
                 ) -> Iterator[tuple[int, int, int, int, bytes | None, int, int]]:
    """``(start, end, timestamp delta, offset delta, key, value position, value length)`` of each of
    ``count`` records laid out in ``data[p:stop]``; a null value has length -1. Raises ValueError,
    IndexError or struct.error when they do not fit."""
    # each varint of one byte (the common case) is decoded here, the longer ones by read_varint
    for _ in range(count):
        start = p
        b = data[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            length, p = read_varint(data, p)
        end = p + length
        if length <= 0 or end > stop:
            raise ValueError(f"a record of {length} bytes at {p} does not fit in the batch")
        p += 1                                                  # after the attributes
        b = data[p]
        if b < 0x80:
            timestamp_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            timestamp_delta, p = read_varint(data, p)
        b = data[p]
        if b < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = read_varint(data, p)
        b = data[p]
        if b < 0x80:
            key_length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            key_length, p = read_varint(data, p)
        if key_length >= 0:
            key: bytes | None = bytes(data[p:p + key_length])
            p += key_length
        else:
            key = None
        b = data[p]
        if b < 0x80:
            value_length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            value_length, p = read_varint(data, p)
        yield start, end, timestamp_delta, offset_delta, key, p, value_length
        p = end


#: what a record that does not decode raises from inside ``walk_records`` or a codec
DECODE_ERRORS = (IndexError, ValueError, struct.error, cramjam.DecompressionError)


def iter_records(buf: Buffer, pos: int, header: BatchHeader) -> Iterator[Record]:
    """The records of the batch at ``pos`` in ``buf`` (its ``header``), decompressed if need be.

    In a LogAppendTime batch every record's timestamp is the batch's max timestamp, as Kafka reads
    it. Raises UndecodableRecordsError when the records do not decode.
    """
    try:
        data, p, stop = records_section(buf, pos, header)
        log_append_time = header.attributes & TIMESTAMP_TYPE_BIT
        for _, _, timestamp_delta, offset_delta, key, at, value_length in walk_records(
                data, p, stop, header.records_count):
            yield Record(header.base_offset + offset_delta,
                         header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta,
                         key, bytes(data[at:at + value_length]) if value_length >= 0 else None)
    except DECODE_ERRORS as exc:
        raise UndecodableRecordsError(
            f"records of the batch at offset {header.base_offset} do not decode: {exc}") from None
