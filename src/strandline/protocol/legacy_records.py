"""Message format v0 and v1 (magic 0 and 1: Kafka's legacy message sets), converted to and from
the record batches v2 Strandline stores.

A legacy message set is a sequence of entries ``offset int64, size int32, message``; a message is
``crc uint32, magic int8, attributes int8, [timestamp int64 (magic 1)], key bytes, value bytes``
(bytes: an int32 length, -1 for null), its CRC a CRC-32 (zlib's, not CRC-32C) of everything
after the CRC. The attributes hold the codec (bits 0-2: 1 gzip, 2 snappy, 3 lz4) and, in magic 1,
the timestamp type (bit 3: LogAppendTime). A compressed entry is a wrapper message whose value
holds the compressed inner message set; in magic 1 the inner offsets are relative (0, 1, ...) and
the wrapper's offset is the absolute offset of the last inner message, in magic 0 the inner offsets
are absolute.

:func:`up_convert` is what Kafka's leader (``LogValidator``) does with a Produce v0-v2 request's
message set when the log's format is v2: it checks each entry and inner message, and builds one
record batch v2 of all the messages, offsets assigned from 0 (the log stamps the real ones), each
message's timestamp kept (magic 1) or NO_TIMESTAMP (-1, magic 0). :func:`down_convert` is Kafka's
``RecordsUtil.downConvert`` for a Fetch v0-v3 consumer: each stored batch becomes a message set of
the magic the request's version reads; control batches are left out, zstd batches cannot be.

The LZ4 codec of a magic-0 message carries the frame header checksum Kafka 0.8-0.9 computed wrongly
(over the frame's magic number too, KAFKA-3160): it is read and written that way, as Kafka does.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator, NamedTuple

import cramjam
import xxhash
from kio.schema.errors import ErrorCode

from strandline.protocol.records import (Buffer, Record, COMPRESSION_MASK, DECODE_ERRORS, HEADER_SIZE, LOG_OVERHEAD,
                                         TIMESTAMP_TYPE_BIT, compress, compute_crc, decompress, iter_batches,
                                         iter_records, write_varint)

NO_TIMESTAMP = -1
RECORD_OVERHEAD_V0 = 14         # crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V1 = 22         # and the timestamp
_ENTRY = struct.Struct(">qi")   # offset, size
_V0 = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_V1 = struct.Struct(">qiIbbq")  # and the timestamp
_I32 = struct.Struct(">i")
_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ZSTD = 4


class LegacyMessage(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp: int              # NO_TIMESTAMP in magic 0
    key: bytes | None
    value: bytes | None
    crc_ok: bool
    size: int                   # the entry's bytes (offset and size included)

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_BIT)


class CorruptMessage(ValueError):
    """A message set that cannot be read: Kafka's CorruptRecordException (CORRUPT_MESSAGE)."""


def first_magic(records: Buffer | None) -> int | None:
    """The magic byte of the first entry of a message set or record batch, None when too short."""
    if records is None or len(records) <= LOG_OVERHEAD + 4:
        return None
    magic: int = struct.unpack_from(">b", records, LOG_OVERHEAD + 4)[0]
    return magic


