"""``strandline up``: an embedded ZooKeeper and N broker processes in the foreground.

``up`` holds a lock on its data directory (``<data-dir>/.lock``) while it runs, and each broker
one on its log directory, so that a second ``up`` or broker on the same data refuses to start.
``up`` signals only brokers of its own cluster: its children, and those that ``strandline
cluster start`` started again for it (recorded in ``cluster.json``).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from strandline.errors import StrandlineError
from strandline.launch.brokers import BrokerProcess, broker_properties, wait_ready
from strandline.launch.foreground import Foreground, lock_data_dir, write_json
from strandline.launch.ports import free_loopback_ports, port_free
from strandline.launch.secure import MECHANISM, SecureCluster, store_users_and_acls
from strandline.launch.secure import prepare as prepare_security
from strandline.launch.process import pid_alive, signal_pid, spawn, stop_processes, wait_gone
from strandline.launch.wait import Waiting, poll_until, wait_for_line, wait_for_membership
from strandline.launch.zookeeper import zookeeper_for
from strandline.runtime.disk import DirectoryLock

BROKER_START_TIMEOUT_S = 120.0
BROKER_STOP_TIMEOUT_S = 30.0       # controlled shutdowns, then SIGKILL
STARTUP_STOP_TIMEOUT_S = 3.0       # a stop during start-up does not wait for controlled shutdowns
CONSOLE_START_TIMEOUT_S = 20.0
OLD_SESSION_MARGIN_S = 5.0         # a broker waits for its old session: the timeout + 5 s at most


def start_console(bootstrap: str, port: int, root: Path,
                  command_config: Path | None = None) -> tuple[subprocess.Popen[bytes] | None, str | None]:
    """``strandline console`` for the cluster, on ``port`` or (taken) any free one (with
    ``--command-config command_config`` when given); its URL, or None with a warning when it does
    not start."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            print(f"strandline up: port {port} for the console is taken; using another", file=sys.stderr)
            port = 0
    cmd = [sys.executable, "-m", "strandline.cli.main", "console", "--bootstrap-server", bootstrap,
           "--port", str(port), "--lab-dir", str(Path("lab-runs").resolve())]
    if command_config is not None:
        cmd += ["--command-config", str(command_config)]
    proc = spawn(cmd, subprocess.PIPE, root / "console.log")
    try:
        return proc, wait_for_line(proc, "console=", CONSOLE_START_TIMEOUT_S).split("=", 1)[1]
    except (RuntimeError, TimeoutError):
        pass
    print(f"strandline up: the console did not start (see {root / 'console.log'})", file=sys.stderr)
    stop_processes([proc], 0.0)
    return None, None


def ports_in_use(num_brokers: int, base_port: int, zookeeper_port: int | None, first_broker_id: int = 1) -> list[str]:
    """The ports a cluster of ``up`` would listen on that are taken now, each with what it is for:
    the brokers' and the embedded ZooKeeper's. (A broker whose default metrics port, its port +
    1000, is taken serves its metrics on another port and says so.)"""
    wanted = [(base_port + i, f"broker {first_broker_id + i}") for i in range(num_brokers)]
    if zookeeper_port is not None:
        wanted.append((zookeeper_port, "ZooKeeper"))
    # probed as the brokers and ZooKeeper bind, with SO_REUSEADDR
    return [f"{port} ({what})" for port, what in wanted if not port_free(port, reuse_address=True)]


