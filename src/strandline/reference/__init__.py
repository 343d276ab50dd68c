"""Apache Kafka itself, next to Strandline: its jars fetched on demand, its tools and brokers run by PID.

Each supported Kafka line has a pom beside this file (``kafka-3.9/pom.xml``, ``kafka-4/pom.xml``)
listing ``kafka_2.13``, ``kafka-tools`` and the logging binding Kafka's own distribution ships.
:func:`ensure_kafka` runs ``mvn -q dependency:copy-dependencies`` on it once, into
``~/.cache/strandline/kafka-<version>/libs`` (``$XDG_CACHE_HOME`` is honoured), and writes a
marker file when every jar is there; later calls only read the marker. Nothing of Kafka is built,
copied into the repository or changed: tools run as Kafka's scripts run them,
``java -cp '<libs>/*' <main class> args...``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from strandline.errors import StrandlineError

HERE = Path(__file__).resolve().parent

#: A Kafka line -> the directory of its pom. ``4`` is the newest 4.x that resolves (its pom pins it).
LINES = {"3.9": "kafka-3.9", "4": "kafka-4"}
MARKER = "complete.json"
FETCH_TIMEOUT_S = 900.0

#: Each tool (the name of its script in Kafka's bin/) -> the main classes that script runs, newest
#: first: the first one that one of the line's jars holds is the one (tools moved from Scala to Java).
TOOLS: dict[str, tuple[str, ...]] = {
    "kafka-server-start": ("kafka.Kafka",),
    "kafka-storage": ("kafka.tools.StorageTool", "org.apache.kafka.tools.StorageTool"),
    "kafka-topics": ("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand"),
    "kafka-configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "kafka-consumer-groups": ("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                              "kafka.admin.ConsumerGroupCommand"),
    "kafka-share-groups": ("org.apache.kafka.tools.consumer.group.ShareGroupCommand",),
    "kafka-console-share-consumer": ("org.apache.kafka.tools.consumer.ConsoleShareConsumer",),
    "kafka-console-producer": ("org.apache.kafka.tools.ConsoleProducer", "kafka.tools.ConsoleProducer"),
    "kafka-console-consumer": ("org.apache.kafka.tools.consumer.ConsoleConsumer", "kafka.tools.ConsoleConsumer"),
    "kafka-reassign-partitions": ("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                                  "kafka.admin.ReassignPartitionsCommand"),
    "kafka-leader-election": ("org.apache.kafka.tools.LeaderElectionCommand", "kafka.admin.LeaderElectionCommand"),
    "kafka-delete-records": ("org.apache.kafka.tools.DeleteRecordsCommand", "kafka.admin.DeleteRecordsCommand"),
    "kafka-acls": ("org.apache.kafka.tools.AclCommand", "kafka.admin.AclCommand"),
    "kafka-transactions": ("org.apache.kafka.tools.TransactionsCommand",),
    "kafka-log-dirs": ("org.apache.kafka.tools.LogDirsCommand", "kafka.admin.LogDirsCommand"),
    "kafka-get-offsets": ("org.apache.kafka.tools.GetOffsetShell", "kafka.tools.GetOffsetShell"),
    "kafka-producer-perf-test": ("org.apache.kafka.tools.ProducerPerformance",),
    "kafka-consumer-perf-test": ("org.apache.kafka.tools.ConsumerPerformance", "kafka.tools.ConsumerPerformance"),
    "kafka-verifiable-producer": ("org.apache.kafka.tools.VerifiableProducer",),
    "kafka-verifiable-consumer": ("org.apache.kafka.tools.VerifiableConsumer",),
    "kafka-dump-log": ("org.apache.kafka.tools.DumpLogSegments", "kafka.tools.DumpLogSegments"),
    "kafka-broker-api-versions": ("org.apache.kafka.tools.BrokerApiVersionsCommand",
                                  "kafka.admin.BrokerApiVersionsCommand"),
    "kafka-features": ("org.apache.kafka.tools.FeatureCommand", "kafka.admin.FeatureCommand"),
}

#: The JVM of a tool: small, one GC thread, the C1 compiler only (a tool runs for seconds).
TOOL_JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
                  "-Djava.awt.headless=true")

#: Messages of a Maven run that could not reach its repository at all (no route, no name, refused).
UNREACHABLE = re.compile(r"UnknownHostException|Unknown host|NoRouteToHostException|No route to host|"
                         r"Network is unreachable|ConnectException|Connection refused|connect timed out|"
                         r"Connect to \S+ failed|Temporary failure in name resolution|"
                         r"Name or service not known|repo\.maven\.apache\.org: .*resolution", re.I)
#: Maven Central, as Maven reaches it where no mirror is configured.
CENTRAL = ("repo.maven.apache.org", 443)
#: What quiet Maven prints, and no host, where a plugin could not be had: with no network and no
#: plugin in the local repository, the download failures are warnings that -q hides.
NO_PLUGIN = re.compile(r"No plugin found for prefix")


def maven_central_reachable(timeout: float = 5.0) -> bool:
    """Whether a TCP connection to Maven Central opens (name resolved, route, port open)."""
    try:
        socket.create_connection(CENTRAL, timeout=timeout).close()
        return True
    except OSError:
        return False


def maven_unreachable(output: str) -> bool:
    """Whether a failed Maven run's output says that Maven Central could not be reached at all: a
    host, route or connection refused in so many words, or no plugin found where Maven Central does
    not answer a connection either."""
    return bool(UNREACHABLE.search(output)) or (bool(NO_PLUGIN.search(output)) and not maven_central_reachable())

# Tools log warnings and errors to stderr, as Kafka's tools-log4j.properties has them.
TOOLS_LOG4J = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
"""
TOOLS_LOG4J2 = """status = error
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
"""


