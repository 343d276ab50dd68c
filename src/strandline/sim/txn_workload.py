"""Transactional clients for the explorer (KIP-98), driven as Kafka's producer and a read_committed
consumer drive them, with every request through the simulated network.

A :class:`TxnProducer` has one ``transactional.id``. It finds its coordinator (FindCoordinator, key
type 1), gets a producer id and epoch (InitProducerId), then runs transactions one after another:
AddPartitionsToTxn (all the transaction's partitions at once, or in two rounds), transactional
batches (idempotent sequence numbers per partition and epoch, the transactional bit set), one at a
time, each only once its partition was added, then EndTxn, commit or abort as chosen at random. Its
errors are handled as the Java client handles them:

- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost answer: find the coordinator again, retry;
- COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS: retry after a short backoff;
- a batch whose delivery times out, OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_TXN_STATE
  (the leader's verification, KIP-890, found the partition in no ongoing transaction): an abortable
  error: the transaction is aborted, then the epoch bumped (InitProducerId with the producer's own id
  and epoch, KIP-360);
- PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING: fatal for the producer
  instance: the application starts a new one (InitProducerId without an id), which fences the old
  epoch and has the coordinator abort whatever it left open;
- an EndTxn that gets no definite answer within ``END_TIMEOUT_MS``: the application gives up and
  starts a new producer instance; the transaction's outcome is unknown.

Now and then the application itself restarts (:meth:`TxnProducer.restart`): its requests in flight
still arrive (a zombie), and its answers are ignored.

The :class:`TxnHistory` records each transaction: the records it sent to each partition, in order,
and whether its commit was acknowledged (``committed``), it was aborted or never asked to commit
(``aborted``), or a commit was asked for and might have been applied (``unknown``).

A :class:`ReadCommittedConsumer` reads both topics with ``isolation_level=1`` from the leaders and
drops aborted transactions as a client does (the Fetch response's ``aborted_transactions`` and the
abort markers); :mod:`strandline.sim.txn_checker` judges what it sees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.group.records import build_batch
from strandline.protocol.api import ApiKey
from strandline.protocol.markers import ABORT_MARKER, marker_type
from strandline.protocol.records import iter_batches, iter_records
from strandline.sim.cluster import SimCluster
from strandline.sim.workload import _RETRIABLE, RETRY_BACKOFF_MS, ReadReplicas, _Client

TXN_TIMEOUT_MS = 10000          # transaction.timeout.ms of the producers
DELIVERY_TIMEOUT_MS = 8000      # a batch (or AddPartitionsToTxn) retried this long, then abortable
END_TIMEOUT_MS = 15000          # EndTxn retried this long, then the application gives up
TXN_BACKOFF_MS = 20             # Kafka's short retry of CONCURRENT_TRANSACTIONS
PRODUCE_VERSION = 8
TV2_VERSIONS = {ApiKey.PRODUCE: 12, ApiKey.END_TXN: 5}     # transactions v2 (KIP-890 part 2)
FETCH_VERSION = 11

TP = tuple[str, int]

_FIND_AGAIN = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available}
_RETRY = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress}
_FENCED = {ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_id_mapping}
# EndTxn answers that say the request changed nothing (the coordinator refused it before writing);
# any other error, or no answer, may follow a PrepareCommit that was written
_NOT_APPLIED = _FENCED | _RETRY | {ErrorCode.invalid_txn_state, ErrorCode.invalid_request,
                                   ErrorCode.transactional_id_authorization_failed}
# INVALID_TXN_STATE: the leader's verification (KIP-890) found the partition in no ongoing
# transaction of this producer (a late batch, its transaction decided): the transaction is aborted
_ABORTABLE = {ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id, ErrorCode.invalid_txn_state,
              ErrorCode.transaction_abortable}


@dataclass
class Txn:
    """One transaction as its producer saw it."""

    transactional_id: str
    number: int
    producer_id: int
    producer_epoch: int
    commit: bool                                  # what the application means to do
    started_ms: int
    writes: dict[TP, list[bytes]] = field(default_factory=dict)   # records sent (at least once), in order
    commit_sent: bool = False                     # an EndTxn(commit) left the client
    commit_maybe: bool = False                    # one may have been applied
    outcome: str = "open"                         # committed | aborted | unknown
    ended_ms: int = -1
    note: str = ""

    def decide(self, now_ms: int, note: str = "") -> None:
        """The producer is done with the transaction without a definite answer to a commit."""
        if self.outcome == "open":
            self.outcome = "unknown" if self.commit_maybe else "aborted"
            self.ended_ms = now_ms
            self.note = note

    def describe(self) -> str:
        parts = ", ".join(f"{t}-{p}: {len(v)}" for (t, p), v in sorted(self.writes.items()))
        return (f"{self.transactional_id} #{self.number} (pid {self.producer_id} epoch {self.producer_epoch}, "
                f"{self.outcome}{', ' + self.note if self.note else ''}; {parts})")


@dataclass
class TxnHistory:
    txns: list[Txn] = field(default_factory=list)
    by_value: dict[bytes, Txn] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)    # answers no Kafka client expects

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.txns:
            out[t.outcome] = out.get(t.outcome, 0) + 1
        return out


class _MultiTopicClient(_Client):
    """Metadata of several topics: leaders by (topic, partition)."""

    def __init__(self, sim: SimCluster, name: str, topics: dict[str, int], rng: random.Random) -> None:
        super().__init__(sim, name, "", 0, rng)
        self.topics = topics
        self.tp_leaders: dict[TP, int] = {}

    def refresh_metadata(self, then: Callable[[], None]) -> None:
        wait = self.refreshed_ms + RETRY_BACKOFF_MS - self.sim.now
        if wait > 0:
            self.later(wait, lambda: self.refresh_metadata(then))
            return
        self.refreshed_ms = self.sim.now
        broker_id = self.rng.choice(sorted(self.sim.brokers))
        body = {"topics": [{"name": t} for t in sorted(self.topics)], "allow_auto_topic_creation": False}

        def on_answer(resp: Any) -> None:
            if resp is not None:
                for topic in resp.topics:
                    if topic.name in self.topics and topic.error_code == ErrorCode.none:
                        for p in topic.partitions:
                            if p.error_code == ErrorCode.none and p.leader_id >= 0:
                                self.tp_leaders[(topic.name, p.partition_index)] = p.leader_id
                            else:
                                self.tp_leaders.pop((topic.name, p.partition_index), None)
            self.later(0 if resp is not None else RETRY_BACKOFF_MS, then)
        self.send(broker_id, ApiKey.METADATA, 9, body, on_answer)


class TxnProducer(_MultiTopicClient):
    def __init__(self, sim: SimCluster, history: TxnHistory, name: str, topics: dict[str, int],
                 rng: random.Random, *, think_ms: tuple[int, int] = (10, 200), commit_ratio: float = 0.7,
                 restart_chance: float = 0.02, note: Callable[[str], None] | None = None,
                 tv2: bool = False) -> None:
        super().__init__(sim, name, topics, rng)
        # transactions v2, as Kafka's 4.x client with transaction.version 2: no AddPartitionsToTxn
        # (Produce v12 has the leader add each partition), EndTxn v5, whose answer gives the
        # bumped epoch the next transaction uses
        self.tv2 = tv2
        self.history = history
        self.transactional_id = f"tx-{name}"
        self.think_ms = think_ms
        self.commit_ratio = commit_ratio
        self.restart_chance = restart_chance
        self.note = note or (lambda line: None)
        self.life = 0                 # the application's incarnation: answers to an earlier one are ignored
        self.coordinator: int | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.bump = False             # the next InitProducerId bumps the epoch of this id (KIP-360)
        self.sequences: dict[TP, int] = {}
        self.txn: Txn | None = None
        self.rounds: list[tuple[list[TP], list[tuple[TP, list[bytes]]]]] = []
        self.phase = "init"           # init | add | produce | end
        self.batch: tuple[TP, bytes, list[bytes], int] | None = None   # in flight: partition, bytes, values, first try
        self.phase_started_ms = 0
        self.counter = 0
        self.stopping = False

    # -- plumbing

    def send(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
             on_answer: Callable[[Any], None], expect_answer: bool = True) -> None:
        """Each life of the application has connections of its own; answers to an earlier life are dropped."""
        life = self.life
        name, self.name = self.name, f"{self.name}.{life}"
        try:
            super().send(broker_id, api_key, version, body,
                         lambda resp: None if self.life != life or self.stopped else on_answer(resp), expect_answer)
        finally:
            self.name = name

    def later(self, delay_ms: int, action: Callable[[], None]) -> None:
        life = self.life
        self.sim.schedule_in(delay_ms, lambda: None if self.stopped or self.life != life else action())

    def start(self) -> None:
        self.later(self.rng.randint(0, self.think_ms[1]), self.step)

    def stop(self) -> None:
        """Begin no new transaction; the one open is finished first."""
        self.stopping = True

    @property
    def idle(self) -> bool:
        return self.txn is None and not self.busy

    def resume(self) -> None:
        self.busy = False
        self.step()

    def _coordinator(self) -> int:
        """The transaction coordinator: :meth:`step` finds it before any request that goes to it."""
        assert self.coordinator is not None
        return self.coordinator

    def retry_in(self, delay_ms: int) -> None:
        self.busy = False
        self.later(delay_ms, self.step)

    def on_coordinator_error(self, error: ErrorCode, api: str, what: str, *, restart_otherwise: bool = False) -> None:
        """What a client does with a coordinator's error: find it again, retry later, start a new
        producer instance when fenced; anything else is recorded (and retried, or restarts)."""
        if error in _FIND_AGAIN or error is ErrorCode.network_exception:
            self.coordinator = None
            self.retry_in(RETRY_BACKOFF_MS)
        elif error in _RETRY:
            self.retry_in(TXN_BACKOFF_MS)
        elif error in _FENCED:
            self.restart(f"{api}: {error.name}")
        else:
            self.history.errors.append(f"{what} answered {error.name}")
            if restart_otherwise:
                self.restart(f"{api}: {error.name}")
            else:
                self.retry_in(RETRY_BACKOFF_MS)

    # -- the state machine

    def step(self) -> None:
        if self.busy:
            return
        if self.txn is None and self.stopping:
            return
        if self.coordinator is None:
            self.find_transaction_coordinator()
        elif self.producer_id < 0 or self.bump:
            self.init_producer_id()
        elif self.txn is None:
            self.begin()
        elif self.phase == "add":
            self.add_partitions()
        elif self.phase == "produce":
            self.produce()
        else:
            self.end_txn()

    def restart(self, why: str) -> None:
        """The application starts a new producer instance with the same transactional id."""
        if self.txn is not None:
            self.txn.decide(self.sim.now, why)
        self.note(f"{self.transactional_id}: new producer instance ({why})")
        self.life += 1
        self.busy = False
        self.txn = None
        self.batch = None
        self.coordinator = None
        self.producer_id = self.producer_epoch = -1
        self.bump = False
        self.sequences.clear()
        self.later(RETRY_BACKOFF_MS, self.step)

    def find_transaction_coordinator(self) -> None:
        self.busy = True
        self.find_coordinator(self.transactional_id, 1, self.on_coordinator)

    def on_coordinator(self, coordinator: int | None) -> None:
        if coordinator is not None:
            self.coordinator = coordinator
        self.retry_in(0 if coordinator is not None else RETRY_BACKOFF_MS)

    def init_producer_id(self) -> None:
        self.busy = True
        expected = (self.producer_id, self.producer_epoch) if self.bump else (-1, -1)
        body = {"transactional_id": self.transactional_id, "transaction_timeout": TXN_TIMEOUT_MS,
                "producer_id": expected[0], "producer_epoch": expected[1]}

        def on_answer(resp: Any) -> None:
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            self.note(f"{self.transactional_id}: InitProducerId{expected} at broker {self.coordinator}: "
                      f"{error.name}" + (f" (pid {resp.producer_id} epoch {resp.producer_epoch})" if resp else ""))
            if error is ErrorCode.none:
                self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
                self.bump = False
                self.sequences.clear()
                self.retry_in(0)
            else:
                self.on_coordinator_error(error, "InitProducerId", f"{self.transactional_id}: InitProducerId")
        self.send(self._coordinator(), ApiKey.INIT_PRODUCER_ID, 3, body, on_answer)

    def begin(self) -> None:
        """A new transaction: a few partitions of the topics, one or two batches each."""
        rng = self.rng
        if self.restart_chance and rng.random() < self.restart_chance:
            self.restart("the application restarts between transactions")
            return
        everything = [(t, p) for t in sorted(self.topics) for p in range(self.topics[t])]
        parts = rng.sample(everything, rng.randint(1, min(4, len(everything))))
        self.counter += 1
        txn = Txn(self.transactional_id, self.counter, self.producer_id, self.producer_epoch,
                  rng.random() < self.commit_ratio, self.sim.now)
        self.history.txns.append(txn)
        batches: list[tuple[TP, list[bytes]]] = []
        for tp in parts:
            for b in range(rng.randint(1, 2)):
                values = [f"x{self.name}.{self.counter}.{tp[0][0]}{tp[1]}.{b}.{i}".encode()
                          for i in range(rng.randint(1, 3))]
                batches.append((tp, values))
        rng.shuffle(batches)
        # the order within a partition is the order of its batches here
        if len(parts) > 1 and rng.random() < 0.3:
            first = set(parts[:len(parts) // 2])
            self.rounds = [(sorted(first), [b for b in batches if b[0] in first]),
                           (sorted(set(parts) - first), [b for b in batches if b[0] not in first])]
        else:
            self.rounds = [(sorted(parts), batches)]
        self.txn = txn
        self.note(f"{self.transactional_id} #{txn.number}: begins (pid {txn.producer_id} epoch {txn.producer_epoch}, "
                  f"{'commit' if txn.commit else 'abort'}) on {', '.join(f'{t}-{p}' for t, p in sorted(parts))}")
        self.phase = "produce" if self.tv2 else "add"
        self.phase_started_ms = self.sim.now
        self.step()

    def abortable(self, why: str) -> None:
        """An abortable error: abort the transaction, then bump the epoch (KIP-360)."""
        assert self.txn is not None
        self.note(f"{self.transactional_id} #{self.txn.number}: abortable error ({why}), aborting")
        self.txn.commit = False
        self.txn.note = why
        self.bump = not self.tv2      # with transactions v2 the abort itself bumps the epoch
        self.batch = None
        self.phase = "end"
        self.phase_started_ms = self.sim.now
        self.retry_in(0)

    def add_partitions(self) -> None:
        if self.sim.now - self.phase_started_ms > DELIVERY_TIMEOUT_MS:
            self.abortable("AddPartitionsToTxn timed out")
            return
        self.busy = True
        parts = self.rounds[0][0]
        by_topic: dict[str, list[int]] = {}
        for t, p in parts:
            by_topic.setdefault(t, []).append(p)
        body = {"v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())]}

        def on_answer(resp: Any) -> None:
            if resp is None:
                self.coordinator = None
                self.retry_in(RETRY_BACKOFF_MS)
                return
            codes = [ErrorCode(int(p.partition_error_code)) for t in resp.results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            error = next((c for c in codes if c is not ErrorCode.none), ErrorCode.none)
            if error is ErrorCode.none:
                self.phase = "produce"
                self.phase_started_ms = self.sim.now
                self.retry_in(0)
            else:
                self.on_coordinator_error(error, "AddPartitionsToTxn", f"{self.transactional_id}: AddPartitionsToTxn")
        self.send(self._coordinator(), ApiKey.ADD_PARTITIONS_TO_TXN, 3, body, on_answer)

    def produce(self) -> None:
        txn = self.txn
        assert txn is not None
        _, batches = self.rounds[0]
        if self.batch is None:
            if not batches:
                self.rounds.pop(0)
                if self.rounds:
                    self.phase = "produce" if self.tv2 else "add"
                    self.phase_started_ms = self.sim.now
                else:
                    self.phase = "end"
                    self.phase_started_ms = self.sim.now
                    if self.restart_chance and self.rng.random() < self.restart_chance:
                        self.restart("the application restarts before ending the transaction")
                        return
                self.step()
                return
            tp, values = batches[0]
            data = bytes(build_batch([(b"", v) for v in values], self.sim.now, self.producer_id, self.producer_epoch,
                                     self.sequences.get(tp, 0), transactional=True))
            self.batch = (tp, data, values, self.sim.now)
            txn.writes.setdefault(tp, []).extend(values)
            for v in values:
                self.history.by_value[v] = txn
        tp, data, values, first_ms = self.batch
        if self.sim.now - first_ms > DELIVERY_TIMEOUT_MS:
            self.abortable(f"a batch to {tp[0]}-{tp[1]} timed out")
            return
        leader = self.tp_leaders.get(tp)
        self.busy = True
        if leader is None:
            self.refresh_metadata(self.resume)
            return
        body = {"transactional_id": self.transactional_id, "acks": -1, "timeout": 3000,
                "topic_data": [{"name": tp[0], "partition_data": [{"index": tp[1], "records": data}]}]}

        def on_answer(resp: Any) -> None:
            if resp is None:
                self.tp_leaders.pop(tp, None)
                self.retry_in(RETRY_BACKOFF_MS)
                return
            error = ErrorCode(int(resp.responses[0].partition_responses[0].error_code))
            if error in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                self.sequences[tp] = self.sequences.get(tp, 0) + len(values)
                self.batch = None
                self.rounds[0][1].pop(0)
                self.retry_in(0)
            elif error in _RETRIABLE:
                self.tp_leaders.pop(tp, None)
                self.retry_in(RETRY_BACKOFF_MS)
            elif error is ErrorCode.concurrent_transactions:      # v12: the coordinator busy, retried
                self.retry_in(TXN_BACKOFF_MS)
            elif error in _ABORTABLE:
                self.abortable(f"Produce to {tp[0]}-{tp[1]}: {error.name}")
            elif error in _FENCED:
                self.restart(f"Produce: {error.name}")
            else:
                self.history.errors.append(f"{self.transactional_id}: Produce to {tp[0]}-{tp[1]} answered {error.name}")
                self.abortable(f"Produce: {error.name}")
        self.send(leader, ApiKey.PRODUCE, TV2_VERSIONS[ApiKey.PRODUCE] if self.tv2 else PRODUCE_VERSION, body,
                  on_answer)

    def end_txn(self) -> None:
        txn = self.txn
        assert txn is not None
        if self.sim.now - self.phase_started_ms > END_TIMEOUT_MS:
            self.restart(f"EndTxn({'commit' if txn.commit else 'abort'}) without a definite answer")
            return
        self.busy = True
        commit = txn.commit
        if commit:
            txn.commit_sent = True
        body = {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "committed": commit}

        def on_answer(resp: Any) -> None:
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if commit and error is not ErrorCode.none and error not in _NOT_APPLIED:
                txn.commit_maybe = True
            self.note(f"{self.transactional_id} #{txn.number}: EndTxn({'commit' if commit else 'abort'}) at broker "
                      f"{self.coordinator}: {error.name}")
            if error is ErrorCode.none:
                txn.outcome = "committed" if commit else "aborted"
                txn.ended_ms = self.sim.now
                self.txn = None
                if self.tv2:                # the next transaction's producer id and epoch
                    self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
                    self.sequences.clear()
                self.retry_in(self.rng.randint(*self.think_ms))
            else:
                self.on_coordinator_error(error, "EndTxn", f"{self.transactional_id} #{txn.number}: EndTxn("
                                                 f"{'commit' if commit else 'abort'})", restart_otherwise=True)
        self.send(self._coordinator(), ApiKey.END_TXN, TV2_VERSIONS[ApiKey.END_TXN] if self.tv2 else 3, body,
                  on_answer)


@dataclass
class Visible:
    """What a read_committed fetch returned of one partition: the records a client delivers, and
    every transactional batch with the high watermark and last stable offset of the answer."""

    records: list[tuple[int, bytes]] = field(default_factory=list)       # (offset, value)
    txn_batches: list[tuple[int, int]] = field(default_factory=list)     # (base offset, producer id)
    above_lso: list[int] = field(default_factory=list)                    # batch offsets at or above the LSO
    next_offset: int = -1


def read_committed_view(records: bytes | None, aborted: list[tuple[int, int]] | None, lso: int) -> Visible:
    """A read_committed client's view of one Fetch answer (Java's CompletedFetch): an aborted
    transaction's producer is dropped from its first offset to its abort marker; control batches
    are never delivered."""
    out = Visible()
    pending = sorted(((first, pid) for pid, first in aborted or ()), reverse=True)
    aborted_pids: set[int] = set()
    data = records or b""
    for pos, header in iter_batches(data):
        out.next_offset = header.next_offset
        if header.base_offset >= lso >= 0:
            out.above_lso.append(header.base_offset)
        if header.producer_id >= 0:
            while pending and pending[-1][0] <= header.last_offset:
                aborted_pids.add(pending.pop()[1])
        if header.is_control:
            for record in iter_records(data, pos, header):
                if header.is_transactional and marker_type(record.key) == ABORT_MARKER:
                    aborted_pids.discard(header.producer_id)
            continue
        if header.is_transactional:
            out.txn_batches.append((header.base_offset, header.producer_id))
            if header.producer_id in aborted_pids:
                continue
        for record in iter_records(data, pos, header):
            assert record.value is not None     # the transactional producers write a value in every record
            out.records.append((record.offset, record.value))
    return out


class ReadCommittedConsumer(_MultiTopicClient):
    """Reads every partition of the topics from its start with isolation_level=1, one fetch at a
    time, as a consumer does; ``on_fetch(tp, view, high_watermark, last_stable_offset)``. From a
    replica in its rack when the leader names one (``rack``, KIP-392)."""

    def __init__(self, sim: SimCluster, name: str, topics: dict[str, int], rng: random.Random,
                 on_fetch: Callable[[TP, Visible, int, int], None], rack: str = "") -> None:
        super().__init__(sim, name, topics, rng)
        self.order = [(t, p) for t in sorted(topics) for p in range(topics[t])]
        self.positions = {tp: 0 for tp in self.order}
        self.on_fetch = on_fetch
        self.next = 0
        self.replicas = ReadReplicas(rack)

    def start(self) -> None:
        self.later(self.rng.randint(0, 100), self.step)

    def step(self) -> None:
        tp = self.order[self.next]
        self.next = (self.next + 1) % len(self.order)
        leader = self.tp_leaders.get(tp)
        if leader is None:
            self.refresh_metadata(self.step)
            return
        body = fetch_body(tp, self.positions[tp], max_wait_ms=100, rack=self.replicas.rack)
        target, named = self.replicas.target(tp, leader)

        def on_answer(resp: Any) -> None:
            answer = resp.responses[0].partitions[0] if resp is not None else None
            error = ErrorCode(int(answer.error_code)) if answer is not None else None
            if self.replicas.redirected(tp, answer, error, named):
                self.next = self.order.index(tp)        # the same partition, elsewhere
                self.later(RETRY_BACKOFF_MS if named else 0, self.step)
                return
            if answer is None:
                self.tp_leaders.pop(tp, None)
                self.later(RETRY_BACKOFF_MS, self.step)
                return
            if error is ErrorCode.offset_out_of_range:
                self.positions[tp] = max(0, int(answer.log_start_offset))
            elif error is not ErrorCode.none:
                self.tp_leaders.pop(tp, None)
            else:
                view = read_committed_view(answer.records, _aborted(answer), int(answer.last_stable_offset))
                view.records = [(o, v) for o, v in view.records if o >= self.positions[tp]]
                self.on_fetch(tp, view, int(answer.high_watermark), int(answer.last_stable_offset))
                if view.next_offset > self.positions[tp]:
                    self.positions[tp] = view.next_offset
            self.later(0 if error is ErrorCode.none else RETRY_BACKOFF_MS, self.step)
        self.send(target, ApiKey.FETCH, FETCH_VERSION, body, on_answer)


def fetch_body(tp: TP, offset: int, max_wait_ms: int = 0, rack: str = "") -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack,
            "topics": [{"topic": tp[0], "partitions": [{
                "partition": tp[1], "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}


def _aborted(answer: Any) -> list[tuple[int, int]]:
    return [(int(a.producer_id), int(a.first_offset)) for a in answer.aborted_transactions or ()]
