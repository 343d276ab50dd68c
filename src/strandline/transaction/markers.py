"""Sending a decided transaction's commit or abort markers to each partition's leader, again after an
error, until every partition has them (Kafka's TransactionMarkerChannelManager)."""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache
from strandline.protocol import api
from strandline.protocol.api import ApiKey

MARKER_RETRY_MS = 100
#: v2 carries each marker's transaction version (KIP-1228), which a leader checks a transactions
#: v2 marker's bumped epoch against
WRITE_TXN_MARKERS_VERSION = 2


class TransactionMarkers:
    """Has each partition's leader append a transaction's markers; ``done`` once all have."""

    def __init__(self, config: Any, metadata: MetadataCache, outbox: Outbox) -> None:
        self.config = config
        self.metadata = metadata
        self.outbox = outbox

    def send(self, partitions: set[tuple[str, int]], producer_id: int, producer_epoch: int, commit: bool,
             coordinator_epoch: int,
             done: Callable[[int], list[Effect]], current: Callable[[], bool], now_ms: int,
             transaction_version: int = 0) -> list[Effect]:
        """``current()``: whether this coordinator still completes this transaction; once not (it
        lost the partition, or a leader fenced it), the markers are left to the new coordinator.
        ``transaction_version``: the client's (2: the marker's epoch is the bumped one)."""
        left = set(partitions)
        client_id = f"strandline-broker-{self.config.broker_id}"
        fenced = False

        def attempt(when_ms: int) -> list[Effect]:
            if fenced or not current():
                return []
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for name, index in sorted(left):
                topic = self.metadata.topics.get(name)
                if topic is None or index not in topic.assignment:
                    left.discard((name, index))          # deleted meanwhile: nothing to mark
                    continue
                state = topic.states.get(index)
                by_leader.setdefault(state.leader if state else -1, []).append((name, index))
            if not left:
                return done(when_ms)
            effects: list[Effect] = []
            waiting = set(by_leader)

            def sent_to(leader: int) -> Callable[[bytes | None, int], list[Effect]]:
                def on_response(frame: bytes | None, at_ms: int) -> list[Effect]:
                    nonlocal fenced
                    waiting.discard(leader)
                    if frame is not None:       # no answer: those partitions are tried again
                        try:
                            body = api.decode_response(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, frame)
                        except Exception:
                            body = None
                        for t in body.markers[0].topics if body is not None else ():
                            for p in t.partitions:
                                code = ErrorCode(int(p.error_code))
                                # written, or the topic is gone: done; fenced: a newer coordinator or
                                # producer epoch owns it, stop (as Kafka); any other error: again
                                if code is ErrorCode.none or t.name not in self.metadata.topics:
                                    left.discard((t.name, p.partition_index))
                                elif code in (ErrorCode.transaction_coordinator_fenced,
                                              ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
                                    fenced = True
                    if waiting or fenced:
                        return []
                    if not left:
                        return done(at_ms) if current() else []
                    return self.outbox.after(at_ms + MARKER_RETRY_MS, attempt)
                return on_response

            for leader, keys in by_leader.items():
                broker = self.metadata.brokers.get(leader)
                by_topic: dict[str, list[int]] = {}
                for name, index in keys:
                    by_topic.setdefault(name, []).append(index)
                body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                                     "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                                     "transaction_version": transaction_version,
                                     "topics": [{"name": n, "partition_indexes": ix} for n, ix in by_topic.items()]}]}
                effects.extend(self.outbox.send(
                    broker, "txn-markers",
                    _markers_request(client_id, body),
                    sent_to(leader), when_ms))
            return effects

        return attempt(now_ms)


def _markers_request(client_id: str, body: dict[str, Any]) -> Callable[[int], bytes]:
    """The WriteTxnMarkers frame of ``body`` for a correlation id."""
    return lambda correlation_id: api.encode_request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                                     correlation_id, client_id, body)