def run_up(num_brokers: int, data_dir: str, base_port: int, zookeeper: str | None,
           zookeeper_port: int, overrides: list[str], console_port: int = 0, racks: list[str] | None = None,
           first_broker_id: int = 1, advertised_host: str | None = None, security: str | None = None,
           connect_with: Callable[[Path], Callable[[str], Any]] | None = None) -> int:
    """Run a cluster until SIGINT or SIGTERM: brokers ``first_broker_id``, ``first_broker_id`` + 1, ...
    on ports ``base_port``, ``base_port`` + 1, ... of 127.0.0.1, each advertising ``advertised_host``
    (a name that resolves to this machine, e.g. ``localhost``) instead of 127.0.0.1 when given.
    ``racks``: the Nth broker's ``broker.rack`` is the Nth, the list read again from its start when
    there are more brokers than racks.

    ``security`` (``sasl_ssl``, ``ssl``, ``sasl_plaintext``): a secured cluster (:mod:`~strandline.
    launch.secure`), waited for with the connections ``connect_with(admin's client properties)``
    makes."""
    root = Path(data_dir).resolve()
    lock = lock_data_dir(root, "strandline up")
    busy = ports_in_use(num_brokers, base_port, None if zookeeper else zookeeper_port, first_broker_id)
    if busy:
        lock.release()
        print(f"strandline up: port(s) in use on 127.0.0.1: {', '.join(busy)}; stop what listens there or "
              f"choose others (--base-port, --zookeeper-port)", file=sys.stderr)
        return 2
    (root / "cluster.json").unlink(missing_ok=True)    # a previous run's: its pids are not ours
    run = Foreground()
    run.catch_signals()
    zk = None
    console: subprocess.Popen[bytes] | None = None
    brokers: list[BrokerProcess] = []
    try:
        secured = prepare_security(root, security, [advertised_host] if advertised_host else []) \
            if security else None
        protocol = secured.protocol if secured else "PLAINTEXT"
        zk_connect, zk = zookeeper_for(zookeeper, root / "zookeeper", zookeeper_port)
        zk_info: dict[str, Any] = {"connect": zk_connect, "pid": zk.pid if zk else None}
        if secured is not None:
            store_users_and_acls(secured, zk_connect)
        for i in range(num_brokers):
            b = BrokerProcess(first_broker_id + i, base_port + i, root)
            advertised = [f"advertised.listeners={protocol}://{advertised_host}:{b.port}"] if advertised_host else []
            b.write_config(broker_properties(b.id, b.port, b.log_dir, zk_connect,
                                             racks[i % len(racks)] if racks else None, num_brokers,
                                             extra=advertised + (secured.broker_lines() if secured else []),
                                             protocol=protocol), secret=secured is not None)
            brokers.append(b)
            b.start(overrides)
        wait_ready(brokers, BROKER_START_TIMEOUT_S, Waiting("strandline up: waiting for the brokers to start"))
        admin_properties = secured.properties_path("admin") if secured else None
        wait_for_membership(brokers, BROKER_START_TIMEOUT_S,
                            progress=Waiting("strandline up: waiting for every broker to learn of all the others"),
                            connect=connect_with(admin_properties) if connect_with and admin_properties else None)
        cluster: dict[str, Any] = {"zookeeper": zk_info, "overrides": list(overrides),
                   "brokers": [{"id": b.id, "port": b.port, "pid": b.pid, "log_dir": str(b.log_dir),
                                "metrics": b.metrics_url} for b in brokers]}
        bootstrap = ",".join(f"{advertised_host}:{b.port}" if advertised_host else b.address for b in brokers)
        if secured is not None:
            cluster["security"] = {"mode": secured.mode, "protocol": protocol,
                                   "client_properties": str(secured.properties_path("client")),
                                   "admin_properties": str(secured.properties_path("admin"))}
        if console_port:
            console, cluster["console"] = start_console(bootstrap, console_port, root, admin_properties)
        write_cluster_json(root, cluster)
        run.started()
        for b in brokers:
            if b.metrics_url:
                print(f"broker {b.id}: metrics {b.metrics_url}/metrics, status {b.metrics_url}/status", flush=True)
        if cluster.get("console"):
            print(f"console={cluster['console']}", flush=True)
        if secured is not None:
            print_security(secured)
        print("bootstrap.servers=" + bootstrap, flush=True)
        own = {b.pid for b in brokers}

        def started_again() -> list[tuple[int, int]]:
            """The brokers `cluster start` started again (their pids in cluster.json, not ours)."""
            try:
                listed = read_cluster_json(root)["brokers"]
            except StrandlineError:
                return []
            return [(b["id"], b["pid"]) for b in listed if b.get("pid") and b["pid"] not in own]
        run.supervise([(b.id, b.proc) for b in brokers], lambda broker_id, code: print(
            f"strandline up: broker {broker_id} exited with code {code}", file=sys.stderr, flush=True),
            started_again, lambda broker_id, pid: print(
                f"strandline up: broker {broker_id} (pid {pid}, started again by `strandline cluster start`) "
                f"exited", file=sys.stderr, flush=True))
        return 0
    except StrandlineError as exc:
        print(f"strandline up: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("strandline up: interrupted during start-up; stopping", file=sys.stderr)
        return 130
    finally:
        run.ignore_signals()
        if not run.starting:
            print(f"strandline up: stopping {len(brokers)} broker(s) (each moves its leaderships away first: a "
                  f"controlled shutdown){' and ZooKeeper' if zk is not None else ''}", file=sys.stderr, flush=True)
        if console is not None:
            stop_processes([console], 5.0)
        stop_brokers(root, brokers, STARTUP_STOP_TIMEOUT_S if run.starting else BROKER_STOP_TIMEOUT_S)
        if zk is not None:
            zk.stop()
        lock.release()


def print_security(secured: SecureCluster) -> None:
    """Where the clients' files are, and the keys in them (the passwords stay in the files)."""
    what = {"SASL_SSL": f"TLS and SASL {MECHANISM}", "SASL_PLAINTEXT": f"SASL {MECHANISM} without TLS",
            "SSL": "TLS with client certificates (ssl.client.auth=required)"}[secured.protocol]
    print(f"security: {secured.protocol} listeners ({what}), ACLs on; users admin (a super user) and client "
          f"(every topic, group and transactional id); CA certificate {secured.ca_path}", flush=True)
    for user in ("client", "admin"):
        keys = [line.split("=", 1)[0] for line in secured.client_lines(user) if "=" in line and
                not line.startswith("#")]
        print(f"{user}.properties={secured.properties_path(user)}", flush=True)
        print(f"  keys: {', '.join(keys)}; pass it as --command-config (mode 0600: "
              f"{'it holds the password' if secured.sasl else 'it names the key and certificate'} of {user})",
              flush=True)


def stop_brokers(root: Path, children: list[BrokerProcess], timeout_s: float) -> None:
    """SIGTERM our brokers (children, and those `strandline cluster start` started again), wait for
    them all up to ``timeout_s``, then SIGKILL those left."""
    stop_processes([b.proc for b in children if b.proc is not None], timeout_s,
                   pids=restarted_brokers(root, children))


# -- `strandline cluster kill|stop|start`: failures at the keyboard ----------------------------------


def write_cluster_json(root: Path, cluster: dict[str, Any]) -> None:
    write_json(root / "cluster.json", cluster)


def read_cluster_json(root: Path) -> dict[str, Any]:
    try:
        info: dict[str, Any] = json.loads((root / "cluster.json").read_text())
        return info
    except FileNotFoundError:
        raise StrandlineError(f"no cluster.json in {root}: is `strandline up --data-dir {root}` running?") from None
    except (OSError, ValueError) as exc:
        raise StrandlineError(f"cannot read {root / 'cluster.json'}: {exc}") from None


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
    own = {b.pid for b in children if b.proc is not None}
    try:
        info = json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):
        return []
    return [b["pid"] for b in info.get("brokers", [])
            if b.get("pid") not in own and is_broker(b.get("pid"), root, b["id"])]


