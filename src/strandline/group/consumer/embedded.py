"""The "consumer" embedded protocol a classic member speaks inside JoinGroup and SyncGroup
(Kafka's ``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment``).

A consumer group of the KIP-848 protocol reads a classic member's subscription (its topics, the
partitions it still owns, its rack) from the metadata of its JoinGroup, and answers its SyncGroup
with the partitions it is to own, in the version of the protocol the member offered. The formats
are the classic (non-flexible) encoding: int16 version, int32 array lengths, int16 string lengths,
int32 byte lengths (-1: null).

=======  =============================================================================
version  a subscription holds
=======  =============================================================================
0        topics, user data
1        and the partitions the member owns (cooperative rebalancing)
2        and the member's generation
3        and its rack
=======  =============================================================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: the highest version of the embedded protocol this coordinator reads and writes
MAX_VERSION = 3
PROTOCOL_TYPE = "consumer"


class MalformedProtocol(ValueError):
    """Metadata of the embedded protocol that cannot be read (Kafka's SchemaException)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    #: topic name -> the partitions the member owns (version 1 and later)
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, fmt: str) -> int:
        try:
            v: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        except struct.error as e:
            raise MalformedProtocol(f"truncated at byte {self.pos}") from e
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.fixed(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise MalformedProtocol(f"a string of {n} bytes past the end at byte {self.pos}")
        try:
            s = self.data[self.pos:self.pos + n].decode()
        except UnicodeDecodeError as e:
            raise MalformedProtocol(f"a string that is not UTF-8 at byte {self.pos}") from e
        self.pos += n
        return s

    def count(self) -> int:
        n = self.fixed(">i")
        if n > len(self.data) - self.pos:
            raise MalformedProtocol(f"an array of {n} items past the end at byte {self.pos}")
        return max(n, 0)

    def skip_bytes(self) -> None:
        n = self.fixed(">i")
        if n > 0:
            self.pos += n

    def partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        found = []
        for _ in range(self.count()):
            topic = self.string() or ""
            found.append((topic, tuple(self.fixed(">i") for _ in range(self.count()))))
        return tuple(found)


def decode_subscription(data: bytes) -> Subscription:
    """A classic member's subscription; :class:`MalformedProtocol` when it cannot be read."""
    r = _Reader(bytes(data))
    version = r.fixed(">h")
    if version < 0:
        raise MalformedProtocol(f"version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    r.skip_bytes()                                             # user data
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation, rack = -1, None
    if version >= 1 and r.pos < len(r.data):
        owned = r.partitions()
    if version >= 2 and r.pos < len(r.data):
        generation = r.fixed(">i")
    if version >= 3 and r.pos < len(r.data):
        rack = r.string()
    return Subscription(version, topics, owned, generation, rack)


def decode_assignment(data: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The partitions of a classic member's assignment (empty metadata: none)."""
    if not data:
        return ()
    r = _Reader(bytes(data))
    r.fixed(">h")
    return r.partitions()


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def encode_assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """A SyncGroup's assignment of ``partitions`` (topic name -> indexes), no user data, in
    ``version`` of the protocol (at most :data:`MAX_VERSION`; the assignment's fields are the same
    in every version)."""
    out = bytearray(struct.pack(">h", max(0, min(version, MAX_VERSION))))
    out += struct.pack(">i", len(partitions))
    for topic in sorted(partitions):
        out += _string(topic)
        ps = sorted(partitions[topic])
        out += struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    out += struct.pack(">i", -1)
    return bytes(out)


def protocol_version(metadata: bytes) -> int:
    """The version a member's subscription metadata is written in (0 when unreadable)."""
    return struct.unpack_from(">h", metadata, 0)[0] if len(metadata) >= 2 else 0
