"""The shell's clock: the wall-clock time, in milliseconds since the epoch, that each event hands
the broker core."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
