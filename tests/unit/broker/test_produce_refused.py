"""Produce answers for batches refused before the log is asked, as Kafka's: a magic above 2 is
CORRUPT_MESSAGE (Kafka's ByteBufferLogInputStream), and a batch refused for its shape (magic 0/1 in
v3+, corrupt, over max.message.bytes) carries log start offset -1 (Kafka's UnknownLogAppendInfo);
a batch the log's validation refuses (a compacted topic's record without a key) keeps the
partition's log start offset. Found by tests/differential (produce-magic-3, produce-too-large,
produce-bad-crc, produce-magic-1-in-v3)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.unit.batches import keyed_batch, make_batch
from tests.unit.broker.test_broker_core import Harness


def produce(h: Harness, topic: str, records: bytes) -> tuple[ErrorCode, int, int]:
    h.produce(topic, records, version=8)
    p = h.response(0, 8).responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.log_start_offset


def with_magic(batch: bytes, magic: int) -> bytes:
    out = bytearray(batch)
    out[16] = magic
    return bytes(out)


def test_refused_batches_answer_kafkas_error_and_log_start_offset():
    h = Harness()
    h.create("t", configs={"max.message.bytes": "1024"})
    h.create("c", configs={"cleanup.policy": "compact"})
    good = bytes(make_batch([b"a"]))
    assert produce(h, "t", good) == (ErrorCode.none, 0, 0)
    assert produce(h, "t", with_magic(good, 3)) == (ErrorCode.corrupt_message, -1, -1)
    assert produce(h, "t", with_magic(good, 0xFF)) == (ErrorCode.corrupt_message, -1, -1)
    assert produce(h, "t", with_magic(good, 1)) == (ErrorCode.invalid_record, -1, -1)
    crc = bytearray(good)
    crc[-1] ^= 0xFF
    assert produce(h, "t", bytes(crc)) == (ErrorCode.corrupt_message, -1, -1)
    assert produce(h, "t", bytes(make_batch([b"x" * 2000]))) == (ErrorCode.message_too_large, -1, -1)
    assert produce(h, "c", bytes(keyed_batch([(None, b"v")]))) == (ErrorCode.invalid_record, -1, 0)
    assert produce(h, "t", good) == (ErrorCode.none, 1, 0)      # nothing refused was written
