"""``Partition``: the one owner of every per-partition replication rule on a broker.

It holds the local log, the leader/follower role with its leader epoch, the assigned replicas
and the ISR, and the high watermark; its log keeps the producer state (``log.producer_state``).
It is the only writer of the high watermark: restored from the checkpoint
(:meth:`Partition.restore_high_watermark`), moved by the ISR as leader
(:meth:`Partition.maybe_increment_high_watermark`), taken from the leader as follower
(:meth:`Partition.update_follower_high_watermark`), and cut with the log
(:meth:`Partition.truncate_to`, :meth:`Partition.truncate_fully_and_start_at`). It is pure: it never does
network I/O or reads a clock (time arrives as ``now_ms``), and expected outcomes are
``ErrorCode`` values, never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from kio.schema.errors import ErrorCode

from strandline.coordination.znodes import LeaderAndIsr
from strandline.log.disk import FileRegion
from strandline.log.loader import restore_unreplicated_transactions
from strandline.log.log import Log
from strandline.log.producer_state import BatchMetadata, ProducerStateManager, VerificationGuard
from strandline.protocol.records import BatchHeader, set_log_append_time

NO_LEADER = -1


class FetchClock:
    """When a follower's incremental fetch session last arrived (``ms``). A replica state that the
    session left *settled* (its follower at the leader's LEO, in the ISR, nothing changed since)
    points to it: each of the session's later fetches counts for that replica as Kafka's quick
    update would (ISR-2 rule (a)), without the leader looking at the partition."""

    __slots__ = ("ms",)

    def __init__(self, ms: int = 0) -> None:
        self.ms = ms


class ReplicaState:
    """What the leader knows of one follower, from that follower's fetches.

    ``last_caught_up_time_ms`` and ``last_fetch_time_ms`` read through ``quiet_clock`` while one
    is attached (:class:`FetchClock`): the later of the stored time and the session's last fetch."""

    __slots__ = ("broker_id", "log_end_offset", "_caught_up_ms", "last_fetch_leader_log_end_offset",
                 "_fetch_ms", "log_start_offset", "quiet_clock")

    def __init__(self, broker_id: int, log_end_offset: int = -1, last_caught_up_time_ms: int = 0,
                 last_fetch_leader_log_end_offset: int = 0, last_fetch_time_ms: int = 0,
                 log_start_offset: int = -1) -> None:
        self.broker_id = broker_id
        self.log_end_offset = log_end_offset
        self._caught_up_ms = last_caught_up_time_ms
        self.last_fetch_leader_log_end_offset = last_fetch_leader_log_end_offset
        self._fetch_ms = last_fetch_time_ms
        self.log_start_offset = log_start_offset
        self.quiet_clock: FetchClock | None = None

    @property
    def last_caught_up_time_ms(self) -> int:
        clock = self.quiet_clock
        return self._caught_up_ms if clock is None or clock.ms < self._caught_up_ms else clock.ms

    @last_caught_up_time_ms.setter
    def last_caught_up_time_ms(self, value: int) -> None:
        self._caught_up_ms = value

    @property
    def last_fetch_time_ms(self) -> int:
        clock = self.quiet_clock
        return self._fetch_ms if clock is None or clock.ms < self._fetch_ms else clock.ms

    @last_fetch_time_ms.setter
    def last_fetch_time_ms(self, value: int) -> None:
        self._fetch_ms = value

    def detach_clock(self) -> FetchClock | None:
        """Detach the quiet clock, keeping the times it gave; returns it (None if none was)."""
        clock = self.quiet_clock
        if clock is not None:
            self._caught_up_ms = self.last_caught_up_time_ms
            self._fetch_ms = self.last_fetch_time_ms
            self.quiet_clock = None
        return clock

    def __repr__(self) -> str:
        return (f"ReplicaState(broker_id={self.broker_id}, log_end_offset={self.log_end_offset}, "
                f"last_caught_up_time_ms={self.last_caught_up_time_ms}, "
                f"last_fetch_leader_log_end_offset={self.last_fetch_leader_log_end_offset}, "
                f"last_fetch_time_ms={self.last_fetch_time_ms}, log_start_offset={self.log_start_offset})")


class LeaderAppend(NamedTuple):
    error: ErrorCode
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    message: str | None = None


class ReadResult(NamedTuple):
    error: ErrorCode
    records: bytes | FileRegion = b""   # a FileRegion: a segment's tail for the shell to sendfile
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1


@dataclass
class Partition:
    topic: str
    index: int
    local_broker_id: int
    log: Log
    replicas: tuple[int, ...] = ()
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = 0
    controller_epoch: int = 0
    high_watermark: int = 0
    leader_epoch_start_offset: int = 0
    replica_lag_time_max_ms: int = 30000
    log_append_time: bool = False
    pending_isr: tuple[int, ...] | None = None
    """An ISR this leader wrote to ZooKeeper whose outcome it does not know yet."""
    isr_outcome_unknown: bool = False
    """The write's answer was lost (connection loss, timeout): the leader is reading the state back."""
    isr_update_failed: bool = False
    """The state in ZooKeeper is not the one this leader knows: its view is stale (NET-4)."""
    remote_replicas: dict[int, ReplicaState] = field(default_factory=dict)
    elr_min_isr: Callable[[], int] | None = field(default=None, repr=False, compare=False)
    """With eligible leader replicas (KIP-966): the topic's min.insync.replicas; below it, or below
    the replication factor if smaller (Kafka's effective minimum), the ISR holds the high
    watermark where it is."""

    @property
    def producer_state(self) -> ProducerStateManager:
        return self.log.producer_state

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR and a pending change together: while an expansion may be in ZooKeeper already,
        its new member must count for the high watermark (Kafka's maximal ISR, KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    @property
    def accepts_writes(self) -> bool:
        """A leader appends only while it knows its partition state is current: not after an ISR
        change failed or while the outcome of one is unknown (NET-4)."""
        return self.is_leader and not self.isr_update_failed and not self.isr_outcome_unknown

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -- role changes -------------------------------------------------------------------

    def make_leader(self, state: LeaderAndIsr, replicas: tuple[int, ...], now_ms: int) -> bool:
        """Become leader in ``state.leader_epoch``; returns whether this is a new leadership.

        A broker that already led (the controller only changed the ISR, in a new epoch) keeps what
        it knows of its followers; a new leader knows nothing of them until they fetch."""
        was_leader = self.is_leader
        new_epoch = state.leader_epoch != self.leader_epoch
        self._install(state, replicas)
        if new_epoch:
            # The leader records its epoch at its LEO before any write (KAFKA-7415).
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
        known = self.remote_replicas if was_leader else {}
        # As Kafka's makeLeader: followers in the new ISR count as caught up now, the others not
        # (a follower the controller removed, e.g. a dead one, holds the high watermark back no
        # more); a leader that already led keeps their log end offsets, a new one learns them as
        # they fetch.
        self.remote_replicas = {
            r: ReplicaState(r, log_end_offset=known[r].log_end_offset if r in known else -1,
                            last_caught_up_time_ms=now_ms if r in self.isr else 0,
                            last_fetch_leader_log_end_offset=self.leader_epoch_start_offset,
                            last_fetch_time_ms=now_ms)
            for r in self.replicas if r != self.local_broker_id
        }
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset)
        self.maybe_increment_high_watermark(now_ms)
        return not was_leader

    def make_follower(self, state: LeaderAndIsr, replicas: tuple[int, ...]) -> bool:
        changed = self.leader_id != state.leader or self.leader_epoch != state.leader_epoch
        self._install(state, replicas)
        self.remote_replicas = {}
        return changed

    def _install(self, state: LeaderAndIsr, replicas: tuple[int, ...]) -> None:
        self.replicas = tuple(replicas)
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = tuple(state.isr)
        self.zk_version = state.zk_version
        self.controller_epoch = state.controller_epoch
        self.pending_isr = None
        self.isr_outcome_unknown = False
        self.isr_update_failed = False

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing: -1 skips the check; older is FENCED, newer is UNKNOWN."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    # -- high watermark --------------------------------------------------------------------

    def restore_high_watermark(self, checkpointed: int) -> None:
        """The high watermark read from ``replication-offset-checkpoint`` when the replica is
        opened, kept within the log's offsets; the transactions above it are open again."""
        log = self.log
        self.high_watermark = min(max(checkpointed, log.log_start_offset), log.log_end_offset)
        restore_unreplicated_transactions(log, self.high_watermark)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """A follower takes the high watermark its leader's Fetch answer names, up to its own log
        end offset; it never moves back (Kafka's ``updateFollowerHighWatermark``). Returns whether
        it moved."""
        log = self.log
        new_hw = min(log.log_end_offset, leader_high_watermark)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            log.producer_state.on_high_watermark_updated(new_hw)
            return True
        return False

    def truncate_to(self, offset: int) -> int | None:
        """A follower cuts its log at ``offset`` (Kafka's ``Partition.truncateTo``): the high
        watermark follows the log end down, and transactions above it are open again. Returns
        the log end offset before, or None when nothing above ``offset`` was cut (an empty last
        epoch still goes, EPO-2)."""
        log = self.log
        if offset >= log.log_end_offset:
            log.truncate_to(offset)
            return None
        before = log.log_end_offset
        log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, log.log_end_offset)
        restore_unreplicated_transactions(log, self.high_watermark)
        return before

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """A follower behind its leader's log start offset drops its log and starts it, and its
        high watermark, at ``offset`` (Kafka's ``Partition.truncateFullyAndStartAt``)."""
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset

    def check_enough_replicas_reach_offset(self, required_offset: int, min_insync_replicas: int) -> tuple[bool, ErrorCode]:
        """Whether an acks=all write that ends below ``required_offset`` is acknowledged (Kafka's
        ``Partition.checkEnoughReplicasReachOffset``): (True, NONE) once the high watermark
        reaches it (ACK-1), (True, NOT_ENOUGH_REPLICAS_AFTER_APPEND) when the ISR is smaller than
        ``min_insync_replicas`` by then (ACK-2), (False, NONE) while it does not; (False,
        NOT_LEADER_OR_FOLLOWER) when this broker no longer leads, or its view is stale (NET-4)."""
        if not self.is_leader or self.isr_update_failed:
            return False, ErrorCode.not_leader_or_follower
        if self.high_watermark >= required_offset:
            if len(self.isr) < min_insync_replicas:
                return True, ErrorCode.not_enough_replicas_after_append
            return True, ErrorCode.none
        return False, ErrorCode.none

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW = min LEO over the (maximal) ISR and over followers caught up within the lag time
        (KAFKA-4485), the leader's own LEO included; it never moves back (REP-3). A leader whose
        view is stale moves it no more."""
        if not self.is_leader or self.isr_update_failed:
            return False
        if self.elr_min_isr is not None and len(self.isr) < min(self.elr_min_isr(), len(self.replicas)):
            return False        # KIP-966: an ISR below the minimum moves it no more (its ELR keeps it)
        new_hw = self.log.log_end_offset
        isr = self.maximal_isr
        for broker_id, replica in self.remote_replicas.items():
            caught_up = replica.log_end_offset >= 0 and \
                now_ms - replica.last_caught_up_time_ms <= self.replica_lag_time_max_ms
            if broker_id in isr or caught_up:
                new_hw = min(new_hw, max(replica.log_end_offset, 0))
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.producer_state.on_high_watermark_updated(new_hw)
            return True
        return False

    # -- follower state on the leader (ISR-1..4) ---------------------------------------------

    def update_follower_fetch_state(self, follower_id: int, fetch_offset: int, now_ms: int,
                                    log_start_offset: int = -1) -> bool:
        """Record a follower's fetch: its LEO is the fetch offset (and its log start offset the one
        it reports); lastCaughtUpTimeMs follows ISR-2's two rules. Returns whether the high
        watermark advanced."""
        replica = self.remote_replicas.get(follower_id)
        if replica is None:
            return False
        if log_start_offset >= 0:
            replica.log_start_offset = log_start_offset
        leader_end_offset = self.log.log_end_offset
        if fetch_offset >= leader_end_offset:
            replica.last_caught_up_time_ms = max(replica.last_caught_up_time_ms, now_ms)       # rule (a)
        elif fetch_offset >= replica.last_fetch_leader_log_end_offset:
            replica.last_caught_up_time_ms = max(replica.last_caught_up_time_ms,
                                                 replica.last_fetch_time_ms)                    # rule (b)
        replica.log_end_offset = fetch_offset
        replica.last_fetch_leader_log_end_offset = leader_end_offset
        replica.last_fetch_time_ms = now_ms
        return self.maybe_increment_high_watermark(now_ms)

    def caught_up_follower_fetched(self, follower_id: int, fetch_offset: int, log_start_offset: int,
                                   now_ms: int) -> bool:
        """The quick form of :meth:`update_follower_fetch_state` for a follower of the ISR that
        fetches again from the leader's LEO, where it already was, with the log start offset it
        already reported: only its fetch times move (ISR-2 rule (a)); nothing else can change (its
        LEO, hence the high watermark, stays; it is in the ISR already). False, with nothing
        recorded, when that is not the case: the full update is needed."""
        replica = self.remote_replicas.get(follower_id)
        leader_end_offset = self.log.log_end_offset
        if (replica is None or fetch_offset != leader_end_offset or replica.log_end_offset != fetch_offset
                or follower_id not in self.isr or (0 <= log_start_offset != replica.log_start_offset)):
            return False
        if now_ms > replica.last_caught_up_time_ms:
            replica.last_caught_up_time_ms = now_ms
        replica.last_fetch_leader_log_end_offset = leader_end_offset
        replica.last_fetch_time_ms = now_ms
        return True

    def take_quiet_clock(self, replica_id: int, clock: FetchClock | None) -> bool:
        """Before a follower's fetch of this partition is looked at: its replica state takes back
        the times a session's quiet clock gave it. True when that was another session's clock (a
        replaced one, or the same follower fetching this partition otherwise): that session must
        look at the partition again."""
        replica = self.remote_replicas.get(replica_id)
        return replica is not None and replica.quiet_clock is not None and replica.detach_clock() is not clock

    def attach_quiet_clock(self, replica_id: int, clock: FetchClock) -> None:
        """A follower's session left this partition settled: its later fetches count through ``clock``."""
        self.remote_replicas[replica_id].quiet_clock = clock

    def release_quiet_clock(self, replica_id: int, clock: FetchClock) -> None:
        """The session of ``clock`` forgot this partition: its follower's fetches of it count no more."""
        replica = self.remote_replicas.get(replica_id)
        if replica is not None and replica.quiet_clock is clock:
            replica.detach_clock()

    def low_watermark(self, alive: set[int]) -> int:
        """The lowest log start offset of the replicas of ``alive`` brokers that reported one, this
        leader's included (Kafka's lowWatermarkIfLeader): what DeleteRecords waits for."""
        starts = [r.log_start_offset for r in self.remote_replicas.values()
                  if r.broker_id in alive and r.log_start_offset >= 0]
        return min([self.log.log_start_offset, *starts])

    def isr_to_expand(self, follower_id: int) -> tuple[int, ...] | None:
        """ISR-4: a follower outside the ISR joins once its LEO reaches the HW and the start of the
        leader's current epoch (KAFKA-7128). Returns the proposed ISR, or None."""
        replica = self.remote_replicas.get(follower_id)
        if not self.accepts_writes or self.pending_isr is not None or replica is None or follower_id in self.isr:
            return None
        if replica.log_end_offset >= self.high_watermark and \
                replica.log_end_offset >= self.leader_epoch_start_offset:
            return self.isr + (follower_id,)
        return None

    def out_of_sync_replicas(self, now_ms: int) -> tuple[int, ...]:
        """ISR-1: followers whose LEO differs from the leader's and that have not caught up within
        ``replica.lag.time.max.ms``. The leader itself is never out of sync."""
        leo = self.log.log_end_offset
        return tuple(r for r in self.isr if r != self.local_broker_id and (
            (replica := self.remote_replicas.get(r)) is None
            or (replica.log_end_offset != leo
                and now_ms - replica.last_caught_up_time_ms > self.replica_lag_time_max_ms)))

    def isr_to_shrink(self, now_ms: int) -> tuple[int, ...] | None:
        """ISR-3: the ISR the isr-expiration task proposes, or None when nobody lags (or a change
        is already on its way)."""
        if not self.accepts_writes or self.pending_isr is not None:
            return None
        lagging = self.out_of_sync_replicas(now_ms)
        if not lagging:
            return None
        return tuple(r for r in self.isr if r not in lagging)

    def apply_isr(self, isr: tuple[int, ...], zk_version: int, now_ms: int) -> bool:
        """Install an ISR that is now in ZooKeeper (ISR-5); shrinking may advance HW."""
        self.isr = tuple(isr)
        self.zk_version = zk_version
        self.pending_isr = None
        self.isr_outcome_unknown = False
        return self.maybe_increment_high_watermark(now_ms)

    # -- leader append -------------------------------------------------------------------

    def append_records_to_leader(self, records: bytearray, header: BatchHeader, required_acks: int,
                                 min_insync_replicas: int, now_ms: int, *, verify: bool = False,
                                 guard: VerificationGuard | None = None) -> LeaderAppend:
        """Append one validated batch as leader, with idempotence and min.insync.replicas checks.
        ``verify`` (``transaction.partition.verification.enable``, a client's batch): a
        transactional batch that would open its producer's transaction needs ``guard``, the
        verification the coordinator confirmed, to be the one still in flight (INVALID_TXN_STATE
        otherwise: a marker or another batch came in between, KIP-890)."""
        if not self.accepts_writes:
            return LeaderAppend(ErrorCode.not_leader_or_follower)
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            return LeaderAppend(ErrorCode.not_enough_replicas,
                                message=f"ISR {list(self.isr)} is smaller than min.insync.replicas {min_insync_replicas}")
        check = self.producer_state.check(header)
        if check.error is not ErrorCode.none:
            return LeaderAppend(check.error)
        if check.duplicate is not None:
            dup: BatchMetadata = check.duplicate
            return LeaderAppend(ErrorCode.none, dup.first_offset, dup.last_offset)
        if verify and not self.producer_state.verified(header, guard):
            return LeaderAppend(ErrorCode.invalid_txn_state, message="Record was not part of an ongoing transaction")
        append_time = -1
        if self.log_append_time:
            set_log_append_time(records, 0, header, now_ms)
            append_time = now_ms
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms)
        self.maybe_increment_high_watermark(now_ms)
        return LeaderAppend(ErrorCode.none, info.first_offset, info.last_offset, append_time)

    # -- reads -------------------------------------------------------------------------------

    def read_records(self, fetch_offset: int, max_bytes: int, current_leader_epoch: int,
                     *, committed_only: bool, min_one_batch: bool, stable_only: bool = False,
                     leader_only: bool = True) -> ReadResult:
        """Read whole batches for a consumer (below HW; below the last stable offset when
        ``stable_only``, read_committed) or a follower (below LEO). A follower's replica serves a
        consumer too when not ``leader_only`` (KIP-392), below its own high watermark."""
        if leader_only and not self.is_leader:
            return ReadResult(ErrorCode.not_leader_or_follower)
        error = self.check_leader_epoch(current_leader_epoch)
        if error is not ErrorCode.none:
            return ReadResult(error)
        log = self.log
        hw, lso, leo = self.high_watermark, log.log_start_offset, log.log_end_offset
        if fetch_offset < lso or fetch_offset > leo:
            return ReadResult(ErrorCode.offset_out_of_range, b"", hw, lso, leo)
        max_offset = hw if committed_only else leo
        if stable_only:
            max_offset = self.last_stable_offset()
        if fetch_offset >= max_offset or max_bytes <= 0 and not min_one_batch:
            return ReadResult(ErrorCode.none, b"", hw, lso, leo)
        data = log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch, regions=True)
        return ReadResult(ErrorCode.none, data, hw, lso, leo)

    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and its marker replicated
        (KIP-98); the high watermark when no transaction is open."""
        return self.log.last_stable_offset(self.high_watermark)
