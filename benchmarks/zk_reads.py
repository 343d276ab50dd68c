"""ZooKeeper reads of many partition states through the broker's store (KazooStore.execute).

Creates `--znodes` state-like znodes on a ZooKeeper it starts (the jars inside the pyspark wheel),
then reads them all in one batch, as a new controller reads the cluster, in multiRead requests
(ZooKeeper 3.6+), on a quiet process and beside a busy Python thread (a broker's event loop). A
benchmark, not a test:

    .venv/bin/python benchmarks/zk_reads.py [--znodes 10000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time

from strandline.coordination.store import Create, GetData
from strandline.runtime.zk import KazooStore
from strandline.launch.zookeeper import EmbeddedZooKeeper

STATE = b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":1,"isr":[1,2]}'


def timed_read(store: KazooStore, n: int, busy: bool) -> float:
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    thread = threading.Thread(target=spin) if busy else None
    if thread:
        thread.start()
    try:
        started = time.monotonic()
        results = store.execute([GetData(f"/bench/p{i}/state") for i in range(n)])
        took = time.monotonic() - started
    finally:
        stop.set()
        if thread:
            thread.join()
    assert all(r.data == STATE for r in results)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--znodes", type=int, default=10000)
    parser.add_argument("--port", type=int, default=22999)
    args = parser.parse_args()
    zk = EmbeddedZooKeeper(tempfile.mkdtemp(prefix="strandline-bench-zk-"), args.port)
    zk.start()
    try:
        store = KazooStore(f"127.0.0.1:{args.port}", 18000)
        store.start()
        for i in range(0, args.znodes, 500):
            store.transaction([Create(f"/bench/p{j}/state", STATE, make_parents=True)
                               for j in range(i, min(i + 500, args.znodes))])
        quiet, busy = timed_read(store, args.znodes, False), timed_read(store, args.znodes, True)
        print(f"{args.znodes} reads in multiReads: {quiet:.2f} s quiet, {busy:.2f} s beside a busy thread",
              flush=True)
        store.stop()
    finally:
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
