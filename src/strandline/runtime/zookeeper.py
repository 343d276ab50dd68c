"""The embedded ZooKeeper: a single-node server from the jars inside the pyspark wheel."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from strandline.errors import StrandlineError

LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


def zookeeper_classpath() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise StrandlineError("pyspark is not installed; it provides ZooKeeper's jars (run `make run`)")
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    if not list(jars.glob("zookeeper-*.jar")):
        raise StrandlineError(f"no zookeeper-*.jar in {jars}; reinstall pyspark")
    return str(jars / "*")


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.exists() else None
    return shutil.which("java")


def check_java(min_major: int = 17) -> str:
    """The java executable to use; a clear error when Java is missing or too old."""
    java = java_executable()
    if java is None:
        where = f" (JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java)" if os.environ.get("JAVA_HOME") else ""
        raise StrandlineError(f"Java was not found{where}: install Java {min_major}+ or set JAVA_HOME")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StrandlineError(f"cannot run {java}: {exc}") from None
    match = re.search(r'version "([^"]+)"', out)
    if not match:
        raise StrandlineError(f"cannot tell the version of {java}: {out.strip()[:100]}")
    version = match.group(1)
    major = int(version.split(".")[1] if version.startswith("1.") else re.split(r"[.+-]", version)[0])
    if major < min_major:
        raise StrandlineError(f"Java {min_major} or newer is required to run ZooKeeper; found {version} at {java}")
    return java


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def four_letter_word(host: str, port: int, word: bytes = b"ruok", timeout: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


class EmbeddedZooKeeper:
    def __init__(self, data_dir: str, port: int, host: str = "127.0.0.1", tick_time_ms: int = 500,
                 max_session_timeout_ms: int = 60000) -> None:
        self.dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.dir / "zookeeper.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])

    def start(self, timeout_s: float = 60) -> None:
        java = check_java()
        classpath = zookeeper_classpath()
        if _port_in_use(self.host, self.port):
            raise StrandlineError(f"cannot start ZooKeeper: port {self.port} on {self.host} is already in use "
                                  f"(choose another with --zookeeper-port, or use --zookeeper HOST:PORT)")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"dataDir={self.dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"tickTime={self.tick_time_ms}",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "initLimit=10", "syncLimit=5", "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            "autopurge.snapRetainCount=3", "autopurge.purgeInterval=1",
            "",
        ]))
        log4j = self.dir / "log4j2.properties"
        log4j.write_text(LOG4J2.format(log=self.dir / "zookeeper.log"))
        cmd = [java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               f"-Dlog4j2.configurationFile={log4j}", "-Dzookeeper.jmx.log4j.disable=true",
               "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]
        out = open(self.dir / "zookeeper.out", "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StrandlineError(f"ZooKeeper exited with code {self.proc.returncode}: {self._log_tail()}")
            try:
                if four_letter_word(self.host, self.port) == b"imok":
                    return
            except OSError:
                pass
            time.sleep(0.05)  # the JVM is starting; poll its port until the deadline
        self.stop()
        raise StrandlineError(f"ZooKeeper did not answer on {self.connect_string} within {timeout_s:.0f} s: "
                              f"{self._log_tail()}")

    def stop(self, timeout_s: float = 10) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "EmbeddedZooKeeper":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main_zookeeper(data_dir: str, port: int) -> int:
    zk = EmbeddedZooKeeper(data_dir, port)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    zk.start()
    print(f"zookeeper.connect={zk.connect_string}", flush=True)
    try:
        while not stopping:
            if zk.proc is not None and zk.proc.poll() is not None:
                print(f"strandline zookeeper: ZooKeeper exited with code {zk.proc.returncode}", file=sys.stderr)
                return 1
            time.sleep(0.2)  # supervise: notice signals and an exiting server
    finally:
        zk.stop()
    return 0
