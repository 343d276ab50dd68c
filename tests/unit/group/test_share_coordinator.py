"""The share coordinator's pure core (KIP-932): records in Kafka's formats, Kafka's errors and
fencing for Initialize/Read/Write/DeleteShareGroupState, batches merged, state replayed."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from strandline.group.share import records as rec
from strandline.group.share.coordinator import NO_EPOCH, ShareCoordinator, merge_batches, partition_of
from strandline.group.share.partition import RecordState, StateBatch
from strandline.group.share.records import ShareStateKey

TOPIC = uuid.UUID(int=7)
KEY = ShareStateKey("g", TOPIC, 0)
A, ACKED, ARCH = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


def coordinator():
    log: list[tuple[bytes, bytes | None]] = []

    def append(index, records, done, now_ms):
        log.extend(records)
        return done(ErrorCode.none, now_ms)
    c = ShareCoordinator(5, append, lambda topic_id: 2 if topic_id == TOPIC else None)
    c.load_partition(partition_of(KEY, 5), [])
    return c, log


def answer(call, *args):
    got = []
    call(*args, lambda *a: got.append(a) or [], 0)
    return got[0]


def test_records_round_trip_in_kafkas_layout():
    key = rec.encode_key(KEY)
    assert key[:2] == b"\x00\x00" and key[2:4] == b"\x00\x01" and key[4:5] == b"g" and len(key) == 4 + 1 + 16 + 4
    assert rec.decode_key(key) == (rec.SNAPSHOT, KEY)
    snap = rec.ShareSnapshot(3, 1, 5, 40, 111, 222, (StateBatch(40, 41, A, 2), StateBatch(42, 42, ARCH, 5)))
    assert rec.decode_snapshot(rec.encode_snapshot(snap)) == snap
    update = rec.ShareUpdate(3, 6, -1, (StateBatch(40, 40, ACKED, 2),))
    assert rec.decode_update(rec.encode_update(update)) == update


def test_partition_of_hashes_kafkas_coordinator_key():
    # Kafka: Utils.abs("g:AAAAAAAAAAAAAAAAAAAABw:0".hashCode()) % 50
    h = 0
    for ch in "g:AAAAAAAAAAAAAAAAAAAABw:0":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    assert partition_of(KEY, 50) == abs(h) % 50


def test_read_and_write_need_an_initialized_share_partition_and_fence_older_epochs():
    c, log = coordinator()
    assert answer(c.read, KEY, 0)[0] is ErrorCode.invalid_request
    assert answer(c.write, KEY, 0, 0, 5, [])[0] is ErrorCode.invalid_request
    assert answer(c.initialize, KEY, 0, 5)[0] is ErrorCode.none
    error, _, state, _ = answer(c.read, KEY, 2)              # a leader in epoch 2 takes it
    assert error is ErrorCode.none and (state.start_offset, state.leader_epoch) == (5, 2)
    assert answer(c.write, KEY, 0, 1, 7, [])[0] is ErrorCode.fenced_leader_epoch
    assert answer(c.read, KEY, 1)[0] is ErrorCode.fenced_leader_epoch
    assert answer(c.write, KEY, 0, 2, 5, [StateBatch(5, 9, A, 1)])[0] is ErrorCode.none
    assert answer(c.write, KEY, 0, 2, 7, [StateBatch(7, 7, ACKED, 1)])[0] is ErrorCode.none
    assert c.states[KEY].batches == (StateBatch(7, 7, ACKED, 1), StateBatch(8, 9, A, 1))
    assert answer(c.initialize, KEY, 1, 0)[0] is ErrorCode.none          # a new state epoch starts afresh
    assert answer(c.write, KEY, 0, 2, 0, [])[0] is ErrorCode.fenced_state_epoch
    assert answer(c.read, ShareStateKey("g", uuid.UUID(int=8), 0), 0)[0] in (
        ErrorCode.unknown_topic_or_partition, ErrorCode.not_coordinator)
    # a new coordinator replays the log: the same state
    again = ShareCoordinator(5, c.append, c.partitions_of)
    again.load_partition(partition_of(KEY, 5), [(i, k, v) for i, (k, v) in enumerate(log)])
    assert again.states[KEY] == c.states[KEY]
    assert answer(c.delete, KEY)[0] is ErrorCode.none and KEY not in c.states
    again.load_partition(partition_of(KEY, 5), [(i, k, v) for i, (k, v) in enumerate(log)])
    assert KEY not in again.states


def test_a_coordinator_answers_only_for_partitions_it_leads():
    c, _ = coordinator()
    c.unload_partition(partition_of(KEY, 5))
    assert answer(c.initialize, KEY, 0, 5)[0] is ErrorCode.not_coordinator


def test_merge_replaces_what_new_batches_cover_and_drops_what_lies_below_the_start():
    old = (StateBatch(10, 19, A, 1),)
    merged = merge_batches(old, (StateBatch(12, 13, ACKED, 1), StateBatch(18, 25, A, 2)), 11)
    assert merged == (StateBatch(11, 11, A, 1), StateBatch(12, 13, ACKED, 1), StateBatch(14, 17, A, 1),
                      StateBatch(18, 25, A, 2))


def test_a_newer_leaders_read_fences_an_older_leaders_write_before_either_is_committed():
    """Two leaders race: the new one's read (leader epoch 2) is appended but not yet in the ISR when
    the old one's write (epoch 1) comes. Checked against what was appended, the write is refused;
    had it passed, its acknowledgements would be answered as kept and then lost under the new
    leader's state, and their records handed out again."""
    held: list = []

    def append(index, records, done, now_ms):
        held.append(done)
        return []
    c = ShareCoordinator(5, append, lambda topic_id: 2)
    c.load_partition(partition_of(KEY, 5), [])
    answers: list = []
    c.initialize(KEY, 0, 0, lambda *a: answers.append(a) or [], 0)
    c.read(KEY, 1, lambda *a: answers.append(a) or [], 0)
    for done in held:
        done(ErrorCode.none, 0)
    held.clear()
    c.read(KEY, 2, lambda *a: answers.append(a) or [], 0)                          # the new leader, pending
    c.write(KEY, 0, 1, 3, [], lambda *a: answers.append(a) or [], 0)                # the old one
    assert answers[-1][0] is ErrorCode.fenced_leader_epoch
    held[0](ErrorCode.not_leader_or_follower, 0)       # the read's append fails: back to what is committed
    assert c.states[KEY].leader_epoch == 1 and answers[-1][0] is ErrorCode.not_coordinator


