"""Scale: 3 brokers holding many RF=3 partitions (issue targets in brackets).

Measures, in order, and prints one line each:

1. creation: `topics create` of `--partitions` partitions (topics of at most 500) until every broker
   hosts all its replicas and none is under-replicated [<= 30 s];
2. idle: each broker's CPU while nothing is produced [<= 3 %], its RSS [<= 300 MB], its open files
   and its followers' Fetch rate; `--no-sessions` sets `max.incremental.fetch.session.cache.slots=0`
   so that every follower Fetch names every partition (as before KIP-227);
3. SIGKILL of the controller: until every partition it led has another leader in the metadata
   [<= zookeeper.session.timeout.ms + 2 s];
4. restart of that broker: until it is in the ISR of every partition, as ZooKeeper holds it [<= 30 s];
5. controlled shutdown (SIGTERM) of a broker leading a third of the partitions (the one leading the
   most; the controller with `--stop-controller`): until every partition it led has another leader
   [<= 3 s], and until its process exits;
6. restart of that broker: the same [<= 30 s].

Progress is read from ZooKeeper where it can be: a full Metadata or a /metrics scrape of 10,000
partitions costs a broker most of a second of CPU, and polling them would slow what is measured. The
partition states are read with ZooKeeper's multiRead, a thousand to a request (one request each
cost this process about a second of CPU per poll of 5,000, on the cores the brokers measured share).

A benchmark, not a test:

    .venv/bin/python benchmarks/scale.py [--partitions 10000] [--idle-seconds 20] [--no-sessions] [--idle-only]
        [--stop-controller]

It starts its own `strandline up --brokers 3` in a temporary directory and stops it. Run it under
the open-file limit to be tested (`ulimit -n 20000`).
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

from strandline.coordination.store import GetChildren, GetData, ZkError  # noqa: E402
from strandline.runtime.client import KafkaConnection  # noqa: E402
from strandline.runtime.zk import KazooStore  # noqa: E402

URP = ("kafka_server_replicamanager_underreplicatedpartitions", ())
PARTITIONS = ("kafka_server_replicamanager_partitioncount", ())
FOLLOWER_FETCHES = ("kafka_network_requestmetrics_totaltimems_count", (("request", "FetchFollower"),))


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "strandline.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def metadata(ports: dict[int, int], alive: list[int]) -> tuple[int, dict[tuple[str, int], int]]:
    """``(controller id, leader of each partition)`` from the first live broker that answers."""
    for b in alive:
        try:
            with KafkaConnection(f"127.0.0.1:{ports[b]}", timeout_s=5) as conn:
                resp = conn.request(3, 1, {"topics": None})
        except Exception:
            continue
        return int(resp.controller_id), {(t.name, int(p.partition_index)): int(p.leader_id)
                                         for t in resp.topics for p in t.partitions}
    return -1, {}


def wait_until(what: str, condition, timeout_s: float, interval_s: float = 0.05) -> float:
    """Seconds until ``condition()`` holds (polled); exits the benchmark past ``timeout_s``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(interval_s)
    return time.monotonic() - start


def in_sync(urls: list[str], partitions: int):
    def check() -> bool:
        try:
            samples = [scrape(u) for u in urls]
        except OSError:
            return False
        return all(s.get(PARTITIONS, 0) >= partitions and s.get(URP, 1) == 0 for s in samples)
    return check


def read_states(zk: KazooStore, keys: list[tuple[str, int]]) -> list[dict]:
    """The state znodes of ``keys``, in a few multiRead requests."""
    results = zk.execute([GetData(f"/brokers/topics/{t}/partitions/{p}/state") for t, p in keys])
    failed = next((r.error for r in results if r.error is not ZkError.NONE), None)
    if failed is not None:
        raise SystemExit(f"reading partition states from ZooKeeper: {failed.name}")
    return [json.loads(r.data) for r in results]


