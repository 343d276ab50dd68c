"""The znodes of notifications and admin requests: ISR changes, topic deletions, preferred
replica elections and partition reassignments (each a list of partitions in Kafka's JSON)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, int_list as _int_list, json_bytes as _json,
    json_int as _int, json_object as _object, uuid_from_base64, uuid_to_base64)


def _partition_list(partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": int(p)} for t, p in sorted(set(partitions))]


def _parse_partition_list(obj: Any) -> tuple[tuple[str, int], ...]:
    entries = _object(obj)["partitions"]
    if not isinstance(entries, list):
        raise TypeError("partitions must be a list")
    result = []
    for entry in entries:
        topic = _object(entry)["topic"]
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a string, got {topic!r}")
        result.append((topic, _int(entry["partition"])))
    return tuple(sorted(set(result)))


class IsrChangeNotificationZNode(_FixedPathZNode):
    """``/isr_change_notification``: the controller watches its children."""

    PATH = "/isr_change_notification"

    # Shorthands for the sequence children (kept for callers written against them).
    @staticmethod
    def sequence_path() -> str:
        return IsrChangeNotificationSequenceZNode.path()

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        return IsrChangeNotificationSequenceZNode.encode(partitions)

    @staticmethod
    def decode(data: bytes) -> tuple[tuple[str, int], ...]:
        return IsrChangeNotificationSequenceZNode.decode(data)


class IsrChangeNotificationSequenceZNode:
    """``/isr_change_notification/isr_change_<seq>``, persistent sequential:
    ``{"version":1,"partitions":[{"topic":"t","partition":0},...]}``.

    ``path()`` is the prefix to create with ``sequential=True``; ZooKeeper appends a 10-digit number.
    Partitions are written sorted and decoded to a sorted tuple of ``(topic, partition)``.
    """

    PREFIX = "isr_change_"

    @staticmethod
    def path(sequence_number: str = "") -> str:
        return f"{IsrChangeNotificationZNode.path()}/{IsrChangeNotificationSequenceZNode.PREFIX}{sequence_number}"

    @staticmethod
    def sequence_number(path: str) -> str:
        prefix = IsrChangeNotificationSequenceZNode.PREFIX
        return path[path.rindex(prefix) + len(prefix):]

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        return _json({"version": 1, "partitions": _partition_list(partitions)})

    @staticmethod
    def decode(data: bytes | None, path: str | None = None) -> tuple[tuple[str, int], ...]:
        return _decode(path or IsrChangeNotificationSequenceZNode.path("<seq>"), data, _parse_partition_list)


class DeleteTopicsZNode:
    """``/admin/delete_topics``; ``path(topic)`` is ``DeleteTopicsTopicZNode.path(topic)``."""

    @staticmethod
    def path(topic: str | None = None) -> str:
        return "/admin/delete_topics" if topic is None else DeleteTopicsTopicZNode.path(topic)


class DeleteTopicsTopicZNode:
    """``/admin/delete_topics/<t>``: a deletion of topic ``t``. Kafka's tools write it without
    data to ask for one; Strandline's controller records its own deletions in it as
    ``{"version":1,"topic_id":"<base64>","partitions":N,"replicas":[...]}`` until every live broker
    and every broker that held a replica of it has heard of them."""

    @staticmethod
    def path(topic: str) -> str:
        return f"/admin/delete_topics/{topic}"

    @staticmethod
    def encode(topic_id: uuid.UUID | None = None, partitions: int = 0, replicas: tuple[int, ...] = ()) -> bytes:
        if topic_id is None:
            return b""
        return _json({"version": 1, "topic_id": uuid_to_base64(topic_id), "partitions": partitions,
                      "replicas": sorted(replicas)})

    @staticmethod
    def decode(data: bytes | None, topic: str = "<t>") -> tuple[uuid.UUID, int, tuple[int, ...]] | None:
        """(topic id, partition count, the brokers that held its replicas) of a deletion the
        controller recorded; None for a request without data."""
        if not data:
            return None

        def parse(obj: Any) -> tuple[uuid.UUID, int, tuple[int, ...]]:
            obj = _object(obj)
            if _int(obj["version"]) != 1:
                raise ValueError(f"unsupported topic deletion version {obj['version']}")
            return (uuid_from_base64(obj["topic_id"]), _int(obj["partitions"]),
                    tuple(_int(b) for b in obj.get("replicas", ())))
        return _decode(DeleteTopicsTopicZNode.path(topic), data, parse)


class PreferredReplicaElectionZNode(_FixedPathZNode):
    """``/admin/preferred_replica_election``: ``{"version":1,"partitions":[{"topic":"t","partition":0},...]}``."""

    PATH = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        return _json({"version": 1, "partitions": _partition_list(partitions)})

    @staticmethod
    def decode(data: bytes) -> tuple[tuple[str, int], ...]:
        return _decode(PreferredReplicaElectionZNode.path(), data, _parse_partition_list)


class ReassignPartitionsZNode(_FixedPathZNode):
    """``/admin/reassign_partitions``: the reassignments older tools ask for,
    ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]},...]}``; the controller
    starts them and deletes the node once every one it lists is done."""

    PATH = "/admin/reassign_partitions"

    @staticmethod
    def encode(moves: Mapping[tuple[str, int], Iterable[int]]) -> bytes:
        return _json({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": [int(b) for b in r]} for (t, p), r in sorted(moves.items())]})

    @staticmethod
    def decode(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
        def parse(obj: Any) -> dict[tuple[str, int], tuple[int, ...]]:
            return {(str(e["topic"]), _int(e["partition"])): _int_list(e["replicas"])
                    for e in _object(obj)["partitions"]}
        return _decode(ReassignPartitionsZNode.path(), data, parse)
