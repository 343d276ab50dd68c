"""Incremental fetch sessions (KIP-227), both sides. Pure.

A fetcher of many partitions need not name them all in every Fetch, nor hear about them all in
every answer. Its first Fetch (session id 0, epoch 0) names every partition and asks for a
session; the leader keeps them in a :class:`FetchSession` and answers with its id. Each later
Fetch carries the id and the next epoch, and names only the partitions whose fetch position
changed (and those to forget); the leader answers only those with records, an error, or a changed high
watermark or log start offset. A wrong epoch or
an unknown session is answered with INVALID_FETCH_SESSION_EPOCH or FETCH_SESSION_ID_NOT_FOUND,
and the fetcher starts again with a full Fetch. Epoch -1 asks for no session (every Fetch full),
as librdkafka and kafka-python always do.

The leader's side is :class:`FetchSessionCache` (Kafka's FetchManager and FetchSessionCache,
``max.incremental.fetch.session.cache.slots`` sessions, least recently used evicted once idle for
``min.incremental.fetch.session.eviction.ms``, a follower's session before any consumer's). The
fetcher's side is :class:`SessionHandler` (Kafka's FetchSessionHandler).

Neither side looks at every partition of an idle session. Both follow a :class:`ChangeJournal`,
the keys of the partitions whose state changed (an append, a truncation, a high watermark, log
start offset or ISR move), in order: the leader reads a session's partitions that changed since
its last Fetch, those named in this one, and those that were not quiet then (``SessionScan``);
the fetcher builds its Fetch from the partitions that changed since its last one. A change no
key announces (a control request, retention) makes each start over with a full look.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from strandline.replication.partition import FetchClock, Partition
from strandline.replication.fetch_types import FetchedPartition, FetchedTopic, FetchPartitionRequest

NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
Key = tuple[str, int]
#: a partition's fetch position as a fetcher's session keeps it: (leader epoch, fetch offset, log
#: start offset, max bytes), compared as a whole
Position = tuple[int, int, int, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: it wraps to 1, never to 0 (a new session) or -1 (none)."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: the fetch position its fetcher last gave (read with the same
    attribute names as a Fetch request's partition), and what the fetcher last heard of it."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int | None = None
    leader_log_start_offset: int | None = None
    last_stable_offset: int | None = None
    seq: int = 0                # its place in the session's order (the leader reads in this order)

    def update(self, p: FetchPartitionRequest) -> None:
        if (p.fetch_offset, getattr(p, "current_leader_epoch", -1)) != (self.fetch_offset, self.current_leader_epoch):
            # a fetcher names a partition again when its position moved: it may have dropped the last
            # answer (a new leader epoch, a truncation), so it hears the partition's state again
            self.high_watermark = self.leader_log_start_offset = self.last_stable_offset = None
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.log_start_offset = getattr(p, "log_start_offset", -1)
        self.current_leader_epoch = getattr(p, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(p, "last_fetched_epoch", -1)

    def must_answer(self, entry: FetchedPartition) -> bool:
        """Whether an incremental answer carries this partition (records, an error, news, a
        replica to read from instead), and remember what the fetcher hears."""
        news = (entry["records"] or entry["error_code"] != ErrorCode.none
                or entry.get("preferred_read_replica", -1) >= 0
                or entry["high_watermark"] != self.high_watermark
                or entry["log_start_offset"] != self.leader_log_start_offset
                or entry["last_stable_offset"] != self.last_stable_offset)
        self.high_watermark = entry["high_watermark"]
        self.leader_log_start_offset = entry["log_start_offset"]
        self.last_stable_offset = entry["last_stable_offset"]
        return bool(news)

    def quiet(self, partition: Partition, replica_id: int, arriving: bool, deletes_waiting: bool, now_ms: int) -> bool:
        """Whether reading this partition would be for nothing: this broker leads it in the epoch
        the fetcher knows, the fetcher is where the readable end is (the HW for a consumer, the LEO
        for a follower), and it has heard the current high watermark and log start offset. A
        follower's fetch arriving so still counts for the ISR
        (:meth:`Partition.caught_up_follower_fetched`)."""
        hw = partition.high_watermark
        if (self.high_watermark != hw
                or (self.last_stable_offset != hw and self.last_stable_offset != partition.last_stable_offset())
                or partition.leader_id != partition.local_broker_id
                or self.leader_log_start_offset != partition.log.log_start_offset
                or (self.current_leader_epoch >= 0 and self.current_leader_epoch != partition.leader_epoch)):
            return False
        if replica_id < 0:
            return self.fetch_offset == hw
        leo = partition.log.log_end_offset
        if not arriving:
            return self.fetch_offset == leo
        # the full update also recomputes the HW (a lagging replica outside the ISR may have stopped
        # holding it back) and re-checks DeleteRecords waiting on followers: quick only when the HW
        # is at the LEO and nothing waits
        if hw != leo or deletes_waiting:
            return False
        return partition.caught_up_follower_fetched(replica_id, self.fetch_offset, self.log_start_offset, now_ms)


def session_partition(p: FetchPartitionRequest, seq: int = 0) -> SessionPartition:
    sp = SessionPartition(p.partition, p.fetch_offset, p.partition_max_bytes, seq=seq)
    sp.update(p)
    return sp


class ChangeJournal:
    """The keys of partitions whose state changed, in order, from a position on: what a reader
    that last looked at :attr:`position` must look at again. A change no key announces bumps
    :attr:`epoch`, and a reader too far behind (past ``limit`` entries) has fallen off: each then
    looks at everything once."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.keys: list[Key] = []
        self.base = 0           # the position of keys[0]
        self.epoch = 0
        self.limit = limit

    @property
    def position(self) -> int:
        return self.base + len(self.keys)

    def add(self, key: Key) -> None:
        self.keys.append(key)
        if len(self.keys) > 2 * self.limit:
            self._trim()

    def extend(self, keys: Iterable[Key]) -> None:
        self.keys.extend(keys)
        if len(self.keys) > 2 * self.limit:
            self._trim()

    def everything_changed(self) -> None:
        self.epoch += 1

    def since(self, position: int, epoch: int) -> list[Key] | None:
        """The keys changed since ``position`` (in ``epoch``), or None when the reader must look
        at everything."""
        if epoch != self.epoch or position < self.base:
            return None
        return self.keys[position - self.base:]

    def _trim(self) -> None:
        drop = len(self.keys) - self.limit
        del self.keys[:drop]
        self.base += drop