class KafkaFetchError(StrandlineError):
    """Kafka's jars are not here and could not be fetched; ``unreachable``: Maven Central could not
    be reached at all (no network), as opposed to a fetch that reached it and failed."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def normalize_line(text: str) -> str:
    """``3.9``, ``3.9.2`` -> ``3.9``; ``4``, ``4.x``, ``4.4``, ``4.4.0`` -> ``4``."""
    value = text.strip().lower()
    if value.startswith("3.9"):
        return "3.9"
    if value == "4" or value.startswith("4."):
        return "4"
    raise StrandlineError(f"--kafka {text!r}: Strandline runs Kafka 3.9 or 4.x (give 3.9 or 4)")


def pom_path(line: str) -> Path:
    return HERE / LINES[normalize_line(line)] / "pom.xml"


def pom_version(line: str) -> str:
    """The Kafka version the line's pom pins (its ``kafka.version`` property)."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom_path(line).read_text())
    if not match:
        raise StrandlineError(f"{pom_path(line)} has no kafka.version property")
    return match.group(1).strip()


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "strandline"


@dataclass
class KafkaDist:
    """One fetched Kafka: its version, its ``libs`` directory and its main classes."""

    line: str
    version: str
    home: Path
    _classes: set[str] | None = field(default=None, repr=False)

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def classpath(self) -> str:
        """``<libs>/*``, as Kafka's kafka-run-class.sh builds it (the JVM expands the wildcard)."""
        return str(self.libs / "*")

    @property
    def zookeeper(self) -> bool:
        """Whether this Kafka's brokers run on ZooKeeper (3.9) or on KRaft only (4.x)."""
        return self.line == "3.9"

    def _known_classes(self) -> set[str]:
        if self._classes is None:
            classes: set[str] = set()
            for jar in self.libs.glob("*.jar"):
                if jar.name.startswith(("kafka_2.13-", "kafka-tools-", "kafka-storage-", "kafka-server-")):
                    with zipfile.ZipFile(jar) as z:
                        classes.update(n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class"))
            self._classes = classes
        return self._classes

    def main_class(self, tool: str) -> str:
        """The main class Kafka's ``bin/<tool>.sh`` runs in this version."""
        if tool not in TOOLS:
            raise StrandlineError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(TOOLS))}")
        known = self._known_classes()
        for candidate in TOOLS[tool]:
            if candidate in known:
                return candidate
        raise StrandlineError(f"Kafka {self.version} has none of {', '.join(TOOLS[tool])} for {tool}")

    def tools_log_config(self) -> list[str]:
        """The JVM flags that point a tool's logging at stderr, warnings and errors only."""
        config = self.home / "config"
        config.mkdir(exist_ok=True)
        if self.zookeeper:
            path = config / "tools-log4j.properties"
            _write_if_changed(path, TOOLS_LOG4J)
            return [f"-Dlog4j.configuration=file:{path}"]
        path = config / "tools-log4j2.properties"
        _write_if_changed(path, TOOLS_LOG4J2)
        return [f"-Dlog4j2.configurationFile={path}"]

    def tool_command(self, tool: str, args: Sequence[str], java: str | None = None,
                     jvm_flags: Sequence[str] = TOOL_JVM_FLAGS) -> list[str]:
        """``java <flags> -cp <libs>/* <main class> args...``: the command Kafka's script would run."""
        from strandline.launch.zookeeper import check_java

        return [java or check_java(17), *jvm_flags, *self.tools_log_config(), "-cp", self.classpath,
                self.main_class(tool), *args]

    def run_tool(self, tool: str, args: Sequence[str], timeout: float = 120, input: str | None = None,
                 env: dict[str, str] | None = None, jvm_flags: Sequence[str] = TOOL_JVM_FLAGS,
                 ) -> subprocess.CompletedProcess[str]:
        """Run one tool to its end; its output as text. ``TimeoutExpired`` after ``timeout`` seconds
        (the JVM is killed first)."""
        return subprocess.run(self.tool_command(tool, args, jvm_flags=jvm_flags), capture_output=True, text=True,
                              timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                              env={**os.environ, **env} if env else None)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def fetched(line: str) -> KafkaDist | None:
    """The line's Kafka if its jars are all in the cache, else None (nothing is fetched)."""
    line = normalize_line(line)
    version = pom_version(line)
    home = cache_root() / f"kafka-{version}"
    try:
        marker = json.loads((home / MARKER).read_text())
    except (OSError, ValueError):
        return None
    jars = marker.get("jars") or []
    if marker.get("version") != version or not jars or not all((home / "libs" / j).is_file() for j in jars):
        return None
    return KafkaDist(line, version, home)


