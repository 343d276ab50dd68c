"""ISR changes through the controller (AlterIsr, KIP-497) on real broker processes: with the default
``inter.broker.protocol.version`` (2.8-IV1) a leader proposes each shrink and expansion to the
controller, which writes the partition state znode (ISR-3..ISR-5, SAFE-1).

The leader, the follower that is killed and the controller are three different brokers, so the
proposal crosses the network and the controller never stops. The follower is SIGKILLed and
started again (``strandline cluster kill|start``); a short ``zookeeper.session.timeout.ms`` lets it
register again within seconds.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Cluster, cluster_fixture, poll_until, run_cli
from tests.integration.replication_helpers import (Writer, address, consume, controller_id, create_topic,
                                                   leader_isr)

pytestmark = pytest.mark.integration

LAG_MS = 1000
ALTER_ISR_LINE = "as its leader proposed (AlterIsr)"

cluster = cluster_fixture("alterisr", 3, overrides=[f"replica.lag.time.max.ms={LAG_MS}",
                                                     "zookeeper.session.timeout.ms=6000"])


def metric(c: Cluster, broker_id: int, name: str) -> float:
    """A family's sample without labels, read from the broker's /metrics."""
    url = next(b["metrics"] for b in c.info["brokers"] if b["id"] == broker_id)
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and not s.labels)


def log_lines(c: Cluster, broker_id: int, *needles: str) -> list[str]:
    log = Path(c.data_dir) / f"broker-{broker_id}" / "broker.log"
    return [line for line in log.read_text(errors="replace").splitlines() if all(n in line for n in needles)]


def test_a_killed_follower_leaves_and_rejoins_the_isr_through_the_controller(cluster):
    """ISR-3, ISR-4, ISR-5 (AlterIsr), SAFE-1: a SIGKILLed follower leaves the ISR, the controller
    writing the shrink its leader proposed (its log line and kafka_controller_controllerstats_
    isrchanges) while acks=all writes go on with the other two replicas (min.insync.replicas=2);
    started again it catches up and the controller writes it back; every acknowledged record is
    read back."""
    c = cluster
    ctl = controller_id(c)
    leader, follower = [b for b in (1, 2, 3) if b != ctl]
    create_topic(c, "proposed", {0: [leader, follower, ctl]}, min_isr=2)
    poll_until(lambda: leader_isr(c, "proposed", 0, leader) == [1, 2, 3], 15, message="full ISR")
    written = "kafka_controller_controllerstats_isrchanges_total"
    before = metric(c, ctl, written)
    with Writer(address(c, leader), "proposed", **{"message.timeout.ms": 30000}) as writer:
        poll_until(lambda: len(writer.acked) >= 200, 20, message="first writes")
        kill = run_cli("cluster", "kill", str(follower), "--data-dir", str(c.data_dir))
        assert kill.returncode == 0, kill.stderr
        poll_until(lambda: leader_isr(c, "proposed", 0, leader) == sorted([leader, ctl]), 15,
                   message=f"broker {follower} out of the ISR")
        shrinks = log_lines(c, ctl, "proposed-0", f"to {[leader, ctl]}", ALTER_ISR_LINE)
        assert shrinks, f"no line of controller {ctl} saying it wrote the shrink of proposed-0 (AlterIsr)"
        assert metric(c, ctl, written) >= before + 1
        assert log_lines(c, leader, "ISR of proposed-0 shrank", "the controller wrote it (AlterIsr)")
        acked = len(writer.acked)
        poll_until(lambda: len(writer.acked) >= acked + 200, 15, message=f"acks=all writes without broker {follower}")
        start = run_cli("cluster", "start", str(follower), "--data-dir", str(c.data_dir), timeout=60)
        assert start.returncode == 0, start.stderr
        poll_until(lambda: leader_isr(c, "proposed", 0, leader) == [1, 2, 3], 30,
                   message=f"broker {follower} back in the ISR")
        assert metric(c, ctl, written) >= before + 2
        assert len(log_lines(c, ctl, "proposed-0", ALTER_ISR_LINE)) >= 2
        acked = len(writer.acked)
        poll_until(lambda: len(writer.acked) >= acked + 200, 15, message="writes after the return")
    assert writer.errors == [], f"{len(writer.errors)} records failed, e.g. {writer.errors[0]}"
    got = {value for _, _, value in consume(c.bootstrap, "proposed", 1, len(writer.acked))}
    missing = [v for v in writer.acked if v not in got]
    assert missing == [], f"{len(missing)} of {len(writer.acked)} acknowledged records lost"
    assert metric(c, leader, "kafka_server_replicamanager_isrshrinks_total") >= 1
    assert metric(c, leader, "kafka_server_replicamanager_isrexpands_total") >= 1
