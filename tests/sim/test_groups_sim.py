"""The group coordinator on broker cores in the simulator: the classic rebalance protocol and
committed offsets kept in the replicated __consumer_offsets topic (CON-1)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.records import java_string_hash, partition_for
from strandline.sim.cluster import SimCluster

SESSION_MS = 10000


def cluster() -> SimCluster:
    return SimCluster((1, 2, 3), **{"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
                                    "replica.lag.time.max.ms": "1000"})


def create_t(c: SimCluster) -> None:
    """Topic "t" (offsets are committed only for partitions that exist)."""
    body = {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout": 1000, "validate_only": False}
    assert c.call(c.controller_id, 19, 5, body, "admin").topics[0].error_code == ErrorCode.none
    c.settle()


def coordinator(c: SimCluster, group: str, via: int = 1) -> int:
    for _ in range(50):
        r = c.call(via, 10, 3, {"key": group, "key_type": 0}, "admin")
        if r.error_code == ErrorCode.none:
            return r.node_id
        assert r.error_code == ErrorCode.coordinator_not_available
        c.advance(20)
    raise AssertionError("no coordinator")


def join_body(group: str, member_id: str = "", protocols=(("range", b"sub"),)) -> dict:
    return {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}


def join(c: SimCluster, coord: int, group: str, client: str):
    first = c.call(coord, 11, 5, join_body(group), client)
    assert first.error_code == ErrorCode.member_id_required          # KIP-394 (v4+)
    c.request(coord, 11, 5, join_body(group, first.member_id), client)
    return first.member_id


def test_java_hash_and_partition_match_kafka():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert partition_for("my-group", 50) == 12


def test_con_1_two_members_rebalance_commit_and_the_offsets_survive_the_coordinators_death():
    c = cluster()
    create_t(c)
    coord = coordinator(c, "g")
    a = join(c, coord, "g", "a")
    c.settle()
    ja = c.response(coord, 11, 5, "a")
    assert ja.error_code == ErrorCode.none and ja.generation_id == 1 and ja.leader == a
    sync = c.call(coord, 14, 3, {"group_id": "g", "generation_id": 1, "member_id": a, "group_instance_id": None,
                                 "assignments": [{"member_id": a, "assignment": b"all"}]}, "a")
    assert sync.error_code == ErrorCode.none and sync.assignment == b"all"
    # a second member joins: the first hears REBALANCE_IN_PROGRESS and rejoins
    b = join(c, coord, "g", "b")
    c.settle()
    hb = c.call(coord, 12, 3, {"group_id": "g", "generation_id": 1, "member_id": a, "group_instance_id": None}, "a")
    assert hb.error_code == ErrorCode.rebalance_in_progress
    c.request(coord, 11, 5, join_body("g", a), "a")
    c.settle()
    ja, jb = c.response(coord, 11, 5, "a"), c.response(coord, 11, 5, "b")
    assert ja.generation_id == jb.generation_id == 2 and ja.leader == a and len(ja.members) == 2 and not jb.members
    c.request(coord, 14, 3, {"group_id": "g", "generation_id": 2, "member_id": b, "group_instance_id": None,
                             "assignments": []}, "b")
    c.settle()
    assert not c.inbox[(coord, "b")]                                 # waits for the leader's assignment
    c.request(coord, 14, 3, {"group_id": "g", "generation_id": 2, "member_id": a, "group_instance_id": None,
                             "assignments": [{"member_id": a, "assignment": b"p0"},
                                             {"member_id": b, "assignment": b"p1"}]}, "a")
    c.settle()
    assert c.response(coord, 14, 3, "a").assignment == b"p0" and c.response(coord, 14, 3, "b").assignment == b"p1"
    # commits from a stale generation are refused, current ones kept
    body = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": a, "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
    assert c.call(coord, 8, 7, body, "a").topics[0].partitions[0].error_code == ErrorCode.illegal_generation
    body["generation_id_or_member_epoch"] = 2
    assert c.call(coord, 8, 7, body, "a").topics[0].partitions[0].error_code == ErrorCode.none
    c.crash(coord, lose_unflushed=False)
    c.advance(100)
    new = coordinator(c, "g", via=next(x for x in (1, 2, 3) if x != coord))
    assert new != coord
    fetched = c.call(new, 9, 7, {"group_id": "g", "topics": None, "require_stable": False}, "a")
    [part] = fetched.topics[0].partitions
    assert (part.committed_offset, part.metadata) == (7, "m")
    described = c.call(new, 15, 5, {"groups": ["g"], "include_authorized_operations": False}, "admin")
    assert described.groups[0].group_state == "Stable" and len(described.groups[0].members) == 2


def test_a_member_that_stops_heartbeating_is_removed_and_the_group_rebalances():
    c = cluster()
    coord = coordinator(c, "h")
    a = join(c, coord, "h", "a")
    c.settle()
    c.response(coord, 11, 5, "a")
    c.call(coord, 14, 3, {"group_id": "h", "generation_id": 1, "member_id": a, "group_instance_id": None,
                          "assignments": [{"member_id": a, "assignment": b"x"}]}, "a")
    c.advance(SESSION_MS + 10)
    listed = c.call(coord, 16, 3, {}, "admin")
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("h", "consumer")]
    described = c.call(coord, 15, 5, {"groups": ["h"], "include_authorized_operations": False}, "admin")
    assert described.groups[0].group_state == "Empty" and not described.groups[0].members
    hb = c.call(coord, 12, 3, {"group_id": "h", "generation_id": 1, "member_id": a, "group_instance_id": None}, "a")
    assert hb.error_code == ErrorCode.unknown_member_id


def test_bad_requests_get_kafkas_errors_and_change_nothing():
    c = cluster()
    create_t(c)
    coord = coordinator(c, "bad")
    other = next(b for b in (1, 2, 3) if b != coord)
    assert c.call(other, 12, 3, {"group_id": "bad", "generation_id": 1, "member_id": "x",
                                 "group_instance_id": None}, "a").error_code == ErrorCode.not_coordinator
    assert c.call(coord, 11, 5, join_body("bad", "who-is-this"), "a").error_code == ErrorCode.unknown_member_id
    short = dict(join_body("bad"), session_timeout=10)
    assert c.call(coord, 11, 5, short, "a").error_code == ErrorCode.invalid_session_timeout
    big = {"group_id": "bad", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None, "retention_time": -1,
           "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                    "committed_leader_epoch": -1, "committed_metadata": "x" * 5000}]}]}
    assert c.call(coord, 8, 7, big, "a").topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
    fetched = c.call(coord, 9, 7, {"group_id": "bad", "topics": [{"name": "t", "partition_indexes": [0]}],
                                   "require_stable": False}, "a")
    assert fetched.topics[0].partitions[0].committed_offset == -1
    produce = {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": b""}]}]}
    answer = c.call(1, 0, 7, produce, "p").responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.invalid_topic_exception


def test_offsets_topic_records_use_kafkas_layouts():
    from strandline.group import records as rec

    key = rec.offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = rec.OffsetValue(42, 7, "meta", 1_700_000_000_000)
    raw = rec.offset_value(value)
    assert raw[:2] == b"\x00\x03" and rec.decode_offset_value(raw) == value
    member = rec.MemberValue("m-1", "inst", "cid", "/1.2.3.4", 300000, 10000, b"sub", b"asg")
    group = rec.GroupValue("consumer", 5, "range", "m-1", 123, (member,))
    assert rec.decode_group_value(rec.group_value(group)) == group
    assert rec.decode_key(rec.group_key("g")) == rec.GroupKey("g")
    batch = rec.build_batch([(key, raw), (rec.group_key("g"), None)], 1)
    assert [(o, k, v) for o, k, v in rec.iter_records(batch)] == [(0, key, raw), (1, rec.group_key("g"), None)]


def test_a_static_member_rejoins_under_its_instance_id_and_deleting_a_live_group_is_refused():
    c = cluster()
    coord = coordinator(c, "st")
    body = dict(join_body("st"), group_instance_id="host-a")
    first = c.call(coord, 11, 5, body, "a")                           # static: no MEMBER_ID_REQUIRED round
    assert first.error_code == ErrorCode.none and first.generation_id == 1
    c.call(coord, 14, 3, {"group_id": "st", "generation_id": 1, "member_id": first.member_id,
                          "group_instance_id": "host-a",
                          "assignments": [{"member_id": first.member_id, "assignment": b"mine"}]}, "a")
    again = c.call(coord, 11, 5, body, "a2")                           # restarted with the same instance id
    assert again.error_code == ErrorCode.none and again.member_id != first.member_id
    described = c.call(coord, 15, 5, {"groups": ["st"], "include_authorized_operations": False}, "admin")
    assert [m.group_instance_id for m in described.groups[0].members] == ["host-a"]
    deleted = c.call(coord, 42, 2, {"groups_names": ["st"]}, "admin")
    assert deleted.results[0].error_code == ErrorCode.non_empty_group


def test_a_static_member_replaced_by_a_newer_instance_is_fenced():
    """Two consumers with the same group.instance.id: the one that joined last holds it, and the
    other's Heartbeat, SyncGroup, OffsetCommit and JoinGroup under its old member id are answered
    FENCED_INSTANCE_ID (fatal to it) rather than UNKNOWN_MEMBER_ID, after which it would rejoin
    and take the instance back, the two taking turns for good (librdkafka's test 0102
    do_test_fenced_member_classic)."""
    c = cluster()
    create_t(c)
    coord = coordinator(c, "fence")
    body = dict(join_body("fence"), group_instance_id="host-a")
    old = c.call(coord, 11, 5, body, "a").member_id
    c.call(coord, 14, 3, {"group_id": "fence", "generation_id": 1, "member_id": old, "group_instance_id": "host-a",
                          "assignments": [{"member_id": old, "assignment": b"mine"}]}, "a")
    new = c.call(coord, 11, 5, body, "a2")
    assert new.error_code == ErrorCode.none and new.member_id != old
    mine = {"group_id": "fence", "generation_id": new.generation_id, "member_id": old, "group_instance_id": "host-a"}
    assert c.call(coord, 12, 3, mine, "a").error_code == ErrorCode.fenced_instance_id
    assert c.call(coord, 14, 3, {**mine, "assignments": []}, "a").error_code == ErrorCode.fenced_instance_id
    commit = {**mine, "generation_id_or_member_epoch": mine["generation_id"], "retention_time": -1,
              "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    del commit["generation_id"]
    assert c.call(coord, 8, 7, commit, "a").topics[0].partitions[0].error_code == ErrorCode.fenced_instance_id
    assert c.call(coord, 11, 5, dict(body, member_id=old), "a").error_code == ErrorCode.fenced_instance_id
    # the instance that holds it goes on as before
    hb = c.call(coord, 12, 3, {**mine, "member_id": new.member_id}, "a2")
    assert hb.error_code in (ErrorCode.none, ErrorCode.rebalance_in_progress)


def test_offsets_of_an_empty_group_expire_after_the_retention():
    c = SimCluster((1, 2, 3), **{"offsets.topic.num.partitions": "3", "offsets.retention.minutes": "1",
                                 "offsets.retention.check.interval.ms": "1000"})
    create_t(c)
    coord = coordinator(c, "old")
    commit = {"group_id": "old", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
              "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    assert c.call(coord, 8, 7, commit, "a").topics[0].partitions[0].error_code == ErrorCode.none
    fetch = {"group_id": "old", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": False}
    c.advance(30_000)
    assert c.call(coord, 9, 7, fetch, "a").topics[0].partitions[0].committed_offset == 5
    c.advance(40_000)
    assert c.call(coord, 9, 7, fetch, "a").topics[0].partitions[0].committed_offset == -1


def test_another_broker_creating_the_offsets_topic_first_is_not_a_warning():
    """Two coordinators' first FindCoordinator race to create __consumer_offsets; the one that
    loses hears TOPIC_ALREADY_EXISTS, which is success, not a WARN line. Too few brokers alive
    (INVALID_REPLICATION_FACTOR) is said once by the creation manager, not at every request.
    Anything else is a WARN line."""
    from kio.schema.errors import ErrorCode

    from strandline.broker.group_apis import offsets_topic_created

    assert offsets_topic_created(ErrorCode.none, None, 0) == []
    assert offsets_topic_created(ErrorCode.topic_already_exists, "Topic '__consumer_offsets' already exists.", 0) == []
    assert offsets_topic_created(ErrorCode.invalid_replication_factor, "only 1 broker", 0) == []
    [log] = offsets_topic_created(ErrorCode.request_timed_out, "no answer", 0)
    assert log.level == "warning" and "request_timed_out" in log.message


def test_a_plain_commit_written_after_a_transactions_offset_outlives_its_commit_marker_and_a_failover():
    """Issue 17: of a transactional offset (TxnOffsetCommit) and a plain OffsetCommit of the same
    group and partition, the one appended later to __consumer_offsets counts, when the commit
    marker arrives and when a new coordinator replays the partition (Kafka's
    completePendingTxnOffsetCommit). Here the plain commit comes later, so it stays."""
    c = cluster()
    create_t(c)
    coord = coordinator(c, "eos")
    index = partition_for("eos", 3)

    def offsets(committed: int) -> list:
        return [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": committed,
                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}]

    txn = c.call(coord, 28, 3, {"transactional_id": "tx", "group_id": "eos", "producer_id": 7, "producer_epoch": 0,
                                "generation_id": -1, "member_id": "", "group_instance_id": None,
                                "topics": offsets(5)}, "p")
    assert txn.topics[0].partitions[0].error_code == ErrorCode.none
    plain = c.call(coord, 8, 7, {"group_id": "eos", "generation_id_or_member_epoch": -1, "member_id": "",
                                 "group_instance_id": None, "topics": offsets(10)}, "a")
    assert plain.topics[0].partitions[0].error_code == ErrorCode.none
    marked = c.call(coord, 27, 1, {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": True,
                                                "coordinator_epoch": 0, "topics": [
                                                    {"name": "__consumer_offsets", "partition_indexes": [index]}]}]},
                    "coordinator")
    assert marked.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
    fetch = {"group_id": "eos", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": True}
    assert c.call(coord, 9, 7, fetch, "a").topics[0].partitions[0].committed_offset == 10
    c.settle()
    c.crash(coord, lose_unflushed=False)
    c.settle()
    new = coordinator(c, "eos", via=next(b for b in (1, 2, 3) if b != coord))
    assert new != coord
    assert c.call(new, 9, 7, fetch, "a").topics[0].partitions[0].committed_offset == 10
    # a later transaction's offset, appended after that plain commit, counts once committed
    txn = c.call(new, 28, 3, {"transactional_id": "tx2", "group_id": "eos", "producer_id": 8, "producer_epoch": 0,
                              "generation_id": -1, "member_id": "", "group_instance_id": None,
                              "topics": offsets(20)}, "p")
    assert txn.topics[0].partitions[0].error_code == ErrorCode.none
    marked = c.call(new, 27, 1, {"markers": [{"producer_id": 8, "producer_epoch": 0, "transaction_result": True,
                                              "coordinator_epoch": 0, "topics": [
                                                  {"name": "__consumer_offsets", "partition_indexes": [index]}]}]},
                    "coordinator")
    assert marked.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
    assert c.call(new, 9, 7, fetch, "a").topics[0].partitions[0].committed_offset == 20


def test_a_member_told_its_id_stays_pending_when_a_generation_completes_without_it():
    """KIP-394: two members are each told their id (MEMBER_ID_REQUIRED); the first rejoins and,
    with no initial delay, completes a generation alone. The second, pending until its session
    times out (Kafka keeps it), then joins with its id: it is taken in and starts the next
    rebalance (the first's SyncGroup hears REBALANCE_IN_PROGRESS), not told UNKNOWN_MEMBER_ID."""
    c = cluster()
    create_t(c)
    coord = coordinator(c, "p")
    first_a = c.call(coord, 11, 5, join_body("p"), "a")
    first_b = c.call(coord, 11, 5, join_body("p"), "b")
    assert first_a.error_code == first_b.error_code == ErrorCode.member_id_required
    a, b = first_a.member_id, first_b.member_id
    c.request(coord, 11, 5, join_body("p", a), "a")
    c.advance(20)
    ja = c.response(coord, 11, 5, "a")
    assert ja.error_code == ErrorCode.none and ja.generation_id == 1 and ja.leader == a
    c.request(coord, 11, 5, join_body("p", b), "b")
    c.advance(20)
    assert c.response(coord, 11, 5, "b") is None                     # waits for the next generation
    sync = c.call(coord, 14, 3, {"group_id": "p", "generation_id": 1, "member_id": a, "group_instance_id": None,
                                 "assignments": [{"member_id": a, "assignment": b"all"}]}, "a")
    assert sync.error_code == ErrorCode.rebalance_in_progress
    c.request(coord, 11, 5, join_body("p", a), "a")
    c.advance(20)
    ja, jb = c.response(coord, 11, 5, "a"), c.response(coord, 11, 5, "b")
    assert ja.generation_id == jb.generation_id == 2 and {m.member_id for m in ja.members} == {a, b}
