"""One class per znode: its path, and its data in Kafka's JSON (Kafka 2.x ``ZkData.scala``)."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from strandline.replication.partition import LeaderAndIsr


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes | None, path: str) -> Any:
    try:
        return json.loads(data or b"")
    except ValueError:
        raise ValueError(f"malformed JSON in znode {path}: {data[:80]!r}") from None


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_base64(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def new_cluster_id() -> str:
    return uuid_to_base64(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None = None


class BrokerIdsZNode:
    @staticmethod
    def path() -> str:
        return "/brokers/ids"


class BrokerIdZNode:
    @staticmethod
    def path(broker_id: int) -> str:
        return f"/brokers/ids/{broker_id}"

    @staticmethod
    def encode(broker_id: int, host: str, port: int, rack: str | None, timestamp_ms: int) -> bytes:
        return _json({"version": 4, "host": host, "port": port, "jmx_port": -1,
                      "timestamp": str(timestamp_ms), "endpoints": [f"PLAINTEXT://{host}:{port}"],
                      "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "rack": rack})

    @staticmethod
    def decode(data: bytes, broker_id: int | None = None, path: str = "/brokers/ids") -> BrokerInfo:
        obj = _load(data, path)
        host, port = obj.get("host"), obj.get("port")
        if not host and obj.get("endpoints"):
            _, _, rest = obj["endpoints"][0].partition("://")
            host, _, p = rest.rpartition(":")
            port = int(p)
        return BrokerInfo(broker_id if broker_id is not None else int(obj.get("id", -1)), host, int(port),
                          obj.get("rack"))


class TopicsZNode:
    @staticmethod
    def path() -> str:
        return "/brokers/topics"


class TopicZNode:
    """``{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{},"topic_id":..}``"""

    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}"

    @staticmethod
    def encode(assignment: dict[int, list[int]], topic_id: uuid.UUID | None) -> bytes:
        obj: dict[str, Any] = {"version": 2,
                               "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
                               "adding_replicas": {}, "removing_replicas": {}}
        if topic_id is not None:
            obj["topic_id"] = uuid_to_base64(topic_id)
        return _json(obj)

    @staticmethod
    def decode(data: bytes) -> tuple[dict[int, list[int]], uuid.UUID | None]:
        obj = _load(data, "/brokers/topics/<topic>")
        assignment = {int(p): [int(b) for b in r] for p, r in obj["partitions"].items()}
        topic_id = uuid_from_base64(obj["topic_id"]) if obj.get("topic_id") else None
        return assignment, topic_id


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}"


class TopicPartitionStateZNode:
    """``{"version":1,"leader":L,"leader_epoch":E,"isr":[..],"controller_epoch":C}``; stat version = zkVersion."""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}/state"

    @staticmethod
    def encode(state: LeaderAndIsr) -> bytes:
        return _json({"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                      "isr": list(state.isr), "controller_epoch": state.controller_epoch})

    @staticmethod
    def decode(data: bytes, zk_version: int = 0) -> LeaderAndIsr:
        obj = _load(data, "partition state")
        return LeaderAndIsr(int(obj["leader"]), int(obj["leader_epoch"]), tuple(int(b) for b in obj["isr"]),
                            int(obj["controller_epoch"]), zk_version)


class ConfigEntityZNode:
    """``/config/topics/<t>`` and ``/config/brokers/<id>``: ``{"version":1,"config":{...}}``"""

    @staticmethod
    def path(entity_type: str, name: str) -> str:
        return f"/config/{entity_type}/{name}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _json({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})

    @staticmethod
    def decode(data: bytes) -> dict[str, str]:
        if not data:
            return {}
        return dict(_load(data, "/config").get("config", {}))


class ControllerZNode:
    @staticmethod
    def path() -> str:
        return "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int) -> bytes:
        return _json({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})

    @staticmethod
    def decode(data: bytes) -> int:
        return int(_load(data, "/controller")["brokerid"])


class ControllerEpochZNode:
    @staticmethod
    def path() -> str:
        return "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode()

    @staticmethod
    def decode(data: bytes) -> int:
        try:
            return int((data or b"0").decode())
        except ValueError:
            raise ValueError(f"malformed /controller_epoch: {data[:40]!r}") from None


class IsrChangeNotificationZNode:
    @staticmethod
    def path() -> str:
        return "/isr_change_notification"

    @staticmethod
    def sequence_path() -> str:
        return "/isr_change_notification/isr_change_"

    @staticmethod
    def encode(partitions: list[tuple[str, int]]) -> bytes:
        return _json({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    @staticmethod
    def decode(data: bytes) -> list[tuple[str, int]]:
        return [(e["topic"], int(e["partition"])) for e in _load(data, "/isr_change_notification")["partitions"]]


class DeleteTopicsZNode:
    @staticmethod
    def path(topic: str | None = None) -> str:
        return "/admin/delete_topics" if topic is None else f"/admin/delete_topics/{topic}"


class PreferredReplicaElectionZNode:
    @staticmethod
    def path() -> str:
        return "/admin/preferred_replica_election"


class ClusterIdZNode:
    @staticmethod
    def path() -> str:
        return "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _json({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        return str(_load(data, "/cluster/id")["id"])


PERSISTENT_PATHS = (
    "/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes", "/config/topics",
    "/config/brokers", "/config/clients", "/config/users", "/admin/delete_topics",
    "/isr_change_notification", "/log_dir_event_notification", "/latest_producer_id_block", "/cluster",
)
