"""Incremental fetch sessions (KIP-227): the leader's cache, the fetcher's handler, and a leader
serving a follower through a session, where an idle partition named in no request still counts
as fetched (so its follower stays in the ISR)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from strandline.replication.fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, FetchSessionCache, SessionHandler,
                                                  SessionPartition, next_epoch)
from tests.unit.batches import make_batch
from tests.unit.replication.test_leader_replication import LAG, follower_fetch, partition, produce, replicated

CONFIG = {"max.incremental.fetch.session.cache.slots": 2, "min.incremental.fetch.session.eviction.ms": 1000}


def req(index: int, offset: int, topic: str = "t") -> tuple[str, SimpleNamespace]:
    return topic, SimpleNamespace(partition=index, fetch_offset=offset, partition_max_bytes=100, log_start_offset=0,
                                  current_leader_epoch=3)


def entry(index: int, hw: int, records: bytes = b"", error: ErrorCode = ErrorCode.none) -> dict:
    return {"partition_index": index, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": 0, "records": records}


def in_session(context) -> list:
    """The session's partitions, in its order, as ``(topic, SessionPartition)``."""
    return [(key[0], sp) for key, sp in context.session.partitions.items()]


def answered(context, entries: list[dict]) -> list[int]:
    return [e["partition_index"] for t in context.answer([{"topic": "t", "partitions": entries}]) for e in t["partitions"]]


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(5) == 6 and next_epoch(0x7FFFFFFF) == 1


def test_a_full_fetch_opens_a_session_and_later_ones_answer_only_news():
    cache = FetchSessionCache(CONFIG, random.Random(1))
    full = cache.context(0, INITIAL_EPOCH, [req(0, 10), req(1, 20)], [], True, 0)
    assert full.session_id != 0 and not full.incremental
    assert answered(full, [entry(0, 10), entry(1, 20)]) == [0, 1]           # a full answer names every partition
    inc = cache.context(full.session_id, 1, [], [], True, 5)
    assert [(n, p.partition, p.fetch_offset) for n, p in in_session(inc)] == [("t", 0, 10), ("t", 1, 20)]
    assert inc.wanted == []                                                  # named nothing
    assert answered(inc, [entry(0, 10), entry(1, 20)]) == []                # nothing new: nothing named
    inc = cache.context(full.session_id, 2, [req(1, 25)], [], True, 6)       # partition 1 moved on
    assert [p.fetch_offset for _, p in in_session(inc)] == [10, 25]
    assert [(n, p.partition) for n, p in inc.wanted] == [("t", 1)]         # only what it named
    assert answered(inc, [entry(0, 12), entry(1, 25, b"x")]) == [0, 1]      # a new HW; records
    # the partition that returned records goes last, so that the other is read first next time
    inc = cache.context(full.session_id, 3, [], [("t", 0)], True, 7)
    assert [p.partition for _, p in in_session(inc)] == [1]                 # forgotten
    assert answered(inc, [entry(1, 25, error=ErrorCode.not_leader_or_follower)]) == [1]   # an error is news


def test_records_move_a_partition_to_the_end_of_the_session():
    cache = FetchSessionCache(CONFIG, random.Random(1))
    full = cache.context(0, INITIAL_EPOCH, [req(0, 1), req(1, 1), req(2, 1)], [], False, 0)
    answered(full, [entry(0, 1), entry(1, 1), entry(2, 1)])
    inc = cache.context(full.session_id, 1, [], [], False, 1)
    answered(inc, [entry(0, 1, b"r"), entry(1, 1), entry(2, 1)])
    assert [p.partition for _, p in in_session(cache.context(full.session_id, 2, [], [], False, 2))] == [1, 2, 0]


