"""acks=all produce on 3 local brokers, replication factor 3, min.insync.replicas=2.

All three brokers and the client share this machine's cores. Prints the acknowledgement latency
(p50/p99) of every record at a fixed offered load (default 10 MB/s of 1 KiB records) and the
saturated throughput, with each broker's CPU. A benchmark, not a test:

    .venv/bin/python benchmarks/replicated_produce.py [--seconds 10] [--paced-rate 10] [--profile]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=29192)
    parser.add_argument("--zookeeper-port", type=int, default=22281)
    parser.add_argument("--paced-rate", type=float, default=10.0, help="offered MB/s for the latency run")
    parser.add_argument("--profile", action="store_true", help="profile the brokers (cProfile) into the data dir")
    args = parser.parse_args()
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3", "--config", "min.insync.replicas=2"]
    tmp = tempfile.mkdtemp(prefix="strandline-bench-rf3-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, args.profile, brokers=3)
    print(f"started strandline up --brokers 3 in {tmp}: {bootstrap}")
    try:
        pids = pc.broker_pids(tmp)
        r = pc.paced(bootstrap, f"paced-{uuid.uuid4().hex[:8]}", "all", args.paced_rate, args.seconds,
                     args.partitions)
        print(f"RF=3 acks=all at {args.paced_rate:g} MB/s offered: ack p50 {r['p50 ms']:.1f} ms "
              f"p99 {r['p99 ms']:.1f} ms ({r['records']} records)", flush=True)
        cpu0 = [pc.cpu_seconds([p]) for p in pids]
        own0 = os.times()
        r = pc.produce(bootstrap, f"bench-{uuid.uuid4().hex[:8]}", "all", args.seconds, args.partitions)
        cpu = [(pc.cpu_seconds([p]) - c) / r["seconds"] * 100 for p, c in zip(pids, cpu0)]
        own1 = os.times()
        client = (own1.user + own1.system - own0.user - own0.system) / r["seconds"] * 100
        print(f"RF=3 acks=all saturated: {r['MB/s']:8.1f} MB/s {r['records/s']:10.0f} records/s "
              f"ack p50 {r['p50 ms']:.1f} ms p99 {r['p99 ms']:.1f} ms ({r['records']} records, {r['failed']} failed; "
              f"broker CPU {' / '.join(f'{c:.0f}%' for c in cpu)}, client CPU {client:.0f}% of one core)", flush=True)
    finally:
        pc.stop_cluster(proc, tmp, keep=args.profile)
        if args.profile:
            print(f"broker profiles: {tmp}/broker.prof.<id> (python -m pstats)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
