"""Failover with real broker processes (CTL-1, CTL-6..9, SAFE-1, LOSS-2).

One 3-broker cluster for the module with a short ZooKeeper session (so a SIGKILLed broker is
noticed within SESSION_MS) and a short replica.lag.time.max.ms. Failures are made with the
`strandline cluster kill|stop|start` commands a user would type.
"""

from __future__ import annotations

import os
import re
import signal
import time

from kio.schema.errors import ErrorCode

from strandline.runtime.client import KafkaConnection
from tests.conftest import cluster_fixture, Cluster, poll_until, run_cli
from tests.integration.replication_helpers import (PRODUCE, Writer, address, consume, create_topic, current_leader,
                                                   leader_isr, max_gap_around)
from tests.unit.batches import make_batch

SESSION_MS = 4000
LAG_MS = 1000


fo = cluster_fixture("failover", 3, overrides=[f"zookeeper.session.timeout.ms={SESSION_MS}",
                                               f"replica.lag.time.max.ms={LAG_MS}",
                                               "controlled.shutdown.retry.backoff.ms=500"])


def cluster_cli(c: Cluster, action: str, broker_id: int) -> None:
    result = run_cli("cluster", action, str(broker_id), "--data-dir", str(c.data_dir), timeout=120)
    assert result.returncode == 0, result.stderr


def controller_of(c: Cluster, brokers=(1, 2, 3)) -> int:
    for b in brokers:
        try:
            with KafkaConnection(address(c, b), timeout_s=5) as conn:
                resp = conn.request(3, 10, {"topics": [], "allow_auto_topic_creation": False})
            return int(resp.controller_id)
        except Exception:
            continue
    return -1


def acks_all_produce(c: Cluster, broker: int, topic: str, value: bytes) -> int:
    with KafkaConnection(address(c, broker), timeout_s=5) as conn:
        resp = conn.request(PRODUCE, 7, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(make_batch([value]))}]}]})
    return resp.responses[0].partition_responses[0].error_code


def check_all_acknowledged_once_in_order(c: Cluster, topic: str, writer: Writer) -> None:
    got = consume(c.bootstrap, topic, 1, len(writer.acked), timeout=60)
    values = [v for _, _, v in got if not v.startswith(b"probe")]
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(writer.acked) <= set(values), f"{len(set(writer.acked) - set(values))} acknowledged records lost"
    numbers = [int(v[:8]) for v in values]
    assert numbers == sorted(numbers), "records out of order within the partition"


def test_sigkill_of_the_leader_then_of_the_controller_loses_no_acknowledged_record(fo):
    """CTL-6, CTL-1, CTL-8, CLI-3, SAFE-1: writes (acks=all, idempotent) go on through the SIGKILL of the
    partition's leader and later of the controller; each time a new leader from the ISR serves
    within the session timeout plus a second; at the end every acknowledged record is there
    exactly once, in order."""
    controller = controller_of(fo)
    leader, other = [b for b in (1, 2, 3) if b != controller]
    create_topic(fo, "fo", {0: [leader, other, controller]})
    poll_until(lambda: leader_isr(fo, "fo", 0, leader) == [1, 2, 3], 10, message="full ISR")
    with Writer(fo.bootstrap, "fo") as writer:
        poll_until(lambda: len(writer.acked) > 100, 20, message="first writes")
        cluster_cli(fo, "kill", leader)
        killed_at = time.monotonic()    # the CLI returns once the broker is gone (its own start, ~0.5 s, is not failover)
        poll_until(lambda: acks_all_produce(fo, other, "fo", b"probe-after-leader") == ErrorCode.none,
                   SESSION_MS / 1000 + 5, interval=0.05, message="the new leader acknowledging")
        leader_failover_s = time.monotonic() - killed_at
        assert current_leader(fo, "fo", 0, [other, controller]) == other
        cluster_cli(fo, "start", leader)
        poll_until(lambda: leader_isr(fo, "fo", 0, other) == [1, 2, 3], 30, message="the old leader back in the ISR")
        count = len(writer.acked)
        cluster_cli(fo, "kill", controller)
        killed_at = time.monotonic()
        poll_until(lambda: controller_of(fo, [leader, other]) in (leader, other), SESSION_MS / 1000 + 5,
                   message="a new controller")
        controller_failover_s = time.monotonic() - killed_at
        poll_until(lambda: len(writer.acked) > count + 200, 20, message="writes after the controller died")
        cluster_cli(fo, "start", controller)
        poll_until(lambda: leader_isr(fo, "fo", 0, other) == [1, 2, 3], 30, message="every broker back in the ISR")
    assert not writer.errors
    assert leader_failover_s <= SESSION_MS / 1000 + 1, leader_failover_s
    assert controller_failover_s <= SESSION_MS / 1000 + 1, controller_failover_s
    check_all_acknowledged_once_in_order(fo, "fo", writer)


