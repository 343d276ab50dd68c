"""The broker core's CPU per request on the replication path, with no sockets and no event loop.

A leader of one RF=3 partition (the unit tests' in-memory harness: the simulator's disk and
ZooKeeper) handles, per cycle, what a paced acks=all producer and two followers send it: one
Produce of ``--records`` 1 KiB records, then each follower's Fetch that reports the batch and waits
for the next (which answers the Produce), while the followers' parked Fetches are answered by
the append. It prints the CPU time (``process_time``) per cycle and per request of
``Broker.handle_request`` alone. Keep ``--records`` small: the bytes of a larger batch cost this
loop the simulator's in-memory copies of them, which a broker's kernel makes instead (``pwrite``,
``sendfile``: its system time, which ``replication_floor.py`` measures).

What a broker process spends per request beyond this is the shell's: the event loop, the
framing, the system calls and their Python side. ``--copy-mb`` has three other processes copy
that many MB over and over while it runs, as the brokers' copies do on a shared machine, to show
what a cold cache costs the same code. A benchmark, not a test:

    .venv/bin/python benchmarks/core_requests.py [--cycles 3000] [--records 32] [--copy-mb 0]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.batches import make_batch  # noqa: E402
from tests.unit.replication.test_leader_replication import replicated  # noqa: E402


def copy_forever(mb: int) -> None:
    source = bytearray(os.urandom(mb << 20))
    target = bytearray(len(source))
    while True:
        target[:] = source


def measure(cycles: int, records: int) -> float:
    """CPU seconds per cycle of one Produce (acks=all) and two follower Fetches."""
    h = replicated()
    batch = make_batch([os.urandom(1024) for _ in range(records)])

    def fetch(follower: int, offset: int) -> bytes:
        body = h.fetch_body("r", offset, max_wait=500)
        body["replica_id"] = follower
        return h.frame(1, 11, body)

    for follower in (2, 3):                   # both followers wait at offset 0
        h.run(h.broker.handle_request(100 + follower, fetch(follower, 0), h.now))
    spent, offset = 0.0, 0
    for _ in range(cycles):
        produce = h.frame(0, 7, h.produce_body("r", batch, acks=-1))
        offset += records
        fetches = [(100 + f, fetch(f, offset)) for f in (2, 3)]
        start = time.process_time()
        h.run(h.broker.handle_request(1, produce, h.now))
        for conn, frame in fetches:
            h.run(h.broker.handle_request(conn, frame, h.now))
        spent += time.process_time() - start
        if not h.sent.get(1):
            raise RuntimeError("the Produce was not answered once both followers had its batch")
        h.sent.clear()
    return spent / cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--records", type=int, default=32, help="1 KiB records per Produce")
    parser.add_argument("--copy-mb", type=int, default=0, help="MB each of 3 other processes copies over and over")
    args = parser.parse_args()
    if args.cycles <= 0 or args.records <= 0 or args.copy_mb < 0:
        parser.error("--cycles and --records must be positive, --copy-mb not negative")
    copiers = []
    if args.copy_mb:
        ctx = multiprocessing.get_context("fork")
        copiers = [ctx.Process(target=copy_forever, args=(args.copy_mb,), daemon=True) for _ in range(3)]
        for p in copiers:
            p.start()
    try:
        per_cycle = measure(args.cycles, args.records)
    finally:
        for p in copiers:
            p.terminate()
            p.join()
    print(f"{per_cycle * 1e6:.0f} us of CPU per cycle (1 Produce of {args.records} KiB, 2 follower Fetches), "
          f"{per_cycle * 1e6 / 3:.0f} us per request" + (f"; 3 processes copying {args.copy_mb} MB beside it"
                                                          if args.copy_mb else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
