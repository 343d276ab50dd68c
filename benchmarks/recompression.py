"""The cost of a topic's ``compression.type``: the broker recompresses every batch whose codec
differs, the one case where it decodes records.

A confluent-kafka producer sends uncompressed 1 KiB records (half of each random, half repeated,
so that they compress about 2:1; linger 5 ms, acks=1) for a few seconds to topics whose
compression.type is producer, gzip, snappy, lz4 and zstd, one at a time, on one broker. Prints MB/s
and the broker's CPU time per MB produced (from /proc). A benchmark, not a test:

    .venv/bin/python benchmarks/recompression.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from produce_consume import start_cluster, stop_cluster

RECORD = 1024
CODECS = ("producer", "gzip", "snappy", "lz4", "zstd")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(bootstrap: str, pid: int, codec: str, seconds: float) -> tuple[float, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"recompress-{codec}-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": codec})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "compression.type": "none",
                         "queue.buffering.max.kbytes": 65536})
    payloads = [os.urandom(RECORD // 2) + bytes([i % 251]) * (RECORD // 2) for i in range(64)]
    sent = 0
    outcome = {"delivered": 0, "failed": 0}

    def delivered(err, msg) -> None:
        outcome["failed" if err is not None else "delivered"] += 1
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    while time.monotonic() - t0 < seconds:
        for i in range(1000):
            try:
                producer.produce(topic, payloads[i % 64], on_delivery=delivered)
            except BufferError:
                producer.poll(0.005)
                continue
            sent += 1
        producer.poll(0)
    producer.flush(60)
    elapsed, cpu = time.monotonic() - t0, cpu_seconds(pid) - cpu0
    if outcome["failed"] or outcome["delivered"] != sent:
        raise SystemExit(f"{codec}: {outcome['failed']} of {sent} records failed")
    mb = sent * RECORD / 1e6
    return mb / elapsed, cpu * 1000 / mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--base-port", type=int, default=39092)
    parser.add_argument("--zookeeper-port", type=int, default=32181)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="strandline-recompress-")
    proc, bootstrap = start_cluster(data_dir, args.base_port, args.zookeeper_port, False)
    try:
        pid = json.load(open(os.path.join(data_dir, "cluster.json")))["brokers"][0]["pid"]
        print(f"{'compression.type':<18}{'MB/s':>8}{'broker CPU ms per MB':>24}")
        for codec in CODECS:
            rate, cpu_per_mb = run(bootstrap, pid, codec, args.seconds)
            print(f"{codec:<18}{rate:>8.1f}{cpu_per_mb:>24.2f}")
    finally:
        stop_cluster(proc, data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
