"""Kafka Streams with exactly-once processing (processing.guarantee=exactly_once_v2) against a 3-broker
Strandline: a word count (tests/integration/streams_app, Kafka Streams 4.4 from Maven Central, built by
Maven into ~/.cache/strandline/streams-app) counts the words of an input topic fed at a steady rate
while the application is SIGKILLed three times at random points of its processing and started again
(same state directory, as a redeployed instance), and one broker, the application's group
coordinator, is SIGKILLed once and started again.

Exactly once means (TXN-1, TXN-2, GRP-1): read with isolation.level=read_committed, the output topic
holds, for every word, the counts 1, 2, ..., N in order, N being how many times the word was fed
(the record cache is off, so each word read gives one count): no count repeated (a duplicate from a
replayed input), none missing, none going backwards. The random choices come from a seed printed
with any failure (STREAMS_SEED=N replays them). STREAMS_GUARANTEE=at_least_once runs the same
application at least once, to see the check fail: counts repeated after a kill.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from strandline.launch.zookeeper import check_java
from tests.conftest import cluster_fixture, poll_until, run_cli
from tests.integration.maven_build import built, maven_or_skip
from tests.integration.replication_helpers import create_topic

pytestmark = pytest.mark.integration

APP = Path(__file__).resolve().with_name("streams_app")
BUILD = maven_or_skip(APP / "pom.xml", ["compile", "dependency:copy-dependencies"], "streams-app",
                      {"streams.build": "{out}"})

WORDS = [f"w{i:02d}" for i in range(40)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(WORDS))]          # Zipf: w00 is common, w39 rare
LINES_PER_SECOND = 120
MAX_FEED_S = 150                                                # the feeder stops by then whatever happens
ZK_SESSION_MS = 6000
GUARANTEE = os.environ.get("STREAMS_GUARANTEE", "exactly_once_v2")


cluster = cluster_fixture("streams", 3, overrides=[f"zookeeper.session.timeout.ms={ZK_SESSION_MS}",
                                                  "offsets.topic.num.partitions=3",
                                                  "transaction.state.log.num.partitions=3"])


class Feeder(threading.Thread):
    """Produces lines of random words (idempotent, acks=all) at a steady rate until stopped; counts
    the words of every line the brokers acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rng: random.Random) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic, self.rng = topic, rng
        self.acked: Counter = Counter()
        self.lines = 0
        self.errors: list[str] = []
        self.halt = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.update(msg.value().decode().split())

    def run(self) -> None:
        began = time.monotonic()
        while not self.halt.is_set() and time.monotonic() - began < MAX_FEED_S:
            due = int((time.monotonic() - began) * LINES_PER_SECOND)
            while self.lines < due:
                line = " ".join(self.rng.choices(WORDS, WEIGHTS, k=self.rng.randint(1, 9)))
                self.producer.produce(self.topic, line.encode(), on_delivery=self._delivered)
                self.lines += 1
            self.producer.poll(0.02)
        self.producer.flush(120)


