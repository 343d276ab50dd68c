"""Share groups (KIP-932) with Kafka 4.x's own ``KafkaShareConsumer`` on 3 broker processes.

One cluster for the module with ``group.share.enable=true``, a 3 s record lock
(``group.share.record.lock.duration.ms``) so that an abandoned lock expires quickly, the
delivery limit at Kafka's default, 5, and a short ZooKeeper session so that a SIGKILLed leader is
replaced quickly. The consumers acknowledge explicitly
(:file:`kip932_share/ShareMember.java`, compiled against the Kafka 4.x jars of the cache): they
accept each record, release the "poison" ones, which come back until the limit archives them, and
reject the "reject" ones, which are archived at once.
A group reading from the log's start has ``share.auto.offset.reset=earliest`` set with Kafka 4.x's
own ``kafka-configs --entity-type groups``.
"""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli, strandline_cmd
from tests.integration.kafka_reference import JavaClient, dist, java_main, kafka_lines_or_skip
from tests.integration.replication_helpers import create_topic, current_leader

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip(("4",))
SOURCE = Path(__file__).parent / "kip932_share" / "ShareMember.java"
LIMIT = 5                                   # group.share.delivery.count.limit

sg = cluster_fixture("share_groups", 3, overrides=[
    "group.share.enable=true", "group.share.min.record.lock.duration.ms=1000", "group.share.record.lock.duration.ms=3000",
    "group.share.min.heartbeat.interval.ms=500", "group.share.heartbeat.interval.ms=500",
    "zookeeper.session.timeout.ms=4000"])


@pytest.fixture(scope="module")
def share_member() -> list[str]:
    return java_main(dist(KAFKA, "4"), SOURCE, "kip932-member")


