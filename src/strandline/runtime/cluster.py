"""``strandline up``: an embedded ZooKeeper and N broker processes in the foreground.

``up`` holds a lock on its data directory (``<data-dir>/.lock``) while it runs, and each broker
one on its log directory, so that a second ``up`` or broker on the same data refuses to start.
``up`` signals only brokers of its own cluster: its children, and those that ``strandline
cluster start`` started again for it (recorded in ``cluster.json``).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from strandline.errors import StrandlineError
from strandline.runtime.disk import DirectoryLock
from strandline.runtime.zookeeper import EmbeddedZooKeeper

BROKER_START_TIMEOUT_S = 120.0
BROKER_STOP_TIMEOUT_S = 30.0       # controlled shutdowns, then SIGKILL
STARTUP_STOP_TIMEOUT_S = 3.0       # a stop during start-up does not wait for controlled shutdowns
CONSOLE_START_TIMEOUT_S = 20.0
OLD_SESSION_MARGIN_S = 5.0         # a broker waits for its old session: the timeout + 5 s at most


def _die_with_parent() -> None:
    """Ask the kernel to SIGTERM this child when `strandline up` dies, so no broker is orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


#: the internal topics' replication factor keys (default 3), and Kafka's own default
INTERNAL_REPLICATION_KEYS = ("offsets.topic.replication.factor", "transaction.state.log.replication.factor")
INTERNAL_REPLICATION_DEFAULT = 3


def broker_properties(broker_id: int, port: int, log_dir: Path, zk_connect: str, rack: str | None = None,
                      cluster_size: int = INTERNAL_REPLICATION_DEFAULT) -> str:
    """A broker's ``server.properties``. In a cluster of fewer than 3 brokers the internal topics
    get one replica per broker (as Kafka's single-broker ``config/server.properties`` sets both keys
    to 1): they are never created with fewer replicas than their replication factor."""
    small = [f"{key}={cluster_size}" for key in INTERNAL_REPLICATION_KEYS] \
        if 0 < cluster_size < INTERNAL_REPLICATION_DEFAULT else []
    return "\n".join([
        "# Written by `strandline up`; extra settings come from --override.",
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        f"log.dirs={log_dir}",
        f"zookeeper.connect={zk_connect}",
        *([f"broker.rack={rack}"] if rack else []),
        *small,
        "",
    ])


class BrokerProcess:
    def __init__(self, broker_id: int, port: int, root: Path, zk_connect: str, overrides: list[str],
                 rack: str | None = None, cluster_size: int = INTERNAL_REPLICATION_DEFAULT) -> None:
        self.id = broker_id
        self.port = port
        self.dir = root / f"broker-{broker_id}"
        self.log_dir = self.dir / "logs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "server.properties"
        self.config_path.write_text(broker_properties(broker_id, port, self.log_dir, zk_connect, rack, cluster_size))
        self.overrides = overrides
        self.proc: subprocess.Popen | None = None
        self.exit_reported = False
        self.metrics_url: str | None = None     # http://host:port of its /metrics and /status

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



class Waiting:
    """Says on stderr what a command waits for, once the wait passes 2 s, then every 5 s."""

    FIRST_S, EVERY_S = 2.0, 5.0

    def __init__(self, what: str) -> None:
        self.what = what
        self.start = time.monotonic()
        self.next = self.start + self.FIRST_S

    def tick(self, detail: Callable[[], str | None] | None = None) -> None:
        """``detail()`` says more; it runs only when a line is printed."""
        now = time.monotonic()
        if now >= self.next:
            more = detail() if detail is not None else None
            print(f"{self.what} ({now - self.start:.0f} s){': ' + more if more else ''}", file=sys.stderr,
                  flush=True)
            self.next = now + self.EVERY_S


def ready_field(output: bytes, name: str) -> str | None:
    """A ``name=value`` field of a broker's ready line (``metrics=http://host:port``)."""
    from strandline.runtime.broker_main import READY_PREFIX

    for line in output.decode(errors="replace").splitlines():
        if line.startswith(READY_PREFIX):
            for item in line.split():
                key, sep, value = item.partition("=")
                if sep and key == name:
                    return value
    return None


