"""An idle incremental fetch session costs nothing per partition (issue 15, idle CPU): the leader
looks only at the session's partitions that changed since its last Fetch (the replica manager's
change journal), that the Fetch named, or that were not quiet then; its long poll waits on the
session, not on every key; the follower builds its Fetch from the partitions that changed.

And the semantics stay exact: a partition with records, a new high watermark or log start
offset is answered and wakes a parked Fetch, wherever it sits in a large session; a follower's
quiet partitions count its fetches for the ISR; a follower dropped from the ISR rejoins it."""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from strandline.replication.fetch_session import INITIAL_EPOCH, ChangeJournal
from strandline.replication.purgatory import DelayedCall, Purgatory
from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness
from tests.unit.replication.test_leader_replication import LAG

MANY = 400


def many(n: int = MANY) -> Harness:
    """Broker 1 leading ``n`` partitions of topic "r", replicas 1, 2, 3."""
    h = Harness(brokers=(1, 2, 3), **{"replica.lag.time.max.ms": str(LAG), "replica.fetch.wait.max.ms": "500"})
    resp = h.call(19, 4, {"topics": [{"name": "r", "num_partitions": -1, "replication_factor": -1, "configs": [],
                                      "assignments": [{"partition_index": i, "broker_ids": [1, 2, 3]}
                                                      for i in range(n)]}],
                          "timeout": 1000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.none
    return h


def fetch(h: Harness, follower: int, offsets: dict[int, int], session_id: int, epoch: int, max_wait: int = 0,
          forget: list[int] = (), respond: bool = True):
    """A follower's Fetch v11 naming ``offsets`` (partition: fetch offset)."""
    body = h.fetch_body("r", 0, max_wait=max_wait)
    template = body["topics"][0]["partitions"][0]
    parts = [dict(template, partition=i, fetch_offset=o) for i, o in offsets.items()]
    body.update(replica_id=follower, session_id=session_id, session_epoch=epoch,
                topics=[{"topic": "r", "partitions": parts}] if parts else [],
                forgotten_topics_data=[{"topic": "r", "partitions": list(forget)}] if forget else [])
    if not respond:
        h.request(1, 11, body, conn=100 + follower)
        return None
    return h.call(1, 11, body, conn=100 + follower)


def named(answer) -> dict[int, tuple]:
    return {p.partition_index: (p.high_watermark, p.log_start_offset, len(p.records or b""))
            for t in answer.responses for p in t.partitions}


class Counting:
    """Counts the leader's looks at session partitions and its log reads."""

    def __init__(self, monkeypatch) -> None:
        from strandline.replication.partition import Partition
        from strandline.replication.fetch_session import SessionPartition
        self.quiet = 0
        self.reads = 0
        quiet, read = SessionPartition.quiet, Partition.read_records

        def counted_quiet(sp, *a):
            self.quiet += 1
            return quiet(sp, *a)

        def counted_read(p, *a, **k):
            self.reads += 1
            return read(p, *a, **k)
        monkeypatch.setattr(SessionPartition, "quiet", counted_quiet)
        monkeypatch.setattr(Partition, "read_records", counted_read)

    def clear(self) -> None:
        self.quiet = self.reads = 0


def idle_sessions(h: Harness, n: int = MANY) -> dict[int, int]:
    """Followers 2 and 3 in sessions of every partition, caught up (offset 0) and told the HW:
    session id by follower, each at epoch 3 next."""
    ids = {}
    for follower in (2, 3):
        first = fetch(h, follower, {i: 0 for i in range(n)}, 0, INITIAL_EPOCH)
        assert first.error_code == ErrorCode.none and first.session_id
        ids[follower] = first.session_id
    for follower in (2, 3):
        fetch(h, follower, {}, ids[follower], 1)
        assert named(fetch(h, follower, {}, ids[follower], 2)) == {}
    return ids


def test_an_idle_fetch_of_a_large_session_looks_at_no_partition_yet_keeps_its_follower_in_the_isr(monkeypatch):
    h = many()
    ids = idle_sessions(h)
    looks = Counting(monkeypatch)
    for epoch in range(3, 3 + 6):
        h.now += LAG // 3
        for follower in (2, 3):
            answer = fetch(h, follower, {}, ids[follower], epoch)
            assert answer.error_code == ErrorCode.none and answer.responses == ()
        h.tick(0)
    assert looks.quiet == 0 and looks.reads == 0          # O(changed), and nothing changed
    rm = h.broker.replica_manager
    # each quiet partition counted both followers' fetches (ISR-2 rule (a)), though never looked at
    assert all(p.isr == (1, 2, 3) for p in rm.partitions.values())
    assert all(r.last_caught_up_time_ms == h.now for p in rm.partitions.values() for r in p.remote_replicas.values())
    # a record then: its partition, last in the sessions, is read and answered (and only it)
    _produce(h, MANY - 1)
    h.response(0, 7)
    looks.clear()
    answer = fetch(h, 2, {}, ids[2], 9)
    assert named(answer) == {MANY - 1: (0, 0, len(answer.responses[0].partitions[0].records))}
    assert named(answer)[MANY - 1][2] > 0 and looks.reads == 1 and looks.quiet <= 2


def _produce(h: Harness, index: int, acks: int = 1) -> None:
    h.request(0, 7, {"transactional_id": None, "acks": acks, "timeout": 1000, "topic_data": [
        {"name": "r", "partition_data": [{"index": index, "records": bytes(make_batch([b"x"]))}]}]}, conn=1)


def test_news_of_one_partition_in_a_large_idle_session_is_answered(monkeypatch):
    """A new HW (moved by the other follower's fetch) and a new log start offset (DeleteRecords)
    are news for a partition nobody names: answered, and nothing else is."""
    h = many()
    ids = idle_sessions(h)
    _produce(h, 123)
    h.response(0, 7)
    looks = Counting(monkeypatch)
    # follower 3 fetches the record and reports its LEO: the HW of partition 123 moves to 1 once 2 has too
    got = fetch(h, 3, {}, ids[3], 3)
    assert list(named(got)) == [123] and named(got)[123][2] > 0
    got = fetch(h, 2, {}, ids[2], 3)
    assert list(named(got)) == [123] and named(got)[123][2] > 0
    fetch(h, 3, {123: 1}, ids[3], 4)                      # LEO 1 on 3
    news = fetch(h, 2, {123: 1}, ids[2], 4)                # LEO 1 on 2: the HW moves to 1
    assert h.broker.partitions[("r", 123)].high_watermark == 1
    assert set(named(news)) <= {123}
    told = fetch(h, 3, {}, ids[3], 5)                      # follower 3 hears the new HW, named by no one
    assert named(told) == {123: (1, 0, 0)}
    assert named(fetch(h, 2, {}, ids[2], 5)) in ({123: (1, 0, 0)}, {})
    assert named(fetch(h, 3, {}, ids[3], 6)) == {}          # heard: no more
    # DeleteRecords moves the log start offset of 123 to 1: news for both followers
    h.call(21, 2, {"topics": [{"name": "r", "partitions": [{"partition_index": 123, "offset": 1}]}],
                   "timeout_ms": 0})
    moved = fetch(h, 3, {}, ids[3], 7)
    assert named(moved) == {123: (1, 1, 0)}
    # (DeleteRecords is a change no key announces: the sessions look at everything while it waits)
    h.now += 1
    h.tick(0)
    fetch(h, 3, {}, ids[3], 8)
    looks.clear()
    assert named(fetch(h, 3, {}, ids[3], 9)) == {} and looks.quiet == 0


def test_a_parked_fetch_of_a_large_idle_session_wakes_for_a_record_in_any_partition(monkeypatch):
    h = many()
    ids = idle_sessions(h)
    purgatory = h.broker.replica_manager.fetch_purgatory
    looks = Counting(monkeypatch)
    fetch(h, 2, {}, ids[2], 3, max_wait=500, respond=False)
    assert not h.sent.get(102)                             # parked
    assert len(purgatory) == 1 and not purgatory.by_key    # watching the session, not each of its keys
    assert looks.quiet == 0
    h.now += 100
    _produce(h, MANY - 1)                                  # the last partition of the session
    answer = h.response(1, 11, conn=102)                   # woken at once, long before max_wait
    assert list(named(answer)) == [MANY - 1] and named(answer)[MANY - 1][2] > 0
    assert len(purgatory) == 0 and looks.reads == 1
    # and one parked across a record of another topic (not in the session) is not woken by it
    fetch(h, 2, {MANY - 1: 1}, ids[2], 4, max_wait=500, respond=False)
    h.response(0, 7)
    h.call(19, 4, {"topics": [{"name": "other", "num_partitions": 1, "replication_factor": 1, "configs": [],
                               "assignments": []}], "timeout": 1000, "validate_only": False})
    h.request(0, 7, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "other", "partition_data": [{"index": 0, "records": bytes(make_batch([b"y"]))}]}]}, conn=1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert not h.sent.get(102)
    h.now += 600
    h.tick(0)
    assert h.response(1, 11, conn=102).error_code == ErrorCode.none


