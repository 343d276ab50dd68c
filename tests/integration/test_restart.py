"""Restarts of real brokers: the whole cluster with `strandline up` again on the same data (CTL-8),
and one broker SIGKILLed and started again while clients use it (CLI-1)."""

from __future__ import annotations

import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from strandline.runtime.client import KafkaConnection
from tests.conftest import Cluster, free_ports, poll_until
from tests.integration.replication_helpers import METADATA, address, consume, create_topic

pytestmark = pytest.mark.integration

PARTITIONS = 3


def isr_by_partition(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    """Each partition's ISR as its leader knows it (the leader changes it; others hear later)."""
    isrs: dict[int, list[int]] = {}
    for broker_id in range(1, cluster.brokers + 1):
        try:
            with KafkaConnection(address(cluster, broker_id), timeout_s=5) as conn:
                resp = conn.request(METADATA, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        except Exception:
            continue
        for p in resp.topics[0].partitions:
            if p.leader_id == broker_id:
                isrs[p.partition_index] = sorted(p.isr_nodes)
    return isrs


def produce_acks_all(bootstrap: str, topic: str, tag: str, count: int) -> tuple[list[bytes], list]:
    """Write ``count`` records with acks=all; (acknowledged values, delivery errors)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 20000})
    acked: list[bytes] = []
    errors: list = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err)

    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(40)
    return acked, errors


def test_ctl_8_up_again_on_the_same_data_twice_gets_full_isrs_and_acks_all_writes(tmp_path):
    """Ctrl-C `strandline up` and start it again on the same data, twice: followers told of a
    leader that had not registered yet must still fetch, so every ISR is full again and acks=all
    with min.insync.replicas=2 succeeds; nothing acknowledged is lost."""
    ports = free_ports(4)
    c = Cluster(tmp_path / "data", 3, ports[1], ports[0])
    c.data_dir.mkdir()
    c.start()
    try:
        create_topic(c, "tour", partitions=PARTITIONS, min_isr=2)
        acked, errors = produce_acks_all(c.bootstrap, "tour", "start", 300)
        assert errors == [] and len(acked) == 300
        for round_ in (1, 2):
            assert c.stop() == 0
            c.start()
            written, errors = produce_acks_all(c.bootstrap, "tour", f"round{round_}", 300)
            assert errors == [], f"round {round_}: {len(errors)} acks=all writes failed, e.g. {errors[0]}"
            acked += written
            poll_until(lambda: (isrs := isr_by_partition(c, "tour")) and len(isrs) == PARTITIONS and
                       all(isr == [1, 2, 3] for isr in isrs.values()), 30,
                       message=f"round {round_}: every ISR full")
        got = {value for _, _, value in consume(c.bootstrap, "tour", PARTITIONS, len(acked))}
        missing = [v for v in acked if v not in got]
        assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    finally:
        c.stop()
