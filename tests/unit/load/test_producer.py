"""What the load generators share: handing a record to the client, reading what it was told, and
the history producers' accounting of every record."""

from __future__ import annotations

import time

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from strandline.load.history import Workload
from strandline.load.producer import FULL_WAIT_S, outcome, producer_config, send


class _Full:
    """A client whose local queue is full ``full`` times, then takes records."""

    def __init__(self, full: int, error: Exception | None = None) -> None:
        self.full, self.error = full, error
        self.polls: list[float] = []
        self.taken: list[tuple] = []

    def produce(self, topic, value, partition=None, on_delivery=None):
        if self.error is not None:
            raise self.error
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.taken.append((topic, value, partition))

    def poll(self, timeout=0):
        self.polls.append(timeout)
        return 0


def test_a_full_queue_is_waited_out_or_refused():
    waiting = _Full(2)
    assert send(waiting, "t", b"v", lambda err, msg: None) is None
    assert waiting.taken == [("t", b"v", None)] and waiting.polls == [FULL_WAIT_S, FULL_WAIT_S]
    refusing = _Full(1)
    assert send(refusing, "t", b"v", lambda err, msg: None, 3, wait_when_full=False) == "local queue full"
    assert refusing.taken == [] and refusing.polls == []


def test_a_record_the_client_refuses_is_named_by_its_error():
    error = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert send(_Full(0, error), "t", b"v", lambda err, msg: None) == "MSG_SIZE_TOO_LARGE"
    assert send(_Full(0, ValueError("bad")), "t", b"v", lambda err, msg: None) == "ValueError"


class _Msg:
    def __init__(self, value: bytes, partition: int, offset: int) -> None:
        self._value, self._partition, self._offset = value, partition, offset

    def value(self):
        return self._value

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def latency(self):
        return 0.004


def test_a_delivery_report_reads_as_acknowledged_or_failed():
    told = outcome(None, _Msg(b"v", 2, 41))
    assert (told.acked, told.partition, told.offset, told.latency_ms, told.error) == (True, 2, 41, 4.0, "")
    failed = outcome(KafkaError(KafkaError._MSG_TIMED_OUT), _Msg(b"v", 2, -1))
    assert (failed.acked, failed.offset, failed.error) == (False, -1, "_MSG_TIMED_OUT")


def test_the_callers_settings_win():
    config = producer_config("h:1", "all", {"acks": "1", "linger.ms": 0}, **{"linger.ms": 5, "retries": 2})
    assert config == {"bootstrap.servers": "h:1", "acks": "1", "log_level": 0, "linger.ms": 0, "retries": 2}


class _HistoryProducer:
    """Acknowledges records at offsets per partition; every fifth times out; every seventh is
    refused with a full queue."""

    def __init__(self, config, logger=None) -> None:
        self.pending: list = []
        self.offsets: dict[int, int] = {}
        self.count = 0

    def produce(self, topic, value, partition=None, on_delivery=None):
        self.count += 1
        if self.count % 7 == 0:
            raise BufferError("Local: Queue full")
        self.pending.append((value, partition, on_delivery))

    def poll(self, timeout=0):
        served, self.pending = self.pending, []
        for value, partition, callback in served:
            if int(value.decode().rsplit("-", 1)[1]) % 5 == 4:
                callback(KafkaError(KafkaError._MSG_TIMED_OUT), _Msg(value, partition, -1))
            else:
                offset = self.offsets.get(partition, 0)
                self.offsets[partition] = offset + 1
                callback(None, _Msg(value, partition, offset))
        if not served and timeout > 0:
            time.sleep(min(timeout, 0.01))
        return len(served)

    def flush(self, timeout=None):
        self.poll(0)
        return 0


def test_the_history_gives_every_record_one_outcome(monkeypatch):
    """Each invoke ends as ok (with its offset), unknown (the client gave up) or fail (never
    sent): none is lost or counted twice, and each partition's offsets are the acknowledged ones."""
    monkeypatch.setattr(confluent_kafka, "Producer", _HistoryProducer)
    workload = Workload("h:1", "t", 3, producers=2, rate_per_producer=2000.0)
    workload.start()
    deadline = time.monotonic() + 5
    while workload.counts().get("ok", 0) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    workload.stop()
    counts = workload.counts()
    assert counts["ok"] >= 200
    assert counts["invoke"] == counts["ok"] + counts["unknown"] + counts["fail"]
    invoked = {op[3] for op in workload.ops if op[2] == "invoke"}
    ended = [op[3] for op in workload.ops if op[2] != "invoke"]
    assert sorted(ended) == sorted(invoked)
    assert all(op[6] == "_MSG_TIMED_OUT" for op in workload.ops if op[2] == "unknown")
    assert all(op[6] == "local queue full" for op in workload.ops if op[2] == "fail")
    for producer in (0, 1):
        acked = [(op[4], op[5]) for op in workload.ops if op[2] == "ok" and op[1] == producer]
        for partition in range(3):
            offsets = [offset for p, offset in acked if p == partition]
            assert offsets == sorted(offsets)