def _broker_entry(info: dict[str, Any], broker_id: int, root: Path) -> dict[str, Any]:
    for entry in info.get("brokers", []):
        if entry["id"] == broker_id:
            return cast("dict[str, Any]", entry)
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
        if pid is None or not is_broker(pid, root, broker_id):
            raise StrandlineError(f"broker {broker_id} is not running")
        signal_pid(pid, signal.SIGKILL if action == "kill" else signal.SIGTERM)
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
    broker = BrokerProcess(broker_id, entry["port"], root)
    log_dir = DirectoryLock(entry.get("log_dir") or broker.log_dir)
    if not log_dir.acquire():
        raise StrandlineError(f"broker {broker_id} is already running: {log_dir.path} is held by {log_dir.holder()}")
    log_dir.release()
    if not broker.config_path.exists():
        raise StrandlineError(f"no {broker.config_path}")
    log_start = broker.log_path.stat().st_size if broker.log_path.exists() else 0
    broker.start(info.get("overrides", []), death_signal=None)     # it outlives this command
    session_ends: float | None = None

    def detail() -> str | None:
        nonlocal session_ends
        if session_ends is None:
            session_ends = _old_session_deadline(broker.log_path, log_start)
        if session_ends is None:
            return None
        return (f"its previous ZooKeeper session expires within {max(session_ends - time.monotonic(), 0):.0f} s "
                f"(zookeeper.session.timeout.ms); then it registers again")

    wait_ready([broker], timeout_s, Waiting(f"Waiting for broker {broker_id} to start"), detail)
    entry["pid"] = broker.pid
    entry["metrics"] = broker.metrics_url
    write_cluster_json(root, info)
    print(f"Broker {broker_id} started (pid {broker.pid}).")
    return 0


