"""Build valid record batches (v2, magic 2) for tests, independently of protocol.records."""

from __future__ import annotations

import gzip
import struct

import crc32c

DEFAULT_TS = 1_700_000_000_000


def _varint(value: int) -> bytes:
    """Zig-zag varint (Kafka's ByteUtils.writeVarint / writeVarlong)."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, value: bytes | None, key: bytes | None = None) -> bytes:
    body = bytearray()
    body.append(0)  # attributes
    body += _varint(timestamp_delta)
    body += _varint(offset_delta)
    if key is None:
        body += _varint(-1)
    else:
        body += _varint(len(key)) + key
    if value is None:
        body += _varint(-1)
    else:
        body += _varint(len(value)) + value
    body += _varint(0)  # headers
    return _varint(len(body)) + bytes(body)


def make_batch(values: list[bytes], timestamp_ms: int = DEFAULT_TS, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, compression: int = 0, *,
               base_offset: int = 0, leader_epoch: int = -1, timestamps: list[int] | None = None) -> bytearray:
    """A v2 batch holding ``values`` (no keys, no headers), CRC-32C set.

    ``timestamps`` (one per record) overrides ``timestamp_ms``; compression 0 (none), 1 (gzip),
    2 (snappy), 3 (lz4), 4 (zstd), each by its own library (not Strandline's code).
    """
    if not values:
        raise ValueError("a batch needs at least one record")
    stamps = timestamps if timestamps is not None else [timestamp_ms] * len(values)
    base_ts = stamps[0]
    records = b"".join(_record(i, ts - base_ts, v) for i, (v, ts) in enumerate(zip(values, stamps)))
    if compression == 1:
        records = gzip.compress(records)
    elif compression == 2:
        import snappy
        records = snappy.compress(records)
    elif compression == 3:
        import lz4.frame
        records = lz4.frame.compress(records)
    elif compression == 4:
        import zstandard
        records = zstandard.ZstdCompressor().compress(records)
    elif compression != 0:
        raise ValueError(f"unknown compression {compression}")
    attributes = compression
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, base_ts, max(stamps),
                            producer_id, producer_epoch, base_sequence, len(values)) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return bytearray(struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc)


def keyed_batch(items: list[tuple[bytes | None, bytes | None]], timestamp_ms: int = DEFAULT_TS,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                compression: int = 0) -> bytearray:
    """A v2 batch of ``(key, value)`` records (None: a null key or value), uncompressed or gzip."""
    records = b"".join(_record(i, 0, v, k) for i, (k, v) in enumerate(items))
    if compression == 1:
        records = gzip.compress(records)
    elif compression != 0:
        raise ValueError(f"unsupported compression {compression}")
    after_crc = struct.pack(">hiqqqhii", compression, len(items) - 1, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, base_sequence, len(items)) + records
    crc = crc32c.crc32c(after_crc)
    return bytearray(struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc) + after_crc)


def batches(*groups: list[bytes], **kwargs) -> bytearray:
    """Several batches back to back (one per list of values)."""
    out = bytearray()
    for values in groups:
        out += make_batch(values, **kwargs)
    return out
