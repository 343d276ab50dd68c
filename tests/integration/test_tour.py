"""The README's set-up and "A short tour", run as a user runs them: `make run` (with `ARGS` for
other ports and a data directory of the test's own), then every command of the tour's block as
written in README.md, in order, in the repository's directory. The one change to the text is the
kcat lines' broker list, which names the default ports; the `strandline` commands find the cluster
through STRANDLINE_BOOTSTRAP_SERVERS and STRANDLINE_DATA_DIR, as the README says they may.

Ctrl-C (SIGINT to `make run`'s process group, as a terminal sends it) stops everything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from strandline.launch.ports import ephemeral_range, port_free
from tests.conftest import ROOT, free_ports, missing_prerequisite, pid_alive, poll_until

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"


def block_after(text: str, heading_or_phrase: str, fence: str) -> str:
    """The first fenced block (```fence) after a phrase of the README."""
    start = text.index(heading_or_phrase)
    body = text[start:].split("```" + fence + "\n", 1)[1]
    return body.split("```", 1)[0]


def commands(block: str) -> list[str]:
    """Each shell command of a block: continuation lines joined, blank and comment-only lines dropped."""
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ports_free(ports) -> bool:
    return all(port_free(port) for port in ports)


def tour_ports() -> tuple[int, int, int]:
    """Broker ports P..P+2 whose metrics ports P+1000.. are free too, a ZooKeeper and a console port."""
    for _ in range(50):
        base = free_ports(3)[0]
        low, high = ephemeral_range()
        metrics = range(base + 1000, base + 1003)
        if metrics[-1] <= 65535 and not any(low <= p <= high for p in metrics) and ports_free(metrics):
            zk, console = free_ports(2)
            if not {zk, console} & (set(range(base, base + 3)) | set(range(base + 1000, base + 1003))):
                return base, zk, console
    raise RuntimeError("no free ports for the tour")


@pytest.fixture(scope="module")
def make_run(tmp_path_factory):
    if not (ROOT / ".venv" / "bin" / "strandline").exists():
        pytest.skip("the README's commands use .venv/bin/strandline, which `make test` creates; not here")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if shutil.which("kcat") is None:
        missing_prerequisite("kcat is not installed (make kcat installs it); the tour uses it")
    data = tmp_path_factory.mktemp("tour") / "data"
    base, zk, console = tour_ports()
    args = f"--data-dir {data} --base-port {base} --zookeeper-port {zk} --console-port {console}"
    proc = subprocess.Popen(["make", "run", f"ARGS={args}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        printed = read_until(proc, "bootstrap.servers=", 120)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    yield TourCluster(proc, data, printed[-1].split("=", 1)[1], base, console, printed)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class TourCluster:
    proc: subprocess.Popen
    data: Path
    bootstrap: str
    base: int
    console: int
    printed: list[str]


def read_until(proc: subprocess.Popen, prefix: str, timeout: float) -> list[str]:
    """Every line the process prints up to and including the first that starts with ``prefix``."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    buf = b""
    while time.monotonic() < deadline:
        chunk = proc.stdout.read()
        if chunk:
            buf += chunk
            *done, buf = buf.split(b"\n")
            for raw in done:
                lines.append(raw.decode(errors="replace"))
                if lines[-1].startswith(prefix):
                    return lines
        elif proc.poll() is not None:
            raise RuntimeError(f"make run exited with {proc.returncode}: {lines}")
        else:
            time.sleep(0.1)
    raise TimeoutError(f"no {prefix!r} line within {timeout} s: {lines}")


def test_make_run_prints_what_the_readme_shows(make_run):
    shown = block_after(README.read_text(), "`make run` starts ZooKeeper", "").strip().splitlines()
    base, console = make_run.base, make_run.console
    ports = {"9092": base, "9093": base + 1, "9094": base + 2, "10092": base + 1000, "10093": base + 1001,
             "10094": base + 1002, "8080": console}
    expected = [re.sub(r"(?<=:)(\d+)", lambda m: str(ports[m.group(1)]), line) for line in shown]
    printed = [line for line in make_run.printed if line.startswith(("broker ", "console=", "bootstrap.servers="))]
    assert printed == expected
    assert make_run.printed[-1] == expected[-1]            # the last line is the one clients need


def test_the_readme_tour_runs_as_written(make_run):
    data, bootstrap = make_run.data, make_run.bootstrap
    tour = commands(block_after(README.read_text(), "## A short tour", "sh"))
    assert any(" produce " in c for c in tour) and any("kcat" in c for c in tour)
    env = {**os.environ, "STRANDLINE_BOOTSTRAP_SERVERS": bootstrap, "STRANDLINE_DATA_DIR": str(data)}
    outputs = []
    for command in tour:
        line = command.replace(DEFAULT_BOOTSTRAP, bootstrap)
        result = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        outputs.append((command, result.stdout))
    described = next(out for c, out in outputs if "topics describe --topic events" in c)
    assert described.count("\tTopic: events\tPartition: ") == 3
    assert "\tReplicationFactor: 3\tConfigs: min.insync.replicas=2\n" in described, described
    ours = next(out for c, out in outputs if "strandline consume --topic events" in c)
    assert sorted(line.split(" ", 1)[1] for line in ours.splitlines()) == ["k1=hello", "k2=world"]
    theirs = next(out for c, out in outputs if c.startswith("kcat") and " -C " in c)
    assert sorted(line.split(" ", 1)[1] for line in theirs.splitlines()) == ["k1=hello", "k2=world", "k3=hi",
                                                                           "k4=there"]
    # each record at the offset its partition gave it: both tools agree on where the first two are
    assert set(ours.splitlines()) <= set(theirs.splitlines())
    listed = next(out for c, out in outputs if "topics list" in c)
    assert "events" in listed.split()


def test_the_spark_example_and_the_pipeline_run_after_the_tour(make_run, tmp_path):
    """With broker 1 stopped by the tour: the Spark page's example as written (its broker list
    names every broker of `make run`), then examples/events_pipeline.py's three commands as its
    docstring gives them, each finding the cluster with the tour's environment."""
    bootstrap = make_run.bootstrap
    python = str(ROOT / ".venv" / "bin" / "python")
    env = {**os.environ, "STRANDLINE_BOOTSTRAP_SERVERS": bootstrap, "STRANDLINE_DATA_DIR": str(make_run.data),
           "PYSPARK_PYTHON": python}
    example = block_after((ROOT / "docs" / "spark.md").read_text(), "## An example", "python")
    assert DEFAULT_BOOTSTRAP in example
    run = subprocess.run([python, "-c", example.replace(DEFAULT_BOOTSTRAP, bootstrap)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "hello" in run.stdout and "there" in run.stdout, run.stdout
    upper = subprocess.run([str(ROOT / ".venv" / "bin" / "strandline"), "consume", "--topic", "events-upper",
                            "--from-beginning", "--exit-at-end"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert upper.returncode == 0, upper.stderr
    assert sorted(upper.stdout.split()) == ["HELLO", "HI", "THERE", "WORLD"]

    docstring = (ROOT / "examples" / "events_pipeline.py").read_text().split('"""')[1]
    steps = [line.strip() for line in docstring.splitlines() if "examples/events_pipeline.py" in line]
    assert [step.split()[2] for step in steps] == ["produce", "aggregate", "show"]
    printed = []
    for step in steps:
        argv = step.split("#")[0].split()
        argv = [python, str(ROOT / "examples" / "events_pipeline.py"), *argv[2:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (step, done.stderr[-3000:])
        assert "Traceback" not in done.stderr, (step, done.stderr[-3000:])
        printed.append(done.stdout)
    assert printed[0].startswith("produced 20000 events"), printed[0]
    assert (tmp_path / "data" / "pipeline" / "clicks_per_minute").is_dir()
    assert "window_start" in printed[2] and "/pricing" in printed[2], printed[2]


def test_ctrl_c_stops_everything_make_run_started(make_run):
    info = json.loads((make_run.data / "cluster.json").read_text())
    pids = [b["pid"] for b in info["brokers"] if b.get("pid")] + [info["zookeeper"]["pid"]]
    assert len(pids) == 3 and all(pid_alive(pid) for pid in pids)     # broker 1 was stopped by the tour
    os.killpg(make_run.proc.pid, signal.SIGINT)                        # Ctrl-C in make run's terminal
    make_run.proc.wait(60)
    poll_until(lambda: not any(pid_alive(pid) for pid in pids), 30, message="ZooKeeper and every broker gone")
