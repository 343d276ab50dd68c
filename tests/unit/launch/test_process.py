"""The launcher's processes: started tied to their parent, stopped by PID under one deadline, and
waited for until their ready line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strandline.errors import StrandlineError
from strandline.launch.brokers import BrokerProcess, wait_ready
from strandline.launch.process import pid_alive, spawn, stop_processes, wait_gone
from strandline.launch.wait import poll_until, wait_for_line

IGNORES_SIGTERM = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                   "print('ready', flush=True)\ntime.sleep(30)\n")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_process_that_ignores_sigterm_is_killed_at_the_deadline(tmp_path):
    stubborn = spawn(python(IGNORES_SIGTERM), subprocess.PIPE, tmp_path / "err")
    polite = spawn(python("import time; time.sleep(30)"), tmp_path / "out", tmp_path / "err")
    wait_for_line(stubborn, "ready", 10)
    killed: list[int] = []
    began = time.monotonic()
    stop_processes([stubborn, polite], 0.5, on_kill=killed.append)
    assert killed == [stubborn.pid]
    assert stubborn.returncode == -signal.SIGKILL and polite.returncode == -signal.SIGTERM
    assert 0.5 <= time.monotonic() - began < 5


def test_a_child_dies_with_its_parent(tmp_path):
    """The parent starts a child through spawn() and is then SIGKILLed: the kernel ends the child."""
    pid_file = tmp_path / "child.pid"
    parent_code = ("import sys, time\nfrom pathlib import Path\nfrom strandline.launch.process import spawn\n"
                   f"child = spawn([sys.executable, '-c', 'import time; time.sleep(30)'], Path({str(tmp_path / 'o')!r}),"
                   f" Path({str(tmp_path / 'e')!r}))\n"
                   f"Path({str(pid_file)!r}).write_text(str(child.pid))\ntime.sleep(30)\n")
    parent = subprocess.Popen(python(parent_code))
    try:
        child = int(poll_until(lambda: pid_file.exists() and pid_file.read_text(), 10, message="child pid"))
        assert pid_alive(child)
        parent.kill()
        parent.wait()
        assert wait_gone(child, 10), "the child outlived its parent"
    finally:
        stop_processes([parent], 1)


def _fake_broker(root: Path, broker_id: int, code: str) -> BrokerProcess:
    b = BrokerProcess(broker_id, 1, root)
    b.dir.mkdir(parents=True)
    b.proc = spawn(python(code), b.out_path, b.log_path, fresh_stdout=True)
    return b


def test_wait_ready_reads_each_brokers_ready_line_and_its_metrics_url(tmp_path):
    ready = ("import time; time.sleep(0.3); "
             "print('strandline broker ready id=1 listener=127.0.0.1:1 metrics=http://127.0.0.1:7', flush=True); "
             "time.sleep(30)")
    brokers = [_fake_broker(tmp_path, i, ready) for i in (1, 2)]
    try:
        wait_ready(brokers, 10)
        assert [b.metrics_url for b in brokers] == ["http://127.0.0.1:7"] * 2
    finally:
        stop_processes([b.proc for b in brokers if b.proc], 1)


def test_wait_ready_names_a_broker_that_exited_or_was_not_ready(tmp_path):
    dead = _fake_broker(tmp_path, 1, "import sys; print('no ZooKeeper', file=sys.stderr); sys.exit(3)")
    with pytest.raises(StrandlineError, match="^broker 1 exited with code 3: no ZooKeeper$"):
        wait_ready([dead], 10)
    slow = [_fake_broker(tmp_path, i, "import time; time.sleep(30)") for i in (2, 3)]
    try:
        with pytest.raises(StrandlineError, match=r"^broker\(s\) 2, 3 did not become ready within 0 s$"):
            wait_ready(slow, 0.2)
    finally:
        stop_processes([b.proc for b in slow if b.proc], 1)