def wait_ready(brokers: list[BrokerProcess], timeout_s: float) -> None:
    """Wait until every broker printed its ready line, or fail naming the broker that did not."""
    from strandline.runtime.broker_main import READY_PREFIX

    selector = selectors.DefaultSelector()
    for b in brokers:
        assert b.proc is not None and b.proc.stdout is not None
        os.set_blocking(b.proc.stdout.fileno(), False)
        selector.register(b.proc.stdout, selectors.EVENT_READ, b)
    waiting = {b.id: b for b in brokers}
    buffers = {b.id: b"" for b in brokers}
    deadline = time.monotonic() + timeout_s
    progress = Waiting("strandline up: waiting for the brokers to start")
    while waiting:
        progress.tick(lambda: f"broker(s) {', '.join(str(i) for i in sorted(waiting))} not ready yet; "
                              f"{_last_log_line(waiting[min(waiting)])}")
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
                    b.metrics_url = ready_field(buffers[b.id], "metrics")
                    waiting.pop(b.id, None)
                    selector.unregister(key.fileobj)
        for b in list(waiting.values()):
            if b.proc is not None and b.proc.poll() is not None:
                raise StrandlineError(f"broker {b.id} exited with code {b.proc.returncode}: "
                                      f"{b.log_tail(1) or 'see ' + str(b.dir / 'broker.log')}")
    selector.close()


def _last_log_line(b: BrokerProcess) -> str:
    """The last line of a broker's log, without its timestamp, to say what it is doing."""
    line = b.log_tail(1).strip()
    parts = line.split(" ", 3)
    return f"broker {b.id}: " + (parts[3] if len(parts) == 4 else line or "starting")


def wait_for_membership(brokers: list[BrokerProcess], timeout_s: float) -> None:
    """Until every broker's metadata lists all brokers (the controller has told them all)."""
    from strandline.runtime.client import KafkaConnection

    deadline = time.monotonic() + timeout_s
    want = {b.id for b in brokers}
    progress = Waiting("strandline up: waiting for every broker to learn of all the others")
    for b in brokers:
        while True:
            progress.tick(lambda: f"broker {b.id} does not list them all yet")  # noqa: B023  (called at once)
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


def lock_data_dir(root: Path) -> DirectoryLock:
    lock = DirectoryLock(root)
    if not lock.acquire():
        raise StrandlineError(f"data directory {root} is in use by another `strandline up` ({lock.holder()})")
    return lock