@dataclass(slots=True)
class SessionScan:
    """What the leader saw at a session's last Fetch: who read (replica id, isolation level), the
    journal's position and epoch before it looked, and the partitions that were not quiet
    (:meth:`SessionPartition.quiet`), which it looks at again each time. Every other partition of
    the session was quiet and nothing changed it since, so it still is."""

    reader: tuple[int, int]
    position: int
    epoch: int
    unsettled: frozenset[Key]


@dataclass
class FetchSession:
    id: int
    privileged: bool                        # a follower's
    partitions: dict[Key, SessionPartition]
    epoch: int                              # the epoch the next Fetch must carry
    last_used_ms: int
    next_seq: int = 0
    scan: SessionScan | None = None         # the leader's last look (None: look at everything)
    clock: FetchClock = field(default_factory=FetchClock)   # when a follower's Fetch of it last came
    dropped: list[Key] = field(default_factory=list)        # forgotten since: their replicas lose the clock

    def take_seq(self) -> int:
        self.next_seq += 1
        return self.next_seq

    def forget(self, key: Key) -> None:
        """Leave ``key`` out of the session (its fetcher forgot it, or may no longer fetch it)."""
        if self.partitions.pop(key, None) is not None:
            self.dropped.append(key)

    def keys_to_read(self, journal: ChangeJournal, scan: SessionScan | None, named: Iterable[Key] = ()) -> list[Key]:
        """The session's partitions the leader reads, in the session's order (the order a full read
        takes): every one when ``scan`` is None or the journal cannot say what changed since it;
        else those not quiet at ``scan``, those changed since, and ``named``."""
        parts = self.partitions
        changed = journal.since(scan.position, scan.epoch) if scan is not None else None
        if scan is None or changed is None:
            return list(parts)
        keys = set(scan.unsettled)
        keys.update(changed)
        keys.update(named)
        present = [key for key in keys if key in parts]
        present.sort(key=lambda key: parts[key].seq)
        return present


