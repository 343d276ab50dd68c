"""Produce latency while the log cleaner works (issue 16, deliverable 3).

Three local brokers. A topic of ``--fill-mb`` MB of 1 KiB keyed records (``--keys`` distinct
keys, RF=3) is written with ``cleanup.policy=delete`` and ``retention.ms=-1``, so nothing is
cleaned yet. Then `strandline bench produce` offers 10 MB/s (1 KiB records, acks=all, RF=3) to
another topic twice:

1. with the cleaner idle;
2. right after the first topic is switched to ``cleanup.policy=compact``, so that every broker's
   cleaner works through its replica of it during the run.

Prints both runs' latency lines, and for the second run each broker's bytes cleaned while it ran
(from /status). ``--io-max-mb`` sets ``log.cleaner.io.max.bytes.per.second`` on every broker.
``ACKS=1`` measures acks=1 instead; ``CPU=1`` prints each broker's and the machine's CPU every second
of the busy run, ``PROBE=1`` the measured topic's offsets on each broker twice a second. A
benchmark, not a test:

    .venv/bin/python benchmarks/compaction_latency.py [--fill-mb 300] [--seconds 20] [--io-max-mb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402

RECORD = 1024


def _machine() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:8]]


def status(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/status", timeout=5) as resp:
        return json.loads(resp.read())


def cleaner_bytes(urls: list[str]) -> list[int]:
    return [status(u)["log_cleaner"]["bytes_read"] for u in urls]


def bench(bootstrap: str, topic: str, seconds: int, acks: str = "all") -> str:
    rate = 10 * 1024                                    # records/s of 1 KiB: 10 MB/s
    result = subprocess.run([sys.executable, "-m", "strandline.cli.main", "bench", "produce", "--topic", topic,
                             "--num-records", str(rate * seconds), "--record-size", str(RECORD), "--throughput",
                             str(rate), "--acks", acks, "--processes", "2", "--bootstrap-server", bootstrap],
                            capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(f"    {line}")
    return lines[-1] if lines else result.stderr.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill-mb", type=int, default=300)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--io-max-mb", type=float, default=None,
                        help="log.cleaner.io.max.bytes.per.second of each broker, in MB/s (default: Kafka's, no limit)")
    parser.add_argument("--base-port", type=int, default=33292)
    parser.add_argument("--zookeeper-port", type=int, default=34381)
    args = parser.parse_args()

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    data = tempfile.mkdtemp(prefix="compaction-latency-")
    overrides = ["log.cleaner.backoff.ms=100"]
    if args.io_max_mb is not None:
        overrides.append(f"log.cleaner.io.max.bytes.per.second={args.io_max_mb * 1e6:.0f}")
    proc, bootstrap = pc.start_cluster(data, args.base_port, args.zookeeper_port, False, brokers=3, console=False,
                                       overrides=tuple(overrides))
    try:
        info = json.loads(open(os.path.join(data, "cluster.json")).read())
        urls = [b["metrics"] for b in info["brokers"]]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("table", 1, 3, config={"cleanup.policy": "delete", "retention.ms": "-1",
                                                             "segment.bytes": str(16 << 20),
                                                             "min.insync.replicas": "2"}),
                             NewTopic("latency", 1, 3, config={"min.insync.replicas": "2"})])["table"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "queue.buffering.max.kbytes": 65536})
        payload = os.urandom(RECORD)
        t = time.monotonic()
        for i in range(args.fill_mb * 1024):
            while True:
                try:
                    producer.produce("table", key=b"key-%06d" % (i % args.keys), value=payload)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(120)
        print(f"filled 'table' with {args.fill_mb} MB of {args.keys} keys in {time.monotonic() - t:.1f} s", flush=True)
        time.sleep(2)                                   # let the followers finish before measuring
        os.sync()                                       # and the kernel write the fill back, not during a run

        print(f"cleaner idle:  {bench(bootstrap, 'latency', args.seconds)}", flush=True)
        os.sync()           # the busy run starts from a clean page cache too, not amid the idle run's writeback
        before = cleaner_bytes(urls)
        resource = ConfigResource("topic", "table", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        samples: list[str] = []
        if os.environ.get("CPU"):                       # per-second CPU of the brokers and the machine (aid)
            def sample() -> None:
                pids = [b["pid"] for b in info["brokers"]]
                last = [pc.cpu_seconds([p]) for p in pids]
                m0 = _machine()
                for _ in range(10):
                    time.sleep(1)
                    now = [pc.cpu_seconds([p]) for p in pids]
                    m1 = _machine()
                    names = ("user", "nice", "sys", "idle", "iowait", "irq", "softirq")
                    samples.append("cpu " + " ".join(f"{(n - b) * 100:.0f}%" for n, b in zip(now, last)) + " | " + " ".join(
                        f"{name} {(b - a) / os.sysconf('SC_CLK_TCK') * 100:.0f}%" for name, a, b in zip(names, m0, m1)))
                    last, m0 = now, m1
            threading.Thread(target=sample, daemon=True).start()
        if os.environ.get("PROBE"):                     # latency-0's offsets on each broker, twice a second (aid)
            def probe() -> None:
                t0 = time.monotonic()
                for _ in range(30):
                    row = []
                    for u in urls:
                        st = status(u)
                        for r in st["replicas"]:
                            if r["topic"] == "latency":
                                row.append(f"{r['role'][0]}:{r['log_end_offset']}/{r['high_watermark']}")
                            if r["topic"] == "table" and r.get("cleaner", {}).get("cleaning"):
                                row.append("C")
                    samples.append(f"{time.monotonic() - t0:5.1f} " + " ".join(row))
                    time.sleep(0.5)
            threading.Thread(target=probe, daemon=True).start()
        line = bench(bootstrap, "latency", args.seconds, os.environ.get("ACKS", "all"))
        for text in samples:
            print(f"  {text}")
        cleaned = [(a - b) / 1e6 for a, b in zip(cleaner_bytes(urls), before)]
        print(f"cleaner busy:  {line}")
        print("  bytes cleaned during the run, per broker: " + ", ".join(f"{c:.0f} MB" for c in cleaned))
        busy = [any(r.get("cleaner", {}).get("cleaning") for r in status(u)["replicas"]) for u in urls]
        print(f"  still cleaning at the end of the run: {busy}")
        for b in info["brokers"]:
            log_path = os.path.join(os.path.dirname(b["log_dir"]), "broker.log")
            with open(log_path) as f:
                for text in f:
                    if "Cleaned log" in text or "WARN" in text or "took" in text:
                        print(f"  broker {b['id']}: {text.strip()[:200]}")
    finally:
        pc.stop_cluster(proc, data, keep=bool(os.environ.get("KEEP")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
