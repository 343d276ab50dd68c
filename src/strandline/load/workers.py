"""Running a load generator's worker processes and merging what they report.

Each worker is a separate process (``spawn``: no librdkafka state is inherited) with a client of its
own. It says when it is ready, waits for the common start, sends a :class:`Window` of what it did
every second and, at the end, its latency sample and failures. The parent prints a progress line
every ``progress_s`` and the final line, as Kafka's perf tools do.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Sequence, TextIO

from strandline.load.stats import Window, final_line, rate_line
from strandline.errors import StrandlineError

REPORT_S = 1.0
#: what a worker sends its parent: ("ready", index), ("window", index, Window), ("done", index, latency
#: sample, failures) or ("error", index, message)
Message = tuple[Any, ...]


@dataclass
class Outcome:
    """What all the workers did together."""

    total: Window = field(default_factory=Window)
    seconds: float = 0.0
    samples: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False


class Reporter:
    """A worker's side: windows once a second, then the end."""

    def __init__(self, index: int, queue: Any) -> None:
        self.index, self.queue = index, queue
        self.window = Window()
        self.next = time.monotonic() + REPORT_S

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.flush()
            self.next = now + REPORT_S

    def flush(self) -> None:
        if self.window.records or self.window.failed:
            self.queue.put(("window", self.index, self.window))
            self.window = Window()

    def done(self, samples: list[float], failures: Counter[str]) -> None:
        self.flush()
        self.queue.put(("done", self.index, samples, dict(failures)))


def run_workers(target: Callable[..., None], jobs: list[tuple[Any, ...]], verb: str, progress_s: float = 5.0,
                out: TextIO = sys.stdout, startup_timeout_s: float = 60.0) -> Outcome:
    """Start one process per job (``target(index, queue, go, *job)``), print progress, merge the results."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(i, q, go, *job), daemon=True) for i, job in enumerate(jobs)]
    for p in procs:
        p.start()
    outcome = Outcome()
    try:
        ready = 0
        deadline = time.monotonic() + startup_timeout_s
        while ready < len(procs):
            if _get(q, procs, deadline)[0] == "ready":
                ready += 1
        start = time.monotonic()
        go.set()
        interval, interval_start = Window(), start
        done = 0
        while done < len(procs):
            msg: Message | None
            try:
                msg = q.get(timeout=0.2)
            except queue_module.Empty:
                msg = None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise StrandlineError(f"a {verb} worker stopped with exit code {dead[0].exitcode}") from None
            if msg is not None:
                if msg[0] == "window":
                    outcome.total.add(msg[2])
                    interval.add(msg[2])
                elif msg[0] == "done":
                    done += 1
                    outcome.samples.extend(msg[2])
                    outcome.failures.update(msg[3])
                elif msg[0] == "error":
                    raise StrandlineError(msg[2])
            now = time.monotonic()
            if now - interval_start >= progress_s:
                print(rate_line(verb, interval, now - interval_start), file=out, flush=True)
                interval, interval_start = Window(), now
        outcome.seconds = time.monotonic() - start
    except KeyboardInterrupt:
        outcome.interrupted = True
        outcome.seconds = time.monotonic() - start if go.is_set() else 0.0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
    print(final_line(verb, outcome.total, outcome.seconds, outcome.samples), file=out, flush=True)
    return outcome


def _get(q: Any, procs: Sequence[BaseProcess], deadline: float) -> Message:
    """The next message during start-up; an error a worker reports, or its death, stops everything."""
    while True:
        try:
            msg = q.get(timeout=0.2)
        except queue_module.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise StrandlineError(f"a worker stopped with exit code {dead[0].exitcode} before it was ready") from None
            if time.monotonic() > deadline:
                raise StrandlineError("the workers were not ready in time") from None
            continue
        if msg[0] == "error":
            raise StrandlineError(msg[2])
        ready: Message = msg
        return ready
