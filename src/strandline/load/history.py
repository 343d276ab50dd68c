"""Producers that record a history: every record an operation, for a checker to account for.

:class:`Workload`: confluent-kafka producers, each in its own thread, sending unique values
``p<producer>-<sequence>`` round-robin over the topic's partitions at a bounded rate, with the
given ``acks`` and idempotence. Every record is one operation of the history: ``invoke`` when
handed to the client, then ``ok`` (with its offset), ``fail`` (the client refused it, so it was
never sent) or ``unknown`` (the client gave up: it may or may not have been written). The lab
(``strandline lab``) runs it through its faults.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from strandline.load.producer import Pacer, outcome, producer_config, send


def now_ms() -> float:
    return time.time() * 1000.0


#: one operation of the history: (time in ms, producer, "invoke", "ok", "fail" or "unknown", value, partition,
#: offset or -1, error or "")
Op = tuple[float, int, str, str, int, int, str]

@dataclass
class Workload:
    bootstrap: str
    topic: str
    partitions: int
    producers: int = 2
    rate_per_producer: float = 400.0      # records per second, each producer
    acks: str = "all"
    idempotence: bool = True
    message_timeout_ms: int = 15000
    extra_config: dict[str, Any] = field(default_factory=dict)   # the scenario's own producer settings
    ops: list[Op] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)   # fatal client errors (the producer was replaced)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, time_ms: float, producer: int, kind: str, value: str, partition: int, offset: int,
                error: str) -> None:
        with self._lock:
            self.ops.append((time_ms, producer, kind, value, partition, offset, error))

    def start(self) -> None:
        for p in range(self.producers):
            t = threading.Thread(target=self._run, args=(p,), name=f"lab-producer-{p}", daemon=True)
            self._threads.append(t)
            t.start()

    def _config(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "enable.idempotence": self.idempotence, "linger.ms": 5, "message.timeout.ms": self.message_timeout_ms,
            "request.timeout.ms": 5000, "retry.backoff.ms": 100, "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000}
        if not self.idempotence:
            settings["max.in.flight.requests.per.connection"] = 1   # ordering without idempotence (PRO-1)
        return producer_config(self.bootstrap, self.acks, self.extra_config, **settings)

    def _run(self, producer: int) -> None:
        from confluent_kafka import KafkaException, Producer

        client = Producer(self._config(), logger=None)
        sequence = 0
        pacer = Pacer(self.rate_per_producer)

        def delivered(err: Any, msg: Any) -> None:
            told = outcome(err, msg)
            value = msg.value().decode()
            if told.acked:
                self._record(now_ms(), producer, "ok", value, told.partition, told.offset, "")
            else:
                self._record(now_ms(), producer, "unknown", value, told.partition, -1, told.error)

        while not self._stop.is_set():
            value = f"p{producer}-{sequence:09d}"
            partition = sequence % self.partitions
            self._record(now_ms(), producer, "invoke", value, partition, -1, "")
            refused = send(client, self.topic, value.encode(), delivered, partition, wait_when_full=False)
            if refused is not None:
                self._record(now_ms(), producer, "fail", value, partition, -1, refused)
            sequence += 1
            try:
                client.poll(0)
                pacer.wait(client, sequence)
            except KafkaException as exc:
                # A fatal error of the idempotent producer (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER from a
                # leader elected uncleanly): what it had in flight gets its outcome, then a new
                # producer (a new producer id) carries on, as an application would.
                self.fatal.append(f"producer {producer}: {exc.args[0].name() if exc.args else exc}")
                client = self._replace(client)
        client.flush(self.message_timeout_ms / 1000 + 5)

    def _replace(self, client: Any) -> Any:
        from confluent_kafka import KafkaException, Producer

        try:
            client.purge(in_queue=True, in_flight=True)
            client.poll(0)
        except KafkaException:
            pass
        return Producer(self._config(), logger=None)

    def stop(self) -> None:
        """Stop sending and wait until every record sent has an outcome (at most the message timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join(self.message_timeout_ms / 1000 + 30)

    def counts(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for op in self.ops:
                out[op[2]] = out.get(op[2], 0) + 1
        return out

    def acked_since(self, t_ms: float) -> int:
        with self._lock:
            return sum(1 for op in self.ops if op[2] == "ok" and op[0] >= t_ms)
