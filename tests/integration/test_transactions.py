"""Transactions (KIP-98) against a real 3-broker cluster: confluent-kafka, kafka-python and aiokafka
transactional producers; read_committed consumers see exactly the committed records; an open
transaction holds them back at the last stable offset; a zombie producer is fenced; a
consume-transform-produce loop stopped between batches, and one in a process of its own SIGKILLed
20 times, give every input exactly one output; a plain offset commit written after a transaction's
offsets outlives its commit."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli

pytestmark = pytest.mark.integration


cluster = cluster_fixture("txn", 3, overrides=["group.initial.rebalance.delay.ms=0",
                                               "offsets.topic.num.partitions=3",
                                               "transaction.state.log.num.partitions=3",
                                               "zookeeper.session.timeout.ms=6000"])


@pytest.fixture(scope="module")
def admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def new_topic(admin, partitions: int = 2) -> str:
    """A new RF=3 topic. On NOT_CONTROLLER the client's metadata is read again and the request
    retried until a deadline, as Kafka's Java AdminClient does and librdkafka does not: after a
    test SIGKILLs the controller, librdkafka keeps sending admin requests to the broker its
    cached metadata names, until its next periodic refresh (CI saw three tests fail so)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    name = f"t-{uuid.uuid4().hex[:8]}"

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)
            return True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NOT_CONTROLLER:
                raise
            admin.list_topics(timeout=10)              # a Metadata answer names the controller
            return False
    poll_until(created, 60, interval=0.2, message=f"a controller that creates {name}")
    return name


