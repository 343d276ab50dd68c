"""Consumers of a share group (KIP-932) for the explorer, driven as Kafka 4.x's
``KafkaShareConsumer`` with explicit acknowledgement drives its requests, every one through the
simulated network, and the check of what they settle.

A :class:`ShareMember` makes its member id, finds the group's coordinator, joins with epoch 0 and
its subscription, then heartbeats every interval the coordinator gives (ShareGroupHeartbeat); with
the partitions assigned, it keeps a share session with each of their leaders and fetches from it
(ShareFetch, long-polling), carrying the acknowledgements of what it was handed last on its next
fetch: most records accepted, some released, a few rejected, and now and then one left alone, its
lock to expire. A session error or a lost answer opens the session again (acknowledgements not
answered are dropped: their records come again when their locks end). Now and then a member leaves
the group for a while, or stalls past its session.

:class:`ShareChecker` holds KIP-932's promises as the members see them: no record is handed out
more than ``group.share.delivery.count.limit`` times; no record is settled twice (accepted,
rejected, or released at the limit, each answered with no error); and, once the faults heal and the
group has read everything, every record from the first one handed out up to the high watermark was
settled once, or was delivered as often as the limit allows (archived when its lock ended).

A member cannot see every delivery: a fetch whose answer never came (or came to a member paused
meanwhile, or was taken by a broker only after the member gave up on it, a stale request that a
new share session's epoch happened to match) may have handed records out and counted their
deliveries. A record still unsettled at the end is therefore accepted only with the brokers' own
word that one of their leaders handed it out the limit's times (then archived unless accepted):
the explorer listens to every leader's share-partitions (``ShareGroupApis.acquired_listeners``).
A record skipped (never handed out, its share-partition's start moved past it) has no such word.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.wire import duration_ms
from strandline.group.records import iter_records
from strandline.protocol.api import ApiKey
from strandline.sim.checker import Violation
from strandline.sim.cluster import SimCluster
from strandline.sim.members import Member, Members
from strandline.sim.workload import RETRY_BACKOFF_MS

SHARE_GROUP = "explorer-share"
LIMIT = 3
#: the brokers' keys: share groups on, their timeouts for a run of a minute (a lock of 2 s, so that
#: records left alone come again within the run), three partitions of __share_group_state
SESSION_MS = 6000
BROKER_CONFIG = {"group.share.enable": "true", "group.share.min.session.timeout.ms": "3000",
                 "group.share.session.timeout.ms": str(SESSION_MS), "group.share.min.heartbeat.interval.ms": "500",
                 "group.share.heartbeat.interval.ms": "1000", "group.share.min.record.lock.duration.ms": "1000",
                 "group.share.record.lock.duration.ms": "2000",
                 "group.share.delivery.count.limit": str(LIMIT),
                 "share.coordinator.state.topic.num.partitions": "3", "offsets.topic.num.partitions": "3"}
#: once the group settled and its members left, the time the last state written takes to reach
#: every replica of __share_group_state before the replicas are compared
QUIET_MS = 3000
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
_FIND_AGAIN = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
               ErrorCode.network_exception}
_REJOIN = {ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id}
_SESSION_AGAIN = {ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                  ErrorCode.network_exception}


class ShareChecker:
    def __init__(self, fail: Callable[[str, str], None], note: Callable[[str], None]) -> None:
        self.fail = fail
        self.note = note
        self.most: dict[tuple[int, int], int] = {}          # (partition, offset) -> highest delivery count seen
        self.settled: dict[tuple[int, int], str] = {}       # (partition, offset) -> by whom and how
        #: acknowledged without a clear answer (none came, or COORDINATOR_NOT_AVAILABLE: the write
        #: may have been kept): settled or not, the member cannot tell
        self.maybe: set[tuple[int, int]] = set()
        self.first: dict[int, int] = {}                     # partition -> the first offset handed out
        self.deliveries = 0

    def delivered(self, member: str, partition: int, offset: int, count: int) -> None:
        self.deliveries += 1
        key = (partition, offset)
        self.most[key] = max(self.most.get(key, 0), count)
        self.first[partition] = min(self.first.get(partition, offset), offset)
        if count > LIMIT:
            self.fail("no record is delivered past the limit",
                      f"{member} was handed partition {partition} offset {offset} as delivery {count}, "
                      f"past the limit {LIMIT}")

    def unanswered(self, partition: int, offset: int, kind: int, count: int) -> None:
        """An acknowledgement whose outcome is unknown."""
        if kind != RELEASE or count >= LIMIT:
            self.maybe.add((partition, offset))

    def acknowledged(self, member: str, partition: int, offset: int, kind: int, count: int) -> None:
        """An acknowledgement answered with no error, of a record ``member`` held as delivery ``count``."""
        if kind == RELEASE and count < LIMIT:
            return                                          # available again: not settled
        how = {ACCEPT: "accepted", REJECT: "rejected", GAP: "a gap", RELEASE: "released at the limit"}[kind]
        key = (partition, offset)
        before = self.settled.get(key)
        if before is not None:
            self.fail("no record is settled twice",
                      f"partition {partition} offset {offset}: {before}, then {how} by {member} (delivery {count})")
        self.settled[key] = f"{how} by {member} (delivery {count})"

    def unsettled(self, partitions: int, bounds: Callable[[int], tuple[int, int] | None],
                  archived: Callable[[int], set[int]]) -> list[str]:
        """What the group has not settled yet from the first record handed out of each partition up
        to ``bounds(partition)`` (its log start and high watermark; None: no leader now), but for
        the offsets ``archived(partition)`` names (handed out by a leader the limit's times)."""
        wrong = []
        for p in range(partitions):
            span = bounds(p)
            if span is None:
                wrong.append(f"partition {p} has no leader")
                continue
            start, hw = span
            begin = max(self.first.get(p, hw), start)
            left = [o for o in range(begin, hw) if (p, o) not in self.settled and (p, o) not in self.maybe
                    and self.most.get((p, o), 0) < LIMIT]
            if left:
                at_limit = archived(p)
                left = [o for o in left if o not in at_limit]
            if left:
                wrong.append(f"partition {p}: {len(left)} of offsets {begin}-{hw - 1} unsettled, e.g. {left[:5]}")
        return wrong


class ShareMember(Member):
    """One consumer of the share group, subscribed to ``topic``."""

    def __init__(self, sim: SimCluster, name: str, topic: str, partitions: int, rng: random.Random,
                 checker: ShareChecker, note: Callable[[str], None]) -> None:
        super().__init__(sim, name, SHARE_GROUP, topic, partitions, rng, note)
        self.checker = checker
        self.assigned: frozenset[int] = frozenset()
        self.draining = False             # the faults healed: it acknowledges everything it is handed
        #: per leader: its share session's next epoch and partitions, whether a fetch is out, and
        #: the acknowledgements for its next fetch: partition -> [(offset, kind, delivery count)]
        self.sessions: dict[int, tuple[int, frozenset[int]]] = {}
        self.fetching: set[int] = set()
        self.acks: dict[int, dict[int, list[tuple[int, int, int]]]] = {}

    # ------------------------------------------------------------------ membership

    def heartbeat(self) -> None:
        joining = self.epoch == 0
        body = {"group_id": SHARE_GROUP, "member_id": self.member_id, "member_epoch": self.epoch, "rack_id": None,
                "subscribed_topic_names": [self.topic] if joining else None}
        generation = self.generation

        def on_answer(resp: Any) -> None:
            if self.stalled or self.away or generation != self.generation:
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is ErrorCode.none:
                self.on_heartbeat(resp)
            elif error in _FIND_AGAIN:
                self.coordinator = None
                self.schedule(RETRY_BACKOFF_MS)
            elif error in _REJOIN:
                self.note(f"{self.name}: {error.name}: joins the share group again")
                self.epoch, self.joined = 0, False
                self.schedule(0)
            else:
                self.checker.fail("share group heartbeats are answered",
                                  f"{self.name}: heartbeat answered {error.name}: {resp.error_message}")
                self.schedule(self.heartbeat_ms)
        self.send(self.coordinator if self.coordinator is not None else 1, ApiKey.SHARE_GROUP_HEARTBEAT, 1, body,
                  on_answer)

    def on_heartbeat(self, resp: Any) -> None:
        self.joined = True
        self.epoch = int(resp.member_epoch)
        self.heartbeat_ms = max(duration_ms(resp.heartbeat_interval), 100)
        if resp.assignment is not None:
            assigned = frozenset(p for t in resp.assignment.topic_partitions for p in t.partitions)
            for t in resp.assignment.topic_partitions:
                self.topic_id = t.topic_id
            if assigned != self.assigned:
                self.assigned = assigned
                self.fetch_all()
        self.schedule(self.heartbeat_ms)

    # ------------------------------------------------------------------ fetching

    def fetch_all(self) -> None:
        """A fetch to each leader of an assigned partition that has none out."""
        if self.stalled or self.away or self.topic_id is None:
            return
        missing = [p for p in self.assigned if p not in self.leaders]
        if missing:
            self.refresh_metadata(self.fetch_all)
        by_leader: dict[int, set[int]] = {}
        for p in self.assigned:
            if p in self.leaders:
                by_leader.setdefault(self.leaders[p], set()).add(p)
        for leader, partitions in by_leader.items():
            if leader not in self.fetching:
                self.fetch(leader, frozenset(partitions))

    def fetch(self, leader: int, partitions: frozenset[int]) -> None:
        epoch, in_session = self.sessions.get(leader, (0, frozenset()))
        if epoch != 0 and in_session != partitions:
            epoch = 0                                   # the partitions changed: a new session
        acks = self.acks.pop(leader, {}) if epoch != 0 else {}
        self.acks.pop(leader, None)
        assert self.topic_id is not None
        topic_id = self.topic_id
        parts = [{"partition_index": p, "acknowledgement_batches": [
            {"first_offset": o, "last_offset": o, "acknowledge_types": [kind]} for o, kind, _ in acks.get(p, [])]}
                 for p in sorted(partitions)]
        body = {"group_id": SHARE_GROUP, "member_id": self.member_id, "share_session_epoch": epoch,
                "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
                "topics": [{"topic_id": topic_id, "partitions": parts}], "forgotten_topics_data": []}
        self.fetching.add(leader)
        incarnation = self.incarnation

        def unknown(partitions_of_acks: Any = None) -> None:
            for index, sent in acks.items():
                if partitions_of_acks is None or index in partitions_of_acks:
                    for offset, kind, count in sent:
                        self.checker.unanswered(index, offset, kind, count)

        def on_answer(resp: Any) -> None:
            self.fetching.discard(leader)
            if self.stalled or self.away:
                self.sessions.pop(leader, None)         # a paused process: its session is lost to it
                unknown()                               # and the answer too
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is ErrorCode.network_exception:
                unknown()
            if error is not ErrorCode.none:
                self.sessions.pop(leader, None)
                if error not in _SESSION_AGAIN and error is not ErrorCode.unknown_member_id:
                    self.checker.fail("share fetches are answered", f"{self.name}: ShareFetch answered {error.name}")
                self.later(RETRY_BACKOFF_MS, self.fetch_all)
                return
            self.sessions[leader] = (epoch + 1 if epoch < 2**31 - 1 else 1, partitions)
            moved = False
            for t in resp.responses:
                for p in t.partitions:
                    index = p.partition_index
                    ack_error = ErrorCode(int(p.acknowledge_error_code))
                    if ack_error is ErrorCode.none:
                        for offset, kind, count in acks.get(index, []):
                            self.checker.acknowledged(self.name, index, offset, kind, count)
                    elif ack_error in (ErrorCode.coordinator_not_available, ErrorCode.unknown_server_error):
                        unknown({index})
                    if ErrorCode(int(p.error_code)) is not ErrorCode.none:
                        self.leaders.pop(index, None)
                        moved = True
                        continue
                    self.take(leader, index, p.records, p.acquired_records)
            if moved or incarnation != self.incarnation:
                self.sessions.pop(leader, None)
            self.later(RETRY_BACKOFF_MS if moved else 0, self.fetch_all)
        self.send(leader, ApiKey.SHARE_FETCH, 1, body, on_answer)

    def take(self, leader: int, partition: int, records: Any, acquired: Any) -> None:
        """Records handed out: each acquired offset is acknowledged on the next fetch (a record
        left alone is not: its lock ends)."""
        present = {offset for offset, _, _ in iter_records(bytes(records or b""))}
        pending = self.acks.setdefault(leader, {}).setdefault(partition, [])
        for a in acquired:
            for offset in range(a.first_offset, a.last_offset + 1):
                count = int(a.delivery_count)
                self.checker.delivered(self.name, partition, offset, count)
                if offset not in present:
                    pending.append((offset, GAP, count))
                    continue
                roll = self.rng.random()
                if self.draining or roll < 0.85:
                    pending.append((offset, ACCEPT, count))
                elif roll < 0.92:
                    pending.append((offset, RELEASE, count))
                elif roll < 0.95:
                    pending.append((offset, REJECT, count))
                # else: left alone, its lock to end

    # ------------------------------------------------------------------ what the nemesis does

    def leaving(self) -> tuple[int, int, dict[str, Any]]:
        return ApiKey.SHARE_GROUP_HEARTBEAT, 1, {"group_id": SHARE_GROUP, "member_id": self.member_id,
                                                 "member_epoch": -1, "rack_id": None,
                                                 "subscribed_topic_names": None}

    def forget(self) -> None:
        self.epoch, self.joined, self.assigned = 0, False, frozenset()
        self.sessions.clear()
        self.acks.clear()

    def resumed(self) -> None:
        self.fetch_all()


class LeaderDeliveries:
    """The share group's records of ``topic`` as every leader hands them out, seen by a member or
    not (``ShareGroupApis.acquired_listeners`` of each broker's core, from its start), and where
    each partition's leader stands."""

    def __init__(self, sim: SimCluster, topic: str, deleted: Callable[[int], int] = lambda index: 0) -> None:
        """``deleted(index)``: the highest offset below which DeleteRecords was asked of partition
        ``index`` (0: never)."""
        self.sim = sim
        self.topic = topic
        self.deleted = deleted
        #: per partition, the offsets some leader handed out as often as the limit allows
        self.at_limit: dict[int, set[int]] = {}
        sim.on_core = self._watch
        for broker_id, node in sim.brokers.items():
            if node.core is not None:
                self._watch(broker_id, node.core)

    def _watch(self, broker_id: int, core: Any) -> None:
        def acquired(key: tuple[str, Any, int], ranges: list[Any]) -> None:
            group, topic_id, index = key
            if group != SHARE_GROUP or core.metadata.topic_name_of(topic_id) != self.topic:
                return
            at_limit = self.at_limit.setdefault(index, set())
            for r in ranges:
                if r.delivery_count >= LIMIT:
                    at_limit.update(range(r.first_offset, r.last_offset + 1))
        core.apis.share_apis.acquired_listeners.append(acquired)

    def at_the_limit(self, index: int) -> set[int]:
        """The offsets of partition ``index`` handed out the limit's times (archived unless accepted)."""
        return self.at_limit.get(index, set())

    def bounds(self, index: int) -> tuple[int, int] | None:
        """The log start and high watermark of partition ``index`` (None: no leader). The start is
        the highest of its replicas': records a DeleteRecords removed from an earlier leader, which
        the share-partition's start moved past there, may still be in a replica that leads now
        (Kafka's DeleteRecords is not undone either); and no lower than where DeleteRecords was
        asked: the replica whose log start it moved may have left the partition since (a
        reassignment deletes its log), while the records stay in the others'."""
        leader = self.sim.state(self.topic, index).leader
        partition = self.sim.partition(leader, self.topic, index) if leader in self.sim.brokers else None
        if partition is None or not partition.is_leader:
            return None
        starts = [p.log.log_start_offset for b in self.sim.brokers
                  if (p := self.sim.partition(b, self.topic, index)) is not None]
        return max(max(starts, default=partition.log.log_start_offset), self.deleted(index)), partition.high_watermark


class ShareWorkload:
    """Three members of one share group on ``topic``, leaving or stalling now and then while the
    faults last; then, once healed, reading until the group has settled everything."""

    def __init__(self, sim: SimCluster, topic: str, partitions: int, rng: random.Random,
                 fail: Callable[[str, str], None], note: Callable[[str], None], duration_ms: int,
                 count: Callable[[], int], leaders: LeaderDeliveries) -> None:
        """``count()``: how many partitions the topic has; ``leaders``: what its leaders handed
        out, and where they stand."""
        self.sim = sim
        self.note = note
        self.count = count
        self.leaders = leaders
        self.checker = ShareChecker(fail, note)
        self.members = [ShareMember(sim, f"s{n}", topic, partitions, random.Random(rng.random()), self.checker, note)
                        for n in (1, 2, 3)]
        self.nemesis = Members(sim, rng, self.members, duration_ms)

    def start(self) -> None:
        self.nemesis.start()

    def drain(self, within_ms: int) -> None:
        """After healing, with the writers stopped: the members accept everything they are handed
        until every record is settled (or archived), within ``within_ms`` (a Violation
        otherwise); then they stop."""
        for member in self.members:
            member.draining = True
        deadline = self.sim.now + within_ms
        while wrong := self.checker.unsettled(self.count(), self.leaders.bounds, self.leaders.at_the_limit):
            if self.sim.now >= deadline:
                raise Violation("the share group settles every record",
                                f"not within {within_ms} ms of healing: {'; '.join(wrong)}", self.sim.now)
            self.sim.advance(100)
        self.note(f"the share group settled every record: {len(self.checker.settled)} settled, "
                  f"{self.checker.deliveries} deliveries")
        for member in self.members:
            member.close()          # as a closing KafkaShareConsumer: its leave is written before the check
        # a leave that reached no coordinator (one that moved) ends with its member's session
        deadline = self.sim.now + SESSION_MS + QUIET_MS
        while self.sim.now < deadline and self._members_at_coordinator():
            self.sim.advance(100)
        self.sim.advance(QUIET_MS)

    def _members_at_coordinator(self) -> bool:
        """Whether a live broker still holds members of the group: their expiry is yet to be written."""
        for node in self.sim.brokers.values():
            core = node.core
            if core is None or not core.apis.group_apis.groups.owns(SHARE_GROUP):
                continue
            group = core.apis.share_apis.groups.get(SHARE_GROUP)
            if group is not None and group.members:
                return True
        return False
