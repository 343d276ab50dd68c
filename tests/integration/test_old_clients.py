"""kafka-python speaking the versions of Kafka 0.8.2-0.10.1 to a real 3-broker Strandline cluster:
Produce v0-v2 with message format v0 (api_version 0.8.2 and 0.9) and v1 (0.10.0, 0.10.1), Fetch
v0-v3 (the stored record batches v2 down-converted), ListOffsets v0-v1 to seek. Each produces
records with keys, values and timestamps, gzip/snappy/lz4 or none, acks=all to a topic replicated
three times, and reads every one back: offsets, keys, values and (format v1) timestamps as sent.
A record produced as a batch v2 is read by each old consumer too."""

from __future__ import annotations

import time

import pytest

from strandline.protocol.records import iter_batches
from tests.conftest import cluster_fixture, run_cli

pytestmark = pytest.mark.integration

N = 300
OLD = {"0.8.2": (0, 8, 2), "0.9": (0, 9), "0.10.0": (0, 10, 0), "0.10.1": (0, 10, 1)}
FORMAT_V1 = {"0.10.0", "0.10.1"}            # the message format (and timestamps) of Produce v2 / Fetch v2+


cluster = cluster_fixture("old-clients", 3)


def create_topic(cluster, topic: str) -> None:
    result = run_cli("topics", "create", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                     "--partitions", "1", "--replication-factor", "3")
    assert result.returncode == 0, result.stderr


def expected(i: int, topic: str) -> tuple[bytes | None, bytes]:
    key = None if i % 7 == 3 else f"{topic}-k{i}".encode()
    return key, f"{topic}-v{i}-".encode() + bytes([i % 251]) * (i % 150)


def consume(cluster, topic: str, version: str, count: int) -> list:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, api_version=OLD[version], group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)          # ListOffsets v0 (v1 for 0.10.1)
    got = []
    deadline = time.monotonic() + 60
    for msg in consumer:
        got.append(msg)
        if len(got) == count or time.monotonic() > deadline:
            break
    consumer.close()
    return got


def stored_magics(cluster, topic: str) -> set[int]:
    from pathlib import Path

    magics = set()
    for broker in cluster.info["brokers"]:
        for log_dir in Path(broker["log_dir"]).glob(f"{topic}-*"):
            for segment in log_dir.glob("*.log"):
                magics |= {header.magic for _, header in iter_batches(segment.read_bytes())}
    return magics


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("version", list(OLD))
def test_an_old_producer_and_consumer_round_trip(cluster, version, codec):
    from kafka import KafkaProducer

    topic = f"old-{version.replace('.', '_')}-{codec}"
    create_topic(cluster, topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=OLD[version], acks="all",
                             compression_type=None if codec == "none" else codec, linger_ms=5,
                             retries=0)
    base_ts = int(time.time() * 1000) - 60_000
    futures = []
    for i in range(N):
        key, value = expected(i, topic)
        futures.append(producer.send(topic, key=key, value=value, timestamp_ms=base_ts + i))
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert [m.offset for m in metas] == list(range(N))          # every record acknowledged, in order
    got = consume(cluster, topic, version, N)
    assert len(got) == N
    for i, msg in enumerate(got):
        assert (msg.offset, msg.key, msg.value) == (i, *expected(i, topic))
        if version in FORMAT_V1:
            assert msg.timestamp == base_ts + i
        else:
            assert msg.timestamp in (None, -1)          # format v0 has no timestamps
    assert stored_magics(cluster, topic) == {2}             # stored as record batches v2, on all three


def test_records_produced_as_batches_v2_are_read_by_every_old_consumer(cluster):
    from kafka import KafkaProducer

    topic = "new-to-old"
    create_topic(cluster, topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", compression_type="gzip", linger_ms=5)
    base_ts = int(time.time() * 1000) - 60_000
    futures = [producer.send(topic, key=expected(i, topic)[0], value=expected(i, topic)[1], timestamp_ms=base_ts + i,
                             headers=[("h", b"x")]) for i in range(N)]
    producer.flush(30)
    assert [f.get(timeout=30).offset for f in futures] == list(range(N))
    producer.close()
    for version in OLD:
        got = consume(cluster, topic, version, N)
        assert [(m.offset, m.key, m.value) for m in got] == [(i, *expected(i, topic)) for i in range(N)], version
        if version in FORMAT_V1:
            assert [m.timestamp for m in got] == [base_ts + i for i in range(N)]