def test_wrong_epochs_and_unknown_sessions_are_refused_and_change_nothing():
    cache = FetchSessionCache(CONFIG, random.Random(1))
    full = cache.context(0, INITIAL_EPOCH, [req(0, 10)], [], True, 0)
    assert cache.context(full.session_id, 2, [req(0, 99)], [], True, 1).error is ErrorCode.invalid_fetch_session_epoch
    assert cache.context(full.session_id + 1, 1, [], [], True, 1).error is ErrorCode.fetch_session_id_not_found
    ok = cache.context(full.session_id, 1, [], [], True, 2)
    assert ok.error is ErrorCode.none and in_session(ok)[0][1].fetch_offset == 10
    # epoch -1 closes it and is served without a session; epoch 0 with the id replaces it
    closed = cache.context(full.session_id, FINAL_EPOCH, [req(0, 11)], [], True, 3)
    assert closed.session is None and full.session_id not in cache.sessions
    assert cache.context(0, FINAL_EPOCH, [req(0, 11)], [], False, 3).session is None


def test_a_full_cache_evicts_an_idle_session_or_a_consumers_for_a_follower():
    cache = FetchSessionCache(CONFIG, random.Random(1))
    a = cache.context(0, INITIAL_EPOCH, [req(0, 1)], [], False, 0).session_id
    b = cache.context(0, INITIAL_EPOCH, [req(0, 1)], [], False, 500).session_id
    assert cache.context(0, INITIAL_EPOCH, [req(0, 1)], [], False, 600).session is None    # none idle long enough
    follower = cache.context(0, INITIAL_EPOCH, [req(0, 1)], [], True, 700)
    assert follower.session is not None and a not in cache.sessions and b in cache.sessions
    c = cache.context(0, INITIAL_EPOCH, [req(0, 1)], [], False, 1600)    # b idle 1100 ms: evicted
    assert c.session is not None and b not in cache.sessions and cache.evictions == 2


def test_the_handler_names_only_changes_and_starts_over_after_an_error():
    h = SessionHandler()
    positions = {("t", 0): (3, 10, 0, 100), ("t", 1): (3, 20, 0, 100)}
    assert h.build(positions) == (0, INITIAL_EPOCH, positions, [])
    h.succeeded(ErrorCode.none, 77)
    assert (h.session_id, h.epoch) == (77, 1)
    assert h.build(positions) == (77, 1, {}, [])
    h.succeeded(ErrorCode.none, 77)
    moved = {("t", 0): (3, 15, 0, 100)}
    assert h.build(moved) == (77, 2, moved, [("t", 1)])       # one moved, one no longer fetched
    h.succeeded(ErrorCode.none, 77)
    assert h.sent == moved and h.epoch == 3
    h.build(moved)
    h.succeeded(ErrorCode.invalid_fetch_session_epoch, 0)
    assert h.build(moved) == (77, INITIAL_EPOCH, moved, [])   # full, replacing the session
    h.succeeded(ErrorCode.none, 0)                             # the leader had no room: no session
    assert (h.session_id, h.epoch) == (0, INITIAL_EPOCH) and h.build(moved)[1] == INITIAL_EPOCH


def session_fetch(h, follower: int, offset: int | None, session_id: int, epoch: int, max_wait: int = 0):
    """A follower's Fetch v11 in a session; ``offset`` None names no partition."""
    body = h.fetch_body("r", offset if offset is not None else 0, max_wait=max_wait)
    body.update(replica_id=follower, session_id=session_id, session_epoch=epoch)
    if offset is None:
        body["topics"] = []
    return h.call(1, 11, body, conn=100 + follower)


