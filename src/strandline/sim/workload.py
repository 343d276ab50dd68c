"""Clients for the simulator: producers and consumers that behave as Kafka's clients do, and the
history of what the cluster told them.

A :class:`Producer` learns leaders from Metadata, sends one batch at a time (acks 1 or all,
idempotent or not), and on a retriable error or a lost connection refreshes its metadata and
sends the same batch again until its delivery timeout; an idempotent producer keeps the batch's
sequence number, so the leader can drop a duplicate. A :class:`Consumer` reads every partition
from the leader below the high watermark. Every record value is unique, so the checker can tell
where each acknowledged or consumed record went. For a compacted topic, a producer gives each
record a key derived from its value (:func:`key_of`): every other record one of :data:`KEYS` keys
that are written over and over, the others a key of their own, never superseded, which every
replica must therefore keep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kio.schema.errors import ErrorCode

from strandline.group.records import build_batch, iter_records
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.hot_responses import (FETCH_REQUEST_VERSION, METADATA_REQUEST_VERSION, PRODUCE_REQUEST_VERSION,
                                               encode_fetch_request, encode_metadata_request, encode_produce_request)
from strandline.protocol.records import read_header
from strandline.sim.cluster import SimCluster

REQUEST_TIMEOUT_MS = 5000
DELIVERY_TIMEOUT_MS = 20000
RETRY_BACKOFF_MS = 100
PRODUCE_ACK_TIMEOUT_MS = 3000
KEYS = 8


def key_of(value: bytes) -> bytes:
    """The key a keyed producer gives the record ``value`` (``<producer>:<counter>``)."""
    counter = int(value.rsplit(b":", 1)[1])
    return b"u" + value if counter % 2 else b"k%d" % (counter // 2 % KEYS)
#: the clients' most frequent requests, encoded without kio's general writer (byte-identical)
_FAST_ENCODERS: dict[tuple[int, int], Callable[[int, str, Mapping[str, Any]], bytes]] = {(ApiKey.PRODUCE, PRODUCE_REQUEST_VERSION): encode_produce_request,
                  (ApiKey.FETCH, FETCH_REQUEST_VERSION): encode_fetch_request,
                  (ApiKey.METADATA, METADATA_REQUEST_VERSION): encode_metadata_request}
_RESET_PRODUCER = {ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id,
                   ErrorCode.invalid_producer_epoch}
_RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
              ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
              ErrorCode.request_timed_out, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
              ErrorCode.kafka_storage_error, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress}


@dataclass(frozen=True)
class Load:
    """How hard a run's clients write: a producer's pause between batches, the scratch topic's
    writers' interval (``recreate``) and a transactional producer's pause."""

    name: str
    think_ms: tuple[int, int]
    scratch_interval_ms: int
    txn_think_ms: tuple[int, int]


LOADS = {load.name: load for load in (
    Load("heavy", (10, 120), 100, (10, 200)),
    Load("medium", (30, 360), 300, (30, 600)),
    Load("light", (90, 1080), 900, (90, 1800)),
)}
#: ``mixed`` (the default): each seed draws its load, a quarter heavy, a quarter medium, half light
MIXED = ("heavy", "medium", "light", "light")


def load_of(seed: int, load: str) -> Load:
    """The load of ``seed``'s run: ``load`` by name, or drawn from the seed for ``mixed`` (from a
    random source of its own, so that the run's other draws do not depend on it)."""
    if load == "mixed":
        return LOADS[random.Random(f"load-{seed}").choice(MIXED)]
    return LOADS[load]


@dataclass(frozen=True)
class Ack:
    """An acknowledged batch: where the leader said it put it."""

    producer: str
    partition: int
    base_offset: int
    crc: int
    values: tuple[bytes, ...]
    acks: int
    idempotent: bool
    at_ms: int


@dataclass
class History:
    """What the clients were told."""

    acked: list[Ack] = field(default_factory=list)
    unknown: list[tuple[str, int, tuple[bytes, ...]]] = field(default_factory=list)
    refused: int = 0
    consumed: dict[int, dict[int, bytes]] = field(default_factory=dict)
    sent: int = 0
    on_ack: Callable[[Ack], None] | None = None

    def record_ack(self, ack: Ack) -> None:
        self.acked.append(ack)
        if self.on_ack is not None:
            self.on_ack(ack)


