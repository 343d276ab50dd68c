"""Real clients against a real broker: each produces and consumes thousands of records round trip.

Keys, headers and timestamps survive; gzip/snappy/lz4/zstd batches are stored exactly as the
client compressed them (the broker never decodes records). ACK-1 (acks 0/1/all answered),
PRO-1 (idempotent producer), REP-4 (consumers read committed offsets only).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from strandline.protocol.records import iter_batches
from tests.conftest import missing_prerequisite

pytestmark = pytest.mark.integration

N = 3000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def expected(i: int, tag: str) -> tuple[bytes, bytes]:
    return f"{tag}-key-{i}".encode(), f"{tag}-value-{i}-".encode() + bytes([i % 251]) * (i % 200)


def assert_stored_as_sent(cluster, topic: str, codec: str) -> None:
    """The segment files hold the client's compressed batches as they were sent. (librdkafka sends
    a batch uncompressed when compressing would not make it smaller, so 'none' may appear too.)"""
    codecs = stored_codecs(cluster, topic)
    assert CODECS[codec] in codecs and codecs <= {0, CODECS[codec]}, codecs


def stored_codecs(cluster, topic: str) -> set[int]:
    """Compression codecs of the batches as they lie in the segment files."""
    codecs = set()
    for log_dir in Path(cluster.info["brokers"][0]["log_dir"]).glob(f"{topic}-*"):
        for segment in log_dir.glob("*.log"):
            data = segment.read_bytes()
            for _, header in iter_batches(data):
                codecs.add(header.compression)
    return codecs


def create_topic(cluster, topic: str, partitions: int = 1) -> None:
    from tests.conftest import run_cli

    result = run_cli("topics", "create", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                     "--partitions", str(partitions))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("codec", list(CODECS))
def test_confluent_kafka_round_trip(cluster, codec):
    """ACK-1 acks=all with an idempotent producer (PRO-1); batches stored as compressed (no decode)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"ck-{codec}"
    create_topic(cluster, topic, partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "compression.type": codec, "linger.ms": 5})
    acked = []
    base_ts = int(time.time() * 1000) - 60_000
    for i in range(N):
        key, value = expected(i, topic)
        producer.produce(topic, key=key, value=value, partition=i % 2, timestamp=base_ts + i,
                         headers=[("h", str(i).encode()), ("empty", b"")],
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    assert all(err is None for err, _, _ in acked) and len(acked) == N
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    got = {}
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=1000, timeout=1):
            assert msg.error() is None, msg.error()
            i = int(dict(msg.headers())["h"])
            got[i] = (msg.key(), msg.value(), msg.timestamp()[1], msg.partition(), msg.offset())
            assert dict(msg.headers())["empty"] in (b"", None)
    consumer.close()
    assert len(got) == N
    for i in range(N):
        key, value, ts, partition, _ = got[i]
        assert (key, value) == expected(i, topic)
        assert ts == base_ts + i
        assert partition == i % 2
    offsets = sorted((p, o) for _, _, _, p, o in got.values())
    assert offsets == sorted((p, o) for p in range(2) for o in range(N // 2))
    assert_stored_as_sent(cluster, topic, codec)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_kafka_python_round_trip(cluster, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-{codec}"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=1,
                             compression_type=None if codec == "none" else codec, linger_ms=5)
    futures = []
    base_ts = int(time.time() * 1000) - 30_000
    for i in range(N):
        key, value = expected(i, topic)
        futures.append(producer.send(topic, key=key, value=value, timestamp_ms=base_ts + i,
                                     headers=[("h", str(i).encode())]))
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert [m.offset for m in metas] == list(range(N))  # auto-created topic, one partition
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == N:
            break
    consumer.close()
    assert len(got) == N
    for i, msg in enumerate(got):
        assert (msg.key, msg.value) == expected(i, topic)
        assert msg.offset == i and msg.timestamp == base_ts + i
        assert dict(msg.headers)["h"] == str(i).encode()
    assert_stored_as_sent(cluster, topic, codec)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_aiokafka_round_trip(cluster, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = f"aio-{codec}"
    create_topic(cluster, topic)

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                                    compression_type=None if codec == "none" else codec, linger_ms=5)
        await producer.start()
        base_ts = int(time.time() * 1000) - 10_000
        try:
            futures = []
            for i in range(N):
                key, value = expected(i, topic)
                futures.append(await producer.send(topic, key=key, value=value, timestamp_ms=base_ts + i,
                                                   headers=[("h", str(i).encode())]))
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        assert [m.offset for m in metas] == list(range(N))
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            async with asyncio.timeout(60):
                while len(got) < N:
                    batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 30)
                    got.extend(batch.get(tp, []))
        finally:
            await consumer.stop()
        for i, msg in enumerate(got):
            assert (msg.key, msg.value) == expected(i, topic)
            assert msg.offset == i and msg.timestamp == base_ts + i
            assert dict(msg.headers)["h"] == str(i).encode()

    asyncio.run(main())
    assert_stored_as_sent(cluster, topic, codec)


@pytest.mark.parametrize("codec", ["none", "snappy", "zstd"])
def test_kcat_round_trip(cluster, codec):
    if shutil.which("kcat") is None:
        missing_prerequisite("kcat is not installed (make kcat installs it)")
    topic = f"kcat-{codec}"  # created by kcat's Metadata request (auto.create.topics.enable=true)
    lines = [f"k{i}:v{i}-{'x' * (i % 50)}" for i in range(N)]
    produced = subprocess.run(["kcat", "-b", cluster.bootstrap, "-t", topic, "-P", "-K:", "-z", codec,
                               "-X", "linger.ms=5", "-H", "source=kcat"],
                              input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-b", cluster.bootstrap, "-t", topic, "-C", "-o", "beginning", "-e",
                               "-f", "%o|%k:%s|%h\n"], capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    rows = consumed.stdout.splitlines()
    assert len(rows) == N
    for i, row in enumerate(rows):
        offset, payload, headers = row.split("|")
        assert int(offset) == i
        assert payload == lines[i]
        assert headers == "source=kcat"
    assert_stored_as_sent(cluster, topic, codec)


def test_confluent_kafka_lists_every_topic(cluster):
    """librdkafka 2.15+ sends 3 bytes after the body of an all-topics Metadata v12; Kafka ignores
    trailing bytes, so AdminClient.list_topics() without a topic must work."""
    from confluent_kafka.admin import AdminClient

    create_topic(cluster, "listed")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = admin.list_topics(timeout=20).topics
    assert "listed" in topics and len(topics["listed"].partitions) == 1


def test_confluent_kafka_regex_subscription_receives_records(cluster):
    """A subscription to "^pattern.*" refreshes all-topics metadata (with trailing bytes) to match it."""
    from confluent_kafka import Consumer, Producer

    for name in ("pattern-a", "pattern-b"):
        create_topic(cluster, name)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        producer.produce("pattern-a" if i % 2 else "pattern-b", value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-pattern",
                         "auto.offset.reset": "earliest", "enable.partition.eof": False})
    consumer.subscribe(["^pattern.*"])
    got = set()
    deadline = time.monotonic() + 60
    try:
        while len(got) < 10 and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=1):
                assert msg.error() is None, msg.error()
                got.add((msg.topic(), msg.value()))
    finally:
        consumer.close()
    assert got == {("pattern-a" if i % 2 else "pattern-b", f"v{i}".encode()) for i in range(10)}