class Observer(threading.Thread):
    """Reads the output topic with read_committed from its start, counting what it has read."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-observer",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.last: dict[str, int] = {}
        self.read = 0
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for m in self.consumer.consume(500, timeout=0.2):
                    if m.error() is None:
                        self.last[m.key().decode()] = struct.unpack(">q", m.value())[0]
                        self.read += 1
        finally:
            self.consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60) -> list:
    """Every record of ``topic`` up to its end (the last stable offset for read_committed), in order
    per partition: [(partition, offset, key, value)]."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"streams-check-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records, done = [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"{topic} not read to its end within {timeout} s"
            for m in consumer.consume(1000, timeout=0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    done.add(m.partition())
                else:
                    records.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return records


class App:
    """The word count's JVM, started and SIGKILLed by PID; each run logs to its own file."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap, self.workdir = bootstrap, workdir
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.log_path = workdir / "app-0.log"
        (workdir / "state").mkdir(exist_ok=True)

    def start(self) -> None:
        build = built(BUILD)
        self.runs += 1
        self.log_path = self.workdir / f"app-{self.runs}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [check_java(17), "-Xmx384m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.showDateTime=true",
                 "-cp", f"{build / 'classes'}:{build / 'libs' / '*'}", "strandline.streams.WordCount",
                 self.bootstrap, "words", "counts", "wordcount", str(self.workdir / "state"), "2", GUARANTEE],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"the application exited ({self.proc.returncode}):\n{self.log()[-4000:]}"
        states = [ln for ln in self.log().splitlines() if ln.startswith("STATE ")]
        return bool(states) and states[-1] == "STATE RUNNING"

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log()[-4000:]
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def group_coordinator(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).coordinator.id


def test_streams_word_count_exactly_once_through_application_and_broker_kills(cluster, tmp_path):
    """TXN-1, TXN-2: each word's committed counts are exactly 1..N after three SIGKILLs of the
    application and one of its group coordinator."""
    seed = int(os.environ.get("STREAMS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    where = f"(seed {seed}; STREAMS_SEED={seed} replays the random choices)"
    for topic in ("words", "counts"):
        create_topic(cluster, topic, partitions=3, min_isr=2)
    feeder = Feeder(cluster.bootstrap, "words", random.Random(rng.random()))
    observer = Observer(cluster.bootstrap, "counts", 3)
    app = App(cluster.bootstrap, tmp_path)
    began = time.monotonic()
    timings: list[str] = []
    try:
        app.start()
        poll_until(app.running, 120, interval=0.2, message=f"the application RUNNING {where}")
        timings.append(f"first RUNNING after {time.monotonic() - began:.1f} s")
        feeder.start()
        observer.start()
        events = ["app", "app", "app", "broker"]
        rng.shuffle(events)
        for event in events:
            # a random point of the processing: after a random number of new committed counts
            target = observer.read + rng.randint(300, 2500)
            poll_until(lambda: app.running() and observer.read >= target, 120, interval=0.05,  # noqa: B023
                       message=f"{target} counts read before the {event} kill {where}")
            if event == "app":
                app.kill()
                t = time.monotonic()
                app.start()
                poll_until(app.running, 120, interval=0.2, message=f"the restarted application RUNNING {where}")
                timings.append(f"app killed at {t - began:.1f} s, RUNNING again after {time.monotonic() - t:.1f} s")
            else:
                broker = group_coordinator(cluster.bootstrap, "wordcount")
                t = time.monotonic()
                result = run_cli("cluster", "kill", str(broker), "--data-dir", str(cluster.data_dir), timeout=60)
                assert result.returncode == 0, result.stderr
                target = observer.read + rng.randint(300, 2500)
                poll_until(lambda: observer.read >= target, 120, interval=0.05,  # noqa: B023
                           message=f"{target} counts read with broker {broker} down {where}")
                result = run_cli("cluster", "start", str(broker), "--data-dir", str(cluster.data_dir), timeout=120)
                assert result.returncode == 0, result.stderr
                timings.append(f"broker {broker} (the group coordinator) killed at {t - began:.1f} s, "
                               f"started again after {time.monotonic() - t:.1f} s")
        target = observer.read + rng.randint(300, 2500)
        poll_until(lambda: app.running() and observer.read >= target, 120, interval=0.05,
                   message=f"{target} counts read after the last kill {where}")
        feeder.halt.set()
        feeder.join(150)
        assert not feeder.is_alive() and not feeder.errors, (feeder.errors[:5], where)
        expected = dict(feeder.acked)
        poll_until(lambda: app.running() and all(observer.last.get(w, 0) >= n for w, n in expected.items()), 180,
                   interval=0.2, message=f"every word's final count committed {where}")
        timings.append(f"every count committed at {time.monotonic() - began:.1f} s")
    finally:
        app.stop()
        observer.halt.set()
        feeder.halt.set()
    observer.join(30)

    fed = read_all(cluster.bootstrap, "words", 3, "read_committed")
    assert Counter(w for *_, v in fed for w in v.decode().split()) == feeder.acked, f"the input topic {where}"
    assert len(fed) == feeder.lines

    committed = read_all(cluster.bootstrap, "counts", 3, "read_committed")
    sequences: dict[str, list[int]] = {}
    for _, _, key, value in committed:
        sequences.setdefault(key.decode(), []).append(struct.unpack(">q", value)[0])
    wrong = {w: (seq[:3], "...", seq[-3:], len(seq), expected.get(w))
             for w, seq in sequences.items() if seq != list(range(1, expected.get(w, 0) + 1))}
    assert set(sequences) == set(expected) and not wrong, f"counts not 1..N: {wrong} {where}\n" + "\n".join(timings)
    everything = read_all(cluster.bootstrap, "counts", 3, "read_uncommitted")
    print(f"{sum(expected.values())} words in {feeder.lines} lines; {len(committed)} committed counts, "
          f"{len(everything) - len(committed)} records of aborted transactions; {where}\n" + "\n".join(timings))