def test_a_follower_dropped_from_the_isr_while_caught_up_rejoins_on_its_next_idle_fetch():
    """The ISR change is news to the session: the follower's next fetch of that partition takes
    the full update again (ISR-4), though nothing else changed and it names nothing."""
    h = many(20)
    ids = idle_sessions(h, 20)
    rm = h.broker.replica_manager
    p = rm.partitions[("r", 7)]
    h.run(rm.isr_manager.change_isr(p, (1, 3), h.now))     # e.g. it lagged a moment ago
    assert p.isr == (1, 3)
    fetch(h, 2, {}, ids[2], 3)
    assert 2 in (p.pending_isr or p.isr)
    assert p.isr == (1, 3, 2)


def test_a_forgotten_partition_counts_its_followers_fetches_no_more():
    h = many(10)
    ids = idle_sessions(h, 10)
    start = h.now
    h.now += 1000
    fetch(h, 2, {}, ids[2], 3, forget=[4])
    h.now += 1000
    fetch(h, 2, {}, ids[2], 4)
    parts = h.broker.replica_manager.partitions
    assert parts[("r", 4)].remote_replicas[2].last_caught_up_time_ms == start    # its last fetch
    assert parts[("r", 5)].remote_replicas[2].last_caught_up_time_ms == start + 2000


