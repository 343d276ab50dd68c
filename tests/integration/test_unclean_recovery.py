"""Eligible leader replicas and unclean recovery (KIP-966; ELR-1) on real broker processes.

Four brokers with ``eligible.leader.replicas.enable=true`` and the default
``unclean.recovery.strategy=Balanced``; a partition on the three that are not the controller, with
``min.insync.replicas=2``. Its followers are SIGKILLed (the ISR shrinks to the leader, the two
join the ELR), then its leader. Back, all three registered after an unclean shutdown: none is
eligible, the ISR and ELR are empty. The controller asks each for its log over the network
(GetReplicaLogInfo) and elects the newest and longest: every acknowledged write is read back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cluster, cluster_fixture, poll_until, run_cli
from tests.integration.replication_helpers import (consume, controller_id, create_topic, current_leader,
                                                   leader_isr)

pytestmark = pytest.mark.integration

cluster = cluster_fixture("uncleanrecovery", 4, overrides=[
    "eligible.leader.replicas.enable=true", "replica.lag.time.max.ms=1000", "zookeeper.session.timeout.ms=6000"])


def log_lines(c: Cluster, broker_id: int, needle: str) -> list[str]:
    log = Path(c.data_dir) / f"broker-{broker_id}" / "broker.log"
    return [line for line in log.read_text(errors="replace").splitlines() if needle in line]


def cli(c: Cluster, action: str, broker: int) -> None:
    done = run_cli("cluster", action, str(broker), "--data-dir", str(c.data_dir), timeout=90)
    assert done.returncode == 0, done.stderr


def test_a_partition_whose_every_eligible_replica_crashed_is_recovered_with_every_acknowledged_write(cluster):
    from confluent_kafka import Producer

    c = cluster
    ctl = controller_id(c)
    leader, *followers = [b for b in (1, 2, 3, 4) if b != ctl]
    create_topic(c, "recovered", {0: [leader, *followers]}, min_isr=2)
    poll_until(lambda: leader_isr(c, "recovered", 0, leader) == sorted([leader, *followers]), 20,
               message="full ISR")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked: list[bytes] = []
    for i in range(300):
        producer.produce("recovered", b"r-%03d" % i,
                         on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
    assert producer.flush(30) == 0 and len(acked) == 300

    for b in followers:
        cli(c, "kill", b)
    poll_until(lambda: leader_isr(c, "recovered", 0, leader) == [leader], 30, message="the ISR shrunk to the leader")
    cli(c, "kill", leader)
    poll_until(lambda: current_leader(c, "recovered", 0, [ctl]) == -1, 30, message="the partition offline")
    for b in (leader, *followers):
        cli(c, "start", b)
    poll_until(lambda: current_leader(c, "recovered", 0, [ctl]) in (leader, *followers), 60,
               message="a leader elected by unclean recovery")
    [line] = log_lines(c, ctl, "Unclean recovery (Balanced) of recovered-0: electing broker")
    for b in (leader, *followers):          # each answered GetReplicaLogInfo: the same log, 300 records
        assert f"{b}: epoch 0, end offset 300" in line, line
    got = consume(c.bootstrap, "recovered", 1, 300, timeout=60)
    assert [v for _, _, v in got] == acked
