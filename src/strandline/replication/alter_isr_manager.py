"""A leader's ISR proposals to the controller (AlterIsr v0, KIP-497; Kafka 2.8's
``DefaultAlterIsrManager``).

With ``inter.broker.protocol.version`` 2.7 or later a leader does not write its partition's state
znode: it proposes the new ISR to the controller, which checks it, writes it and answers with the
state it holds. This manager batches the proposals: at most one per partition waits to be sent
(the partition itself proposes nothing while one is pending), and at most one AlterIsr request is
in flight at a time; what comes in meanwhile goes in the next request, sent as soon as the answer
comes. A request that gets no answer, or a top-level error (NOT_CONTROLLER, STALE_BROKER_EPOCH,
...), is sent again after :data:`ALTER_ISR_RETRY_MS`, with the broker epoch of that moment; its
partitions hear that their proposals are undecided (their leader acknowledges nothing meanwhile). Each
partition's answer goes to its item's ``on_answer``; a proposal its partition no longer waits for
(the controller told the broker a newer state meanwhile) is not sent.

Pure: the request goes out through ``send`` (the broker wires it to its controller, local or
remote), time comes in as ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.coordination.znodes import LeaderAndIsr

Key = tuple[str, int]
#: a partition's answer: the controller's error, or the state it now holds
Answer = "ErrorCode | LeaderAndIsr"

ALTER_ISR_RETRY_MS = 50      # Kafka's back-off before sending again after a top-level error

#: ``send(body, on_response, now_ms)``: the AlterIsr request to the controller; ``on_response(body,
#: when_ms)`` gets the answer's body (a dict or a decoded response, fields as AlterIsr v0's), or
#: None when none came
Send = Callable[[dict[str, Any], Callable[[Any, int], list[Effect]], int], list[Effect]]


@dataclass(eq=False)
class AlterIsrItem:
    """One partition's proposal: ``state`` is (this broker, the leader epoch it leads in, the
    proposed ISR, the partition state's version it was made against)."""

    key: Key
    state: LeaderAndIsr
    #: the controller's answer, or None when a request carrying it was not decided: no answer, or
    #: an error for the whole request (it is sent again)
    on_answer: Callable[["ErrorCode | LeaderAndIsr | None", int], list[Effect]]
    #: whether its partition still waits for it (checked before each send)
    wanted: Callable[[], bool]


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def read_answer(body: Any) -> tuple[ErrorCode, dict[Key, "ErrorCode | LeaderAndIsr"]]:
    """The top-level error of an AlterIsr answer and each partition's answer."""
    top = ErrorCode(int(_field(body, "error_code")))
    partitions: dict[Key, ErrorCode | LeaderAndIsr] = {}
    for topic in _field(body, "topics") or ():
        name = _field(topic, "name")
        for p in _field(topic, "partitions"):
            key = (name, int(_field(p, "partition_index")))
            error = ErrorCode(int(_field(p, "error_code")))
            if error is not ErrorCode.none:
                partitions[key] = error
            else:
                partitions[key] = LeaderAndIsr(int(_field(p, "leader_id")), int(_field(p, "leader_epoch")),
                                               tuple(int(r) for r in _field(p, "isr")), 0,
                                               int(_field(p, "current_isr_version")))
    return top, partitions


class AlterIsrManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], outbox: Outbox) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.outbox = outbox
        #: wired by the broker; until then every request goes unanswered
        self.send: Send = lambda body, on_response, now_ms: on_response(None, now_ms)
        #: the proposals not yet answered, one per partition (the newest)
        self.unsent: dict[Key, AlterIsrItem] = {}
        self.in_flight = False
        self._retry_due: int | None = None
        # counts for the broker's metrics
        self.requests_sent = 0
        self.requests_failed = 0

    def submit(self, item: AlterIsrItem, now_ms: int) -> list[Effect]:
        """Queue ``item`` (it replaces an older proposal of its partition that waits) and send
        now unless a request is in flight or a retry is due."""
        self.unsent[item.key] = item
        return self.maybe_send(now_ms)

    def maybe_send(self, now_ms: int) -> list[Effect]:
        """Send every proposal waiting, in one request, unless one is in flight."""
        if self.in_flight or self._retry_due is not None:
            return []
        for key, item in list(self.unsent.items()):
            if not item.wanted():
                del self.unsent[key]
        if not self.unsent:
            return []
        items = list(self.unsent.values())
        topics: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            s = item.state
            topics.setdefault(item.key[0], []).append({
                "partition_index": item.key[1], "leader_epoch": s.leader_epoch, "new_isr": list(s.isr),
                "current_isr_version": s.zk_version})
        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch(),
                "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]}
        self.in_flight = True
        self.requests_sent += 1
        return self.send(body, lambda answer, when_ms: self._on_response(items, answer, when_ms), now_ms)

    def _on_response(self, items: list[AlterIsrItem], body: Any, now_ms: int) -> list[Effect]:
        top, partitions = (ErrorCode.unknown_server_error, {}) if body is None else read_answer(body)
        effects: list[Effect] = []
        if top is not ErrorCode.none:
            # no answer (the controller may have written them), or the controller did not look at
            # the partitions (NOT_CONTROLLER, STALE_BROKER_EPOCH: the proposer's registration is
            # gone, as after its session expired): undecided, all of them again, later
            self.in_flight = False
            self.requests_failed += 1
            for item in items:
                if self.unsent.get(item.key) is item:
                    effects.extend(item.on_answer(None, now_ms))
            return effects + self._retry_later(now_ms)
        answered = [(item, partitions[item.key]) for item in items if item.key in partitions]
        for item, _ in answered:        # (one left out of the answer is sent again)
            if self.unsent.get(item.key) is item:
                del self.unsent[item.key]
        for item, answer in answered:   # still in flight: a proposal made again waits for the next request
            effects.extend(item.on_answer(answer, now_ms))
        self.in_flight = False
        return effects + self.maybe_send(now_ms)

    def _retry_later(self, now_ms: int) -> list[Effect]:
        due = now_ms + ALTER_ISR_RETRY_MS
        self._retry_due = due

        def again(when_ms: int) -> list[Effect]:
            if self._retry_due == due:
                self._retry_due = None
            return self.maybe_send(when_ms)
        return self.outbox.after(due, again)
