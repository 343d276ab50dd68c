"""One class per znode: Kafka's path, and its data in Kafka's JSON (SPEC CTL-1).

The formats are those of Kafka 2.x ``core/src/main/scala/kafka/zk/ZkData.scala`` (2.6 baseline;
the topic id of 2.8+ is carried too, so Metadata v10+ can return it). Every ``encode`` is a pure
function of its arguments (timestamps are parameters), and every ``decode`` accepts what real
Kafka writes, in any key order, and raises ``ValueError`` naming the znode on malformed data.

JSON is written compactly (``{"a":1}``) like Kafka's Jackson encoder. Kafka builds most of these
objects from hash maps, so its key order is arbitrary; ours is fixed (``version`` first) and
readers never depend on it.

The znode's ``Stat`` (version, ephemeral owner, czxid) is not part of its data: a partition
state's ``zk_version`` is the stat version the store returned with the bytes
(``OpResult.version``), passed to ``TopicPartitionStateZNode.decode``.

The ACL authorizer's znodes are in ``coordination.acl_znodes``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


__all__ = [
    "BrokerIdZNode", "BrokerIdsZNode", "BrokerInfo", "BrokerSequenceIdZNode", "ClusterIdZNode",
    "ConfigEntityChangeNotificationZNode", "ConfigEntityTypeZNode", "ConfigEntityZNode", "ConsumerOffsetZNode",
    "ControllerEpochZNode",
    "ControllerZNode", "DeleteTopicsTopicZNode", "DeleteTopicsZNode", "IsrChangeNotificationSequenceZNode",
    "IsrChangeNotificationZNode", "ConfigEntityChangeNotificationSequenceZNode", "LeaderAndIsr", "PERSISTENT_PATHS", "PreferredReplicaElectionZNode",
    "ProducerIdBlockZNode", "ReassignPartitionsZNode", "TopicAssignment", "TopicPartitionStateZNode", "TopicPartitionZNode",
    "TopicPartitionsZNode", "TopicZNode", "TopicsZNode", "new_cluster_id", "uuid_from_base64", "uuid_to_base64",
]

from strandline.coordination.znode_json import (  # noqa: F401  (the uuid helpers are part of this module's API)
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, int_list as _int_list, json_bytes as _json,
    SequentialZNode as _SequentialZNode, json_int as _int, json_object as _object, new_cluster_id,
    uuid_from_base64, uuid_to_base64)


# -- /brokers


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state as the controller records it (``.../partitions/<p>/state``)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What a broker registration says about the broker (``/brokers/ids/<id>``)."""

    id: int
    host: str
    port: int
    rack: str | None = None
    #: Every endpoint it registered: (listener name, host, port, security protocol). Empty: only
    #: ``host``/``port`` (a PLAINTEXT listener) are known.
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    @staticmethod
    def of(broker_id: int, endpoints: Iterable[tuple[str, str, int, str]], rack: str | None = None) -> "BrokerInfo":
        """A broker with these endpoints; ``host``/``port`` are its PLAINTEXT listener's (else the
        first one's). One PLAINTEXT endpoint alone is kept as ``host``/``port`` only."""
        eps = tuple(endpoints)
        if not eps:
            return BrokerInfo(broker_id, "", -1, rack)
        plain = [e for e in eps if e[3] == "PLAINTEXT"]
        _, host, port, _ = (plain or eps)[0]
        if len(eps) == 1 and eps[0][0] == "PLAINTEXT" and eps[0][3] == "PLAINTEXT":
            eps = ()
        return BrokerInfo(broker_id, host, port, rack, eps)

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """Where the broker listens for listener ``listener``: None when it has no such listener;
        ``host``/``port`` when no listener is named (or it registered only a PLAINTEXT one)."""
        if listener is None:
            return self.host, self.port
        if not self.endpoints:
            return (self.host, self.port) if listener == "PLAINTEXT" else None
        for name, host, port, _ in self.endpoints:
            if name == listener:
                return host, port
        return None


