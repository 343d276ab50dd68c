"""Transactional throughput next to the plain idempotent producer (issue 17's cost figure).

Three local brokers, a 6-partition RF=3 topic, 1 KiB records, confluent-kafka. Interleaved runs of:

- ``idempotent``: ``enable.idempotence=true`` (acks=all), records produced as fast as the client
  goes for ``--seconds``;
- ``transactions``: the same producer with a ``transactional.id``, committing a transaction every
  ``--records-per-txn`` records (default 100).

Prints records/s, MB/s and, for transactions, transactions/s and the commit latency (p50/p99).
A benchmark, not a test:

    .venv/bin/python benchmarks/transactions.py [--seconds 10] [--records-per-txn 100] [--runs 2]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

PARTITIONS = 6
VALUE = b"x" * pc.RECORD


def idempotent(bootstrap: str, topic: str, seconds: float) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 262144})
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, VALUE)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(60)
    elapsed = time.monotonic() - start
    return {"records": sent, "elapsed": elapsed}


def transactional(bootstrap: str, topic: str, seconds: float, per_txn: int) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, "queue.buffering.max.kbytes": 262144})
    producer.init_transactions(60)
    sent = txns = 0
    commits: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        producer.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        t0 = time.monotonic()
        producer.commit_transaction(60)
        commits.append(time.monotonic() - t0)
        sent += per_txn
        txns += 1
    elapsed = time.monotonic() - start
    return {"records": sent, "elapsed": elapsed, "txns": txns, "commits": commits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--records-per-txn", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--base-port", type=int, default=39700)
    parser.add_argument("--zookeeper-port", type=int, default=39699)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="strandline-txn-bench-")
    proc, bootstrap = pc.start_cluster(data_dir, args.base_port, args.zookeeper_port, False, brokers=3,
                                       console=False)
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3"]
    try:
        for run in range(args.runs):
            for kind in ("idempotent", "transactions"):
                topic = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
                pc.create_topic(bootstrap, topic, PARTITIONS)
                if kind == "idempotent":
                    r = idempotent(bootstrap, topic, args.seconds)
                    extra = ""
                else:
                    r = transactional(bootstrap, topic, args.seconds, args.records_per_txn)
                    extra = (f"  {r['txns'] / r['elapsed']:.1f} txn/s  commit p50 "
                             f"{pc.percentile(r['commits'], 0.5) * 1000:.1f} ms p99 "
                             f"{pc.percentile(r['commits'], 0.99) * 1000:.1f} ms")
                rate = r["records"] / r["elapsed"]
                print(f"run {run + 1} {kind:13s} {rate:9.0f} records/s  {rate * pc.RECORD / 1e6:6.1f} MB/s{extra}",
                      flush=True)
    finally:
        pc.stop_cluster(proc, data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
