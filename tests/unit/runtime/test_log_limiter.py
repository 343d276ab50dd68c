"""A line repeated many times does not flood the broker's log: the first line of each kind in a
window passes, the others are counted, and one line per window says how many there were."""

from __future__ import annotations

import logging

from strandline.runtime.loggers import RepeatLimiter, line_kind


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup(window_s: float = 60.0, max_kinds: int = 100):
    handler = Lines()
    clock = Clock()
    limiter = RepeatLimiter(handler, window_s, clock, max_kinds)
    handler.addFilter(limiter)
    logger = logging.getLogger(f"test.limiter.{id(handler)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    return logger, handler, clock, limiter


def test_the_first_line_of_a_kind_passes_and_the_rest_are_counted_in_one_line():
    logger, handler, clock, limiter = setup()
    for i in range(10_000):
        logger.info("Closing connection %s from %s: %s", i, f"127.0.0.1:{i}", "malformed request: x",
                    extra={"kind": "closing a connection: malformed request"})
    assert handler.lines == ["Closing connection 0 from 127.0.0.1:0: malformed request: x"]
    clock.now += 59.9
    limiter.flush()
    assert len(handler.lines) == 1                       # the window is not over yet
    clock.now += 0.1
    limiter.flush()
    assert handler.lines[1] == ('9999 more like "Closing connection 0 from 127.0.0.1:0: malformed request: x" '
                                'in the last 60 s')
    limiter.flush()
    assert len(handler.lines) == 2                        # said once
    logger.info("Closing connection %s", 10_001, extra={"kind": "closing a connection: malformed request"})
    assert handler.lines[2] == "Closing connection 10001"  # a new window, its first line passes


def test_a_line_after_its_window_ends_comes_after_the_count_of_the_window_before():
    logger, handler, clock, _ = setup()
    for i in range(3):
        logger.warning("Fetching t-%d from broker 2 failed: %s", i, "timed out", extra={"kind": "fetch failed"})
    clock.now += 61
    logger.warning("Fetching t-%d from broker 2 failed: %s", 9, "timed out", extra={"kind": "fetch failed"})
    assert handler.lines == ["Fetching t-0 from broker 2 failed: timed out",
                             '2 more like "Fetching t-0 from broker 2 failed: timed out" in the last 60 s',
                             "Fetching t-9 from broker 2 failed: timed out"]


def test_kinds_are_counted_apart_and_info_without_a_kind_is_never_limited():
    logger, handler, clock, limiter = setup()
    for i in range(5):
        logger.info("Broker %d serving", i)                               # no kind: all pass
        logger.warning("Reading the cluster state failed: %s", f"error {i}")   # kind: its format string
        logger.warning("%s", f"Ignoring the deletion of topic t{i}: bad")      # kind: its text, numbers out
        logger.error("%s", f"Error handling FETCH v{i}", extra={"kind": "request failed"})
    assert handler.lines == ["Broker 0 serving", "Reading the cluster state failed: error 0",
                             "Ignoring the deletion of topic t0: bad", "Error handling FETCH v0",
                             "Broker 1 serving", "Broker 2 serving", "Broker 3 serving", "Broker 4 serving"]
    clock.now += 60
    limiter.flush()
    assert sorted(handler.lines[8:]) == [
        '4 more like "Error handling FETCH v0" in the last 60 s',
        '4 more like "Ignoring the deletion of topic t0: bad" in the last 60 s',
        '4 more like "Reading the cluster state failed: error 0" in the last 60 s']


def test_the_kinds_tracked_are_bounded():
    logger, handler, clock, limiter = setup(max_kinds=10)
    for i in range(1000):
        logger.warning("line %s", i, extra={"kind": f"kind {i}"})
    assert len(handler.lines) == 11 and len(limiter.kinds) == 11      # ten kinds, then one for all others
    clock.now += 60
    limiter.flush()
    assert handler.lines[-1] == '989 more like "line 10" in the last 60 s' and not limiter.kinds


def test_line_kind():
    record = logging.LogRecord("strandline.broker", logging.WARNING, "x", 1, "%s", ("Partition t-12 is offline",), None)
    assert line_kind(record) == "strandline.broker 30 Partition t-# is offline"
    record = logging.LogRecord("strandline.broker", logging.INFO, "x", 1, "%s", ("Partition t-12 is offline",), None)
    assert line_kind(record) is None
    record.kind = "offline"
    assert line_kind(record) == "offline"
