"""ISR replication between three real broker processes (REP-1..4, ACK-1, ACK-2, ISR-1..4, SAFE-1).

One 3-broker cluster for the module, with a short ``replica.lag.time.max.ms`` so that a stopped
follower leaves the ISR within about a second. Brokers are stopped with SIGSTOP for a few
seconds only, well inside the ZooKeeper session timeout.
"""

from __future__ import annotations

import os
import signal
import time

from kio.schema.errors import ErrorCode

from strandline.runtime.client import KafkaConnection
from tests.conftest import cluster_fixture, poll_until
from tests.integration.replication_helpers import (PRODUCE, Writer, address, consume, controller_id, create_topic,
                                                   leader_isr, partition_state, replicas_identical)
from tests.unit.batches import make_batch

LAG_MS = 1000


rf3 = cluster_fixture("rf3", 3, overrides=[f"replica.lag.time.max.ms={LAG_MS}"])


def test_acks_all_records_are_byte_identical_on_every_replica(rf3):
    """REP-1, REP-2, ACK-1: with RF=3 and acks=all, every acknowledged record is on all three
    replicas, byte for byte, and a consumer reads each exactly once."""
    from confluent_kafka import Producer

    create_topic(rf3, "same", partitions=3)
    producer = Producer({"bootstrap.servers": rf3.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked, errors = [], []

    def on_delivery(err, msg):
        (errors if err else acked).append(err or msg.value())

    for i in range(6000):
        producer.produce("same", key=b"%d" % i, value=b"value-%06d" % i + b"x" * 500, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors and len(acked) == 6000
    for partition in range(3):
        poll_until(lambda: replicas_identical(rf3, "same", partition), 30,  # noqa: B023
                   message=f"identical replicas of same-{partition}")
    got = consume(rf3.bootstrap, "same", 3, 6000)
    assert sorted(v for _, _, v in got) == sorted(acked)


def test_client_requests_to_a_follower_get_not_leader(rf3):
    """CLI-1, CLI-2: every broker names the same leader; a follower refuses produce and fetch."""
    create_topic(rf3, "where", {0: [2, 3, 1]})
    poll_until(lambda: all(getattr(partition_state(rf3, "where", 0, b), "leader_id", -1) == 2 for b in (1, 2, 3)),
               10, message="all brokers know the leader")
    with KafkaConnection(address(rf3, 3)) as conn:
        resp = conn.request(PRODUCE, 7, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
            {"name": "where", "partition_data": [{"index": 0, "records": bytes(make_batch([b"v"]))}]}]})
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
        fetch = conn.request(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                     "topics": [{"topic": "where", "partitions": [{
                                         "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                     "forgotten_topics_data": [], "rack_id": ""})
        assert fetch.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_stopped_follower_leaves_the_isr_and_rejoins_after_catching_up(rf3):
    """ISR-1, ISR-3, ISR-4: a follower SIGSTOPped past replica.lag.time.max.ms leaves the ISR while
    acks=all writes go on with the other two; after SIGCONT it catches up and rejoins. The stopped
    follower is not the controller, which writes the ISR changes its leaders propose (AlterIsr)."""
    ctl = controller_id(rf3)
    leader, stopped = [b for b in (1, 2, 3) if b != ctl]
    create_topic(rf3, "lag", {0: [leader, ctl, stopped]})
    poll_until(lambda: leader_isr(rf3, "lag", 0, leader) == [1, 2, 3], 10, message="full ISR")
    pid = rf3.broker_pid(stopped)
    with Writer(rf3.bootstrap, "lag") as writer:
        poll_until(lambda: len(writer.acked) > 200, 20, message="first writes")
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            poll_until(lambda: leader_isr(rf3, "lag", 0, leader) == sorted([leader, ctl]), 10,
                       message=f"broker {stopped} out of the ISR")
            shrink_s = time.monotonic() - stopped_at
            before = len(writer.acked)
            poll_until(lambda: len(writer.acked) > before + 200, 10,
                       message=f"writes acknowledged without broker {stopped}")
        finally:
            os.kill(pid, signal.SIGCONT)
        poll_until(lambda: leader_isr(rf3, "lag", 0, leader) == [1, 2, 3], 20, message=f"broker {stopped} back in the ISR")
    assert LAG_MS / 1000 <= shrink_s + 0.2 < LAG_MS / 1000 + 5
    assert not writer.errors
    data = poll_until(lambda: replicas_identical(rf3, "lag", 0), 30, message="identical replicas after rejoin")
    got = consume(rf3.bootstrap, "lag", 1, len(writer.acked))
    assert sorted(v for _, _, v in got) == sorted(writer.acked)
    assert len(data) > 0


def test_two_stopped_followers_make_acks_all_refuse_with_not_enough_replicas(rf3):
    """ACK-2, SAFE-1: with min.insync.replicas=2 and both followers stopped, the ISR shrinks to the
    leader once a write (acks=1) leaves them behind, and acks=all produce gets
    NOT_ENOUGH_REPLICAS; nothing acknowledged before is lost, and once the followers return acks=all
    works again. The leader is the controller, which writes the ISR changes its leaders propose
    (AlterIsr): a stopped controller would leave the shrink undecided."""
    leader = controller_id(rf3)
    create_topic(rf3, "few", {0: [leader] + [b for b in (1, 2, 3) if b != leader]})
    poll_until(lambda: leader_isr(rf3, "few", 0, leader) == [1, 2, 3], 10, message="full ISR")

    def produce(acks: int, value: bytes) -> int:
        with KafkaConnection(address(rf3, leader)) as conn:
            resp = conn.request(PRODUCE, 7, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
                {"name": "few", "partition_data": [{"index": 0, "records": bytes(make_batch([value]))}]}]})
        return resp.responses[0].partition_responses[0].error_code

    acknowledged = [b"before-%d" % i for i in range(20)]
    for value in acknowledged:
        assert produce(-1, value) == ErrorCode.none
    pids = [rf3.broker_pid(b) for b in (1, 2, 3) if b != leader]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        # caught-up followers stay in the ISR however long they are silent (ISR-1): a write makes them lag
        assert produce(1, b"acks-1") == ErrorCode.none
        poll_until(lambda: leader_isr(rf3, "few", 0, leader) == [leader], 10, message="ISR shrunk to the leader")
        assert produce(-1, b"refused") == ErrorCode.not_enough_replicas
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    poll_until(lambda: leader_isr(rf3, "few", 0, leader) == [1, 2, 3], 20, message="followers back in the ISR")
    assert produce(-1, b"after") == ErrorCode.none
    got = [v for _, _, v in consume(rf3.bootstrap, "few", 1, 22)]
    assert got == acknowledged + [b"acks-1", b"after"]
    poll_until(lambda: replicas_identical(rf3, "few", 0), 30, message="identical replicas")
