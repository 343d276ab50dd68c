"""This process's Python loggers as the BROKER_LOGGER config resource sees them (the shell's side
of :mod:`strandline.broker.loggers`): the table the core starts from, and its changes applied; and
the limiter that keeps a line repeated many times from flooding the log (:class:`RepeatLimiter`)."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Callable

from strandline.core.effects import SetLoggerLevel
from strandline.broker.loggers import PYTHON_LEVELS, ROOT_LOGGER, level_name


def register_level_names() -> None:
    """log4j's level names in log lines (WARN, FATAL, and TRACE below DEBUG)."""
    logging.addLevelName(PYTHON_LEVELS["TRACE"], "TRACE")
    logging.addLevelName(logging.WARNING, "WARN")
    logging.addLevelName(logging.CRITICAL, "FATAL")


def current_loggers() -> dict[str, str | None]:
    """Every logger of this process with its own level (None: inherits), the root as ``root``."""
    table: dict[str, str | None] = {ROOT_LOGGER: level_name(logging.getLogger().level) or "INFO"}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            table[name] = level_name(logger.level)
    return table


def set_logger_level(effect: SetLoggerLevel) -> None:
    logger = logging.getLogger() if effect.logger == ROOT_LOGGER else logging.getLogger(effect.logger)
    logger.setLevel(logging.NOTSET if effect.level is None else PYTHON_LEVELS[effect.level])


# -- repeated lines -----------------------------------------------------------------------------

_NUMBERS = re.compile(r"\d+")


def line_kind(record: logging.LogRecord) -> str | None:
    """What ``record`` says, whatever its details, for :class:`RepeatLimiter`; None: never limited.

    A line given a kind (``extra={"kind": ...}``, the core's ``Log.kind``) is of that kind; any
    other WARNING or worse is of the kind of its format string, or, for a line formatted before
    it was logged, of its text with every number taken out. INFO and DEBUG lines without a kind
    are not limited."""
    kind = getattr(record, "kind", None)
    if kind:
        return str(kind)
    if record.levelno < logging.WARNING or record.levelno >= logging.CRITICAL:
        return None
    template = record.msg if isinstance(record.msg, str) else str(record.msg)
    if template == "%s" and record.args:
        template = _NUMBERS.sub("#", str(record.args[0] if isinstance(record.args, tuple) else record.args))[:200]
    return f"{record.name} {record.levelno} {template}"


class _Kind:
    __slots__ = ("since", "first", "suppressed", "logger", "level")

    def __init__(self, since: float, record: logging.LogRecord) -> None:
        self.since = since
        self.first = record.getMessage()
        self.suppressed = 0
        self.logger = record.name
        self.level = record.levelno


class RepeatLimiter(logging.Filter):
    """Lets through the first line of each kind (:func:`line_kind`) in a window of ``window_s``
    and counts the others; when the window is over, one line says how many there were:
    ``N more like "<the first>" in the last 60 s`` (:meth:`flush`, which the shell calls every
    few seconds). A log then grows with the kinds of lines, not with how often each repeats (a
    fuzzer's malformed requests, a stuck follower's failing fetches). At most ``max_kinds`` kinds
    are tracked at once; the lines of further kinds share one."""

    OVERFLOW = "(lines of other kinds)"

    def __init__(self, handler: logging.Handler | None, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, max_kinds: int = 10_000) -> None:
        super().__init__()
        self.handler = handler
        self.window_s = window_s
        self.clock = clock
        self.max_kinds = max_kinds
        self.kinds: dict[str, _Kind] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "repeat_summary", False):
            return True
        key = line_kind(record)
        if key is None:
            return True
        summaries = []
        with self._lock:
            now = self.clock()
            kind = self.kinds.get(key)
            if kind is not None and now - kind.since >= self.window_s:
                summaries.append(self._summary(kind))
                kind = None
                del self.kinds[key]
            if kind is None:
                if len(self.kinds) >= self.max_kinds and key != self.OVERFLOW:
                    key = self.OVERFLOW
                    kind = self.kinds.get(key)
                if kind is None:
                    self.kinds[key] = _Kind(now, record)
                    passed = True
                else:
                    kind.suppressed += 1
                    passed = False
            else:
                kind.suppressed += 1
                passed = False
        self._emit(summaries)
        return passed

    def _summary(self, kind: _Kind) -> tuple[str, int, str] | None:
        if not kind.suppressed:
            return None
        first = kind.first if len(kind.first) <= 300 else kind.first[:300] + "..."
        return kind.logger, kind.level, f'{kind.suppressed} more like "{first}" in the last {self.window_s:.0f} s'

    def _emit(self, summaries: list[tuple[str, int, str] | None]) -> None:
        """Summary lines go to the handler this limiter filters for (see :func:`install_repeat_limiter`)."""
        for summary in summaries:
            if summary is not None and self.handler is not None:
                name, level, text = summary
                record = logging.getLogger(name).makeRecord(name, level, "(repeated lines)", 0, "%s", (text,), None)
                record.repeat_summary = True
                self.handler.handle(record)

    def flush(self) -> None:
        """Close every window that is over: a line for each that held more than its first line."""
        with self._lock:
            now = self.clock()
            over = [key for key, kind in self.kinds.items() if now - kind.since >= self.window_s]
            summaries = [self._summary(self.kinds.pop(key)) for key in over]
        self._emit(summaries)


def install_repeat_limiter(window_s: float = 60.0, flush_every_s: float = 5.0) -> list[RepeatLimiter]:
    """Put a :class:`RepeatLimiter` of its own on every handler of the root logger, flushed every
    ``flush_every_s`` by a daemon thread."""
    limiters = []
    for handler in logging.getLogger().handlers:
        limiters.append(RepeatLimiter(handler, window_s))
        handler.addFilter(limiters[-1])

    def flush_forever() -> None:
        while True:
            time.sleep(flush_every_s)
            for limiter in limiters:
                limiter.flush()

    threading.Thread(target=flush_forever, name="log-repeat-limiter", daemon=True).start()
    return limiters