def test_another_fetch_of_the_same_follower_makes_its_session_look_again():
    """Follower 2 fetches partition 3 outside its session (a full fetch, no session): the session
    must not trust what it saw of 3 (the follower's LEO there may have moved)."""
    h = many(10)
    ids = idle_sessions(h, 10)
    _produce(h, 3)
    h.response(0, 7)
    fetch(h, 3, {3: 1}, 0, -1)                             # follower 3 at 1, sessionless
    body = h.fetch_body("r", 1)
    body["topics"][0]["partitions"][0]["partition"] = 3
    body.update(replica_id=2, session_id=0, session_epoch=-1)
    h.call(1, 11, body, conn=99)                           # follower 2 at 1, outside its session
    rm = h.broker.replica_manager
    assert rm.partitions[("r", 3)].high_watermark == 1
    answer = fetch(h, 2, {}, ids[2], 3)                    # its session last had it at 0: records
    assert 3 in named(answer)


def test_purgatory_watch_all_follows_a_changing_container_and_tells_its_listener():
    heard: list = []
    purgatory = Purgatory()
    purgatory.listener = heard.extend
    watched = {("t", 0): None}
    done: list = []
    op = DelayedCall(1, 1000, (), lambda now, expired: done.append(now) or ["answer"])
    purgatory.watch_all(op, watched)
    assert purgatory.check_keys([("t", 1)], 10) == [] and not done
    watched[("t", 1)] = None                               # joined the session while it waits
    assert purgatory.check_keys([("t", 1)], 20) == ["answer"] and done == [20]
    assert heard == [("t", 1), ("t", 1)] and not purgatory.groups and len(purgatory) == 0
    late = DelayedCall(1, 1000, (), lambda now, expired: ["late"] if expired else None)
    purgatory.watch_all(late, watched)
    assert purgatory.check_keys([("t", 0)], 30) == [] and purgatory.expire(1000) == ["late"]
    assert not purgatory.groups


