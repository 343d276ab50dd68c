"""``strandline bench consume``: the consumer load generator (like ``kafka-consumer-perf-test``).

The parent reads each partition's log start and high watermark once and gives every worker
process a set of partitions with an end offset, so that together they read ``--num-records``
records that are already there (or every record there is, when fewer). Each worker assigns its
partitions directly (no group, no rebalance time in the figures) and reads them to their end
offsets. The latency is each record's age when it arrives: the time since its producer's
timestamp, which is how late a consumer keeping up with producers is.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from strandline.bench.stats import Sampler
from strandline.bench.workers import Outcome, Reporter, run_workers
from strandline.errors import StrandlineError

BATCH = 1000


def plan(ranges: dict[int, tuple[int, int]], num_records: int) -> dict[int, tuple[int, int]]:
    """Each partition's [start, end) offsets, together ``num_records`` (or all there are), spread
    as evenly as the partitions' sizes allow."""
    sizes = {p: max(0, high - low) for p, (low, high) in ranges.items()}
    take = {p: 0 for p in sizes}
    left = num_records
    open_parts = sorted(sizes, key=lambda p: sizes[p])
    while left > 0 and open_parts:
        share = max(1, left // len(open_parts))
        still = []
        for p in open_parts:
            more = min(share, sizes[p] - take[p], left)
            take[p] += more
            left -= more
            if take[p] < sizes[p]:
                still.append(p)
            if left == 0:
                break
        open_parts = still
    return {p: (ranges[p][0], ranges[p][0] + n) for p, n in take.items() if n > 0}


def split(work: dict[int, tuple[int, int]], processes: int) -> list[dict[int, tuple[int, int]]]:
    """Partitions dealt to at most ``processes`` workers, the largest first, each to the least loaded."""
    loads = [0] * min(processes, len(work))
    parts: list[dict[int, tuple[int, int]]] = [{} for _ in loads]
    for p, (start, end) in sorted(work.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        i = loads.index(min(loads))
        parts[i][p] = (start, end)
        loads[i] += end - start
    return parts


def worker(index: int, queue: Any, go: Any, config: dict, topic: str, work: dict[int, tuple[int, int]],
           idle_timeout_s: float) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    try:
        consumer = Consumer(config)
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in work.items()])
    except KafkaException as exc:
        queue.put(("error", index, f"consumer: {exc.args[0].str() if exc.args else exc}"))
        return
    reporter = Reporter(index, queue)
    sampler = Sampler(sum(end - start for start, end in work.values()))
    failures: Counter = Counter()
    left = {p: end for p, (_, end) in work.items()}
    queue.put(("ready", index))
    go.wait()
    last = time.monotonic()
    window = reporter.window
    while left:
        batch = consumer.consume(BATCH, 0.5)
        now_ms = time.time() * 1000
        window = reporter.window
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    failures[err.str()] += 1
                elif msg.partition() in left and msg.offset() >= left[msg.partition()]:
                    del left[msg.partition()]      # at its end though the last offsets held no record
                continue
            p = msg.partition()
            end = left.get(p)
            if end is None or msg.offset() >= end:
                continue
            age_ms = max(0.0, now_ms - msg.timestamp()[1])
            value, key = msg.value(), msg.key()
            window.record((len(value) if value else 0) + (len(key) if key else 0), age_ms)
            sampler.add(age_ms)
            if msg.offset() >= end - 1:
                del left[p]
        if batch:
            last = time.monotonic()
        elif time.monotonic() - last > idle_timeout_s:
            failures[f"no record for {idle_timeout_s:.0f} s; stopped with {len(left)} partition(s) unread"] += 1
            break
        reporter.tick()
    reporter.done(sampler.values, failures)
    consumer.close()


def ranges_of(bootstrap: str, topic: str, props: dict[str, str]) -> dict[int, tuple[int, int]]:
    """Each partition's log start offset and high watermark, asked once."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strandline-bench", "log_level": 0, **props})
    try:
        try:
            md = consumer.list_topics(topic, timeout=10)
        except KafkaException:
            raise StrandlineError(f"no broker of {bootstrap} answered within 10 s") from None
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise StrandlineError(f"topic {topic} does not exist")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in sorted(t.partitions)}
    finally:
        consumer.close()


def run(bootstrap: str, topic: str, num_records: int, processes: int, props: dict[str, str],
        idle_timeout_s: float = 10.0, progress_s: float = 5.0) -> tuple[Outcome, int]:
    """Reads ``num_records`` (or all there are); returns the outcome and how many were planned."""
    work = plan(ranges_of(bootstrap, topic, props), num_records)
    planned = sum(end - start for start, end in work.values())
    config = {"bootstrap.servers": bootstrap, "group.id": "strandline-bench", "enable.auto.commit": False,
              "enable.partition.eof": True, "log_level": 0, **props}
    jobs = [(config, topic, part, idle_timeout_s) for part in split(work, processes)]
    if not jobs:
        raise StrandlineError(f"topic {topic} has no records to read")
    return run_workers(worker, jobs, "consumed", progress_s), planned
