"""The load generator against 3 local brokers: RF=3, acks=all, min.insync.replicas=2, 1 KiB records.

Runs `strandline bench produce` saturated and then paced at 10 MB/s, and `strandline bench
consume` over what was written, each with `--processes` client processes, and prints their lines
with each broker's CPU share and the brokers' CPU time per MB. A benchmark, not a test:

    .venv/bin/python benchmarks/load.py [--num-records 1000000] [--processes 2] [--partitions 3]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402

RECORD = 1024


def bench(bootstrap: str, pids: list[int], *args: str) -> None:
    """One `strandline bench` run, its lines passed through, then the brokers' CPU during it."""
    before = [pc.cpu_seconds([p]) for p in pids]
    wall0 = os.times().elapsed
    result = subprocess.run([sys.executable, "-m", "strandline.cli.main", "bench", *args, "--bootstrap-server",
                             bootstrap], capture_output=True, text=True)
    seconds = os.times().elapsed - wall0
    used = [pc.cpu_seconds([p]) - b for p, b in zip(pids, before)]
    print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "(no output)")
    if result.returncode != 0:
        print(result.stderr.strip())
    final = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    mb = 0.0
    if "MB/sec" in final:
        records = int(final.split()[0])
        mb = records * RECORD / 1024 / 1024
    shares = " / ".join(f"{u / seconds * 100:.0f}%" for u in used)
    per_mb = f"; brokers' CPU per MB {sum(used) / mb * 1000:.2f} ms (all three)" if mb else ""
    print(f"  broker CPU {shares} of one core over {seconds:.1f} s{per_mb}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--paced-rate", type=float, default=10.0, help="offered MB/s for the latency run")
    parser.add_argument("--base-port", type=int, default=29292)
    parser.add_argument("--zookeeper-port", type=int, default=22381)
    args = parser.parse_args()
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3", "--config", "min.insync.replicas=2"]
    tmp = tempfile.mkdtemp(prefix="strandline-bench-load-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3)
    print(f"started strandline up --brokers 3 in {tmp}: {bootstrap}")
    try:
        pids = pc.broker_pids(tmp)
        pc.create_topic(bootstrap, "load", args.partitions)
        pc.create_topic(bootstrap, "paced", args.partitions)
        common = ("--record-size", str(RECORD), "--processes", str(args.processes), "--acks", "all")
        print(f"bench produce, saturated ({args.num_records} records, {args.processes} processes):")
        bench(bootstrap, pids, "produce", "--topic", "load", "--num-records", str(args.num_records), *common)
        rate = args.paced_rate * 1024 * 1024 / RECORD
        print(f"bench produce, paced at {args.paced_rate:g} MB/s for 10 s:")
        bench(bootstrap, pids, "produce", "--topic", "paced", "--num-records", str(int(rate * 10)),
              "--throughput", str(rate), *common)
        print(f"bench consume ({args.num_records} records, {args.processes} processes):")
        bench(bootstrap, pids, "consume", "--topic", "load", "--num-records", str(args.num_records),
              "--processes", str(args.processes))
    finally:
        pc.stop_cluster(proc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
