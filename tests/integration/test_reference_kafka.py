"""`strandline reference up`: a real Apache Kafka cluster, fetched from Maven Central on demand and run
the way `strandline up` runs Strandline's: Kafka 3.9 on the embedded ZooKeeper under a chroot of its
own, Kafka 4.x on KRaft with combined broker and controller nodes. confluent-kafka produces a record
with a key and a header and reads it back; Ctrl-C (SIGINT) stops every JVM by its PID.

Skipped, in one line, where Maven Central cannot be reached (see tests/integration/kafka_reference.py)."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest

from tests.conftest import free_ports, pid_alive, poll_until, strandline_cmd, wait_for_line
from tests.integration.kafka_reference import LINES, dist, kafka_lines_or_skip

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip()


def produce_and_consume(bootstrap: str) -> tuple:
    from confluent_kafka import Consumer, Producer

    topic = f"ref-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    acked = []
    producer.produce(topic, key=b"k1", value=b"v1", headers=[("h", b"x")],
                     on_delivery=lambda err, msg: acked.append(err or msg.offset()))
    assert producer.flush(60) == 0
    assert acked == [0], acked
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                consumer.commit(msg, asynchronous=False)
                return msg.key(), msg.value(), msg.headers(), msg.offset()
        raise TimeoutError("no record read back within 60 s")
    finally:
        consumer.close()


@pytest.mark.parametrize("line", LINES)
def test_reference_up_runs_a_real_kafka_that_confluent_kafka_uses(line, tmp_path):
    kafka = dist(KAFKA, line)
    ports = free_ports(3)
    data = tmp_path / "data"
    cmd = strandline_cmd("reference", "up", "--kafka", line, "--brokers", "1", "--data-dir", str(data),
                         "--base-port", str(ports[0]), "--zookeeper-port", str(ports[2]))
    import subprocess

    log = open(tmp_path / "up.log", "ab")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    try:
        bootstrap = wait_for_line(proc, "bootstrap.servers=", 180).split("=", 1)[1].strip()
        assert bootstrap == f"127.0.0.1:{ports[0]}"
        info = json.loads((data / "reference.json").read_text())
        assert info["kafka"] == kafka.version
        [node] = info["nodes"]
        assert pid_alive(node["pid"])
        if kafka.zookeeper:      # its own chroot on the embedded ZooKeeper
            from kazoo.client import KazooClient

            assert info["zookeeper"] == f"127.0.0.1:{ports[2]}/kafka-3.9"
            zk = KazooClient(hosts=f"127.0.0.1:{ports[2]}")
            zk.start(timeout=10)
            try:
                assert zk.get_children("/kafka-3.9/brokers/ids") == ["1"]
                assert not zk.exists("/brokers/ids")
            finally:
                zk.stop()
                zk.close()
        else:                    # KRaft: a combined node, its log dir formatted with the cluster's id
            cluster_id = (data / "cluster-id").read_text().strip()
            meta = (data / "kafka-1" / "logs" / "meta.properties").read_text()
            assert f"cluster.id={cluster_id}" in meta and "node.id=1" in meta
            assert "process.roles=broker,controller" in (data / "kafka-1" / "server.properties").read_text()
        assert produce_and_consume(bootstrap) == (b"k1", b"v1", [("h", b"x")], 0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
        poll_until(lambda: not pid_alive(node["pid"]), 30, message="the Kafka JVM gone")
        if info.get("zookeeper_pid"):
            poll_until(lambda: not pid_alive(info["zookeeper_pid"]), 30, message="ZooKeeper gone")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
