"""A cluster run in the foreground (``strandline up``, ``strandline reference up``): its data
directory locked while it runs, what it started described in a JSON file there, and SIGINT and
SIGTERM handled: during start-up a signal stops the waiting at once, later it ends the
supervision; the processes are then stopped by PID, with the signals ignored until that is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterable

from strandline.errors import StrandlineError
from strandline.launch.process import pid_alive
from strandline.runtime.disk import DirectoryLock


def lock_data_dir(root: Path, command: str) -> DirectoryLock:
    """Hold ``root/.lock`` while ``command`` runs on it; a clear error if another holds it."""
    lock = DirectoryLock(root)
    if not lock.acquire():
        raise StrandlineError(f"data directory {root} is in use by another `{command}` ({lock.holder()})")
    return lock


def write_json(path: Path, info: dict[str, Any]) -> None:
    """``path`` replaced at once (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, path)


class Foreground:
    """SIGINT and SIGTERM for a foreground run, from :meth:`catch_signals` to :meth:`restore_signals`."""

    def __init__(self) -> None:
        self.stopping = False
        self.starting = True
        self._previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.starting:
            raise KeyboardInterrupt   # stop waiting for ZooKeeper and the brokers at once

    def catch_signals(self) -> None:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def ignore_signals(self) -> None:
        """While the run stops its processes: a second Ctrl-C must not leave one behind."""
        for sig in self._previous:
            signal.signal(sig, signal.SIG_IGN)

    def restore_signals(self) -> None:
        for sig, handler in self._previous.items():
            if handler is not None:     # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, handler)

    def started(self) -> None:
        """Start-up is over: from here a signal stops the run as it would a running one. Called
        before the run says it is ready, so that whoever read that and signals it sees a clean stop."""
        self.starting = False

    def supervise(self, members: Iterable[tuple[int, subprocess.Popen[bytes] | None]],
                  report: Callable[[int, int], None],
                  others: Callable[[], Iterable[tuple[int, int]]] | None = None,
                  report_other: Callable[[int, int], None] | None = None) -> None:
        """Until a signal: ``report(id, exit code)`` once for each member whose process exits, and
        ``report_other(id, pid)`` once for each process ``others()`` names (members started by
        someone else, not children of this one, whose exit code is not known) that is gone."""
        self.started()
        members = list(members)
        reported: set[int] = set()
        watched: dict[int, int] = {}            # pid -> member id, of the others alive when last looked
        while not self.stopping:
            time.sleep(0.2)     # notice signals and processes that exit
            for member_id, proc in members:
                if self.stopping:
                    break
                if proc is not None and proc.poll() is not None and member_id not in reported:
                    reported.add(member_id)
                    report(member_id, proc.returncode)
            if others is None or report_other is None or self.stopping:
                continue
            for member_id, pid in others():
                watched.setdefault(pid, member_id)
            for pid, member_id in list(watched.items()):
                if not pid_alive(pid):
                    del watched[pid]
                    report_other(member_id, pid)