def test_the_cli_refuses_to_delete_the_offsets_topic_and_every_commit_survives(cluster):
    """One clear line and a non-zero exit; the group's committed offset is still there."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.conftest import run_cli

    create_topic(cluster, "committed")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-keep", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("committed", 0, 42)], asynchronous=False)
    result = run_cli("topics", "delete", "--bootstrap-server", cluster.bootstrap, "--topic", "__consumer_offsets")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "__consumer_offsets is an internal topic" in result.stderr, result.stderr
    assert consumer.committed([TopicPartition("committed", 0)], timeout=20)[0].offset == 42
    consumer.close()


def test_confluent_kafka_commit_for_a_topic_that_does_not_exist_is_refused(cluster):
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for that partition; the commit was taken as success."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-ghost", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as failed:
            consumer.commit(offsets=[TopicPartition("never-created", 0, 5)], asynchronous=False)
        assert failed.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, failed.value
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_offsets_for_times_and_max_timestamp_find_the_record_inside_a_batch(cluster, codec):
    """One batch holding timestamps t, t+50000, t+10: ListOffsets answers the record's offset for a
    timestamp and, for MAX_TIMESTAMP, the offset of the record holding it (not the batch's)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = f"times-{codec}"
    create_topic(cluster, topic)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1000, "compression.type": codec})
    # The partition's leader is learned first: records produced while librdkafka still waits for
    # metadata are moved to the partition one by one when it arrives, and flush() may send each alone.
    deadline = time.monotonic() + 20
    while producer.list_topics(topic, timeout=5).topics[topic].partitions.get(0) is None \
            or producer.list_topics(topic, timeout=5).topics[topic].partitions[0].leader < 0:
        assert time.monotonic() < deadline, f"no leader for {topic}-0 in the producer's metadata"
        time.sleep(0.05)
    for value, ts in ((b"a", base), (b"b", base + 50_000), (b"c", base + 10)):
        producer.produce(topic, value * 100, partition=0, timestamp=ts)
    assert producer.flush(30) == 0
    batches = [h for d in Path(cluster.info["brokers"][0]["log_dir"]).glob(f"{topic}-0")
               for s in d.glob("*.log") for _, h in iter_batches(s.read_bytes())]
    assert len(batches) == 1 and batches[0].records_count == 3 and batches[0].compression == CODECS[codec]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}"})
    try:
        found = [consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=20)[0].offset
                 for t in (base, base + 5, base + 50_000, base + 50_001)]
    finally:
        consumer.close()
    assert found == [0, 1, 1, -1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=20)
    assert (info.offset, info.timestamp) == (1, base + 50_000)


def test_a_transaction_the_broker_cannot_serve_is_refused_at_once_instead_of_timing_out(cluster):
    """Issue 17, deliverable 3: a transactional request the broker cannot serve answers with Kafka's
    error at once. A transaction timeout above transaction.max.timeout.ms (15 min) is
    INVALID_TRANSACTION_TIMEOUT, fatal for the producer, instead of a hang for the whole API timeout
    (before the coordinator existed, init_transactions() hung 15-20 s)."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "too-long",
                         "transaction.timeout.ms": 900_001})
    started = time.monotonic()
    with pytest.raises(KafkaException) as failed:
        producer.init_transactions(20)
    assert time.monotonic() - started < 5
    assert failed.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
