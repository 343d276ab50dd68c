"""The lab's own cluster: an embedded ZooKeeper and N broker processes, and the faults it drives.

With a :class:`~strandline.lab.network.LabNetwork` each broker runs in its own network namespace
(so it can be partitioned); without one (no root) everything listens on loopback and only
process faults (SIGKILL, SIGTERM, pause) can be made. Every process is started by the lab,
signalled by its PID and stopped by :meth:`LabCluster.close`, which also removes the network.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from strandline.errors import StrandlineError
from strandline.lab.network import LabNetwork
from strandline.runtime.broker_main import READY_PREFIX
from strandline.runtime.disk import FLUSH_LEDGER_ENV, apply_power_loss
from strandline.runtime.ports import free_loopback_ports
from strandline.runtime.zookeeper import EmbeddedZooKeeper

BROKER_PORT = 9092          # in a namespace every broker has its own address
START_TIMEOUT_S = 60.0


def _prctl():
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()   # looked up here: no dlopen in a child forked from a threaded process


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a broker dies with the lab


@dataclass
class LabBroker:
    id: int
    host: str
    port: int
    dir: Path
    proc: subprocess.Popen | None = None
    paused: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


@dataclass
class LabCluster:
    """``size`` brokers under ``run_dir``; ``overrides`` are broker configuration for all of them."""

    run_dir: Path
    size: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    network: LabNetwork | None = None
    zookeeper: EmbeddedZooKeeper | None = None
    brokers: dict[int, LabBroker] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, self.size + 1))
        ports = free_loopback_ports(1 + self.size) if self.network is None else []
        if self.network is not None:
            self.network.create()
            zk_host, zk_port = self.network.address("zk"), 2181
        else:
            zk_host, zk_port = "127.0.0.1", ports[0]
        self.zookeeper = EmbeddedZooKeeper(self.run_dir / "zookeeper", zk_port, host=zk_host)
        self.zookeeper.start()
        for i in ids:
            if self.network is not None:
                host, port = self.network.address(i), BROKER_PORT
            else:
                host, port = "127.0.0.1", ports[i]
            self.brokers[i] = LabBroker(i, host, port, self.run_dir / f"broker-{i}")
        for i in ids:
            self._launch(self.brokers[i])
        for i in ids:
            self._wait_ready(self.brokers[i])

    def _config(self, b: LabBroker) -> Path:
        b.dir.mkdir(parents=True, exist_ok=True)
        path = b.dir / "server.properties"
        lines = [f"broker.id={b.id}", f"listeners=PLAINTEXT://{b.address}", f"log.dirs={b.log_dir}",
                 f"zookeeper.connect={self.zookeeper.connect_string}"]
        lines += [f"{k}={v}" for k, v in self.overrides.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def _launch(self, b: LabBroker) -> None:
        cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config", str(self._config(b))]
        if self.network is not None:
            cmd = self.network.exec_prefix(b.id) + cmd
        env = {**os.environ, FLUSH_LEDGER_ENV: str(b.dir / "flush-ledger")}
        with open(b.dir / "broker.out", "wb") as out, open(b.dir / "broker.log", "ab") as err:
            b.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True, preexec_fn=_die_with_parent)
        b.paused = False

    def _wait_ready(self, b: LabBroker, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        out = b.dir / "broker.out"
        while READY_PREFIX not in out.read_text(errors="replace"):
            if b.proc is None or b.proc.poll() is not None:
                tail = (b.dir / "broker.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise StrandlineError(f"broker {b.id} exited while starting: {' '.join(tail)}")
            if time.monotonic() > deadline:
                raise StrandlineError(f"broker {b.id} was not ready within {timeout_s:.0f} s")
            time.sleep(0.05)

    # -- process faults ---------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL: the process dies at once; what it wrote stays in the page cache."""
        b = self.brokers[broker_id]
        if b.alive:
            b.proc.kill()
            b.proc.wait()
        b.paused = False

    def power_off(self, broker_id: int) -> int:
        """A power loss: SIGKILL, then every file the broker wrote is cut back to what it had
        fsynced (its flush ledger, see ``strandline.runtime.disk``); what only the page cache held
        is gone. Returns the number of bytes dropped."""
        b = self.brokers[broker_id]
        self.kill(broker_id)
        ledger = b.dir / "flush-ledger"
        if not ledger.exists():
            return 0
        cut = apply_power_loss(str(ledger))
        return sum(before - after for before, after in cut.values())

    def terminate(self, broker_id: int, timeout_s: float = 30.0) -> None:
        """SIGTERM: a controlled shutdown, then the process exits (SIGKILL after ``timeout_s``)."""
        b = self.brokers[broker_id]
        if not b.alive:
            return
        if b.paused:
            self.resume(broker_id)
        b.proc.terminate()
        try:
            b.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process stands still, as in a long GC pause; its sockets stay open."""
        b = self.brokers[broker_id]
        if b.alive and not b.paused:
            os.kill(b.pid, signal.SIGSTOP)
            b.paused = True

    def resume(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if b.alive and b.paused:
            os.kill(b.pid, signal.SIGCONT)
        b.paused = False

    def restart(self, broker_id: int) -> None:
        """Start a stopped or killed broker again on the same log directory."""
        b = self.brokers[broker_id]
        if b.alive:
            raise StrandlineError(f"broker {broker_id} is still running")
        (b.dir / "broker.out").write_bytes(b"")
        self._launch(b)
        self._wait_ready(b)

    # -- the end ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every process the lab started (by PID) and remove the network. SIGINT and SIGTERM
        wait until it is done (a second Ctrl-C must not leave namespaces behind)."""
        blocked = {signal.SIGINT, signal.SIGTERM}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            for b in self.brokers.values():
                try:
                    if b.alive:
                        if b.paused:
                            os.kill(b.pid, signal.SIGCONT)
                        b.proc.kill()
                        b.proc.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            try:
                if self.zookeeper is not None:
                    self.zookeeper.stop()
            finally:
                if self.network is not None:
                    self.network.close()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
