"""What every producing load generator does with its confluent-kafka (librdkafka) client: its
configuration, its pace, handing it a record, and reading what the broker said of each record.

* :func:`producer_config`: the client's settings from a bootstrap list, ``acks`` and the caller's own.
* :class:`Pacer`: at most ``rate`` records a second, waiting for a record's turn in ``poll()``
  (which serves acknowledgements meanwhile) and only once a wait would be worth it.
* :func:`send`: one record handed to the client; where its local queue is full, either a wait for
  room (a benchmark measures the brokers, never drops a record) or a refusal (a history records
  the record as never sent).
* :func:`outcome`: a delivery report as what the producer was told: acknowledged, with its
  partition, offset and latency, or failed, with the error's name (the record may or may not have
  been written).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

#: A paced producer waits only once it is this far ahead of its rate (as kafka-producer-perf-test's
#: throttler does), so it sends in short bursts instead of sleeping less than poll() can.
MIN_SLEEP_S = 0.002
#: poll() counts whole milliseconds: a shorter wait would not block but spin.
POLL_GRAIN_S = 0.001
#: How long a producer whose local queue is full waits in poll() for room before it tries again.
FULL_WAIT_S = 0.005


def producer_config(bootstrap: str, acks: str, extra: dict[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """A producer's settings: ``bootstrap.servers``, ``acks``, librdkafka's own logging off, then
    ``settings``, then ``extra`` (the caller's, which win)."""
    return {"bootstrap.servers": bootstrap, "acks": acks, "log_level": 0, **settings, **(extra or {})}


class Pacer:
    """Holds a producer to ``rate`` records a second (0: as fast as it can) from its start."""

    def __init__(self, rate: float, start: float | None = None) -> None:
        self.rate = rate
        self.start = time.monotonic() if start is None else start

    def wait(self, producer: Any, i: int) -> None:
        """Before record ``i``: once ``MIN_SLEEP_S`` or more ahead of its turn, wait for it in
        ``poll()``, which returns at the first acknowledgement it serves."""
        if self.rate <= 0:
            return
        due = self.start + i / self.rate
        if due - time.monotonic() > MIN_SLEEP_S:
            while (ahead := due - time.monotonic()) > POLL_GRAIN_S:
                producer.poll(ahead)


def send(producer: Any, topic: str, value: bytes, on_delivery: Callable[[Any, Any], None],
         partition: int | None = None, wait_when_full: bool = True) -> str | None:
    """Hand one record to the client: None once it took it, else why it did not (it was never
    sent). A full local queue is waited out in ``poll()`` with ``wait_when_full``, else refused."""
    while True:
        try:
            if partition is None:
                producer.produce(topic, value, on_delivery=on_delivery)
            else:
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
            return None
        except BufferError:
            if not wait_when_full:
                return "local queue full"
            producer.poll(FULL_WAIT_S)      # serve acknowledgements first
        except Exception as exc:  # noqa: BLE001 - e.g. KafkaException: the record was never sent
            from confluent_kafka import KafkaError

            return exc.args[0].name() if exc.args and isinstance(exc.args[0], KafkaError) else type(exc).__name__


@dataclass(frozen=True)
class Outcome:
    """What a producer was told of one record."""

    acked: bool
    partition: int
    offset: int             # -1 unless acknowledged
    latency_ms: float       # from produce() to the answer, as librdkafka measures it
    error: str = ""         # the error's name where it failed
    reason: str = ""        # and its description


def outcome(err: Any, msg: Any) -> Outcome:
    """A delivery report (``on_delivery``'s arguments) as an :class:`Outcome`."""
    latency_ms = (msg.latency() or 0.0) * 1000
    if err is None:
        return Outcome(True, msg.partition(), msg.offset(), latency_ms)
    return Outcome(False, msg.partition(), -1, latency_ms, err.name(), err.str())