@dataclass
class FetchContext:
    """How one Fetch is served: which partitions to read, and how to shape the answer. For an
    incremental Fetch ``wanted`` holds only the partitions it named (as the session keeps them),
    and :attr:`session_keys` the session, whose partitions the leader reads as they changed."""

    wanted: list[tuple[str, FetchPartitionRequest]] = field(default_factory=list)
    session: FetchSession | None = None
    incremental: bool = False
    error: ErrorCode = ErrorCode.none

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else NO_SESSION

    @property
    def session_keys(self) -> FetchSession | None:
        """The session of an incremental Fetch, whose partitions are read (not only ``wanted``);
        None for a full one. (The name is older than the change journal: it once held the keys.)"""
        return self.session if self.incremental else None

    def answer(self, topics: list[FetchedTopic]) -> list[FetchedTopic]:
        """The answer's topics: every partition read for a full Fetch (remembered by a new
        session), only those with news for an incremental one. A partition that returned records
        goes to the end of the session, so that a later Fetch over the size limit serves the
        others first."""
        if self.session is None:
            return topics
        parts = self.session.partitions
        kept: list[FetchedTopic] = []
        moved: list[Key] = []
        for t in topics:
            entries = []
            for entry in t["partitions"]:
                key = (t["topic"], entry["partition_index"])
                sp = parts.get(key)
                if sp is None:
                    entries.append(entry)
                    continue
                if sp.must_answer(entry) or not self.incremental:
                    entries.append(entry)
                if entry["records"] and self.incremental:
                    moved.append(key)
            if entries:
                kept.append({"topic": t["topic"], "partitions": entries})
        for key in moved:
            sp = parts.pop(key)
            sp.seq = self.session.take_seq()
            parts[key] = sp
        return kept


class FetchSessionCache:
    """The leader's sessions, by id."""

    def __init__(self, config: Any, rng: Any) -> None:
        self.config = config
        self.rng = rng
        self.sessions: dict[int, FetchSession] = {}      # least recently used first
        self.evictions = 0

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def context(self, session_id: int, epoch: int, wanted: list[tuple[str, FetchPartitionRequest]],
                forgotten: Iterable[Key],
                privileged: bool, now_ms: int) -> FetchContext:
        """The context of a Fetch carrying ``session_id`` and ``epoch``, naming ``wanted`` ((topic,
        partition request) pairs) and ``forgotten`` partitions."""
        if epoch == FINAL_EPOCH:
            self.sessions.pop(session_id, None)
            return FetchContext(wanted)
        if epoch == INITIAL_EPOCH:
            self.sessions.pop(session_id, None)
            session = self._create(wanted, privileged, now_ms)
            return FetchContext(wanted, session)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(error=ErrorCode.invalid_fetch_session_epoch)
        parts = session.partitions
        for key in forgotten:
            session.forget(key)
        named: list[tuple[str, FetchPartitionRequest]] = []
        for name, p in wanted:
            key = (name, p.partition)
            sp = parts.get(key)
            if sp is not None:
                sp.update(p)
            else:
                sp = parts[key] = session_partition(p, session.take_seq())
            named.append((name, sp))
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        self.sessions[session_id] = self.sessions.pop(session_id)
        return FetchContext(named, session, incremental=True)

    def _create(self, wanted: list[tuple[str, FetchPartitionRequest]], privileged: bool, now_ms: int) -> FetchSession | None:
        if not wanted or not self._room(privileged, now_ms):
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = self.rng.randint(1, 0x7FFFFFFF)
        parts: dict[Key, SessionPartition] = {}
        for seq, (name, p) in enumerate(wanted, 1):
            parts[(name, p.partition)] = session_partition(p, seq)
        session = FetchSession(session_id, privileged, parts, next_epoch(INITIAL_EPOCH), now_ms,
                               next_seq=len(wanted))
        self.sessions[session_id] = session
        return session

    def _room(self, privileged: bool, now_ms: int) -> bool:
        """Whether a new session fits, evicting one if need be: the least recently used that has
        been idle long enough, or, for a follower, any consumer's."""
        if len(self.sessions) < self.config["max.incremental.fetch.session.cache.slots"]:
            return True
        idle_ms = self.config["min.incremental.fetch.session.eviction.ms"]
        for session_id, s in self.sessions.items():
            if now_ms - s.last_used_ms >= idle_ms or (privileged and not s.privileged):
                del self.sessions[session_id]
                self.evictions += 1
                return True
        return False


