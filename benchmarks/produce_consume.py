"""Produce/consume throughput and acknowledgement latency against `strandline up`.

A confluent-kafka producer sends 1 KiB records (linger 5 ms) with acks=1 and with acks=all, then
a consumer reads the topic back from the page cache, first with confluent-kafka (every record
decoded in Python), then with ``strandline bench consume --client raw`` in 2 processes (what the
broker serves: issue 15's 1 GB/s target). Prints MB/s, records/s and p50/p99 acknowledgement
latency. A benchmark, not a test:

    .venv/bin/python benchmarks/produce_consume.py [--bootstrap 127.0.0.1:9092] [--seconds 10]

Without --bootstrap it starts its own single-broker `strandline up --brokers 1` in a temporary
directory and stops it. ``replicated_produce.py`` measures three brokers with RF=3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from strandline.launch.process import stop_processes
from strandline.launch.up import UpCluster

RECORD = 1024


def start_cluster(data_dir: str, base_port: int, zk_port: int, profile: bool, brokers: int = 1,
                  overrides: tuple[str, ...] = (), console: bool = True) -> tuple[subprocess.Popen, str]:
    """`strandline up` as a child (:class:`strandline.launch.up.UpCluster`); its process and bootstrap servers."""
    env = dict(os.environ)
    if profile:
        env["STRANDLINE_PROFILE"] = os.path.join(data_dir, "broker.prof")
    up = UpCluster(Path(data_dir), brokers, base_port, zk_port, list(overrides), console=console, env=env,
                   stderr=Path(data_dir) / "up.stderr")
    try:
        up.start(timeout=600)
    except (RuntimeError, TimeoutError):
        tail = up.log_path.read_text(errors="replace").strip().splitlines()[-3:]
        up.stop()
        raise RuntimeError(f"strandline up was not ready: {' | '.join(tail)}") from None
    assert up.proc is not None
    return up.proc, up.bootstrap


def stop_cluster(proc: subprocess.Popen, data_dir: str, keep: bool = False) -> None:
    """SIGINT `strandline up` and wait for it; remove its data unless ``keep`` (profiles live there)."""
    stop_processes([proc], 120, sig=signal.SIGINT)
    if not keep:
        shutil.rmtree(data_dir, ignore_errors=True)


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU seconds used so far by these processes (from /proc)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def broker_pids(data_dir: str | None) -> list[int]:
    if data_dir is None:
        return []
    with open(os.path.join(data_dir, "cluster.json")) as f:
        return [b["pid"] for b in json.load(f)["brokers"]]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


TOPIC_OPTIONS: list[str] = []  # extra `topics create` arguments (replication factor, configs)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    subprocess.run([sys.executable, "-m", "strandline.cli.main", "topics", "create", "--bootstrap-server",
                    bootstrap.split(",")[0], "--topic", topic, "--partitions", str(partitions), *TOPIC_OPTIONS],
                   check=True, stdout=subprocess.DEVNULL)


def produce(bootstrap: str, topic: str, acks: str, seconds: float, partitions: int) -> dict:
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "batch.size": 1000000, "queue.buffering.max.kbytes": 262144,
                         "enable.idempotence": acks == "all"})
    payload = os.urandom(RECORD)
    latencies: list[float] = []
    acked = 0
    failed = 0

    def on_delivery(err, msg, sent=None):
        nonlocal acked, failed
        if err is None:
            acked += 1
        else:
            failed += 1

    sent = 0
    start = time.perf_counter()
    deadline = start + seconds
    sample_every = 97
    while time.perf_counter() < deadline:
        for _ in range(1000):
            try:
                if sent % sample_every == 0:
                    t0 = time.perf_counter()
                    producer.produce(topic, payload, partition=sent % partitions,
                                     on_delivery=lambda err, msg, t0=t0: (latencies.append(time.perf_counter() - t0),
                                                                          on_delivery(err, msg)))
                else:
                    producer.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - start
    return {"acks": acks, "records": acked, "failed": failed, "seconds": elapsed,
            "MB/s": acked * RECORD / elapsed / 1e6, "records/s": acked / elapsed,
            "p50 ms": percentile(latencies, 0.50) * 1000, "p99 ms": percentile(latencies, 0.99) * 1000}


def paced(bootstrap: str, topic: str, acks: str, mb_per_s: float, seconds: float, partitions: int) -> dict:
    """Acknowledgement latency of every record at a fixed offered load (not saturated)."""
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks == "all"})
    payload = os.urandom(RECORD)
    for p in range(partitions):  # warm up: connections, producer id, metadata
        producer.produce(topic, payload, partition=p)
    producer.flush(30)
    latencies: list[float] = []
    per_tick = max(1, int(mb_per_s * 1e6 / RECORD / 1000))  # records per millisecond
    start = time.perf_counter()
    sent = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * 1000) * per_tick
        while sent < due:
            t0 = time.perf_counter()
            producer.produce(topic, payload, partition=sent % partitions,
                             on_delivery=lambda err, msg, t0=t0: latencies.append(time.perf_counter() - t0))
            sent += 1
        producer.poll(0.0005)
    producer.flush(30)
    return {"records": len(latencies), "p50 ms": percentile(latencies, 0.5) * 1000,
            "p99 ms": percentile(latencies, 0.99) * 1000}


def consume(bootstrap: str, topic: str, partitions: int, total: int) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760, "queued.max.messages.kbytes": 1048576})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < total and time.perf_counter() < deadline:
        batch = consumer.consume(num_messages=100000, timeout=1)
        got += len(batch)
        if batch:
            last = batch[-1]
            assert last.error() is None, last.error()
            nbytes += len(batch) * len(last.value())  # every record is RECORD bytes
    elapsed = time.perf_counter() - start
    consumer.close()
    return {"records": got, "seconds": elapsed, "MB/s": nbytes / elapsed / 1e6, "records/s": got / elapsed}


def raw_fetch(bootstrap: str, topic: str, total: int, processes: int = 2) -> str:
    """The broker's serving rate: `strandline bench consume --client raw` (Fetch answers read as
    bytes, records counted from batch headers); its final line."""
    result = subprocess.run([sys.executable, "-m", "strandline.cli.main", "bench", "consume", "--bootstrap-server",
                             bootstrap, "--topic", topic, "--num-records", str(total), "--client", "raw",
                             "--processes", str(processes)], capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else result.stderr.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--base-port", type=int, default=29092)
    parser.add_argument("--zookeeper-port", type=int, default=22181)
    parser.add_argument("--paced-rate", type=float, default=10.0, help="offered MB/s for the latency runs")
    parser.add_argument("--profile", action="store_true", help="profile the broker (cProfile) into the data dir")
    args = parser.parse_args()
    proc = None
    tmp = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        tmp = tempfile.mkdtemp(prefix="strandline-bench-")
        proc, bootstrap = start_cluster(tmp, args.base_port, args.zookeeper_port, args.profile)
        print(f"started strandline up in {tmp}: {bootstrap}")
    try:
        results = []
        total = 0
        pids = broker_pids(tmp)
        for acks in ("1", "all"):
            r = paced(bootstrap, f"paced-{acks}-{uuid.uuid4().hex[:8]}", acks, args.paced_rate, 5, args.partitions)
            print(f"produce acks={acks:>3} at {args.paced_rate:g} MB/s offered: ack p50 {r['p50 ms']:.1f} ms "
                  f"p99 {r['p99 ms']:.1f} ms ({r['records']} records)", flush=True)
        for acks in ("1", "all"):
            topic = f"bench-{acks}-{uuid.uuid4().hex[:8]}"
            cpu0 = cpu_seconds(pids)
            r = produce(bootstrap, topic, acks, args.seconds, args.partitions)
            cpu = cpu_seconds(pids) - cpu0
            results.append(r)
            print(f"produce acks={acks:>3}: {r['MB/s']:8.1f} MB/s {r['records/s']:10.0f} records/s "
                  f"ack p50 {r['p50 ms']:.1f} ms p99 {r['p99 ms']:.1f} ms ({r['records']} records, "
                  f"{r['failed']} failed; broker CPU {cpu / r['seconds'] * 100:.0f}% of one core)", flush=True)
            if acks == "1":
                consume_topic, total = topic, r["records"]
        cpu0 = cpu_seconds(pids)
        c = consume(bootstrap, consume_topic, args.partitions, total)
        cpu = cpu_seconds(pids) - cpu0
        print(f"consume (page cache): {c['MB/s']:8.1f} MB/s {c['records/s']:10.0f} records/s "
              f"({c['records']} of {total} records; broker CPU {cpu / c['seconds'] * 100:.0f}% of one core)",
              flush=True)
        cpu0 = cpu_seconds(pids)
        line = raw_fetch(bootstrap, consume_topic, total)
        cpu = cpu_seconds(pids) - cpu0
        print(f"bench consume --client raw --processes 2 (page cache): {line} (broker CPU {cpu:.2f} s)", flush=True)
    finally:
        if proc is not None:
            stop_cluster(proc, tmp, keep=args.profile)
            if args.profile:
                print(f"broker profile: {tmp}/broker.prof (python -m pstats)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