@dataclass
class UpCluster:
    """``strandline up`` run as a child of this process (by tests and benchmarks): its data in
    ``data_dir``, its stderr in ``stderr`` or ``<data_dir>-up.log``, started until it prints its bootstrap
    servers, and stopped as at the keyboard: SIGINT, then SIGKILL after a timeout."""

    data_dir: Path
    brokers: int
    base_port: int
    zk_port: int
    overrides: list[str] = field(default_factory=list)
    racks: str = ""          # `strandline up --racks`
    console: bool = True     # the web console, on its default port or any free one
    env: dict[str, str] | None = None   # up's environment (its brokers inherit it)
    stderr: Path | None = None          # where up's own lines go (default: ``<data_dir>-up.log``)
    security: str = ""       # `strandline up --security` (sasl_ssl, ssl, sasl_plaintext)
    stdout: Path | None = None          # where up's standard output goes (default: a pipe, read until bootstrap)
    proc: subprocess.Popen[bytes] | None = None
    bootstrap: str = ""

    @classmethod
    def on_free_ports(cls, parent: Path, brokers: int, *, overrides: Sequence[str] = (), racks: str = "") -> "UpCluster":
        """A cluster of ``brokers`` brokers (not started) with its data in ``parent/data``, on free
        loopback ports: ZooKeeper's, then one per broker."""
        ports = free_loopback_ports(brokers + 1)
        data = parent / "data"
        data.mkdir(parents=True, exist_ok=True)
        return cls(data, brokers, ports[1], ports[0], list(overrides), racks)

    @property
    def log_path(self) -> Path:
        return self.stderr or self.data_dir.parent / f"{self.data_dir.name}-up.log"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "strandline.cli.main", "up", "--brokers", str(self.brokers),
               "--data-dir", str(self.data_dir), "--base-port", str(self.base_port),
               "--zookeeper-port", str(self.zk_port)]
        for item in self.overrides:
            cmd += ["--override", item]
        if self.racks:
            cmd += ["--racks", self.racks]
        if not self.console:
            cmd += ["--console-port", "0"]
        if self.security:
            cmd += ["--security", self.security]
        return cmd

    def start(self, timeout: float = 90) -> "UpCluster":
        if self.stdout is None:
            self.proc = spawn(self.command(), subprocess.PIPE, self.log_path, env=self.env)   # SIGTERM if we die
            self.bootstrap = wait_for_line(self.proc, "bootstrap.servers=", timeout).split("=", 1)[1].strip()
            return self
        self.proc = spawn(self.command(), self.stdout, self.log_path, env=self.env, fresh_stdout=True)
        proc, out = self.proc, self.stdout

        def bootstrap_line() -> str | None:
            printed = out.read_text(errors="replace").splitlines()
            line = next((line for line in printed if line.startswith("bootstrap.servers=")), None)
            if line is None and proc.poll() is not None:
                raise RuntimeError(f"up exited with {proc.returncode} before printing its bootstrap servers: "
                                   f"see {self.log_path}")
            return line
        line = poll_until(bootstrap_line, timeout, 0.1, "up's bootstrap.servers line")
        assert line is not None             # poll_until returns a true value
        self.bootstrap = line.split("=", 1)[1]
        return self

    @property
    def printed(self) -> str:
        """What up printed on its standard output (with ``stdout`` given)."""
        return self.stdout.read_text(errors="replace") if self.stdout is not None else ""

    @property
    def info(self) -> dict[str, Any]:
        return read_cluster_json(self.data_dir)

    def broker_pid(self, broker_id: int) -> int:
        return int(_broker_entry(self.info, broker_id, self.data_dir)["pid"])

    def stop(self, timeout: float = 60) -> int:
        """SIGINT (up stops its brokers and ZooKeeper), SIGKILL after ``timeout``; up's exit code."""
        if self.proc is None:
            return 0
        stop_processes([self.proc], timeout, sig=signal.SIGINT)
        code = self.proc.returncode
        self.proc = None
        return code
