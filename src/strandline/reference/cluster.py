"""``strandline reference up``: a real Apache Kafka cluster in the foreground, as ``strandline up`` runs Strandline's.

Kafka 3.9 runs on ZooKeeper: Strandline's embedded one (from the pyspark wheel), or one given with
``--zookeeper``, always under a chroot of its own (``/kafka-3.9``), so that it can share a
ZooKeeper with a Strandline cluster. Kafka 4.x runs on KRaft: every node is a combined broker and
controller (``process.roles=broker,controller``) of a static quorum, its log dir formatted once
with Kafka's storage tool. Broker N (1..N) listens on base port + N - 1; on KRaft its controller
listener is on base port + brokers + N - 1. Each JVM is small (``-Xmx512m``, the serial GC) and is
stopped by its PID: SIGTERM (a controlled shutdown), then SIGKILL.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

from strandline.errors import StrandlineError
from strandline.launch.foreground import Foreground, lock_data_dir, write_json
from strandline.launch.process import ServerProcess, log_tail, spawn, stop_processes
from strandline.launch.wait import wait_for_membership
from strandline.launch.zookeeper import EmbeddedZooKeeper, check_java, zookeeper_for
from strandline.reference import KafkaDist, ensure_kafka
from strandline.uuids import uuid_to_base64

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
FORMAT_TIMEOUT_S = 60.0

#: A broker's JVM: small heap, one GC thread, the C1 compiler only (the machine may have 2 cores).
BROKER_JVM_FLAGS = ("-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
                    "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")

#: The JVM options of Kafka's own ``kafka-run-class.sh`` (``KAFKA_JVM_PERFORMANCE_OPTS``) ...
KAFKA_PERFORMANCE_OPTS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                          "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")
#: ... and a broker's JVM as ``kafka-server-start.sh`` starts it (``KAFKA_HEAP_OPTS="-Xmx1G -Xms1G"``):
#: Kafka as shipped, for comparisons of its speed and memory.
SHIPPED_BROKER_JVM_FLAGS = ("-Xmx1G", "-Xms1G", *KAFKA_PERFORMANCE_OPTS)

BROKER_LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={log}
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=3
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
BROKER_LOG4J2 = """status = error
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


def chroot_for(dist: KafkaDist) -> str:
    """The ZooKeeper chroot of a Kafka line's brokers: ``/kafka-3.9``."""
    return f"/kafka-{dist.line}"


@dataclass
class KafkaNode(ServerProcess):
    """One Kafka broker (on KRaft: a combined broker and controller) of ``reference up``."""

    KIND: ClassVar[str] = "kafka"

    controller_port: int | None = None

    @property
    def server_log(self) -> Path:
        return self.dir / "server.log"

    def tail(self, lines: int = 3) -> str:
        out = log_tail(self.server_log, lines) + log_tail(self.dir / "kafka.out", lines)
        return " | ".join(out[-lines:]) or f"nothing in {self.server_log}"


def node_properties(dist: KafkaDist, node: KafkaNode, nodes: list[KafkaNode], zk_connect: str | None,
                    overrides: list[str]) -> str:
    """server.properties of one node: Kafka's keys, replication factors no larger than the cluster."""
    n = len(nodes)
    lines = ["# Written by `strandline reference up` at every start; extra settings come from --override.",
             f"log.dirs={node.log_dir}",
             "num.partitions=1",
             f"offsets.topic.replication.factor={min(3, n)}",
             f"transaction.state.log.replication.factor={min(3, n)}",
             f"transaction.state.log.min.isr={min(2, n)}",
             "group.initial.rebalance.delay.ms=0"]
    if dist.zookeeper:
        lines += [f"broker.id={node.id}",
                  f"listeners=PLAINTEXT://127.0.0.1:{node.port}",
                  f"zookeeper.connect={zk_connect}{chroot_for(dist)}"]
    else:
        voters = ",".join(f"{other.id}@127.0.0.1:{other.controller_port}" for other in nodes)
        lines += ["process.roles=broker,controller",
                  f"node.id={node.id}",
                  f"controller.quorum.voters={voters}",
                  f"listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
                  f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}",
                  "controller.listener.names=CONTROLLER",
                  "inter.broker.listener.name=PLAINTEXT",
                  "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]
    return "\n".join([*lines, *overrides, ""])


def _log_flags(dist: KafkaDist, node: KafkaNode) -> list[str]:
    if dist.zookeeper:
        path = node.dir / "log4j.properties"
        path.write_text(BROKER_LOG4J.format(log=node.server_log))
        return [f"-Dlog4j.configuration=file:{path}", f"-Dkafka.logs.dir={node.dir}"]
    path = node.dir / "log4j2.properties"
    path.write_text(BROKER_LOG4J2.format(log=node.server_log))
    return [f"-Dlog4j2.configurationFile={path}", f"-Dkafka.logs.dir={node.dir}"]


def cluster_id(root: Path) -> str:
    """The KRaft cluster's id, made once and kept in ``<data-dir>/cluster-id``."""
    path = root / "cluster-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        import uuid

        value = uuid_to_base64(uuid.uuid4())
        path.write_text(value + "\n")
        return value


