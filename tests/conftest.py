"""Shared fixtures: real `strandline up` clusters on loopback, started and stopped by PID."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from strandline.runtime.ports import free_loopback_ports

ROOT = Path(__file__).resolve().parents[1]


def free_ports(count: int) -> list[int]:
    """`count` consecutive free loopback ports, outside the ephemeral range (see
    :func:`strandline.runtime.ports.free_loopback_ports`)."""
    return free_loopback_ports(count)


def strandline_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "strandline.cli.main", *args]


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``strandline ARGS``; ``env`` adds environment variables."""
    return subprocess.run(strandline_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


@dataclass
class Cluster:
    data_dir: Path
    brokers: int
    base_port: int
    zk_port: int
    overrides: list[str] = field(default_factory=list)
    racks: str = ""          # `strandline up --racks`
    proc: subprocess.Popen | None = None
    bootstrap: str = ""

    def start(self, timeout: float = 90) -> "Cluster":
        cmd = strandline_cmd("up", "--brokers", str(self.brokers), "--data-dir", str(self.data_dir),
                             "--base-port", str(self.base_port), "--zookeeper-port", str(self.zk_port))
        for item in self.overrides:
            cmd += ["--override", item]
        if self.racks:
            cmd += ["--racks", self.racks]
        self.log = open(self.data_dir.parent / f"{self.data_dir.name}-up.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        self.bootstrap = wait_for_line(self.proc, "bootstrap.servers=", timeout).split("=", 1)[1].strip()
        return self

    @property
    def info(self) -> dict:
        return json.loads((self.data_dir / "cluster.json").read_text())

    def broker_pid(self, broker_id: int) -> int:
        return next(b["pid"] for b in self.info["brokers"] if b["id"] == broker_id)

    def stop(self, timeout: float = 60) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float) -> str:
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for _ in sel.select(0.2):
                chunk = proc.stdout.read()
                if chunk:
                    buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
            if proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode} before printing {prefix!r}: {buf!r}")
    finally:
        sel.close()
    raise TimeoutError(f"no {prefix!r} line within {timeout} s")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def missing_prerequisite(reason: str) -> None:
    """A test whose prerequisite (kcat, Chromium, nftables, iproute2, root) is missing skips with
    ``reason``, one line; under ``CI=true`` (.ci/run), where `make test` installs them, it fails."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the suite's prerequisites must be installed)", pytrace=False)
    pytest.skip(reason)


def poll_until(predicate, timeout: float, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{message} not reached within {timeout} s")


def new_cluster(parent: Path, brokers: int, *, overrides: list[str] | tuple[str, ...] = (), racks: str = "") -> Cluster:
    """A cluster of ``brokers`` brokers (not started) with its data in ``parent/data``, on free
    loopback ports: ZooKeeper's, then one per broker."""
    ports = free_ports(brokers + 1)
    data = parent / "data"
    data.mkdir(parents=True, exist_ok=True)
    return Cluster(data, brokers, ports[1], ports[0], list(overrides), racks)


def cluster_fixture(name: str, brokers: int = 3, *, overrides: list[str] | tuple[str, ...] = (), racks: str = "",
                    start_timeout: float = 90):
    """A module-scoped fixture: one cluster per test module, started before its first test and
    stopped (by PID) after its last. ``cluster = cluster_fixture("acls", 3, overrides=[...])``."""
    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        c = new_cluster(tmp_path_factory.mktemp(name), brokers, overrides=overrides, racks=racks)
        c.start(start_timeout)
        yield c
        c.stop()
    return fixture


#: One single-broker cluster per test module, for the modules that need no other.
cluster = cluster_fixture("cluster", 1)