def start_console(bootstrap: str, port: int, root: Path) -> tuple[subprocess.Popen | None, str | None]:
    """``strandline console`` for the cluster, on ``port`` or (taken) any free one; its URL, or
    None with a warning when it does not start."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            print(f"strandline up: port {port} for the console is taken; using another", file=sys.stderr)
            port = 0
    cmd = [sys.executable, "-m", "strandline.cli.main", "console", "--bootstrap-server", bootstrap,
           "--port", str(port), "--lab-dir", str(Path("lab-runs").resolve())]
    log_file = open(root / "console.log", "ab")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, start_new_session=True)
    finally:
        log_file.close()
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    output = b""
    deadline = time.monotonic() + CONSOLE_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        output += proc.stdout.read() or b""
        for line in output.decode(errors="replace").splitlines():
            if line.startswith("console="):
                return proc, line.split("=", 1)[1]
        time.sleep(0.05)
    print(f"strandline up: the console did not start (see {root / 'console.log'})", file=sys.stderr)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    return None, None


def run_up(num_brokers: int, data_dir: str, base_port: int, zookeeper: str | None,
           zookeeper_port: int, overrides: list[str], console_port: int = 0, racks: list[str] | None = None) -> int:
    """Run a cluster until SIGINT or SIGTERM. ``racks``: broker N's ``broker.rack`` is the Nth, the
    list read again from its start when there are more brokers than racks."""
    root = Path(data_dir).resolve()
    lock = lock_data_dir(root)
    (root / "cluster.json").unlink(missing_ok=True)    # a previous run's: its pids are not ours
    stopping = False
    starting = True

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if starting:
            raise KeyboardInterrupt   # stop waiting for ZooKeeper and the brokers at once

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    zk = None
    console: subprocess.Popen | None = None
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
            b = BrokerProcess(i + 1, base_port + i, root, zk_connect, overrides,
                              racks[i % len(racks)] if racks else None, num_brokers)
            brokers.append(b)
            b.start()
        wait_ready(brokers, BROKER_START_TIMEOUT_S)
        wait_for_membership(brokers, BROKER_START_TIMEOUT_S)
        cluster = {"zookeeper": zk_info, "overrides": list(overrides),
                   "brokers": [{"id": b.id, "port": b.port, "pid": b.proc.pid if b.proc else None,
                                "log_dir": str(b.log_dir), "metrics": b.metrics_url} for b in brokers]}
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
        if console_port:
            console, cluster["console"] = start_console(bootstrap, console_port, root)
        write_cluster_json(root, cluster)
        for b in brokers:
            if b.metrics_url:
                print(f"broker {b.id}: metrics {b.metrics_url}/metrics, status {b.metrics_url}/status", flush=True)
        if cluster.get("console"):
            print(f"console={cluster['console']}", flush=True)
        print("bootstrap.servers=" + bootstrap, flush=True)
        starting = False
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
    except KeyboardInterrupt:
        print("strandline up: interrupted during start-up; stopping", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if console is not None and console.poll() is None:
            console.terminate()
            try:
                console.wait(5)
            except subprocess.TimeoutExpired:
                console.kill()
                console.wait()
        stop_brokers(root, brokers, STARTUP_STOP_TIMEOUT_S if starting else BROKER_STOP_TIMEOUT_S)
        if zk is not None:
            zk.stop()
        lock.release()


def stop_brokers(root: Path, children: list[BrokerProcess], timeout_s: float) -> None:
    """SIGTERM our brokers (children, and those `strandline cluster start` started again), wait for
    them all up to ``timeout_s``, then SIGKILL those left."""
    own = [b.proc for b in children if b.proc is not None]
    restarted = restarted_brokers(root, children)
    for proc in own:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for pid in restarted:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in own:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in restarted:
        if not wait_gone(pid, max(0.0, deadline - time.monotonic())):
            _signal(pid, signal.SIGKILL)
            wait_gone(pid, 5.0)


# -- `strandline cluster kill|stop|start`: failures at the keyboard ----------------------------------


def write_cluster_json(root: Path, cluster: dict) -> None:
    tmp = root / "cluster.json.tmp"
    tmp.write_text(json.dumps(cluster, indent=2) + "\n")
    os.replace(tmp, root / "cluster.json")


def read_cluster_json(root: Path) -> dict:
    try:
        return json.loads((root / "cluster.json").read_text())
    except FileNotFoundError:
        raise StrandlineError(f"no cluster.json in {root}: is `strandline up --data-dir {root}` running?") from None
    except (OSError, ValueError) as exc:
        raise StrandlineError(f"cannot read {root / 'cluster.json'}: {exc}") from None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _old_session_deadline(log_path: Path, offset: int) -> float | None:
    """When the ZooKeeper session of a killed broker's previous life ends, from the line its new
    life logs while it waits for it (None until it does)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    match = re.search(r"waiting up to (\d+) s for that session to expire", text)
    return time.monotonic() + float(match.group(1)) - OLD_SESSION_MARGIN_S if match else None


def wait_gone(pid: int, timeout_s: float, progress: Waiting | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        if progress is not None:
            progress.tick()
        time.sleep(0.02)
    return True


def is_broker(pid: int | None, root: Path, broker_id: int) -> bool:
    """Whether ``pid`` is alive and runs broker ``broker_id`` of the cluster in ``root`` (a pid in
    cluster.json may have been reused by another process since)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return str(root / f"broker-{broker_id}" / "server.properties") in args


def restarted_brokers(root: Path, children: list[BrokerProcess]) -> list[int]:
    """Pids in cluster.json that are not `up`'s own children (brokers started again by hand)."""
    own = {b.proc.pid for b in children if b.proc is not None}
    try:
        info = json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):
        return []
    return [b["pid"] for b in info.get("brokers", [])
            if b.get("pid") not in own and is_broker(b.get("pid"), root, b["id"])]


