"""Compacted topics in the broker core and across replicas (issue 16), on the simulator."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.records import iter_records
from strandline.sim.cluster import SimCluster
from tests.unit.batches import keyed_batch, make_batch
from tests.unit.broker.test_broker_core import Harness
from tests.sim.test_replication_sim import create

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1000", "min.cleanable.dirty.ratio": "0.01"}


def test_a_record_without_a_key_is_refused_by_a_compacted_topic_and_nothing_is_appended():
    """Kafka's LogValidator.validateKey: INVALID_RECORD, with the messages Kafka gives, and a record
    error (KIP-467) naming each record without a key, so that a client fails those and retries
    the rest of the batch (librdkafka's test 0011: 10 records of 100 without a key failed all 100)."""
    h = Harness()
    h.create("table", configs={"cleanup.policy": "compact"})
    h.produce("table", keyed_batch([(b"k", b"v"), (None, b"no key"), (b"k2", b"v"), (None, b"none")]), version=8)
    part = h.response(0, 8).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_record
    why = "Compacted topic cannot accept message without key in topic partition table-0."
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, why), (3, why)]
    assert part.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{why}'), RecordError(batchIndex=3, message='{why}')]")
    assert h.broker.partitions[("table", 0)].log.log_end_offset == 0
    h.produce("table", keyed_batch([(b"k", b"v")], compression=1), version=8)
    assert h.response(0, 8).responses[0].partition_responses[0].error_code == ErrorCode.none
    h.create("plain")
    h.produce("plain", make_batch([b"no key"]), version=8)
    assert h.response(0, 8).responses[0].partition_responses[0].error_code == ErrorCode.none


def produce_keyed(c: SimCluster, broker: int, topic: str, items) -> None:
    c.request(broker, 0, 7, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": bytes(keyed_batch(items, timestamp_ms=c.now))}]}]},
        "producer")
    for _ in range(200):
        c.advance(1)
        resp = c.response(broker, 0, 7, "producer")
        if resp is not None:
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none, resp
            return
    raise AssertionError("no produce answer")


def test_each_replica_compacts_its_own_log_and_a_returning_follower_steps_over_the_gaps():
    """Deliverable 4: every replica keeps the newest value of each key; a follower that was away
    while its leader compacted fetches across the cleaned segments (their gaps) and ends with the
    same records as the leader."""
    c = SimCluster((1, 2, 3), latency_ms=1, **{"log.cleaner.backoff.ms": "50"})
    create(c, "table", [1, 2, 3], configs=COMPACT)
    leader = c.state("table").leader
    away = next(b for b in (1, 2, 3) if b != leader)
    latest = {}
    for i in range(60):
        produce_keyed(c, leader, "table", [(b"k%d" % (i % 4), b"v%d" % i)])
        latest[b"k%d" % (i % 4)] = b"v%d" % i
    c.shutdown(away)
    for i in range(60, 200):
        produce_keyed(c, leader, "table", [(b"k%d" % (i % 4), b"v%d" % i)])
        latest[b"k%d" % (i % 4)] = b"v%d" % i
    c.advance(2000)
    led = list(iter_records(c.log_bytes(leader, "table")))
    assert len(led) < 60                               # compacted: most of the 200 records are gone
    assert [o for o, _, _ in led] == sorted(o for o, _, _ in led)
    assert {k: v for _, k, v in led} == latest
    c.start(away)
    c.advance(5000)
    for broker in (1, 2, 3):
        got = list(iter_records(c.log_bytes(broker, "table")))
        assert {k: v for _, k, v in got} == latest, broker
        assert c.partition(broker, "table").log.log_end_offset == 200
    assert away in c.state("table").isr
    # the cleaner of each broker ran on its own log
    assert all(c.brokers[b].core.cleaner.passes > 0 for b in (1, 2, 3))
