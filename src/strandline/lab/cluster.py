"""The lab's own cluster: an embedded ZooKeeper and N broker processes, and the faults it drives.

With a :class:`~strandline.lab.network.LabNetwork` each broker runs in its own network namespace
(so it can be partitioned); without one (no root) everything listens on loopback and only
process faults (SIGKILL, SIGTERM, pause) can be made. Every process is started by the lab,
signalled by its PID and stopped by :meth:`LabCluster.close`, which also removes the network.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from strandline.errors import StrandlineError
from strandline.lab.network import LabNetwork
from strandline.launch.brokers import BrokerProcess, broker_properties, wait_ready
from strandline.launch.ports import free_loopback_ports
from strandline.launch.process import signal_pid, stop_processes
from strandline.launch.zookeeper import EmbeddedZooKeeper
from strandline.runtime.disk import FLUSH_LEDGER_ENV, apply_power_loss

BROKER_PORT = 9092          # in a namespace every broker has its own address
START_TIMEOUT_S = 60.0


@dataclass
class LabBroker(BrokerProcess):
    """A broker of the lab: a SIGSTOP may hold it still."""

    paused: bool = False


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
            self.brokers[i] = self._new_broker(i, port, host)
        for i in ids:
            self._launch(self.brokers[i])
        self._wait_ready([self.brokers[i] for i in ids])

    def _new_broker(self, broker_id: int, port: int, host: str) -> LabBroker:
        return LabBroker(broker_id, port, self.run_dir, host=host)

    def _wait_ready(self, brokers: list[LabBroker]) -> None:
        wait_ready(brokers, START_TIMEOUT_S)

    def _launch(self, b: LabBroker) -> None:
        """Start a broker on a configuration written anew; it dies with the lab (SIGKILL)."""
        assert self.zookeeper is not None
        b.write_config(broker_properties(b.id, b.port, b.log_dir, self.zookeeper.connect_string, host=b.host,
                                         cluster_size=self.size, header="# Written by the lab.",
                                         extra=[f"{k}={v}" for k, v in self.overrides.items()]))
        b.start(prefix=self.network.exec_prefix(b.id) if self.network is not None else (),
                env={**os.environ, FLUSH_LEDGER_ENV: str(b.dir / "flush-ledger")}, death_signal=signal.SIGKILL)
        b.paused = False

    # -- process faults ---------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL: the process dies at once; what it wrote stays in the page cache."""
        b = self.brokers[broker_id]
        if b.alive and b.proc is not None:
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
        if not b.alive or b.proc is None:
            return
        if b.paused:
            self.resume(broker_id)
        stop_processes([b.proc], timeout_s)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process stands still, as in a long GC pause; its sockets stay open."""
        b = self.brokers[broker_id]
        if b.alive and not b.paused and b.pid is not None:
            os.kill(b.pid, signal.SIGSTOP)
            b.paused = True

    def resume(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        if b.alive and b.paused and b.pid is not None:
            os.kill(b.pid, signal.SIGCONT)
        b.paused = False

    def restart(self, broker_id: int) -> None:
        """Start a stopped or killed broker again on the same log directory."""
        b = self.brokers[broker_id]
        if b.alive:
            raise StrandlineError(f"broker {broker_id} is still running")
        self._launch(b)
        self._wait_ready([b])

    # -- the end ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every process the lab started (by PID) and remove the network. SIGINT and SIGTERM
        wait until it is done (a second Ctrl-C must not leave namespaces behind)."""
        blocked = {signal.SIGINT, signal.SIGTERM}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            for b in self.brokers.values():
                if b.alive and b.paused and b.pid is not None:
                    signal_pid(b.pid, signal.SIGCONT)
            stop_processes([b.proc for b in self.brokers.values() if b.proc is not None], 10.0, sig=signal.SIGKILL)
            try:
                if self.zookeeper is not None:
                    self.zookeeper.stop()
            finally:
                if self.network is not None:
                    self.network.close()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
