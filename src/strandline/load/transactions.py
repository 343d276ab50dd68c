"""Transactional producers and consumers that record a history, for the lab's transaction audit.

:class:`TxnWorkload`: confluent-kafka transactional producers (``transactional.id``
``lab-tx-<producer>``), each in its own thread. Every transaction writes unique values
``t<producer>-<transaction>-<k>`` to two or three of the topic's partitions, then commits, or
aborts on purpose (a fifth of them). Each value is one row of the history with its transaction's
outcome: ``committed`` (``commit_transaction`` returned), ``aborted`` (``abort_transaction``
returned, or the commit was never asked for: no coordinator can commit it) or ``unknown`` (the
commit was asked for and did not return: it may or may not be committed). After a fatal error
the producer is created again with the same ``transactional.id``; its ``init_transactions``
fences the old one and ends what it left open.

:class:`TxnConsumer`: a confluent-kafka consumer with ``isolation.level`` read_committed or
read_uncommitted, every partition assigned from the beginning (no group, no offsets committed),
recording every record it polls, in poll order. :meth:`TxnConsumer.caught_up` says when it has
reached the end of every partition (the last stable offset for read_committed) and nothing new
came for a while.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TXN_TIMEOUT_MS = 10000          # the producers' transaction.timeout.ms (Kafka's client default: 60 s)
CALL_TIMEOUT_S = 10.0           # how long one transactional call may block
ABORT_SHARE = 0.2               # the share of transactions aborted on purpose


def now_ms() -> float:
    return time.time() * 1000.0


#: one value of a transaction: (start ms, end ms, producer, transactional id, transaction, outcome, error,
#: value, partition, order: its place in its producer's sends)
TxnWrite = tuple[float, float, int, str, int, str, str, str, int, int]
#: one record a consumer polled: (consumer, isolation level, poll order, time ms, partition, offset, value)
Poll = tuple[int, str, int, float, int, int, str]


def txn_value(producer: int, txn: int, k: int) -> str:
    return f"t{producer}-{txn:06d}-{k}"


def _error_name(exc: Exception) -> str:
    err = exc.args[0] if exc.args else None
    return str(err.name()) if err is not None and hasattr(err, "name") else f"{type(exc).__name__}: {exc}"


@dataclass
class TxnWorkload:
    bootstrap: str
    topic: str
    partitions: int
    producers: int = 2
    rate_per_producer: float = 20.0       # transactions per second, each producer
    seed: int = 0
    writes: list[TxnWrite] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)      # fatal client errors (the producer was replaced)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for p in range(self.producers):
            t = threading.Thread(target=self._run, args=(p,), name=f"lab-txn-producer-{p}", daemon=True)
            self._threads.append(t)
            t.start()

    def config(self, producer: int) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "transactional.id": f"lab-tx-{producer}", "log_level": 0,
                "linger.ms": 5, "transaction.timeout.ms": TXN_TIMEOUT_MS, "message.timeout.ms": TXN_TIMEOUT_MS,
                "request.timeout.ms": 5000, "retry.backoff.ms": 100, "socket.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 1000}

    def record(self, start_ms: float, producer: int, tid: str, txn: int, outcome: str, error: str,
               values: list[tuple[str, int]]) -> None:
        end = now_ms()
        with self._lock:
            self.writes.extend((start_ms, end, producer, tid, txn, outcome, error, v, p, txn * 10 + k)
                               for k, (v, p) in enumerate(values))

    def _new_client(self, producer: int) -> Any:
        """A producer with its transactions initialised (retried until the run stops)."""
        from confluent_kafka import KafkaException, Producer

        while not self._stop.is_set():
            client = Producer(self.config(producer), logger=None)
            try:
                client.init_transactions(CALL_TIMEOUT_S)
                return client
            except KafkaException as exc:
                self.fatal.append(f"producer {producer}: init_transactions: {_error_name(exc)}")
                time.sleep(0.2)
        return None

    def _run(self, producer: int) -> None:
        from confluent_kafka import KafkaException

        rng = random.Random(self.seed * 1000 + producer)
        tid = f"lab-tx-{producer}"
        client = self._new_client(producer)
        txn = 0
        started = time.monotonic()
        while client is not None and not self._stop.is_set():
            parts = rng.sample(range(self.partitions), rng.choice([2, 3]) if self.partitions >= 3 else self.partitions)
            values = [(txn_value(producer, txn, k), p) for k, p in enumerate(parts)]
            on_purpose = rng.random() < ABORT_SHARE
            start = now_ms()
            commit_asked = False
            try:
                client.begin_transaction()
                for v, p in values:
                    client.produce(self.topic, v.encode(), partition=p)
                client.poll(0)
                if on_purpose:
                    # sent first: abort_transaction purges what the client still holds, and the
                    # point is aborted records in the log, which read_committed readers must skip
                    client.flush(CALL_TIMEOUT_S)
                    client.abort_transaction(CALL_TIMEOUT_S)
                    self.record(start, producer, tid, txn, "aborted", "on purpose", values)
                else:
                    commit_asked = True
                    self._commit(client)
                    self.record(start, producer, tid, txn, "committed", "", values)
            except KafkaException as exc:
                error = _error_name(exc)
                err = exc.args[0] if exc.args else None
                aborted = False
                if err is not None and not err.fatal() and err.txn_requires_abort():
                    try:
                        client.abort_transaction(CALL_TIMEOUT_S)
                        aborted = True
                    except KafkaException as again:
                        error += f", then abort: {_error_name(again)}"
                outcome = "aborted" if aborted or not commit_asked else "unknown"
                self.record(start, producer, tid, txn, outcome, error, values)
                if not aborted:
                    # a fatal error, or a transaction left in a state no call here can end: a new
                    # producer with the same transactional.id fences this one and ends it
                    self.fatal.append(f"producer {producer}: {error}")
                    client = self._new_client(producer)
            txn += 1
            due = started + txn / self.rate_per_producer
            while (ahead := due - time.monotonic()) > 0 and not self._stop.is_set():
                time.sleep(min(ahead, 0.05))

    @staticmethod
    def _commit(client: Any) -> None:
        """commit_transaction, asked again while it fails with a retriable error (librdkafka's
        advice); a commit that still fails raises."""
        from confluent_kafka import KafkaException

        for attempt in range(3):
            try:
                client.commit_transaction(CALL_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if err is None or not err.retriable() or attempt == 2:
                    raise

    def stop(self) -> None:
        """Stop beginning transactions and wait until each producer's last one has its outcome."""
        self._stop.set()
        for t in self._threads:
            t.join(4 * CALL_TIMEOUT_S + 10)

    def acked_since(self, t_ms: float) -> int:
        """Values of transactions committed since ``t_ms`` (the lab's sign that writes go on)."""
        with self._lock:
            return sum(1 for w in self.writes if w[5] == "committed" and w[1] >= t_ms)

    def counts(self) -> dict[str, int]:
        """Transactions per outcome."""
        with self._lock:
            out: dict[str, int] = {}
            for key in {(w[2], w[4]): w[5] for w in self.writes}.values():
                out[key] = out.get(key, 0) + 1
        return out


