"""Compacted topics on real brokers (issue 16): confluent-kafka and kafka-python read the newest
value of every key from a compacted topic, tombstones vanish after ``delete.retention.ms``, a
keyless record is refused, the tools show the cleaner's state, and a broker SIGKILLed in the
middle of a cleaning pass comes back with a whole log."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strandline.group.records import iter_records
from tests.conftest import cluster_fixture, Cluster, poll_until, run_cli
from tests.integration.replication_helpers import create_topic

pytestmark = pytest.mark.integration

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "20000", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "1500"}


cc = cluster_fixture("compaction", 3, overrides=["log.cleaner.backoff.ms=200"])


def status(c: Cluster, broker_id: int) -> dict:
    url = next(b["metrics"] for b in c.info["brokers"] if b["id"] == broker_id)
    with urllib.request.urlopen(f"{url}/status", timeout=5) as resp:
        return json.loads(resp.read())


def cleaner_state(c: Cluster, broker_id: int, topic: str) -> dict | None:
    for r in status(c, broker_id)["replicas"]:
        if r["topic"] == topic:
            return r.get("cleaner")
    return None


def produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]], **extra) -> list:
    """Produce with acks=all; returns (offset, key, value) per acknowledged record, or raises."""
    from confluent_kafka import Producer

    acked, errors = [], []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, **extra})
    for key, value in items:
        p.produce(topic, key=key, value=value, on_delivery=done)
        p.poll(0)
    p.flush(30)
    if errors:
        raise AssertionError(f"{len(errors)} records refused, e.g. {errors[0]}")
    return sorted(acked)


def read_all(bootstrap: str, topic: str, end: int) -> list:
    """(offset, key, value) of every record from offset 0 up to ``end`` with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "check.crcs": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        poll_until(lambda: _drain(consumer, got) >= end - 1, 30, message=f"{topic} read to {end}")
    finally:
        consumer.close()
    return got


def _drain(consumer, got: list) -> int:
    for msg in consumer.consume(num_messages=5000, timeout=0.2):
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.key(), msg.value()))
    return got[-1][0] if got else -1


def newest(records: list) -> dict:
    return {key: value for _, key, value in records}


