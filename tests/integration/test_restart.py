"""Restarts of real brokers: the whole cluster with `strandline up` again on the same data (CTL-8),
and one broker SIGKILLed and started again while clients use it (CLI-1)."""

from __future__ import annotations

import subprocess
import time

import pytest
from kio.schema.errors import ErrorCode

from strandline.errors import StrandlineError
from strandline.runtime.client import KafkaConnection
from strandline.uuids import uuid_to_base64
from tests.conftest import cluster_fixture, Cluster, free_ports, poll_until, run_cli, strandline_cmd
from tests.integration.replication_helpers import METADATA, Writer, address, consume, create_topic

pytestmark = pytest.mark.integration

PARTITIONS = 3


def isr_by_partition(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    """Each partition's ISR as its leader knows it (the leader changes it; others hear later)."""
    isrs: dict[int, list[int]] = {}
    for broker_id in range(1, cluster.brokers + 1):
        try:
            with KafkaConnection(address(cluster, broker_id), timeout_s=5) as conn:
                resp = conn.request(METADATA, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        except Exception:
            continue
        for p in resp.topics[0].partitions:
            if p.leader_id == broker_id:
                isrs[p.partition_index] = sorted(p.isr_nodes)
    return isrs


def produce_acks_all(bootstrap: str, topic: str, tag: str, count: int) -> tuple[list[bytes], list]:
    """Write ``count`` records with acks=all; (acknowledged values, delivery errors)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 20000})
    acked: list[bytes] = []
    errors: list = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err)

    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(40)
    return acked, errors


def test_ctl_8_up_again_on_the_same_data_twice_gets_full_isrs_and_acks_all_writes(tmp_path):
    """Ctrl-C `strandline up` and start it again on the same data, twice: followers told of a
    leader that had not registered yet must still fetch, so every ISR is full again and acks=all
    with min.insync.replicas=2 succeeds; nothing acknowledged is lost."""
    ports = free_ports(4)
    c = Cluster(tmp_path / "data", 3, ports[1], ports[0])
    c.data_dir.mkdir()
    c.start()
    try:
        create_topic(c, "tour", partitions=PARTITIONS, min_isr=2)
        acked, errors = produce_acks_all(c.bootstrap, "tour", "start", 300)
        assert errors == [] and len(acked) == 300
        for round_ in (1, 2):
            assert c.stop() == 0
            c.start()
            written, errors = produce_acks_all(c.bootstrap, "tour", f"round{round_}", 300)
            assert errors == [], f"round {round_}: {len(errors)} acks=all writes failed, e.g. {errors[0]}"
            acked += written
            poll_until(lambda: (isrs := isr_by_partition(c, "tour")) and len(isrs) == PARTITIONS and
                       all(isr == [1, 2, 3] for isr in isrs.values()), 30,
                       message=f"round {round_}: every ISR full")
        got = {value for _, _, value in consume(c.bootstrap, "tour", PARTITIONS, len(acked))}
        missing = [v for v in acked if v not in got]
        assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        # every replica's log records the topic's id (KIP-516), kept across the restarts
        with KafkaConnection(c.bootstrap, timeout_s=5) as conn:
            topic_id = conn.request(METADATA, 10, {"topics": [{"name": "tour"}],
                                                   "allow_auto_topic_creation": False}).topics[0].topic_id
        expected = f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n"
        files = [c.data_dir / f"broker-{b}" / "logs" / f"tour-{p}" / "partition.metadata"
                 for b in (1, 2, 3) for p in range(PARTITIONS)]
        assert [f.read_text() for f in files] == [expected] * len(files)
    finally:
        c.stop()


trio = cluster_fixture("restart", 3, overrides=["zookeeper.session.timeout.ms=6000"])


def probe_metadata(addr: str, topic: str, until) -> list:
    """Metadata answers of ``addr`` from the moment its port accepts connections until ``until()``."""
    answers = []
    while not until():
        try:
            with KafkaConnection(addr, timeout_s=30) as conn:
                while not until():
                    answers.append(conn.request(METADATA, 9, {
                        "topics": [{"name": topic}], "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}))
        except StrandlineError:
            time.sleep(0.005)           # not listening yet
    return answers


def test_cli_1_a_broker_started_again_never_answers_metadata_with_an_empty_cluster(trio):
    """SIGKILL a broker and start it again (it waits for its old ZooKeeper session to expire
    before it registers): from the moment it listens, no Metadata answer lists no brokers or calls
    an existing topic unknown, and a producer bootstrapped only on it loses nothing."""
    c = trio
    create_topic(c, "probe", partitions=PARTITIONS, min_isr=2)
    with Writer(address(c, 2), "probe", **{"message.timeout.ms": 20000}) as writer:
        poll_until(lambda: len(writer.acked) >= 200, 30, message="200 acknowledged records")
        kill = run_cli("cluster", "kill", "2", "--data-dir", str(c.data_dir))
        assert kill.returncode == 0, kill.stderr
        starter = subprocess.Popen(strandline_cmd("cluster", "start", "2", "--data-dir", str(c.data_dir)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready_at: list[float] = []

        def probed_enough() -> bool:    # until `cluster start` reports it ready, and 2 s more
            if starter.poll() is None:
                return False
            ready_at[:] = ready_at or [time.monotonic()]
            return time.monotonic() - ready_at[0] > 2.0

        answers = probe_metadata(address(c, 2), "probe", probed_enough)
        out, err = starter.communicate()
        assert starter.returncode == 0, err
        empty = [a for a in answers if not a.brokers or a.controller_id < 0]
        unknown = [a for a in answers if a.topics[0].error_code != ErrorCode.none]
        assert answers and empty == [] and unknown == [], \
            f"{len(empty)} answers without brokers or controller, {len(unknown)} calling the topic unknown, " \
            f"of {len(answers)}: e.g. {(empty or unknown)[0]}"
        acked_before = len(writer.acked)
        poll_until(lambda: len(writer.acked) >= acked_before + 500, 30, message="writes after the restart")
    assert writer.errors == [], f"{len(writer.errors)} records failed, e.g. {writer.errors[0]}"
    got = {value for _, _, value in consume(c.bootstrap, "probe", PARTITIONS, len(writer.acked))}
    missing = [v for v in writer.acked if v not in got]
    assert missing == [], f"{len(missing)} acknowledged records lost"