def test_a_leader_serves_a_follower_through_a_session_and_idle_partitions_keep_it_in_the_isr():
    h = replicated()
    produce(h, acks=1, values=[b"a", b"b"])
    h.response(0, 7)
    for follower in (2, 3):
        first = session_fetch(h, follower, 0, 0, INITIAL_EPOCH)
        assert first.error_code == ErrorCode.none and first.session_id != 0
        assert len(first.responses[0].partitions[0].records) > 0
    sessions = {b: s.id for s in h.broker.apis.fetch_sessions.sessions.values() for b in (2, 3)}
    assert len(h.broker.apis.fetch_sessions.sessions) == 2 and sessions
    ids = [s.id for s in h.broker.apis.fetch_sessions.sessions.values()]
    # each follower now names its new position once; then nothing, for longer than replica.lag.time.max.ms
    for follower, sid in zip((2, 3), ids):
        moved = session_fetch(h, follower, 2, sid, 1)
        assert moved.error_code == ErrorCode.none and moved.session_id == sid
    assert partition(h).high_watermark == 2
    for follower, sid in zip((2, 3), ids):          # the HW that the second follower's fetch moved: news
        hw = session_fetch(h, follower, None, sid, 2).responses
        assert [p.high_watermark for t in hw for p in t.partitions] in ([2], [])
    for step in range(3, 7):
        h.now += LAG // 3
        for follower, sid in zip((2, 3), ids):
            idle = session_fetch(h, follower, None, sid, step)
            assert idle.error_code == ErrorCode.none and idle.responses == ()       # no news, nothing named
        h.tick(0)
    assert partition(h).isr == (1, 2, 3)           # fetched at their LEO all along, though never named
    # new records reach a follower whose request names no partition
    h.produce("r", make_batch([b"c"]), acks=1, conn=1)
    news = session_fetch(h, 2, None, ids[0], 7)
    assert [p.partition_index for t in news.responses for p in t.partitions] == [0]
    assert len(news.responses[0].partitions[0].records) > 0
    # out of step: refused, nothing changes, and a full fetch starts again
    assert session_fetch(h, 2, None, ids[0], 7).error_code == ErrorCode.invalid_fetch_session_epoch
    again = session_fetch(h, 2, 3, ids[0], INITIAL_EPOCH)
    assert again.error_code == ErrorCode.none and again.session_id not in (0, ids[0])


def test_metrics_count_sessions_and_their_partitions():
    from strandline.broker.metrics import collect

    h = replicated()
    session_fetch(h, 2, 0, 0, INITIAL_EPOCH)
    values = {f.name: f.samples[0][1] for f in collect(h.broker) if f.name.startswith("kafka_server_fetchsession")}
    assert values["kafka_server_fetchsessioncache_numincrementalfetchsessions"] == 1
    assert values["kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"] == 1


def test_a_partition_named_at_a_new_leader_epoch_is_answered_again():
    """A fetcher drops an answer that arrives after its leader epoch changed; naming the partition
    again (new epoch, same offset) makes the leader tell its state again, not only its news."""
    cache = FetchSessionCache(CONFIG, random.Random(1))
    full = cache.context(0, INITIAL_EPOCH, [req(0, 10)], [], True, 0)
    answered(full, [entry(0, 10)])
    inc = cache.context(full.session_id, 1, [], [], True, 1)
    assert answered(inc, [entry(0, 12)]) == [0]                     # the HW moved: told (and dropped)
    _, newer = req(0, 10)
    newer.current_leader_epoch = 4
    inc = cache.context(full.session_id, 2, [("t", newer)], [], True, 2)
    assert answered(inc, [entry(0, 12)]) == [0]                     # told again
    inc = cache.context(full.session_id, 3, [], [], True, 3)
    assert answered(inc, [entry(0, 12)]) == []


def test_an_answer_to_a_fetch_sent_before_the_handler_started_over_changes_nothing():
    h = SessionHandler()
    positions = {("t", 0): (3, 10, 0, 100)}
    h.build(positions)
    h.succeeded(ErrorCode.none, 77)
    h.build(positions)                 # incremental, epoch 1, in flight...
    h.failed()                         # ...when a partition changed leader epoch: start over
    h.succeeded(ErrorCode.none, 77)    # the old answer
    assert h.build(positions)[1] == INITIAL_EPOCH


def test_a_v13_session_survives_the_deletion_of_its_topic():
    """Fetch v13+ names topics by id: a session partition of a topic deleted since is answered with
    an error under its old id (the broker keeps serving), and can be forgotten by that id."""
    h = replicated()
    topic_id = h.broker.metadata.topics["r"].topic_id

    def fetch(session_id: int, epoch: int, named: bool, forget: bool = False):
        parts = [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}] if named else []
        body = {"cluster_id": None, "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic_id": topic_id, "partitions": parts}] if named else [],
                "forgotten_topics_data": [{"topic_id": topic_id, "partitions": [0]}] if forget else [],
                "rack_id": ""}
        return h.call(1, 13, body, conn=60)

    first = fetch(0, INITIAL_EPOCH, True)
    assert first.error_code == ErrorCode.none and first.session_id != 0
    assert h.call(20, 4, {"topic_names": ["r"], "timeout": 1000}).responses[0].error_code == ErrorCode.none
    after = fetch(first.session_id, 1, False)
    assert after.error_code == ErrorCode.none
    [(tid, code)] = [(t.topic_id, p.error_code) for t in after.responses for p in t.partitions]
    assert tid == topic_id and code != ErrorCode.none
    forgot = fetch(first.session_id, 2, False, forget=True)
    assert forgot.error_code == ErrorCode.none and forgot.responses == ()
    assert not h.broker.apis.fetch_sessions.sessions[first.session_id].partitions


