"""Consumer groups of the KIP-848 protocol (``group.protocol=consumer``) with real clients on 3
broker processes: Kafka 4.x's Java KafkaConsumer and confluent-kafka (librdkafka 2.10+).

One cluster for the module, with Kafka's ``group.consumer.*`` timings lowered (heartbeats every
500 ms) so rebalances finish quickly, and a short ZooKeeper session so a killed coordinator is
replaced within seconds. The Java members are compiled with ``javac`` against the Kafka 4.x jars
of the cache (:mod:`tests.integration.kafka_reference`).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from strandline.cli import groups as groups_cli
from strandline.errors import Unreachable
from strandline.runtime.client import KafkaConnection
from tests.conftest import cluster_fixture, missing_prerequisite, poll_until, run_cli
from tests.integration.kafka_reference import JavaClient, dist, java_main, kafka_lines_or_skip
from tests.integration.replication_helpers import create_topic

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip(("4",))
SOURCE = Path(__file__).parent / "kip848_consumer" / "GroupMember.java"
PARTITIONS = 6
KINDS = {"READY", "ASSIGNED", "REVOKED", "LOST", "RECORD", "COMMIT_FAILED", "CLOSED"}    # GroupMember's lines

cg = cluster_fixture("consumer_protocol", 3, overrides=[
    "zookeeper.session.timeout.ms=4000", "replica.lag.time.max.ms=2000",
    "group.consumer.min.heartbeat.interval.ms=500", "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.session.timeout.ms=6000", "group.consumer.session.timeout.ms=10000"])


@pytest.fixture(scope="module")
def java_member() -> list[str]:
    """The command that runs one Java member (its arguments follow)."""
    return java_main(dist(KAFKA, "4"), SOURCE, "kip848-member")


class Member(JavaClient):
    """One Java member process, started ahead; it joins at :meth:`go`. Its output lines are read
    as they come."""

    def __init__(self, command: list[str], bootstrap: str, group: str, topic: str, workdir: Path, name: str,
                 protocol: str = "consumer") -> None:
        super().__init__([*command, bootstrap, group, topic], workdir, name, KINDS, (protocol,))

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for line in list(self.lines):
            kind, *rest = line.split()
            if kind == "ASSIGNED":
                owned.add(int(rest[0]))
            elif kind == "CLOSED":
                owned.clear()
            elif kind in ("REVOKED", "LOST"):
                owned.discard(int(rest[0]))
        return owned

    def records(self) -> list[tuple[int, int, str]]:
        return [(int(p), int(o), v) for kind, p, o, v in
                (line.split() for line in list(self.lines) if line.startswith("RECORD "))]

    def leave(self, timeout: float = 30) -> None:
        self.stop(timeout)


def ownership(member: Member) -> list[tuple[int, int, float]]:
    """The member's ``(partition, from ms, to ms)`` of each time it owned a partition."""
    held: dict[int, int] = {}
    spans = []
    end = float("inf")
    for line in list(member.lines):
        kind, *rest = line.split()
        if kind == "ASSIGNED":
            held[int(rest[0])] = int(rest[1])
        elif kind in ("REVOKED", "LOST") and int(rest[0]) in held:
            spans.append((int(rest[0]), held.pop(int(rest[0])), int(rest[1])))
        elif kind == "CLOSED":
            end = int(rest[0])
    return spans + [(p, start, end) for p, start in held.items()]


def coordinator_of(bootstrap: str, group: str) -> int:
    for address in bootstrap.split(","):
        try:
            with KafkaConnection(address, timeout_s=5) as conn:
                return int(conn.request(10, 3, {"key": group, "key_type": 0}).node_id)
        except (OSError, Unreachable):         # the broker the test killed
            continue
    return -1


def live_brokers(bootstrap: str) -> set[int]:
    for address in bootstrap.split(","):
        try:
            with KafkaConnection(address, timeout_s=5) as conn:
                return {b.node_id for b in conn.request(3, 1, {"topics": []}).brokers}
        except (OSError, Unreachable):         # the broker the test killed
            continue
    return set()


