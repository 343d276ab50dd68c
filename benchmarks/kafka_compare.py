"""Strandline next to Apache Kafka 3.9: the same loads, with the same clients, in interleaved rounds.

Three Strandline brokers and three Kafka 3.9 brokers (Kafka's jars from Maven Central, as
``strandline.reference`` fetches them; its JVM as ``kafka-server-start.sh`` starts it: -Xmx1G
-Xms1G, G1) share one ZooKeeper, Kafka under its chroot ``/kafka-3.9``. One system runs at a time:
each round starts Strandline's cluster, measures it and stops it, then does the same for Kafka's,
each on fresh data directories with the same broker settings (Kafka's keys and defaults). Every
figure is measured the same way for both:

- time to start: three brokers spawned until each one's Metadata lists all three;
- then ``--warmup-records`` sent with ``bench produce`` and not measured (Kafka's JIT compiler
  and both systems' caches warm up);
- saturated produce, RF=3 (min.insync.replicas=2), acks=all, 1 KiB records, 6 partitions, with
  ``strandline bench produce --processes 2`` and with Kafka's ``kafka-producer-perf-test``
  (ProducerPerformance, one JVM), both given linger.ms=5 and batch.size=262144; the brokers' CPU
  seconds (from /proc, three brokers summed) per MB sent with the first;
- paced at 10 MB/s for ``--paced-seconds`` (``bench produce --throughput``, one process; then
  ProducerPerformance), the acknowledgement latency's p50/p99/p99.9/max as each client reports it;
- consume from the page cache of what the saturated ``bench produce`` wrote (``bench consume
  --client raw --processes 2``: Fetch requests, the records counted from batch headers, so the
  brokers are measured rather than a client), MB/s and the brokers' CPU per MB;
- RSS of the three brokers (summed) right after start and after the loads above;
- with a topic of ``--partitions`` RF=3 partitions every replica in sync, SIGKILL of the
  controller until every partition it led (the leaders as ZooKeeper holds them: a broker's
  metadata may lag) has another leader in the brokers' metadata (after
  ``zookeeper.session.timeout.ms``), and, the broker started again and back in every ISR, a
  controlled shutdown (SIGTERM) of the broker leading the most until every partition it led has
  another leader, and until its process exits.

MB is 2^20 bytes (as both clients print MB/sec). Prints each figure per round as it is measured,
then one table of the medians: figure, Strandline, Kafka 3.9, ratio, the issue's target and
whether it is met. A figure one system could not give is printed as one line saying why. A
benchmark, not a test:

    .venv/bin/python benchmarks/kafka_compare.py [--quick] [--rounds 2] [--records 1048576]
        [--paced-seconds 60] [--partitions 1000] [--warmup-records 500000] [--profile DIR]
        [--kafka-jvm shipped|small]

``--quick`` (about 3 minutes): one round, 100,000 records (50,000 to warm up), 10 s paced, 100
partitions and a 6 s ZooKeeper session. ``--profile DIR`` runs Strandline's brokers under cProfile (their profiles in
DIR, ``broker.prof.<id>`` per round); it slows them, so its figures are not the comparison.
It stops every process it starts by its PID.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402
import scale  # noqa: E402

from strandline.launch.brokers import BrokerProcess, broker_properties  # noqa: E402
from strandline.launch.ports import free_loopback_ports  # noqa: E402
from strandline.launch.process import ServerProcess, stop_processes  # noqa: E402
from strandline.launch.wait import wait_for_membership  # noqa: E402
from strandline.launch.zookeeper import EmbeddedZooKeeper, check_java  # noqa: E402
from strandline.reference import KafkaDist, ensure_kafka  # noqa: E402
from strandline.reference.cluster import (BROKER_JVM_FLAGS, KAFKA_PERFORMANCE_OPTS,  # noqa: E402
                                          SHIPPED_BROKER_JVM_FLAGS, KafkaNode, chroot_for, node_properties,
                                          start_node)
from strandline.runtime.zk import KazooStore  # noqa: E402

STRANDLINE, KAFKA = "Strandline", "Kafka 3.9"
RECORD = 1024
MB = 1024 * 1024
PACED_MB_S = 10
SATURATED_PARTITIONS = 6
START_TIMEOUT_S = 180.0
#: what both clients are given (librdkafka's and the Java producer's keys are the same here)
PRODUCER_PROPS = ("linger.ms=5", "batch.size=262144")
#: ProducerPerformance's JVM as ``kafka-producer-perf-test.sh`` starts it
PERF_JVM_FLAGS = ("-Xmx512M", *KAFKA_PERFORMANCE_OPTS)
FINAL = re.compile(r"\(([\d.]+) MB/sec\), [\d.]+ ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, "
                   r"\d+ ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")
MB_S = re.compile(r"\(([\d.]+) MB/sec\)")


class NotMeasured(Exception):
    """A figure this system could not give; the message says why in one line."""


def one_line(text: str, limit: int = 160) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strandline.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


class Cluster:
    """Three brokers of one system on the shared ZooKeeper, in ``root``; started, signalled and
    stopped by PID."""

    name = ""

    def __init__(self, root: Path, ports: list[int], zk_connect: str, settings: list[str]) -> None:
        self.root, self.zk_connect, self.settings = root, zk_connect, settings
        self.nodes: list[Any] = []
        self.ports = {i + 1: port for i, port in enumerate(ports)}

    @property
    def brokers_zk_connect(self) -> str:
        """The brokers' ``zookeeper.connect``, chroot included."""
        return self.zk_connect

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def launch(self, node: Any) -> None:
        raise NotImplementedError

    def start(self) -> float:
        """Seconds from the first spawn until every broker's Metadata lists all three."""
        began = time.monotonic()
        for node in self.nodes:
            self.launch(node)
        wait_for_membership(self.nodes, START_TIMEOUT_S, what=f"{self.name} broker", interval_s=0.05)
        return time.monotonic() - began

    def node(self, broker: int) -> ServerProcess:
        return next(n for n in self.nodes if n.id == broker)

    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.alive]     # a broker, Python or JVM, is one process

    def stop(self) -> None:
        stop_processes([n.proc for n in self.nodes if n.proc is not None], 60.0)

    def zookeeper(self) -> KazooStore:
        store = KazooStore(self.brokers_zk_connect, 30000)
        store.start(10)
        return store


