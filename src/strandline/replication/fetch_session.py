"""Incremental fetch sessions (KIP-227), both sides. Pure.

A fetcher of many partitions need not name them all in every Fetch, nor hear about them all in
every answer. Its first Fetch (session id 0, epoch 0) names every partition and asks for a
session; the leader keeps them in a :class:`FetchSession` and answers with its id. Each later
Fetch carries the id and the next epoch, and names only the partitions whose fetch position
changed (and those to forget); the leader reads every partition of the session, and answers only
those with records, an error, or a changed high watermark or log start offset. A wrong epoch or
an unknown session is answered with INVALID_FETCH_SESSION_EPOCH or FETCH_SESSION_ID_NOT_FOUND,
and the fetcher starts again with a full Fetch. Epoch -1 asks for no session (every Fetch full),
as librdkafka and kafka-python always do.

The leader's side is :class:`FetchSessionCache` (Kafka's FetchManager and FetchSessionCache,
``max.incremental.fetch.session.cache.slots`` sessions, least recently used evicted once idle for
``min.incremental.fetch.session.eviction.ms``, a follower's session before any consumer's). The
fetcher's side is :class:`SessionHandler` (Kafka's FetchSessionHandler).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
Key = tuple[str, int]


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

    def update(self, p: Any) -> None:
        if (p.fetch_offset, getattr(p, "current_leader_epoch", -1)) != (self.fetch_offset, self.current_leader_epoch):
            # a fetcher names a partition again when its position moved: it may have dropped the last
            # answer (a new leader epoch, a truncation), so it hears the partition's state again
            self.high_watermark = self.leader_log_start_offset = self.last_stable_offset = None
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.log_start_offset = getattr(p, "log_start_offset", -1)
        self.current_leader_epoch = getattr(p, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(p, "last_fetched_epoch", -1)

    def must_answer(self, entry: dict) -> bool:
        """Whether an incremental answer carries this partition (records, an error, news), and
        remember what the fetcher hears."""
        news = (entry["records"] or entry["error_code"] != ErrorCode.none
                or entry["high_watermark"] != self.high_watermark
                or entry["log_start_offset"] != self.leader_log_start_offset
                or entry["last_stable_offset"] != self.last_stable_offset)
        self.high_watermark = entry["high_watermark"]
        self.leader_log_start_offset = entry["log_start_offset"]
        self.last_stable_offset = entry["last_stable_offset"]
        return bool(news)


def session_partition(p: Any) -> SessionPartition:
    sp = SessionPartition(p.partition, p.fetch_offset, p.partition_max_bytes)
    sp.update(p)
    return sp


@dataclass
class FetchSession:
    id: int
    privileged: bool                        # a follower's
    partitions: dict[Key, SessionPartition]
    epoch: int                              # the epoch the next Fetch must carry
    last_used_ms: int


@dataclass
class FetchContext:
    """How one Fetch is served: which partitions to read, and how to shape the answer."""

    wanted: list[tuple[str, Any]] = field(default_factory=list)
    session: FetchSession | None = None
    incremental: bool = False
    error: ErrorCode = ErrorCode.none

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else NO_SESSION

    @property
    def session_keys(self) -> tuple[Key, ...] | None:
        """The session's partitions, in order, for an incremental Fetch (``wanted`` holds them)."""
        return tuple(self.session.partitions) if self.incremental and self.session is not None else None

    def answer(self, topics: list[dict]) -> list[dict]:
        """The answer's topics: every partition read for a full Fetch (remembered by a new
        session), only those with news for an incremental one. A partition that returned records
        goes to the end of the session, so that a later Fetch over the size limit serves the
        others first."""
        if self.session is None:
            return topics
        parts = self.session.partitions
        kept: list[dict] = []
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
            parts[key] = parts.pop(key)
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

    def context(self, session_id: int, epoch: int, wanted: list[tuple[str, Any]], forgotten: Iterable[Key],
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
            parts.pop(key, None)
        for name, p in wanted:
            key = (name, p.partition)
            if key in parts:
                parts[key].update(p)
            else:
                parts[key] = session_partition(p)
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        self.sessions[session_id] = self.sessions.pop(session_id)
        return FetchContext([(key[0], sp) for key, sp in parts.items()], session, incremental=True)

    def _create(self, wanted: list[tuple[str, Any]], privileged: bool, now_ms: int) -> FetchSession | None:
        if not wanted or not self._room(privileged, now_ms):
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = self.rng.randint(1, 0x7FFFFFFF)
        parts: dict[Key, SessionPartition] = {}
        for name, p in wanted:
            parts[(name, p.partition)] = session_partition(p)
        session = FetchSession(session_id, privileged, parts, next_epoch(INITIAL_EPOCH), now_ms)
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
    sent: dict[Key, tuple] = field(default_factory=dict)        # each partition's position in the session
    _pending: tuple | None = None

    def build(self, positions: dict[Key, tuple]) -> tuple[int, int, dict[Key, tuple], list[Key]]:
        """Session id, epoch, the partitions to name (with their positions) and those to forget,
        for a Fetch of ``positions`` (each partition's fetch position, compared as a whole)."""
        if self.epoch == INITIAL_EPOCH:
            self._pending = (True, dict(positions), [])
            return self.session_id, INITIAL_EPOCH, positions, []
        changed = {k: v for k, v in positions.items() if self.sent.get(k) != v}
        forgotten = [k for k in self.sent if k not in positions]
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
