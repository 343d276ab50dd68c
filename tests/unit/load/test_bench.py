"""The load generators' pure parts: counting windows, percentiles and Kafka's output lines, the
split of records over producer processes and of partitions over consumer processes."""

from __future__ import annotations

import re
import time

from strandline.load.consume import plan, split
from strandline.load.produce import shares
from strandline.load.stats import Sampler, Window, final_line, percentile, rate_line

KAFKA_FINAL = re.compile(r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                         r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")


def test_windows_add_up():
    a, b = Window(), Window()
    a.record(100, 5.0)
    a.record(100, 15.0)
    b.record(50, 30.0)
    b.failed = 2
    a.add(b)
    assert (a.records, a.bytes, a.latency_sum_ms, a.latency_max_ms, a.failed) == (3, 250, 50.0, 30.0, 2)


def test_nearest_rank_percentiles():
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 50) == 500 and percentile(values, 99) == 990 and percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000 and percentile([7.0], 99.9) == 7.0 and percentile([], 50) == 0.0


def test_the_sampler_keeps_about_its_limit():
    s = Sampler(expected=2_000_000, limit=500_000)
    for i in range(2_000_000):
        s.add(float(i))
    assert len(s.values) == 500_000 and s.values[:3] == [0.0, 4.0, 8.0]
    small = Sampler(expected=10)
    for i in range(10):
        small.add(float(i))
    assert len(small.values) == 10


def test_lines_read_like_kafkas_perf_test():
    w = Window()
    for ms in range(1, 101):
        w.record(1024, float(ms))
    assert rate_line("sent", w, 2.0) == ("100 records sent, 50.0 records/sec (0.05 MB/sec), 50.5 ms avg latency, "
                                         "100.0 ms max latency.")
    line = final_line("sent", w, 2.0, [float(ms) for ms in range(1, 101)])
    assert KAFKA_FINAL.match(line), line
    assert line.endswith("50 ms 50th, 95 ms 95th, 99 ms 99th, 100 ms 99.9th.")


def test_records_are_shared_over_processes_within_one():
    assert shares(10, 3) == [4, 3, 3] and sum(shares(1_000_001, 4)) == 1_000_001 and shares(1, 3) == [1, 0, 0]


def test_a_consumer_plan_reads_exactly_what_was_asked_spread_over_partitions():
    ranges = {0: (0, 100), 1: (50, 60), 2: (0, 1000)}
    work = plan(ranges, 300)
    assert sum(end - start for start, end in work.values()) == 300
    assert work[1] == (50, 60)                      # the small partition is read whole
    assert work[0] == (0, 100) and work[2] == (0, 190)      # from the log start; the rest from the largest
    assert plan({0: (0, 1000), 1: (0, 1000), 2: (0, 1000)}, 301) in (
        {0: (0, 101), 1: (0, 100), 2: (0, 100)}, {0: (0, 100), 1: (0, 101), 2: (0, 100)},
        {0: (0, 100), 1: (0, 100), 2: (0, 101)})
    everything = plan(ranges, 10_000)
    assert everything == {0: (0, 100), 1: (50, 60), 2: (0, 1000)}
    assert plan({0: (5, 5)}, 10) == {}


def test_partitions_go_to_the_least_loaded_process():
    work = {0: (0, 100), 1: (0, 90), 2: (0, 20), 3: (0, 10)}
    parts = split(work, 2)
    assert sorted(sorted(p) for p in parts) == [[0, 3], [1, 2]]
    assert len(split(work, 8)) == 4                 # never more processes than partitions


class _FakeProducer:
    """librdkafka's Producer as the paced worker uses it: poll() counts whole milliseconds (a
    shorter timeout does not block) and serves the acknowledgements due."""

    polls: list = []
    slept: list = []         # what each poll() that blocked waited

    def __init__(self, config):
        self.waiting: list = []

    def list_topics(self, timeout=None):
        return None

    def produce(self, topic, value, on_delivery=None):
        self.waiting.append(on_delivery)

    def _serve(self):
        class Msg:
            def latency(self):
                return 0.001
        served, self.waiting = self.waiting, []
        for callback in served:
            callback(None, Msg())
        return len(served)

    def poll(self, timeout=0):
        _FakeProducer.polls.append(timeout)
        served = self._serve()
        if not served and int(timeout * 1000) > 0:
            _FakeProducer.slept.append(int(timeout * 1000) / 1000)
            time.sleep(int(timeout * 1000) / 1000)
        return served

    def flush(self, timeout=None):
        self._serve()
        return 0


def test_a_paced_producer_never_polls_for_less_than_a_millisecond(monkeypatch):
    """poll() of less than 1 ms does not block in librdkafka: a worker that waited for each
    record's turn that way spun and took the CPU the brokers need (p99 of 200+ ms at 10 MB/s).
    It waits only once 2 ms ahead, in polls of at least a millisecond, and keeps its rate."""
    import queue as queue_module
    import threading

    import confluent_kafka

    from strandline.load.produce import worker

    monkeypatch.setattr(confluent_kafka, "Producer", _FakeProducer)
    _FakeProducer.polls, _FakeProducer.slept = [], []
    out, go = queue_module.Queue(), threading.Event()
    go.set()
    start = time.monotonic()
    worker(0, out, go, {}, "t", 2000, 10, 10_000.0)     # 2,000 records at 10,000/s: 0.2 s
    elapsed = time.monotonic() - start
    waits = [t for t in _FakeProducer.polls if t > 0]
    assert waits and min(waits) >= 0.001, f"{sum(1 for t in waits if t < 0.001)} polls shorter than 1 ms"
    assert len(waits) < 400
    # It keeps its rate: never faster than the 0.2 s its 2,000 records take at 10,000/s, and it
    # never waits past a record's turn, so its waits add up to less than that (a worker waiting
    # longer would fall behind). The wall clock beyond that is the shared machine's, bounded
    # generously: a worker that waited even 5 ms per record would take 10 s.
    assert elapsed >= 0.19
    assert sum(_FakeProducer.slept) <= 0.2, sum(_FakeProducer.slept)
    assert elapsed < 10, elapsed
