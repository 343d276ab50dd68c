"""Strandline as a package: `python -m build` makes a wheel and an sdist; the wheel installed with
pip into a fresh virtualenv (and with pipx) starts a cluster with `strandline up` (ZooKeeper from
the pyspark wheel) that its own `strandline produce` and `consume` use, and `strandline --version`
prints the version of the package's metadata.

The installs take their dependencies from pip's cache (filled by `make`), or from the package
index where the cache lacks them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import free_ports, poll_until

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
INSTALL_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The wheel and the sdist `python -m build` makes of a copy of the working tree's files."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def wheel_of(dist: Path) -> Path:
    [wheel] = dist.glob(f"strandline-{VERSION}-py3-none-any.whl")
    return wheel


def test_build_makes_a_wheel_and_an_sdist_holding_every_file_a_user_needs(dist):
    [sdist] = dist.glob(f"strandline-{VERSION}.tar.gz")
    assert sdist.stat().st_size > 0
    names = set(zipfile.ZipFile(wheel_of(dist)).namelist())
    for needed in ("strandline/cli/main.py", "strandline/console/static/index.html",
                   "strandline/console/static/console.js", "strandline/reference/kafka-4/pom.xml",
                   f"strandline-{VERSION}.dist-info/licenses/LICENSE",
                   f"strandline-{VERSION}.dist-info/entry_points.txt"):
        assert needed in names, f"the wheel lacks {needed}"
    assert not [n for n in names if n.startswith("tests/") or "/__pycache__/" in n]


def run_a_cluster_with(strandline: Path, tmp_path: Path) -> None:
    """`strandline up` with one broker, from a directory outside the repository; a record
    produced and consumed back with the same installation's commands; then SIGTERM."""
    broker_port, zk_port = free_ports(2)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    up = subprocess.Popen([str(strandline), "up", "--brokers", "1", "--data-dir", "data",
                           "--base-port", str(broker_port), "--zookeeper-port", str(zk_port),
                           "--console-port", "0"], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    try:
        lines: list[str] = []
        assert up.stdout is not None

        def ready() -> bool:
            line = up.stdout.readline()          # the process ends its output or prints a line
            lines.append(line)
            return line.startswith("bootstrap.servers=") or (not line and up.poll() is not None)
        poll_until(ready, timeout=120, interval=0)
        assert lines[-1] == f"bootstrap.servers=127.0.0.1:{broker_port}\n", "".join(lines)
        bootstrap = f"127.0.0.1:{broker_port}"
        produced = subprocess.run([str(strandline), "produce", "--topic", "installed", "--bootstrap-server",
                                   bootstrap], input="from the wheel\n", capture_output=True, text=True,
                                  cwd=work, env=env, timeout=60)
        assert produced.returncode == 0, produced.stderr
        consumed = subprocess.run([str(strandline), "consume", "--topic", "installed", "--bootstrap-server",
                                   bootstrap, "--from-beginning", "--max-messages", "1", "--timeout-ms", "20000"],
                                  capture_output=True, text=True, cwd=work, env=env, timeout=60)
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout == "from the wheel\n"
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
    assert up.returncode == 0


def test_the_wheel_installed_by_pip_in_a_fresh_virtualenv_runs_a_cluster(dist, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    installed = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                                str(wheel_of(dist))], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, installed.stderr[-3000:]
    strandline = env_dir / "bin" / "strandline"
    version = subprocess.run([str(strandline), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout == f"strandline {VERSION}\n", version
    run_a_cluster_with(strandline, tmp_path)


def test_pipx_installs_the_wheel_and_its_command(dist, tmp_path):
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    installed = subprocess.run([sys.executable, "-m", "pipx", "install", "--python", sys.executable,
                                str(wheel_of(dist))], capture_output=True, text=True, env=env,
                               timeout=INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    strandline = tmp_path / "bin" / "strandline"
    version = subprocess.run([str(strandline), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout == f"strandline {VERSION}\n", version
