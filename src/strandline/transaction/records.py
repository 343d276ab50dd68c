"""Records of ``__transaction_state`` in Kafka's formats (``TransactionLog``).

A transaction's state is key v0 ``(transactional id)`` with value v0 ``(producer id, producer
epoch, transaction timeout, state, partitions, last update time, start time)``; a null value is a
tombstone. The markers that end a transaction are in :mod:`strandline.protocol.markers`.
"""

from __future__ import annotations

import struct

from strandline.group.records import _Reader, _Writer, build_batch, partition_for
from strandline.protocol.markers import (  # noqa: F401  (part of this module's API)
    ABORT_MARKER, COMMIT_MARKER, CONTROL_BIT, TRANSACTIONAL_BIT, build_marker, marker_type)
from strandline.transaction.metadata import TransactionMetadata, TransactionState  # also this module's API

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
NO_PRODUCER_EPOCH = -1
#: a producer epoch at this value cannot be bumped again: the producer gets a new id
MAX_PRODUCER_EPOCH = 32767


def encode_key(transactional_id: str) -> bytes:
    return bytes(_Writer().i16(KEY_VERSION).string(transactional_id).out)


def encode_value(m: TransactionMetadata) -> bytes:
    w = _Writer().i16(VALUE_VERSION).i64(m.producer_id).i16(m.producer_epoch).i32(m.timeout_ms)
    w.out += struct.pack(">b", int(m.state))
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(index)
    w.i32(len(by_topic))
    for topic, indexes in by_topic.items():
        w.string(topic).i32(len(indexes))
        for index in indexes:
            w.i32(index)
    return bytes(w.i64(m.update_ms).i64(m.start_ms).out)


def decode_key(data: bytes) -> str:
    r = _Reader(bytes(data))
    version = r.i16()
    if version != KEY_VERSION:
        raise ValueError(f"unknown transaction log key version {version}")
    transactional_id = r.string()
    if transactional_id is None:
        raise ValueError("a transaction log key without a transactional id")
    return transactional_id


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    r = _Reader(bytes(data))
    version = r.i16()
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    producer_id, epoch, timeout = r.i64(), r.i16(), r.i32()
    state = TransactionState(struct.unpack_from(">b", r.data, r.pos)[0])
    r.pos += 1
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(r.i32(), 0)):
        topic = r.string() or ""
        for _ in range(r.i32()):
            partitions.add((topic, r.i32()))
    update_ms, start_ms = r.i64(), r.i64()
    return TransactionMetadata(transactional_id, producer_id, epoch, timeout, state, partitions, update_ms, start_ms)


def state_record(m: TransactionMetadata) -> tuple[bytes, bytes | None]:
    return encode_key(m.transactional_id), encode_value(m)


def build_state_batch(records: list[tuple[bytes, bytes | None]], now_ms: int) -> bytearray:
    return build_batch(records, now_ms)


def partition_of(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    return partition_for(transactional_id, partitions)
