"""A share group's records of ``__consumer_offsets`` in Kafka 4.x's formats (KIP-932), so that a
coordinator that takes the group's offsets partition resumes the group where it was: its epoch,
its members (subscriptions, clients), its target assignment and each member's epoch and
partitions.

=====  ===========================================  ============================================
type   key                                          value
=====  ===========================================  ============================================
10     ShareGroupMemberMetadataKey (group, member)  rack, client id and host, subscribed topics
11     ShareGroupMetadataKey (group)                the group epoch, a hash of its topics
12     ShareGroupTargetAssignmentMetadataKey        the target assignment's epoch
13     ShareGroupTargetAssignmentMemberKey          one member's target assignment
14     ShareGroupCurrentMemberAssignmentKey         one member's epochs, state and partitions
=====  ===========================================  ============================================

Keys and values are laid out as the consumer group's (:mod:`strandline.group.consumer.records`).
The topics hash is Strandline's own (a digest of the subscribed topics' names, ids and partition
counts): it tells a coordinator loading the group whether the topics changed since the target
assignment was computed.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Iterable, Mapping
from uuid import UUID

from strandline.group.consumer.records import FlexReader, FlexWriter, pack_key, unpack_key_fields
from strandline.group.share.assignor import Assignment
from strandline.group.share.group import ShareGroup, ShareMember

MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
KEY_TYPES = frozenset(range(MEMBER_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
_MEMBER_KEYS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
STABLE = 0          # MemberState: a share group's members have nothing to reconcile


@dataclass(frozen=True, slots=True)
class Key:
    type: int
    group_id: str
    member_id: str | None = None


#: a record's key and value bytes (None: a tombstone)
Record = tuple[bytes, "bytes | None"]


def topics_hash(topics: Mapping[str, tuple[UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partitions), in name order."""
    digest = hashlib.sha256()
    for name in sorted(topics):
        topic_id, count = topics[name]
        digest.update(name.encode() + b"\0" + topic_id.bytes + struct.pack(">i", count))
    value: int = struct.unpack(">q", digest.digest()[:8])[0]
    return value


# -- keys -----------------------------------------------------------------------------------------


def encode_key(key: Key) -> bytes:
    if key.type in _MEMBER_KEYS:
        return pack_key(key.type, key.group_id, key.member_id or "")
    return pack_key(key.type, key.group_id)


def decode_key(data: bytes) -> Key | None:
    """A share group's key; None for the topic's other records."""
    kind = struct.unpack_from(">h", data, 0)[0]
    if kind not in KEY_TYPES:
        return None
    fields = unpack_key_fields(data, 2 if kind in _MEMBER_KEYS else 1)
    return Key(kind, fields[0], fields[1] if len(fields) > 1 else None)


# -- values ---------------------------------------------------------------------------------------


def _start() -> FlexWriter:
    out = FlexWriter()
    out.fixed(">h", 0)                      # version 0
    return out


def _end(out: FlexWriter) -> bytes:
    out.no_tags()
    return bytes(out.b)


def member_metadata(member: ShareMember) -> bytes:
    out = _start()
    out.string(member.rack_id)
    out.string(member.client_id)
    out.string(member.client_host)
    out.uvarint(len(member.subscribed_topic_names) + 1)
    for name in member.subscribed_topic_names:
        out.string(name)
    return _end(out)


def group_metadata(epoch: int, hashed: int) -> bytes:
    out = _start()
    out.fixed(">i", epoch)
    out.fixed(">q", hashed)
    return _end(out)


def assignment_epoch(epoch: int) -> bytes:
    out = _start()
    out.fixed(">i", epoch)
    return _end(out)


def target_member(assignment: Assignment) -> bytes:
    out = _start()
    out.partitions(assignment)
    return _end(out)


def current_member(member_epoch: int, previous_epoch: int, assignment: Assignment) -> bytes:
    out = _start()
    out.fixed(">i", member_epoch)
    out.fixed(">i", previous_epoch)
    out.fixed(">b", STABLE)
    out.partitions(assignment)
    return _end(out)


# -- what changed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupImage:
    """What a share group's records say of it."""

    epoch: int
    topics_hash: int
    assignment_epoch: int
    members: Mapping[str, tuple[object, ...]]        # member id -> its metadata
    targets: Mapping[str, Assignment]
    current: Mapping[str, tuple[int, Assignment]]    # member id -> (member epoch, partitions)


def image(group: ShareGroup | None) -> GroupImage | None:
    if group is None:
        return None
    return GroupImage(group.group_epoch, topics_hash(group.topics_seen), group.assignment_epoch,
                      {m: (x.rack_id, x.client_id, x.client_host, tuple(x.subscribed_topic_names))
                       for m, x in group.members.items()},
                      {m: dict(a) for m, a in group.targets.items()},
                      {m: (x.member_epoch, dict(x.assignment)) for m, x in group.members.items()})