class SteadyProducer:
    """Produces ``v-00000``, ``v-00001``, ... (keyed, acks=all) until stopped, at most 60 s."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "enable.idempotence": True})
        self.topic = topic
        self.sent: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while not self.stopped.is_set() and time.monotonic() < deadline:
            value = "v-%05d" % len(self.sent)
            self.producer.produce(self.topic, value.encode(), key=value.encode())
            self.sent.append(value)
            self.producer.poll(0)
            self.stopped.wait(0.01)     # the producer's pace: about 100 records a second

    def stop(self) -> list[str]:
        self.stopped.set()
        self.thread.join(30)
        assert self.producer.flush(30) == 0
        return self.sent


def test_java_consumers_share_a_topic_through_failover_joins_and_leaves(cg, java_member, tmp_path, capsys):
    """Kafka 4.x's KafkaConsumer with group.protocol=consumer: two members, a third joining late,
    the coordinator's broker SIGKILLed, one member leaving and one restarted, under a steady
    producer. Every record is consumed; no partition is owned by two members at once; a restarted
    member resumes each partition it gets where its previous owner committed."""
    create_topic(cg, "events", partitions=PARTITIONS, min_isr=1)
    members = {n: Member(java_member, cg.bootstrap, "kip848", "events", tmp_path, n) for n in ("a", "b", "c", "a2")}
    producer = SteadyProducer(cg.bootstrap, "events")
    try:
        members["a"].go()
        members["b"].go()

        def covered(names: tuple[str, ...]) -> bool:
            owned = [members[n].owned() for n in names]
            return all(owned) and sorted(p for o in owned for p in o) == list(range(PARTITIONS))

        poll_until(lambda: covered(("a", "b")), 30, message="a and b share the six partitions")
        members["c"].go()
        poll_until(lambda: covered(("a", "b", "c")), 30, message="c, joining late, gets its share")

        # strandline groups describe / list (in this process: a CLI process starts slowly on a busy machine)
        assert groups_cli.describe_group(cg.bootstrap, "kip848") == 0
        described = capsys.readouterr().out
        assert "Protocol: consumer/uniform" in described and "Members: 3" in described, described
        assert len(re.findall(r"Member: .*Epoch: \d+\tPartitions: \S+", described)) == 3, described

        def listed_stable() -> bool:
            # the members own their shares before their next heartbeats tell the coordinator so: until
            # then the group is Reconciling (Kafka's ConsumerGroupState.RECONCILING)
            assert groups_cli.list_groups(cg.bootstrap) == 0
            listed = capsys.readouterr().out
            assert re.fullmatch(r"kip848\t(Stable|Reconciling)\n", listed), listed
            return listed == "kip848\tStable\n"

        poll_until(listed_stable, 15, message="strandline groups list shows the group Stable")

        coordinator = coordinator_of(cg.bootstrap, "kip848")
        killed = run_cli("cluster", "kill", str(coordinator), "--data-dir", str(cg.data_dir), timeout=60)
        assert killed.returncode == 0, killed.stderr
        mark = len(producer.sent) + 100         # the first 100 records sent after the kill, and all before

        def consumed() -> set[str]:
            return {v for m in members.values() for _, _, v in m.records()}

        poll_until(lambda: len(producer.sent) >= mark and set(producer.sent[:mark]) <= consumed(), 30,
                   message="the group consumes again after its coordinator's death")
        assert coordinator_of(cg.bootstrap, "kip848") not in (-1, coordinator)

        members["b"].leave()
        poll_until(lambda: covered(("a", "c")), 30, message="a and c take b's partitions over")
        members["a"].leave()
        poll_until(lambda: covered(("c",)), 30, message="c takes all")
        members["a2"].go()
        poll_until(lambda: covered(("a2", "c")), 30, message="a restarted gets its share back")
        poll_until(lambda: members["a2"].records(), 30, message="a restarted consumes")
        sent = producer.stop()
        poll_until(lambda: set(sent) <= consumed(), 30,
                   message="every record produced is consumed")
        for m in ("a2", "c"):
            members[m].leave()
    finally:
        producer.stopped.set()
        for m in members.values():
            m.kill()

    # the new coordinator replayed the group: no member was fenced (a fenced one loses its partitions)
    assert not [line for m in members.values() for line in m.lines if line.startswith("LOST ")]
    spans = [(p, start, end, name) for name, m in members.items() for p, start, end in ownership(m)]
    for p, start, end, name in spans:
        for q, start2, end2, name2 in spans:
            assert not (p == q and name != name2 and start < end2 and start2 < end), \
                f"partition {p} owned by {name} ({start}-{end}) and {name2} ({start2}-{end2}) at once"
    # a2 got its partitions from c, which owned them all: it starts right after c's last record
    first: dict[int, int] = {}
    for p, o, _ in members["a2"].records():
        first.setdefault(p, o)
    assert first, "a2 consumed nothing"
    c_lines = members["c"].lines
    for p, offset in first.items():
        given_up = max(i for i, line in enumerate(c_lines) if line.startswith(f"REVOKED {p} "))
        before = [int(line.split()[2]) for line in c_lines[:given_up] if line.startswith(f"RECORD {p} ")]
        assert offset == max(before) + 1, (p, offset, max(before))
    for m in members.values():      # each member's last commit, as it left, was taken
        assert "COMMIT_FAILED" not in m.lines[-2], (m.name, m.lines[-3:])


def group_type(bootstrap: str, group: str) -> str | None:
    """The group's type as ListGroups v5 says it (classic or consumer), None if not listed."""
    for address in bootstrap.split(","):
        try:
            with KafkaConnection(address, timeout_s=5) as conn:
                listed = conn.request(16, 5, {"states_filter": [], "types_filter": []}).groups
                found = [g.group_type for g in listed if g.group_id == group]
                if found:
                    return found[0]
        except (OSError, Unreachable):
            continue
    return None


