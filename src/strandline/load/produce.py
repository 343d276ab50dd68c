"""``strandline bench produce``: the producer load generator (like ``kafka-producer-perf-test``).

Each worker process sends its share of ``--num-records`` records of ``--record-size`` bytes (one
random payload, as Kafka's tool sends), at its share of ``--throughput`` records/s when one is
given, and times each record from ``produce()`` to its acknowledgement (librdkafka's own
measure of it).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from strandline.load.producer import Pacer, producer_config, send
from strandline.load.stats import Sampler
from strandline.load.workers import Outcome, Reporter, run_workers

POLL_EVERY = 64


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares that differ by at most one."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def worker(index: int, queue: Any, go: Any, config: dict[str, Any], topic: str, count: int, record_size: int,
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
    failures: Counter[str] = Counter()

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
    pacer = Pacer(rate)
    for i in range(count):
        pacer.wait(producer, i)
        refused = send(producer, topic, payload, on_delivery)
        if refused is not None:
            reporter.window.failed += 1
            failures[refused] += 1
        if i % POLL_EVERY == 0:
            producer.poll(0)
            reporter.tick()
    while producer.flush(1.0):
        reporter.tick()
    reporter.done(sampler.values, failures)


def run(bootstrap: str, topic: str, num_records: int, record_size: int, throughput: float, acks: str,
        processes: int, props: dict[str, str], progress_s: float = 5.0) -> Outcome:
    config = producer_config(bootstrap, acks, props)
    counts = [n for n in shares(num_records, processes) if n > 0]
    jobs = [(config, topic, n, record_size, throughput / len(counts) if throughput > 0 else 0.0) for n in counts]
    return run_workers(worker, jobs, "sent", progress_s)