class _Client:
    """Metadata and request plumbing shared by producers and consumers."""

    def __init__(self, sim: SimCluster, name: str, topic: str, partitions: int, rng: random.Random) -> None:
        self.sim = sim
        self.name = name
        self.topic = topic
        self.partitions = partitions
        self.rng = rng
        self.leaders: dict[int, int] = {}
        self.stopped = False
        self.busy = False
        self.refreshed_ms = -RETRY_BACKOFF_MS

    def later(self, delay_ms: int, action: Callable[[], None]) -> None:
        self.sim.schedule_in(delay_ms, lambda: None if self.stopped else action())

    def step(self) -> None:
        """The client's next move (each kind of client has its own)."""
        raise NotImplementedError

    def retry(self, partition: int) -> None:
        """Forget ``partition``'s leader (it moved, or its answer was lost) and step again after
        the retry backoff."""
        self.leaders.pop(partition, None)
        self.later(RETRY_BACKOFF_MS, self.step)

    def send(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
             on_answer: Callable[[Any], None], expect_answer: bool = True) -> None:
        fast = _FAST_ENCODERS.get((api_key, version))
        correlation = self.sim.next_correlation()
        frame = fast(correlation, self.name, body) if fast is not None else \
            api.encode_request(api_key, version, correlation, self.name, body)

        def answered(response: bytes | None) -> None:
            if response is None:
                on_answer(None)
                return
            on_answer(api.decode_response(api_key, version, response))
        self.sim.client_send(broker_id, self.name, frame, answered, timeout_ms=REQUEST_TIMEOUT_MS,
                             expect_answer=expect_answer)

    def find_coordinator(self, key: str, key_type: int, then: Callable[[int | None], None]) -> None:
        """FindCoordinator (v3) for ``key`` (``key_type`` 0: a group, 1: a transactional id), asked
        of a random broker; ``then`` gets the coordinator it names, or None (an error, no answer)."""
        broker_id = self.rng.choice(sorted(self.sim.brokers))

        def on_answer(resp: Any) -> None:
            found = resp is not None and resp.error_code == ErrorCode.none and resp.node_id >= 0
            then(int(resp.node_id) if found else None)
        self.send(broker_id, ApiKey.FIND_COORDINATOR, 3, {"key": key, "key_type": key_type}, on_answer)

    def refresh_metadata(self, then: Callable[[], None]) -> None:
        """Ask a random broker for the leaders, then ``then()``; at most once per retry backoff,
        as Kafka's clients do (retry.backoff.ms)."""
        wait = self.refreshed_ms + RETRY_BACKOFF_MS - self.sim.now
        if wait > 0:
            self.later(wait, lambda: self.refresh_metadata(then))
            return
        self.refreshed_ms = self.sim.now
        broker_id = self.rng.choice(sorted(self.sim.brokers))
        body = {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False}

        def on_answer(resp: Any) -> None:
            if resp is not None:
                for topic in resp.topics:
                    if topic.name == self.topic and topic.error_code == ErrorCode.none:
                        for p in topic.partitions:
                            if p.error_code == ErrorCode.none and p.leader_id >= 0:
                                self.leaders[p.partition_index] = p.leader_id
                            else:
                                self.leaders.pop(p.partition_index, None)
            self.later(0 if resp is not None else RETRY_BACKOFF_MS, then)
        self.send(broker_id, ApiKey.METADATA, 9, body, on_answer)


