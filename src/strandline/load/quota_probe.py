"""How fast a client may produce under a quota: a confluent-kafka producer sending as fast as the
broker lets it, recording when each record was acknowledged and every throttle time it was told.

Kafka's produce quota is a rate over a window (``quota.window.num`` samples of
``quota.window.size.seconds``: 11 of 1 s), so a client may send the window's worth at once before
it is held; a rate measured on what was acknowledged after the first seconds shows how closely the
quota holds it (:func:`rate_after`). ``benchmarks/quota_accuracy.py`` compares Strandline and Kafka
with it; the security tests hold an authenticated user to a quota with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

#: one value's bytes: 1,000, as the quota benchmarks of Kafka's own tests send
VALUE = b"q" * 1000


@dataclass
class FlatOut:
    """What :func:`produce_flat_out` saw: (seconds since the start, value bytes) of each
    acknowledged record, and every throttle time (ms) the broker's answers carried."""
    seconds: float
    acked: list[tuple[float, int]] = field(default_factory=list)
    throttles: list[int] = field(default_factory=list)

    def rate_after(self, skip: float) -> float:
        """Acknowledged value bytes per second from ``skip`` seconds to the end."""
        return sum(n for t, n in self.acked if skip <= t <= self.seconds) / (self.seconds - skip)

    def throttled(self) -> list[int]:
        """The throttle times above 0: the answers that held the client back."""
        return [t for t in self.throttles if t > 0]


def produce_flat_out(config: dict[str, Any], topic: str, seconds: float) -> FlatOut:
    """Produce ``VALUE`` to ``topic`` as fast as the broker takes it for ``seconds`` (acks=1,
    linger 5 ms, a 512 KiB local queue, so that a held client waits instead of queueing
    seconds of records), then wait up to 30 s for the last answers. ``config``: the client's
    connection settings (bootstrap, client id, security)."""
    from confluent_kafka import Producer

    seen = FlatOut(seconds)
    producer = Producer({**config, "acks": 1, "linger.ms": 5, "queue.buffering.max.kbytes": 512,
                         "throttle_cb": lambda event: seen.throttles.append(int(event.throttle_time * 1000))})
    start = time.monotonic()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            seen.acked.append((time.monotonic() - start, len(msg.value())))

    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return seen
