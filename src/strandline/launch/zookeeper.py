"""The embedded ZooKeeper: a single-node server from the jars inside the pyspark wheel.

``java -cp '<pyspark>/jars/*' org.apache.zookeeper.server.ZooKeeperServerMain <data_dir>/zoo.cfg``,
in its own process group, logging to ``<data_dir>/zookeeper.log`` through log4j2 (the pyspark jars
bind slf4j to log4j2 with ``log4j-slf4j2-impl``), and ready when it answers ``ruok`` with ``imok``.
Anything the JVM prints before log4j2 is up (a bad flag, a crash) goes to ``<data_dir>/zookeeper.out``.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from strandline.errors import StrandlineError
from strandline.launch.process import log_tail, spawn, stop_processes

log = logging.getLogger("strandline.zookeeper")

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

#: A small footprint and a fast start: one GC thread, the C1 compiler only, no perf-data file.
JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
             "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")

LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by strandline: ZooKeeper logs to zookeeper.log, never to the console. -->
<Configuration status="error">
  <Appenders>
    <RollingFile name="file" fileName="{log}" filePattern="{log}.%i">
      <PatternLayout pattern="%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n"/>
      <Policies><SizeBasedTriggeringPolicy size="10 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


def pyspark_jars_dir() -> Path:
    """``<pyspark package>/jars``, found without importing pyspark."""
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise StrandlineError("pyspark is not installed, and its jars provide ZooKeeper: "
                              "install it with `pip install pyspark`")
    return Path(list(spec.submodule_search_locations)[0]) / "jars"


def zookeeper_classpath() -> str:
    """The Java classpath ``<pyspark>/jars/*``; a clear error if pyspark or its zookeeper jar is missing."""
    jars = pyspark_jars_dir()
    if not any(jars.glob("zookeeper-[0-9]*.jar")):
        raise StrandlineError(f"no zookeeper-*.jar in {jars}: reinstall pyspark")
    return str(jars / "*")


def java_executable() -> str | None:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on the PATH (None if absent)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def parse_java_version(output: str) -> tuple[str, int] | None:
    """The version string and major version in ``java -version`` output (``1.8.0_292`` -> 8)."""
    match = re.search(r'version "([^"]+)"', output)
    if not match:
        return None
    version = match.group(1)
    parts = re.split(r"[._+-]", version)
    try:
        major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])
    except ValueError:
        return None
    return version, major


def check_java(min_major: int = 17) -> str:
    """The java executable to use; StrandlineError (one line) when Java is missing or too old."""
    java = java_executable()
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home:
            raise StrandlineError(f"Java was not found: JAVA_HOME={home} has no bin/java; "
                                  f"point JAVA_HOME at a Java {min_major}+ installation or unset it")
        raise StrandlineError(f"Java was not found: install Java {min_major}+ or set JAVA_HOME")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StrandlineError(f"cannot run {java} -version: {exc}") from None
    parsed = parse_java_version(done.stderr + done.stdout)
    if parsed is None:
        first = (done.stderr + done.stdout).strip().splitlines()[:1]
        raise StrandlineError(f"cannot tell the version of the Java at {java}: {first[0] if first else 'no output'}")
    version, major = parsed
    if major < min_major:
        raise StrandlineError(f"Java {min_major} or newer is required to run ZooKeeper; found {version} at {java}")
    return java


def four_letter_word(host: str, port: int, word: str = "ruok", timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer ('' if the server closed early)."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _port_taken(host: str, port: int) -> bool:
    """True if ``host:port`` cannot be bound (the same check ZooKeeper's listener will make)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise StrandlineError(f"cannot use {host}:{port} for ZooKeeper: {exc.strerror}") from None
    return False


class EmbeddedZooKeeper:
    """A single-node ZooKeeper in a child JVM, with its files under ``data_dir``.

    ``start()`` returns once the server answers ``ruok``; ``stop()`` sends SIGTERM, then SIGKILL.
    Data (``<data_dir>/data``) survives a stop and is served again by the next start.
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int, host: str = "127.0.0.1", tick_time_ms: int = 500,
                 max_session_timeout_ms: int = 60000, jvm_args: Sequence[str] = ()) -> None:
        self.dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.jvm_args = tuple(jvm_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.stop_s: float | None = None

    # -- where things are

    @property
    def data_dir(self) -> Path:
        return self.dir

    @property
    def config_path(self) -> Path:
        return self.dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.dir / "zookeeper.log"

    @property
    def out_path(self) -> Path:
        return self.dir / "zookeeper.out"

    @property
    def client_host(self) -> str:
        """The address clients use (a wildcard listen address is reached on loopback)."""
        return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)

    @property
    def connect_string(self) -> str:
        host = self.client_host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ruok(self, timeout_s: float = 1.0) -> bool:
        """True if the server answers ``ruok`` with ``imok`` (its listener is up)."""
        try:
            return four_letter_word(self.client_host, self.port, "ruok", timeout_s) == "imok"
        except OSError:
            return False

    def serving(self, timeout_s: float = 1.0) -> bool:
        """True once the server answers ``ruok`` *and* serves requests.

        ZooKeeper answers ``imok`` as soon as its listener is up, a moment before it has loaded its
        database; until then ``srvr`` says "This ZooKeeper instance is not currently serving requests".
        """
        if not self.ruok(timeout_s):
            return False
        try:
            return four_letter_word(self.client_host, self.port, "srvr", timeout_s).startswith("Zookeeper version")
        except OSError:
            return False

    # -- files

    def _write_config(self) -> None:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            "# Written by strandline at every start; edit EmbeddedZooKeeper's arguments instead.",
            f"dataDir={self.dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"tickTime={self.tick_time_ms}",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            "",
        ]))
        (self.dir / "log4j2.xml").write_text(LOG4J2_XML.format(log=self.log_path))

    def _command(self, java: str, classpath: str) -> list[str]:
        log4j = self.dir / "log4j2.xml"
        return [java, *JVM_FLAGS, *self.jvm_args,
                f"-XX:ErrorFile={self.dir / 'hs_err_pid%p.log'}",
                f"-Dlog4j2.configurationFile={log4j}", f"-Dlog4j.configurationFile={log4j}",
                "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.admin.enableServer=false",
                "-cp", classpath, MAIN_CLASS, str(self.config_path)]

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of zookeeper.log and zookeeper.out, joined into one line."""
        tail = log_tail(self.log_path, lines) + log_tail(self.out_path, lines)
        return " | ".join(tail[-lines:]) if tail else f"nothing in {self.log_path}"

    # -- life cycle

    def start(self, timeout_s: float = 30) -> None:
        """Start the server and wait until it answers ``ruok``; StrandlineError (one line) if it cannot."""
        if self.running:
            return
        began = time.monotonic()
        java = check_java()
        classpath = zookeeper_classpath()
        if _port_taken(self.host, self.port):
            raise StrandlineError(f"cannot start ZooKeeper: port {self.port} on {self.host} is already in use "
                                  f"(another ZooKeeper? choose another port)")
        self._write_config()
        self.proc = spawn(self._command(java, classpath), self.out_path, subprocess.STDOUT, cwd=self.dir)
        deadline = began + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise StrandlineError(f"ZooKeeper exited with code {code} while starting on "
                                      f"{self.connect_string}: {self.log_tail()}")
            if self.serving(timeout_s=max(0.1, min(1.0, deadline - time.monotonic()))):
                break
            if time.monotonic() >= deadline:
                self.stop()
                raise StrandlineError(f"ZooKeeper did not answer on {self.connect_string} within "
                                      f"{timeout_s:.0f} s: {self.log_tail()}")
            try:
                self.proc.wait(0.02)  # between polls of the port; returns at once if the JVM exits
            except subprocess.TimeoutExpired:
                pass
        self.startup_s = time.monotonic() - began
        log.info("ZooKeeper started on %s in %.2f s (pid %d, data in %s)", self.connect_string, self.startup_s,
                 self.proc.pid, self.dir / "data")

    def stop(self, timeout_s: float = 10) -> None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        began = time.monotonic()
        stop_processes([proc], timeout_s, on_kill=lambda pid: log.warning(
            "ZooKeeper (pid %d) did not stop within %.0f s; killing it", pid, timeout_s))
        self.stop_s = time.monotonic() - began
        log.info("ZooKeeper on %s stopped in %.2f s", self.connect_string, self.stop_s)

    def __enter__(self) -> "EmbeddedZooKeeper":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def zookeeper_for(given: str | None, data_dir: Path, port: int) -> tuple[str, EmbeddedZooKeeper | None]:
    """A cluster's ZooKeeper: ``given`` (the connect string of one that runs), or else an embedded
    one started in ``data_dir`` on ``port``. Its connect string, and the server to stop (None for
    ``given``); an embedded one that could not start (or a Ctrl-C while it starts) is stopped."""
    if given:
        return given, None
    zk = EmbeddedZooKeeper(data_dir, port)
    try:
        zk.start()
    except BaseException:
        zk.stop()
        raise
    return zk.connect_string, zk


def main_zookeeper(data_dir: str, port: int) -> int:
    """``strandline zookeeper``: run until SIGINT/SIGTERM, then stop cleanly. 1 if ZooKeeper died by itself."""
    zk = EmbeddedZooKeeper(data_dir, port)
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        zk.start()
        print(f"zookeeper.connect={zk.connect_string}", flush=True)
        print(f"strandline zookeeper: started in {zk.startup_s:.2f} s (pid {zk.pid}), logging to {zk.log_path}",
              file=sys.stderr, flush=True)
        while not stopping.is_set():
            assert zk.proc is not None
            try:
                code = zk.proc.wait(0.2)  # wakes for the server's exit; signals set ``stopping``
            except subprocess.TimeoutExpired:
                continue
            print(f"strandline zookeeper: ZooKeeper exited with code {code}: {zk.log_tail()}", file=sys.stderr)
            zk.proc = None
            return 1
        return 0
    finally:
        zk.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
