"""Record sets the corpus produces: batches v2 built by tests/unit/batches.py (its own encoder),
legacy message sets (magic 0 and 1) by kafka-python's builder, and broken ones made from them.
Timestamps are fixed for a run (the minute the corpus was built), so that both clusters store the
same bytes, and recent, so that neither cluster's retention (7 days by default) deletes them."""

from __future__ import annotations

import struct
import time

from tests.unit.batches import keyed_batch, make_batch

TS = int(time.time()) // 60 * 60_000


def batch(*values: bytes, ts: int = TS, producer_id: int = -1, producer_epoch: int = -1, sequence: int = -1,
          compression: int = 0) -> bytes:
    return bytes(make_batch(list(values), ts, producer_id, producer_epoch, sequence, compression))


def transactional(*values: bytes, producer_id: int, producer_epoch: int, sequence: int = 0) -> bytes:
    """A batch of a transaction: the transactional bit (attributes 0x10) set, the CRC redone."""
    import crc32c

    data = bytearray(make_batch(list(values), TS, producer_id, producer_epoch, sequence))
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x10
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def keyed(*items: tuple[bytes | None, bytes | None], ts: int = TS) -> bytes:
    return bytes(keyed_batch(list(items), ts))


def legacy(magic: int, *values: bytes, ts: int = TS, codec: int = 0) -> bytes:
    """A message set of format v0 or v1 (kafka-python's LegacyRecordBatchBuilder)."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, value in enumerate(values):
        assert builder.append(i, ts if magic else None, None, value) is not None
    return bytes(builder.build())


def bad_crc(data: bytes) -> bytes:
    """A batch v2 whose CRC-32C does not match its content (the last byte of the content flipped)."""
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


def magic(data: bytes, value: int) -> bytes:
    """A batch v2 with another magic byte (offset 16), nothing else changed."""
    out = bytearray(data)
    out[16] = value
    return bytes(out)
