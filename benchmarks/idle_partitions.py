"""Idle CPU of 3 brokers holding many RF=3 partitions, with and without incremental fetch sessions.

Creates `--partitions` partitions (topics of at most 500 partitions, replication factor 3), waits
until every broker has all its replicas and no partition is under-replicated, then measures each
broker's CPU and its followers' Fetch requests while nothing is produced. `--no-sessions` sets
`max.incremental.fetch.session.cache.slots=0`, so that every follower Fetch names every partition
(as before KIP-227). A benchmark, not a test:

    .venv/bin/python benchmarks/idle_partitions.py [--partitions 3000] [--idle-seconds 20] [--no-sessions]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--no-sessions", action="store_true")
    parser.add_argument("--base-port", type=int, default=29392)
    parser.add_argument("--zookeeper-port", type=int, default=22481)
    args = parser.parse_args()
    overrides = ("max.incremental.fetch.session.cache.slots=0",) if args.no_sessions else ()
    tmp = tempfile.mkdtemp(prefix="strandline-bench-idle-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3, overrides=overrides)
    try:
        with open(os.path.join(tmp, "cluster.json")) as f:
            urls = [b["metrics"] for b in json.load(f)["brokers"]]
        pids = pc.broker_pids(tmp)
        started = time.monotonic()
        left, n = args.partitions, 0
        while left > 0:
            count = min(500, left)
            subprocess.run([sys.executable, "-m", "strandline.cli.main", "topics", "create", "--bootstrap-server",
                            bootstrap, "--topic", f"idle-{n}", "--partitions", str(count), "--replication-factor", "3"],
                           check=True, stdout=subprocess.DEVNULL)
            left -= count
            n += 1
        created = time.monotonic() - started

        def settled() -> bool:
            samples = [scrape(u) for u in urls]
            return all(s.get(("kafka_server_replicamanager_partitioncount", ()), 0) >= args.partitions
                       and s.get(("kafka_server_replicamanager_underreplicatedpartitions", ()), 1) == 0 for s in samples)

        deadline = time.monotonic() + 300
        while not settled():
            if time.monotonic() > deadline:
                raise SystemExit("the partitions did not settle within 300 s")
            time.sleep(1)
        ready = time.monotonic() - started
        time.sleep(3)
        before = [pc.cpu_seconds([p]) for p in pids]
        fetches0 = [scrape(u).get(("kafka_network_requestmetrics_totaltimems_count", (("request", "FetchFollower"),)), 0)
                    for u in urls]
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)
        seconds = time.monotonic() - t0
        cpu = [(pc.cpu_seconds([p]) - b) / seconds * 100 for p, b in zip(pids, before)]
        after = [scrape(u) for u in urls]
        fetches = [a.get(("kafka_network_requestmetrics_totaltimems_count", (("request", "FetchFollower"),)), 0) - f
                   for a, f in zip(after, fetches0)]
        sessions = [a.get(("kafka_server_fetchsessioncache_numincrementalfetchsessions", ()), 0) for a in after]
        rss = []
        for pid in pids:
            with open(f"/proc/{pid}/status") as f:
                rss += [int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:")]
        print(f"{args.partitions} partitions RF=3, sessions {'off' if args.no_sessions else 'on'}: created in "
              f"{created:.1f} s, all replicas in sync after {ready:.1f} s; idle CPU "
              f"{' / '.join(f'{c:.1f}%' for c in cpu)}; follower fetches served "
              f"{' / '.join(f'{x / seconds:.1f}/s' for x in fetches)}; sessions {sessions}; RSS "
              f"{' / '.join(f'{r} MB' for r in rss)}", flush=True)
    finally:
        pc.stop_cluster(proc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