class Producer(_Client):
    def __init__(self, sim: SimCluster, history: History, name: str, topic: str, partitions: int,
                 rng: random.Random, *, acks: int, idempotent: bool, think_ms: tuple[int, int] = (10, 120),
                 records_per_batch: tuple[int, int] = (1, 3), keyed: bool = False) -> None:
        super().__init__(sim, name, topic, partitions, rng)
        self.history = history
        self.keyed = keyed
        self.acks = acks
        self.idempotent = idempotent
        self.think_ms = think_ms
        self.records_per_batch = records_per_batch
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[int, int] = {}
        self.batch: tuple[int, bytes, tuple[bytes, ...], int] | None = None   # partition, bytes, values, first try
        self.counter = 0

    def start(self) -> None:
        self.later(self.rng.randint(0, self.think_ms[1]), self.step)

    def stop(self) -> None:
        """Send no new batch; the batch in flight finishes (or times out) first."""
        self.stopping = True

    stopping = False

    @property
    def idle(self) -> bool:
        return self.batch is None and not self.busy

    def step(self) -> None:
        if self.busy:
            return
        if self.idempotent and self.producer_id < 0:
            self.init_producer_id()
            return
        if self.batch is None:
            if self.stopping:
                return
            self.batch = self.new_batch()
        partition, data, values, first_ms = self.batch
        if self.sim.now - first_ms > DELIVERY_TIMEOUT_MS:
            self.give_up()
            return
        leader = self.leaders.get(partition)
        if leader is None:
            self.busy = True
            self.refresh_metadata(self.resume)
            return
        self.busy = True
        body = {"transactional_id": None, "acks": self.acks, "timeout": PRODUCE_ACK_TIMEOUT_MS,
                "topic_data": [{"name": self.topic, "partition_data": [{"index": partition, "records": data}]}]}
        self.send(leader, ApiKey.PRODUCE, 7, body, self.on_produced, expect_answer=self.acks != 0)

    def resume(self) -> None:
        self.busy = False
        self.step()

    def new_batch(self) -> tuple[int, bytes, tuple[bytes, ...], int]:
        partition = self.rng.randrange(self.partitions)
        count = self.rng.randint(*self.records_per_batch)
        values = []
        for _ in range(count):
            self.counter += 1
            values.append(f"{self.name}:{self.counter}".encode())
        sequence = self.sequences.get(partition, 0) if self.idempotent else -1
        data = bytes(build_batch([(key_of(v) if self.keyed else b"", v) for v in values], self.sim.now, self.producer_id if self.idempotent else -1,
                                 self.producer_epoch if self.idempotent else -1, sequence))
        self.history.sent += 1
        return partition, data, tuple(values), self.sim.now

    def on_produced(self, resp: Any) -> None:
        self.busy = False
        if self.stopped or self.batch is None:
            return
        partition, data, values, _ = self.batch
        if resp is None:                       # lost connection or timeout: unknown, send it again
            self.retry(partition)
            return
        answer = resp.responses[0].partition_responses[0]
        error = ErrorCode(int(answer.error_code))
        if error is ErrorCode.none:
            self.history.record_ack(Ack(self.name, partition, int(answer.base_offset), read_header(data).crc,
                                          values, self.acks, self.idempotent, self.sim.now))
            if self.idempotent:
                self.sequences[partition] = self.sequences.get(partition, 0) + len(values)
            self.batch = None
            self.later(self.rng.randint(*self.think_ms), self.step)
        elif error in _RETRIABLE:
            self.retry(partition)
        elif error in _RESET_PRODUCER and self.idempotent:
            self.give_up()
        else:
            self.history.refused += 1
            self.batch = None
            self.later(RETRY_BACKOFF_MS, self.step)

    def give_up(self) -> None:
        """The batch's fate is unknown; an idempotent producer starts a new epoch (KIP-360)."""
        assert self.batch is not None
        partition, _, values, _ = self.batch
        self.history.unknown.append((self.name, partition, values))
        self.batch = None
        if self.idempotent:
            self.producer_id = -1
            self.sequences.clear()
        self.later(RETRY_BACKOFF_MS, self.step)

    def init_producer_id(self) -> None:
        self.busy = True
        broker_id = self.rng.choice(sorted(self.sim.brokers))

        def on_answer(resp: Any) -> None:
            self.busy = False
            if resp is not None and resp.error_code == ErrorCode.none:
                self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
                self.sequences.clear()
                self.later(0, self.step)
            else:
                self.later(RETRY_BACKOFF_MS, self.step)
        self.send(broker_id, ApiKey.INIT_PRODUCER_ID, 1,
                  {"transactional_id": None, "transaction_timeout_ms": 60000}, on_answer)


class Firehose(_Client):
    """Writes one partition as fast as a busy cluster does: an acks=1 request every ``interval_ms``
    without waiting for the answers (many producers at once), so that every fetch round trip of a
    follower sees new writes arrive."""

    def __init__(self, sim: SimCluster, history: History, name: str, topic: str, partition: int,
                 rng: random.Random, interval_ms: int = 2) -> None:
        super().__init__(sim, name, topic, partition + 1, rng)
        self.history = history
        self.partition = partition
        self.interval_ms = interval_ms
        self.counter = 0

    def start(self) -> None:
        self.later(0, self.step)

    def step(self) -> None:
        leader = self.leaders.get(self.partition)
        if leader is None:
            if not self.busy:
                self.busy = True
                self.refresh_metadata(self.resume)
            return
        self.counter += 1
        data = bytes(build_batch([(b"", f"{self.name}:{self.counter}".encode())], self.sim.now))
        body = {"transactional_id": None, "acks": 1, "timeout": PRODUCE_ACK_TIMEOUT_MS,
                "topic_data": [{"name": self.topic, "partition_data": [{"index": self.partition, "records": data}]}]}

        def on_answer(resp: Any) -> None:
            if resp is None or resp.responses[0].partition_responses[0].error_code != ErrorCode.none:
                self.leaders.pop(self.partition, None)
        self.history.sent += 1
        self.send(leader, ApiKey.PRODUCE, 7, body, on_answer)
        self.later(self.interval_ms, self.step)

    def resume(self) -> None:
        self.busy = False
        self.step()


