"""Build valid record batches v2 for tests (uncompressed or gzip)."""

from __future__ import annotations

import gzip
import struct

import crc32c


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zig-zag
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, bytes]] = ()) -> bytes:
    body = bytearray(b"\x00")
    body += _varint(timestamp_delta) + _varint(offset_delta)
    body += _varint(-1) if key is None else _varint(len(key)) + key
    body += _varint(-1) if value is None else _varint(len(value)) + value
    body += _varint(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += _varint(len(hkb)) + hkb + _varint(len(hv)) + hv
    return _varint(len(body)) + bytes(body)


def make_batch(values: list[bytes], timestamp_ms: int = 1_700_000_000_000, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, compression: int = 0,
               keys: list[bytes | None] | None = None, base_offset: int = 0, leader_epoch: int = -1) -> bytearray:
    records = b"".join(_record(i, 0, keys[i] if keys else None, v) for i, v in enumerate(values))
    if compression == 1:
        records = gzip.compress(records)
    elif compression != 0:
        raise ValueError("tests build uncompressed or gzip batches only")
    count = len(values)
    after_crc = struct.pack(">hiqqqhii", compression, count - 1, timestamp_ms, timestamp_ms,
                            producer_id, producer_epoch, base_sequence, count) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return bytearray(struct.pack(">qiibI", base_offset, batch_length, leader_epoch, 2, crc) + after_crc)
