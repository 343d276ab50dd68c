"""Shared fixtures: real `strandline up` clusters on loopback, started and stopped by PID."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strandline.launch.ports import free_loopback_ports
from strandline.launch.process import pid_alive
from strandline.launch.up import UpCluster
from strandline.launch.wait import poll_until, wait_for_line

__all__ = ["Cluster", "cluster_fixture", "free_ports", "missing_prerequisite", "new_cluster", "pid_alive", "poll_until",
           "run_cli", "strandline_cmd", "wait_for_line"]

ROOT = Path(__file__).resolve().parents[1]

#: A `strandline up` run by a test (see :class:`strandline.launch.up.UpCluster`).
Cluster = UpCluster


def free_ports(count: int) -> list[int]:
    """`count` consecutive free loopback ports, outside the ephemeral range (see
    :func:`strandline.launch.ports.free_loopback_ports`)."""
    return free_loopback_ports(count)


def strandline_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "strandline.cli.main", *args]


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``strandline ARGS``; ``env`` adds environment variables."""
    return subprocess.run(strandline_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


def missing_prerequisite(reason: str) -> None:
    """A test whose prerequisite (kcat, Chromium, nftables, iproute2, root) is missing skips with
    ``reason``, one line; under ``CI=true`` (.ci/run), where `make test` installs them, it fails."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the suite's prerequisites must be installed)", pytrace=False)
    pytest.skip(reason)


def new_cluster(parent: Path, brokers: int, *, overrides: list[str] | tuple[str, ...] = (), racks: str = "",
                console: bool = False) -> Cluster:
    """A cluster of ``brokers`` brokers (not started) with its data in ``parent/data``, on free
    loopback ports: ZooKeeper's, then one per broker; the web console only when ``console`` (it
    samples every broker each second: CPU the other tests need)."""
    cluster = UpCluster.on_free_ports(parent, brokers, overrides=overrides, racks=racks)
    cluster.console = console
    return cluster


def cluster_fixture(name: str, brokers: int = 3, *, overrides: list[str] | tuple[str, ...] = (), racks: str = "",
                    start_timeout: float = 90, console: bool = False):
    """A module-scoped fixture: one cluster per test module, started before its first test and
    stopped (by PID) after its last. ``cluster = cluster_fixture("acls", 3, overrides=[...])``."""
    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        c = new_cluster(tmp_path_factory.mktemp(name), brokers, overrides=overrides, racks=racks, console=console)
        c.start(start_timeout)
        yield c
        c.stop()
    return fixture


#: One single-broker cluster per test module, for the modules that need no other.
cluster = cluster_fixture("cluster", 1)