def test_the_change_journal_sends_readers_that_fell_behind_or_missed_a_global_change_to_a_full_look():
    journal = ChangeJournal(limit=4)
    start, epoch = journal.position, journal.epoch
    journal.extend([("t", 0), ("t", 1)])
    assert journal.since(start, epoch) == [("t", 0), ("t", 1)]
    middle = journal.position
    journal.add(("t", 2))
    assert journal.since(middle, epoch) == [("t", 2)]
    for i in range(8):
        journal.add(("u", i))
    assert journal.since(start, epoch) is None             # trimmed past it
    assert journal.since(journal.position, epoch) == []
    journal.everything_changed()
    assert journal.since(journal.position, epoch) is None


def test_the_follower_builds_an_idle_fetch_without_looking_at_its_partitions(monkeypatch):
    """In the simulator: a follower of many partitions names none in its idle Fetches and never
    builds one from every partition (ReplicaFetcher.ready, SessionHandler.build); a record in any
    partition reaches both followers and commits at once (their long polls wake)."""
    from strandline.replication.fetch_session import SessionHandler
    from strandline.replication.fetcher import ReplicaFetcher
    from tests.sim.test_replication_sim import create
    from strandline.sim.cluster import SimCluster

    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": "1000"})
    create(c, "big", [1, 2, 3], partitions=200)
    c.advance(3000)
    cores = {b: c.brokers[b].core for b in (1, 2, 3)}
    assert all(p.isr == (1, 2, 3) for p in cores[1].partitions.values())
    full_builds = []
    real_ready, real_build = ReplicaFetcher.ready, SessionHandler.build
    monkeypatch.setattr(ReplicaFetcher, "ready", lambda self, now: full_builds.append("ready") or real_ready(self, now))
    monkeypatch.setattr(SessionHandler, "build", lambda self, pos: full_builds.append(len(pos)) or real_build(self, pos))
    epochs = {b: next(iter(cores[b].fetchers.values())).session.epoch for b in (2, 3)}
    c.advance(5000)                                        # idle, for five times replica.lag.time.max.ms
    assert full_builds == []
    assert all(next(iter(cores[b].fetchers.values())).session.epoch > epochs[b] + 5 for b in (2, 3))
    assert all(p.isr == (1, 2, 3) for p in cores[1].partitions.values())
    c.request(1, 0, 7, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "big", "partition_data": [{"index": 199, "records": bytes(make_batch([b"v"]))}]}]}, "producer")
    c.advance(20)                                          # far below replica.fetch.wait.max.ms (500)
    answer = c.response(1, 0, 7, "producer")
    assert answer is not None and answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert all(cores[b].partitions[("big", 199)].log.log_end_offset == 1 for b in (1, 2, 3))
    assert full_builds == []


def test_a_session_partition_seq_orders_reads_as_the_session_does():
    from strandline.replication.fetch_session import FetchSessionCache
    import random
    cache = FetchSessionCache({"max.incremental.fetch.session.cache.slots": 2,
                               "min.incremental.fetch.session.eviction.ms": 1000}, random.Random(1))
    req = [("t", SimpleNamespace(partition=i, fetch_offset=0, partition_max_bytes=1)) for i in range(3)]
    full = cache.context(0, INITIAL_EPOCH, req, [], True, 0)
    inc = cache.context(full.session_id, 1, [], [], True, 1)
    inc.answer([{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": ErrorCode.none, "high_watermark": 0, "last_stable_offset": 0,
         "log_start_offset": 0, "records": b"r"}]}])
    parts = inc.session.partitions
    assert list(parts) == [("t", 1), ("t", 2), ("t", 0)]
    assert [sp.seq for sp in parts.values()] == sorted(sp.seq for sp in parts.values())
