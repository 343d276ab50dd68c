"""Apache Kafka's own jars for the tests that run Kafka next to Strandline.

:func:`kafka_lines_or_skip` fetches every Kafka line (once, into ~/.cache/strandline) when a test
module is collected, or skips the whole module with one line. Where Maven Central cannot be
reached at all (no network), the tests skip, under CI=true too: nothing on the machine is missing,
and the jars cannot be had. Any other failure to
fetch (no Maven, an artifact refused, a broken cache) is a missing prerequisite: a skip
elsewhere, a failure under CI=true (.ci/run).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from tests.conftest import missing_prerequisite
from strandline.reference import KafkaDist, KafkaFetchError, ensure_kafka

#: The Kafka lines every Kafka test runs with: 3.9 (ZooKeeper) and the newest 4.x the pom pins.
LINES = ("3.9", "4")


def kafka_lines_or_skip(lines: tuple[str, ...] = LINES) -> dict[str, KafkaDist | str]:
    """Each line's Kafka (of ``lines``), for a test module's top level: the module skips (one line) when it cannot
    be had. Under CI=true, unless Maven Central cannot be reached at all, a line that could not be
    fetched maps to the reason instead, and :func:`dist` fails each test that needs it (the other
    modules still run)."""
    dists: dict[str, KafkaDist | str] = {}
    for line in lines:
        try:
            dists[line] = ensure_kafka(line)
        except KafkaFetchError as exc:
            if exc.unreachable:
                pytest.skip(f"Maven Central cannot be reached, so Kafka {line}'s jars cannot be fetched: {exc}",
                            allow_module_level=True)
            reason = f"Kafka {line}'s jars could not be fetched: {exc}"
            if os.environ.get("CI") != "true":
                pytest.skip(reason, allow_module_level=True)
            dists[line] = f"{reason} (CI=true: the suite's prerequisites must be installed)"
    return dists


def dist(dists: dict[str, KafkaDist | str], line: str) -> KafkaDist:
    """The line's Kafka; the test fails with the fetch's reason where it could not be had (CI=true)."""
    value = dists[line]
    if isinstance(value, str):
        pytest.fail(value, pytrace=False)
    return value


def java_main(kafka: KafkaDist, source: Path, prefix: str) -> list[str]:
    """The command that runs the class of ``source`` (a Java file with a main, its arguments
    follow), compiled once per source and Kafka version with ``javac`` against Kafka's jars, into
    the cache beside them (never the work tree)."""
    if shutil.which("javac") is None:
        missing_prerequisite("javac is not installed")
    main = source.stem
    digest = hashlib.sha256(source.read_bytes() + kafka.version.encode()).hexdigest()[:16]
    classes = kafka.home.parent / f"{prefix}-{digest}"
    if not (classes / f"{main}.class").exists():
        building = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=kafka.home.parent))
        out = subprocess.run(["javac", "-d", str(building), "-cp", kafka.classpath, str(source)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        try:
            building.rename(classes)
        except OSError:                                  # built meanwhile by another run
            shutil.rmtree(building, ignore_errors=True)
    return ["java", "-cp", f"{classes}:{kafka.classpath}", main]


class JavaClient:
    """One Java client process of the tests (its arguments end with a go-file and a stop-file),
    started ahead (the JVM's start is slow): it begins at :meth:`go` and ends at :meth:`stop`. The
    lines it prints whose first word is one of ``kinds`` are kept in :attr:`lines` as they come
    (not the client library's log lines, also on stdout); everything it says is kept in
    ``<name>.out`` beside its ``<name>.err``, for a failure."""

    def __init__(self, command: list[str], workdir: Path, name: str, kinds: set[str] | frozenset[str],
                 after: tuple[str, ...] = ()) -> None:
        self.name = name
        self.kinds = kinds
        self.go_file = workdir / f"{name}.go"
        self.stop_file = workdir / f"{name}.stop"
        self.lines: list[str] = []
        self.proc = subprocess.Popen([*command, str(self.go_file), str(self.stop_file), *after], stdout=subprocess.PIPE,
                                     stderr=open(workdir / f"{name}.err", "wb"), text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.stop_file.with_suffix(".out"), "w") as kept:
            for line in self.proc.stdout:
                if line.split(" ", 1)[0] in self.kinds:
                    self.lines.append(line.strip())
                kept.write(line)
                kept.flush()

    def go(self) -> None:
        self.go_file.touch()

    def stop(self, timeout: float = 30) -> None:
        """Ask it to end, wait for it, and check that it ended well."""
        self.stop_file.touch()
        self.proc.wait(timeout)
        self.reader.join(5)
        assert self.proc.returncode == 0, (self.name, self.lines[-5:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