def test_java_consumers_upgrade_a_live_classic_group_and_downgrade_it_back(cg, java_member, tmp_path, capsys):
    """Kafka 4.x's online migration (group.consumer.migration.policy=bidirectional, the default): two
    KafkaConsumers of the classic protocol share a topic under a steady producer; two of the consumer
    protocol join (the group becomes a consumer group, the classic members served by it) and the
    classic ones leave; one of the classic protocol joins again and the consumer-protocol ones leave
    (the group becomes a classic group). Every record is consumed, no partition is owned by two
    members at once, and each member's last commit is taken."""
    live = sorted(live_brokers(cg.bootstrap))              # a test before may have killed one
    create_topic(cg, "migrating", {p: live[p % len(live):] + live[:p % len(live)] for p in range(PARTITIONS)},
                 min_isr=1)
    kinds = {"c1": "classic", "c2": "classic", "n1": "consumer", "n2": "consumer", "c3": "classic"}
    members = {n: Member(java_member, cg.bootstrap, "migrate", "migrating", tmp_path, n, kind)
               for n, kind in kinds.items()}
    producer = SteadyProducer(cg.bootstrap, "migrating")

    def covered(names: tuple[str, ...]) -> bool:
        owned = [members[n].owned() for n in names]
        return all(owned) and sorted(p for o in owned for p in o) == list(range(PARTITIONS))

    def consumed() -> set[str]:
        return {v for m in members.values() for _, _, v in m.records()}

    try:
        members["c1"].go()
        members["c2"].go()
        poll_until(lambda: covered(("c1", "c2")), 45, message="c1 and c2 (classic) share the six partitions")
        assert group_type(cg.bootstrap, "migrate") == "classic"
        members["n1"].go()
        members["n2"].go()
        poll_until(lambda: covered(("c1", "c2", "n1", "n2")), 45,
                   message="n1 and n2 (consumer protocol) upgrade the group and get their shares")
        assert group_type(cg.bootstrap, "migrate") == "consumer"
        assert groups_cli.describe_group(cg.bootstrap, "migrate") == 0
        described = capsys.readouterr().out
        assert described.count("Speaks: classic") == 2 and described.count("Speaks: consumer") == 2, described
        members["c1"].leave()
        members["c2"].leave()
        poll_until(lambda: covered(("n1", "n2")), 45, message="n1 and n2 take the classic members' partitions")
        members["c3"].go()
        poll_until(lambda: covered(("n1", "n2", "c3")), 45, message="c3 (classic) joins the consumer group")
        members["n1"].leave()
        members["n2"].leave()
        poll_until(lambda: covered(("c3",)), 45, message="c3 takes all once the group is classic again")
        assert group_type(cg.bootstrap, "migrate") == "classic"
        sent = producer.stop()
        poll_until(lambda: set(sent) <= consumed(), 30, message="every record produced is consumed")
        members["c3"].leave()
    finally:
        producer.stopped.set()
        for m in members.values():
            m.kill()

    spans = [(p, start, end, name) for name, m in members.items() for p, start, end in ownership(m)]
    for p, start, end, name in spans:
        for q, start2, end2, name2 in spans:
            assert not (p == q and name != name2 and start < end2 and start2 < end), \
                f"partition {p} owned by {name} ({start}-{end}) and {name2} ({start2}-{end2}) at once"
    for m in members.values():      # each member's last commit, as it left, was taken
        assert "COMMIT_FAILED" not in m.lines[-2], (m.name, m.lines[-3:])


