"""A consumer group's records of ``__consumer_offsets`` in Kafka's formats (Kafka 4.0's group
coordinator, ``group-coordinator/src/main/resources/common/message``).

A key is its record type as an int16 (Kafka writes the type where a classic key has its version),
then the group id and, for a member's records, the member id, as int16-length strings. A value is
version 0 of a flexible message: an int16 version, then compact strings and arrays (lengths as
unsigned varints plus one), 16-byte topic ids, and an empty set of tagged fields after each
structure; tagged fields read are skipped. A None value is a tombstone.

=====  ==========================================  =============================================
type   key                                         value
=====  ==========================================  =============================================
3      ConsumerGroupMetadataKey (group)            the group epoch
4      ConsumerGroupPartitionMetadataKey (group)   the subscribed topics: id, name, partitions
5      ConsumerGroupMemberMetadataKey (member)     the member's subscription and client
6      ConsumerGroupTargetAssignmentMetadataKey    the target assignment's epoch
7      ConsumerGroupTargetAssignmentMemberKey      one member's target assignment
8      ConsumerGroupCurrentMemberAssignmentKey     one member's epochs, state and partitions
16     ConsumerGroupRegularExpressionKey (group,   the topics a subscribed regular expression
       regular expression)                         resolved to, the version, the time (Kafka 4.0)
=====  ==========================================  =============================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from uuid import UUID

from strandline.group.consumer.model import Assignment, ClassicMemberMetadata, MemberState, TopicMetadata, normalized

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
KEY_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)) | {REGULAR_EXPRESSION}
_MEMBER_KEYS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class Key:
    type: int
    group_id: str
    member_id: str | None = None
    regex: str | None = None            # of a REGULAR_EXPRESSION key


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    #: tagged field 0: the classic protocol's metadata of a member that speaks it
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class RegularExpressionValue:
    """The topics a regular expression resolved to (sorted), the topic-set version they were
    resolved at, and when."""
    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


Value = (GroupEpochValue | PartitionMetadataValue | MemberMetadataValue | TargetAssignmentEpochValue
         | TargetAssignmentMemberValue | CurrentAssignmentValue | RegularExpressionValue)
#: a record: its key, and its value or None for a tombstone
Record = tuple[Key, Value | None]
_VALUE_TYPES: dict[type, int] = {GroupEpochValue: GROUP_METADATA, PartitionMetadataValue: PARTITION_METADATA,
                                 MemberMetadataValue: MEMBER_METADATA,
                                 TargetAssignmentEpochValue: TARGET_ASSIGNMENT_METADATA,
                                 TargetAssignmentMemberValue: TARGET_ASSIGNMENT_MEMBER,
                                 CurrentAssignmentValue: CURRENT_MEMBER_ASSIGNMENT,
                                 RegularExpressionValue: REGULAR_EXPRESSION}


def value_type(value: Value) -> int:
    return _VALUE_TYPES[type(value)]


# -- the flexible encoding -------------------------------------------------------------------------


class _Out:
    def __init__(self) -> None:
        self.b = bytearray()

    def fixed(self, fmt: str, v: int) -> None:
        self.b += struct.pack(fmt, v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.b.append((v & 0x7F) | 0x80)
            v >>= 7
        self.b.append(v)

    def string(self, s: str | None) -> None:                 # compact (nullable) string
        if s is None:
            self.uvarint(0)
            return
        data = s.encode()
        self.uvarint(len(data) + 1)
        self.b += data

    def uuid(self, u: UUID) -> None:
        self.b += u.bytes

    def no_tags(self) -> None:
        self.uvarint(0)

    def partitions(self, a: Assignment) -> None:              # []TopicPartitions
        topics = sorted(a)
        self.uvarint(len(topics) + 1)
        for topic_id in topics:
            self.uuid(topic_id)
            ps = sorted(a[topic_id])
            self.uvarint(len(ps) + 1)
            for p in ps:
                self.fixed(">i", p)
            self.no_tags()


class _In:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, fmt: str) -> int:
        v: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        shift = v = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            v |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return v
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        s = self.data[self.pos:self.pos + n - 1].decode()
        self.pos += n - 1
        return s

    def array_length(self) -> int:
        return max(self.uvarint() - 1, 0)

    def uuid(self) -> UUID:
        u = UUID(bytes=bytes(self.data[self.pos:self.pos + 16]))
        self.pos += 16
        return u

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()                                     # the tag
            self.pos += self.uvarint()                         # its size, then its bytes

    def partitions(self) -> Assignment:
        found: dict[UUID, list[int]] = {}
        for _ in range(self.array_length()):
            topic_id = self.uuid()
            found[topic_id] = [self.fixed(">i") for _ in range(self.array_length())]
            self.skip_tags()
        return normalized(found)


# -- keys -----------------------------------------------------------------------------------------


def _short_string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def pack_key(kind: int, *fields: str) -> bytes:
    """A coordinator key: its type as an int16, then its fields as int16-length strings."""
    return struct.pack(">h", kind) + b"".join(_short_string(f) for f in fields)


def unpack_key_fields(data: bytes, count: int) -> list[str]:
    """The first ``count`` string fields of a key after its type."""
    pos = 2
    fields = []
    for _ in range(count):
        n = struct.unpack_from(">h", data, pos)[0]
        fields.append(data[pos + 2:pos + 2 + n].decode())
        pos += 2 + n
    return fields


def encode_key(key: Key) -> bytes:
    if key.type in _MEMBER_KEYS:
        return pack_key(key.type, key.group_id, key.member_id or "")
    if key.type == REGULAR_EXPRESSION:
        return pack_key(key.type, key.group_id, key.regex or "")
    return pack_key(key.type, key.group_id)


def decode_key(data: bytes) -> Key | None:
    """The key of a consumer group's record; None for the other records of the topic (offset
    commits, classic groups) and for types this broker does not know."""
    kind = struct.unpack_from(">h", data, 0)[0]
    if kind not in KEY_TYPES:
        return None
    fields = unpack_key_fields(data, 2 if kind in _MEMBER_KEYS or kind == REGULAR_EXPRESSION else 1)
    if kind == REGULAR_EXPRESSION:
        return Key(kind, fields[0], regex=fields[1])
    return Key(kind, fields[0], fields[1] if len(fields) > 1 else None)


# -- values ---------------------------------------------------------------------------------------


def encode_value(value: Value) -> bytes:
    out = _Out()
    out.fixed(">h", VALUE_VERSION)
    match value:
        case GroupEpochValue(epoch) | TargetAssignmentEpochValue(epoch):
            out.fixed(">i", epoch)
        case PartitionMetadataValue(topics):
            out.uvarint(len(topics) + 1)
            for topic in topics:
                out.uuid(topic.topic_id)
                out.string(topic.name)
                out.fixed(">i", topic.partitions)
                out.uvarint(1)                                 # PartitionMetadata (racks): none
                out.no_tags()
        case MemberMetadataValue():
            out.string(value.instance_id)
            out.string(value.rack_id)
            out.string(value.client_id)
            out.string(value.client_host)
            out.uvarint(len(value.subscribed_topic_names) + 1)
            for name in value.subscribed_topic_names:
                out.string(name)
            out.string(value.subscribed_topic_regex)
            out.fixed(">i", value.rebalance_timeout_ms)
            out.string(value.server_assignor)
            if value.classic is not None:                      # tagged field 0, then no other tag
                out.uvarint(1)
                out.uvarint(0)
                tagged = _Out()
                _classic_metadata(tagged, value.classic)
                out.uvarint(len(tagged.b))
                out.b += tagged.b
                return bytes(out.b)
        case TargetAssignmentMemberValue(assigned):
            out.partitions(assigned)
        case RegularExpressionValue():
            out.uvarint(len(value.topics) + 1)
            for name in value.topics:
                out.string(name)
            out.fixed(">q", value.version)
            out.fixed(">q", value.timestamp_ms)
        case CurrentAssignmentValue():
            out.fixed(">i", value.member_epoch)
            out.fixed(">i", value.previous_member_epoch)
            out.fixed(">b", int(value.state))
            out.partitions(value.assigned)
            out.partitions(value.pending_revocation)
    out.no_tags()
    return bytes(out.b)


def decode_value(kind: int, data: bytes) -> Value:
    """The value of a record whose key has type ``kind``."""
    r = _In(data)
    r.fixed(">h")                                              # the version: 0 is the only one
    value: Value
    if kind in (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        epoch = r.fixed(">i")
        value = GroupEpochValue(epoch) if kind == GROUP_METADATA else TargetAssignmentEpochValue(epoch)
    elif kind == PARTITION_METADATA:
        topics = []
        for _ in range(r.array_length()):
            topic_id, name, count = r.uuid(), r.string() or "", r.fixed(">i")
            for _ in range(r.array_length()):                  # racks of each partition: unused
                r.fixed(">i")
                for _ in range(r.array_length()):
                    r.string()
                r.skip_tags()
            r.skip_tags()
            topics.append(TopicMetadata(topic_id, name, count))
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA:
        instance_id, rack_id, client_id, client_host = r.string(), r.string(), r.string(), r.string()
        names = tuple(r.string() or "" for _ in range(r.array_length()))
        regex_, timeout, assignor = r.string(), r.fixed(">i"), r.string()
        value = MemberMetadataValue(instance_id, rack_id, client_id or "", client_host or "", names, regex_,
                                    timeout, assignor, _read_member_tags(r))
        return value
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(r.partitions())
    elif kind == REGULAR_EXPRESSION:
        names = tuple(r.string() or "" for _ in range(r.array_length()))
        value = RegularExpressionValue(names, r.fixed(">q"), r.fixed(">q"))
    else:
        value = CurrentAssignmentValue(r.fixed(">i"), r.fixed(">i"), MemberState.of(r.fixed(">b")),
                                       r.partitions(), r.partitions())
    r.skip_tags()
    return value


def _classic_metadata(out: _Out, c: ClassicMemberMetadata) -> None:
    """A nullable struct, present: a byte 1, then SessionTimeoutMs and SupportedProtocols."""
    out.fixed(">b", 1)
    out.fixed(">i", c.session_timeout_ms)
    out.uvarint(len(c.protocols) + 1)
    for name, metadata in c.protocols:
        out.string(name)
        out.uvarint(len(metadata) + 1)                        # compact bytes
        out.b += metadata
        out.no_tags()
    out.no_tags()


def _read_member_tags(r: _In) -> ClassicMemberMetadata | None:
    """The member metadata's tagged fields: 0 is the classic protocol's metadata; others skipped."""
    classic = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0 and r.fixed(">b") == 1:
            timeout = r.fixed(">i")
            protocols = []
            for _ in range(r.array_length()):
                name = r.string() or ""
                n = r.uvarint() - 1
                protocols.append((name, bytes(r.data[r.pos:r.pos + max(n, 0)])))
                r.pos += max(n, 0)
                r.skip_tags()
            classic = ClassicMemberMetadata(timeout, tuple(protocols))
        r.pos = end
    return classic


def encode(record: Record) -> tuple[bytes, bytes | None]:
    key, value = record
    return encode_key(key), None if value is None else encode_value(value)


def decode(key: bytes, value: bytes | None) -> Record | None:
    """A record of ``__consumer_offsets`` if it is a consumer group's; None otherwise."""
    k = decode_key(key)
    if k is None:
        return None
    return k, None if value is None else decode_value(k.type, value)



#: the flexible encoding, for the other groups' records of the topic (share groups)
FlexWriter = _Out
FlexReader = _In
