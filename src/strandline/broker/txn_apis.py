"""The transaction APIs on the wire.

- FindCoordinator with key type 1 names the leader of the transactional id's
  ``__transaction_state`` partition (the topic is created on first use: 50 partitions, compacted,
  ``transaction.state.log.replication.factor`` replicas once that many brokers are alive).
- InitProducerId with a ``transactional.id``, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn go to
  :class:`strandline.transaction.coordinator.TransactionCoordinator`. AddPartitionsToTxn v4+ comes
  from other brokers only (CLUSTER_ACTION): a partition leader's ``verify_only`` question before it
  appends a transaction's first batch (KIP-890, :mod:`strandline.transaction.verification`), or,
  v5 without ``verify_only``, its adding the partition for a client of transaction version 2.
- EndTxn v5 with ``transaction.version`` 2 (KIP-890 part 2): the coordinator bumps the producer
  epoch at the commit or abort and answers with the producer id and epoch of the next transaction.
- WriteTxnMarkers: a partition leader appends a coordinator's commit or abort markers.
- :class:`strandline.transaction.markers.TransactionMarkers` sends those markers to each
  partition's leader (Kafka's TransactionMarkerChannelManager).
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.broker.features import FinalizedFeatures
from strandline.broker.auto_topic_creation import AutoTopicCreationManager
from strandline.core.effects import Effect, LogLine
from strandline.core.wire import Handler, duration_ms, response
from strandline.coordination.metadata import MetadataCache
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType
from strandline.transaction.coordinator import TransactionCoordinator

from strandline.transaction.metadata import TransactionState
from strandline.transaction.verification import TransactionVerifier
from strandline.transaction.state_topic import TXN_TOPIC, TransactionStateTopic

#: ``write_marker(topic, index, producer id, producer epoch, commit, coordinator epoch, done(error, now_ms), now_ms)``:
#: write one transaction marker to a partition this broker leads
#: ``write_marker(topic, index, producer_id, producer_epoch, commit, coordinator_epoch, done, now_ms,
#: transaction_version=...)``
WriteMarker = Callable[..., list[Effect]]
from strandline.core.config import BrokerConfig

#: AddPartitionsToTxn v4+ is sent by brokers (KIP-890): many transactions, ``verify_only``
BROKER_ADD_PARTITIONS_VERSION = 4
#: AddPartitionsToTxn v5 without ``verify_only``: a leader adds a partition for a client of
#: transaction version 2 (KIP-890 part 2)
TV2_ADD_PARTITIONS_VERSION = 5
#: EndTxn v5: a client of transaction version 2, whose epoch each commit or abort bumps
TV2_END_TXN_VERSION = 5
#: TxnOffsetCommit v5: a client of transaction version 2, which sends no AddOffsetsToTxn
TV2_TXN_OFFSET_COMMIT_VERSION = 5


class TxnApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, coordinator: TransactionCoordinator,
                 state_topic: TransactionStateTopic, auto_topics: AutoTopicCreationManager,
                 write_markers: WriteMarker, authorizer: AclAuthorizer, features: FinalizedFeatures) -> None:
        self.config = config
        self.features = features
        self.authorizer = authorizer
        self.metadata = metadata
        self.coordinator = coordinator
        self.state_topic = state_topic
        self.auto_topics = auto_topics
        self.write_markers = write_markers
        #: how this broker asks a coordinator to add a partition (the broker wires it in)
        self.verifier: TransactionVerifier | None = None

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions, ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets,
                ApiKey.END_TXN: self._end_txn, ApiKey.WRITE_TXN_MARKERS: self._write_txn_markers,
                ApiKey.LIST_TRANSACTIONS: self._list_transactions,
                ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions}

    def _may_write(self, conn_id: int, transactional_id: str | None) -> bool:
        return self.authorizer.allows(conn_id, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                      transactional_id or "")

    # -- FindCoordinator (key type 1), from the group APIs' handler

    def find_coordinator(self, transactional_id: str, now_ms: int) -> tuple[dict[str, Any], list[Effect]]:
        """The answer for one transactional id, and the effects of creating the topic on first use."""
        answer = {"key": transactional_id, "node_id": -1, "host": "", "port": -1,
                  "error_code": ErrorCode.none, "error_message": None}
        topic = self.metadata.topics.get(TXN_TOPIC)
        if not transactional_id:
            answer["error_code"] = ErrorCode.invalid_request
            return answer, []
        if topic is None:
            answer["error_code"] = ErrorCode.coordinator_not_available
            if self.auto_topics.pending(TXN_TOPIC):
                return answer, []
            return answer, self.auto_topics.create(TXN_TOPIC, _created, now_ms)
        state = topic.states.get(self.coordinator.partition_of(transactional_id))
        node = self.metadata.brokers.get(state.leader) if state else None
        if node is None:
            answer["error_code"] = ErrorCode.coordinator_not_available
        else:
            answer.update(node_id=node.id, host=node.host, port=node.port)
        return answer, []

    # -- InitProducerId with a transactional id, from the router's handler

    def init_producer_id(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def respond(error: ErrorCode, producer_id: int, epoch: int) -> list[Effect]:
            error = fenced_as(error, header.api_version, 4)
            return [response(conn_id, header, {"throttle_time": 0, "error_code": error, "producer_id": producer_id,
                                               "producer_epoch": epoch})]

        expected = (getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
        return self.coordinator.init_producer_id(request.transactional_id, duration_ms(request.transaction_timeout),
                                                 respond, now_ms, expected)

    # -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn

    def _add_partitions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        if header.api_version >= BROKER_ADD_PARTITIONS_VERSION:
            return self._add_partitions_for_brokers(conn_id, header, request, now_ms)
        wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        transactional_id = request.v3_and_below_transactional_id
        may_write = self._may_write(conn_id, transactional_id)
        denied = {(n, p) for n, p in wanted if not self.authorizer.allows(conn_id, AclOperation.WRITE,
                                                                         ResourceType.TOPIC, n)}
        unknown = {(n, p) for n, p in wanted if (n, p) not in denied and
                   (n not in self.metadata.topics or p not in self.metadata.topics[n].assignment)}

        def respond(error: ErrorCode) -> list[Effect]:
            error = fenced_as(error, header.api_version, 2)
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, index in wanted:
                code = error
                if not may_write:
                    code = ErrorCode.transactional_id_authorization_failed
                elif denied or unknown:       # as Kafka: those fail, the others are not attempted
                    code = ErrorCode.topic_authorization_failed if (name, index) in denied else \
                        ErrorCode.unknown_topic_or_partition if (name, index) in unknown \
                        else ErrorCode.operation_not_attempted
                by_topic.setdefault(name, []).append({"partition_index": index, "partition_error_code": code})
            return [response(conn_id, header, {"throttle_time": 0, "results_by_topic_v3_and_below": [
                {"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]})]

        if unknown or denied or not may_write:
            return respond(ErrorCode.none)
        return self.coordinator.add_partitions(transactional_id,
                                               request.v3_and_below_producer_id,
                                               request.v3_and_below_producer_epoch, set(wanted), respond, now_ms)

    def _add_partitions_for_brokers(self, conn_id: int, header: RequestHeader, request: Any,
                                    now_ms: int) -> list[Effect]:
        """AddPartitionsToTxn v4 (Kafka 3.6+, KIP-890): several transactions, each answered
        alone; ``verify_only`` asks whether the partitions are in the transaction, without adding
        them. Brokers send it, so it needs CLUSTER_ACTION (CLUSTER_AUTHORIZATION_FAILED for the
        whole request otherwise) and no check of the transactional id or topics, as Kafka's."""
        if not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            return [response(conn_id, header, {"throttle_time": 0,
                                               "error_code": ErrorCode.cluster_authorization_failed,
                                               "results_by_transaction": []})]
        transactions = list(request.transactions)
        answers: list[dict[str, Any] | None] = [None] * len(transactions)
        pending = len(transactions)

        def answered(i: int, transactional_id: str, wanted: list[tuple[str, int]],
                     errors: dict[tuple[str, int], ErrorCode]) -> list[Effect]:
            nonlocal pending
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, index in wanted:
                by_topic.setdefault(name, []).append({"partition_index": index,
                                                      "partition_error_code": errors[(name, index)]})
            answers[i] = {"transactional_id": transactional_id, "topic_results": [
                {"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]}
            pending -= 1
            if pending:
                return []
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                               "results_by_transaction": answers})]

        if not transactions:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                               "results_by_transaction": []})]
        effects: list[Effect] = []
        for i, txn in enumerate(transactions):
            wanted = list(dict.fromkeys((t.name, p) for t in txn.topics for p in t.partitions))
            unknown = {(n, p) for n, p in wanted
                       if n not in self.metadata.topics or p not in self.metadata.topics[n].assignment}
            if unknown:                 # as Kafka: those fail, the others are not attempted
                effects.extend(answered(i, txn.transactional_id, wanted, {
                    tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                    for tp in wanted}))
            elif txn.verify_only:
                effects.extend(answered(i, txn.transactional_id, wanted, self.coordinator.verify_partitions(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, set(wanted))))
            else:
                def added(error: ErrorCode, i: int = i, txn: Any = txn, wanted: list[tuple[str, int]] = wanted
                          ) -> list[Effect]:
                    return answered(i, txn.transactional_id, wanted, {tp: error for tp in wanted})
                effects.extend(self.coordinator.add_partitions(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, set(wanted), added, now_ms,
                    tv2=header.api_version >= TV2_ADD_PARTITIONS_VERSION))
        return effects

    def _add_offsets(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        from strandline.group.offsets_topic import OFFSETS_TOPIC
        from strandline.group.records import partition_for

        respond = _error_answer(conn_id, header)
        if not self._may_write(conn_id, request.transactional_id):
            return respond(ErrorCode.transactional_id_authorization_failed)
        if not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return respond(ErrorCode.group_authorization_failed)
        offsets = (OFFSETS_TOPIC, partition_for(request.group_id, self.config["offsets.topic.num.partitions"]))
        return self.coordinator.add_partitions(request.transactional_id, request.producer_id,
                                               request.producer_epoch, {offsets}, respond, now_ms)

    def _end_txn(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        respond = _error_answer(conn_id, header)
        if not self._may_write(conn_id, request.transactional_id):
            return respond(ErrorCode.transactional_id_authorization_failed)
        if header.api_version >= TV2_END_TXN_VERSION and self.features.transaction_version >= 2:
            def answer(error: ErrorCode, producer_id: int, producer_epoch: int) -> list[Effect]:
                return [response(conn_id, header, {"throttle_time": 0, "error_code": error,
                                                   "producer_id": producer_id, "producer_epoch": producer_epoch})]
            return self.coordinator.end_transaction_v2(request.transactional_id, request.producer_id,
                                                       request.producer_epoch, bool(request.committed), answer, now_ms)
        return self.coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                                bool(request.committed), respond, now_ms)

    # -- TxnOffsetCommit v5 (transactions v2), from the group APIs' handler

    def add_offsets_implicitly(self, version: int) -> bool:
        """Whether a TxnOffsetCommit of ``version`` adds its group's ``__consumer_offsets``
        partition to the transaction itself (v5 under ``transaction.version`` 2, KIP-890 part 2:
        its client sent no AddOffsetsToTxn)."""
        return version >= TV2_TXN_OFFSET_COMMIT_VERSION and self.features.transaction_version >= 2 and \
            self.verifier is not None

    def add_offsets_partition(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                              done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        """Have the coordinator add the group's ``__consumer_offsets`` partition to the producer's
        transaction (AddPartitionsToTxn v5), then ``done(error, now_ms)``: NONE once added; what a
        TxnOffsetCommit v5 answers otherwise (the coordinator unreachable or busy,
        COORDINATOR_NOT_AVAILABLE, which the client retries; TRANSACTION_ABORTABLE; a fenced epoch
        INVALID_PRODUCER_EPOCH)."""
        from strandline.group.offsets_topic import OFFSETS_TOPIC
        from strandline.group.records import partition_for

        assert self.verifier is not None
        key = (OFFSETS_TOPIC, partition_for(group_id, self.config["offsets.topic.num.partitions"]))

        def added(errors: dict[tuple[str, int], ErrorCode], when_ms: int) -> list[Effect]:
            error = errors.get(key, ErrorCode.none)
            if error is ErrorCode.invalid_txn_state:
                error = ErrorCode.transaction_abortable
            elif error in (ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.not_coordinator,
                           ErrorCode.coordinator_load_in_progress):
                error = ErrorCode.coordinator_not_available
            return done(error, when_ms)

        return self.verifier.verify(transactional_id, producer_id, producer_epoch, [key], added, now_ms, add=True)

    # -- ListTransactions, DescribeTransactions (KIP-664: what kafka-transactions shows)

    def _list_transactions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """The transactions this broker coordinates, filtered by state names and producer ids."""
        names = {s.kafka_name: s for s in TransactionState}
        wanted_states = set(request.state_filters or ())
        unknown = sorted(s for s in wanted_states if s not in names)
        producers = set(request.producer_id_filters or ())
        states = []
        for m in sorted(self.coordinator.transactions.values(), key=lambda m: m.transactional_id):
            if wanted_states and m.state.kafka_name not in wanted_states:
                continue
            if producers and m.producer_id not in producers:
                continue
            if not self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                          m.transactional_id):
                continue
            states.append({"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                           "transaction_state": m.state.kafka_name})
        return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                           "unknown_state_filters": unknown, "transaction_states": states})]

    def _describe_transactions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        states = []
        for transactional_id in request.transactional_ids:
            entry = {"error_code": ErrorCode.none, "transactional_id": transactional_id, "transaction_state": "",
                     "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                     "producer_epoch": -1, "topics": []}
            states.append(entry)
            m = self.coordinator.describe(transactional_id)
            if not self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                          transactional_id):
                entry["error_code"] = ErrorCode.transactional_id_authorization_failed
            elif self.coordinator.coordinator_epoch(transactional_id) is None:
                entry["error_code"] = ErrorCode.not_coordinator
            elif m is None:
                entry["error_code"] = ErrorCode.transactional_id_not_found
            else:
                by_topic: dict[str, list[int]] = {}
                for name, index in sorted(m.partitions):
                    by_topic.setdefault(name, []).append(index)
                entry.update(transaction_state=m.state.kafka_name, transaction_timeout=m.timeout_ms,
                             transaction_start_time=m.start_ms, producer_id=m.producer_id,
                             producer_epoch=m.producer_epoch,
                             topics=[{"topic": n, "partitions": ix} for n, ix in by_topic.items()])
        return [response(conn_id, header, {"throttle_time": 0, "transaction_states": states})]

    # -- WriteTxnMarkers (from a coordinator, to this partition leader)

    def _write_txn_markers(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        results: list[dict[str, Any]] = []
        waiting = []
        for marker in request.markers:
            topics = []
            for t in marker.topics:
                parts = []
                for index in t.partition_indexes:
                    entry = {"partition_index": index, "error_code": ErrorCode.none}
                    parts.append(entry)
                    waiting.append((marker, t.name, index, entry))
                topics.append({"name": t.name, "partitions": parts})
            results.append({"producer_id": marker.producer_id, "topics": topics})
        pending = len(waiting)

        def respond() -> list[Effect]:
            return [response(conn_id, header, {"markers": results})]

        if not waiting:
            return respond()
        if not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            for *_, entry in waiting:
                entry["error_code"] = ErrorCode.cluster_authorization_failed
            return respond()
        effects: list[Effect] = []
        for marker, name, index, entry in waiting:
            def done(error: ErrorCode, when_ms: int, entry: dict[str, Any] = entry) -> list[Effect]:
                nonlocal pending
                entry["error_code"] = error
                pending -= 1
                return respond() if pending == 0 else []
            effects.extend(self.write_markers(name, index, marker.producer_id, marker.producer_epoch,
                                              bool(marker.transaction_result), marker.coordinator_epoch, done,
                                              now_ms, transaction_version=getattr(marker, "transaction_version", 0)))
        return effects


def fenced_as(error: ErrorCode, version: int, since: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) as clients of versions before ``since`` know it: INVALID_PRODUCER_EPOCH."""
    return ErrorCode.invalid_producer_epoch if error is ErrorCode.producer_fenced and version < since else error


def _error_answer(conn_id: int, header: RequestHeader) -> Callable[[ErrorCode], list[Effect]]:
    """The answer of AddOffsetsToTxn and EndTxn: an error code alone."""
    def respond(error: ErrorCode) -> list[Effect]:
        return [response(conn_id, header, {"throttle_time": 0,
                                           "error_code": fenced_as(error, header.api_version, 2)})]
    return respond


def _created(error: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
    """Another broker creating it first is as good as done; too few brokers alive, the creation
    manager said so."""
    if error in (ErrorCode.none, ErrorCode.topic_already_exists, ErrorCode.invalid_replication_factor):
        return []
    return [LogLine("warning", f"Creating {TXN_TOPIC} failed: {error.name} {message or ''}")]
