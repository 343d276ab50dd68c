"""Waiting for a cluster's processes, each wait polled under a deadline: a line a process prints,
a broker's ready line, every broker's knowing all the others (Metadata), a condition."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from typing import Any, Callable, Protocol, Sequence, TypeVar

from strandline.errors import StrandlineError

T = TypeVar("T")


class Waiting:
    """Says on stderr what a command waits for, once the wait passes 2 s, then every 5 s."""

    FIRST_S, EVERY_S = 2.0, 5.0

    def __init__(self, what: str) -> None:
        self.what = what
        self.start = time.monotonic()
        self.next = self.start + self.FIRST_S

    def tick(self, detail: Callable[[], str | None] | None = None) -> None:
        """``detail()`` says more; it runs only when a line is printed."""
        now = time.monotonic()
        if now >= self.next:
            more = detail() if detail is not None else None
            print(f"{self.what} ({now - self.start:.0f} s){': ' + more if more else ''}", file=sys.stderr,
                  flush=True)
            self.next = now + self.EVERY_S


def poll_until(predicate: Callable[[], T], timeout: float, interval: float = 0.05, message: str = "condition") -> T:
    """``predicate()``'s first true value within ``timeout`` seconds; TimeoutError after."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{message} not reached within {timeout} s")


def wait_for_line(proc: subprocess.Popen[bytes], prefix: str, timeout: float) -> str:
    """The first line starting with ``prefix`` that ``proc`` prints on its stdout (a pipe);
    RuntimeError if it exits first, TimeoutError after ``timeout`` seconds."""
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
                    buf += chunk if isinstance(chunk, bytes) else chunk.encode()
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
            if proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode} before printing {prefix!r}: {buf!r}")
    finally:
        sel.close()
    raise TimeoutError(f"no {prefix!r} line within {timeout} s")


class Member(Protocol):
    """A broker of a cluster being started, as the waits see it."""

    id: int
    proc: subprocess.Popen[bytes] | None

    @property
    def address(self) -> str: ...

    def tail(self, lines: int = 1) -> str: ...


def exited(member: Member, what: str) -> StrandlineError | None:
    """The error to raise when ``member``'s process has exited."""
    proc = member.proc
    if proc is None or proc.poll() is None:
        return None
    return StrandlineError(f"{what} {member.id} exited with code {proc.returncode}: {member.tail(1)}")


def wait_for_membership(members: Sequence[Member], timeout_s: float, *, what: str = "broker",
                        client_id: str = "strandline", interval_s: float = 0.05,
                        progress: Waiting | None = None,
                        connect: Callable[[str], Any] | None = None) -> None:
    """Until every member's Metadata lists all members (the controller has told them all), or fail
    naming the first that does not, or that exited. ``connect(address)``: a connection to a member
    (with TLS and SASL where its listener asks for them); a plain one by default."""
    from strandline.runtime.client import KafkaConnection

    def plain(address: str) -> KafkaConnection:
        return KafkaConnection(address, timeout_s=5.0, client_id=client_id)
    connect = connect or plain

    deadline = time.monotonic() + timeout_s
    want = {m.id for m in members}
    for m in members:
        while True:
            if progress is not None:
                progress.tick(lambda: f"{what} {m.id} does not list them all yet")  # noqa: B023  (called at once)
            error = exited(m, what)
            if error is not None:
                raise error
            try:
                with connect(m.address) as conn:
                    resp = conn.request(3, 10, {"topics": [], "allow_auto_topic_creation": False})
                if {int(n.node_id) for n in resp.brokers} >= want:
                    break
            except (StrandlineError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise StrandlineError(f"{what} {m.id} did not learn of all brokers {sorted(want)} "
                                      f"within {timeout_s:.0f} s: {m.tail(1)}")
            time.sleep(interval_s)