def test_sigterm_of_a_leader_moves_leadership_before_it_stops(fo):
    """CTL-9: `strandline cluster stop` (SIGTERM) moves the leadership first (a controlled
    shutdown): the new leader leads when the command returns, writes pause briefly (typically
    well under a second) and lose nothing; the broker comes back with `cluster start`."""
    controller = controller_of(fo)
    leader, other = [b for b in (1, 2, 3) if b != controller]
    create_topic(fo, "cs", {0: [leader, other, controller]})
    poll_until(lambda: leader_isr(fo, "cs", 0, leader) == [1, 2, 3], 10, message="full ISR")
    with Writer(fo.bootstrap, "cs", interval_s=0.001) as writer:
        poll_until(lambda: len(writer.acked) > 200, 20, message="first writes")
        log_path = fo.data_dir / f"broker-{leader}" / "broker.log"
        logged = len(log_path.read_bytes())
        stopped_at = time.monotonic()
        cluster_cli(fo, "stop", leader)
        assert current_leader(fo, "cs", 0, [other, controller]) == other
        count = len(writer.acked)
        poll_until(lambda: len(writer.acked) > count + 200, 20, message="writes after the stop")
    gap = max_gap_around(writer.ack_times, stopped_at + 0.05)
    assert not writer.errors
    log = log_path.read_bytes()[logged:].decode(errors="replace")
    assert "Controlled shutdown succeeded" in log, log[-2000:]
    # without the handover the writes would wait for the stopped broker's session to expire
    # (SESSION_MS) and an election; the handover itself takes tens of milliseconds when the machine
    # is idle, more on a busy shared one
    assert gap < SESSION_MS / 1000, f"writes paused {gap:.2f} s"
    check_all_acknowledged_once_in_order(fo, "cs", writer)
    cluster_cli(fo, "start", leader)
    poll_until(lambda: leader_isr(fo, "cs", 0, other) == [1, 2, 3], 30, message="back in the ISR")


def all_isr_dead(fo: Cluster, topic: str, unclean: bool) -> tuple[list[bytes], int, int]:
    """Two replicas: the follower is frozen until it leaves the ISR, the leader takes more writes,
    then the leader is SIGKILLed and the follower thawed. Returns (acknowledged, leader, follower)."""
    controller = controller_of(fo)
    leader, follower = [b for b in (1, 2, 3) if b != controller]
    configs = {"unclean.leader.election.enable": "true"} if unclean else {}
    create_topic(fo, topic, {0: [leader, follower]}, min_isr=1, configs=configs)
    poll_until(lambda: leader_isr(fo, topic, 0, leader) == sorted([leader, follower]), 10, message="full ISR")
    acknowledged = [b"both-%d" % i for i in range(10)]
    for value in acknowledged:
        assert acks_all_produce(fo, leader, topic, value) == ErrorCode.none
    follower_pid = fo.broker_pid(follower)
    os.kill(follower_pid, signal.SIGSTOP)
    try:
        assert acks_all_produce(fo, leader, topic, b"lagging") == ErrorCode.none  # leaves the follower behind
        acknowledged.append(b"lagging")
        poll_until(lambda: leader_isr(fo, topic, 0, leader) == [leader], 10, message="ISR of the leader alone")
        only_leader = [b"leader-only-%d" % i for i in range(10)]
        for value in only_leader:
            assert acks_all_produce(fo, leader, topic, value) == ErrorCode.none
        acknowledged += only_leader
        cluster_cli(fo, "kill", leader)
    finally:
        os.kill(follower_pid, signal.SIGCONT)
    return acknowledged, leader, follower


def test_all_isr_members_dead_without_unclean_election_the_partition_waits_and_loses_nothing(fo):
    """CTL-6 with unclean.leader.election.enable=false: the out-of-sync follower is not elected;
    the partition is offline until the ISR member returns (CTL-7), then every acknowledged record
    is there."""
    acknowledged, leader, follower = all_isr_dead(fo, "clean", unclean=False)
    poll_until(lambda: current_leader(fo, "clean", 0, [follower]) == -1, SESSION_MS / 1000 + 5,
               message="the partition offline")
    assert current_leader(fo, "clean", 0, [follower]) == -1
    controller = controller_of(fo, [follower])
    log = (fo.data_dir / f"broker-{controller}" / "broker.log").read_text()
    assert re.search(rf" WARN \[broker {controller}\] clean-0 is offline: no live broker of its ISR", log), log[-2000:]
    cluster_cli(fo, "start", leader)
    poll_until(lambda: current_leader(fo, "clean", 0, [leader, follower]) == leader, 30, message="leader back")
    got = [v for _, _, v in consume(fo.bootstrap, "clean", 1, len(acknowledged))]
    assert got == acknowledged


