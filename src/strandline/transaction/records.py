"""Records of ``__transaction_state`` in Kafka's formats (``TransactionLog``).

A transaction's state is key v0 ``(transactional id)`` with value v0 ``(producer id, producer
epoch, transaction timeout, state, partitions, last update time, start time)``; a null value is a
tombstone. A transaction of transactions v2 (KIP-890 part 2) is written as value v1, Kafka's first
flexible version, whose tagged fields keep the previous and next producer ids and the client's
transaction version. The markers that end a transaction are in :mod:`strandline.protocol.markers`.
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


def _uvarint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_uvarint(r: _Reader) -> int:
    shift = value = 0
    while True:
        b = r.data[r.pos]
        r.pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
        if shift > 28:
            raise ValueError("an unsigned varint longer than 5 bytes")


def _encode_value_v1(m: TransactionMetadata) -> bytes:
    """Value v1 (flexible): compact strings and arrays, then the tagged fields that differ from
    their defaults (0: previous producer id, 1: next producer id, 2: client transaction version)."""
    out = bytearray(struct.pack(">hqhib", 1, m.producer_id, m.producer_epoch, m.timeout_ms, int(m.state)))
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(index)
    _uvarint(len(by_topic) + 1, out)
    for topic, indexes in by_topic.items():
        name = topic.encode()
        _uvarint(len(name) + 1, out)
        out += name
        _uvarint(len(indexes) + 1, out)
        for index in indexes:
            out += struct.pack(">i", index)
        out.append(0)                                   # no tagged fields of the topic
    out += struct.pack(">qq", m.update_ms, m.start_ms)
    tagged = [(tag, data) for tag, data, default in (
        (0, struct.pack(">q", m.previous_producer_id), m.previous_producer_id == -1),
        (1, struct.pack(">q", m.next_producer_id), m.next_producer_id == -1),
        (2, struct.pack(">h", 2 if m.tv2 else 0), not m.tv2)) if not default]
    _uvarint(len(tagged), out)
    for tag, data in tagged:
        _uvarint(tag, out)
        _uvarint(len(data), out)
        out += data
    return bytes(out)


def _decode_value_v1(transactional_id: str, r: _Reader) -> TransactionMetadata:
    producer_id, epoch, timeout = r.i64(), r.i16(), r.i32()
    state = TransactionState(struct.unpack_from(">b", r.data, r.pos)[0])
    r.pos += 1
    partitions: set[tuple[str, int]] = set()
    for _ in range(_read_uvarint(r) - 1):
        n = _read_uvarint(r) - 1
        topic = r.data[r.pos:r.pos + n].decode()
        r.pos += n
        for _ in range(_read_uvarint(r) - 1):
            partitions.add((topic, r.i32()))
        for _ in range(_read_uvarint(r)):                # the topic's tagged fields: none known
            _read_uvarint(r)
            r.pos += _read_uvarint(r)
    update_ms, start_ms = r.i64(), r.i64()
    m = TransactionMetadata(transactional_id, producer_id, epoch, timeout, state, partitions, update_ms, start_ms)
    for _ in range(_read_uvarint(r)):
        tag, size = _read_uvarint(r), _read_uvarint(r)
        data = r.data[r.pos:r.pos + size]
        r.pos += size
        if tag == 0:
            m.previous_producer_id = struct.unpack(">q", data)[0]
        elif tag == 1:
            m.next_producer_id = struct.unpack(">q", data)[0]
        elif tag == 2:
            m.tv2 = struct.unpack(">h", data)[0] >= 2
    return m


def encode_value(m: TransactionMetadata) -> bytes:
    """Value v0; v1 for a transaction of transactions v2 (as Kafka writes v1 for it)."""
    if m.tv2:
        return _encode_value_v1(m)
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
    if version == 1:
        return _decode_value_v1(transactional_id, r)
    if version != 0:
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
