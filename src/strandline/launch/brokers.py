"""Strandline broker processes: each in ``<root>/broker-<id>/`` with its ``server.properties``, its
log directory ``logs/``, its standard output ``broker.out`` (where it prints its ready line) and its
log ``broker.log``; started as ``strandline broker --config ...`` and ready once it printed
``strandline broker ready``."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Sequence

from strandline.errors import StrandlineError
from strandline.launch.process import ServerProcess, log_tail, spawn
from strandline.launch.wait import Waiting, exited

#: the internal topics' replication factor keys (default 3), and Kafka's own default
INTERNAL_REPLICATION_KEYS = ("offsets.topic.replication.factor", "transaction.state.log.replication.factor")
INTERNAL_REPLICATION_DEFAULT = 3


def broker_properties(broker_id: int, port: int, log_dir: Path, zk_connect: str, rack: str | None = None,
                      cluster_size: int = INTERNAL_REPLICATION_DEFAULT, *, host: str = "127.0.0.1",
                      extra: Sequence[str] = (), protocol: str = "PLAINTEXT",
                      header: str = "# Written by `strandline up`; extra settings come from --override.") -> str:
    """A broker's ``server.properties``, listening on ``host:port`` (its one listener named for its
    security ``protocol``), ``extra`` lines last. In a cluster of fewer than 3 brokers the internal topics get one replica per
    broker (as Kafka's single-broker ``config/server.properties`` sets both keys to 1): they are
    never created with fewer replicas than their replication factor."""
    small = [f"{key}={cluster_size}" for key in INTERNAL_REPLICATION_KEYS] \
        if 0 < cluster_size < INTERNAL_REPLICATION_DEFAULT else []
    return "\n".join([
        header,
        f"broker.id={broker_id}",
        f"listeners={protocol}://{host}:{port}",
        f"log.dirs={log_dir}",
        f"zookeeper.connect={zk_connect}",
        *([f"broker.rack={rack}"] if rack else []),
        *small,
        *extra,
        "",
    ])


def broker_command(config: Path, overrides: Sequence[str] = ()) -> list[str]:
    """``strandline broker --config <config> [--override k=v ...]`` with this Python."""
    cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config", str(config)]
    for item in overrides:
        cmd += ["--override", item]
    return cmd


@dataclass
class BrokerProcess(ServerProcess):
    """One broker of a cluster on this machine, in ``root/broker-<id>``."""

    KIND: ClassVar[str] = "broker"

    metrics_url: str | None = None     # http://host:port of its /metrics and /status, from its ready line

    @property
    def out_path(self) -> Path:
        return self.dir / "broker.out"

    @property
    def log_path(self) -> Path:
        return self.dir / "broker.log"

    def tail(self, lines: int = 1) -> str:
        """The last lines of its log, or where to look."""
        return " ".join(log_tail(self.log_path, lines)) or f"see {self.log_path}"

    def start(self, overrides: Sequence[str] = (), *, prefix: Sequence[str] = (), env: dict[str, str] | None = None,
              death_signal: int | None = signal.SIGTERM) -> None:
        """Start it (``prefix``: a command it runs under, e.g. ``ip netns exec``); its broker.out
        is emptied, so that the ready line found there is this life's."""
        cmd = [*prefix, *broker_command(self.config_path, overrides)]
        self.proc = spawn(cmd, self.out_path, self.log_path, fresh_stdout=True, env=env, death_signal=death_signal)


def ready_field(output: str, name: str) -> str | None:
    """A ``name=value`` field of a broker's ready line (``metrics=http://host:port``)."""
    from strandline.runtime.broker_main import READY_PREFIX

    for line in output.splitlines():
        if line.startswith(READY_PREFIX):
            for item in line.split():
                key, sep, value = item.partition("=")
                if sep and key == name:
                    return value
    return None


def wait_ready(brokers: Sequence[BrokerProcess], timeout_s: float, progress: Waiting | None = None,
               detail: Callable[[], str | None] | None = None) -> None:
    """Until every broker printed its ready line (its metrics URL is then known), or fail naming the
    brokers that did not, or the first that exited. ``progress`` says what it waits for: by default
    which brokers, and what the first of them last logged; ``detail()`` instead."""
    from strandline.runtime.broker_main import READY_PREFIX

    waiting = {b.id: b for b in brokers}
    deadline = time.monotonic() + timeout_s
    while waiting:
        if progress is not None:
            progress.tick(detail or (lambda: f"broker(s) {', '.join(str(i) for i in sorted(waiting))} not ready "
                                             f"yet; {_doing(waiting[min(waiting)])}"))
        for b in list(waiting.values()):
            try:
                text = b.out_path.read_text(errors="replace")
            except OSError:
                text = ""
            if READY_PREFIX in text:
                b.metrics_url = ready_field(text, "metrics")
                del waiting[b.id]
                continue
            error = exited(b, "broker")
            if error is not None:
                raise error
        if waiting and time.monotonic() > deadline:
            ids = ", ".join(str(i) for i in sorted(waiting))
            raise StrandlineError(f"broker{'(s)' if len(brokers) > 1 else ''} {ids} did not become ready within "
                                  f"{timeout_s:.0f} s")
        if waiting:
            time.sleep(0.05)


def _doing(b: BrokerProcess) -> str:
    """The last line of a broker's log, without its timestamp, to say what it is doing."""
    line = " ".join(log_tail(b.log_path, 1))
    parts = line.split(" ", 3)
    return f"broker {b.id}: " + (parts[3] if len(parts) == 4 else line or "starting")
