"""CTL-11 on real processes: while a producer writes with acks=all, every replica of a
6-partition topic moves to other brokers and its replication factor goes from 2 to 3. No
acknowledged write is lost, acknowledgements never pause for long, and the new replicas hold
byte-identical logs; the old ones are deleted."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli

pytestmark = pytest.mark.integration

PARTITIONS = 6
# Leadership moves by the controller's election and LeaderAndIsr, and the producer follows within
# its metadata refresh (tens of ms when idle). A write that waited for a new replica to catch up
# or for a broker's session would pause for replica.lag.time.max.ms or zookeeper.session.timeout.ms
# (30 s and 18 s here, Kafka's defaults): 5 s separates the two on a shared 2-core machine.
MAX_ACK_GAP_S = 5.0


cluster = cluster_fixture("reassign", 5, start_timeout=150)


def segment_bytes(log_dir: str, topic: str, partition: int) -> bytes:
    folder = Path(log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


def test_ctl_11_a_move_under_acks_all_load_loses_nothing_and_leaves_identical_replicas(cluster, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "moving"
    old = {p: [1, 2] if p % 2 == 0 else [2, 1] for p in range(PARTITIONS)}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1, replica_assignments=old,
                                      topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    target = {p: [3 + (p + i) % 3 for i in range(3)] for p in range(PARTITIONS)}

    acked: list[tuple[int, int, bytes, float]] = []
    failed: list[str] = []
    unflushed: list[int] = []                                # what flush() left unsent, per writer run
    crashed: list[str] = []                                  # an exception in the writer fails no test by itself
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000})

        def delivered(err, msg):
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value(), time.monotonic()))
            else:
                failed.append(str(err))
        i = 0
        deadline = time.monotonic() + 120                    # bounded even if the test body fails
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                for _ in range(20):
                    producer.produce(topic, b"v%08d" % i, partition=i % PARTITIONS, on_delivery=delivered)
                    i += 1
                producer.poll(0.01)
        except Exception as exc:                             # noqa: BLE001 - reported by the test's thread
            crashed.append(repr(exc))
        unflushed.append(producer.flush(60))

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    poll_until(lambda: len(acked) > 2000, 30, message="the producer is acknowledged")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()]}))
    started = run_cli("partitions", "reassign", "--bootstrap-server", cluster.bootstrap, "--execute",
                      "--reassignment-json-file", str(plan))
    assert started.returncode == 0, started.stdout + started.stderr
    moved_at = len(acked)
    poll_until(lambda: run_cli("partitions", "reassign", "--bootstrap-server", cluster.bootstrap, "--verify",
                               "--reassignment-json-file", str(plan)).returncode == 0, 90,
               interval=1.0, message="every partition moved")
    during = len(acked) - moved_at
    # the producer keeps writing to the new replicas for a moment
    poll_until(lambda: len(acked) > moved_at + during + 2000, 30, message="writes acknowledged after the move")
    stop.set()
    writer.join(90)
    assert not writer.is_alive()
    assert crashed == [] and unflushed == [0], (crashed, unflushed)
    assert failed == []

    times = sorted(t for *_, t in acked)
    gap = max(b - a for a, b in zip(times, times[1:]))
    assert gap <= MAX_ACK_GAP_S, f"acknowledgements paused for {gap:.2f} s"
    assert during > 0

    # every acknowledged record is there, at its offset
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    expected = {(p, o): v for p, o, v, _ in acked}
    found: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while len(found) < len(expected) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                found[(msg.partition(), msg.offset())] = msg.value()
    consumer.close()
    missing = [k for k, v in expected.items() if found.get(k) != v]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"

    # the new replicas are byte-identical; the old ones are gone
    dirs = {b["id"]: b["log_dir"] for b in cluster.info["brokers"]}
    for p in range(PARTITIONS):
        poll_until(lambda p=p: len({segment_bytes(dirs[b], topic, p) for b in target[p]}) == 1, 30,
                   message=f"the replicas of partition {p} converge")
        assert len(segment_bytes(dirs[target[p][0]], topic, p)) > 0
        for b in (1, 2):
            poll_until(lambda b=b, p=p: not (Path(dirs[b]) / f"{topic}-{p}").exists(), 30,
                       message=f"broker {b} deleted its replica of partition {p}")
    print(f"reassignment under load: {len(acked)} acknowledged, {during} during the move, "
          f"longest pause {gap * 1000:.0f} ms")