class StrandlineCluster(Cluster):
    name = STRANDLINE

    def __init__(self, root: Path, ports: list[int], zk_connect: str, settings: list[str],
                 profile: Path | None = None) -> None:
        super().__init__(root, ports, zk_connect, settings)
        self.env = dict(os.environ, STRANDLINE_PROFILE=str(profile)) if profile else None
        self.nodes = [BrokerProcess(b, port, root) for b, port in self.ports.items()]
        for n in self.nodes:
            n.write_config(broker_properties(n.id, n.port, n.log_dir, zk_connect, extra=settings,
                                             header="# Written by benchmarks/kafka_compare.py"))

    def launch(self, node: Any) -> None:
        node.start(env=self.env)


class KafkaCluster(Cluster):
    name = KAFKA

    def __init__(self, root: Path, ports: list[int], zk_connect: str, settings: list[str],
                 dist: KafkaDist, jvm_flags: tuple[str, ...]) -> None:
        super().__init__(root, ports, zk_connect, settings)
        self.dist, self.java, self.jvm_flags = dist, check_java(17), jvm_flags
        self.nodes = [KafkaNode(b, port, root) for b, port in self.ports.items()]
        for n in self.nodes:
            n.write_config(node_properties(dist, n, self.nodes, zk_connect, settings))

    @property
    def brokers_zk_connect(self) -> str:
        return self.zk_connect + chroot_for(self.dist)

    def launch(self, node: Any) -> None:
        start_node(self.dist, node, self.java, self.jvm_flags)


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"cmp-{uuid.uuid4().hex[:8]}"
    made = cli("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", str(partitions),
               "--replication-factor", "3", "--config", "min.insync.replicas=2")
    if made.returncode != 0:
        raise NotMeasured(f"topics create failed: {one_line(made.stderr)}")
    return topic