def format_storage(dist: KafkaDist, node: KafkaNode, cid: str) -> None:
    """``kafka-storage format`` for a node whose log dir is not formatted yet."""
    if (node.log_dir / "meta.properties").exists():
        return
    done = dist.run_tool("kafka-storage", ["format", "--cluster-id", cid, "--config", str(node.config_path),
                                           "--ignore-formatted"], timeout=FORMAT_TIMEOUT_S)
    if done.returncode != 0:
        lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
        raise StrandlineError(f"kafka-storage format of node {node.id} failed: {lines[-1] if lines else 'no output'}")


def start_node(dist: KafkaDist, node: KafkaNode, java: str, jvm_flags: Sequence[str] = BROKER_JVM_FLAGS) -> None:
    """Start one node's JVM (``jvm_flags``: the small one by default, :data:`SHIPPED_BROKER_JVM_FLAGS` as shipped)."""
    cmd = [java, *jvm_flags, f"-XX:ErrorFile={node.dir / 'hs_err_pid%p.log'}", *_log_flags(dist, node),
           "-cp", dist.classpath, dist.main_class("kafka-server-start"), str(node.config_path)]
    node.proc = spawn(cmd, node.dir / "kafka.out", subprocess.STDOUT, cwd=node.dir)


def wait_ready(nodes: list[KafkaNode], timeout_s: float) -> None:
    """Until every broker answers Metadata listing every broker, or fail naming the one that did not."""
    wait_for_membership(nodes, timeout_s, what="Kafka node", client_id="strandline-reference", interval_s=0.2)


def stop_nodes(nodes: list[KafkaNode], timeout_s: float) -> None:
    """SIGTERM every JVM by its PID (a controlled shutdown), wait up to ``timeout_s``, SIGKILL those left."""
    stop_processes([n.proc for n in nodes if n.proc is not None], timeout_s, on_kill=lambda pid: print(
        f"strandline reference up: Kafka (pid {pid}) did not stop within {timeout_s:.0f} s; killing it",
        file=sys.stderr, flush=True))


def run_reference_up(line: str, num_brokers: int, data_dir: str | None, base_port: int, zookeeper: str | None,
                     zookeeper_port: int, overrides: list[str]) -> int:
    """Run a Kafka cluster until SIGINT or SIGTERM; 0 after a clean stop, 1 when it could not start."""
    java = check_java(17)
    dist = ensure_kafka(line, quiet=True)
    root = Path(data_dir or f"kafka-{dist.version}-data").resolve()
    lock = lock_data_dir(root, "strandline reference up")
    (root / "reference.json").unlink(missing_ok=True)
    run = Foreground()
    run.catch_signals()
    zk: EmbeddedZooKeeper | None = None
    nodes = [KafkaNode(i + 1, base_port + i, root,
                       None if dist.zookeeper else base_port + num_brokers + i) for i in range(num_brokers)]
    try:
        zk_connect = None
        if dist.zookeeper:
            zk_connect, zk = zookeeper_for(zookeeper, root / "zookeeper", zookeeper_port)
        for node in nodes:
            node.write_config(node_properties(dist, node, nodes, zk_connect, overrides))
        if not dist.zookeeper:
            cid = cluster_id(root)
            for node in nodes:
                format_storage(dist, node, cid)
        for node in nodes:
            start_node(dist, node, java)
        wait_ready(nodes, START_TIMEOUT_S)
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
        info = {"kafka": dist.version, "line": dist.line, "bootstrap": bootstrap,
                "zookeeper": f"{zk_connect}{chroot_for(dist)}" if zk_connect else None,
                "zookeeper_pid": zk.pid if zk else None,
                "nodes": [{"id": n.id, "port": n.port, "controller_port": n.controller_port,
                           "pid": n.proc.pid if n.proc else None, "log_dir": str(n.log_dir),
                           "server_log": str(n.server_log)} for n in nodes]}
        write_json(root / "reference.json", info)
        run.started()
        for n in nodes:
            print(f"kafka {dist.version} node {n.id}: pid {n.proc.pid if n.proc else '?'}, log {n.server_log}",
                  flush=True)
        if zk_connect:
            print(f"zookeeper.connect={zk_connect}{chroot_for(dist)}", flush=True)
        print("bootstrap.servers=" + bootstrap, flush=True)
        tails = {n.id: n for n in nodes}
        run.supervise([(n.id, n.proc) for n in nodes], lambda node_id, code: print(
            f"strandline reference up: Kafka node {node_id} exited with code {code}: {tails[node_id].tail(1)}",
            file=sys.stderr, flush=True))
        return 0
    except StrandlineError as exc:
        print(f"strandline reference up: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("strandline reference up: interrupted during start-up; stopping", file=sys.stderr, flush=True)
        return 130
    finally:
        run.ignore_signals()
        stop_nodes(nodes, STOP_TIMEOUT_S)
        if zk is not None:
            zk.stop()
        lock.release()
        run.restore_signals()
