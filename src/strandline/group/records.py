"""Records of ``__consumer_offsets`` in Kafka's formats, and the batches that carry them.

Keys and values are Kafka's (``GroupCoordinator``'s schemas): an offset commit is key v1
``(group, topic, partition)`` with value v3 ``(offset, leader epoch, metadata, commit time)``; a
group's metadata is key v2 ``(group)`` with value v3 (protocol type, generation, protocol,
leader, state time, members). A null value is a tombstone. This internal topic is the one place
where the broker writes records itself, so it builds (uncompressed) v2 batches here; it reads them
with the record decoder of protocol.records.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

import crc32c

from strandline.protocol.records import iter_batches, write_varint
from strandline.protocol.records import iter_records as iter_batch_records

#: A record of the offsets topic, ``(key, value)``; a None value is a tombstone.
KeyValue = tuple[bytes, bytes | None]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, v: int) -> "_Writer":
        self.out += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> "_Writer":
        self.out += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> "_Writer":
        self.out += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> "_Writer":
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.out += data
        return self

    def bytes_(self, v: bytes | None) -> "_Writer":
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.out += v
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        v: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def i64(self) -> int:
        return self._take(">q")

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        v = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return v

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        v = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return v


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).out)


def group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(group).out)


def offset_value(v: OffsetValue) -> bytes:
    return bytes(_Writer().i16(OFFSET_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch).string(v.metadata)
                 .i64(v.commit_timestamp).out)


def group_value(v: GroupValue) -> bytes:
    w = _Writer().i16(GROUP_VALUE_VERSION).string(v.protocol_type).i32(v.generation).string(v.protocol)
    w.string(v.leader).i64(v.state_timestamp).i32(len(v.members))
    for m in v.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a record of ``__consumer_offsets``; None for versions this broker does not know."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.i64()
    return OffsetValue(offset, epoch, metadata, timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        members.append(MemberValue(member_id, instance, client_id, client_host, rebalance, session,
                                   r.bytes_() or b"", r.bytes_() or b""))
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


# -- batches --------------------------------------------------------------------------------------


varint = write_varint           # Kafka's zig-zag varint (ByteUtils.writeVarint)


def build_batch(records: Sequence[KeyValue], timestamp_ms: int, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytearray:
    """An uncompressed v2 batch of (key, value) records, from an idempotent producer when
    ``producer_id`` is set (part of its transaction when ``transactional``); the log stamps
    offsets and epoch."""
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = bytearray(b"\0") + varint(0) + varint(delta) + varint(len(key)) + key
        rec += varint(-1) if value is None else varint(len(value)) + value
        rec += varint(0)
        body += varint(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0x10 if transactional else 0, len(records) - 1, timestamp_ms, timestamp_ms,
                            producer_id,
                            producer_epoch, base_sequence, len(records)) + body
    crc = crc32c.crc32c(after_crc)
    return bytearray(struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc) + after_crc)


def iter_records(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in the v2 batches of ``data``."""
    for pos, h in iter_batches(data):
        for record in iter_batch_records(data, pos, h):
            yield record.offset, record.key, record.value


def iter_log_records(data: bytes | bytearray | memoryview
                     ) -> Iterator[tuple[int, bytes | None, bytes | None, int, int | None]]:
    """``(offset, key, value, transactional producer id or -1, marker type or None)`` of every
    record of ``data``: what a coordinator replays, transactions included (a marker is a control
    record: ``marker type`` 0 abort, 1 commit)."""
    for pos, h in iter_batches(data):
        producer = h.producer_id if h.attributes & 0x10 else -1
        control = bool(h.attributes & 0x20)
        for record in iter_batch_records(data, pos, h):
            if control:
                key = record.key
                kind = int.from_bytes(key[2:4], "big", signed=True) if key is not None and len(key) >= 4 else -1
                yield record.offset, None, None, producer, kind
            else:
                yield record.offset, record.key, record.value, producer, None


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int. (Remembered for
    the ids seen last: a transaction coordinator asks it of the same transactional ids again and
    again.)"""
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a consumer's subscription (the "consumer" protocol's member metadata:
    version, then the topic names); an unreadable one names none."""
    try:
        reader = _Reader(bytes(metadata))
        reader.i16()
        return [t for _ in range(max(reader.i32(), 0)) if (t := reader.string()) is not None]
    except (struct.error, UnicodeDecodeError):
        return []
