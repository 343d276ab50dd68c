"""CPU per replicated MB of the leader and of each follower, and acks=all latency at a paced rate.

One topic of one partition, replication factor 3, min.insync.replicas=2, on 3 local brokers, so
one broker is the leader and two are followers. `strandline bench produce` (acks=all, 1 KiB
records, `--processes` client processes) runs saturated, then paced; each run prints the load
generator's final line, each broker's CPU time per MB produced (user + system, from /proc, and
each of the two: system time is mostly the kernel's copies into the page cache and the sockets,
which `page_cache_write.py` measures alone) and its share of a core, and how busy the whole
machine was; `replication_floor.py` measures what the copies and the CRC alone cost. The paced
run lasts a minute by default, long enough for the kernel to start writing back what the brokers
wrote (data 30 s old). A benchmark, not a test:

    .venv/bin/python benchmarks/replication_cpu.py [--num-records 1000000] [--paced-rate 10]
        [--paced-seconds 60] [--processes 2] [--runs 1]

It starts its own `strandline up --brokers 3` (without the web console) in a temporary directory
for each run and stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402

RECORD = 1024


def cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def machine() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far."""
    with open("/proc/stat") as f:
        values = list(map(int, f.readline().split()[1:]))
    return sum(values) - values[3] - values[4], sum(values)


def leader_of(bootstrap: str, topic: str) -> int:
    out = subprocess.run([sys.executable, "-m", "strandline.cli.main", "topics", "describe", "--topic", topic,
                          "--bootstrap-server", bootstrap.split(",")[0]], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"Leader:\s*(\d+)", out).group(1))


def one_run(args: argparse.Namespace, paced: bool, index: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="strandline-bench-cpu-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3,
                                       overrides=("metrics.port=0",) if args.no_metrics else (), console=False)
    try:
        with open(os.path.join(tmp, "cluster.json")) as f:
            brokers = {b["id"]: b["pid"] for b in json.load(f)["brokers"]}
        pc.create_topic(bootstrap, "one", 1)
        deadline = time.monotonic() + 30
        while True:
            try:
                leader = leader_of(bootstrap, "one")
                break
            except (subprocess.CalledProcessError, AttributeError):
                if time.monotonic() > deadline:
                    raise
        records = int(args.paced_rate * 1024 * 1024 / RECORD * args.paced_seconds) if paced else args.num_records
        cmd = [sys.executable, "-m", "strandline.cli.main", "bench", "produce", "--topic", "one",
               "--num-records", str(records), "--record-size", str(RECORD), "--processes", str(args.processes),
               "--acks", "all", "--bootstrap-server", bootstrap]
        if paced:
            cmd += ["--throughput", str(int(args.paced_rate * 1024 * 1024 / RECORD))]
        before = {b: cpu(p) for b, p in brokers.items()}
        m0 = machine()
        t0 = time.monotonic()
        result = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t0
        m1 = machine()
        split = {b: tuple(after - start for after, start in zip(cpu(p), before[b])) for b, p in brokers.items()}
        used = {b: sum(split[b]) for b in brokers}
        lines = result.stdout.strip().splitlines()
        final = lines[-1] if lines else f"(no output: {result.stderr.strip()[-300:]})"
        mb = records * RECORD / 1024 / 1024
        followers = [b for b in sorted(brokers) if b != leader]
        row = {"final": final, "leader": used[leader] / mb * 1000,
               "followers": [used[b] / mb * 1000 for b in followers],
               "leader_split": [t / mb * 1000 for t in split[leader]],
               "follower_splits": [[t / mb * 1000 for t in split[b]] for b in followers],
               "shares": {b: used[b] / wall * 100 for b in brokers}, "leader_id": leader,
               "machine": (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * 100}
        print(f"  run {index + 1}: {final}")
        def per_mb(b: int) -> str:
            user, system = split[b]
            return f"{used[b] / mb * 1000:.2f} ms/MB = {user / mb * 1000:.2f} user + {system / mb * 1000:.2f} system"

        print(f"    leader (broker {leader}) {per_mb(leader)} ({row['shares'][leader]:.0f}% of a core); "
              + "; ".join(f"follower (broker {b}) {per_mb(b)} ({row['shares'][b]:.0f}%)" for b in followers)
              + f"; machine {row['machine']:.0f}% busy over {wall:.1f} s", flush=True)
        return row
    finally:
        pc.stop_cluster(proc, tmp)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000, help="records of the saturated run")
    parser.add_argument("--paced-rate", type=float, default=10.0, help="offered MB/s of the paced run")
    parser.add_argument("--paced-seconds", type=float, default=60.0,
                        help="long enough for the kernel to write back data (30 s old) while the load goes on")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="runs of each kind (medians are printed)")
    parser.add_argument("--no-metrics", action="store_true", help="brokers without their metrics endpoint")
    parser.add_argument("--base-port", type=int, default=31292)
    parser.add_argument("--zookeeper-port", type=int, default=32381)
    args = parser.parse_args()
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3", "--config", "min.insync.replicas=2"]
    for paced in (False, True):
        title = f"paced at {args.paced_rate:g} MB/s" if paced else f"saturated, {args.num_records} records"
        print(f"bench produce, acks=all, RF=3, one partition, {args.processes} processes, {title}:", flush=True)
        rows = [one_run(args, paced, i) for i in range(args.runs)]
        if args.runs > 1:
            def median(values) -> str:
                return f"{statistics.median(values):.2f}"

            print(f"  median: leader {median(r['leader'] for r in rows)} ms/MB "
                  f"({median(r['leader_split'][0] for r in rows)} user, "
                  f"{median(r['leader_split'][1] for r in rows)} system), followers "
                  f"{median(f for r in rows for f in r['followers'])} ms/MB "
                  f"({median(s[0] for r in rows for s in r['follower_splits'])} user, "
                  f"{median(s[1] for r in rows for s in r['follower_splits'])} system)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
