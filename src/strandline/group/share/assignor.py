"""The share groups' ``simple`` assignor (KIP-932; ``group.share.assignors``).

A partition of a share group may be read by many members at once, so the assignment spreads
members over partitions rather than dealing partitions out: each member is given the partition
its id hashes to (Java's ``String.hashCode``, the hash Kafka's coordinator takes; topics are
taken in the order of their ids); the partitions no member hashed to and nobody holds are dealt round-robin,
members in id order; a member keeps what it holds of the topics it still subscribes to. Nothing
is taken from a member while it stays: a partition only gains readers.
"""

from __future__ import annotations

from typing import Mapping
from uuid import UUID

#: a member's partitions, topic id -> partition indexes
Assignment = dict[UUID, frozenset[int]]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text`` (UTF-16 code units, 32-bit signed arithmetic)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def assign(subscriptions: Mapping[str, frozenset[UUID]], partition_counts: Mapping[UUID, int],
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Each member's partitions, from what each subscribes to (topic ids; an id with no partition
    count is not there and is left out), how many partitions each topic has, and what each
    member holds now."""
    members = sorted(subscriptions)
    topics = sorted({t for subscribed in subscriptions.values() for t in subscribed if t in partition_counts})
    targets = {t: [(t, p) for p in range(partition_counts[t])] for t in topics}
    holders: dict[tuple[UUID, int], list[str]] = {}
    for member in members:
        for topic, partitions in current.get(member, {}).items():
            for p in partitions:
                holders.setdefault((topic, p), []).append(member)
    chosen: dict[str, set[tuple[UUID, int]]] = {m: set() for m in members}
    # one partition by hash, among all the partitions the member subscribes to
    for member in members:
        wanted = [tp for t in topics if t in subscriptions[member] for tp in targets[t]]
        if wanted:
            chosen[member].add(wanted[abs(java_string_hash(member)) % len(wanted)])
    hashed = {tp for picked in chosen.values() for tp in picked}
    # the partitions no one hashed to and no one holds, round-robin over their topic's subscribers
    for topic in topics:
        readers = [m for m in members if topic in subscriptions[m]]
        free = [tp for tp in targets[topic] if tp not in hashed and tp not in holders]
        for i, tp in enumerate(free):
            chosen[readers[i % len(readers)]].add(tp)
    # what each holds, of a topic it still subscribes to and that still has the partition
    for tp, held_by in holders.items():
        topic, p = tp
        if topic in targets and p < partition_counts[topic]:
            for member in held_by:
                if topic in subscriptions[member]:
                    chosen[member].add(tp)
    result: dict[str, Assignment] = {}
    for member, picked in chosen.items():
        by_topic: dict[UUID, set[int]] = {}
        for topic, p in picked:
            by_topic.setdefault(topic, set()).add(p)
        result[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result
