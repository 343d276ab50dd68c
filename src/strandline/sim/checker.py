"""Invariants of Kafka-style replication, checked on a running :class:`SimCluster` after every event.

- one leader per partition and leader epoch: two brokers never both lead in the same epoch;
- a leader is in its own ISR, and the ISR lies within the assigned replicas (in each leader's view
  and in ZooKeeper's partition state);
- a leader's high watermark never decreases within its epoch;
- replicas agree below the high watermark: whatever any replica holds below its high watermark is
  *committed*, and committed data never changes: every other replica that holds those offsets
  below its own high watermark holds the same batches, and no replica cuts its log below data it
  had verified as committed;
- an acks=all acknowledgement covers committed data (it is in the committed log when it arrives);
- consumers never see an offset with two different values.

At the end of a run :meth:`Invariants.final_check` compares every replica of every partition byte
for byte and counts the acknowledged records missing from the final log (the durability audit).

On a compacted topic (``compacted``) each replica's cleaner rewrites its own batches and drops
superseded records, so committed data is compared record by record (offset, key and value), a
record missing below the high watermark must have a newer committed record of its key, and at the
end the replicas must agree on the newest record of every key, which must be the newest
acknowledged one or newer.
"""

from __future__ import annotations

from collections import Counter
from bisect import bisect_left, insort
from dataclasses import KW_ONLY, dataclass
from typing import AbstractSet, Callable

from strandline.coordination import znodes
from strandline.coordination.store import GetData
from strandline.group.records import iter_records
from strandline.log.disk import FileRegion
from strandline.log.log import Log
from strandline.protocol.records import iter_batches
from strandline.protocol.records import iter_records as iter_batch_records
from strandline.replication.partition import Partition
from strandline.sim.cluster import SimCluster
from strandline.sim.workload import Ack, History, key_of

#: what a replica looked like when last checked: partition and log objects, role, epoch, ISR, HW, LEO
Signature = tuple[int, int, int, tuple[int, ...], int, int, int]


def read_whole(log: Log, start: int, end: int, max_bytes: int) -> bytes:
    """The whole batches of ``log`` from ``start`` below ``end`` (at most ``max_bytes``)."""
    data = log.read(start, max_bytes, max_offset=end)
    assert not isinstance(data, FileRegion)     # only a read with regions=True gives one
    return data


@dataclass
class Violation(Exception):
    invariant: str
    detail: str
    at_ms: int

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class _Replica:
    log_id: int
    verified: int = 0          # offsets below this were compared with the committed log
    leo: int = 0


