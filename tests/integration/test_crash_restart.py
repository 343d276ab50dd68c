"""The broker is SIGKILLed mid-stream and restarted: nothing acknowledged is lost, no torn batch
is served (CKP-3, DUR-1); a clean restart skips recovery; `strandline up` comes back with its data."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from strandline.protocol.records import crc_ok, iter_batches
from tests.conftest import cluster_fixture, pid_alive, poll_until, run_cli

pytestmark = pytest.mark.integration

TOPIC = "crash"
SESSION_MS = "3000"


crash_cluster = cluster_fixture("crash", 1, overrides=[f"zookeeper.session.timeout.ms={SESSION_MS}",
                                                       "log.segment.bytes=262144"])


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> dict:
    """Every record of each partition up to its high watermark when the call starts, by
    (partition, offset). It reads to those end offsets rather than to a count: records written
    but never acknowledged before a crash are in the log too, and a count could be reached while
    one partition was still behind."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-check", "enable.auto.commit": False,
                         "check.crcs": True})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = {}
    next_offset = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + timeout
    while any(next_offset[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=5000, timeout=1):
            assert msg.error() is None, msg.error()
            got[(msg.partition(), msg.offset())] = msg.value()
            next_offset[msg.partition()] = msg.offset() + 1
    consumer.close()
    assert all(next_offset[p] >= ends[p] for p in ends), f"read to {next_offset}, the ends are {ends}"
    return got


def segment_files(cluster) -> list[Path]:
    log_dir = Path(cluster.info["brokers"][0]["log_dir"])
    return sorted(log_dir.glob(f"{TOPIC}-*/*.log"))


def test_sigkill_mid_stream_loses_no_acknowledged_record(crash_cluster):
    """CKP-3: after SIGKILL, every acknowledged record is read back and every stored batch is valid."""
    from confluent_kafka import Producer

    c = crash_cluster
    assert run_cli("topics", "create", "--bootstrap-server", c.bootstrap, "--topic", TOPIC,
                   "--partitions", "2").returncode == 0
    broker_pid = c.broker_pid(1)
    acked: dict[tuple[int, int], bytes] = {}
    errors = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            errors.append(err)

    def produce():
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1", "linger.ms": 2,
                      "message.timeout.ms": 5000, "retries": 0})
        i = 0
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                p.produce(TOPIC, value=f"record-{i}".encode() * 8, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            if i % 100 == 0:
                p.poll(0)
        p.flush(10)

    t = threading.Thread(target=produce)
    t.start()
    poll_until(lambda: len(acked) >= 20000, 60, message="20000 acknowledged records")
    os.kill(broker_pid, signal.SIGKILL)
    poll_until(lambda: not pid_alive(broker_pid), 10, message="broker exit")
    stop.set()
    t.join(30)
    before_kill = dict(acked)
    assert len(before_kill) >= 20000

    # A torn write at the tail of the active segment, as a crash mid-append leaves it.
    active = segment_files(c)[-1]
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x04\x00torn-batch")

    assert c.stop() == 0
    c.start()
    log_text = (Path(c.info["brokers"][0]["log_dir"]).parent / "broker.log").read_text()
    assert "Recovered logs after an unclean shutdown" in log_text

    got = consume_all(c.bootstrap, TOPIC, 2)
    missing = [k for k in before_kill if got.get(k) != before_kill[k]]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    for segment in segment_files(c):
        data = segment.read_bytes()
        end = 0
        for pos, header in iter_batches(data):
            assert crc_ok(data, pos, header), f"corrupt batch at {segment}:{pos}"
            end = pos + header.size
        assert end == len(data), f"{segment} has {len(data) - end} bytes of torn tail after recovery"


def test_clean_restart_needs_no_recovery(crash_cluster):
    """A clean shutdown writes the marker and checkpoints; the next start scans nothing."""
    c = crash_cluster
    log_dir = Path(c.info["brokers"][0]["log_dir"])
    before = consume_all(c.bootstrap, TOPIC, 2)
    assert c.stop() == 0
    assert (log_dir / ".kafka_cleanshutdown").exists()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"):
        text = (log_dir / name).read_text().splitlines()
        assert text[0] == "0" and int(text[1]) == len(text) - 2, name
    c.start()
    broker_log = (log_dir.parent / "broker.log").read_text().splitlines()
    last_start = [line for line in broker_log if "Loaded logs" in line or "Recovered logs" in line][-1]
    assert "after a clean shutdown" in last_start
    assert re.search(r"'batches_scanned': 0\b", last_start), last_start
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    after = consume_all(c.bootstrap, TOPIC, 2)
    assert after == before
