"""``strandline up``: an embedded ZooKeeper and N broker processes in the foreground."""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from strandline.errors import StrandlineError
from strandline.runtime.broker_main import READY_PREFIX
from strandline.runtime.zookeeper import EmbeddedZooKeeper

BROKER_START_TIMEOUT_S = 120.0


def _die_with_parent() -> None:
    """Ask the kernel to SIGTERM this child when `strandline up` dies, so no broker is orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def broker_properties(broker_id: int, port: int, log_dir: Path, zk_connect: str) -> str:
    return "\n".join([
        "# Written by `strandline up`; extra settings come from --override.",
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={log_dir}",
        f"zookeeper.connect={zk_connect}",
        "",
    ])


class BrokerProcess:
    def __init__(self, broker_id: int, port: int, root: Path, zk_connect: str, overrides: list[str]) -> None:
        self.id = broker_id
        self.port = port
        self.dir = root / f"broker-{broker_id}"
        self.log_dir = self.dir / "logs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "server.properties"
        self.config_path.write_text(broker_properties(broker_id, port, self.log_dir, zk_connect))
        self.overrides = overrides
        self.proc: subprocess.Popen | None = None
        self.exit_reported = False

    def start(self) -> None:
        cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config", str(self.config_path)]
        for item in self.overrides:
            cmd += ["--override", item]
        log_file = open(self.dir / "broker.log", "ab")
        try:
            # Own session: a Ctrl-C reaches only `strandline up`, which then stops brokers in order.
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent, start_new_session=True)
        finally:
            log_file.close()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.dir / "broker.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_ready(brokers: list[BrokerProcess], timeout_s: float) -> None:
    """Wait until every broker printed its ready line, or fail naming the broker that did not."""
    selector = selectors.DefaultSelector()
    for b in brokers:
        assert b.proc is not None and b.proc.stdout is not None
        os.set_blocking(b.proc.stdout.fileno(), False)
        selector.register(b.proc.stdout, selectors.EVENT_READ, b)
    waiting = {b.id: b for b in brokers}
    buffers = {b.id: b"" for b in brokers}
    deadline = time.monotonic() + timeout_s
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ids = ", ".join(str(i) for i in sorted(waiting))
            raise StrandlineError(f"broker(s) {ids} did not become ready within {timeout_s:.0f} s")
        for key, _ in selector.select(min(remaining, 0.5)):
            b: BrokerProcess = key.data
            chunk = key.fileobj.read()  # type: ignore[union-attr]
            if chunk:
                buffers[b.id] += chunk
                if READY_PREFIX.encode() in buffers[b.id]:
                    waiting.pop(b.id, None)
                    selector.unregister(key.fileobj)
        for b in list(waiting.values()):
            if b.proc is not None and b.proc.poll() is not None:
                raise StrandlineError(f"broker {b.id} exited with code {b.proc.returncode}: "
                                      f"{b.log_tail(1) or 'see ' + str(b.dir / 'broker.log')}")
    selector.close()


def wait_for_membership(brokers: list[BrokerProcess], timeout_s: float) -> None:
    """Until every broker's metadata lists all brokers (the controller has told them all)."""
    from strandline.runtime.client import KafkaConnection

    deadline = time.monotonic() + timeout_s
    want = {b.id for b in brokers}
    for b in brokers:
        while True:
            try:
                with KafkaConnection(f"127.0.0.1:{b.port}", timeout_s=5.0) as conn:
                    resp = conn.request(3, 10, {"topics": [], "allow_auto_topic_creation": False})
                if {int(n.node_id) for n in resp.brokers} >= want:
                    break
            except StrandlineError:
                pass
            if time.monotonic() > deadline:
                raise StrandlineError(f"broker {b.id} did not learn of all brokers {sorted(want)} "
                                      f"within {timeout_s:.0f} s")
            time.sleep(0.05)


def run_up(num_brokers: int, data_dir: str, base_port: int, zookeeper: str | None,
           zookeeper_port: int, overrides: list[str]) -> int:
    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    zk = None
    brokers: list[BrokerProcess] = []
    try:
        if zookeeper:
            zk_connect = zookeeper
            zk_info = {"connect": zk_connect, "pid": None}
        else:
            zk = EmbeddedZooKeeper(str(root / "zookeeper"), zookeeper_port)
            zk.start()
            zk_connect = zk.connect_string
            zk_info = {"connect": zk_connect, "pid": zk.pid}
        for i in range(num_brokers):
            b = BrokerProcess(i + 1, base_port + i, root, zk_connect, overrides)
            b.start()
            brokers.append(b)
        wait_ready(brokers, BROKER_START_TIMEOUT_S)
        wait_for_membership(brokers, BROKER_START_TIMEOUT_S)
        cluster = {"zookeeper": zk_info,
                   "brokers": [{"id": b.id, "port": b.port, "pid": b.proc.pid if b.proc else None,
                                "log_dir": str(b.log_dir)} for b in brokers]}
        tmp = root / "cluster.json.tmp"
        tmp.write_text(json.dumps(cluster, indent=2) + "\n")
        os.replace(tmp, root / "cluster.json")
        print("bootstrap.servers=" + ",".join(f"127.0.0.1:{b.port}" for b in brokers), flush=True)
        while not stopping:
            time.sleep(0.2)  # supervise: notice signals and brokers that exit
            for b in brokers:
                if stopping:
                    break
                if b.proc is not None and b.proc.poll() is not None and not b.exit_reported:
                    b.exit_reported = True
                    print(f"strandline up: broker {b.id} exited with code {b.proc.returncode}", file=sys.stderr)
        return 0
    except StrandlineError as exc:
        print(f"strandline up: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for b in brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGTERM)
        for b in brokers:
            b.stop()
        if zk is not None:
            zk.stop()
