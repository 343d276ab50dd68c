"""The differential runner: each case's requests sent in lockstep to Kafka 3.9 and to Strandline,
the answers decoded, normalized (:mod:`tests.differential.normalize`) and compared.

A case (:class:`Case`) is a sequence of steps (:class:`Step`); each step is one request, its body
a value or a function of the side's context (:class:`Ctx`: names of this run, earlier answers,
the side's controller and coordinators), sent to a broker chosen by a target function of the
context (the leader of a partition, a follower, the group's coordinator, ...). A step whose
``until`` is given is repeated, on each side on its own, until its answer satisfies it (within
:data:`UNTIL_S`): the condition a later step needs (a follower caught up, a reassignment done),
never a sleep. Answers of steps marked ``compare=False`` are kept for later steps but not compared.

A case runs the same on both sides or its difference is kept (:attr:`Case.kept`): the name of the
difference (documented in docs/compatibility.md, "Differential tests", and in
:data:`tests.differential.corpus.KEPT`) and the paths (``fnmatch`` patterns) where the answers
differ; the test then asserts that they differ exactly there.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.differential import wire
from tests.differential.clusters import Closed, Side
from tests.differential.normalize import normalize

UNTIL_S = 30.0
CLOSED = "<connection closed>"
NO_ANSWER = "<no answer expected>"


@dataclass
class Step:
    api: int
    version: int
    body: Any                                   # a body, or a function of the Ctx
    to: Callable[["Ctx"], Any] | None = None    # which broker (a list: each of them); None: broker 1
    label: str | None = None                    # earlier answers are kept under their label
    compare: bool = True
    until: Callable[[Any], bool] | None = None
    acks0: bool = False                         # Produce with acks=0: no answer is due


@dataclass
class Case:
    name: str
    steps: list[Step]
    kept: tuple[str, tuple[str, ...]] | None = None   # (difference, paths that differ)


@dataclass
class Ctx:
    """What a step's body and target see of one side."""

    side: Side
    run: str
    answers: dict[str, Any] = field(default_factory=dict)
    _coordinators: dict[tuple[str, int], int] = field(default_factory=dict)

    def t(self, name: str) -> str:
        """A name of this run (topics, groups, transactional ids): the same on both sides."""
        return f"{name}-{self.run}"

    def controller(self) -> int:
        answer = self.send(3, 1, {"topics": []}, 1)
        return int(answer["controller_id"])

    def coordinator(self, key: str, key_type: int = 0) -> int:
        """The broker coordinating group (0) or transactional id (1) ``key``, asked until known."""
        cached = self._coordinators.get((key, key_type))
        if cached is not None:
            return cached
        deadline = time.monotonic() + UNTIL_S
        while True:
            answer = self.send(10, 1, {"key": key, "key_type": key_type}, 1)
            if answer["error_code"] == 0:
                self._coordinators[(key, key_type)] = int(answer["node_id"])
                return int(answer["node_id"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.side.name}: no coordinator for {key!r} within {UNTIL_S} s: {answer}")
            time.sleep(0.1)

    def send(self, api: int, version: int, body: Any, broker: int, acks0: bool = False) -> Any:
        """One request, its answer as a tree (or :data:`CLOSED`)."""
        conn = self.side.conn(broker)
        cid = conn.next_id()
        frame = wire.encode(api, version, cid, body)
        try:
            answer = conn.exchange(frame, expect_answer=not acks0)
        except Closed:
            return CLOSED
        if answer is None:
            return NO_ANSWER
        got = wire.correlation_id(answer)
        if got != cid:
            raise AssertionError(f"{self.side.name}: correlation id {got} answers request {cid}")
        return wire.decode(api, version, body, answer)


def run_step(ctx: Ctx, step: Step) -> Any:
    broker = step.to(ctx) if step.to else 1
    body = step.body(ctx) if callable(step.body) else step.body
    if isinstance(broker, (list, tuple)):       # every broker named, the answers in a list
        answer = [ctx.send(step.api, step.version, body, b, step.acks0) for b in broker]
        if step.label:
            ctx.answers[step.label] = answer
        return answer
    deadline = time.monotonic() + UNTIL_S
    while True:
        answer = ctx.send(step.api, step.version, body, broker, step.acks0)
        if step.until is None or step.until(answer):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ctx.side.name}: step {step.label or step.api} not satisfied within "
                               f"{UNTIL_S} s; last answer {answer}")
        time.sleep(0.1)
    if step.label:
        ctx.answers[step.label] = answer
    return answer


@dataclass
class Outcome:
    case: Case
    diffs: list[tuple[str, Any, Any]]       # (path, kafka, strandline), normalized
    answers: list[tuple[Step, Any, Any]]    # normalized answers of the compared steps


def run_case(case: Case, kafka: Ctx, strandline: Ctx) -> Outcome:
    diffs: list[tuple[str, Any, Any]] = []
    answers = []
    for i, step in enumerate(case.steps):
        a = run_step(kafka, step)
        b = run_step(strandline, step)
        if not step.compare:
            continue
        na = normalize(step.api, step.version, a, kafka)
        nb = normalize(step.api, step.version, b, strandline)
        answers.append((step, na, nb))
        prefix = f"{i}" if len(case.steps) > 1 else ""
        diffs += compare(na, nb, prefix)
    return Outcome(case, diffs, answers)


def compare(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every path where the two trees differ (a dict's keys, a list's indices)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += compare(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            out += compare(a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>",
                           f"{path}.{i}" if path else str(i))
        return out
    return [] if a == b else [(path or "<answer>", a, b)]


def unexplained(outcome: Outcome) -> tuple[list, list[str]]:
    """(differences no kept pattern covers, the kept patterns when none matched a difference: a
    kept difference that is gone is reported, so that it is taken off the list)."""
    patterns = outcome.case.kept[1] if outcome.case.kept else ()
    loose = [d for d in outcome.diffs if not any(fnmatch.fnmatchcase(d[0], p) for p in patterns)]
    matched = any(fnmatch.fnmatchcase(d[0], p) for p in patterns for d in outcome.diffs)
    return loose, ([] if matched or not patterns else list(patterns))


def describe(outcome: Outcome, limit: int = 12) -> str:
    lines = [f"{outcome.case.name}: {len(outcome.diffs)} difference(s)"]
    for path, a, b in outcome.diffs[:limit]:
        lines.append(f"  {path}: kafka={_short(a)} strandline={_short(b)}")
    if len(outcome.diffs) > limit:
        lines.append(f"  ... {len(outcome.diffs) - limit} more")
    return "\n".join(lines)


def _short(value: Any, n: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."