def test_consumers_read_the_newest_value_of_each_key_and_tombstones_vanish(cc):
    """Deliverables 1 and 4: 40 keys updated 100 times each on an RF=3 topic. After cleaning, a
    consumer from offset 0 reads one record per key below the cleaned point, the newest, and every
    record above it. The tombstones of 10 keys go after delete.retention.ms, with their keys."""
    from kafka import KafkaConsumer, TopicPartition

    topic = f"table-{uuid.uuid4().hex[:6]}"
    create_topic(cc, topic, configs=COMPACT)
    items = [(b"key-%02d" % (i % 40), b"value-%05d-" % i + b"x" * 100) for i in range(4000)]
    acked = produce(cc.bootstrap, topic, items)
    deleted = [b"key-%02d" % k for k in range(10)]
    acked += produce(cc.bootstrap, topic, [(k, None) for k in deleted])
    acked += produce(cc.bootstrap, topic, [(b"filler-%03d" % i, b"y" * 100) for i in range(400)])   # rolls past them
    end = acked[-1][0] + 1
    expected = newest(acked)

    def cleaned_everywhere() -> bool:
        states = [cleaner_state(cc, b, topic) for b in (1, 2, 3)]
        return all(s and s["last_cleaned_offset"] > 4000 for s in states)
    poll_until(cleaned_everywhere, 30, message="every replica cleaned past the updates")
    got = read_all(cc.bootstrap, topic, end)
    cleaned_to = cleaner_state(cc, 1, topic)["last_cleaned_offset"]
    assert len(got) < 1000, "the topic was not compacted"
    assert newest(got) == expected
    below = [key for offset, key, _ in got if offset < 4000]
    assert sorted(below) == [b"key-%02d" % k for k in range(10, 40)]     # the other 10 are deleted after 4000
    assert [r for r in got if r[0] >= cleaned_to] == [r for r in acked if r[0] >= cleaned_to]

    # kafka-python reads the same records (it steps over the gaps and the cleaner's empty batches)
    consumer = KafkaConsumer(bootstrap_servers=cc.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    seen = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    assert seen == got

    # the tombstones have outlived delete.retention.ms: the next pass removes them
    def tombstones_gone() -> bool:
        return all(key not in newest(read_all(cc.bootstrap, topic, end)) for key in deleted)
    poll_until(tombstones_gone, 30, interval=0.5, message="tombstones removed")
    final = newest(read_all(cc.bootstrap, topic, end))
    assert final == {k: v for k, v in expected.items() if v is not None}

    # the tools: topics describe shows the cleaner's state, /metrics counts the bytes cleaned
    out = run_cli("topics", "describe", "--bootstrap-server", cc.bootstrap, "--topic", topic).stdout
    assert "LastCleanedOffset: " in out and "DirtyRatio: " in out
    url = next(b["metrics"] for b in cc.info["brokers"] if b["id"] == 1)
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        samples = {s.name: s.value for f in text_string_to_metric_families(resp.read().decode()) for s in f.samples}
    assert samples["strandline_log_cleaner_bytes_read_total"] > 400_000
    assert samples["strandline_log_cleaner_records_removed_total"] > 3000


def test_a_record_without_a_key_is_refused_with_invalid_record(cc):
    """Bad input: Kafka's INVALID_RECORD, and nothing is appended."""
    from confluent_kafka import Producer

    topic = f"keyed-{uuid.uuid4().hex[:6]}"
    create_topic(cc, topic, configs=COMPACT)
    errors = []
    p = Producer({"bootstrap.servers": cc.bootstrap, "acks": "all", "retries": 0})
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert [e.name() for e in errors] == ["INVALID_RECORD"]
    assert produce(cc.bootstrap, topic, [(b"k", b"v")]) == [(0, b"k", b"v")]


def replica_records(c: Cluster, broker_id: int, topic: str) -> list:
    log_dir = Path(next(b["log_dir"] for b in c.info["brokers"] if b["id"] == broker_id)) / f"{topic}-0"
    return list(iter_records(b"".join(f.read_bytes() for f in sorted(log_dir.glob("*.log")))))


def test_a_broker_killed_while_it_cleans_recovers_a_whole_log(cc):
    """Deliverable 2 on a real process: broker 2 is SIGKILLed in the middle of a slow pass
    (log.cleaner.io.max.bytes.per.second set on it alone). After its restart its log has no
    cleaner leftovers, and every acknowledged record is either there or superseded by a newer
    record of its key that is there."""
    topic = f"killed-{uuid.uuid4().hex[:6]}"
    create_topic(cc, topic, configs={**COMPACT, "segment.bytes": "1000000"})
    assert run_cli("configs", "alter", "--bootstrap-server", cc.bootstrap, "--entity-type", "brokers",
                   "--entity-name", "2", "--add-config", "log.cleaner.io.max.bytes.per.second=400000").returncode == 0
    acked = produce(cc.bootstrap, topic, [(b"key-%03d" % (i % 300), b"v%06d-" % i + b"z" * 300)
                                          for i in range(12000)])

    log_dir = Path(next(b["log_dir"] for b in cc.info["brokers"] if b["id"] == 2)) / f"{topic}-0"

    def rewriting() -> bool:          # past the offset map: a .cleaned file is being written
        return any(log_dir.glob("*.cleaned"))
    poll_until(rewriting, 60, interval=0.02, message="broker 2 rewriting segments")
    assert run_cli("cluster", "kill", "2", "--data-dir", str(cc.data_dir)).returncode == 0
    left = [p.name for p in log_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert left, "killed outside a pass"
    assert run_cli("cluster", "start", "2", "--data-dir", str(cc.data_dir), timeout=120).returncode == 0
    assert run_cli("configs", "alter", "--bootstrap-server", cc.bootstrap, "--entity-type", "brokers",
                   "--entity-name", "2", "--delete-config", "log.cleaner.io.max.bytes.per.second").returncode == 0

    def caught_up() -> bool:
        return any(r["topic"] == topic and r["log_end_offset"] == acked[-1][0] + 1 for r in status(cc, 2)["replicas"])
    poll_until(caught_up, 30, message="broker 2 caught up")
    # a new pass may have begun (its .cleaned file), but nothing of a swap is left half done
    assert not [p.name for p in log_dir.iterdir() if p.name.endswith((".swap", ".deleted"))]
    kept = replica_records(cc, 2, topic)
    assert [o for o, _, _ in kept] == sorted({o for o, _, _ in kept})
    newest_offset = {}
    for offset, key, _ in kept:
        newest_offset[key] = offset
    present = set(kept)
    lost = [r for r in acked if r not in present and newest_offset.get(r[1], -1) <= r[0]]
    assert lost == [], f"{len(lost)} acknowledged records neither kept nor superseded, e.g. {lost[:3]}"
    assert newest(kept) == newest(acked)
