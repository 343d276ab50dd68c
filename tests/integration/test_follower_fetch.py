"""Consumers reading from a replica in their own rack (KIP-392), on real broker processes with a
real client: ``strandline up --racks`` gives each broker its ``broker.rack``, and with
``replica.selector.class`` set a librdkafka consumer that sets ``client.rack`` is sent by the
leader to the follower in its rack, which serves it every record, committed ones only (REP-4)."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Cluster, cluster_fixture

pytestmark = pytest.mark.integration

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
N = 2000


cluster = cluster_fixture("racks", 3, racks="r1,r2,r3", overrides=[f"replica.selector.class={RACK_AWARE}"],
                          start_timeout=120)


def bytes_out(c: Cluster, broker_id: int, topic: str) -> float:
    """Kafka's BytesOut meter of ``topic`` on one broker: bytes of records sent to consumers."""
    url = next(b["metrics"] for b in c.info["brokers"] if b["id"] == broker_id)
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "kafka_server_brokertopicmetrics_bytesout_total" and s.labels.get("topic") == topic)


def test_cli_2_a_consumer_with_client_rack_reads_every_record_from_the_follower_in_its_rack(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "near"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:        # broker 1 (rack r1) leads
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1, 2, 3]})])
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(N):
        producer.produce(topic, value=f"v{i}".encode(), on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors
    sent = sum(len(f"v{i}") for i in range(N))

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "near-r2", "client.rack": "r2",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < N and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=1):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(N)]
    # every record reached the consumer from broker 2 (rack r2), none from the leader (rack r1)
    assert bytes_out(cluster, 2, topic) >= sent
    assert bytes_out(cluster, 1, topic) == 0
