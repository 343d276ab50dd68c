"""Child processes of a cluster: started in a session of their own, tied to their parent's life,
and signalled and stopped by their PID only.

:func:`spawn` starts one (a broker, a JVM, the console) with its output in files;
:func:`stop_processes` stops a set of them under one deadline: a signal to all (SIGTERM, a
controlled shutdown), then SIGKILL to those left. :func:`pid_alive` and :func:`wait_gone` follow
a process that is not our child (one ``strandline cluster start`` started), by its PID.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Protocol, Sequence

PR_SET_PDEATHSIG = 1


class Progress(Protocol):
    def tick(self) -> None: ...


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()   # looked up here: no dlopen in a child forked from a threaded process


@dataclass
class ServerProcess:
    """A server of a cluster on this machine (a broker, a Kafka node): listening on
    ``host:port``, its files in ``root/<KIND>-<id>/`` (``server.properties``, ``logs/``), its
    process ``proc`` once started."""

    KIND: ClassVar[str] = "server"

    id: int
    port: int
    root: Path
    host: str = field(default="127.0.0.1", kw_only=True)
    proc: subprocess.Popen[bytes] | None = field(default=None, kw_only=True)

    @property
    def dir(self) -> Path:
        return self.root / f"{self.KIND}-{self.id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def write_config(self, text: str, *, secret: bool = False) -> None:
        """Its ``server.properties``; readable by its owner only when ``secret`` (it holds passwords)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if not secret:
            self.config_path.write_text(text)
            return
        self.config_path.unlink(missing_ok=True)
        with os.fdopen(os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to send ``sig`` to the child when its parent dies, so that
    no broker or JVM is orphaned; None where that cannot be had. The signal fires when the starting
    *thread* exits, so it is asked for only from the main thread."""
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    prctl = _PRCTL

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(PR_SET_PDEATHSIG, sig)

    return hook


Output = Path | int     # a file (opened for the child), or subprocess.PIPE / STDOUT / DEVNULL


def spawn(cmd: Sequence[str], stdout: Output, stderr: Output, *, fresh_stdout: bool = False,
          env: dict[str, str] | None = None, cwd: Path | None = None,
          death_signal: int | None = signal.SIGTERM) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (a Ctrl-C reaches only its parent, which stops it in order),
    stdin closed. A file for ``stdout`` is appended to (emptied first with ``fresh_stdout``: its
    ready line must be this life's), one for ``stderr`` appended to. ``death_signal`` (None: none)
    is what the child gets when its parent dies."""
    with ExitStack() as files:
        out = files.enter_context(open(stdout, "wb" if fresh_stdout else "ab")) if isinstance(stdout, Path) else stdout
        err = files.enter_context(open(stderr, "ab")) if isinstance(stderr, Path) else stderr
        return subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                start_new_session=True,
                                preexec_fn=die_with_parent(death_signal) if death_signal is not None else None)


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
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


def signal_pid(pid: int, sig: int) -> None:
    """``sig`` to ``pid``; nothing if it is gone already."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pid: int, timeout_s: float, progress: Progress | None = None) -> bool:
    """Whether ``pid`` is gone within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        if progress is not None:
            progress.tick()
        time.sleep(0.02)
    return True


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float, *, pids: Sequence[int] = (),
                   sig: int = signal.SIGTERM,
                   on_kill: Callable[[int], None] | None = None) -> None:
    """``sig`` to every child in ``procs`` and every other process in ``pids``, a wait for them all
    up to ``timeout_s``, then SIGKILL to those left (``on_kill(pid)`` says so first)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
    for pid in pids:
        signal_pid(pid, sig)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if on_kill is not None:
                on_kill(proc.pid)
            proc.kill()
            proc.wait()
    for pid in pids:
        if not wait_gone(pid, max(0.0, deadline - time.monotonic())):
            if on_kill is not None:
                on_kill(pid)
            signal_pid(pid, signal.SIGKILL)
            wait_gone(pid, 5.0)


def log_tail(path: Path, lines: int) -> list[str]:
    """The last non-empty lines of a log file (of its last 16 KiB); none if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()][-lines:]