def deletion(group_id: str) -> list[Record]:
    """The tombstones that delete an empty share group: its target assignment, then its epoch."""
    return [(encode_key(Key(TARGET_ASSIGNMENT_METADATA, group_id)), None),
            (encode_key(Key(GROUP_METADATA, group_id)), None)]


def changed(before: GroupImage | None, group: ShareGroup) -> bool:
    """Whether the group's records would say something new."""
    return image(group) != (before or GroupImage(0, topics_hash({}), 0, {}, {}, {}))


def snapshot(group_id: str, group: ShareGroup, gone: Iterable[str], before: GroupImage | None) -> list[Record]:
    """Every record of the group as it is now, after the tombstones of the members ``gone``, in
    Kafka's order: a member leaving loses its current assignment, target and metadata; then the
    members' metadata, the group's epoch, the target assignment, and the members' current
    assignments. The whole group each time: a write that failed is made good by the next."""
    key = encode_key
    records: list[Record] = []
    for member_id in sorted(set(gone) - set(group.members)):
        records += [(key(Key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)), None),
                    (key(Key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id)), None),
                    (key(Key(MEMBER_METADATA, group_id, member_id)), None)]
    for member_id, member in sorted(group.members.items()):
        records.append((key(Key(MEMBER_METADATA, group_id, member_id)), member_metadata(member)))
    records.append((key(Key(GROUP_METADATA, group_id)), group_metadata(group.group_epoch, topics_hash(group.topics_seen))))
    for member_id, target in sorted(group.targets.items()):
        records.append((key(Key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id)), target_member(target)))
    records.append((key(Key(TARGET_ASSIGNMENT_METADATA, group_id)), assignment_epoch(group.assignment_epoch)))
    previous = before.current if before is not None else {}
    for member_id, member in sorted(group.members.items()):
        old = previous.get(member_id)
        records.append((key(Key(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)),
                        current_member(member.member_epoch, old[0] if old else 0, member.assignment)))
    return records


# -- replaying ------------------------------------------------------------------------------------


def replay(records: Iterable[tuple[bytes, bytes | None]], topics: Mapping[str, tuple[UUID, int]],
           session_timeout_ms: int, now_ms: int) -> dict[str, ShareGroup]:
    """The share groups the records of one offsets partition describe. Members get a full
    session from ``now_ms``; a group whose topics changed since its target assignment is
    assigned again at its next heartbeat."""
    groups: dict[str, ShareGroup] = {}
    hashes: dict[str, int] = {}         # of the groups whose metadata record stands (not deleted)
    for key_bytes, value in records:
        key = decode_key(key_bytes)
        if key is None:
            continue
        group = groups.setdefault(key.group_id, ShareGroup(key.group_id))
        member_id = key.member_id or ""
        if value is None:
            if key.type == MEMBER_METADATA:
                group.members.pop(member_id, None)
            elif key.type == TARGET_ASSIGNMENT_MEMBER:
                group.targets.pop(member_id, None)
            elif key.type == GROUP_METADATA:
                groups.pop(key.group_id, None)
                hashes.pop(key.group_id, None)
            continue
        r = FlexReader(value)
        r.fixed(">h")
        if key.type == MEMBER_METADATA:
            rack, client_id, host = r.string(), r.string() or "", r.string() or ""
            names = tuple(r.string() or "" for _ in range(r.array_length()))
            old = group.members.get(member_id)
            member = ShareMember(member_id, old.member_epoch if old else 0, names, rack, client_id, host,
                                 old.assignment if old else {}, now_ms + session_timeout_ms)
            group.members[member_id] = member
        elif key.type == GROUP_METADATA:
            group.group_epoch = r.fixed(">i")
            hashes[key.group_id] = r.fixed(">q")
        elif key.type == TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = r.fixed(">i")
        elif key.type == TARGET_ASSIGNMENT_MEMBER:
            group.targets[member_id] = dict(r.partitions())
        elif key.type == CURRENT_MEMBER_ASSIGNMENT:
            epoch, _previous, _state = r.fixed(">i"), r.fixed(">i"), r.fixed(">b")
            assigned = dict(r.partitions())
            current = group.members.get(member_id)
            if current is not None:
                current.member_epoch, current.assignment = epoch, assigned
    for group_id in [g for g in groups if g not in hashes]:
        del groups[group_id]            # deleted (its tombstones alone), or never written whole
    for group_id, group in groups.items():
        subscribed = {n for m in group.members.values() for n in m.subscribed_topic_names}
        seen = {n: topics[n] for n in sorted(subscribed) if n in topics}
        # the topics as its target assignment saw them: the same now, or unknown (assigned again)
        group.topics_seen = seen if topics_hash(seen) == hashes.get(group_id) else {}
    return groups