def all_in_sync(zk: KazooStore, topic: str, partitions: int) -> Callable[[], bool]:
    keys = [(topic, p) for p in range(partitions)]

    def check() -> bool:
        try:
            return all(len(state["isr"]) == 3 for state in scale.read_states(zk, keys))
        except SystemExit:         # a partition's state not written yet
            return False
    return check


def final_figures(stdout: str, what: str) -> dict[str, float]:
    """MB/s and latency percentiles from the final line both producer tools print."""
    match = next((m for m in map(FINAL.search, reversed(stdout.splitlines())) if m), None)
    if match is None:
        raise NotMeasured(f"{what}: no final line in its output: {one_line(stdout)}")
    mb_s, worst, p50, p99, p999 = (float(x) for x in match.groups())
    return {"mb_s": mb_s, "p50": p50, "p99": p99, "p999": p999, "max": worst}


def bench_produce(c: Cluster, topic: str, records: int, processes: int, rate: float = -1) -> dict[str, float]:
    before = pc.cpu_seconds(c.pids())
    done = cli("bench", "produce", "--bootstrap-server", c.bootstrap, "--topic", topic, "--num-records", str(records),
               "--record-size", str(RECORD), "--acks", "all", "--processes", str(processes), "--throughput",
               str(rate), "--producer-props", *PRODUCER_PROPS, "--reporting-interval", "3600")
    cpu = pc.cpu_seconds(c.pids()) - before
    if done.returncode != 0:
        raise NotMeasured(f"bench produce failed: {one_line(done.stderr or done.stdout)}")
    figures = final_figures(done.stdout, "bench produce")
    figures["cpu_ms_per_mb"] = cpu * 1000 / (records * RECORD / MB)
    figures["cores"] = figures["cpu_ms_per_mb"] * figures["mb_s"] / 1000    # the brokers' CPU over the run's time
    return figures


def perf_produce(dist: KafkaDist, c: Cluster, topic: str, records: int, rate: float = -1) -> dict[str, float]:
    cmd = dist.tool_command("kafka-producer-perf-test", [
        "--topic", topic, "--num-records", str(records), "--record-size", str(RECORD), "--throughput", str(int(rate)),
        "--producer-props", f"bootstrap.servers={c.bootstrap}", "acks=all", *PRODUCER_PROPS], jvm_flags=PERF_JVM_FLAGS)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise NotMeasured(f"ProducerPerformance failed: {one_line(done.stderr or done.stdout)}")
    return final_figures(done.stdout, "ProducerPerformance")


