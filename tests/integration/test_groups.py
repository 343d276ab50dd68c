"""Consumer groups with real clients on 3 broker processes (CON-1, CON-2).

One cluster for the module; `group.initial.rebalance.delay.ms` is lowered so rebalances finish
quickly, and the ZooKeeper session is short so a killed coordinator is replaced within seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import time


from tests.conftest import cluster_fixture, missing_prerequisite, poll_until, run_cli
from tests.integration.replication_helpers import create_topic

SESSION_MS = 4000


gc = cluster_fixture("groups", 3, overrides=[f"zookeeper.session.timeout.ms={SESSION_MS}",
                                             "group.initial.rebalance.delay.ms=200",
                                             "replica.lag.time.max.ms=2000"])


def produce_values(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for v in values:
        if partition is None:
            p.produce(topic, v, key=v)
        else:
            p.produce(topic, v, partition=partition)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     **extra})


def test_con_1_three_consumers_share_six_partitions_and_take_over_when_one_leaves(gc):
    create_topic(gc, "six", partitions=6, min_isr=1)
    members = [consumer(gc.bootstrap, "sharing") for _ in range(3)]
    for m in members:
        m.subscribe(["six"])

    def assignments() -> list[set[int]]:
        for m in members:
            m.poll(0.1)
        return [{tp.partition for tp in m.assignment()} for m in members]

    poll_until(lambda: sorted(len(a) for a in assignments()) == [2, 2, 2], 60, interval=0.01,
               message="two partitions each")
    parts = assignments()
    assert set().union(*parts) == set(range(6))
    members.pop().close()                                   # leaves the group
    poll_until(lambda: sorted(len(a) for a in assignments()) == [3, 3], 60, interval=0.01,
               message="the other two take over")
    assert set().union(*assignments()) == set(range(6))
    for m in members:
        m.close()


def test_con_1_manual_commits_redeliver_only_what_was_not_committed(gc):
    """enable.auto.commit=false and a commit after each processed batch: a consumer that dies
    without committing its last batch makes its successor re-read that batch and nothing else."""
    from confluent_kafka import TopicPartition

    create_topic(gc, "work", partitions=1, min_isr=1)
    values = [b"job-%03d" % i for i in range(300)]
    produce_values(gc.bootstrap, "work", values, partition=0)
    first = consumer(gc.bootstrap, "workers")
    first.subscribe(["work"])
    processed = []
    last_commit = 0
    deadline = time.monotonic() + 60
    while len(processed) < 200 and time.monotonic() < deadline:
        batch = first.consume(num_messages=50, timeout=1)
        processed += [m.value() for m in batch if m.error() is None]
        if processed and len(processed) <= 150:
            first.commit(asynchronous=False)                # processed, then committed
            last_commit = len(processed)
    assert processed == values[:len(processed)] and len(processed) >= 200, len(processed)
    committed = first.committed([TopicPartition("work", 0)], timeout=10)[0].offset
    assert committed == last_commit and 0 < committed <= 150, (committed, last_commit)
    first.close()                                           # dies: the last batch is not committed
    second = consumer(gc.bootstrap, "workers")
    second.subscribe(["work"])
    again = []
    deadline = time.monotonic() + 60
    while len(again) < 300 - committed and time.monotonic() < deadline:
        again += [m for m in second.consume(num_messages=100, timeout=1) if m.error() is None]
    second.close()
    assert again[0].offset() == committed                   # nothing skipped, only uncommitted re-read
    assert [m.value() for m in again] == values[committed:]


def test_con_1_the_group_survives_the_death_of_its_coordinator(gc):
    """SIGKILL of the coordinator's broker: the group finds the new coordinator (the new leader of
    its __consumer_offsets partition) and resumes from its committed offsets."""
    from confluent_kafka import TopicPartition
    from strandline.runtime.client import KafkaConnection

    create_topic(gc, "survive", partitions=1, min_isr=1)
    values = [b"v-%03d" % i for i in range(100)]
    produce_values(gc.bootstrap, "survive", values, partition=0)
    c1 = consumer(gc.bootstrap, "survivors")
    c1.subscribe(["survive"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 40 and time.monotonic() < deadline:
        got += [m for m in c1.consume(num_messages=40, timeout=1) if m.error() is None]
    assert len(got) >= 40, len(got)
    c1.commit(offsets=[TopicPartition("survive", 0, 40)], asynchronous=False)
    c1.close()
    with KafkaConnection(gc.bootstrap.split(",")[0]) as conn:
        coordinator = conn.request(10, 3, {"key": "survivors", "key_type": 0}).node_id
    result = run_cli("cluster", "kill", str(coordinator), "--data-dir", str(gc.data_dir), timeout=60)
    assert result.returncode == 0, result.stderr
    alive = ",".join(a for i, a in enumerate(gc.bootstrap.split(","), start=1) if i != coordinator)

    def new_coordinator() -> int:
        with KafkaConnection(alive.split(",")[0]) as conn:
            node = conn.request(10, 3, {"key": "survivors", "key_type": 0}).node_id
        return node if node not in (-1, coordinator) else 0

    # started at once: until the dead broker's session expires every broker still names it (as
    # Kafka's would), and the client must find the new coordinator by itself
    c2 = consumer(alive, "survivors")
    c2.subscribe(["survive"])
    again = []
    deadline = time.monotonic() + 60
    while len(again) < 60 and time.monotonic() < deadline:
        again += [m for m in c2.consume(num_messages=60, timeout=1) if m.error() is None]
    c2.close()
    assert again and again[0].offset() == 40
    assert [m.value() for m in again] == values[40:]
    assert new_coordinator() in (1, 2, 3)
    result = run_cli("cluster", "start", str(coordinator), "--data-dir", str(gc.data_dir), timeout=120)
    assert result.returncode == 0, result.stderr


def test_con_2_replay_by_offset_and_by_timestamp(gc):
    from confluent_kafka import TopicPartition

    create_topic(gc, "replay", partitions=1, min_isr=1)
    produce_values(gc.bootstrap, "replay", [b"early-%d" % i for i in range(10)], partition=0)
    time.sleep(0.05)  # two distinct record timestamps (producer clock), not a wait for a condition
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce_values(gc.bootstrap, "replay", [b"late-%d" % i for i in range(10)], partition=0)
    c = consumer(gc.bootstrap, "replayer")
    c.assign([TopicPartition("replay", 0, 5)])              # seek to an offset
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 15 and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(num_messages=20, timeout=1) if m.error() is None]
    assert got[:15] == [b"early-%d" % i for i in range(5, 10)] + [b"late-%d" % i for i in range(10)], got
    [found] = c.offsets_for_times([TopicPartition("replay", 0, middle)], timeout=10)
    assert found.offset == 10
    c.assign([TopicPartition("replay", 0, found.offset)])    # seek to a timestamp
    late = []
    deadline = time.monotonic() + 30
    while len(late) < 10 and time.monotonic() < deadline:
        late += [m.value() for m in c.consume(num_messages=20, timeout=1) if m.error() is None]
    c.close()
    assert late == [b"late-%d" % i for i in range(10)]


def test_kafka_python_and_aiokafka_and_kcat_consume_in_groups(gc):
    create_topic(gc, "clients", partitions=2, min_isr=1)
    values = [b"c-%02d" % i for i in range(20)]
    produce_values(gc.bootstrap, "clients", values)
    from kafka import KafkaConsumer

    kp = KafkaConsumer("clients", bootstrap_servers=gc.bootstrap.split(","), group_id="kp",
                       auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
    seen = []
    for msg in kp:
        seen.append(msg.value)
        if len(seen) == len(values):
            break
    kp.commit()
    kp.close()
    assert sorted(seen) == sorted(values)

    import asyncio

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer("clients", bootstrap_servers=gc.bootstrap, group_id="aio",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < len(values):
                    batch = await c.getmany(timeout_ms=1000)
                    out += [m.value for msgs in batch.values() for m in msgs]
            await c.commit()
            return out
        finally:
            await c.stop()

    assert sorted(asyncio.run(aio())) == sorted(values)
    if shutil.which("kcat") is None:
        missing_prerequisite("kcat is not installed (make kcat installs it)")
    kcat = subprocess.run(["kcat", "-b", gc.bootstrap, "-G", "kcat-group", "-o", "beginning", "-c", str(len(values)),
                           "-f", "%s\n", "-X", "session.timeout.ms=6000", "clients"],
                          capture_output=True, text=True, timeout=60)
    assert kcat.returncode == 0, kcat.stderr
    assert sorted(kcat.stdout.split()) == sorted(v.decode() for v in values)


def test_groups_command_lists_describes_and_resets_offsets(gc):
    """`strandline groups list|describe|reset-offsets`: members and their partitions, committed
    offset, HW and lag per partition; a reset moves a stopped group's offsets."""
    from confluent_kafka import TopicPartition

    create_topic(gc, "lagging", partitions=2, min_isr=1)
    produce_values(gc.bootstrap, "lagging", [b"x%d" % i for i in range(10)], partition=0)
    c = consumer(gc.bootstrap, "watched", **{"client.id": "watcher"})
    c.subscribe(["lagging"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        got += [m for m in c.consume(num_messages=10, timeout=1) if m.error() is None]
    assert len(got) == 10, len(got)
    c.commit(offsets=[TopicPartition("lagging", 0, 4)], asynchronous=False)
    bootstrap = gc.bootstrap.split(",")[0]
    listed = run_cli("groups", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0 and "watched\tStable" in listed.stdout
    described = run_cli("groups", "describe", "watched", "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    assert "Client: watcher" in described.stdout and "Partitions: lagging-0,lagging-1" in described.stdout
    assert "Topic: lagging\tPartition: 0\tCommitted: 4\tHW: 10\tLag: 6" in described.stdout
    busy = run_cli("groups", "reset-offsets", "watched", "--topic", "lagging", "--to-earliest", "--execute",
                   "--bootstrap-server", bootstrap)
    assert busy.returncode == 1 and "stop its consumers" in busy.stderr
    c.close()
    reset = run_cli("groups", "reset-offsets", "watched", "--topic", "lagging", "--to-latest", "--execute",
                    "--bootstrap-server", bootstrap)
    assert reset.returncode == 0, reset.stderr
    described = run_cli("groups", "describe", "watched", "--bootstrap-server", bootstrap)
    assert "Partition: 0\tCommitted: 10\tHW: 10\tLag: 0" in described.stdout
    assert "Partition: 1\tCommitted: 0\tHW: 0\tLag: 0" in described.stdout