def _bytes_field(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptMessage("a message's key or value length lies past its end")
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptMessage(f"a message's key or value of {n} bytes lies past its end")
    return bytes(buf[pos:pos + n]), pos + n


def iter_entries(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[LegacyMessage]:
    """The entries of a legacy message set. A partial entry at the end is left out, as Kafka's
    log input stream does; an entry too small for a message, or of an unknown magic, raises
    :class:`CorruptMessage`."""
    if end is None:
        end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        offset, size = _ENTRY.unpack_from(buf, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptMessage(f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})")
        stop = pos + LOG_OVERHEAD + size
        if stop > end:
            return
        yield read_message(buf, pos, stop)
        pos = stop


def read_message(buf: Buffer, pos: int, stop: int) -> LegacyMessage:
    """The entry lying in ``buf[pos:stop]``."""
    offset, size, crc, magic, attributes = _V0.unpack_from(buf, pos)
    if magic not in (0, 1):
        raise CorruptMessage(f"Invalid magic found in record: {magic}")
    at = pos + _V0.size
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if size < RECORD_OVERHEAD_V1:
            raise CorruptMessage(f"Record size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V1})")
        timestamp = struct.unpack_from(">q", buf, at)[0]
        at += 8
    key, at = _bytes_field(buf, at, stop)
    value, at = _bytes_field(buf, at, stop)
    if at != stop:
        raise CorruptMessage(f"a message of {size} bytes holds {stop - at} bytes after its value")
    with memoryview(buf) as view:
        crc_ok = zlib.crc32(view[pos + 16:stop]) == crc
    return LegacyMessage(offset, magic, attributes & 0xFF, timestamp, key, value, crc_ok, stop - pos)


# -- LZ4 as Kafka frames it (KafkaLZ4BlockOutputStream) ------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60                 # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40                  # 64 KB blocks
_LZ4_BLOCK = 64 * 1024


def _lz4_header_checksum(frame: bytes, broken: bool) -> int:
    """The frame descriptor's checksum byte: of the FLG and BD bytes, or (Kafka's magic-0 frames)
    of the magic number too."""
    return (xxhash.xxh32_intdigest(frame[0 if broken else 4:6]) >> 8) & 0xFF


def lz4_frame(data: bytes, magic: int) -> bytes:
    """``data`` in an LZ4 frame as Kafka writes one for a message of ``magic``."""
    out = bytearray(_LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD)))
    out.append(_lz4_header_checksum(bytes(out), magic == 0))
    for pos in range(0, len(data), _LZ4_BLOCK):
        chunk = data[pos:pos + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            out += struct.pack("<I", len(chunk) | 0x80000000) + chunk      # stored uncompressed
        else:
            out += struct.pack("<I", len(block)) + block
    out += b"\0\0\0\0"
    return bytes(out)


def _lz4_unframe(data: bytes, magic: int) -> bytes:
    if magic == 0 and len(data) >= 7 and data[:4] == _LZ4_MAGIC:
        # the checksum of a magic-0 frame was computed wrongly: put the right one in its place
        at = 6 + (8 if data[4] & 0x08 else 0)     # after FLG, BD and the optional content size
        if at < len(data):
            fixed = bytearray(data)
            fixed[at] = (xxhash.xxh32_intdigest(bytes(data[4:at])) >> 8) & 0xFF
            data = bytes(fixed)
    return bytes(cramjam.lz4.decompress(data))


def decompress_legacy(codec: int, data: bytes, magic: int) -> bytes:
    if codec == 3:
        return _lz4_unframe(data, magic)
    return decompress(codec, data)


def compress_legacy(codec: int, data: bytes, magic: int) -> bytes:
    if codec == 3:
        return lz4_frame(data, magic)
    return compress(codec, data)


# -- writing messages ---------------------------------------------------------------------------

def encode_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One entry of a legacy message set, its CRC-32 computed."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic > 0:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        if field is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I32.pack(len(field)) + field
    return _ENTRY.pack(offset, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + bytes(body)


# -- up-conversion (Produce v0-v2) --------------------------------------------------------------

class UpConverted(NamedTuple):
    """What :func:`up_convert` made of a message set: ``batch`` (a record batch v2, offsets from 0)
    when ``error`` is NONE, None when the set held no message (Kafka appends nothing and answers
    NONE); else the error, its message, and the messages refused ``(index, message)`` (KIP-467)."""

    error: ErrorCode
    batch: bytearray | None = None
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


def up_convert(records: Buffer, *, max_message_bytes: int, target_codec: int | None, compacted: bool,  # noqa: C901  (every message format and codec in one pass over the batch)
               max_timestamp_difference_ms: int | None, now_ms: int, where: str) -> UpConverted:
    """A Produce v0-v2 message set of magic 0 or 1 as one record batch v2, checked as Kafka's
    ``Log.analyzeAndValidateRecords`` and ``LogValidator`` check it.

    ``target_codec``: the codec of the batch (the topic's ``compression.type``), None to keep the
    producer's. ``max_timestamp_difference_ms``: None unless the topic keeps CreateTime and bounds
    it. ``where``: the partition, for the messages."""
    try:
        entries = list(iter_entries(records))
    except CorruptMessage as exc:
        return UpConverted(ErrorCode.corrupt_message, message=f"{exc} in topic partition {where}.")
    except struct.error as exc:
        return UpConverted(ErrorCode.corrupt_message, message=f"{exc} in topic partition {where}.")
    if not entries:
        return UpConverted(ErrorCode.none)
    magic = entries[0].magic
    source_codec = 0
    for entry in entries:
        if entry.size > max_message_bytes:
            return UpConverted(ErrorCode.message_too_large, message=(
                f"The record batch size in the append to {where} is {entry.size} bytes which exceeds the "
                f"maximum configured value of {max_message_bytes}."))
        if not entry.crc_ok:
            return UpConverted(ErrorCode.corrupt_message, message=f"Record is corrupt in topic partition {where}.")
        if entry.codec:
            source_codec = entry.codec
    if source_codec and len(entries) > 1:
        return UpConverted(ErrorCode.invalid_record, message="Compressed outer record has more than one batch")
    messages: list[LegacyMessage] = []          # the messages to store, in order
    errors: list[tuple[int, str, ErrorCode]] = []
    for entry in entries:
        if entry.magic != magic:
            return UpConverted(ErrorCode.invalid_record, message=(
                f"Batch magic {entry.magic} is not the same as the first batch'es magic byte {magic} "
                f"in topic partition {where}."))
        if not entry.codec:
            inner = [entry]
        else:
            if entry.codec not in _CODEC_NAMES:
                return UpConverted(ErrorCode.corrupt_message, message=f"Unknown compression type id: {entry.codec}")
            if entry.value is None:
                return UpConverted(ErrorCode.invalid_record, message=(
                    "Found invalid compressed record set with null value"))
            try:
                data = decompress_legacy(entry.codec, entry.value, magic)
                inner = list(iter_entries(data))
            except CorruptMessage as exc:
                return UpConverted(ErrorCode.corrupt_message, message=f"{exc} in topic partition {where}.")
            except DECODE_ERRORS as exc:
                return UpConverted(ErrorCode.corrupt_message, message=(
                    f"the {_CODEC_NAMES[entry.codec]} wrapper message does not decompress: {exc}"))
            if not inner:
                return UpConverted(ErrorCode.invalid_record, message=(
                    "Found invalid compressed record set with no inner records"))
        for message in inner:
            index = len(messages)
            if entry.codec and entry.log_append_time:
                message = message._replace(timestamp=entry.timestamp)   # as Kafka reads an inner message
            messages.append(message)
            if entry.codec and message.codec:
                errors.append((index, "Compressed outer record should not have an inner record with a "
                                      f"compression attribute set: offset {message.offset}", ErrorCode.invalid_record))
                continue
            if message.magic != magic:
                errors.append((index, f"Record's magic {message.magic} does not match outer magic {magic} in "
                                      f"topic partition {where}.", ErrorCode.invalid_record))
                continue
            if entry.codec and not message.crc_ok:
                return UpConverted(ErrorCode.corrupt_message, message=(
                    f"Record is corrupt (inner message at {message.offset}) in topic partition {where}."))
            if compacted and message.key is None:
                errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                      f"{where}.", ErrorCode.invalid_record))
                continue
            ts = message.timestamp
            if max_timestamp_difference_ms is not None and ts != NO_TIMESTAMP and \
                    abs(ts - now_ms) > max_timestamp_difference_ms:
                errors.append((index, f"Timestamp {ts} of message with offset {message.offset} is out of range. "
                                      f"The timestamp should be within [{now_ms - max_timestamp_difference_ms}, "
                                      f"{now_ms + max_timestamp_difference_ms}]", ErrorCode.invalid_timestamp))
            elif entry.log_append_time:
                errors.append((index, f"Invalid timestamp type in message at offset {message.offset}. Producer "
                                      "should not set timestamp type to LogAppendTime.", ErrorCode.invalid_timestamp))
    if errors:
        timestamps = any(code is ErrorCode.invalid_timestamp for _, _, code in errors)
        return UpConverted(
            ErrorCode.invalid_timestamp if timestamps else ErrorCode.invalid_record,
            message="One or more records have been rejected" + (" due to invalid timestamp" if timestamps else ""),
            record_errors=tuple((i, why) for i, why, _ in errors))
    codec = source_codec if target_codec is None else target_codec
    if magic == 0:
        messages = [m._replace(timestamp=NO_TIMESTAMP) for m in messages]
    batch = build_batch([(m.timestamp, m.key, m.value) for m in messages], codec)
    if len(batch) > max_message_bytes:
        return UpConverted(ErrorCode.message_too_large, message=(
            f"Message batch size is {len(batch)} bytes in append to partition {where} which exceeds the "
            f"maximum configured size of {max_message_bytes}."))
    return UpConverted(ErrorCode.none, batch)