def test_an_idle_session_fetch_reads_no_partition_yet_keeps_its_follower_caught_up(monkeypatch):
    """An incremental Fetch naming nothing, from a follower of the ISR at the leader's LEO that has
    heard the current HW, reads no log: only the follower's fetch times move (ISR-2 rule (a)). The
    next record makes the partition read and answered again."""
    from strandline.replication.partition import Partition

    h = replicated()
    produce(h, acks=1, values=[b"a", b"b"])
    h.response(0, 7)
    follower_fetch(h, 3, 2)
    reads = []
    real = Partition.read_records
    monkeypatch.setattr(Partition, "read_records", lambda self, *a, **k: reads.append(a) or real(self, *a, **k))
    sid = session_fetch(h, 2, 2, 0, INITIAL_EPOCH).session_id
    assert sid and len(reads) == 1 and partition(h).high_watermark == 2
    news = session_fetch(h, 2, None, sid, 1)       # the HW its own fetch moved, after reading: news
    assert [p.high_watermark for t in news.responses for p in t.partitions] == [2]
    reads.clear()
    for epoch in range(2, 5):
        h.now += LAG // 2
        idle = session_fetch(h, 2, None, sid, epoch)
        assert idle.error_code == ErrorCode.none and idle.responses == ()
        assert partition(h).remote_replicas[2].last_caught_up_time_ms == h.now
    assert reads == []
    h.produce("r", make_batch([b"c"]), acks=1, conn=1)
    news = session_fetch(h, 2, None, sid, 5)
    assert len(reads) == 1 and len(news.responses[0].partitions[0].records) > 0


def test_only_a_caught_up_follower_of_the_isr_takes_the_quick_update():
    h = replicated()
    produce(h, acks=1, values=[b"a", b"b"])
    h.response(0, 7)
    follower_fetch(h, 2, 2)
    follower_fetch(h, 3, 1)
    p = partition(h)
    assert p.caught_up_follower_fetched(2, 2, -1, h.now + 1)
    assert p.remote_replicas[2].last_fetch_time_ms == h.now + 1
    assert not p.caught_up_follower_fetched(3, 1, -1, h.now + 1)    # behind the LEO
    assert not p.caught_up_follower_fetched(3, 2, -1, h.now + 1)    # moved: the full update
    assert not p.caught_up_follower_fetched(2, 2, 5, h.now + 1)     # a new log start offset
    p.isr = (1, 3)
    assert not p.caught_up_follower_fetched(2, 2, -1, h.now + 1)    # outside the ISR: may need to join
    assert not p.caught_up_follower_fetched(4, 2, -1, h.now + 1)    # not a replica


def test_every_quiet_partition_of_a_fetch_counts_for_the_isr_even_after_one_with_records():
    """The quick path follows every partition of the session: a partition read for its records
    first does not stop the quiet ones after it from counting the follower's fetch."""
    from tests.unit.broker.test_broker_core import Harness

    h = Harness(brokers=(1, 2, 3), **{"replica.lag.time.max.ms": str(LAG), "replica.fetch.wait.max.ms": "500"})
    h.call(19, 4, {"topics": [{"name": "r", "num_partitions": -1, "replication_factor": -1, "configs": [],
                               "assignments": [{"partition_index": i, "broker_ids": [1, 2, 3]} for i in (0, 1)]}],
                   "timeout": 1000, "validate_only": False})
    body = h.fetch_body("r", 0)
    body["topics"][0]["partitions"].append(dict(body["topics"][0]["partitions"][0], partition=1))
    body.update(replica_id=2, session_id=0, session_epoch=INITIAL_EPOCH)
    sid = h.call(1, 11, body, conn=102).session_id
    h.produce("r", make_batch([b"x"]), acks=1, conn=1)            # partition 0, first in the session
    h.now += LAG // 2
    body.update(session_id=sid, session_epoch=1, topics=[])
    answer = h.call(1, 11, body, conn=102)
    assert [p.partition_index for t in answer.responses for p in t.partitions] == [0]
    assert h.broker.partitions[("r", 1)].remote_replicas[2].last_caught_up_time_ms == h.now


