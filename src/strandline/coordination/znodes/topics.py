"""The topic znodes: ``/brokers/topics`` (each topic's assignment and id) and each partition's
state (``LeaderAndIsr``) under ``/brokers/topics/<t>/partitions/<p>/state``."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, int_list as _int_list, json_bytes as _json,
    json_int as _int, json_object as _object, uuid_from_base64, uuid_to_base64)


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state as the controller records it (``.../partitions/<p>/state``)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = 0
    #: eligible leader replicas (KIP-966): replicas that left the ISR while it was below
    #: min.insync.replicas, and so hold every record up to the high watermark
    elr: tuple[int, ...] = ()
    #: replicas that were in the ISR or ELR below min.insync.replicas and lost their eligibility
    last_known_elr: tuple[int, ...] = ()


class TopicsZNode(_FixedPathZNode):
    """``/brokers/topics``: one child per topic."""

    PATH = "/brokers/topics"


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A decoded ``/brokers/topics/<t>``. Unpacks as ``assignment, topic_id = ...``."""

    partitions: dict[int, tuple[int, ...]]
    topic_id: uuid.UUID | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] | None = None
    removing_replicas: Mapping[int, tuple[int, ...]] | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.partitions, self.topic_id))


class TopicZNode:
    """``/brokers/topics/<t>``: the replica assignment, and the topic id.

    Kafka 2.4-2.7 write version 2:
    ``{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{},"removing_replicas":{}}``;
    Kafka 2.8+ write version 3, the same plus ``"topic_id":"<base64 uuid>"`` (KIP-516). We write
    version 3 when there is a topic id and version 2 otherwise; ``decode`` reads versions 1-3
    (version 1 has only ``partitions``).
    """

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.path()}/{topic}"

    @staticmethod
    def encode(assignment: Mapping[int, Iterable[int]], topic_id: uuid.UUID | None = None,
               adding_replicas: Mapping[int, Iterable[int]] | None = None,
               removing_replicas: Mapping[int, Iterable[int]] | None = None) -> bytes:
        def as_json(m: Mapping[int, Iterable[int]] | None) -> dict[str, list[int]]:
            return {str(p): [int(b) for b in r] for p, r in sorted((m or {}).items(), key=lambda kv: int(kv[0]))}

        obj: dict[str, Any] = {"version": 3 if topic_id is not None else 2,
                               "partitions": as_json(assignment),
                               "adding_replicas": as_json(adding_replicas),
                               "removing_replicas": as_json(removing_replicas)}
        if topic_id is not None:
            obj["topic_id"] = uuid_to_base64(topic_id)
        return _json(obj)

    @staticmethod
    def decode(data: bytes | None, topic: str | None = None) -> TopicAssignment:
        """``assignment, topic_id = TopicZNode.decode(data)``; ``topic`` only names the znode in errors."""

        def parse(obj: Any) -> TopicAssignment:
            obj = _object(obj)
            version = _int(obj["version"])
            if not 1 <= version <= 3:
                raise ValueError(f"unsupported topic assignment version {version}")

            def partition_map(key: str) -> dict[int, tuple[int, ...]]:
                raw = _object(obj.get(key) or {})
                return dict(sorted((int(p), _int_list(r)) for p, r in raw.items()))

            raw_id = obj.get("topic_id")
            return TopicAssignment(partition_map("partitions"),
                                   uuid_from_base64(raw_id) if raw_id is not None else None,
                                   partition_map("adding_replicas"), partition_map("removing_replicas"))

        return _decode(TopicZNode.path(topic or "<topic>"), data, parse)


class TopicPartitionsZNode:
    """``/brokers/topics/<t>/partitions`` (no data)."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    """``/brokers/topics/<t>/partitions/<p>`` (no data)."""

    @staticmethod
    def path(topic: str, partition: int | str) -> str:
        return f"{TopicPartitionsZNode.path(topic)}/{partition}"


class _HasLeaderAndIsr(Protocol):
    @property
    def leader(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def isr(self) -> Iterable[int]: ...

    @property
    def controller_epoch(self) -> int: ...

    @property
    def elr(self) -> Iterable[int]: ...

    @property
    def last_known_elr(self) -> Iterable[int]: ...


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``:
    ``{"version":1,"leader":L,"leader_epoch":E,"isr":[..],"controller_epoch":C}``.

    With eligible leader replicas (KIP-966, ``eligible.leader.replicas.enable``) it also holds
    ``"eligible_leader_replicas":[..]`` and ``"last_known_elr":[..]``, written only when not empty,
    so that the znode stays byte for byte Kafka's otherwise; a reader that does not know them
    ignores them (Kafka's ``TopicPartitionStateZNode.decode`` reads only its own fields).

    The znode's stat version is the partition's ``zk_version``; every update is a conditional
    ``SetData`` on it. It is not in the JSON: ``decode`` takes it as a parameter (normally
    ``OpResult.version``) and returns a ``LeaderAndIsr`` carrying it.
    """

    @staticmethod
    def path(topic: str, partition: int | str) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: _HasLeaderAndIsr) -> bytes:
        obj: dict[str, Any] = {"version": 1, "leader": int(state.leader), "leader_epoch": int(state.leader_epoch),
                               "isr": [int(b) for b in state.isr], "controller_epoch": int(state.controller_epoch)}
        elr, last_known = [int(b) for b in state.elr], [int(b) for b in state.last_known_elr]
        if elr:
            obj["eligible_leader_replicas"] = elr
        if last_known:
            obj["last_known_elr"] = last_known
        return _json(obj)

    @staticmethod
    def decode(data: bytes | None, zk_version: int = 0, topic: str | None = None,
               partition: int | None = None) -> LeaderAndIsr:
        path = TopicPartitionStateZNode.path(topic or "<topic>", partition if partition is not None else "<p>")

        def parse(obj: Any) -> LeaderAndIsr:
            obj = _object(obj)
            return LeaderAndIsr(_int(obj["leader"]), _int(obj["leader_epoch"]), _int_list(obj["isr"]),
                                _int(obj["controller_epoch"]), zk_version,
                                _int_list(obj.get("eligible_leader_replicas") or []),
                                _int_list(obj.get("last_known_elr") or []))

        return _decode(path, data, parse)