def test_a_write_that_is_no_share_partitions_state_is_refused_and_an_unreadable_record_skipped():
    """A write from a client allowed CLUSTER_ACTION (anyone without an authorizer) with a state
    Kafka does not persist, or batches covering a billion offsets, would have stopped every broker
    that later read or replayed it."""
    c, log = coordinator()
    answer(c.initialize, KEY, 0, 0)
    for batches in ([StateBatch(0, 0, 3, 1)], [StateBatch(0, 10**9, A, 1)], [StateBatch(5, 4, A, 1)],
                    [StateBatch(0, 0, A, -1)]):
        assert answer(c.write, KEY, 0, 0, 0, batches)[0] is ErrorCode.invalid_request, batches
    assert answer(c.write, KEY, 0, 0, 0, [StateBatch(0, 9, A, 1)])[0] is ErrorCode.none
    garbage = [(0, rec.encode_key(ShareStateKey("x", TOPIC, 0)), b"\x00\x00\x01"),   # truncated value
               (1, rec.encode_key(KEY), rec.encode_snapshot(rec.ShareSnapshot(
                   9, 0, 0, 0, 0, 0, (StateBatch(0, 0, 3, 1),)))),                   # unknown state
               (2, b"\x00\x09", b"")]                                                # unknown type
    again = ShareCoordinator(5, c.append, c.partitions_of)
    again.load_partition(partition_of(KEY, 5), [(i, k, v) for i, (k, v) in enumerate(log)] +
                         [(10 + i, k, v) for i, k, v in garbage])
    assert again.states[KEY] == c.states[KEY] and partition_of(KEY, 5) in again.owned

