"""DescribeProducers (KIP-664) in the simulator: every replica of a partition answers from its own
log's producer state, a follower as well as the leader (Kafka's ``Partition.activeProducerState``
reads the local log), so that ``kafka-transactions find-hanging --broker-id N`` can ask each broker
about every partition it holds."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.protocol.api import ApiKey
from strandline.sim.cluster import SimCluster
from tests.unit.batches import make_batch
from tests.sim.test_replication_sim import create

TOPIC = "p"
PRODUCER_ID = 4242


def describe_producers(c: SimCluster, broker: int, partitions: list[int]):
    body = {"topics": [{"name": TOPIC, "partition_indexes": partitions}]}
    return c.call(broker, ApiKey.DESCRIBE_PRODUCERS, 0, body, "admin").topics[0].partitions


def test_a_follower_describes_the_producers_of_its_replica_as_the_leader_does():
    c = SimCluster((1, 2, 3))
    create(c, TOPIC, [1, 2])
    batch = make_batch([b"a", b"b", b"c"], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0)
    c.request(1, 0, 7, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": bytes(batch)}]}]}, "producer")
    c.settle()
    c.advance(1000)
    assert c.partition(2, TOPIC).log_end_offset == 3
    answers = {broker: describe_producers(c, broker, [0]) for broker in (1, 2)}
    for broker, [p] in answers.items():
        assert p.error_code == ErrorCode.none, (broker, p)
        [producer] = p.active_producers
        assert (producer.producer_id, producer.producer_epoch, producer.last_sequence) == (PRODUCER_ID, 0, 2)
        assert producer.current_txn_start_offset == -1
    [outside] = describe_producers(c, 3, [0])        # broker 3 holds no replica of it
    assert outside.error_code == ErrorCode.not_leader_or_follower
    [unknown] = describe_producers(c, 2, [7])
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
