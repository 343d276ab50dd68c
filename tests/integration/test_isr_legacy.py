"""The legacy ISR mode on real broker processes: with ``inter.broker.protocol.version=2.6`` a
leader writes its partition's ISR changes to the state znode itself, as Kafka brokers did before
AlterIsr (ISR-3..ISR-5); the controller writes none of them.

A follower (neither the leader nor the controller) is SIGSTOPped for a few seconds, well inside
the ZooKeeper session timeout, and then resumed.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import cluster_fixture, poll_until
from tests.integration.replication_helpers import Writer, address, consume, controller_id, create_topic, leader_isr
from tests.integration.test_alter_isr import ALTER_ISR_LINE, LAG_MS, log_lines, metric

pytestmark = pytest.mark.integration

cluster = cluster_fixture("isrlegacy", 3, overrides=[f"replica.lag.time.max.ms={LAG_MS}",
                                                      "inter.broker.protocol.version=2.6"])


def test_a_stopped_follower_leaves_and_rejoins_the_isr_by_its_leaders_own_writes(cluster):
    """ISR-3, ISR-4, ISR-5 (legacy mode), SAFE-1: the leader writes the shrink and the expansion
    itself (its log lines say so; the controller counts no AlterIsr write and logs none), acks=all
    writes go on meanwhile and every acknowledged record is read back."""
    c = cluster
    ctl = controller_id(c)
    leader, follower = [b for b in (1, 2, 3) if b != ctl]
    create_topic(c, "legacy", {0: [leader, follower, ctl]}, min_isr=2)
    poll_until(lambda: leader_isr(c, "legacy", 0, leader) == [1, 2, 3], 15, message="full ISR")
    pid = c.broker_pid(follower)
    with Writer(address(c, leader), "legacy", **{"message.timeout.ms": 30000}) as writer:
        poll_until(lambda: len(writer.acked) >= 200, 20, message="first writes")
        os.kill(pid, signal.SIGSTOP)
        try:
            poll_until(lambda: leader_isr(c, "legacy", 0, leader) == sorted([leader, ctl]), 15,
                       message=f"broker {follower} out of the ISR")
            acked = len(writer.acked)
            poll_until(lambda: len(writer.acked) >= acked + 200, 15,
                       message=f"acks=all writes without broker {follower}")
        finally:
            os.kill(pid, signal.SIGCONT)
        poll_until(lambda: leader_isr(c, "legacy", 0, leader) == [1, 2, 3], 30,
                   message=f"broker {follower} back in the ISR")
        acked = len(writer.acked)
        poll_until(lambda: len(writer.acked) >= acked + 200, 15, message="writes after the return")
    assert log_lines(c, leader, f"ISR of legacy-0 shrank from {[leader, follower, ctl]} to {[leader, ctl]}",
                     "this leader wrote it")
    assert log_lines(c, leader, "ISR of legacy-0 changed from", "this leader wrote it")
    assert metric(c, ctl, "kafka_controller_controllerstats_isrchanges_total") == 0
    assert all(not log_lines(c, b, ALTER_ISR_LINE) for b in (1, 2, 3))
    assert writer.errors == [], f"{len(writer.errors)} records failed, e.g. {writer.errors[0]}"
    got = {value for _, _, value in consume(c.bootstrap, "legacy", 1, len(writer.acked))}
    missing = [v for v in writer.acked if v not in got]
    assert missing == [], f"{len(missing)} of {len(writer.acked)} acknowledged records lost"