class HeldLog:
    """A ``__share_group_state`` partition whose high watermark the test moves: appends are
    answered when it passes them (or time out), waits for a commit likewise."""

    def __init__(self) -> None:
        self.end = 0
        self.high_watermark = 0
        self.appends: list = []        # (end offset, done)
        self.waits: list = []          # (required offset, done)

    def append(self, index, records, done, now_ms):
        self.end += len(records)
        self.appends.append((self.end, done))
        return []

    def wait_committed(self, index, required, timeout_ms, done, now_ms):
        if self.high_watermark >= required:
            return done(ErrorCode.none, now_ms)
        self.waits.append((required, done))
        return []

    def time_out(self) -> None:
        for _, done in self.appends + self.waits:
            done(ErrorCode.request_timed_out, 0)
        self.appends.clear()
        self.waits.clear()

    def advance(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        for held in (self.appends, self.waits):
            ready = [(at, done) for at, done in held if at <= high_watermark]
            held[:] = [(at, done) for at, done in held if at > high_watermark]
            for _, done in ready:
                done(ErrorCode.none, 0)


def test_a_read_waits_for_a_state_whose_append_timed_out_to_be_committed():
    """A leader's read (leader epoch 3) is appended, and times out before the ISR has it; the
    leader reads again. Answering that read from the state in memory would let the leader hand
    out records from a state that a coordinator failover loses (the follower truncates the
    record), and the next leader would start past them. The second read waits until the high
    watermark passes the record, and is then answered; the state is then committed."""
    log = HeldLog()
    c = ShareCoordinator(5, log.append, lambda topic_id: 2, lambda index: log.end, log.wait_committed, 30000)
    c.load_partition(partition_of(KEY, 5), [])
    answers: list = []
    c.initialize(KEY, 0, 10, lambda *a: answers.append(a) or [], 0)
    log.advance(1)
    assert answers[-1][0] is ErrorCode.none and c.committed[KEY].start_offset == 10
    c.read(KEY, 3, lambda *a: answers.append(a) or [], 0)
    log.time_out()
    assert answers[-1][0] is ErrorCode.coordinator_not_available
    assert c.states[KEY].leader_epoch == 3 and c.committed[KEY].leader_epoch == NO_EPOCH
    c.read(KEY, 3, lambda *a: answers.append(a) or [], 0)
    assert len(answers) == 2                            # held: the state it would answer is not committed
    log.time_out()
    assert answers[-1][:3] == (ErrorCode.coordinator_not_available, None, None)
    c.read(KEY, 3, lambda *a: answers.append(a) or [], 0)
    log.advance(2)
    assert answers[-1][0] is ErrorCode.none and answers[-1][2].leader_epoch == 3
    assert c.committed[KEY] is c.states[KEY] and not c.pending
    c.read(KEY, 3, lambda *a: answers.append(a) or [], 0)          # committed: answered at once
    assert len(answers) == 5 and answers[-1][0] is ErrorCode.none


def test_an_append_refused_at_once_puts_back_the_state_before_it_not_the_committed_one():
    """A write timed out (its record is in the log), then a write is refused at once (nothing
    appended): the key goes back to the first write's state, which the log holds, not to the
    committed state before it."""
    log = HeldLog()
    refuse = False

    def append(index, records, done, now_ms):
        if refuse:
            return done(ErrorCode.not_enough_replicas, now_ms)
        return log.append(index, records, done, now_ms)
    c = ShareCoordinator(5, append, lambda topic_id: 2, lambda index: log.end, log.wait_committed, 30000)
    c.load_partition(partition_of(KEY, 5), [])
    answers: list = []
    c.initialize(KEY, 0, 0, lambda *a: answers.append(a) or [], 0)
    log.advance(1)
    c.write(KEY, 0, NO_EPOCH, 5, [], lambda *a: answers.append(a) or [], 0)
    log.time_out()
    refuse = True
    c.write(KEY, 0, NO_EPOCH, 8, [], lambda *a: answers.append(a) or [], 0)
    assert answers[-1][0] is ErrorCode.coordinator_not_available
    assert c.states[KEY].start_offset == 5 and c.committed[KEY].start_offset == 0