def read_all(bootstrap: str, topics: dict[str, int], isolation: str, timeout_s: float = 20) -> dict:
    """Every record of ``topics`` (name -> partition count) readable at ``isolation``, per partition,
    in order; stops at each partition's end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    parts = [TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)]
    consumer.assign(parts)
    got: dict = {(t, p): [] for t, n in topics.items() for p in range(n)}
    ended: set = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(ended) < len(parts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    ended.add((msg.topic(), msg.partition()))
                continue
            got[(msg.topic(), msg.partition())].append(msg.value().decode())
    finally:
        consumer.close()
    assert len(ended) == len(parts), f"not every partition was read to its end: {sorted(ended)}"
    return got


def test_committed_and_aborted_transactions_across_topics_with_confluent_kafka(cluster, admin):
    from confluent_kafka import Producer

    a, b = new_topic(admin), new_topic(admin)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"ck-{a}"})
    producer.init_transactions(30)
    for round_, commit in enumerate((True, False, True, False, True)):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(a if i % 2 else b, f"{round_}-{i}".encode(), partition=i // 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    committed = read_all(cluster.bootstrap, {a: 2, b: 2}, "read_committed")
    assert committed == {(b, 0): ["0-0", "2-0", "4-0"], (a, 0): ["0-1", "2-1", "4-1"],
                         (b, 1): ["0-2", "2-2", "4-2"], (a, 1): ["0-3", "2-3", "4-3"]}
    everything = read_all(cluster.bootstrap, {a: 2, b: 2}, "read_uncommitted")
    assert everything[(a, 0)] == ["0-1", "1-1", "2-1", "3-1", "4-1"]        # aborted records too, as Kafka


def test_an_open_transaction_holds_read_committed_readers_at_the_last_stable_offset(cluster, admin):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(admin, 1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    plain.produce(topic, b"before", partition=0)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"lso-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    txn.flush(30)
    plain.produce(topic, b"after", partition=0)            # behind the open transaction
    plain.flush(30)
    assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == ["before"]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lso",
                         "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 1)                        # ListOffsets read_committed: the LSO
    finally:
        consumer.close()
    # the operator's view (kafka-transactions): the open transaction and its partition
    described = run_cli("transactions", "describe", "--bootstrap-server", cluster.bootstrap,
                        "--transactional-id", f"lso-{topic}")
    assert described.returncode == 0, described.stderr
    assert "TransactionState               Ongoing" in described.stdout
    assert f"TopicPartitions                {topic}-0" in described.stdout
    txn.commit_transaction(30)
    assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == ["before", "open", "after"]
    listed = run_cli("transactions", "list", "--bootstrap-server", cluster.bootstrap, "--state", "CompleteCommit")
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[0] == f"lso-{topic}" and line.split()[-1] == "CompleteCommit"
               for line in listed.stdout.splitlines()[1:])
    missing = run_cli("transactions", "describe", "--bootstrap-server", cluster.bootstrap, "--transactional-id", "none")
    assert missing.returncode == 4 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def test_a_zombie_producer_is_fenced_and_its_transaction_aborted(cluster, admin):
    from confluent_kafka import KafkaException, Producer

    topic = new_topic(admin, 1)
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": f"zombie-{topic}"}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer(conf)
    successor.init_transactions(30)                         # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        zombie.produce(topic, b"late", partition=0)
        zombie.commit_transaction(10)
    assert caught.value.args[0].name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), \
        caught.value.args[0]
    assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == ["successor"]


def test_consume_transform_produce_gives_every_input_exactly_one_output_across_restarts(cluster, admin):
    """sendOffsetsToTransaction: the output records and the input offsets commit together. The loop
    stops 20 times, after a committed batch or in the middle of one (aborted by the next instance
    fencing it), and resumes from the committed offsets."""
    from confluent_kafka import Consumer, Producer

    source, sink = new_topic(admin), new_topic(admin)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(60):
        feeder.produce(source, str(i).encode(), partition=i % 2)
    feeder.flush(30)
    group = f"ctp-{source}"

    def run(batches: int, leave_open: bool) -> int:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.subscribe([source])
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"ctp-{source}"})
        producer.init_transactions(30)
        done = 0
        deadline = time.monotonic() + 30
        try:
            while done < batches and time.monotonic() < deadline:
                msgs = [m for m in consumer.consume(4, 1.0) if m.error() is None]
                if not msgs:
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(sink, m.value(), partition=m.partition())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 30)
                if leave_open and done == batches - 1:
                    producer.flush(30)       # stopped before the commit: its successor aborts it
                    return done
                producer.commit_transaction(30)
                done += 1
        finally:
            consumer.close()
        return done

    for attempt in range(20):
        run(1, leave_open=attempt % 2 == 1)
    while sum(len(v) for v in read_all(cluster.bootstrap, {sink: 2}, "read_committed").values()) < 60:
        assert run(50, leave_open=False) > 0, "no progress"
    outputs = read_all(cluster.bootstrap, {sink: 2}, "read_committed")
    values = sorted(int(v) for vs in outputs.values() for v in vs)
    assert values == list(range(60))                         # every input exactly once
    for p in (0, 1):                                        # and in each partition in input order
        assert [int(v) for v in outputs[(sink, p)]] == list(range(p, 60, 2))


def test_kafka_python_and_aiokafka_transactional_producers(cluster, admin):
    from kafka import KafkaProducer

    topic = new_topic(admin, 1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"kp-{topic}")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"kp-commit", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"kp-abort", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    async def with_aiokafka() -> None:
        from aiokafka import AIOKafkaProducer

        aio = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=f"aio-{topic}")
        await aio.start()
        try:
            async with aio.transaction():
                await aio.send_and_wait(topic, b"aio-commit", partition=0)
            await aio.begin_transaction()
            await aio.send_and_wait(topic, b"aio-abort", partition=0)
            await aio.abort_transaction()
        finally:
            await aio.stop()

    asyncio.run(with_aiokafka())
    assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == ["kp-commit", "aio-commit"]


def test_sigkill_of_the_coordinator_and_of_a_leader_in_the_middle_of_commits(cluster, admin):
    """Transactions commit and abort in a loop while the transaction coordinator's broker, then a
    partition leader's, is SIGKILLed and started again. Every transaction the producer saw commit
    is complete on every partition, every aborted one invisible, none half-visible."""
    import threading

    from confluent_kafka import KafkaException, Producer

    topic = new_topic(admin, 3)
    transactional_id = f"kill-{topic}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    outcomes: dict[int, str] = {}
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set() and n < 400:
            try:
                producer.begin_transaction()
                for p in range(3):
                    producer.produce(topic, str(n).encode(), partition=p)
                if n % 3 == 2:
                    producer.abort_transaction(60)
                    outcomes[n] = "aborted"
                else:
                    producer.commit_transaction(60)
                    outcomes[n] = "committed"
            except KafkaException as exc:
                outcomes[n] = "failed"
                if exc.args[0].txn_requires_abort():
                    producer.abort_transaction(60)
                elif not exc.args[0].retriable():
                    return
            n += 1

    def coordinator() -> int:
        described = run_cli("transactions", "describe", "--bootstrap-server", cluster.bootstrap,
                            "--transactional-id", transactional_id)
        assert described.returncode == 0, described.stderr
        return int(described.stdout.split()[1])

    worker = threading.Thread(target=loop)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while len(outcomes) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        victims = [coordinator()]
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        victims.append(next(p.leader for p in partitions.values() if p.leader != victims[0]))
        for victim in victims:
            before = len(outcomes)
            assert run_cli("cluster", "kill", str(victim), "--data-dir", str(cluster.data_dir)).returncode == 0
            assert run_cli("cluster", "start", str(victim), "--data-dir", str(cluster.data_dir),
                           timeout=120).returncode == 0
            deadline = time.monotonic() + 60
            while len(outcomes) < before + 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(outcomes) >= before + 10, f"no progress after broker {victim} came back: {outcomes}"
    finally:
        stop.set()
        worker.join(180)
    assert not worker.is_alive()
    seen = read_all(cluster.bootstrap, {topic: 3}, "read_committed", timeout_s=60)
    per_round: dict[int, int] = {}
    for (_, _p), values in seen.items():
        assert [int(v) for v in values] == sorted(int(v) for v in values)          # in order
        for v in values:
            per_round[int(v)] = per_round.get(int(v), 0) + 1
    assert all(count == 3 for count in per_round.values()), "a half-visible transaction"
    assert all(outcomes[n] != "aborted" for n in per_round), "an aborted transaction is visible"
    assert all(n in per_round for n, o in outcomes.items() if o == "committed"), "a committed transaction is lost"
    assert sum(o == "committed" for o in outcomes.values()) >= 15


def test_a_consume_transform_produce_process_sigkilled_20_times_gives_every_input_exactly_one_output(
        cluster, admin):
    """Issue 17's target: "A consume-transform-produce loop (sendOffsetsToTransaction) killed and
    restarted 20 times gives every input record exactly one output."

    The loop (tests/integration/txn_loop_worker.py: a read_committed consumer, a transactional
    producer, send_offsets_to_transaction, commit) runs as a process of its own, which is SIGKILLed
    20 times and started again under the same transactional.id: after a transaction's records were
    produced, after its offsets were added (both mid-transaction), at a random moment after it
    started, and at a random moment after some commits. New input arrives before every start. At
    the end a read_committed reader of the output finds every input exactly once, in input order in
    each of the four partitions."""
    import os
    import queue
    import random
    import signal
    import subprocess
    import sys
    import threading
    from collections import Counter
    from pathlib import Path

    from confluent_kafka import Producer

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    partitions, per_round = 4, 40
    source, sink = new_topic(admin, partitions), new_topic(admin, partitions)
    group, transactional_id = f"kill-ctp-{source}", f"kill-ctp-{source}"
    worker_py = Path(__file__).with_name("txn_loop_worker.py")
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    inputs: dict[int, list[str]] = {p: [] for p in range(partitions)}

    def feed() -> None:
        start = sum(len(v) for v in inputs.values())
        for i in range(start, start + per_round):
            feeder.produce(source, str(i).encode(), partition=i % partitions)
            inputs[i % partitions].append(str(i))
        assert feeder.flush(30) == 0

    class Worker:
        def __init__(self) -> None:
            self.proc = subprocess.Popen(
                [sys.executable, str(worker_py), cluster.bootstrap, source, sink, group, transactional_id, "50"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            self.lines: queue.Queue = queue.Queue()
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
            self.last = ""

        def _read(self) -> None:
            for line in self.proc.stdout:
                self.lines.put(line.strip())
            self.lines.put(None)

        def until(self, wanted, deadline: float) -> str | None:
            """The first line ``wanted(line)`` accepts (None: the deadline passed); fails if the
            worker ends by itself."""
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = self.lines.get(timeout=left)
                except queue.Empty:
                    return None
                if line is None:
                    self.proc.wait(10)
                    raise AssertionError(f"the worker ended by itself ({self.proc.returncode}), seed {seed}: "
                                         f"{self.proc.stderr.read()}")
                self.last = line
                note(line)
                if wanted(line):
                    return line
            return None

        def kill(self) -> str:
            """SIGKILL by pid; the last step it reported."""
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.reader.join(10)
            while (line := self.lines.get_nowait() if not self.lines.empty() else None) is not None:
                self.last = line
                note(line)
            self.proc.stderr.close()
            return self.last

    committed: dict[int, int] = {}

    def note(line: str) -> None:
        if line.startswith("COMMITTED"):
            for item in line.split()[2:]:
                p, o = item.split("=")
                committed[int(p)] = max(committed.get(int(p), 0), int(o))

    mid_transaction = 0
    worker: Worker | None = None
    started = time.monotonic()
    try:
        for kill in range(20):
            feed()
            worker = Worker()
            mode = kill % 4
            deadline = time.monotonic() + 30
            if mode == 0:
                seen = worker.until(lambda line: line.startswith("PRODUCED"), deadline)
            elif mode == 1:
                seen = worker.until(lambda line: line.startswith("OFFSETS"), deadline)
            elif mode == 2:                                  # anywhere from start-up on
                worker.until(lambda line: False, time.monotonic() + rng.uniform(0, 2.5))
                seen = "any"
            else:                                            # after some commits, anywhere in the loop
                wanted = rng.randint(1, 3)
                seen = worker.until(lambda line: line.startswith("COMMITTED") and int(line.split()[1]) + 1 >= wanted,  # noqa: B023
                                    deadline)
                worker.until(lambda line: False, time.monotonic() + rng.uniform(0, 0.2))
            assert seen is not None, f"kill {kill} (mode {mode}): the worker never got there, seed {seed}"
            last = worker.kill()
            worker = None
            mid_transaction += last.startswith(("PRODUCED", "OFFSETS"))
        # the last instance runs until every input's offset is committed
        ends = {p: len(v) for p, v in inputs.items()}
        worker = Worker()
        deadline = time.monotonic() + 60
        worker.until(lambda line: all(committed.get(p, 0) >= ends[p] for p in ends), deadline)
        assert all(committed.get(p, 0) == ends[p] for p in ends), \
            f"committed input offsets {committed}, input ends {ends}, seed {seed}"
        worker.kill()
        worker = None
    finally:
        if worker is not None and worker.proc.poll() is None:
            os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait(10)
    elapsed = time.monotonic() - started
    assert mid_transaction >= 8, f"only {mid_transaction} kills landed mid-transaction, seed {seed}"
    outputs = read_all(cluster.bootstrap, {sink: partitions}, "read_committed", timeout_s=30)
    counts = Counter(v for values in outputs.values() for v in values)
    expected = {v for values in inputs.values() for v in values}
    duplicates = {v: c for v, c in counts.items() if c > 1}
    missing = expected - set(counts)
    assert not duplicates and not missing, \
        f"{len(duplicates)} duplicated, {len(missing)} missing, seed {seed}: {sorted(duplicates)[:10]} {sorted(missing)[:10]}"
    assert set(counts) == expected
    for p in range(partitions):                              # in input order, in the input's partition
        assert outputs[(sink, p)] == inputs[p], f"partition {p} out of order, seed {seed}"
    print(f"20 SIGKILLs ({mid_transaction} mid-transaction), {len(expected)} inputs, {elapsed:.1f} s, seed {seed}")


def test_a_plain_commit_after_a_transactions_offsets_is_kept_when_the_transaction_commits(cluster, admin):
    """Of a transaction's offsets (send_offsets_to_transaction) and a plain OffsetCommit of the
    same group and partition written after them, the later one counts once the transaction
    commits, as in Kafka (GroupMetadata.completePendingTxnOffsetCommit); and a transaction's
    offsets written after a plain commit replace it. Issue 17."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(admin, 1)
    group = f"late-{topic}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        def committed() -> int:
            return consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"late-{topic}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"x", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), 30)
        consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)     # later in the log
        producer.commit_transaction(30)
        assert committed() == 10
        producer.begin_transaction()
        producer.produce(topic, b"y", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        assert committed() == 7
    finally:
        consumer.close()


def _partition_files(cluster, broker_id: int, topic: str, suffix: str) -> list:
    return sorted((cluster.data_dir / f"broker-{broker_id}" / "logs" / f"{topic}-0").glob(f"*{suffix}"))


def test_producer_snapshots_and_the_transaction_index_survive_a_clean_stop_and_a_sigkill(cluster, admin):
    """Every replica writes producer ``.snapshot`` files and a ``.txnindex`` in Kafka's formats as it
    appends. A broker stopped cleanly loads its producer state without replaying a batch; after the
    leader's SIGKILL a former follower leads with the same state: the aborted transaction stays
    hidden and the open one holds read_committed readers at the last stable offset until it commits."""
    import struct

    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    topic = f"snap-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 3, config={"segment.bytes": "4096"})])[topic].result(30)
    aborter = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"a-{topic}"})
    aborter.init_transactions(30)
    aborter.begin_transaction()
    for i in range(5):
        aborter.produce(topic, f"aborted-{i}".encode())
    aborter.flush(30)                 # written, not purged by the abort
    aborter.abort_transaction(30)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(100):
        plain.produce(topic, f"plain-{i}".encode())
        plain.flush(30)
    opener = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"o-{topic}",
                       "transaction.timeout.ms": 120000})
    opener.init_transactions(30)
    opener.begin_transaction()
    opener.produce(topic, b"open")
    opener.flush(30)
    for i in range(100, 200):
        plain.produce(topic, f"plain-{i}".encode())
        plain.flush(30)
    before_open = [f"plain-{i}" for i in range(100)]
    assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == before_open

    for broker_id in (1, 2, 3):       # each replica: snapshots at its rolls, and the abort indexed
        assert len(_partition_files(cluster, broker_id, topic, ".snapshot")) >= 3, broker_id
        indexed = [struct.unpack(">hqqqq", f.read_bytes()) for f in _partition_files(cluster, broker_id, topic, ".txnindex")]
        assert [(version, first, last) for version, _, first, last, _ in indexed] == [(0, 0, 5)], broker_id

    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    log_file = cluster.data_dir / f"broker-{follower}" / "broker.log"
    assert run_cli("cluster", "stop", str(follower), "--data-dir", str(cluster.data_dir), timeout=120).returncode == 0
    end = max(int(f.name[:20]) for f in _partition_files(cluster, follower, topic, ".snapshot"))
    assert end == 207                 # the log end offset: 5 aborted, a marker, 100, 1 open, 100
    seen = len(log_file.read_text(errors="replace"))
    assert run_cli("cluster", "start", str(follower), "--data-dir", str(cluster.data_dir), timeout=120).returncode == 0
    loaded = [line for line in log_file.read_text(errors="replace")[seen:].splitlines() if "Loaded logs" in line]
    assert loaded and "'producer_batches_replayed': 0" in loaded[-1], loaded

    def leader_now() -> int:
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    def in_sync() -> bool:
        return len(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) == 3

    poll_until(in_sync, 60, message="the stopped follower back in the ISR")
    assert run_cli("cluster", "kill", str(leader), "--data-dir", str(cluster.data_dir)).returncode == 0
    try:
        poll_until(lambda: leader_now() not in (leader, -1), 60, message="a new leader")
        assert read_all(cluster.bootstrap, {topic: 1}, "read_committed")[(topic, 0)] == before_open
        opener.commit_transaction(90)
        everything = before_open + ["open"] + [f"plain-{i}" for i in range(100, 200)]
        assert read_all(cluster.bootstrap, {topic: 1}, "read_committed", timeout_s=30)[(topic, 0)] == everything
        uncommitted = read_all(cluster.bootstrap, {topic: 1}, "read_uncommitted")[(topic, 0)]
        assert uncommitted[:5] == [f"aborted-{i}" for i in range(5)] and uncommitted[5:] == everything
    finally:
        assert run_cli("cluster", "start", str(leader), "--data-dir", str(cluster.data_dir),
                       timeout=120).returncode == 0
