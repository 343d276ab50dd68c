"""A small blocking client for Spark tasks: metadata, ListOffsets, Fetch and idempotent Produce,
each sent to the partition's leader and retried after a metadata refresh when the leader moved
(NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) or a broker went away."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, TypeVar

from kio.schema.errors import ErrorCode

from strandline.errors import StrandlineError
from strandline.runtime.client import KafkaConnection

T = TypeVar("T")
#: one record the sink writes: (key, value, headers as (name, value) pairs)
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]

METADATA, LIST_OFFSETS, FETCH, PRODUCE, INIT_PRODUCER_ID = 3, 2, 1, 0, 22
EARLIEST, LATEST = -2, -1
LEADER_MOVED = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition, ErrorCode.request_timed_out,
                ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append}
RETRIES = 40
BACKOFF_S = 0.25


class LeaderMoved(Exception):
    pass


class NotRetriable(StrandlineError):
    pass


def _partition_error(part: Any, refused: str | None = None) -> ErrorCode:
    """The error code of a partition's answer. Raises LeaderMoved when the leader moved and, if
    ``refused`` says what was refused, NotRetriable (``refused: ERROR``) on any other error."""
    error = ErrorCode(int(part.error_code))
    if error in LEADER_MOVED:
        raise LeaderMoved(error.name)
    if refused is not None and error is not ErrorCode.none:
        raise NotRetriable(f"{refused}: {error.name.upper()}")
    return error


class StrandlineClient:
    def __init__(self, bootstrap: str, timeout_s: float = 30.0, isolation: int = 0) -> None:
        """``isolation`` 1 (read_committed): reads stop at the last stable offset (KIP-98)."""
        self.isolation = isolation
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        if not self.bootstrap:
            raise StrandlineError("kafka.bootstrap.servers is empty")
        self.timeout_s = timeout_s
        self.conns: dict[str, KafkaConnection] = {}
        self.brokers: dict[int, str] = {}
        self.leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self.partitions: dict[str, list[int]] = {}

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()

    def __enter__(self) -> "StrandlineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self, address: str) -> KafkaConnection:
        conn = self.conns.get(address)
        if conn is None:
            conn = self.conns[address] = KafkaConnection(address, self.timeout_s, client_id="strandline-spark")
        return conn

    def _request(self, address: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
        try:
            return self._conn(address).request(api_key, version, body)
        except StrandlineError:
            conn = self.conns.pop(address, None)
            if conn is not None:
                conn.close()
            raise

    # -- metadata

    def refresh(self, topics: list[str] | None = None, auto_create: bool = False) -> dict[str, ErrorCode]:
        """Brokers, partitions and leaders of ``topics`` (all when None); each answered topic's error."""
        last: Exception | None = None
        for address in list(self.brokers.values()) + self.bootstrap:
            try:
                resp = self._request(address, METADATA, 9, {
                    "topics": None if topics is None else [{"name": t} for t in topics],
                    "allow_auto_topic_creation": auto_create, "include_topic_authorized_operations": False})
            except StrandlineError as exc:
                last = exc
                continue
            self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
            errors = {}
            for t in resp.topics:
                errors[t.name] = ErrorCode(int(t.error_code))
                if errors[t.name] is not ErrorCode.none:
                    self.partitions.pop(t.name, None)
                    continue
                self.partitions[t.name] = sorted(p.partition_index for p in t.partitions)
                for p in t.partitions:
                    self.leaders[(t.name, p.partition_index)] = (int(p.leader_id), int(p.leader_epoch))
            return errors
        raise StrandlineError(f"no broker of {','.join(self.bootstrap)} answered: {last}")

    def ensure_topic(self, topic: str) -> list[int]:
        """The partitions of ``topic`` once each has a leader. A missing topic is created by the
        brokers as for a producer's Metadata request (when their auto.create.topics.enable is on,
        Kafka's default); they answer LEADER_NOT_AVAILABLE while it is being created."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            error = self.refresh([topic], auto_create=True)[topic]
            if error is ErrorCode.unknown_topic_or_partition:
                raise StrandlineError(f"topic {topic} does not exist and the brokers do not create topics "
                                      f"(auto.create.topics.enable=false): create it first")
            if error not in (ErrorCode.none, ErrorCode.leader_not_available):
                raise StrandlineError(f"topic {topic}: {error.name.upper()}")
            if error is ErrorCode.none and all(self.leaders[(topic, p)][0] in self.brokers
                                               for p in self.partitions[topic]):
                return self.partitions[topic]
            if time.monotonic() >= deadline:
                raise StrandlineError(f"topic {topic} has partitions without a leader after {self.timeout_s:g} s")
            time.sleep(BACKOFF_S)

    def topics_matching(self, pattern: str) -> list[str]:
        self.refresh(None)
        rx = re.compile(pattern)
        return sorted(t for t in self.partitions if rx.fullmatch(t) and not t.startswith("__"))

    def leader_address(self, tp: tuple[str, int]) -> tuple[str, int]:
        if tp not in self.leaders or self.leaders[tp][0] not in self.brokers:
            self.refresh([tp[0]])
        leader, epoch = self.leaders.get(tp, (-1, -1))
        if leader not in self.brokers:
            raise LeaderMoved(f"{tp[0]}-{tp[1]} has no leader")
        return self.brokers[leader], epoch

    def _with_leader(self, tp: tuple[str, int], call: Callable[[str, int], T]) -> T:
        last: Exception | None = None
        for attempt in range(RETRIES):
            try:
                address, epoch = self.leader_address(tp)
                return call(address, epoch)
            except NotRetriable:
                raise
            except (LeaderMoved, StrandlineError) as exc:
                last = exc
                time.sleep(min(BACKOFF_S * (attempt + 1), 2.0))
                try:
                    self.refresh([tp[0]])
                except StrandlineError as refresh_error:
                    last = refresh_error
        raise StrandlineError(f"{tp[0]}-{tp[1]}: {last}")

    # -- offsets and records

    def list_offset(self, tp: tuple[str, int], timestamp: int) -> int:
        """EARLIEST (log start), LATEST (high watermark; read_committed: the last stable offset) or the
        first offset at/after a timestamp (-1: none)."""
        def call(address: str, epoch: int) -> int:
            resp = self._request(address, LIST_OFFSETS, 4, {
                "replica_id": -1, "isolation_level": self.isolation, "topics": [{"name": tp[0], "partitions": [
                    {"partition_index": tp[1], "current_leader_epoch": epoch, "timestamp": timestamp}]}]})
            part = resp.topics[0].partitions[0]
            _partition_error(part, f"ListOffsets of {tp[0]}-{tp[1]}")
            return int(part.offset)
        return self._with_leader(tp, call)

    def fetch(self, tp: tuple[str, int], offset: int, max_bytes: int = 8 << 20
              ) -> tuple[ErrorCode, int, int, bytes, list[tuple[int, int]]]:
        """(error, high watermark, log start offset, records, aborted transactions as (producer id,
        first offset)) of one fetch; OFFSET_OUT_OF_RANGE is returned."""
        def call(address: str, epoch: int) -> tuple[ErrorCode, int, int, bytes, list[tuple[int, int]]]:
            resp = self._request(address, FETCH, 11, {
                "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": max_bytes,
                "isolation_level": self.isolation,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": tp[0], "partitions": [{
                    "partition": tp[1], "current_leader_epoch": epoch, "fetch_offset": offset,
                    "log_start_offset": -1, "partition_max_bytes": max_bytes}]}]})
            part = resp.responses[0].partitions[0]
            error = _partition_error(part)
            aborted = [(int(a.producer_id), int(a.first_offset)) for a in part.aborted_transactions or ()]
            return error, int(part.high_watermark), int(part.log_start_offset), part.records or b"", aborted
        return self._with_leader(tp, call)

    # -- producing

    def init_producer_id(self) -> tuple[int, int]:
        for _attempt in range(RETRIES):
            address = next(iter(self.brokers.values()), self.bootstrap[0])
            try:
                resp = self._request(address, INIT_PRODUCER_ID, 3, {"transactional_id": None, "transaction_timeout": 60000,
                                                                    "producer_id": -1, "producer_epoch": -1})
            except StrandlineError:
                self.refresh([])
                continue
            if ErrorCode(int(resp.error_code)) is ErrorCode.none:
                return int(resp.producer_id), int(resp.producer_epoch)
            time.sleep(BACKOFF_S)
        raise StrandlineError("no producer id from the cluster")

    def produce(self, tp: tuple[str, int], batch: bytes) -> int:
        """acks=all; retried on leader moves (the idempotent producer id makes retries safe)."""
        def call(address: str, epoch: int) -> int:
            resp = self._request(address, PRODUCE, 7, {
                "transactional_id": None, "acks": -1, "timeout": 30000,
                "topic_data": [{"name": tp[0], "partition_data": [{"index": tp[1], "records": batch}]}]})
            part = resp.responses[0].partition_responses[0]
            _partition_error(part, f"producing to {tp[0]}-{tp[1]} failed")
            return int(part.base_offset)
        return self._with_leader(tp, call)


FIND_COORDINATOR, OFFSET_FETCH, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 10, 9, 24, 25, 26, 28
#: a coordinator moving, loading, or finishing the previous transaction: ask again
COORDINATOR_RETRY = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                     ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                     ErrorCode.unstable_offset_commit}


def checked(code: Any, what: str) -> None:
    """Raise LeaderMoved for a coordinator error worth retrying, NotRetriable for any other."""
    error = ErrorCode(int(code))
    if error in COORDINATOR_RETRY:
        raise LeaderMoved(error.name)
    if error is not ErrorCode.none:
        raise NotRetriable(f"{what}: {error.name.upper()}")


def find_coordinator(client: StrandlineClient, key: str, key_type: int) -> str:
    """The address of the coordinator of a group (``key_type`` 0) or a transactional id (1)."""
    for address in list(client.brokers.values()) + client.bootstrap:
        try:
            resp = client._request(address, FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
        except StrandlineError:
            continue
        error = ErrorCode(int(resp.error_code))
        if error is ErrorCode.none:
            return f"{resp.host}:{resp.port}"
        if error not in COORDINATOR_RETRY:
            raise NotRetriable(f"no coordinator for {key}: {error.name.upper()}")
        raise LeaderMoved(error.name)
    raise LeaderMoved("no broker answered FindCoordinator")


def with_coordinator(client: StrandlineClient, key: str, key_type: int, call: Callable[[str], T], what: str) -> T:
    """``call(address)`` on the coordinator of ``key``, found again and retried with a backoff
    while it moves, loads or is busy."""
    last: Exception | None = None
    for attempt in range(RETRIES):
        try:
            return call(find_coordinator(client, key, key_type))
        except NotRetriable:
            raise
        except (LeaderMoved, StrandlineError) as exc:
            last = exc
            time.sleep(min(BACKOFF_S * (attempt + 1), 2.0))
            client.refresh([])
    raise StrandlineError(f"{what}: {last}")


class TransactionalProducer:
    """One transactional producer (KIP-98) for a Spark task of an exactly-once write: its
    ``transactional.id`` fences any earlier attempt of the same task, and the records and a
    progress offset commit together, or not at all."""

    def __init__(self, client: StrandlineClient, transactional_id: str, timeout_ms: int = 60000) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.added: set[tuple[str, int]] = set()
        self.sequences: dict[tuple[str, int], int] = {}
        self.producer_id, self.epoch = self._with_coordinator(self._init)

    def _with_coordinator(self, call: Callable[[str], T], group: str | None = None) -> T:
        """``call`` on this transactional id's coordinator, or on ``group``'s."""
        key, key_type = (self.transactional_id, 1) if group is None else (group, 0)
        return with_coordinator(self.client, key, key_type, call, f"transaction {self.transactional_id}")

    def _init(self, address: str) -> tuple[int, int]:
        resp = self.client._request(address, INIT_PRODUCER_ID, 3, {
            "transactional_id": self.transactional_id, "transaction_timeout": self.timeout_ms,
            "producer_id": -1, "producer_epoch": -1})
        checked(resp.error_code, f"InitProducerId of {self.transactional_id}")
        return int(resp.producer_id), int(resp.producer_epoch)

    def produce(self, tp: tuple[str, int], rows: list[Row], encode: Callable[[list[Row], int, int, int], bytes]) -> None:
        """Add ``tp`` to the transaction (once), then append ``encode(rows, pid, epoch, seq)`` to it."""
        if tp not in self.added:
            def add(address: str) -> None:
                resp = self.client._request(address, ADD_PARTITIONS_TO_TXN, 1, {
                    "v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.epoch,
                    "v3_and_below_topics": [{"name": tp[0], "partitions": [tp[1]]}]})
                for t in resp.results_by_topic_v3_and_below:
                    for p in t.results_by_partition:
                        checked(p.partition_error_code, f"AddPartitionsToTxn {tp[0]}-{tp[1]}")
            self._with_coordinator(add)
            self.added.add(tp)
        seq = self.sequences.get(tp, 0)
        batch = encode(rows, self.producer_id, self.epoch, seq)

        def call(address: str, epoch: int) -> int:
            resp = self.client._request(address, PRODUCE, 7, {
                "transactional_id": self.transactional_id, "acks": -1, "timeout": 30000,
                "topic_data": [{"name": tp[0], "partition_data": [{"index": tp[1], "records": batch}]}]})
            part = resp.responses[0].partition_responses[0]
            _partition_error(part, f"producing to {tp[0]}-{tp[1]} failed")
            return int(part.base_offset)
        self.client._with_leader(tp, call)
        self.sequences[tp] = seq + len(rows)

    def commit_offset(self, group: str, tp: tuple[str, int], offset: int) -> None:
        """Commit ``offset`` of ``group`` for ``tp`` in this transaction (sendOffsetsToTransaction)."""
        def add(address: str) -> None:
            resp = self.client._request(address, ADD_OFFSETS_TO_TXN, 1, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "group_id": group})
            checked(resp.error_code, f"AddOffsetsToTxn {group}")
        self._with_coordinator(add)

        def commit(address: str) -> None:
            resp = self.client._request(address, TXN_OFFSET_COMMIT, 2, {
                "transactional_id": self.transactional_id, "group_id": group, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "topics": [{"name": tp[0], "partitions": [{
                    "partition_index": tp[1], "committed_offset": offset, "committed_leader_epoch": -1,
                    "committed_metadata": None}]}]})
            for t in resp.topics:
                for p in t.partitions:
                    checked(p.error_code, f"TxnOffsetCommit {group}")
        self._with_coordinator(commit, group)

    def end(self, commit: bool) -> None:
        def call(address: str) -> None:
            resp = self.client._request(address, END_TXN, 1, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "committed": commit})
            checked(resp.error_code, f"EndTxn of {self.transactional_id}")
        self._with_coordinator(call)


def committed_offset(client: StrandlineClient, group: str, tp: tuple[str, int]) -> int:
    """``group``'s committed offset of ``tp`` (-1: none), read_committed (KIP-447's require_stable:
    retried while a transaction's offsets for it are undecided)."""

    def call(address: str) -> int:
        resp = client._request(address, OFFSET_FETCH, 7, {"group_id": group, "require_stable": True, "topics": [
            {"name": tp[0], "partition_indexes": [tp[1]]}]})
        checked(resp.error_code, f"OffsetFetch of {group}")
        for t in resp.topics:
            for p in t.partitions:
                checked(p.error_code, f"OffsetFetch of {group}")
                return int(p.committed_offset)
        return -1
    return with_coordinator(client, group, 0, call, f"offsets of {group}")