def maven_executable() -> str | None:
    return shutil.which("mvn")


def ensure_kafka(line: str, quiet: bool = True) -> KafkaDist:
    """The line's Kafka, fetched from Maven Central first if the cache does not hold it whole.

    One process fetches at a time (a lock file beside the cache); the jars land in a fresh
    directory that replaces ``libs`` only once Maven has copied them all, and the marker is written
    last, so an interrupted fetch is started again, never half used. KafkaFetchError (one line)
    when it cannot be fetched, with ``unreachable`` set when Maven Central could not be reached.
    """
    line = normalize_line(line)
    dist = fetched(line)
    if dist is not None:
        return dist
    version = pom_version(line)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    home = root / f"kafka-{version}"
    with open(root / f"kafka-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dist = fetched(line)      # another process may have fetched it while we waited
        if dist is not None:
            return dist
        mvn = maven_executable()
        if mvn is None:
            raise KafkaFetchError(f"Kafka {version}'s jars are not in {home} and Maven (mvn) is not installed "
                                  f"to fetch them: install Maven (apt-get install maven)")
        home.mkdir(exist_ok=True)
        staging = home / f"libs.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [mvn, "-B", "-f", str(pom_path(line)), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}"]
        if quiet:
            cmd.insert(1, "-q")
        began = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaFetchError(f"fetching Kafka {version} from Maven Central took over {FETCH_TIMEOUT_S:.0f} s",
                                  unreachable=True) from None
        output = done.stdout + done.stderr
        jars = sorted(p.name for p in staging.glob("*.jar")) if staging.is_dir() else []
        if done.returncode != 0 or not jars:
            shutil.rmtree(staging, ignore_errors=True)
            errors = [ln.strip() for ln in output.splitlines() if "[ERROR]" in ln and ln.strip() != "[ERROR]"]
            first = errors[0] if errors else (output.strip().splitlines() or ["no output"])[-1]
            raise KafkaFetchError(f"mvn could not fetch Kafka {version} ({pom_path(line)}): {first[:300]}",
                                  unreachable=maven_unreachable(output))
        libs = home / "libs"
        if libs.exists():
            shutil.rmtree(libs)
        os.replace(staging, libs)
        (home / MARKER).write_text(json.dumps({"version": version, "line": line, "jars": jars,
                                               "fetch_s": round(time.monotonic() - began, 1)}, indent=1) + "\n")
    return KafkaDist(line, version, home)
