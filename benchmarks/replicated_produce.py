"""acks=all produce on 3 local brokers, replication factor 3, min.insync.replicas=2.

All three brokers and the client share this machine's cores. Prints the acknowledgement latency
(p50/p99) of every record at a fixed offered load (default 10 MB/s of 1 KiB records) and the
saturated throughput, with each broker's CPU. A benchmark, not a test:

    .venv/bin/python benchmarks/replicated_produce.py [--seconds 10] [--paced-rate 10] [--profile]
        [--override KEY=VALUE ...] [--scrape-interval S] [--runs N]

`--override metrics.port=0` turns each broker's metrics off; `--scrape-interval 1` reads every
broker's /metrics and /status once a second meanwhile (as the web console does), so that the cost of
the operator's view on the produce path can be measured: the line "broker CPU per MB" is the sum of
the three brokers' CPU time per MB acknowledged, which is what bounds throughput once the client is
not the bottleneck.

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


class Scraper:
    """Reads every broker's /metrics and /status every ``interval`` seconds, in a thread."""

    def __init__(self, data_dir: str, interval: float) -> None:
        import json
        import threading

        with open(os.path.join(data_dir, "cluster.json")) as f:
            self.urls = [b["metrics"] for b in json.load(f)["brokers"] if b.get("metrics")]
        self.interval, self.reads, self.failures = interval, 0, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import urllib.request

        while not self.done.wait(self.interval):
            for url in self.urls:
                for path in ("/metrics", "/status"):
                    try:
                        with urllib.request.urlopen(url + path, timeout=5) as resp:
                            resp.read()
                        self.reads += 1
                    except OSError:
                        self.failures += 1

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=29192)
    parser.add_argument("--zookeeper-port", type=int, default=22281)
    parser.add_argument("--paced-rate", type=float, default=10.0, help="offered MB/s for the latency run")
    parser.add_argument("--profile", action="store_true", help="profile the brokers (cProfile) into the data dir")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker configuration")
    parser.add_argument("--scrape-interval", type=float, default=0.0,
                        help="read every broker's /metrics and /status this often (seconds; 0: never)")
    parser.add_argument("--runs", type=int, default=1, help="saturated runs on the same cluster")
    parser.add_argument("--no-paced", action="store_true", help="skip the latency run at the paced rate")
    args = parser.parse_args()
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3", "--config", "min.insync.replicas=2"]
    tmp = tempfile.mkdtemp(prefix="strandline-bench-rf3-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, args.profile, brokers=3,
                                       overrides=tuple(args.override))
    print(f"started strandline up --brokers 3 in {tmp}: {bootstrap}")
    try:
        pids = pc.broker_pids(tmp)
        scraper = Scraper(tmp, args.scrape_interval) if args.scrape_interval > 0 else None
        if not args.no_paced:
            r = pc.paced(bootstrap, f"paced-{uuid.uuid4().hex[:8]}", "all", args.paced_rate, args.seconds,
                         args.partitions)
            print(f"RF=3 acks=all at {args.paced_rate:g} MB/s offered: ack p50 {r['p50 ms']:.1f} ms "
                  f"p99 {r['p99 ms']:.1f} ms ({r['records']} records)", flush=True)
        for _ in range(args.runs):
            cpu0 = [pc.cpu_seconds([p]) for p in pids]
            own0 = os.times()
            r = pc.produce(bootstrap, f"bench-{uuid.uuid4().hex[:8]}", "all", args.seconds, args.partitions)
            used = [pc.cpu_seconds([p]) - c for p, c in zip(pids, cpu0)]
            cpu = [u / r["seconds"] * 100 for u in used]
            own1 = os.times()
            client = (own1.user + own1.system - own0.user - own0.system) / r["seconds"] * 100
            mb = r["MB/s"] * r["seconds"]
            print(f"RF=3 acks=all saturated: {r['MB/s']:8.1f} MB/s {r['records/s']:10.0f} records/s "
                  f"ack p50 {r['p50 ms']:.1f} ms p99 {r['p99 ms']:.1f} ms ({r['records']} records, {r['failed']} failed; "
                  f"broker CPU {' / '.join(f'{c:.0f}%' for c in cpu)}, client CPU {client:.0f}% of one core); "
                  f"broker CPU per MB {sum(used) / mb * 1000:.2f} ms", flush=True)
        if scraper is not None:
            scraper.stop()
            print(f"scraped /metrics and /status {scraper.reads} times ({scraper.failures} failed)")
    finally:
        pc.stop_cluster(proc, tmp, keep=args.profile)
        if args.profile:
            print(f"broker profiles: {tmp}/broker.prof.<id> (python -m pstats)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
