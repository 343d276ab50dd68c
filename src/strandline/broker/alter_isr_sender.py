"""How a leader's AlterIsr reaches the controller (Kafka's broker-to-controller channel): this
broker's own controller directly, another over the inter-broker connection ``alter-isr``. The
replication package builds the requests and reads the answers
(:class:`~strandline.replication.alter_isr_manager.AlterIsrManager`); this only carries them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from strandline.controller.controller import Controller
from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.protocol import api
from strandline.protocol.api import ApiKey

ALTER_ISR_VERSION = 0       # what Kafka 2.8 brokers send


@dataclass
class AlterIsrSender:
    broker_id: int
    metadata: MetadataCache
    controller: Controller
    outbox: Outbox

    def __call__(self, body: dict[str, Any], on_response: Callable[[Any, int], list[Effect]],
                 now_ms: int) -> list[Effect]:
        if self.controller.is_active:
            proposals = {(t["name"], p["partition_index"]): (p["leader_epoch"], tuple(p["new_isr"]),
                                                             p["current_isr_version"])
                         for t in body["topics"] for p in t["partitions"]}
            return self.controller.alter_isr(body["broker_id"], body["broker_epoch"], proposals, on_response, now_ms)

        def on_frame(frame: bytes | None, when_ms: int) -> list[Effect]:
            answer = None
            if frame is not None:
                try:
                    answer = api.decode_response(ApiKey.ALTER_ISR, ALTER_ISR_VERSION, frame)
                except Exception:       # a bad answer counts as none: the request is sent again
                    answer = None
            return on_response(answer, when_ms)

        client_id = f"strandline-broker-{self.broker_id}"
        return self.outbox.send(
            self.metadata.brokers.get(self.metadata.controller_id), "alter-isr",
            lambda cid: api.encode_request(ApiKey.ALTER_ISR, ALTER_ISR_VERSION, cid, client_id, body),
            on_frame, now_ms)