def test_all_isr_members_dead_with_unclean_election_the_partition_returns_and_acknowledged_records_are_lost(fo):
    """LOSS-2: with unclean.leader.election.enable=true the out-of-sync follower is elected at once
    and the records only the dead leader had, acknowledged with acks=all, are gone for good."""
    acknowledged, leader, follower = all_isr_dead(fo, "unclean", unclean=True)
    poll_until(lambda: current_leader(fo, "unclean", 0, [follower]) == follower, SESSION_MS / 1000 + 5,
               message="the out-of-sync follower elected")
    assert acks_all_produce(fo, follower, "unclean", b"after") == ErrorCode.none
    cluster_cli(fo, "start", leader)
    poll_until(lambda: leader_isr(fo, "unclean", 0, follower) == sorted([leader, follower]), 30,
               message="the old leader back as a follower")
    got = [v for _, _, v in consume(fo.bootstrap, "unclean", 1, 12, timeout=10)]
    lost = [v for v in acknowledged if v not in got]
    assert lost and all(v.startswith(b"leader-only") or v == b"lagging" for v in lost)
    assert got[-1] == b"after"


def test_preferred_leader_election_from_the_command_line(fo):
    """CTL-10: after a restart the preferred replica is a follower; `strandline leaders elect
    --preferred` gives it the leadership back."""
    controller = controller_of(fo)
    preferred, other = [b for b in (1, 2, 3) if b != controller]
    create_topic(fo, "pref", {0: [preferred, other, controller]})
    poll_until(lambda: leader_isr(fo, "pref", 0, preferred) == [1, 2, 3], 10, message="full ISR")
    cluster_cli(fo, "stop", preferred)
    cluster_cli(fo, "start", preferred)
    poll_until(lambda: leader_isr(fo, "pref", 0, other) == [1, 2, 3], 30, message="back in the ISR")
    assert current_leader(fo, "pref", 0, [other]) == other
    result = run_cli("leaders", "elect", "--preferred", "--topic", "pref", "--bootstrap-server", address(fo, other))
    assert result.returncode == 0, result.stderr
    assert "pref-0: led by its preferred replica" in result.stdout
    poll_until(lambda: current_leader(fo, "pref", 0, [preferred]) == preferred, 10, message="preferred leads")
    assert acks_all_produce(fo, preferred, "pref", b"v") == ErrorCode.none
    again = run_cli("leaders", "elect", "--preferred", "--topic", "pref", "--bootstrap-server", address(fo, other))
    assert again.returncode == 0 and "already led by its preferred replica" in again.stdout


def test_a_leader_frozen_past_its_session_is_replaced_and_rejoins_as_a_follower(fo):
    """NET-4 with real processes: the leader stops (SIGSTOP, a long pause) past its ZooKeeper
    session; the controller elects another ISR member and writes go on there. When the old leader
    runs again it no longer acknowledges acks=all, learns the new leader, truncates and follows;
    every acknowledged record is there once and the replicas end identical."""
    from tests.integration.replication_helpers import replicas_identical

    controller = controller_of(fo)
    leader, other = [b for b in (1, 2, 3) if b != controller]
    create_topic(fo, "frozen", {0: [leader, other, controller]})
    poll_until(lambda: leader_isr(fo, "frozen", 0, leader) == [1, 2, 3], 10, message="full ISR")
    pid = fo.broker_pid(leader)
    # requests in flight to the frozen leader are given up after 3 s (librdkafka waits 60 s by default)
    with Writer(fo.bootstrap, "frozen", **{"socket.timeout.ms": 3000, "request.timeout.ms": 3000}) as writer:
        poll_until(lambda: len(writer.acked) > 100, 20, message="first writes")
        os.kill(pid, signal.SIGSTOP)
        try:
            poll_until(lambda: current_leader(fo, "frozen", 0, [other, controller]) == other,
                       SESSION_MS / 1000 + 10, message="a new leader")
            count = len(writer.acked)
            poll_until(lambda: len(writer.acked) > count + 100, 20, message="writes on the new leader")
        finally:
            os.kill(pid, signal.SIGCONT)
        poll_until(lambda: leader_isr(fo, "frozen", 0, other) == [1, 2, 3], 40, message="old leader back in the ISR")
    assert not writer.errors
    check_all_acknowledged_once_in_order(fo, "frozen", writer)
    poll_until(lambda: replicas_identical(fo, "frozen", 0), 30, message="identical replicas")
