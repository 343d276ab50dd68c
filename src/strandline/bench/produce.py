"""``strandline bench produce``: the producer load generator (like ``kafka-producer-perf-test``).

Each worker process sends its share of ``--num-records`` records of ``--record-size`` bytes (one
random payload, as Kafka's tool sends), at its share of ``--throughput`` records/s when one is
given, and times each record from ``produce()`` to its acknowledgement (librdkafka's own
measure of it).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from strandline.bench.stats import Sampler
from strandline.bench.workers import Outcome, Reporter, run_workers

POLL_EVERY = 64
#: A paced worker waits only once it is this far ahead of its rate (as kafka-producer-perf-test's
#: throttler does), so it sends in short bursts instead of sleeping less than poll() can.
MIN_SLEEP_S = 0.002


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares that differ by at most one."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def worker(index: int, queue: Any, go: Any, config: dict, topic: str, count: int, record_size: int,
           rate: float) -> None:
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(config)
        producer.list_topics(timeout=10)
    except KafkaException as exc:
        queue.put(("error", index, f"producer: {exc.args[0].str() if exc.args else exc}"))
        return
    payload = os.urandom(record_size)
    reporter = Reporter(index, queue)
    sampler = Sampler(count)
    failures: Counter = Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            reporter.window.failed += 1
            failures[err.str()] += 1
            return
        latency_ms = (msg.latency() or 0.0) * 1000
        reporter.window.record(record_size, latency_ms)
        sampler.add(latency_ms)

    queue.put(("ready", index))
    go.wait()
    start = time.monotonic()
    produce = producer.produce
    for i in range(count):
        if rate > 0 and start + i / rate - time.monotonic() > MIN_SLEEP_S:
            # ahead of the rate by MIN_SLEEP_S or more: wait it out in poll() (which returns at the
            # first acknowledgement it serves, and counts whole milliseconds: a shorter wait would
            # not block but spin, taking the CPU the brokers need)
            due = start + i / rate
            while (ahead := due - time.monotonic()) > 0.001:
                producer.poll(ahead)
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:            # the local queue is full: serve acknowledgements first
                producer.poll(0.005)
        if i % POLL_EVERY == 0:
            producer.poll(0)
            reporter.tick()
    while producer.flush(1.0):
        reporter.tick()
    reporter.done(sampler.values, failures)


def run(bootstrap: str, topic: str, num_records: int, record_size: int, throughput: float, acks: str,
        processes: int, props: dict[str, str], progress_s: float = 5.0) -> Outcome:
    config = {"bootstrap.servers": bootstrap, "acks": acks, "log_level": 0, **props}
    counts = [n for n in shares(num_records, processes) if n > 0]
    jobs = [(config, topic, n, record_size, throughput / len(counts) if throughput > 0 else 0.0) for n in counts]
    return run_workers(worker, jobs, "sent", progress_s)