def build_batch(records: list[tuple[int, bytes | None, bytes | None]], codec: int) -> bytearray:
    """A record batch v2 of ``records`` ``(timestamp, key, value)`` with offsets 0..n-1, no producer
    id, CreateTime, the records compressed with ``codec``; base offset and leader epoch are left
    for the log to stamp. Its base timestamp is the first record's, its max timestamp the largest
    (-1 when none has one), as Kafka's ``MemoryRecordsBuilder``."""
    base_ts = records[0][0]
    max_ts = NO_TIMESTAMP
    body = bytearray()
    for delta, (ts, key, value) in enumerate(records):
        max_ts = max(max_ts, ts)
        rec = bytearray(b"\x00")                                # attributes
        rec += write_varint(ts - base_ts) + write_varint(delta)
        for field in (key, value):
            if field is None:
                rec += write_varint(-1)
            else:
                rec += write_varint(len(field)) + field
        rec += write_varint(0)                                  # no headers
        body += write_varint(len(rec)) + rec
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    n = len(records)
    out = bytearray(struct.pack(">qiibIhiqqqhii", 0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, 2, 0, codec,
                                n - 1, base_ts, max_ts, -1, -1, -1, n))
    out += payload
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return out


# -- down-conversion (Fetch v0-v3) --------------------------------------------------------------

