"""How long creating the largest topic a broker accepts blocks its event loop.

A client pings each broker with ApiVersions in a loop while the controller creates a topic of the
largest partition count that fits in one ZooKeeper request (and is refused one more); the longest
gap between two answers is how long each broker served nobody.

A benchmark, not a test:

    .venv/bin/python benchmarks/create_topic_stall.py [--brokers 1]

It starts its own `strandline up` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from strandline.coordination.metadata import TopicMetadata  # noqa: E402
from strandline.coordination import zk_layout  # noqa: E402
from strandline.coordination.store import CheckVersion  # noqa: E402
from strandline.runtime.client import KafkaConnection  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--base-port", type=int, default=29092)
    parser.add_argument("--zookeeper-port", type=int, default=22181)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="strandline-stall-")
    proc, bootstrap = pc.start_cluster(data, args.base_port, args.zookeeper_port, False, brokers=args.brokers)
    try:
        with KafkaConnection(bootstrap.split(",")[0]) as conn:
            md = conn.request(3, 9, {"topics": [], "allow_auto_topic_creation": False})
        controller = next(b for b in md.brokers if b.node_id == md.controller_id)
        rf = args.brokers
        limit = zk_layout.max_partitions(TopicMetadata("t", uuid.UUID(int=0), {}, {}, {}), rf,
                                         [b.node_id for b in md.brokers], 1, [CheckVersion("/controller_epoch", 0)])
        gaps: dict[str, float] = {}
        stop = threading.Event()

        def ping(address: str) -> None:
            worst = 0.0
            with KafkaConnection(address, timeout_s=300) as conn:
                last = time.monotonic()
                while not stop.is_set():
                    conn.request(18, 0, {})
                    now = time.monotonic()
                    worst, last = max(worst, now - last), now
            gaps[address] = worst

        pingers = [threading.Thread(target=ping, args=(f"{b.host}:{b.port}",)) for b in md.brokers]
        for t in pingers:
            t.start()
        time.sleep(1)

        def create(name: str, partitions: int):
            with KafkaConnection(f"{controller.host}:{controller.port}", timeout_s=300) as conn:
                return conn.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                        "replication_factor": rf, "assignments": [], "configs": []}],
                                            "timeout": 60000, "validate_only": False}).topics[0]

        started = time.monotonic()
        over = create("u", limit + 1)
        refused_in = time.monotonic() - started
        started = time.monotonic()
        created = create("t", limit)
        answered_in = time.monotonic() - started
        time.sleep(2)
        stop.set()
        for t in pingers:
            t.join()
        print(f"{args.brokers} broker(s), replication factor {rf}: limit {limit} partitions")
        print(f"{limit + 1} partitions: {ErrorCode(over.error_code).name} in {refused_in:.3f} s")
        print(f"{limit} partitions: {ErrorCode(created.error_code).name} in {answered_in:.2f} s")
        print("longest gap between ApiVersions answers:", ", ".join(f"{a} {g:.2f} s" for a, g in sorted(gaps.items())))
    finally:
        pc.stop_cluster(proc, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