class ShareConsumer(JavaClient):
    """One Java share consumer, started ahead (the JVM's start is slow); it subscribes at :meth:`go`."""

    def __init__(self, command: list[str], bootstrap: str, group: str, topic: str, mode: str, workdir: Path,
                 name: str) -> None:
        super().__init__([*command, bootstrap, group, topic, mode], workdir, name, {"READY", "RECORD", "POLLED", "CLOSED"})

    def go(self) -> None:
        poll_until(lambda: any(line.startswith("READY") for line in self.lines), 60, 0.05, f"{self.name} started")
        super().go()

    def deliveries(self) -> list[tuple[int, int, str]]:
        """(offset, delivery count, value) of each record handed to it."""
        return [(int(o), int(c), v) for _, _, o, c, _, v in self._records()]

    def received_ms(self) -> dict[int, int]:
        """The wall clock's millisecond when each offset was last handed to it (its poll returned it)."""
        return {int(o): int(ms) for _, _, o, _, ms, _ in self._records()}

    def _records(self) -> list[list[str]]:
        return [line.split(" ", 5) for line in list(self.lines) if line.startswith("RECORD ")]

    def first_poll(self) -> set[int]:
        """The offsets of its first poll's records, once it has printed all of them (its POLLED line)."""
        poll_until(lambda: any(line.startswith("POLLED") for line in self.lines), 60, 0.05, f"{self.name}'s first poll")
        return {offset for offset, _, _ in self.deliveries()}


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    out = subprocess.run(strandline_cmd("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--acks", "all"),
                         input="".join(v + "\n" for v in values), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def warm_up(bootstrap: str, topic: str, consumers: list[ShareConsumer]) -> None:
    """A share-partition starts at the high watermark when a consumer of the group first fetches
    from it: write a record a second until one of ``consumers`` has been handed one (looked for
    every 50 ms, so that the caller acts within moments of it)."""
    written = [float("-inf")]

    def handed() -> bool:
        if time.monotonic() - written[0] >= 1.0:
            produce(bootstrap, topic, ["warm-up"])
            written[0] = time.monotonic()
        return any(c.deliveries() for c in consumers)
    poll_until(handed, 60, 0.05, "a first record handed out")


def finish(consumers: list[ShareConsumer]) -> None:
    for c in consumers:
        c.stop_file.touch()
    for c in consumers:
        try:
            c.proc.wait(30)
        except subprocess.TimeoutExpired:
            c.kill()


def test_four_consumers_share_a_partition_each_delivery_counted_rejected_records_archived_and_poison_at_the_limit(
        sg, share_member, tmp_path):
    create_topic(sg, "queue", partitions=1)
    kafka = dist(KAFKA, "4")
    configs = ["--bootstrap-server", sg.bootstrap, "--entity-type", "groups", "--entity-name", "workers"]
    done = kafka.run_tool("kafka-configs", [*configs, "--alter", "--add-config", "share.auto.offset.reset=earliest"],
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    described = run_cli("configs", "describe", "--bootstrap-server", sg.bootstrap, "--entity-type", "groups",
                        "--entity-name", "workers").stdout
    assert "share.auto.offset.reset=earliest sensitive=false synonyms={GROUP_CONFIG:share.auto.offset.reset=earliest}" \
        in described, described
    shown = kafka.run_tool("kafka-configs", [*configs, "--describe", "--all"], timeout=120)
    assert shown.returncode == 0 and "share.auto.offset.reset=earliest" in shown.stdout and \
        "share.record.lock.duration.ms=3000" in shown.stdout, shown.stdout + shown.stderr
    values = [f"v{i}" for i in range(300)] + [f"poison{i}" for i in range(3)] + [f"reject{i}" for i in range(3)]
    for start in range(0, len(values), 50):       # all written before the group reads: earliest finds them
        produce(sg.bootstrap, "queue", values[start:start + 50])
    consumers = [ShareConsumer(share_member, sg.bootstrap, "workers", "queue", "ack", tmp_path, f"c{i}")
                 for i in range(4)]
    try:
        for c in consumers:
            c.go()

        def done() -> bool:
            seen = [v for c in consumers for _, _, v in c.deliveries()]
            return len({v for v in seen if v.startswith("v")}) == 300 and \
                sum(v.startswith("poison") for v in seen) >= 3 * LIMIT and sum(v.startswith("reject") for v in seen) >= 3
        poll_until(done, 90, 0.2, "every record delivered, each poison record up to the limit")
        # a record written last is handed out after every released one (the lowest available
        # offset goes first): a poison record delivered past the limit, or a rejected one delivered
        # again, would come before it
        produce(sg.bootstrap, "queue", ["last"])
        poll_until(lambda: any(v == "last" for c in consumers for _, _, v in c.deliveries()), 30, 0.1,
                   "the last record")
        described = run_cli("groups", "describe", "workers", "--bootstrap-server", sg.bootstrap).stdout
        assert "Protocol: share/simple\tMembers: 4" in described, described
        assert described.count("Partitions: queue-0") == 4, described           # all four read it
        assert "workers\tStable" in run_cli("groups", "list", "--bootstrap-server", sg.bootstrap).stdout
        # Kafka's own kafka-share-groups: where the share-partition starts now (DescribeShareGroupOffsets)
        offsets = kafka.run_tool("kafka-share-groups", ["--bootstrap-server", sg.bootstrap, "--describe", "--group",
                                                        "workers"], timeout=120)
        rows = [line.split() for line in offsets.stdout.splitlines() if line.split()[:3] == ["workers", "queue", "0"]]
        assert offsets.returncode == 0 and len(rows) == 1, offsets.stdout + offsets.stderr
        assert 300 <= int(rows[0][3]) <= len(values) + 1, rows       # past every record accepted or archived
    finally:
        finish(consumers)
    counts: dict[int, list[int]] = defaultdict(list)
    values_at: dict[int, str] = {}
    for c in consumers:
        for offset, count, value in c.deliveries():
            counts[offset].append(count)
            values_at[offset] = value
    assert sorted(v for v in values_at.values() if v != "last") == sorted(values)   # none lost, from the first
    for offset, seen in counts.items():
        # each delivery of a record is counted once: no two consumers held it at once
        assert sorted(seen) == list(range(1, len(seen) + 1)), (offset, seen)
        if values_at[offset].startswith("poison"):
            assert len(seen) == LIMIT, (offset, seen)                         # archived at the limit
        else:
            assert seen == [1], (offset, seen)                                # accepted or rejected at once


def test_a_consumer_killed_holding_locks_has_its_records_delivered_again_after_the_lock(sg, share_member, tmp_path):
    create_topic(sg, "held", partitions=1)
    holder = ShareConsumer(share_member, sg.bootstrap, "holders", "held", "hold", tmp_path, "holder")
    taker = ShareConsumer(share_member, sg.bootstrap, "holders", "held", "ack", tmp_path, "taker")
    try:
        holder.go()
        warm_up(sg.bootstrap, "held", [holder])          # it holds what it was handed, and polls no more
        held = holder.first_poll()
        holder.kill()
        taker.go()
        poll_until(lambda: held <= {o for o, _, _ in taker.deliveries()}, 60, 0.1, "the held records at the taker")
    finally:
        holder.kill()
        finish([taker])
    again = {offset: count for offset, count, _ in taker.deliveries()}
    assert held and all(again[o] == 2 for o in held), (held, again)      # the second delivery of each
    # not before the lock's end: the lock (3 s) began when the holder's fetch acquired the records,
    # before its poll returned them, so the taker has them at least about 3 s after the holder did
    # (a lock dropped when the holder died would hand them over about as soon as the taker asks)
    first, second = holder.received_ms(), taker.received_ms()
    waited = min(second[o] - first[o] for o in held) / 1000
    assert waited >= 2.0, waited


def cluster_cli(c, action: str, broker_id: int) -> None:
    result = run_cli("cluster", action, str(broker_id), "--data-dir", str(c.data_dir), timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_new_leader_resumes_the_share_partition_where_the_killed_leader_left_it(sg, share_member, tmp_path):
    """The share coordinator keeps each share-partition's state in ``__share_group_state``: after
    the partition's leader is SIGKILLed, the new leader hands out neither what was accepted before
    nor skips what was never delivered, and a record locked at the time comes again as its second
    delivery."""
    create_topic(sg, "resumed", partitions=1)
    first = ShareConsumer(share_member, sg.bootstrap, "resumers", "resumed", "ack", tmp_path, "first")
    before = [f"a{i}" for i in range(100)]
    try:
        first.go()
        warm_up(sg.bootstrap, "resumed", [first])
        produce(sg.bootstrap, "resumed", before)
        poll_until(lambda: set(before) <= {v for _, _, v in first.deliveries()}, 60, 0.1, "the first records accepted")
    finally:
        finish([first])
    after = [f"b{i}" for i in range(100)]
    produce(sg.bootstrap, "resumed", after)            # never handed out before the failover
    holder = ShareConsumer(share_member, sg.bootstrap, "resumers", "resumed", "hold", tmp_path, "holder")
    leader = current_leader(sg, "resumed", 0, [1, 2, 3])
    try:
        holder.go()
        held = holder.first_poll()                     # all it locked, not only the records printed so far
        cluster_cli(sg, "kill", leader)
    finally:
        holder.kill()
    others = [b for b in (1, 2, 3) if b != leader]
    second = ShareConsumer(share_member, sg.bootstrap, "resumers", "resumed", "ack", tmp_path, "second")
    try:
        poll_until(lambda: current_leader(sg, "resumed", 0, others) in others, 30, 0.1, "a new leader")
        second.go()
        poll_until(lambda: set(after) <= {v for _, _, v in second.deliveries()}, 60, 0.1,
                   "the records after the failover accepted")
    finally:
        finish([second])
        cluster_cli(sg, "start", leader)
    accepted_before = {offset for offset, _, _ in first.deliveries()}
    again = {offset: count for offset, count, _ in second.deliveries()}
    assert not accepted_before & set(again), sorted(accepted_before & set(again))[:10]   # not handed out again
    assert held and all(again[o] == 2 for o in held), (sorted(held)[:5], again)        # counted on
    assert all(count == 1 for o, count in again.items() if o not in held), \
        sorted((o, count) for o, count in again.items() if o not in held and count != 1)[:10]