class UnsupportedCompression(ValueError):
    """A zstd batch, which a message set of magic 0 or 1 cannot carry (UNSUPPORTED_COMPRESSION_TYPE)."""


def down_convert(data: Buffer, to_magic: int, fetch_offset: int, limit: int) -> bytes:
    """The stored record batches ``data`` as a legacy message set of ``to_magic`` (Kafka's
    ``RecordsUtil.downConvert``): one message per record of an uncompressed batch (those below
    ``fetch_offset`` left out), one wrapper message per compressed batch with the codec of the
    batch; control batches left out; LogAppendTime kept (magic 1). At most ``limit`` bytes, except
    that the first converted batch is always whole. A partial batch at the end is left out.

    Raises :class:`UnsupportedCompression` for a zstd batch."""
    out = bytearray()
    for pos, header in iter_batches(data):
        if header.is_control:
            continue
        codec = header.compression
        if codec == ZSTD:
            raise UnsupportedCompression("Down-conversion of zstandard-compressed batches is not supported")
        records = list(iter_records(data, pos, header))
        if not codec:
            records = [r for r in records if r.offset >= fetch_offset]
        if not records:
            continue
        log_append_time = bool(header.attributes & TIMESTAMP_TYPE_BIT) and to_magic > 0
        attrs = TIMESTAMP_TYPE_BIT if log_append_time else 0

        def ts(record: Record) -> int:
            return header.max_timestamp if log_append_time else record.timestamp  # noqa: B023  (called within this iteration)

        if not codec:
            converted = b"".join(encode_message(r.offset, to_magic, attrs, ts(r), r.key, r.value) for r in records)
        else:
            first = records[0].offset
            inner = b"".join(encode_message(r.offset - first if to_magic > 0 else r.offset, to_magic, attrs, ts(r),
                                            r.key, r.value) for r in records)
            wrapper_ts = header.max_timestamp if log_append_time else max(ts(r) for r in records)
            converted = encode_message(records[-1].offset, to_magic, codec | attrs, wrapper_ts, None,
                                       compress_legacy(codec, inner, to_magic))
        if out and len(out) + len(converted) > limit:
            break
        out += converted
    return bytes(out)