def librdkafka_topic(cg, topic: str, prefix: bytes, count: int) -> list[bytes]:
    """A four-partition topic over the live brokers holding ``count`` records, written with
    librdkafka (which must have group.protocol=consumer, 2.10+); the records' values."""
    import confluent_kafka
    from confluent_kafka import Producer

    if confluent_kafka.libversion()[1] < 0x020A0000:
        missing_prerequisite(f"librdkafka {confluent_kafka.libversion()[0]} has no group.protocol=consumer (2.10+)")
    live = sorted(live_brokers(cg.bootstrap))
    create_topic(cg, topic, {p: live[p % len(live):] + live[:p % len(live)] for p in range(4)}, min_isr=1)
    producer = Producer({"bootstrap.servers": cg.bootstrap, "acks": "all"})
    values = [b"%s-%04d" % (prefix, i) for i in range(count)]
    for v in values:
        producer.produce(topic, v, key=v)
    assert producer.flush(30) == 0
    return values


def test_confluent_kafka_consumers_with_group_protocol_consumer(cg):
    """librdkafka's KIP-848 consumer (2.10+): two members share a topic and commit; one leaves and
    the other takes its partitions over, resuming where it committed. Every record is consumed."""
    from confluent_kafka import Consumer, KafkaError, KafkaException

    values = librdkafka_topic(cg, "rdk", b"r", 400)        # the test before killed a broker
    members = [Consumer({"bootstrap.servers": cg.bootstrap, "group.id": "rdk848", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False}) for _ in range(2)]
    got: list[list[bytes]] = [[], []]
    for m in members:
        m.subscribe(["rdk"])

    def step(i: int) -> set[int]:
        fresh = [m.value() for m in members[i].consume(num_messages=50, timeout=0.05) if m.error() is None]
        got[i] += fresh
        if fresh:
            try:
                members[i].commit(asynchronous=False)
            except KafkaException as e:       # a stale member epoch: the next commit carries these too
                assert e.args[0].code() == KafkaError.STALE_MEMBER_EPOCH, e
        return {tp.partition for tp in members[i].assignment()}

    def shared() -> bool:
        owned = [step(0), step(1)]
        assert not owned[0] & owned[1], owned
        return bool(owned[0] and owned[1] and owned[0] | owned[1] == set(range(4)))

    poll_until(shared, 30, interval=0.01, message="the two share the four partitions")
    poll_until(lambda: shared() is not None and len(got[0]) + len(got[1]) >= 200, 30, interval=0.01,
               message="half the records consumed")
    members[1].close()
    poll_until(lambda: step(0) == set(range(4)) and len(set(got[0] + got[1])) == len(values), 30, interval=0.01,
               message="the first takes everything over and consumes the rest")
    members[0].close()
    assert set(got[0] + got[1]) == set(values)