def bench_consume(c: Cluster, topic: str, records: int) -> dict[str, float]:
    before = pc.cpu_seconds(c.pids())
    done = cli("bench", "consume", "--bootstrap-server", c.bootstrap, "--topic", topic, "--num-records",
               str(records), "--processes", "2", "--client", "raw", "--reporting-interval", "3600")
    cpu = pc.cpu_seconds(c.pids()) - before
    match = MB_S.search(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    if done.returncode != 0 or match is None:
        raise NotMeasured(f"bench consume failed: {one_line(done.stderr or done.stdout)}")
    return {"mb_s": float(match.group(1)), "cpu_ms_per_mb": cpu * 1000 / (records * RECORD / MB)}


def zk_leaders(zk: KazooStore, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    """Each partition's leader as the controller wrote it in ZooKeeper (a broker's metadata may lag)."""
    keys = [(topic, p) for p in range(partitions)]
    return {tp: int(state["leader"]) for tp, state in zip(keys, scale.read_states(zk, keys))}


def failover(c: Cluster, partitions: int) -> dict[str, float]:
    """SIGKILL of the controller; the broker started again; a controlled shutdown of the broker leading the most."""
    zk = c.zookeeper()
    try:
        topic = create_topic(c.bootstrap, partitions)
        scale.wait_until(f"{partitions} partitions in sync", all_in_sync(zk, topic, partitions), 600, 0.5)
        controller, _ = scale.metadata(c.ports, list(c.ports))
        leaders = zk_leaders(zk, topic, partitions)
        led = {tp for tp, b in leaders.items() if b == controller}
        killed_led = len(led)
        others = [b for b in c.ports if b != controller]
        victim = c.node(controller)
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        killed = scale.wait_until("new leaders after SIGKILL", scale.LedElsewhere(zk, c.ports, others, led, controller),
                                  300, 0.05)
        victim.proc.wait(30)
        c.launch(victim)
        scale.wait_until(f"broker {controller} back in every ISR", scale.in_every_isr(zk, controller), 300, 0.5)
        leaders = zk_leaders(zk, topic, partitions)
        counts = {b: sum(1 for x in leaders.values() if x == b) for b in c.ports}
        broker = max(counts, key=lambda b: counts[b])
        led = {tp for tp, b in leaders.items() if b == broker}
        others = [b for b in c.ports if b != broker]
        victim = c.node(broker)
        assert victim.proc is not None
        signalled = time.monotonic()
        victim.proc.send_signal(signal.SIGTERM)
        moved = scale.wait_until("new leaders after SIGTERM", scale.LedElsewhere(zk, c.ports, others, led, broker),
                                 300, 0.05)
        victim.proc.wait(120)
        exited = time.monotonic() - signalled
        print(f"    SIGKILL of the controller (broker {controller}, leader of {killed_led}): new leaders after "
              f"{killed:.2f} s; SIGTERM of broker {broker} (leader of {len(led)}): new leaders after {moved:.2f} s, "
              f"exited after {exited:.2f} s", flush=True)
        return {"failover_s": killed, "shutdown_s": moved, "shutdown_exit_s": exited}
    finally:
        zk.stop()


#: (key, figure, unit, target): the target is on the ratio Strandline / Kafka, ">=" or "<=" it
ROWS: list[tuple[str, str, str, tuple[str, float] | None]] = [
    ("start_s", "time to start (3 brokers listed by each)", "s", None),
    ("bench_mb_s", "saturated produce, `bench produce --processes 2`", "MB/s", (">=", 1.0)),
    ("perf_mb_s", "saturated produce, `kafka-producer-perf-test`", "MB/s", (">=", 1.0)),
    ("produce_cpu", "brokers' CPU per MB produced (3 summed, `bench produce`)", "ms", None),
    ("produce_cores", "brokers' cores busy during it (3 summed)", "cores", None),
    ("paced_p50", "10 MB/s `bench produce`: p50", "ms", None),
    ("paced_p99", "10 MB/s `bench produce`: p99", "ms", ("<=", 1.0)),
    ("paced_p999", "10 MB/s `bench produce`: p99.9", "ms", None),
    ("paced_max", "10 MB/s `bench produce`: max", "ms", None),
    ("perf_paced_p50", "10 MB/s `kafka-producer-perf-test`: p50", "ms", None),
    ("perf_paced_p99", "10 MB/s `kafka-producer-perf-test`: p99", "ms", ("<=", 1.0)),
    ("perf_paced_p999", "10 MB/s `kafka-producer-perf-test`: p99.9", "ms", None),
    ("perf_paced_max", "10 MB/s `kafka-producer-perf-test`: max", "ms", None),
    ("consume_mb_s", "consume from the page cache (`bench consume --client raw --processes 2`)", "MB/s", None),
    ("consume_cpu", "brokers' CPU per MB consumed (3 summed)", "ms", None),
    ("rss_start", "RSS of the 3 brokers after start (summed)", "MB", None),
    ("rss_loaded", "RSS of the 3 brokers after the loads (summed)", "MB", ("<=", 1 / 3)),
    ("failover_s", "SIGKILL of the controller -> its partitions led elsewhere", "s", ("<=", 1.0)),
    ("shutdown_s", "controlled shutdown -> its partitions led elsewhere", "s", ("<=", 1.0)),
    ("shutdown_exit_s", "controlled shutdown -> its process exited", "s", ("<=", 1.0)),
]

Results = dict[str, float | str]


def measure(results: Results, keys: dict[str, str], step: Callable[[], dict[str, float]]) -> None:
    """Run one step; its figures (``keys``: the figure's key -> the step's) in ``results``, or each
    figure given why it could not be measured."""
    try:
        figures = step()
    except (NotMeasured, SystemExit, subprocess.TimeoutExpired, OSError, RuntimeError) as exc:
        for key in keys:
            results.setdefault(key, f"not measured: {one_line(str(exc))}")
        return
    for key, name in keys.items():
        results[key] = figures[name]


def latencies(prefix: str) -> dict[str, str]:
    return {f"{prefix}_{p}": p for p in ("p50", "p99", "p999", "max")}


def run_system(c: Cluster, args: argparse.Namespace, dist: KafkaDist | None) -> Results:
    """Every figure of one system, in order, on a cluster started here and stopped at the end."""
    results: Results = {}
    try:
        measure(results, {"start_s": "start_s"}, lambda: {"start_s": c.start()})
        if isinstance(results["start_s"], str):
            return {key: results["start_s"] for key, *_ in ROWS}
        results["rss_start"] = rss_bytes(c.pids()) / MB
        if args.warmup_records:        # not measured: the JVM's compiler and both systems' caches warm up
            bench_produce(c, create_topic(c.bootstrap, SATURATED_PARTITIONS), args.warmup_records, 2)
        saturated = create_topic(c.bootstrap, SATURATED_PARTITIONS)
        measure(results, {"bench_mb_s": "mb_s", "produce_cpu": "cpu_ms_per_mb", "produce_cores": "cores"},
                lambda: bench_produce(c, saturated, args.records, 2))
        paced = PACED_MB_S * MB // RECORD
        paced_records = int(paced * args.paced_seconds)
        measure(results, latencies("paced"), lambda: bench_produce(
            c, create_topic(c.bootstrap, SATURATED_PARTITIONS), paced_records, 1, paced))
        if dist is None:
            reason = "not measured: Kafka's ProducerPerformance could not be fetched"
            results.update({key: reason for key, *_ in ROWS if key.startswith("perf_")})
        else:
            measure(results, {"perf_mb_s": "mb_s"}, lambda: perf_produce(
                dist, c, create_topic(c.bootstrap, SATURATED_PARTITIONS), args.records))
            measure(results, latencies("perf_paced"), lambda: perf_produce(
                dist, c, create_topic(c.bootstrap, SATURATED_PARTITIONS), paced_records, paced))
        if isinstance(results["bench_mb_s"], str):
            results["consume_mb_s"] = results["consume_cpu"] = "not measured: nothing was produced to read"
        else:
            measure(results, {"consume_mb_s": "mb_s", "consume_cpu": "cpu_ms_per_mb"},
                    lambda: bench_consume(c, saturated, min(args.consume_records, args.records)))
        results["rss_loaded"] = rss_bytes(c.pids()) / MB
        keys = ("failover_s", "shutdown_s", "shutdown_exit_s")
        measure(results, dict(zip(keys, keys)), lambda: failover(c, args.partitions))
    except NotMeasured as exc:         # a topic could not be created: the figures left say so
        for key, *_ in ROWS:
            results.setdefault(key, f"not measured: {exc}")
    finally:
        c.stop()
    for key, *_ in ROWS:
        results.setdefault(key, "not measured: an earlier step failed")
    return results


def show(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"


def table(rows: dict[str, list[Results]]) -> list[str]:
    """The markdown table of the medians over the rounds, and a line for each figure not measured."""
    lines = ["| figure | Strandline | Kafka 3.9 | ratio | target | met |", "|---|---|---|---|---|---|"]
    missing = []
    for key, label, unit, target in ROWS:
        medians: dict[str, float] = {}
        for system, rounds in rows.items():
            values = [r[key] for r in rounds if isinstance(r.get(key), float | int)]
            if values:
                medians[system] = statistics.median(values)
            else:
                reason = next((r[key] for r in rounds if isinstance(r.get(key), str)), "not measured")
                missing.append(f"{label}: {system} {reason}")
        cells = [show(medians[s], unit) if s in medians else "-" for s in (STRANDLINE, KAFKA)]
        ratio = medians[STRANDLINE] / medians[KAFKA] if len(medians) == 2 and medians[KAFKA] else None
        goal = f"{target[0]} {target[1]:.2f}x" if target else ""
        met = "" if target is None or ratio is None else "met" if (
            ratio >= target[1] if target[0] == ">=" else ratio <= target[1]) else "**missed**"
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {f'{ratio:.2f}x' if ratio is not None else '-'} | "
                     f"{goal} | {met} |")
    return lines + missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (about 3 minutes)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=1024 * 1024, help="1 KiB records of each saturated run")
    parser.add_argument("--warmup-records", type=int, default=500_000,
                        help="1 KiB records produced before the figures, not measured (0: none)")
    parser.add_argument("--consume-records", type=int, default=1024 * 1024, help="1 GiB by default")
    parser.add_argument("--paced-seconds", type=float, default=60.0)
    parser.add_argument("--partitions", type=int, default=1000, help="of the failover and shutdown topic")
    parser.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms of both")
    parser.add_argument("--kafka-jvm", choices=("shipped", "small"), default="shipped",
                        help="Kafka's JVM as kafka-server-start.sh starts it, or strandline reference up's small one")
    parser.add_argument("--profile", type=Path, help="run Strandline's brokers under cProfile, profiles in this dir")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.records, args.consume_records, args.warmup_records = 1, 100_000, 100_000, 50_000
        args.paced_seconds, args.partitions, args.session_ms = 10.0, 100, 6000
    try:
        dist: KafkaDist | None = ensure_kafka("3.9")
    except Exception as exc:   # no Maven, no network: Strandline's column alone, each Kafka figure says why
        print(f"kafka_compare: Kafka 3.9 not measured: {one_line(str(exc))}", flush=True)
        dist = None
    jvm = SHIPPED_BROKER_JVM_FLAGS if args.kafka_jvm == "shipped" else BROKER_JVM_FLAGS
    settings = [f"zookeeper.session.timeout.ms={args.session_ms}"]
    root = Path(tempfile.mkdtemp(prefix="strandline-kafka-compare-"))
    zk_port, *ports = free_loopback_ports(7)
    zk = EmbeddedZooKeeper(root / "zookeeper", zk_port)
    results: dict[str, list[Results]] = {STRANDLINE: [], KAFKA: []}
    print(f"kafka_compare: {args.rounds} round(s); {args.records} records per saturated run, "
          f"{args.paced_seconds:g} s at {PACED_MB_S} MB/s, {args.partitions} partitions; Kafka "
          f"{dist.version if dist else '-'} ({args.kafka_jvm} JVM); ZooKeeper {zk.connect_string}; in {root}",
          flush=True)
    try:
        zk.start()
        for n in range(1, args.rounds + 1):
            connect = f"{zk.connect_string}/round-{n}"
            profile = args.profile.resolve() / f"round-{n}" / "broker.prof" if args.profile else None
            if profile:
                profile.parent.mkdir(parents=True, exist_ok=True)
            for system in (STRANDLINE, KAFKA):
                where = root / f"{system.split()[0].lower()}-{n}"
                if system == KAFKA and dist is None:
                    results[KAFKA].append({key: "not measured: Kafka 3.9's jars could not be fetched"
                                           for key, *_ in ROWS})
                    continue
                c: Cluster = StrandlineCluster(where, ports[:3], connect, settings, profile) if system == STRANDLINE \
                    else KafkaCluster(where, ports[3:], connect, settings, dist, jvm)
                print(f"round {n}, {system}:", flush=True)
                got = run_system(c, args, dist)
                results[system].append(got)
                print("    " + "; ".join(f"{key} {value:.2f}" if isinstance(value, float) else f"{key} {value}"
                                         for key, value in got.items()), flush=True)
                shutil.rmtree(where, ignore_errors=True)
    finally:
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)
    print()
    for line in table(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