def all_partitions(zk: KazooStore) -> list[tuple[str, int]]:
    [topics] = zk.execute([GetChildren("/brokers/topics")])
    answers = zk.execute([GetChildren(f"/brokers/topics/{t}/partitions") for t in topics.children])
    return [(t, int(p)) for t, a in zip(topics.children, answers) for p in a.children]


def in_every_isr(zk: KazooStore, broker: int):
    """Whether ``broker`` is in the ISR of every partition, as the leaders wrote it in ZooKeeper."""
    def check() -> bool:
        return all(broker in state["isr"] for state in read_states(zk, all_partitions(zk)))
    return check


def restart(zk, data_dir: str, broker: int) -> float:
    """Start ``broker`` again; seconds until it is in every ISR (from the start command)."""
    restarting = time.monotonic()
    cli("cluster", "start", str(broker), "--data-dir", data_dir)
    wait_until("in sync after restart", in_every_isr(zk, broker), 300, 0.5)
    return time.monotonic() - restarting


class LedElsewhere:
    """Whether every partition of ``led`` has a leader other than ``gone``: first in ZooKeeper (the
    controller's decision, read without loading the brokers), then in a live broker's metadata (a
    full Metadata of 10,000 partitions costs a broker about 0.4 s, so it is asked only then)."""

    def __init__(self, zk, ports: dict[int, int], alive: list[int], led: set[tuple[str, int]], gone: int) -> None:
        self.zk, self.ports, self.alive, self.led, self.gone = zk, ports, alive, sorted(led), gone
        self.decided_s: float | None = None
        self.started = time.monotonic()
        self.reported = 0.0

    def __call__(self) -> bool:
        if self.decided_s is None:
            left = sum(1 for state in read_states(self.zk, self.led) if state["leader"] in (self.gone, -1))
            if time.monotonic() - self.reported > 5:
                print(f"  ... {left} of {len(self.led)} partitions without a new leader in ZooKeeper", flush=True)
                self.reported = time.monotonic()
            if left:
                return False
            self.decided_s = time.monotonic() - self.started
        _, leaders = metadata(self.ports, self.alive)
        return bool(leaders) and all(leaders.get(tp, self.gone) not in (self.gone, -1) for tp in self.led)


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--no-sessions", action="store_true")
    parser.add_argument("--idle-only", action="store_true", help="stop after the idle measurement")
    parser.add_argument("--stop-controller", action="store_true",
                        help="the controlled shutdown stops the controller (else the broker leading the most)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's data directory (its logs)")
    parser.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms")
    parser.add_argument("--base-port", type=int, default=29392)
    parser.add_argument("--zookeeper-port", type=int, default=22481)
    args = parser.parse_args()
    overrides = [f"zookeeper.session.timeout.ms={args.session_ms}"]
    if args.no_sessions:
        overrides.append("max.incremental.fetch.session.cache.slots=0")
    tmp = tempfile.mkdtemp(prefix="strandline-bench-scale-")
    # no web console: its polling of every broker's /status is an observer's cost, not the brokers' own
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3,
                                       overrides=tuple(overrides), console=False)
    ports = {i + 1: args.base_port + i for i in range(3)}
    print(f"strandline up --brokers 3 in {tmp}; open-file limit {os.sysconf('SC_OPEN_MAX')}; "
          f"{args.partitions} partitions RF=3", flush=True)
    try:
        with open(os.path.join(tmp, "cluster.json")) as f:
            urls = [b["metrics"] for b in json.load(f)["brokers"]]
        pids = dict(zip(ports, pc.broker_pids(tmp)))
        started = time.monotonic()
        left, n = args.partitions, 0
        while left > 0:
            count = min(500, left)
            cli("topics", "create", "--bootstrap-server", bootstrap, "--topic", f"scale-{n}", "--partitions",
                str(count), "--replication-factor", "3")
            left -= count
            n += 1
        created = time.monotonic() - started
        wait_until("all replicas in sync after creation", in_sync(urls, args.partitions), 600, 1.0)
        print(f"creation: topics created in {created:.1f} s, every replica in sync after "
              f"{time.monotonic() - started:.1f} s (target 30 s)", flush=True)

        fetches0 = [scrape(u).get(FOLLOWER_FETCHES, 0) for u in urls]   # (a scrape costs CPU: outside the window)
        f0 = time.monotonic()
        time.sleep(3)
        before = [pc.cpu_seconds([p]) for p in pids.values()]
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)
        seconds = time.monotonic() - t0
        cpu = [(pc.cpu_seconds([p]) - b) / seconds * 100 for p, b in zip(pids.values(), before)]
        after = [scrape(u) for u in urls]
        fetch_s = time.monotonic() - f0
        fetches = [a.get(FOLLOWER_FETCHES, 0) - f for a, f in zip(after, fetches0)]
        print(f"idle (sessions {'off' if args.no_sessions else 'on'}): CPU "
              f"{' / '.join(f'{c:.1f}%' for c in cpu)} (target 3 %); RSS "
              f"{' / '.join(f'{rss_mb(p)} MB' for p in pids.values())} (target 300 MB); open files "
              f"{' / '.join(str(open_files(p)) for p in pids.values())}; follower fetches served "
              f"{' / '.join(f'{x / fetch_s:.1f}/s' for x in fetches)}", flush=True)
        if args.idle_only:
            return 0

        zk = KazooStore(f"127.0.0.1:{args.zookeeper_port}", 30000)
        zk.start(10)
        controller, leaders = metadata(ports, list(ports))
        led = {tp for tp, b in leaders.items() if b == controller}
        others = [b for b in ports if b != controller]
        killed = time.monotonic()
        cli("cluster", "kill", str(controller), "--data-dir", tmp)
        moved = LedElsewhere(zk, ports, others, led, controller)
        took = wait_until("new leaders after SIGKILL", moved, 300, 0.2)
        print(f"SIGKILL of the controller (broker {controller}, leader of {len(led)}): every partition it led "
              f"has a new leader after {took:.1f} s in the brokers' metadata, {moved.decided_s:.1f} s in ZooKeeper "
              f"(target {args.session_ms / 1000 + 2:.0f} s)", flush=True)
        took = restart(zk, tmp, controller)
        print(f"restart of broker {controller}: back in every ISR after {took:.1f} s "
              f"({time.monotonic() - killed:.1f} s after the kill; target 30 s)", flush=True)

        controller, leaders = metadata(ports, list(ports))
        counts = {b: sum(1 for x in leaders.values() if x == b) for b in ports}
        victim = controller if args.stop_controller else max(counts, key=lambda b: counts[b])
        led = {tp for tp, b in leaders.items() if b == victim}
        others = [b for b in ports if b != victim]
        stopping = subprocess.Popen([sys.executable, "-m", "strandline.cli.main", "cluster", "stop", str(victim),
                                     "--data-dir", tmp], stdout=subprocess.DEVNULL)
        signalled = time.monotonic()
        moved = LedElsewhere(zk, ports, others, led, victim)
        took = wait_until("new leaders after SIGTERM", moved, 300, 0.2)
        stopping.wait(120)   # `cluster stop` returns once the broker's process is gone
        exited = time.monotonic() - signalled
        print(f"controlled shutdown of broker {victim} (leader of {len(led)}): every partition it led has a new "
              f"leader after {took:.1f} s in the brokers' metadata, {moved.decided_s:.1f} s in ZooKeeper (target 3 s); its "
              f"process exited after {exited:.1f} s", flush=True)
        took = restart(zk, tmp, victim)
        print(f"restart of broker {victim}: back in every ISR after {took:.1f} s (target 30 s)", flush=True)
        zk.stop()
    finally:
        pc.stop_cluster(proc, tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