def test_a_caught_up_follower_takes_the_full_update_while_the_hw_is_below_the_leo(monkeypatch):
    """The full update recomputes the HW (a replica outside the ISR may have stopped holding it
    back as time passed): a follower's idle fetch takes the quick path only when the HW is at the
    LEO and no DeleteRecords waits on followers."""
    from strandline.replication.partition import Partition

    h = replicated()
    produce(h, acks=1, values=[b"a"])
    h.response(0, 7)
    sid = session_fetch(h, 2, 1, 0, INITIAL_EPOCH).session_id     # follower 3 has not fetched: HW 0
    session_fetch(h, 2, None, sid, 1)
    assert partition(h).high_watermark == 0 and partition(h).log.log_end_offset == 1
    updates = []
    real = Partition.update_follower_fetch_state
    monkeypatch.setattr(Partition, "update_follower_fetch_state",
                        lambda self, *a, **k: updates.append(a) or real(self, *a, **k))
    session_fetch(h, 2, None, sid, 2)
    assert len(updates) == 1                                       # the full update, not the quick one


def settled_session():
    """Follower 2 in a session of one partition, caught up at offset 1 and told the HW its fetch
    moved (follower 3 fetched too): the harness and the session id, at epoch 2 next."""
    h = replicated()
    produce(h, acks=1, values=[b"a"])
    h.response(0, 7)
    follower_fetch(h, 3, 1)
    sid = session_fetch(h, 2, 1, 0, INITIAL_EPOCH).session_id
    session_fetch(h, 2, None, sid, 1)                       # hears the HW its fetch moved
    return h, sid


def test_a_parked_session_fetch_that_nothing_touched_expires_without_a_second_scan(monkeypatch):
    """A long-poll session fetch of quiet partitions parks; at expiry, when no append, HW move or
    control request touched it, it answers what it had, without looking at every partition again;
    a LeaderAndIsr meanwhile (a change no watch key announces) makes it look again."""
    h, sid = settled_session()
    scans = []
    real = SessionPartition.quiet
    monkeypatch.setattr(SessionPartition, "quiet", lambda self, *a: scans.append(a[2]) or real(self, *a))

    def parked_fetch(epoch: int):
        body = h.fetch_body("r", 0, max_wait=500)
        body.update(replica_id=2, session_id=sid, session_epoch=epoch, topics=[])
        h.request(1, 11, body, conn=102)
        assert not h.sent.get(102)                          # parked: nothing to say yet
        h.tick(600)
        return h.response(1, 11, conn=102)

    # the arrival looks at the partition (not quiet at the session's last Fetch: it heard news)
    assert parked_fetch(2).responses == () and scans == [True]
    scans.clear()
    assert parked_fetch(3).responses == () and scans == []      # quiet since, nothing changed: not looked at
    body = h.fetch_body("r", 0, max_wait=500)
    body.update(replica_id=2, session_id=sid, session_epoch=4, topics=[])
    h.request(1, 11, body, conn=102)
    h.broker.replica_manager.note_state_change()            # e.g. a LeaderAndIsr while it waits
    h.tick(600)
    assert h.response(1, 11, conn=102).responses == () and scans == [False]     # looked at again


def test_a_partition_a_fetch_names_again_is_read_though_nothing_changed_it():
    """An incremental Fetch that names a quiet partition again (its fetcher's position moved, e.g.
    after a truncation) is read on arrival, though the change journal has nothing for it."""
    h, sid = settled_session()
    assert session_fetch(h, 2, None, sid, 2).responses == ()   # quiet, settled
    again = session_fetch(h, 2, 0, sid, 3)                      # named again, from offset 0
    assert again.error_code == ErrorCode.none
    assert [len(p.records) > 0 for t in again.responses for p in t.partitions] == [True]