def test_confluent_kafka_classic_and_consumer_members_share_a_group_that_migrates(cg):
    """librdkafka's classic consumer (cooperative-sticky) and its KIP-848 consumer in one group: the
    consumer-protocol member upgrades the live classic group and the two share the topic; when it
    leaves, the group is classic again and the classic member takes everything; a new one of the
    consumer protocol upgrades it again. No partition is assigned to both at once, every record is
    consumed."""
    from confluent_kafka import Consumer

    values = librdkafka_topic(cg, "rdk-mig", b"m", 300)
    common = {"bootstrap.servers": cg.bootstrap, "group.id": "rdk-mig", "auto.offset.reset": "earliest"}
    classic = Consumer({**common, "group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
                        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    modern = Consumer({**common, "group.protocol": "consumer"})
    got: set[bytes] = set()
    members = [classic, modern]

    def owned(m) -> set[int]:
        got.update(r.value() for r in m.consume(num_messages=50, timeout=0.05) if r.error() is None)
        return {tp.partition for tp in m.assignment()}

    def shared() -> bool:
        mine = [owned(m) for m in members]
        assert not mine[0] & mine[1], mine
        return bool(mine[0] and mine[1] and mine[0] | mine[1] == set(range(4)))

    classic.subscribe(["rdk-mig"])
    poll_until(lambda: owned(classic) == set(range(4)), 30, interval=0.01, message="the classic member takes all")
    assert group_type(cg.bootstrap, "rdk-mig") == "classic"
    modern.subscribe(["rdk-mig"])
    poll_until(shared, 45, interval=0.01, message="the consumer-protocol member upgrades the group and gets its share")
    assert group_type(cg.bootstrap, "rdk-mig") == "consumer"
    modern.close()
    poll_until(lambda: owned(classic) == set(range(4)), 45, interval=0.01,
               message="the group is classic again and the classic member takes everything")
    assert group_type(cg.bootstrap, "rdk-mig") == "classic"
    members[1] = Consumer({**common, "group.protocol": "consumer"})
    members[1].subscribe(["rdk-mig"])
    poll_until(shared, 45, interval=0.01, message="a new consumer-protocol member upgrades it again")
    assert group_type(cg.bootstrap, "rdk-mig") == "consumer"
    poll_until(lambda: shared() is not None and got >= set(values), 30, interval=0.01,
               message="every record consumed")
    for m in members:
        m.close()


def test_confluent_kafka_subscribes_with_a_regular_expression(cg):
    """librdkafka's KIP-848 consumer subscribes to ``^rx-pay.*`` (it sends ``(^rx-pay.*)``): the
    coordinator resolves it to the matching topics, and a topic created later joins the
    assignment at the next resolution, within the 10 s Kafka allows between two; ``strandline
    groups describe`` shows the subscription."""
    import confluent_kafka
    from confluent_kafka import Consumer

    if confluent_kafka.libversion()[1] < 0x020A0000:
        missing_prerequisite(f"librdkafka {confluent_kafka.libversion()[0]} has no group.protocol=consumer (2.10+)")
    live = sorted(live_brokers(cg.bootstrap))
    for name in ("rx-pay1", "rx-orders"):
        create_topic(cg, name, {0: live, 1: live[1:] + live[:1]}, min_isr=1)
    member = Consumer({"bootstrap.servers": cg.bootstrap, "group.id": "rx848", "group.protocol": "consumer"})
    member.subscribe(["^rx-pay.*"])

    def assigned() -> set[tuple[str, int]]:
        member.poll(0.05)
        return {(tp.topic, tp.partition) for tp in member.assignment()}

    poll_until(lambda: assigned() == {("rx-pay1", 0), ("rx-pay1", 1)}, 30, interval=0.01,
               message="the regular expression resolved to rx-pay1")
    described = run_cli("groups", "describe", "rx848", "--bootstrap-server", cg.bootstrap).stdout
    assert "Subscribed: /(^rx-pay.*)/" in described, described
    create_topic(cg, "rx-pay2", {0: live}, min_isr=1)
    poll_until(lambda: ("rx-pay2", 0) in assigned(), 25, interval=0.05, message="rx-pay2 joined the assignment")
    assert not {t for t, _ in assigned()} & {"rx-orders"}
    member.close()
