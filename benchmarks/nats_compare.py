"""Strandline RF=3 acks=all next to NATS JetStream R3, in the same run on this machine.

Both run three nodes on loopback sharing the machine's cores with their clients; each writes
1 KiB messages to one replicated log (a stream of 3 replicas; a topic of one partition with
replication factor 3 and min.insync.replicas=2), as fast as it can for about ``--seconds``, with
``--processes`` client processes each:

- NATS: nats-server from Debian (`apt install nats-server`), JetStream file storage,
  ``num_replicas=3``, nats-py publishing asynchronously with ``--window`` acknowledgements
  outstanding per process (256 by default: the best R3 window measured here);
- Strandline: ``strandline bench produce --acks all`` (librdkafka).

It prints each one's MB/s and acknowledgement latency and the ratio. NATS does not fsync its
acknowledged writes by default, and neither does Strandline. A benchmark, not a test:

    .venv/bin/python benchmarks/nats_compare.py [--seconds 10] [--processes 2] [--window 256]

It needs `nats-server` on the PATH and nats-py in this Python (`pip install nats-py`; `make bench`
installs it), and stops every process it starts by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import produce_consume as pc  # noqa: E402

RECORD = 1024
CLIENT_PORT, ROUTE_PORT = 14221, 16221


def start_nats(root: str) -> list[subprocess.Popen]:
    procs = []
    routes = ", ".join(f"nats-route://127.0.0.1:{ROUTE_PORT + i}" for i in range(3))
    for i in range(3):
        conf = os.path.join(root, f"n{i + 1}.conf")
        with open(conf, "w") as f:
            f.write(f"server_name: n{i + 1}\nlisten: 127.0.0.1:{CLIENT_PORT + i}\n"
                    f"jetstream {{ store_dir: {root}/data{i + 1}, max_memory_store: 1GB, max_file_store: 8GB }}\n"
                    f"cluster {{ name: C1, listen: 127.0.0.1:{ROUTE_PORT + i}, routes: [{routes}] }}\n")
        procs.append(subprocess.Popen(["nats-server", "-c", conf], stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(root, f"n{i + 1}.log"), "w")))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def _quiet(exc: Exception) -> None:
    """nats-py reports connection errors here (it prints them otherwise): the retry loop handles them."""


async def _create_stream(deadline: float) -> None:
    import nats
    while True:
        try:
            nc = await nats.connect(f"nats://127.0.0.1:{CLIENT_PORT}", connect_timeout=2, allow_reconnect=False,
                                    error_cb=_quiet)
            js = nc.jetstream()
            await js.add_stream(name="BENCH", subjects=["bench"], num_replicas=3, storage="file")
            await nc.close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def nats_worker(index: int, seconds: float, window: int, out: multiprocessing.Queue) -> None:
    async def run() -> None:
        import nats
        nc = await nats.connect(f"nats://127.0.0.1:{CLIENT_PORT + index % 3}")
        js = nc.jetstream(publish_async_max_pending=window)
        payload = os.urandom(RECORD)
        latencies: list[float] = []
        pending: set = set()

        def done(started: float):
            return lambda fut: (pending.discard(fut), fut.exception() is None and latencies.append(
                time.perf_counter() - started))

        end = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            fut = await js.publish_async("bench", payload)
            pending.add(fut)
            fut.add_done_callback(done(time.perf_counter()))
        await js.publish_async_completed()
        elapsed = time.perf_counter() - start
        await nc.close()
        out.put((len(latencies), elapsed, sorted(latencies)))

    asyncio.run(run())


def run_nats(args: argparse.Namespace) -> tuple[float, float, float]:
    root = tempfile.mkdtemp(prefix="strandline-bench-nats-")
    procs = start_nats(root)
    try:
        asyncio.run(_create_stream(time.monotonic() + 30))
        out: multiprocessing.Queue = multiprocessing.Queue()
        workers = [multiprocessing.Process(target=nats_worker, args=(i, args.seconds, args.window, out))
                   for i in range(args.processes)]
        for w in workers:
            w.start()
        results = [out.get(timeout=args.seconds + 120) for _ in workers]
        for w in workers:
            w.join(30)
        count = sum(r[0] for r in results)
        elapsed = max(r[1] for r in results)
        latencies = sorted(x for r in results for x in r[2])
        return (count * RECORD / 1024 / 1024 / elapsed, pc.percentile(latencies, 0.5) * 1000,
                pc.percentile(latencies, 0.99) * 1000)
    finally:
        stop(procs)
        shutil.rmtree(root, ignore_errors=True)


def run_strandline(args: argparse.Namespace, records: int) -> str:
    pc.TOPIC_OPTIONS[:] = ["--replication-factor", "3", "--config", "min.insync.replicas=2"]
    tmp = tempfile.mkdtemp(prefix="strandline-bench-vs-nats-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3, console=False)
    try:
        pc.create_topic(bootstrap, "bench", 1)
        result = subprocess.run([sys.executable, "-m", "strandline.cli.main", "bench", "produce", "--topic", "bench",
                                 "--num-records", str(records), "--record-size", str(RECORD), "--acks", "all",
                                 "--processes", str(args.processes), "--bootstrap-server", bootstrap],
                                capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            raise RuntimeError(f"bench produce failed: {result.stderr.strip()[-300:]}")
        return lines[-1]
    finally:
        pc.stop_cluster(proc, tmp)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="NATS's run")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--window", type=int, default=256, help="NATS acknowledgements outstanding per process")
    parser.add_argument("--num-records", type=int, default=1_000_000,
                        help="Strandline's records: 3 GB written in all, what this VM's page cache takes without "
                             "throttling the writers (larger runs measure its disk)")
    parser.add_argument("--base-port", type=int, default=31392)
    parser.add_argument("--zookeeper-port", type=int, default=32481)
    args = parser.parse_args()
    if shutil.which("nats-server") is None:
        print("nats_compare: nats-server is not on the PATH (apt install nats-server)", file=sys.stderr)
        return 2
    try:
        import nats  # noqa: F401
    except ImportError:
        print("nats_compare: nats-py is not installed in this Python (pip install nats-py)", file=sys.stderr)
        return 2
    version = subprocess.run(["nats-server", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"NATS JetStream R3 ({version}), {args.processes} nats-py processes, window {args.window}, "
          f"{args.seconds:g} s:", flush=True)
    nats_mb, p50, p99 = run_nats(args)
    print(f"  {nats_mb:.1f} MB/s, ack p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    records = args.num_records
    print(f"Strandline RF=3 acks=all, one partition, {args.processes} bench processes, {records} records:",
          flush=True)
    line = run_strandline(args, records)
    print(f"  {line}")
    mb = float(line.split("(")[1].split()[0])
    print(f"Strandline / NATS R3: {mb / nats_mb:.1f}x ({mb:.1f} / {nats_mb:.1f} MB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
