"""A broker's controlled shutdown, its own side (SPEC CTL-9; Kafka's KafkaServer.controlledShutdown).

Before it stops, the broker asks the controller to move its leaderships away and take it out of
the ISRs; it retries ``controlled.shutdown.max.retries`` times, ``controlled.shutdown.retry.backoff.ms``
apart, while partitions remain that another replica could take, then stops anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.controller.controller import Controller
from strandline.coordination.metadata import MetadataCache
from strandline.protocol import control
from strandline.core.config import BrokerConfig


@dataclass
class ControlledShutdown:
    config: BrokerConfig
    metadata: MetadataCache
    controller: Controller
    outbox: Outbox
    broker_epoch: Callable[[], int]     # this broker's registration (KIP-380)
    done: bool = False                  # the broker may stop

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def begin(self, now_ms: int) -> list[Effect]:
        if not self.config["controlled.shutdown.enable"]:
            self.done = True
            return []
        return self._attempt(self.config["controlled.shutdown.max.retries"], now_ms)

    def _attempt(self, retries_left: int, now_ms: int) -> list[Effect]:
        def on_answer(answer: dict[str, Any] | None, when_ms: int) -> list[Effect]:
            if answer is not None and answer["error_code"] == ErrorCode.none and not answer["remaining_partitions"]:
                self.done = True
                return [LogLine("info", "Controlled shutdown succeeded")]
            why = "no answer" if answer is None else \
                f"error {answer['error_code']}, {len(answer['remaining_partitions'])} partition(s) remaining"
            if retries_left <= 0:
                self.done = True
                return [LogLine("warning", f"Controlled shutdown failed ({why}); stopping anyway")]
            return [LogLine("info", f"Controlled shutdown not complete ({why}); retrying")] + \
                self.outbox.after(when_ms + self.config["controlled.shutdown.retry.backoff.ms"],
                                  lambda t: self._attempt(retries_left - 1, t))

        if self.controller.is_active:
            return self.controller.on_controlled_shutdown(self.broker_id, self.broker_epoch(),
                                                         lambda a: on_answer(a, now_ms), now_ms)

        def on_response(frame: bytes | None, when_ms: int) -> list[Effect]:
            answer = None
            if frame is not None:
                try:
                    answer = control.decode_response(control.CONTROLLED_SHUTDOWN, frame)
                except Exception:
                    answer = None
            return on_answer(answer, when_ms)

        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch()}
        client_id = f"strandline-broker-{self.broker_id}"
        return self.outbox.send(
            self.metadata.brokers.get(self.metadata.controller_id), "controlled-shutdown",
            lambda cid: control.encode_request(control.CONTROLLED_SHUTDOWN, cid, client_id, body), on_response, now_ms)