@dataclass(eq=False, repr=False)
class Invariants:
    """The invariants of ``topic`` (``partitions`` partitions) on ``sim``. ``checked_acks``: the
    acks settings whose acknowledged writes must survive; ``no_duplicates``: the records of
    idempotent producers must stand once in the final log."""

    sim: SimCluster
    topic: str
    partitions: int
    _: KW_ONLY
    checked_acks: frozenset[int]
    no_duplicates: bool
    assigned_only: bool = False
    """final_check compares only the replicas ZooKeeper assigns (not stray logs of removed ones)."""
    compacted: bool = False
    """The topic is compacted: committed data is compared by record, not by batch."""
    detail_prefix: str = ""
    """Put before the detail of each violation (a topic's name, where a run checks several)."""

    def __post_init__(self) -> None:
        partitions = self.partitions
        self.committed: list[dict[int, tuple[int, int]]] = [{} for _ in range(partitions)]   # base -> (next, crc)
        self.committed_end = [0] * partitions
        self.deleted = [0] * partitions         # DeleteRecords asked: the records below may be gone
        self.records: list[dict[int, tuple[bytes | None, bytes | None]]] = [{} for _ in range(partitions)]  # compacted
        self.newest: list[dict[bytes | None, int]] = [{} for _ in range(partitions)]    # key -> newest committed offset
        self.record_offsets: list[list[int]] = [[] for _ in range(partitions)]           # of ``records``, sorted
        self.leader_of_epoch: dict[tuple[int, int], int] = {}
        self.leader_hw: dict[tuple[int, int, int], tuple[int, int]] = {}
        self.replicas: dict[tuple[int, int, int], _Replica] = {}
        self.zk_changes = -1
        # the znodes last checked (ZooKeeper's (data, version, owner) tuples): an unchanged one needs no new look
        self._topic_path = znodes.TopicZNode.path(self.topic)
        self._state_paths = [znodes.TopicPartitionStateZNode.path(self.topic, i) for i in range(partitions)]
        self._topic_node: tuple[bytes, int, int] | None = None
        self._assignment: dict[int, tuple[int, ...]] = {}
        self._state_nodes: list[tuple[bytes, int, int] | None] = [None] * partitions
        self._keys = [(self.topic, i) for i in range(partitions)]
        self.events = 0
        self.seen: dict[tuple[int, int], Signature] = {}
        self.violations: list[Violation] = []
        self.broken: set[str] = set()
        self.on_violation: Callable[[Violation], None] | None = None

    def fail(self, invariant: str, detail: str) -> None:
        """Record the first violation of each invariant; the run goes on, so that a configuration
        that must lose data also shows how many acknowledged writes it lost."""
        if self.detail_prefix:
            detail = f"{self.detail_prefix} {detail}"
        if invariant not in self.broken:
            self.broken.add(invariant)
            self.violations.append(Violation(invariant, detail, self.sim.now))
            if self.on_violation is not None:
                self.on_violation(self.violations[-1])

    # ------------------------------------------------------------------ after every event

    def after_event(self) -> None:
        touched = self.sim.touched
        if touched:
            self.sim.touched = set()
        self.check(touched)

    def check(self, touched: set[int]) -> None:
        """The checks after one event that reached the brokers ``touched``."""
        self.events += 1
        seen = self.seen
        brokers = self.sim.brokers
        for broker_id in touched:
            node = brokers[broker_id]
            core = node.core
            if core is None:
                continue
            partitions = core.partitions
            for index, key in enumerate(self._keys):
                partition = partitions.get(key)
                if partition is None:
                    continue
                log = partition.log
                # a replica whose role, epoch, ISR, HW and log are as last checked needs no new look
                signature = (id(partition), partition.leader_id, partition.leader_epoch, partition.isr,
                             partition.high_watermark, log.log_end_offset, id(log))
                if seen.get((broker_id, index)) != signature:
                    seen[(broker_id, index)] = signature
                    self._check_replica(broker_id, node.incarnation, index, partition)
        changes = self.sim.zk.changes
        if changes != self.zk_changes:
            self.zk_changes = changes
            self._check_zookeeper()

    def _check_replica(self, broker_id: int, incarnation: int, index: int, partition: Partition) -> None:
        if partition.is_leader:
            epoch = partition.leader_epoch
            first = self.leader_of_epoch.setdefault((index, epoch), broker_id)
            if first != broker_id:
                self.fail("one leader per epoch", f"partition {index}: brokers {first} and {broker_id} "
                                                  f"both lead in epoch {epoch}")
            if broker_id not in partition.isr:
                self.fail("leader in ISR", f"partition {index}: leader {broker_id} not in its ISR {partition.isr}")
            if not set(partition.isr) <= set(partition.replicas):
                self.fail("ISR within replicas", f"partition {index}: ISR {partition.isr} on broker {broker_id} "
                                                 f"is not within the replicas {partition.replicas}")
            key = (broker_id, incarnation, index)
            last = self.leader_hw.get(key)
            hw = partition.high_watermark
            if last is not None and last[0] == epoch and hw < last[1]:
                self.fail("HW never decreases on a leader", f"partition {index}: broker {broker_id} epoch {epoch} "
                                                            f"high watermark {last[1]} -> {hw}")
            self.leader_hw[key] = (epoch, hw)
        self._check_committed(broker_id, incarnation, index, partition)

    def _check_committed(self, broker_id: int, incarnation: int, index: int, partition: Partition) -> None:
        log = partition.log
        key = (broker_id, incarnation, index)
        replica = self.replicas.get(key)
        if replica is None or replica.log_id != id(log):
            replica = self.replicas[key] = _Replica(id(log))
        leo = log.log_end_offset
        if leo < replica.verified:
            self.fail("replicas agree below the HW", f"partition {index}: broker {broker_id} cut its log to {leo}, "
                                                     f"below committed data it held up to {replica.verified}")
            replica.verified = leo
        replica.leo = leo
        hw = min(partition.high_watermark, leo)
        if hw <= replica.verified:
            return
        if self.compacted:
            self._check_committed_records(broker_id, index, log, replica, hw)
            return
        committed = self.committed[index]
        for header in log.iter_batch_headers(replica.verified):
            if header.base_offset >= hw:
                break
            entry = (header.next_offset, header.crc)
            known = committed.get(header.base_offset)
            if known is None:
                if header.base_offset != self.committed_end[index]:
                    self.fail("replicas agree below the HW",
                              f"partition {index}: broker {broker_id} has a batch at {header.base_offset} below its "
                              f"high watermark {hw} where the committed log has none (committed up to "
                              f"{self.committed_end[index]})")
                committed[header.base_offset] = entry
                self.committed_end[index] = header.next_offset
            elif known != entry:
                self.fail("replicas agree below the HW",
                          f"partition {index}: broker {broker_id} holds a different batch at offset "
                          f"{header.base_offset} below its high watermark {hw}")
            replica.verified = header.next_offset

    def _check_committed_records(self, broker_id: int, index: int, log: Log, replica: _Replica, hw: int) -> None:
        """The compacted topic's records of a replica below its high watermark: each one the
        committed record at its offset, or the first seen there."""
        records, newest, offsets = self.records[index], self.newest[index], self.record_offsets[index]
        start = max(replica.verified, log.log_start_offset)     # DeleteRecords: gone below the log start
        if start >= hw:
            replica.verified = max(replica.verified, start)
            return
        held: set[int] = set()
        data = read_whole(log, start, hw, 1 << 40)
        for pos, header in iter_batches(data):
            if header.base_offset >= hw:
                break
            for record in iter_batch_records(data, pos, header):
                if record.offset < start:
                    continue
                held.add(record.offset)
                seen = (record.key, record.value)
                known = records.get(record.offset)
                if known is None:
                    records[record.offset] = seen
                    insort(offsets, record.offset)
                    if record.offset > newest.get(record.key, -1):
                        newest[record.key] = record.offset
                elif known != seen:
                    self.fail("replicas agree below the HW",
                              f"partition {index}: broker {broker_id} holds {seen} at offset {record.offset} below "
                              f"its high watermark {hw}, where the committed log has {known}")
            replica.verified = header.next_offset
        # a committed record this replica lacks must have been cleaned away: a newer one of its key exists
        for offset in offsets[bisect_left(offsets, start):bisect_left(offsets, replica.verified)]:
            if offset not in held:
                key = records[offset][0]
                if newest.get(key, -1) <= offset:
                    self.fail("replicas agree below the HW",
                              f"partition {index}: broker {broker_id} lacks the committed record {records[offset]} "
                              f"at offset {offset} below its high watermark {hw}, and no newer record of its key "
                              f"is committed")
        self.committed_end[index] = max(self.committed_end[index], replica.verified)

    def _superseded(self, index: int, offset: int, value: bytes) -> bool:
        """A record absent from a compacted log below the committed end, with a newer committed
        record of its key: cleaned away, as it should be."""
        return offset < self.committed_end[index] and self.newest[index].get(self._key(index, offset, value), -1) > offset

    def _key(self, index: int, offset: int, value: bytes) -> bytes | None:
        """The key of a record: as the log held it, or as the producer derived it."""
        return self.records[index].get(offset, (key_of(value), None))[0]

    def _check_zookeeper(self) -> None:
        """ZooKeeper's view of the topic's partitions; a partition whose state znode (and the topic's
        znode) is as last checked is not decoded again: the same data passes or fails as before."""
        nodes = self.sim.zk.nodes
        topic = nodes.get(self._topic_path)
        if topic is None:
            return
        if topic is not self._topic_node:
            self._topic_node = topic
            self._assignment = znodes.TopicZNode.decode(topic[0]).partitions
            self._state_nodes = [None] * self.partitions
        assignment = self._assignment
        for index in range(self.partitions):
            node = nodes.get(self._state_paths[index])
            if node is None or node is self._state_nodes[index]:
                continue
            self._state_nodes[index] = node
            state = znodes.TopicPartitionStateZNode.decode(node[0], node[1])
            replicas = set(assignment[index])
            # an empty ISR only with eligible leader replicas (KIP-966): the partition is offline,
            # and those who left the ISR are in its ELR or its last known ELR
            emptied = not state.isr and state.leader < 0 and bool(state.elr or state.last_known_elr)
            if (not state.isr and not emptied) or not set(state.isr) <= replicas:
                self.fail("ISR within replicas", f"partition {index}: ZooKeeper's ISR {state.isr} "
                                                 f"(replicas {sorted(replicas)})")
            if not set(state.elr) <= replicas - set(state.isr):
                self.fail("ELR within replicas, outside the ISR", f"partition {index}: ZooKeeper's ELR "
                                                                  f"{state.elr}, ISR {state.isr} "
                                                                  f"(replicas {sorted(replicas)})")
            if state.leader >= 0 and state.leader not in state.isr:
                self.fail("leader in ISR", f"partition {index}: ZooKeeper names leader {state.leader} "
                                           f"outside the ISR {state.isr}")

    # ------------------------------------------------------------------ client events

    def on_ack(self, ack: Ack) -> None:
        if ack.acks != -1 or -1 not in self.checked_acks:
            return
        if self.compacted:
            records = self.records[ack.partition]
            for i, value in enumerate(ack.values):
                offset = ack.base_offset + i
                known = records.get(offset)
                if (known is None or known[1] != value) and not (known is None and
                                                                 self._superseded(ack.partition, offset, value)):
                    self.fail("acks=all acknowledges committed data",
                              f"partition {ack.partition}: {value.decode()} acknowledged at offset {offset} "
                              f"is not in the committed log")
            return
        batch = self.committed[ack.partition].get(ack.base_offset)
        if batch is None or batch[1] != ack.crc:
            self.fail("acks=all acknowledges committed data",
                      f"partition {ack.partition}: {ack.values[0].decode()} acknowledged at offset {ack.base_offset} "
                      f"is not in the committed log")

    def on_consumed(self, history: History, partition: int, offset: int, value: bytes) -> None:
        seen = history.consumed.get(partition, {}).get(offset)
        if seen is not None and seen != value:
            self.fail("consumers never see a record change",
                      f"partition {partition} offset {offset} read as {seen.decode()} and later as {value.decode()}")

    def records_deleted(self, index: int, offset: int) -> None:
        """DeleteRecords was asked of partition ``index`` below ``offset``: from now on the records
        below it may be gone from every replica, and the final checks look only above it."""
        self.deleted[index] = max(self.deleted[index], offset)

    def deleted_below(self, index: int) -> int:
        """The highest offset below which DeleteRecords was asked of partition ``index`` (0: never)."""
        return self.deleted[index] if index < len(self.deleted) else 0

    # ------------------------------------------------------------------ at the end

    def _final_waiting(self, index: int, copies: dict[int, bytes], deleted: int, history: History) -> int:
        """:meth:`final_check` of a partition waiting offline: what is on none of its replicas is lost."""
        finals = [{offset: value for offset, _, value in iter_records(data)} for data in copies.values()]
        lost = 0
        for ack in history.acked:
            if ack.partition == index and ack.acks in self.checked_acks and not any(
                    all(final.get(ack.base_offset + i) == v for i, v in enumerate(ack.values)
                        if ack.base_offset + i >= deleted) for final in finals):
                lost += 1
        for offset, value in history.consumed.get(index, {}).items():
            if offset >= deleted and not any(final.get(offset) == value for final in finals):
                self.fail("consumed records survive", f"partition {index} offset {offset}: a consumer read "
                                                      f"{value.decode()}, no replica has it (waiting offline)")
                break
        return lost

    def final_check(self, history: History, waiting: AbstractSet[int] = frozenset()) -> int:
        """Every replica identical; every checked acknowledged record in the leader's final log;
        every consumed record still at its offset. Returns how many acknowledged batches are lost.
        A partition of ``waiting`` waits offline (eligible leader replicas, its ISR and ELR empty):
        it has no leader and its replicas need not agree; each acknowledged or consumed record
        must be at its offset in one of its replicas' logs (kept, for an operator to recover)."""
        lost = 0
        [topic] = self.sim.zk.execute([GetData(znodes.TopicZNode.path(self.topic))])
        assignment = znodes.TopicZNode.decode(topic.data).partitions
        for index in range(self.partitions):
            logs = {}
            for node in self.sim.brokers.values():
                if self.assigned_only and node.id not in assignment[index]:
                    continue
                partition = node.core.partitions.get((self.topic, index)) if node.core is not None else None
                if partition is not None:
                    logs[node.id] = partition.log
                    self._check_committed(node.id, node.incarnation, index, partition)
            # from the highest log start offset: a follower keeps a start a leader that restarted
            # since forgot (not yet checkpointed), as in Kafka; without DeleteRecords every start is 0
            start = max((log.log_start_offset for log in logs.values()), default=0)
            copies = {b: read_whole(log, start, log.log_end_offset, 1 << 30) if log.log_end_offset > start
                      else b"" for b, log in logs.items()}
            deleted = self.deleted[index]
            if index in waiting and not self.compacted:
                lost += self._final_waiting(index, copies, deleted, history)
                continue
            leader = self.sim.state(self.topic, index).leader
            data = copies.get(leader, next(iter(copies.values()), b""))
            if self.compacted:
                lost += self._final_compacted(index, copies, data, history)
                continue
            if len(set(copies.values())) > 1:
                sizes = {b: len(d) for b, d in copies.items()}
                self.fail("replicas converge", f"partition {index}: replicas differ after healing (bytes {sizes})")
            final = {offset: value for offset, _, value in iter_records(data)}
            for ack in history.acked:
                if ack.partition == index and ack.acks in self.checked_acks and \
                        any(final.get(ack.base_offset + i) != v for i, v in enumerate(ack.values)
                            if ack.base_offset + i >= deleted):
                    lost += 1
            for offset, value in history.consumed.get(index, {}).items():
                if offset >= deleted and final.get(offset) != value:
                    self.fail("consumed records survive", f"partition {index} offset {offset}: a consumer read "
                                                          f"{value.decode()}, the final log has "
                                                          f"{(final.get(offset) or b'nothing').decode()}")
                    break
            if self.no_duplicates:
                counts = Counter(v for v in final.values() if v is not None and v.split(b":")[0].startswith(b"i"))
                twice = [v.decode() for v, n in counts.items() if n > 1]
                if twice:
                    self.fail("idempotent producers write once", f"partition {index}: {twice[:3]} appear more than once")
        if lost:
            self.fail("acknowledged writes survive", f"{lost} acknowledged batch(es) are missing from the final log")
        return lost

    def _final_compacted(self, index: int, copies: dict[int, bytes], data: bytes, history: History) -> int:
        """A compacted partition at the end: the replicas agree on the newest record of every key
        (each cleans on its own, so their bytes may differ); each checked acknowledged record is
        that newest record or older than it; each consumed record is still at its offset or was
        superseded. Returns how many acknowledged batches are lost."""
        def newest_of(log: bytes) -> dict[bytes | None, tuple[int, bytes | None]]:
            newest: dict[bytes | None, tuple[int, bytes | None]] = {}
            for offset, key, value in iter_records(log):
                newest[key] = (offset, value)
            return newest

        views = {b: newest_of(d) for b, d in copies.items()}
        if len({tuple(sorted(v.items(), key=lambda kv: kv[0] or b"")) for v in views.values()}) > 1:
            counts = {b: len(v) for b, v in views.items()}
            self.fail("replicas converge", f"partition {index}: replicas disagree on the newest record of some key "
                                           f"after healing (keys per replica {counts})")
        newest = newest_of(data)
        final = {offset: value for offset, _, value in iter_records(data)}

        def kept(offset: int, value: bytes) -> bool:
            found = newest.get(self._key(index, offset, value))
            return final.get(offset) == value or (offset not in final and found is not None and found[0] > offset)

        lost = 0
        deleted = self.deleted[index]
        for ack in history.acked:
            if ack.partition == index and ack.acks in self.checked_acks and \
                    not all(kept(ack.base_offset + i, v) for i, v in enumerate(ack.values)
                            if ack.base_offset + i >= deleted):
                lost += 1
        for offset, value in history.consumed.get(index, {}).items():
            if offset >= deleted and not kept(offset, value):
                self.fail("consumed records survive", f"partition {index} offset {offset}: a consumer read "
                                                      f"{value.decode()}, which the final log neither holds nor "
                                                      f"supersedes")
                break
        return lost