class BrokerIdsZNode(_FixedPathZNode):
    """``/brokers/ids``: one ephemeral child per live broker; the controller watches its children."""

    PATH = "/brokers/ids"


def _split_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``"PLAINTEXT://host:9092"`` (or ``[::1]:9092``) -> (listener, host, port)."""
    listener, sep, rest = endpoint.partition("://")
    if not sep:
        raise ValueError(f"bad endpoint {endpoint!r}")
    host, _, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return listener, host, int(port)


def _endpoint(host: str, port: int, listener: str = "PLAINTEXT") -> str:
    return f"{listener}://[{host}]:{port}" if ":" in host else f"{listener}://{host}:{port}"


class BrokerIdZNode:
    """``/brokers/ids/<id>``: the broker's ephemeral registration, JSON version 4 (Kafka 0.10.0 - 2.6),
    one endpoint per advertised listener.

    ``{"version":4,"host":"h","port":9092,"jmx_port":-1,"timestamp":"<ms>","endpoints":["PLAINTEXT://h:9092"],
    "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"rack":"r"}``. Like Kafka, ``rack`` is
    left out when the broker has none; ``decode`` accepts it absent or null. The broker id is the
    znode's name, not part of its data: pass it to ``decode``. The broker epoch (KIP-380) is the
    znode's czxid.
    """

    VERSION = 4

    @staticmethod
    def path(broker_id: int | str) -> str:
        return f"{BrokerIdsZNode.path()}/{broker_id}"

    @staticmethod
    def encode(broker_id: int, host: str, port: int, rack: str | None, timestamp_ms: int,
               jmx_port: int = -1, endpoints: Iterable[tuple[str, str, int, str]] | None = None) -> bytes:
        """``endpoints``: (listener, host, port, protocol) of every advertised listener; without
        them one PLAINTEXT listener at ``host:port``. As Kafka, the top-level ``host``/``port`` are
        the PLAINTEXT endpoint's (null and -1 without one)."""
        eps = list(endpoints) if endpoints is not None else [("PLAINTEXT", host, port, "PLAINTEXT")]
        plain = next(((h, p) for _, h, p, proto in eps if proto == "PLAINTEXT"), (None, -1))
        obj: dict[str, Any] = {"version": BrokerIdZNode.VERSION, "host": plain[0], "port": plain[1],
                               "jmx_port": jmx_port, "timestamp": str(timestamp_ms),
                               "endpoints": [_endpoint(h, p, name) for name, h, p, _ in eps],
                               "listener_security_protocol_map": {name: proto for name, _, _, proto in eps}}
        if rack is not None:
            obj["rack"] = rack
        return _json(obj)

    @staticmethod
    def decode(data: bytes | None, broker_id: int | None = None) -> BrokerInfo:
        """``broker_id`` is the znode's name (``int(child)``); without it the result's ``id`` is -1."""
        path = BrokerIdZNode.path(broker_id) if broker_id is not None else BrokerIdZNode.path("<id>")

        def parse(obj: Any) -> BrokerInfo:
            obj = _object(obj)
            version = _int(obj["version"])
            if version < 1:
                raise ValueError(f"unsupported registration version {version}")
            host, port = obj.get("host"), obj.get("port")
            registered: tuple[tuple[str, str, int, str], ...] = ()
            if version >= 2 and obj.get("endpoints"):
                protocols = obj.get("listener_security_protocol_map") or {}
                endpoints = [_split_endpoint(e) for e in obj["endpoints"]]
                registered = tuple((name, h, p, str(protocols.get(name, name))) for name, h, p in endpoints)
                host, port = BrokerInfo.of(-1, registered).host, BrokerInfo.of(-1, registered).port
                registered = BrokerInfo.of(-1, registered).endpoints
            if not isinstance(host, str) or not host:
                raise ValueError("no host")
            rack = obj.get("rack")
            if rack is not None and not isinstance(rack, str):
                raise TypeError(f"rack must be a string or null, got {rack!r}")
            return BrokerInfo(broker_id if broker_id is not None else -1, host, _int(port), rack, registered)

        return _decode(path, data, parse)


class BrokerSequenceIdZNode(_FixedPathZNode):
    """``/brokers/seqid``: Kafka's broker-id generator (created at startup, otherwise unused here)."""

    PATH = "/brokers/seqid"


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


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``:
    ``{"version":1,"leader":L,"leader_epoch":E,"isr":[..],"controller_epoch":C}``.

    The znode's stat version is the partition's ``zk_version``; every update is a conditional
    ``SetData`` on it. It is not in the JSON: ``decode`` takes it as a parameter (normally
    ``OpResult.version``) and returns a ``LeaderAndIsr`` carrying it.
    """

    @staticmethod
    def path(topic: str, partition: int | str) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: _HasLeaderAndIsr) -> bytes:
        return _json({"version": 1, "leader": int(state.leader), "leader_epoch": int(state.leader_epoch),
                      "isr": [int(b) for b in state.isr], "controller_epoch": int(state.controller_epoch)})

    @staticmethod
    def decode(data: bytes | None, zk_version: int = 0, topic: str | None = None,
               partition: int | None = None) -> LeaderAndIsr:
        path = TopicPartitionStateZNode.path(topic or "<topic>", partition if partition is not None else "<p>")

        def parse(obj: Any) -> LeaderAndIsr:
            obj = _object(obj)
            return LeaderAndIsr(_int(obj["leader"]), _int(obj["leader_epoch"]), _int_list(obj["isr"]),
                                _int(obj["controller_epoch"]), zk_version)

        return _decode(path, data, parse)


# -- /config


class ConfigEntityTypeZNode:
    """``/config/<entity type>``: ``topics``, ``clients``, ``users``, ``brokers``."""

    TYPES = ("topics", "clients", "users", "brokers")

    @staticmethod
    def path(entity_type: str) -> str:
        return f"/config/{entity_type}"


class ConfigEntityZNode:
    """``/config/topics/<t>`` and ``/config/brokers/<id>``: ``{"version":1,"config":{"k":"v",...}}``.

    Values are strings, as in Kafka's ``Properties``; ``encode`` writes booleans as ``true``/``false``.
    """

    @staticmethod
    def path(entity_type: str, name: str | int) -> str:
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{name}"

    @staticmethod
    def encode(config: Mapping[str, Any]) -> bytes:
        def text(v: Any) -> str:
            return str(v).lower() if isinstance(v, bool) else str(v)

        return _json({"version": 1, "config": {str(k): text(v) for k, v in sorted(config.items())}})

    @staticmethod
    def decode(data: bytes | None, entity_type: str = "<type>", name: str | int = "<name>") -> dict[str, str]:
        """An empty or missing node is an empty config, as in Kafka."""
        if not data:
            return {}

        def parse(obj: Any) -> dict[str, str]:
            config = _object(_object(obj).get("config") or {})
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}

        return _decode(ConfigEntityZNode.path(entity_type, name), data, parse)


class ConfigEntityChangeNotificationZNode(_FixedPathZNode):
    """``/config/changes``: Kafka's dynamic-config change notifications (created at startup)."""

    PATH = "/config/changes"


class ConfigEntityChangeNotificationSequenceZNode(_SequentialZNode):
    """``/config/changes/config_change_<10 digits>``: ``{"version":2,"entity_path":"topics/t"}``
    (a sequential node; ``entity_path`` is ``<entity type>/<name>``, e.g. ``brokers/<default>``)."""

    PREFIX = "config_change_"

    @staticmethod
    def create_path() -> str:
        return f"{ConfigEntityChangeNotificationZNode.path()}/{ConfigEntityChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def path(child: str) -> str:
        return f"{ConfigEntityChangeNotificationZNode.path()}/{child}"

    @staticmethod
    def encode(entity_type: str, name: str | int) -> bytes:
        return _json({"version": 2, "entity_path": f"{entity_type}/{name}"})

    @staticmethod
    def decode(data: bytes, child: str = "<child>") -> tuple[str, str]:
        """(entity type, name); version 1 (``entity_type`` and ``entity_name``) is read too."""
        def parse(obj: Any) -> tuple[str, str]:
            obj = _object(obj)
            if "entity_path" in obj:
                entity_type, sep, name = str(obj["entity_path"]).partition("/")
                if not sep or not name:
                    raise ValueError(f"entity_path {obj['entity_path']!r} is not <type>/<name>")
                return entity_type, name
            return str(obj["entity_type"]), str(obj["entity_name"])

        return _decode(ConfigEntityChangeNotificationSequenceZNode.path(child), data, parse)


# -- controller


class ControllerZNode(_FixedPathZNode):
    """``/controller``: the ephemeral controller registration, ``{"version":1,"brokerid":N,"timestamp":"<ms>"}``."""

    PATH = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int) -> bytes:
        return _json({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})

    @staticmethod
    def decode(data: bytes | None) -> int:
        """The controller's broker id."""
        return _decode(ControllerZNode.path(), data, lambda obj: _int(_object(obj)["brokerid"]))


