"""Failover times on 3 local brokers (RF=3, min.insync.replicas=2, acks=all).

- SIGKILL of the leader: time from the kill to the first acks=all write acknowledged by the new
  leader (a probe writes every 20 ms). Target: zookeeper.session.timeout.ms + 1 s.
- Controlled shutdown (SIGTERM) of the leader: the longest pause between acknowledgements of a
  confluent-kafka producer writing continuously. Target: 1 s.

A benchmark, not a test:

    .venv/bin/python benchmarks/failover.py [--runs 3] [--session-ms 18000]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

from strandline.group.records import build_batch  # noqa: E402
from strandline.runtime.client import KafkaConnection  # noqa: E402



def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "strandline.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def leader_of(ports: dict[int, int], topic: str, alive: list[int]) -> int:
    for b in alive:
        try:
            with KafkaConnection(f"127.0.0.1:{ports[b]}", timeout_s=2) as conn:
                resp = conn.request(3, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
            return int(resp.topics[0].partitions[0].leader_id)
        except Exception:
            continue
    return -1


def probe(port: int, topic: str) -> bool:
    try:
        with KafkaConnection(f"127.0.0.1:{port}", timeout_s=2) as conn:
            resp = conn.request(0, 7, {"transactional_id": None, "acks": -1, "timeout": 2000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": bytes(
                    build_batch([(b"probe", b"probe")], int(time.time() * 1000)))}]}]})
        return int(resp.responses[0].partition_responses[0].error_code) == 0
    except Exception:
        return False


def wait_isr(ports: dict[int, int], topic: str, size: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = leader_of(ports, topic, list(ports))
        if leader > 0:
            with KafkaConnection(f"127.0.0.1:{ports[leader]}", timeout_s=2) as conn:
                resp = conn.request(3, 10, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
            if len(resp.topics[0].partitions[0].isr_nodes) == size:
                return
        time.sleep(0.1)
    raise RuntimeError(f"ISR of {topic} did not reach {size} replicas")


def sigkill_run(data_dir: str, ports: dict[int, int], topic: str) -> float:
    leader = leader_of(ports, topic, list(ports))
    others = [b for b in ports if b != leader]
    killed = time.monotonic()
    cli("cluster", "kill", str(leader), "--data-dir", data_dir)
    while True:
        new = leader_of(ports, topic, others)
        if new in others and probe(ports[new], topic):
            elapsed = time.monotonic() - killed
            break
        time.sleep(0.02)
    cli("cluster", "start", str(leader), "--data-dir", data_dir)
    wait_isr(ports, topic, 3)
    return elapsed


def controlled_shutdown_run(data_dir: str, ports: dict[int, int], bootstrap: str, topic: str) -> float:
    leader = leader_of(ports, topic, list(ports))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1})
    times: list[float] = []
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            producer.produce(topic, b"x" * 100, on_delivery=lambda err, msg: err is None and times.append(
                time.monotonic()))
            producer.poll(0.001)
        producer.flush(30)

    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(1.0)                   # a steady stream first
    stopped = time.monotonic()
    cli("cluster", "stop", str(leader), "--data-dir", data_dir)
    time.sleep(2.0)                   # and after
    stop.set()
    thread.join()
    before = [t for t in times if t <= stopped]
    after = [t for t in times if t > stopped]
    gaps = [b - a for a, b in zip(before[-1:] + after, after)]
    cli("cluster", "start", str(leader), "--data-dir", data_dir)
    wait_isr(ports, topic, 3)
    return max(gaps) if gaps else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms")
    parser.add_argument("--base-port", type=int, default=29292)
    parser.add_argument("--zookeeper-port", type=int, default=22381)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="strandline-bench-failover-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3,
                                       overrides=(f"zookeeper.session.timeout.ms={args.session_ms}",))
    ports = {i + 1: args.base_port + i for i in range(3)}
    print(f"started strandline up --brokers 3 in {tmp} (zookeeper.session.timeout.ms={args.session_ms})")
    try:
        cli("topics", "create", "--bootstrap-server", bootstrap.split(",")[0], "--topic", "fo", "--partitions", "1",
            "--replication-factor", "3", "--config", "min.insync.replicas=2")
        wait_isr(ports, "fo", 3)
        kills = [sigkill_run(tmp, ports, "fo") for _ in range(args.runs)]
        print(f"SIGKILL of the leader -> first acks=all write on the new leader: "
              f"median {statistics.median(kills):.2f} s, max {max(kills):.2f} s "
              f"(runs: {', '.join(f'{k:.2f}' for k in kills)}; target {args.session_ms / 1000 + 1:.0f} s)", flush=True)
        shutdowns = [controlled_shutdown_run(tmp, ports, bootstrap, "fo") for _ in range(args.runs)]
        print(f"controlled shutdown (SIGTERM) of the leader -> longest pause between acknowledgements: "
              f"median {statistics.median(shutdowns) * 1000:.0f} ms, max {max(shutdowns) * 1000:.0f} ms "
              f"(runs: {', '.join(f'{s * 1000:.0f}' for s in shutdowns)} ms; target 1000 ms)", flush=True)
    finally:
        pc.stop_cluster(proc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