class ReadReplicas:
    """Where a consumer in ``rack`` fetches each partition from (KIP-392), as librdkafka and the
    Java consumer do: the replica a leader named in a Fetch answer, until that replica answers
    with an error or not at all; the leader before and after. An empty ``rack``: the leader."""

    def __init__(self, rack: str = "") -> None:
        self.rack = rack
        self.named: dict[object, int] = {}     # the replica a leader named, by the consumer's key

    def target(self, key: object, leader: int) -> tuple[int, bool]:
        """The broker to fetch ``key`` from, and whether it is a replica a leader named."""
        named = self.named.get(key)
        return (leader, False) if named is None else (named, True)

    def redirected(self, key: object, answer: Any, error: ErrorCode | None, named: bool) -> bool:
        """Take in a Fetch answer (None: none came); True when it only sends the consumer elsewhere
        (to the replica named, or back to the leader after the named replica failed it): the
        consumer then fetches again there (at once, or after a backoff for a failure), its
        position unchanged."""
        if named and (answer is None or error is not ErrorCode.none):
            del self.named[key]
            return True
        replica = -1 if answer is None or error is not ErrorCode.none else int(answer.preferred_read_replica)
        if replica >= 0:
            self.named[key] = replica
            return True
        return False


class Consumer(_Client):
    """Reads every partition from the start, below the high watermark, as a consumer does; from
    a replica in its rack when the leader names one (``rack``, KIP-392)."""

    def __init__(self, sim: SimCluster, history: History, name: str, topic: str, partitions: int,
                 rng: random.Random, on_record: Callable[[int, int, bytes], None] | None = None,
                 rack: str = "") -> None:
        super().__init__(sim, name, topic, partitions, rng)
        self.history = history
        self.positions = {p: 0 for p in range(partitions)}
        self.on_record = on_record
        self.next_partition = 0
        self.replicas = ReadReplicas(rack)

    def start(self) -> None:
        self.later(self.rng.randint(0, 100), self.step)

    def step(self) -> None:
        partition = self.next_partition
        self.next_partition = (partition + 1) % self.partitions
        leader = self.leaders.get(partition)
        if leader is None:
            self.refresh_metadata(self.step)
            return
        body = {"replica_id": -1, "max_wait": 200, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": self.replicas.rack,
                "topics": [{"topic": self.topic, "partitions": [{
                    "partition": partition, "current_leader_epoch": -1, "fetch_offset": self.positions[partition],
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        target, named = self.replicas.target(partition, leader)

        def on_answer(resp: Any) -> None:
            answer = resp.responses[0].partitions[0] if resp is not None else None
            error = ErrorCode(int(answer.error_code)) if answer is not None else None
            if self.replicas.redirected(partition, answer, error, named):
                self.next_partition = partition         # the same partition, elsewhere
                self.later(RETRY_BACKOFF_MS if named else 0, self.step)
                return
            if answer is None:
                self.retry(partition)
                return
            if error is ErrorCode.offset_out_of_range:
                self.positions[partition] = max(0, int(answer.log_start_offset))
            elif error is not ErrorCode.none:
                self.leaders.pop(partition, None)
            elif answer.records:
                seen = self.history.consumed.setdefault(partition, {})
                for offset, _, value in iter_records(answer.records):
                    if offset < self.positions[partition]:
                        continue
                    assert value is not None        # every producer here writes a value
                    if self.on_record is not None:
                        self.on_record(partition, offset, value)
                    seen.setdefault(offset, value)
                    self.positions[partition] = offset + 1
            self.later(0 if error is ErrorCode.none else RETRY_BACKOFF_MS, self.step)
        self.send(target, ApiKey.FETCH, 11, body, on_answer)
