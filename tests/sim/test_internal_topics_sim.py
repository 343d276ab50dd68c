"""The internal topics (``__consumer_offsets``, ``__transaction_state``) are created with their
configured replication factor or not at all, in the deterministic simulator.

Kafka (2.8) answers FindCoordinator COORDINATOR_NOT_AVAILABLE, and creates nothing, while fewer
brokers are alive than ``offsets.topic.replication.factor`` / ``transaction.state.log.replication.factor``:
a topic created with fewer replicas would keep them for good. Once enough brokers are back, the
next FindCoordinator creates it with all of them.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination.cluster_state import read_cluster_state
from strandline.sim.cluster import SimCluster

INTERNAL = {0: ("__consumer_offsets", "offsets.topic.replication.factor"),
            1: ("__transaction_state", "transaction.state.log.replication.factor")}
PARTITIONS = 3


def cluster() -> SimCluster:
    return SimCluster((1, 2, 3), **{"offsets.topic.num.partitions": str(PARTITIONS),
                                    "transaction.state.log.num.partitions": str(PARTITIONS),
                                    "replica.lag.time.max.ms": "1000"})


def find_coordinator(c: SimCluster, key_type: int, via: int):
    key = "g" if key_type == 0 else "tx"
    return c.call(via, 10, 3, {"key": key, "key_type": key_type}, "client")


def topics_in_zookeeper(c: SimCluster) -> dict:
    return read_cluster_state(c.zk)[1]


@pytest.mark.parametrize("key_type", [0, 1])
def test_an_internal_topic_waits_for_enough_brokers_then_gets_its_replication_factor(key_type):
    """Three brokers, the replication factor's default 3, one broker down: FindCoordinator (from
    either live broker, again and again) answers COORDINATOR_NOT_AVAILABLE and no topic is created;
    the broker says why once. With the third broker back, the topic is created with 3 replicas."""
    name, key = INTERNAL[key_type]
    c = cluster()
    c.crash(3)
    c.advance(500)
    for attempt in range(10):
        answer = find_coordinator(c, key_type, 1 + attempt % 2)
        assert answer.error_code == ErrorCode.coordinator_not_available
        c.advance(100)
    assert name not in topics_in_zookeeper(c)
    assert all(name not in c.brokers[b].core.metadata.topics for b in (1, 2))
    said = [line for b in (1, 2) for line in c.brokers[b].log if "does not meet the required replication factor" in line]
    assert len(said) == 2 and all(f"'{key}'" in line and f"'{name}'" in line and "'2'" in line for line in said)
    c.start(3)
    c.advance(1000)
    for _ in range(50):
        answer = find_coordinator(c, key_type, 1)
        if answer.error_code == ErrorCode.none:
            break
        assert answer.error_code == ErrorCode.coordinator_not_available
        c.advance(50)
    assert answer.error_code == ErrorCode.none and answer.node_id in (1, 2, 3)
    topic = topics_in_zookeeper(c)[name]
    assert len(topic.assignment) == PARTITIONS
    assert all(len(set(replicas)) == 3 for replicas in topic.assignment.values())


def test_metadata_auto_creation_of_an_internal_topic_follows_the_same_rule():
    """A Metadata request naming ``__consumer_offsets`` with auto-creation on creates it as the
    group coordinator would (its partitions, compacted), and not while too few brokers live:
    INVALID_REPLICATION_FACTOR, as Kafka 2.8's auto-topic creation answers."""
    c = cluster()
    c.crash(3)
    c.advance(500)
    request = {"topics": [{"name": "__consumer_offsets"}], "allow_auto_topic_creation": True,
               "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    [topic] = c.call(1, 3, 8, request).topics
    assert topic.error_code == ErrorCode.invalid_replication_factor
    assert "__consumer_offsets" not in topics_in_zookeeper(c)
    c.start(3)
    c.advance(1000)
    [topic] = c.call(1, 3, 8, request).topics
    assert topic.error_code in (ErrorCode.none, ErrorCode.leader_not_available)
    created = topics_in_zookeeper(c)["__consumer_offsets"]
    assert len(created.assignment) == PARTITIONS and created.configs.get("cleanup.policy") == ["compact"]
    assert all(len(replicas) == 3 for replicas in created.assignment.values())


def test_a_single_broker_cluster_with_the_replication_factors_at_1_has_its_coordinators():
    """Kafka's single-broker setups set both keys to 1 (``strandline up --brokers 1`` does)."""
    c = SimCluster((1,), **{"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1"})
    for key_type in (0, 1):
        for _ in range(50):
            answer = find_coordinator(c, key_type, 1)
            if answer.error_code == ErrorCode.none:
                break
            c.advance(50)
        assert answer.error_code == ErrorCode.none and answer.node_id == 1