@dataclass
class SessionHandler:
    """A fetcher's side of its session with one leader. :meth:`build` says what the next Fetch
    carries; :meth:`succeeded` or :meth:`failed` what its answer did to the session."""

    session_id: int = NO_SESSION
    epoch: int = INITIAL_EPOCH
    sent: dict[Key, Position] = field(default_factory=dict)     # each partition's position in the session
    _pending: tuple[bool, dict[Key, Position], list[Key]] | None = None     # (full, named, forgotten)

    def build(self, positions: dict[Key, Position]) -> tuple[int, int, dict[Key, Position], list[Key]]:
        """Session id, epoch, the partitions to name (with their positions) and those to forget,
        for a Fetch of ``positions`` (each partition's fetch position, compared as a whole)."""
        if self.epoch == INITIAL_EPOCH:
            self._pending = (True, dict(positions), [])
            return self.session_id, INITIAL_EPOCH, positions, []
        changed = {k: v for k, v in positions.items() if self.sent.get(k) != v}
        forgotten = [k for k in self.sent if k not in positions]
        self._pending = (False, changed, forgotten)
        return self.session_id, self.epoch, changed, forgotten

    def build_changes(self, changed: dict[Key, Position], forgotten: list[Key]) -> tuple[int, int, dict[Key, Position],
                                                                                      list[Key]]:
        """As :meth:`build` for an incremental Fetch whose caller knows what changed: ``changed``
        the partitions whose position differs from what the session has, ``forgotten`` those it
        has that are fetched no more (every other partition is where the session has it)."""
        if self.epoch == INITIAL_EPOCH:
            raise ValueError("a new session's first Fetch names every partition: use build()")
        self._pending = (False, changed, forgotten)
        return self.session_id, self.epoch, changed, forgotten

    def succeeded(self, error: ErrorCode, session_id: int) -> None:
        """The answer came; an error of the whole Fetch (the session's) means a full Fetch next."""
        if self._pending is None:        # started over since this Fetch was sent: the next one is full
            return
        full, named, forgotten = self._pending
        self._pending = None
        if error is not ErrorCode.none:
            self.failed()
            return
        if full:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != NO_SESSION else INITIAL_EPOCH
            self.sent = named if session_id != NO_SESSION else {}
            return
        self.epoch = next_epoch(self.epoch)
        for key in forgotten:
            self.sent.pop(key, None)
        self.sent.update(named)

    def failed(self) -> None:
        """No answer, or one we could not use: the next Fetch is full, and replaces the session."""
        self._pending = None
        self.epoch = INITIAL_EPOCH
        self.sent = {}