@dataclass
class TxnConsumer:
    """One consumer of every partition from the beginning; ``polls`` in the order it got them."""

    index: int
    bootstrap: str
    topic: str
    partitions: int
    isolation: str                          # "read_committed" | "read_uncommitted"
    quiet_s: float = 2.0                    # caught up: at every partition's end, nothing new for this long
    polls: list[Poll] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _at_end: dict[int, bool] = field(default_factory=dict)
    _last_record: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"lab-consumer-{self.index}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"lab-reader-{self.index}",
                             "enable.auto.commit": False, "isolation.level": self.isolation,
                             "enable.partition.eof": True, "auto.offset.reset": "earliest", "log_level": 0,
                             "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
                             "socket.timeout.ms": 5000}, logger=None)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        seq = 0
        try:
            while not self._stop.is_set():
                try:
                    msg = consumer.poll(0.1)
                except KafkaException as exc:
                    self.errors.append(_error_name(exc))
                    continue
                if msg is None:
                    continue
                err = msg.error()
                partition = int(msg.partition() or 0)
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        with self._lock:
                            self._at_end[partition] = True
                    elif len(self.errors) < 100:
                        self.errors.append(err.name())
                    continue
                with self._lock:
                    self.polls.append((self.index, self.isolation, seq, now_ms(), partition, int(msg.offset() or 0),
                                       (msg.value() or b"").decode()))
                    self._at_end[partition] = False
                    self._last_record = time.monotonic()
                seq += 1
        finally:
            consumer.close()

    def caught_up(self) -> bool:
        """At the end of every partition, with nothing new for ``quiet_s``."""
        with self._lock:
            return len(self._at_end) == self.partitions and all(self._at_end.values()) \
                and time.monotonic() - self._last_record >= self.quiet_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)


def read_to_end(consumer: TxnConsumer, timeout_s: float) -> bool:
    """Wait until ``consumer`` (started) has caught up, at most ``timeout_s``; whether it did."""
    deadline = time.monotonic() + timeout_s
    while not consumer.caught_up():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