def _broker_entry(info: dict, broker_id: int, root: Path) -> dict:
    for entry in info.get("brokers", []):
        if entry["id"] == broker_id:
            return entry
    known = ", ".join(str(b["id"]) for b in info.get("brokers", []))
    raise StrandlineError(f"no broker {broker_id} in {root / 'cluster.json'} (brokers: {known})")


def cluster_action(action: str, broker_id: int, data_dir: str, timeout_s: float = 90.0) -> int:
    """SIGKILL, SIGTERM (controlled shutdown) or start again one broker of a running `up`. The broker's
    modules are imported only to start one: a signal goes out without the second they take to load."""
    root = Path(data_dir).resolve()
    running = DirectoryLock(root)
    if running.acquire():
        running.release()
        raise StrandlineError(f"no `strandline up --data-dir {root}` is running")
    info = read_cluster_json(root)
    entry = _broker_entry(info, broker_id, root)
    pid = entry.get("pid")
    if action in ("kill", "stop"):
        if not is_broker(pid, root, broker_id):
            raise StrandlineError(f"broker {broker_id} is not running")
        _signal(pid, signal.SIGKILL if action == "kill" else signal.SIGTERM)
        if not wait_gone(pid, timeout_s, Waiting(f"Waiting for broker {broker_id} to stop"
                                                 + (" (a controlled shutdown moves its leaderships first)"
                                                    if action == "stop" else ""))):
            raise StrandlineError(f"broker {broker_id} (pid {pid}) did not stop within {timeout_s:.0f} s")
        entry["pid"] = None
        write_cluster_json(root, info)
        print(f"Broker {broker_id} {'killed' if action == 'kill' else 'stopped'} (pid {pid}).")
        return 0
    if is_broker(pid, root, broker_id):
        raise StrandlineError(f"broker {broker_id} is already running (pid {pid})")
    broker_dir = root / f"broker-{broker_id}"
    log_dir = DirectoryLock(entry.get("log_dir") or broker_dir / "logs")
    if not log_dir.acquire():
        raise StrandlineError(f"broker {broker_id} is already running: {log_dir.path} is held by {log_dir.holder()}")
    log_dir.release()
    from strandline.runtime.broker_main import READY_PREFIX

    config = broker_dir / "server.properties"
    if not config.exists():
        raise StrandlineError(f"no {config}")
    cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config", str(config)]
    for item in info.get("overrides", []):
        cmd += ["--override", item]
    out_path = broker_dir / "broker.out"
    with open(out_path, "wb") as out, open(broker_dir / "broker.log", "ab") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    log_path = broker_dir / "broker.log"
    log_start = log_path.stat().st_size if log_path.exists() else 0
    progress = Waiting(f"Waiting for broker {broker_id} to start")
    session_ends: float | None = None
    while True:
        text = out_path.read_text(errors="replace")
        if READY_PREFIX in text:
            break
        if session_ends is None:
            session_ends = _old_session_deadline(log_path, log_start)
        progress.tick(lambda ends=session_ends: f"its previous ZooKeeper session expires within "
                      f"{max(ends - time.monotonic(), 0):.0f} s (zookeeper.session.timeout.ms); then it registers "
                      f"again" if ends is not None else None)
        if proc.poll() is not None:
            tail = (broker_dir / "broker.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise StrandlineError(f"broker {broker_id} exited with code {proc.returncode}: {' '.join(tail)}")
        if time.monotonic() > deadline:
            raise StrandlineError(f"broker {broker_id} was not ready within {timeout_s:.0f} s")
        time.sleep(0.05)
    entry["pid"] = proc.pid
    entry["metrics"] = ready_field(text.encode(), "metrics")
    write_cluster_json(root, info)
    print(f"Broker {broker_id} started (pid {proc.pid}).")
    return 0
