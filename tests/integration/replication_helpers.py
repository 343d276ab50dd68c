"""Helpers shared by the multi-broker tests: topics, metadata, replica bytes, a writer and a reader."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from strandline.cli.topics import controller_address
from strandline.runtime.client import KafkaConnection
from tests.conftest import Cluster

METADATA, PRODUCE, CREATE_TOPICS = 3, 0, 19


def address(cluster: Cluster, broker_id: int) -> str:
    return f"127.0.0.1:{cluster.base_port + broker_id - 1}"


def create_topic(cluster: Cluster, name: str, assignment: dict[int, list[int]] | None = None,
                 partitions: int = 1, min_isr: int = 2, configs: dict[str, str] | None = None) -> None:
    controller = None
    for bootstrap in cluster.bootstrap.split(","):
        try:
            with KafkaConnection(bootstrap, timeout_s=5) as conn:
                controller = controller_address(conn)
            break
        except Exception:
            continue
    with KafkaConnection(controller) as conn:
        spec = {"name": name, "num_partitions": -1 if assignment else partitions,
                "replication_factor": -1 if assignment else 3,
                "assignments": [{"partition_index": p, "broker_ids": r} for p, r in (assignment or {}).items()],
                "configs": [{"name": k, "value": v}
                            for k, v in {"min.insync.replicas": str(min_isr), **(configs or {})}.items()]}
        resp = conn.request(CREATE_TOPICS, 4, {"topics": [spec], "timeout": 30000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.none, resp


def partition_state(cluster: Cluster, topic: str, partition: int, broker_id: int):
    with KafkaConnection(address(cluster, broker_id), timeout_s=5) as conn:
        resp = conn.request(METADATA, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    for p in resp.topics[0].partitions:
        if p.partition_index == partition:
            return p
    return None


def leader_isr(cluster: Cluster, topic: str, partition: int, leader: int) -> list[int]:
    p = partition_state(cluster, topic, partition, leader)
    return sorted(p.isr_nodes) if p is not None else []


def log_bytes(cluster: Cluster, broker_id: int, topic: str, partition: int) -> bytes:
    log_dir = Path(next(b["log_dir"] for b in cluster.info["brokers"] if b["id"] == broker_id))
    return b"".join(f.read_bytes() for f in sorted((log_dir / f"{topic}-{partition}").glob("*.log")))


def replicas_identical(cluster: Cluster, topic: str, partition: int) -> bytes | None:
    copies = [log_bytes(cluster, b, topic, partition) for b in (1, 2, 3)]
    return copies[0] if copies[0] and copies[0] == copies[1] == copies[2] else None


def consume(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "check.crcs": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expect and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=5000, timeout=0.5):
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
    consumer.close()
    return got


class Writer:
    """A confluent-kafka producer (acks=all, idempotent) writing numbered records until stopped."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.002, **config: object) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 60000, **config})
        self.topic = topic
        self.interval_s = interval_s
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.errors: list = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0

        def on_delivery(err, msg):
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append(msg.value())
                self.ack_times.append(time.monotonic())

        while not self.stopping.is_set():
            self.producer.produce(self.topic, value=b"%08d" % i + b"." * 200, on_delivery=on_delivery)
            i += 1
            self.producer.poll(self.interval_s)
        self.producer.flush(60)

    def __enter__(self) -> "Writer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(90)


def controller_id(cluster: Cluster) -> int:
    """The controller as the first answering broker's metadata says (-1 while none answers)."""
    for bootstrap in cluster.bootstrap.split(","):
        try:
            with KafkaConnection(bootstrap, timeout_s=5) as conn:
                return int(conn.request(METADATA, 10, {"topics": [], "allow_auto_topic_creation": False}).controller_id)
        except Exception:
            continue
    return -1


def current_leader(cluster: Cluster, topic: str, partition: int, brokers: list[int]) -> int:
    """The leader as the first answering broker's metadata says (-1 while there is none)."""
    for b in brokers:
        try:
            p = partition_state(cluster, topic, partition, b)
        except Exception:
            continue
        if p is not None:
            return int(p.leader_id)
    return -1


def max_gap_around(times: list[float], t: float) -> float:
    """The longest pause between acknowledgements that spans moment ``t``."""
    before = [x for x in times if x <= t]
    after = [x for x in times if x > t]
    if not before or not after:
        return float("inf")
    return after[0] - before[-1]
