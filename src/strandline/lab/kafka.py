"""The lab's scenarios on Apache Kafka 3.9 (ZooKeeper mode): the same namespaces, workload, faults,
sampler and audit, with three Kafka brokers in place of Strandline's (``--cluster kafka-3.9``).

Each broker is Kafka's own ``kafka.Kafka`` JVM, started as ``strandline reference up`` starts it
(its jars from ``~/.cache/strandline``, a small heap, the serial GC), under ``ip netns exec`` in
the broker's namespace, listening on the namespace's address. Its ``server.properties`` carries
the lab's keys (``replica.lag.time.max.ms``, ``zookeeper.session.timeout.ms``, the checkpoint
interval the sampler reads, the scenario's own); the topic gets ``min.insync.replicas`` and
``unclean.leader.election.enable`` from the CreateTopics request, as on Strandline. What the
sampler and the audit read is Kafka's: ListOffsets with replica id -2 (Kafka answers it with the
replica's log end offset), ``replication-offset-checkpoint`` (a follower's high watermark) and the
segments under ``log.dirs``, all in the formats Strandline writes too.

:func:`unplayable` names what Kafka 3.9 cannot play: Strandline's own keys (the legacy
high-watermark truncation, ``flush.on.ack``) and the power loss, which cuts files back to what
the broker fsynced as its flush ledger records (Strandline's brokers keep one; Kafka keeps none).
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strandline.errors import StrandlineError
from strandline.lab.cluster import LabCluster
from strandline.lab.run import LabError
from strandline.launch.process import spawn
from strandline.launch.zookeeper import check_java
from strandline.reference import KafkaDist, ensure_kafka
from strandline.reference.cluster import BROKER_JVM_FLAGS, BROKER_LOG4J, KafkaNode, wait_ready

if TYPE_CHECKING:
    from strandline.lab.network import LabNetwork
    from strandline.lab.scenarios import Scenario

STRANDLINE = "strandline"
KAFKA_3_9 = "kafka-3.9"
CLUSTERS = (STRANDLINE, KAFKA_3_9)
#: A JVM broker starts in seconds alone, in tens of seconds beside two others on a busy 2-core machine.
KAFKA_START_TIMEOUT_S = 120.0

#: Keys only Strandline knows, and why a scenario setting one cannot be played on Kafka.
STRANDLINE_ONLY_KEYS = {
    "replication.truncation": "the legacy high-watermark truncation (replication.truncation) is Strandline's "
                              "re-enactment of pre-0.11 Kafka; Kafka 3.9 always truncates by leader epoch",
    "flush.on.ack": "flush.on.ack is Strandline's key; Kafka 3.9 has no such key (only flush.messages/flush.ms)",
}
#: Scenarios whose faults include a power loss (:meth:`LabCluster.power_off`).
POWER_LOSS = {"LOSS-5", "DUR-3", "EPO-3-divergence", "EPO-3-divergence-legacy"}
POWER_LOSS_REASON = ("its power loss cuts each file back to what the broker fsynced, as the flush ledger "
                     "Strandline's brokers keep records it; Kafka keeps no such ledger")


def unplayable(scenario: Scenario, cluster: str) -> str | None:
    """None when ``scenario`` can run on ``cluster``, else one line saying why not."""
    if cluster == STRANDLINE:
        return None
    if cluster != KAFKA_3_9:
        raise StrandlineError(f"--cluster {cluster!r}: give one of {', '.join(CLUSTERS)}")
    for key, why in STRANDLINE_ONLY_KEYS.items():
        if key in scenario.broker_config or key in scenario.topic_config:
            return f"{scenario.name}: not played on Kafka 3.9: {why}"
    if scenario.name in POWER_LOSS:
        return f"{scenario.name}: not played on Kafka 3.9: {POWER_LOSS_REASON}"
    return None


@dataclass
class KafkaLabBroker(KafkaNode):
    """A Kafka broker of the lab, in ``run_dir/kafka-<id>``: a SIGSTOP may hold it still."""

    paused: bool = False


def kafka_properties(b: KafkaLabBroker, zk_connect: str, overrides: dict[str, str]) -> str:
    """server.properties of one lab broker: Kafka's keys, the lab's overrides last."""
    return "\n".join([
        "# Written by the lab (Kafka 3.9, ZooKeeper mode).",
        f"broker.id={b.id}",
        f"listeners=PLAINTEXT://{b.host}:{b.port}",
        f"log.dirs={b.log_dir}",
        f"zookeeper.connect={zk_connect}",
        "num.partitions=1",
        "offsets.topic.replication.factor=3",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "group.initial.rebalance.delay.ms=0",
        *[f"{k}={v}" for k, v in overrides.items()],
        "",
    ])


class KafkaLabCluster(LabCluster):
    """:class:`LabCluster` with Kafka 3.9's brokers; ZooKeeper, the network and the faults are the lab's."""

    dist: KafkaDist | None = None
    java: str | None = None

    def start(self) -> None:
        self.java = check_java(17)
        self.dist = ensure_kafka("3.9", quiet=True)
        super().start()

    def _new_broker(self, broker_id: int, port: int, host: str) -> KafkaLabBroker:  # type: ignore[override]  # a Kafka broker stands in for a Strandline one: the lab uses only what both have
        return KafkaLabBroker(broker_id, port, self.run_dir, host=host)

    def _wait_ready(self, brokers: list[Any]) -> None:
        wait_ready(brokers, KAFKA_START_TIMEOUT_S)

    def _launch(self, b: Any) -> None:
        """Start Kafka's broker on a configuration written anew, in the broker's namespace; it dies
        with the lab (SIGKILL). Kafka will not start while ZooKeeper still holds the registration
        of its previous life (a SIGKILLed broker's session lasts zookeeper.session.timeout.ms):
        it waits for that first, as an operator restarting it would."""
        assert self.zookeeper is not None and self.dist is not None and self.java is not None
        self._wait_unregistered(b.id)
        b.write_config(kafka_properties(b, self.zookeeper.connect_string, self.overrides))
        log4j = b.dir / "log4j.properties"
        log4j.write_text(BROKER_LOG4J.format(log=b.server_log))
        cmd = [self.java, *BROKER_JVM_FLAGS, f"-XX:ErrorFile={b.dir / 'hs_err_pid%p.log'}",
               f"-Dlog4j.configuration=file:{log4j}", f"-Dkafka.logs.dir={b.dir}",
               "-cp", self.dist.classpath, self.dist.main_class("kafka-server-start"), str(b.config_path)]
        prefix = self.network.exec_prefix(b.id) if self.network is not None else []
        b.proc = spawn([*prefix, *cmd], b.dir / "kafka.out", subprocess.STDOUT, cwd=b.dir, death_signal=signal.SIGKILL)
        b.paused = False

    def _wait_unregistered(self, broker_id: int) -> None:
        from kazoo.client import KazooClient

        assert self.zookeeper is not None
        zk = KazooClient(hosts=self.zookeeper.connect_string, timeout=5)
        zk.start(timeout=10)
        try:
            deadline = time.monotonic() + 30
            while zk.exists(f"/brokers/ids/{broker_id}") is not None:
                if time.monotonic() > deadline:
                    raise LabError(f"broker {broker_id}'s registration stayed in ZooKeeper for 30 s")
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def power_off(self, broker_id: int) -> int:
        raise LabError(f"a power loss cannot be made on Kafka: {POWER_LOSS_REASON}")


def make_cluster(cluster: str, run_dir: Path, size: int, config: dict[str, str],
                 network: LabNetwork | None) -> LabCluster:
    """The lab's cluster of ``cluster`` (one of :data:`CLUSTERS`)."""
    if cluster == STRANDLINE:
        return LabCluster(run_dir, size, config, network)
    if cluster == KAFKA_3_9:
        return KafkaLabCluster(run_dir, size, config, network)
    raise StrandlineError(f"--cluster {cluster!r}: give one of {', '.join(CLUSTERS)}")
