"""Transactions v2 (KIP-890 part 2) with Kafka's 4.x Java client (tests/integration/txn_v2_client,
kafka-clients 4.4 from Maven Central, built by Maven into ~/.cache/strandline/txn-v2-client): the
brokers finalize ``transaction.version`` 2 (their default), so the client sends no
AddPartitionsToTxn or AddOffsetsToTxn (its Produce v12 and TxnOffsetCommit v5 have the leaders add
the partitions) and each EndTxn v5 bumps its producer epoch. Six transactions over three
partitions, every third aborted: a read_committed consumer sees exactly the committed records, the
group's offset is the last committed transaction's, and the epoch rises by one at each
transaction, in the client and in the stored batches (data at the transaction's epoch, its markers
at the next). With ``transaction.version=1`` the same client runs transactions v1: one epoch
throughout, as before."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from strandline.launch.zookeeper import check_java
from strandline.protocol.markers import ABORT_MARKER, COMMIT_MARKER, CONTROL_BIT, read_marker
from strandline.protocol.records import iter_batches, iter_records
from tests.conftest import cluster_fixture
from tests.integration.maven_build import built, maven_or_skip
from tests.integration.replication_helpers import create_topic, log_bytes

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().with_name("txn_v2_client")
BUILD = maven_or_skip(CLIENT / "pom.xml", ["compile", "dependency:copy-dependencies"], "txn-v2-client",
                      {"txnv2.build": "{out}"})
PARTITIONS = 3
TRANSACTIONS = 6
SINGLE = ["offsets.topic.num.partitions=1", "offsets.topic.replication.factor=1",
          "transaction.state.log.num.partitions=1", "transaction.state.log.replication.factor=1",
          "transaction.state.log.min.isr=1"]

cluster = cluster_fixture("txnv2", 1, overrides=SINGLE)


def run_client(bootstrap: str, topic: str, group: str, transactional_id: str) -> list[str]:
    build = built(BUILD)
    done = subprocess.run(
        [check_java(17), "-Xmx256m", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
         "-cp", f"{build / 'classes'}:{build / 'libs' / '*'}", "strandline.txnv2.TxnV2",
         bootstrap, topic, str(PARTITIONS), str(TRANSACTIONS), group, transactional_id],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr[-4000:]
    return done.stdout.splitlines()


def read_committed(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values, ended = [], set()
    deadline = time.monotonic() + 60
    try:
        while len(ended) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic} not read to its end within 60 s"
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    ended.add(m.partition())
                else:
                    values.append(m.value().decode())
    finally:
        consumer.close()
    return sorted(values)


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


def stored_batches(c, topic: str, partition: int) -> list[tuple[str, int, str]]:
    """The partition's batches as (kind, producer epoch, what): ("data", epoch, value) or
    ("marker", epoch, "commit"|"abort")."""
    buf = log_bytes(c, 1, topic, partition)
    out = []
    for pos, header in iter_batches(buf):
        if header.attributes & CONTROL_BIT:
            kind, _ = read_marker(buf, pos, header) or (None, None)
            out.append(("marker", header.producer_epoch,
                        {COMMIT_MARKER: "commit", ABORT_MARKER: "abort"}.get(kind, "?")))
        else:
            for record in iter_records(buf, pos, header):
                out.append(("data", header.producer_epoch, bytes(record.value or b"").decode()))
    return out


def test_the_4x_java_client_bumps_its_epoch_at_each_transaction(cluster):
    create_topic(cluster, "v2", assignment={p: [1] for p in range(PARTITIONS)}, min_isr=1)
    lines = run_client(cluster.bootstrap, "v2", "g-v2", "java-v2")
    assert lines[0] == "TV2 true", lines
    ends = [ln.split() for ln in lines[1:-1]]
    assert [(e[0], int(e[1])) for e in ends] == [("ABORTED" if i % 3 == 2 else "COMMITTED", i)
                                                 for i in range(TRANSACTIONS)]
    pid, first = int(ends[0][2]), int(ends[0][3])
    assert [(int(e[2]), int(e[3])) for e in ends] == [(pid, first + i) for i in range(TRANSACTIONS)], ends
    committed = [i for i in range(TRANSACTIONS) if i % 3 != 2]
    assert read_committed(cluster.bootstrap, "v2") == sorted(f"txn{i}-p{p}" for i in committed
                                                             for p in range(PARTITIONS))
    assert committed_offset(cluster.bootstrap, "g-v2", "v2") == committed[-1] + 1
    for p in range(PARTITIONS):
        expected = []
        for i in range(TRANSACTIONS):
            epoch = first + i - 1                       # the epoch the transaction was written with
            expected += [("data", epoch, f"txn{i}-p{p}"), ("marker", epoch + 1, "abort" if i % 3 == 2 else "commit")]
        assert stored_batches(cluster, "v2", p) == expected, p


cluster_v1 = cluster_fixture("txnv1", 1, overrides=[*SINGLE, "transaction.version=1"])


def test_with_transaction_version_1_the_same_client_keeps_one_epoch(cluster_v1):
    create_topic(cluster_v1, "v1", assignment={p: [1] for p in range(PARTITIONS)}, min_isr=1)
    lines = run_client(cluster_v1.bootstrap, "v1", "g-v1", "java-v1")
    assert lines[0] == "TV2 false", lines
    epochs = {ln.split()[3] for ln in lines[1:-1]}
    assert len(epochs) == 1, lines
    committed = [i for i in range(TRANSACTIONS) if i % 3 != 2]
    assert read_committed(cluster_v1.bootstrap, "v1") == sorted(f"txn{i}-p{p}" for i in committed
                                                                for p in range(PARTITIONS))
    assert committed_offset(cluster_v1.bootstrap, "g-v1", "v1") == committed[-1] + 1
    assert {epoch for _, epoch, _ in stored_batches(cluster_v1, "v1", 0)} == {int(epochs.pop())}
