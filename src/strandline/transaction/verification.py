"""A partition leader's question to the transaction coordinator before it appends a batch that
would open a producer's transaction (KIP-890 part 1, Kafka's ``AddPartitionsToTxnManager``).

:meth:`TransactionVerifier.verify` sends AddPartitionsToTxn v4 with ``verify_only`` to the leader of
the transactional id's ``__transaction_state`` partition, as this broker knows it, and hands back
the partitions the coordinator did not confirm, each with its error: a late batch of a transaction
already decided (its AddPartitionsToTxn long written, its marker already appended) is then refused
instead of opening a transaction no marker will ever close. The errors, as Kafka's manager gives
them: COORDINATOR_NOT_AVAILABLE when no coordinator is known, NETWORK_EXCEPTION when no answer
came, the answer's top-level error for every partition (CLUSTER_AUTHORIZATION_FAILED as
INVALID_TXN_STATE: a producer is not told of the brokers' permissions), and PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH, which producers know from a Produce answer.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.transaction.records import partition_of
from strandline.transaction.state_topic import TXN_TOPIC

VERIFY_VERSION = 4
#: AddPartitionsToTxn v5 without ``verify_only``: the partitions are added (transactions v2)
ADD_VERSION = 5
Partitions = list[tuple[str, int]]
#: ``done(errors of the partitions not confirmed, now_ms)``
Verified = Callable[[dict[tuple[str, int], ErrorCode], int], list[Effect]]


class TransactionVerifier:
    """Asks the coordinator of a transactional id whether partitions are in its producer's
    ongoing transaction; one request per question, on the broker's ``txn-verify`` channel."""

    def __init__(self, config: Any, metadata: MetadataCache, outbox: Outbox) -> None:
        self.config = config
        self.metadata = metadata
        self.outbox = outbox

    def coordinator(self, transactional_id: str) -> Any | None:
        """The broker leading the id's ``__transaction_state`` partition, as this broker knows it."""
        topic = self.metadata.topics.get(TXN_TOPIC)
        if topic is None:
            return None
        state = topic.states.get(partition_of(transactional_id, self.config["transaction.state.log.num.partitions"]))
        if state is None or state.leader < 0:
            return None
        return self.metadata.brokers.get(state.leader)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Partitions,
               done: Verified, now_ms: int, add: bool = False) -> list[Effect]:
        """``add``: a client of transaction version 2 (Produce v12, TxnOffsetCommit v5) sent no
        AddPartitionsToTxn: the coordinator is asked to add the partitions to the producer's
        transaction (AddPartitionsToTxn v5, KIP-890 part 2) instead of whether they are in it."""
        version = ADD_VERSION if add else VERIFY_VERSION
        broker = self.coordinator(transactional_id)
        if broker is None:
            return done({tp: ErrorCode.coordinator_not_available for tp in partitions}, now_ms)
        by_topic: dict[str, list[int]] = {}
        for name, index in partitions:
            by_topic.setdefault(name, []).append(index)
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": not add,
                                  "topics": [{"name": n, "partitions": ix} for n, ix in by_topic.items()]}]}
        client_id = f"strandline-broker-{self.config.broker_id}"

        def frame_for(correlation_id: int) -> bytes:
            return api.encode_request(ApiKey.ADD_PARTITIONS_TO_TXN, version, correlation_id, client_id, body)

        def answered(frame: bytes | None, at_ms: int) -> list[Effect]:
            return done(unverified(frame, transactional_id, partitions, version), at_ms)

        return self.outbox.send(broker, "txn-verify", frame_for, answered, now_ms)


def unverified(frame: bytes | None, transactional_id: str, partitions: Partitions,
               version: int = VERIFY_VERSION) -> dict[tuple[str, int], ErrorCode]:
    """The partitions an AddPartitionsToTxn v4 (or v5) answer (``frame``; None: no answer) does not
    confirm, with their errors; a partition the answer does not name is confirmed, as in Kafka."""
    if frame is None:
        return {tp: ErrorCode.network_exception for tp in partitions}
    try:
        body = api.decode_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, frame)
    except Exception:       # an answer that does not decode: as none
        return {tp: ErrorCode.network_exception for tp in partitions}
    top = ErrorCode(int(body.error_code))
    if top is not ErrorCode.none:
        error = ErrorCode.invalid_txn_state if top is ErrorCode.cluster_authorization_failed else top
        return {tp: error for tp in partitions}
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted = set(partitions)
    for result in body.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for topic in result.topic_results:
            for p in topic.results_by_partition:
                code = ErrorCode(int(p.partition_error_code))
                if code is ErrorCode.none or (topic.name, p.partition_index) not in wanted:
                    continue
                errors[(topic.name, p.partition_index)] = \
                    ErrorCode.invalid_producer_epoch if code is ErrorCode.producer_fenced else code
    return errors