class ControllerEpochZNode(_FixedPathZNode):
    """``/controller_epoch``: a plain integer, created as ``0`` so the first controller has epoch 1."""

    PATH = "/controller_epoch"
    INITIAL = 0

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(int(epoch)).encode("ascii")

    @staticmethod
    def decode(data: bytes | None) -> int:
        try:
            text = bytes(data).decode("ascii").strip()  # type: ignore[arg-type]  # None: TypeError, malformed below
            if not text.lstrip("-").isdigit():
                raise ValueError
            return int(text)
        except (ValueError, TypeError):
            raise ValueError(f"malformed data in znode {ControllerEpochZNode.path()}: "
                             f"expected an integer, got {data!r}") from None


# -- notifications and admin


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


class ProducerIdBlockZNode(_FixedPathZNode):
    """``/latest_producer_id_block`` (created empty at startup; its format lives in ``controller.zk_layout``)."""

    PATH = "/latest_producer_id_block"


class ClusterIdZNode(_FixedPathZNode):
    """``/cluster/id``: ``{"version":"1","id":"<base64 uuid>"}`` (the version is a string, as in Kafka)."""

    PATH = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _json({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        def parse(obj: Any) -> str:
            cluster_id = _object(obj)["id"]
            if not isinstance(cluster_id, str) or not cluster_id:
                raise TypeError(f"id must be a non-empty string, got {cluster_id!r}")
            return cluster_id

        return _decode(ClusterIdZNode.path(), data, parse)


# -- /consumers


class ConsumerOffsetZNode:
    """``/consumers/<group>/offsets/<topic>/<partition>``: an offset committed with OffsetCommit v0,
    read by OffsetFetch v0 (Kafka's ``ConsumerOffset``), the offset in decimal ASCII."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return f"/consumers/{group}/offsets/{topic}/{partition}"

    @staticmethod
    def encode(offset: int) -> bytes:
        return str(offset).encode()

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/<group>/offsets/<topic>/<partition>") -> int:
        try:
            return int((data or b"").decode())
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"{path}: not an offset: {data!r}") from None


#: The persistent paths Kafka makes sure exist at broker startup (``ZkData.PersistentZkPaths``, 2.6),
#: in Kafka's order, plus ``/cluster`` (Kafka creates it with ``/cluster/id``).
PERSISTENT_PATHS: tuple[str, ...] = (
    "/consumers",
    BrokerIdsZNode.path(),
    TopicsZNode.path(),
    ConfigEntityChangeNotificationZNode.path(),
    DeleteTopicsZNode.path(),
    BrokerSequenceIdZNode.path(),
    IsrChangeNotificationZNode.path(),
    ProducerIdBlockZNode.path(),
    "/log_dir_event_notification",
    *(ConfigEntityTypeZNode.path(t) for t in ConfigEntityTypeZNode.TYPES),
    "/cluster",
)
