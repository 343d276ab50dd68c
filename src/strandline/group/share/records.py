"""Records of ``__share_group_state`` in Kafka's formats (Kafka 4.2's share coordinator,
``share-coordinator/src/main/resources/common/message``).

A key is its record type as an int16, then the group id (an int16-length string), the topic id
(16 bytes) and the partition (int32): type 0 is ShareSnapshotKey, type 1 ShareUpdateKey. A value is
version 0 of a flexible message: an int16 version, then the fields, the state batches as a compact
array (its length as an unsigned varint plus one), and an empty set of tagged fields after each
batch and after the value; tagged fields read are skipped. A None value is a tombstone.

The share coordinator writes a whole snapshot of a share-partition's state at every change
(ShareSnapshotValue: snapshot epoch, state epoch, leader epoch, start offset, creation and write
times, state batches); a loader also applies ShareUpdateValue records (a leader epoch, a start
offset unless -1, and batches that replace the offsets they cover), which Kafka writes between
snapshots.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from uuid import UUID

from strandline.group.share.partition import RecordState, StateBatch
from strandline.protocol.varints import read_uvarint, skip_tagged_fields, write_uvarint

SNAPSHOT = 0
UPDATE = 1
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """(group id, topic id, partition): whose state a record holds."""

    group_id: str
    topic_id: UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


def encode_key(key: ShareStateKey, record_type: int = SNAPSHOT) -> bytes:
    group = key.group_id.encode()
    return struct.pack(">hh", record_type, len(group)) + group + key.topic_id.bytes + struct.pack(">i", key.partition)


def decode_key(data: bytes) -> tuple[int, ShareStateKey] | None:
    """The record type and key; None for a type this coordinator does not know."""
    record_type, n = struct.unpack_from(">hh", data, 0)
    if record_type not in (SNAPSHOT, UPDATE):
        return None
    group = data[4:4 + n].decode()
    topic_id = UUID(bytes=bytes(data[4 + n:20 + n]))
    (partition,) = struct.unpack_from(">i", data, 20 + n)
    return record_type, ShareStateKey(group, topic_id, partition)


def encode_snapshot(value: ShareSnapshot) -> bytes:
    out = bytearray(struct.pack(">hiiiqqq", VALUE_VERSION, value.snapshot_epoch, value.state_epoch,
                                value.leader_epoch, value.start_offset, value.create_timestamp,
                                value.write_timestamp))
    _batches(value.batches, out)
    out.append(0)                                   # no tagged fields
    return bytes(out)


def encode_update(value: ShareUpdate) -> bytes:
    out = bytearray(struct.pack(">hiiq", VALUE_VERSION, value.snapshot_epoch, value.leader_epoch,
                                value.start_offset))
    _batches(value.batches, out)
    out.append(0)
    return bytes(out)


def decode_snapshot(data: bytes) -> ShareSnapshot:
    _, snapshot_epoch, state_epoch, leader_epoch, start, created, written = struct.unpack_from(">hiiiqqq", data, 0)
    batches, pos = _read_batches(data, struct.calcsize(">hiiiqqq"))
    skip_tagged_fields(data, pos)
    return ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start, created, written, batches)


def decode_update(data: bytes) -> ShareUpdate:
    _, snapshot_epoch, leader_epoch, start = struct.unpack_from(">hiiq", data, 0)
    batches, pos = _read_batches(data, struct.calcsize(">hiiq"))
    skip_tagged_fields(data, pos)
    return ShareUpdate(snapshot_epoch, leader_epoch, start, batches)


# ---------------------------------------------------------------------- internals

_BATCH = struct.Struct(">qqbh")


def _batches(batches: tuple[StateBatch, ...], out: bytearray) -> None:
    write_uvarint(len(batches) + 1, out)
    for b in batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
        out.append(0)


def _read_batches(data: bytes, pos: int) -> tuple[tuple[StateBatch, ...], int]:
    n, pos = read_uvarint(data, pos)
    batches = []
    for _ in range(max(0, n - 1)):
        first, last, state, count = _BATCH.unpack_from(data, pos)
        pos = skip_tagged_fields(data, pos + _BATCH.size)
        batches.append(StateBatch(first, last, RecordState(state), count))
    return tuple(batches), pos
