"""A topic deleted while a broker could not hear of it, then created again under the same name:
that broker's logs of the deleted topic must never become replicas of the new one (SAFE-1).

The new topic's LeaderAndIsr names its topic id (KIP-516); each log records the id of its topic
in ``partition.metadata``. Before the fix, a broker paused through the deletion kept the old
log, and the new topic's leader, ahead of it, had it keep the old records under the new
topic's offsets, in the ISR: had it become leader, acknowledged writes would have been lost.
"""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from strandline.coordination.store import ZkError
from strandline.log.partition_metadata import FILE, read_topic_id, write_topic_id
from strandline.sim.cluster import LOG_DIR, SimCluster
from strandline.sim.disk import MemoryDisk
from tests.sim.test_replication_faults_sim import inject
from tests.sim.test_replication_sim import LAG_MS, create, produce, produce_request, values_on


def delete(c: SimCluster, name: str) -> None:
    resp = c.call(c.controller_id, 20, 4, {"topic_names": [name], "timeout_ms": 5000})
    assert resp.responses[0].error_code == ErrorCode.none, resp


def miss_the_deletion(c: SimCluster) -> None:
    """Broker 3 paused past its session timeout while topic t is deleted, then resumed."""
    c.pause(3)
    c.advance(8000)
    delete(c, "t")
    c.advance(1000)
    c.resume(3)
    c.advance(3000)


def give_up_the_deletion(c: SimCluster, name: str) -> None:
    """Remove the deletion's record by hand, as an operator gives up on a deletion that waits for a
    broker (Kafka's own advice for a stuck one): the topic may be made again at once, while a
    broker has not heard of its deletion. Without that, the creation waits for every live broker
    to have answered (test_a_topic_is_not_made_again_while_...)."""
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import Delete

    [result] = c.zk.execute([Delete(zn.DeleteTopicsTopicZNode.path(name))])
    assert result.error in (ZkError.NONE, ZkError.NO_NODE), result


def made_again_while_cut_off(c: SimCluster, lose_unflushed: bool) -> None:
    """Broker 3, cut off from the controller (still registered), misses topic t's deletion and
    creation, is killed (losing what it did not flush if ``lose_unflushed``) and started again once
    six records went to the new topic: it must end in the ISR with the new topic's records only."""
    c.partition_brokers([3], [1, 2])
    delete(c, "t")
    give_up_the_deletion(c, "t")
    create(c, "t", [1, 2, 3], min_isr=2)
    c.crash(3, lose_unflushed=lose_unflushed)
    new = [b"new%d" % i for i in range(6)]
    for value in new:
        assert produce(c, 1, "t", [value], within_ms=20000).error_code == ErrorCode.none
    c.heal_all_links()
    c.start(3)
    c.advance(5000)
    assert set(c.state("t").isr) == {1, 2, 3}
    assert values_on(c, 1, "t") == values_on(c, 2, "t") == values_on(c, 3, "t") == new


def cluster(logs: list[str]) -> SimCluster:
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "6000"})
    c.on_log = lambda broker, level, message: logs.append(f"{broker} {message}")
    create(c, "t", [1, 2, 3], min_isr=2)
    for i in range(5):
        assert produce(c, 1, "t", [b"old%d" % i]).error_code == ErrorCode.none
    c.advance(500)
    assert values_on(c, 3, "t") == [b"old%d" % i for i in range(5)]
    return c


def write_new_topic_ahead_of_broker_3(c: SimCluster) -> list[bytes]:
    """The topic again, its leader 1 six records ahead of broker 3 (cut off meanwhile), then healed."""
    c.partition_brokers([3], [1, 2])
    create(c, "t", [1, 2, 3], min_isr=2)
    new = [b"new%d" % i for i in range(6)]
    for value in new:
        assert produce(c, 1, "t", [value], within_ms=20000).error_code == ErrorCode.none
    c.heal_all_links()
    c.advance(5000)
    return new


def test_safe_1_a_broker_paused_through_a_topics_deletion_keeps_none_of_it_in_the_topic_made_again():
    logs: list[str] = []
    c = cluster(logs)
    miss_the_deletion(c)            # it registers again, having held the deleted topic's log
    new = write_new_topic_ahead_of_broker_3(c)
    assert set(c.state("t").isr) == {1, 2, 3}
    assert values_on(c, 1, "t") == values_on(c, 2, "t") == values_on(c, 3, "t") == new
    # its new session found the topic gone (before that, the new topic's id told its log apart)
    assert "3 Topic t was deleted while this broker's ZooKeeper session was lost" in logs, logs


def test_safe_1_a_log_of_a_deleted_topic_found_at_start_up_is_not_taken_for_the_new_topics():
    """Broker 3 is cut off from the controller (still registered) through the deletion and the new
    topic's creation, killed before either reaches it, and started again: its log on disk records
    the old topic's id, ZooKeeper assigns it the new topic's partition."""
    logs: list[str] = []
    c = cluster(logs)
    made_again_while_cut_off(c, lose_unflushed=False)
    assert any(line.startswith("3 Deleted log of t-0") and "earlier topic" in line for line in logs), logs


def test_safe_1_a_power_loss_keeps_the_topic_id_of_a_log_whose_records_it_keeps():
    """``partition.metadata`` is written without an fsync and made durable with the log's first
    flush. Broker 3 flushed its records of topic t; cut off from the controller, it misses t's
    deletion and creation, then loses power. Its log keeps the records, so it must keep t's id:
    before, the file came back empty, the log took the new topic's id at start-up, and broker 3
    held the deleted topic's records as the new topic's."""
    logs: list[str] = []
    c = cluster(logs)
    c.partition(3, "t").log.flush(c.now)           # a roll, flush.ms, a clean shutdown...
    made_again_while_cut_off(c, lose_unflushed=True)


def test_partition_metadata_is_kafkas_file_and_a_torn_one_reads_as_no_id():
    disk = MemoryDisk()
    disk.makedirs(f"{LOG_DIR}/t-0")
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert read_topic_id(disk, f"{LOG_DIR}/t-0") is None
    write_topic_id(disk, f"{LOG_DIR}/t-0", topic_id)
    assert disk.read_file(f"{LOG_DIR}/t-0/{FILE}") == b"version: 0\ntopic_id: ASNFZ4mrze8BI0VniavN7w\n"
    assert read_topic_id(disk, f"{LOG_DIR}/t-0") == topic_id
    for torn in (b"version: 0\ntopic_id: ASNF", b"", b"version: 1\ntopic_id: ASNFZ4mrze8BI0VniavN7w\n", b"\xff"):
        disk.write_file_atomic(f"{LOG_DIR}/t-0/{FILE}", torn)
        assert read_topic_id(disk, f"{LOG_DIR}/t-0") is None


def test_a_broker_that_missed_a_topics_deletion_reports_the_new_topics_id():
    """Broker 3 hosts no replica of the topic; paused through its deletion, it kept the topic in
    its metadata. When the topic is made again, UpdateMetadata names the new id: broker 3 reads
    the topic again and answers Metadata with the new id (a client fetching by topic id, KIP-516,
    would otherwise ask for a topic the leader does not know)."""
    c = SimCluster((1, 2, 3), **{"zookeeper.session.timeout.ms": "6000"})
    create(c, "t", [1, 2])

    def topic_id_on(broker: int):
        resp = c.call(broker, 3, 12, {"topics": [{"topic_id": None, "name": "t"}], "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        [topic] = resp.topics
        return topic.topic_id if topic.error_code == ErrorCode.none else topic.error_code

    old = topic_id_on(1)
    assert topic_id_on(3) == old
    miss_the_deletion(c)
    create(c, "t", [1, 2])
    c.advance(1000)
    new = topic_id_on(1)
    assert new != old
    assert topic_id_on(3) == new


def test_a_deletion_retried_after_the_topic_was_made_again_leaves_the_new_topic_alone():
    """The controller cannot reach broker 3 when it deletes the topic: its StopReplica and
    UpdateMetadata time out and wait for their retries. The link heals and the topic is made
    again before those retries: sent as they were, they arrived after the new topic's LeaderAndIsr,
    deleted broker 3's replica of the new topic and dropped the topic from its metadata. A retry
    now leaves out what the deletion said of a topic made again since (and a broker ignores a
    deletion naming another topic id than its own)."""
    from tests.sim.test_reassignment_sim import FAST

    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    logs: list[tuple[int, int, str]] = []
    c.on_log = lambda broker, level, message: logs.append((c.now, broker, message))
    create(c, "t", [1, 2, 3], min_isr=2)
    for i in range(3):
        assert produce(c, 1, "t", [b"old%d" % i]).error_code == ErrorCode.none
    c.cut_link(1, 3)
    delete(c, "t")
    c.advance(2050)                 # the deletion's requests to broker 3 timed out
    c.heal_link(1, 3)
    c.advance(50)
    give_up_the_deletion(c, "t")
    create(c, "t", [1, 2, 3], min_isr=2)
    made_again = c.now
    new = [b"new%d" % i for i in range(3)]
    for value in new:
        assert produce(c, 1, "t", [value], within_ms=5000).error_code == ErrorCode.none
    c.advance(5000)
    assert set(c.state("t").isr) == {1, 2, 3} and values_on(c, 3, "t") == new
    after = [message for t, broker, message in logs if broker == 3 and t > made_again]
    assert "Deleted log of t-0" not in after and "Topic t deleted from the metadata cache" not in after, after
    assert "t" in c.brokers[3].core.metadata.topics


def test_a_deletion_whose_controller_lost_office_before_telling_the_brokers_is_finished_by_the_next():
    """The controller's session expires after ZooKeeper removed the topic's znodes but before
    their answer reached it: it could no longer tell the brokers, and no other controller knew of
    the deletion, so every broker went on serving a topic ZooKeeper no longer had (found by sim
    explore --recreate, seed 105). The deletion is recorded under /admin/delete_topics first; the
    next controller tells the brokers and removes the record."""
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import Delete

    c = SimCluster((1, 2, 3), **{"zookeeper.session.timeout.ms": "6000"})
    create(c, "t", [1, 2, 3])
    assert produce(c, 1, "t", [b"x"]).error_code == ErrorCode.none
    old = c.controller_id
    fired = inject(c, lambda broker, ops: ("reply-delayed", 20000) if broker == old and any(
        isinstance(op, Delete) and op.path == zn.TopicZNode.path("t") for op in ops) else None)
    c.request(old, 20, 4, {"topic_names": ["t"], "timeout_ms": 30000}, "admin")
    c.advance(100)
    assert fired == [(old, ("reply-delayed", 20000))]
    assert zn.TopicZNode.path("t") not in c.zk.nodes and zn.DeleteTopicsTopicZNode.path("t") in c.zk.nodes
    c.expire_session(old)
    c.advance(25000)
    assert c.controller_id != old
    holding = [b for b, node in c.brokers.items()
               if "t" in node.core.metadata.topics or any(k[0] == "t" for k in node.core.partitions)]
    assert holding == []
    assert zn.DeleteTopicsTopicZNode.path("t") not in c.zk.nodes


def test_a_broker_whose_session_was_lost_through_a_deletion_forgets_the_topic():
    """Broker 3 is paused past its session timeout while the topic is deleted: the controller
    tells only the brokers registered then. When its new session opens, broker 3 finds the topic
    gone from ZooKeeper, and drops it and its replica (found by sim explore --recreate)."""
    logs: list[str] = []
    c = cluster(logs)
    miss_the_deletion(c)
    assert "t" not in c.brokers[3].core.metadata.topics and c.partition(3, "t") is None
    assert ("t", 0) not in c.brokers[3].core.logs.logs
    assert any(line == "3 Topic t was deleted while this broker's ZooKeeper session was lost" for line in logs), logs


def test_a_moves_stop_replica_retried_after_the_topic_was_made_again_leaves_the_new_replica():
    """A move takes r-0 off broker 3 while the controller cannot reach it: its StopReplica
    (delete, the old topic's leader epoch) waits for a retry. The topic is deleted, the link heals
    and the topic is made again with broker 3 leading: the new topic's epochs start at 0 again, so
    the epoch did not fence the retry, and broker 3 deleted the new leader's log (the partition
    had no leader for good). A retry now leaves out a topic made again (another topic id)."""
    from tests.sim.test_reassignment_sim import FAST, move_r_0_off_broker_3_while_the_controller_cannot_reach_it

    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    create(c, "r", [1, 2, 3], min_isr=2)
    for i in range(5):
        assert produce(c, 1, "r", [b"v%d" % i]).error_code == ErrorCode.none
    move_r_0_off_broker_3_while_the_controller_cannot_reach_it(c)
    delete(c, "r")
    c.advance(2050)                 # the StopReplica to broker 3 timed out; its retry comes in 1 s
    c.heal_link(1, 3)
    c.advance(50)
    give_up_the_deletion(c, "r")
    create(c, "r", [3, 1, 2], min_isr=2)
    new = [b"new%d" % i for i in range(3)]
    for value in new:
        assert produce(c, 3, "r", [value], within_ms=5000).error_code == ErrorCode.none
    c.advance(5000)
    assert c.state("r").leader == 3 and c.partition(3, "r") is not None
    assert values_on(c, 3, "r") == values_on(c, 1, "r") == new
    assert produce(c, 3, "r", [b"later"], within_ms=5000).error_code == ErrorCode.none


def test_a_move_write_queued_before_a_deletion_does_not_write_over_the_topic_made_again():
    """Two moves of topic t: the first's topic znode write waits for ZooKeeper's answer, the second
    waits its turn behind it. The topic is deleted and made again meanwhile: the second write,
    planned from the deleted topic, wrote its assignment and id over the new topic's znode. The
    deletion now waits its turn among the topic's writes, and a write whose topic is gone is
    answered UNKNOWN_TOPIC_OR_PARTITION."""
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import SetData
    from tests.sim.test_reassignment_sim import FAST, ongoing, stored

    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    create(c, "t", [1, 2], partitions=2)
    delayed: list[bool] = []

    def fault(broker, ops):
        if not delayed and any(isinstance(op, SetData) and op.path == zn.TopicZNode.path("t") for op in ops):
            delayed.append(True)
            return ("reply-delayed", 5000)
        return None
    fired = inject(c, fault)

    def move(index, replicas):
        return {"timeout": 30000, "topics": [{"name": "t", "partitions": [
            {"partition_index": index, "replicas": replicas}]}]}
    c.request(c.controller_id, 45, 0, move(0, [2, 3]), "admin")
    c.advance(20)
    assert fired == [(c.controller_id, ("reply-delayed", 5000))]       # the first move's write waits
    c.request(c.controller_id, 45, 0, move(1, [3, 4]), "admin")       # queued behind the first write
    c.advance(20)
    c.call(c.controller_id, 20, 4, {"topic_names": ["t"], "timeout_ms": 30000}, "deleter", within_ms=10_000)
    give_up_the_deletion(c, "t")
    create(c, "t", [1, 2], partitions=2)
    new_id = c.brokers[c.controller_id].core.controller.ctx.topics["t"].topic_id
    c.advance(10_000)
    znode = stored(c, "t")
    assert znode.topic_id == new_id and dict(znode.partitions) == {0: (1, 2), 1: (1, 2)}
    assert ongoing(c) == {}


def test_two_deletions_of_a_topic_at_once_both_answered_and_no_record_left():
    """Two DeleteTopics of t at once: the second waits for the first's deletion; both are answered,
    and the deletion's record under /admin/delete_topics goes once every broker heard of it."""
    from strandline.coordination import znodes as zn
    from tests.sim.test_reassignment_sim import FAST

    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "t", [1, 2, 3])
    body = {"topic_names": ["t"], "timeout_ms": 5000}
    c.request(c.controller_id, 20, 4, body, "admin-a")
    c.request(c.controller_id, 20, 4, body, "admin-b")
    c.advance(5000)
    for client in ("admin-a", "admin-b"):
        assert c.response(c.controller_id, 20, 4, client).responses[0].error_code == ErrorCode.none
    assert zn.TopicZNode.path("t") not in c.zk.nodes
    assert zn.DeleteTopicsTopicZNode.path("t") not in c.zk.nodes


def test_a_topic_is_not_made_again_while_a_broker_that_led_it_has_not_heard_of_its_deletion():
    """ISR-5 across a topic's deletion: the leader's compare-and-set must not succeed on another
    topic's state. The controller cannot reach the leader of t-0 when it deletes t. Made again at once (as a
    client's Metadata auto-creates it), the new topic's partition state was znode version 0, as the
    old one's had been: the old leader, its followers gone, shrank the old ISR with a write
    conditioned on that version, and it landed on the new topic, naming a leader that holds no
    replica of it (found by sim explore, seed 4400037; the partition never had a full ISR again).
    As in Kafka, a topic whose deletion is recorded under /admin/delete_topics is not created
    again (TOPIC_ALREADY_EXISTS, marked for deletion) until every live broker has answered it.
    Before, the topic was made at once, and its state became leader {old leader}, ISR [old leader]."""
    from strandline.coordination import znodes as zn

    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    controller = c.controller_id
    leader, other = [b for b in (1, 2, 3) if b != controller][:2]
    create(c, "t", [leader, controller, other])
    assert produce(c, leader, "t", [b"old"]).error_code == ErrorCode.none
    c.cut_link(controller, leader)              # the leader hears nothing of the deletion
    delete(c, "t")
    body = {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [other]}], "configs": []}],
            "timeout": 1000, "validate_only": False}
    refused = c.call(controller, 19, 5, body).topics[0]
    assert refused.error_code == ErrorCode.topic_already_exists, refused
    assert "marked for deletion" in refused.error_message
    # a producer still writing to the old leader: its followers gone, it shrinks the old ISR
    assert produce(c, leader, "t", [b"late"], acks=1).error_code == ErrorCode.none
    c.advance(3 * LAG_MS)
    assert zn.TopicZNode.path("t") not in c.zk.nodes
    c.heal_link(controller, leader)
    deadline = c.now + 20000
    while zn.DeleteTopicsTopicZNode.path("t") in c.zk.nodes and c.now < deadline:
        c.advance(100)
    assert c.call(controller, 19, 5, body).topics[0].error_code == ErrorCode.none
    c.advance(3 * LAG_MS)
    state = c.state("t")
    assert (state.leader, tuple(state.isr)) == (other, (other,)), state
    assert produce(c, other, "t", [b"new"]).error_code == ErrorCode.none
    assert values_on(c, other, "t") == [b"new"]


def test_a_topic_is_not_made_again_while_a_broker_that_led_it_is_paused_past_its_session():
    """ISR-5 across a topic's deletion, continued. The leader of t-0 is paused past its ZooKeeper
    session while t is deleted: no longer live,
    the deletion did not wait for it, and t was made again at once. Resumed, the old leader shrank
    the old ISR (a producer had written to it just before the pause) with a write conditioned on
    the state znode's version, and it landed on the new topic's state (found by sim explore, seed
    4600247). As Kafka's deletion waits for every replica, the record stays until the paused
    broker has registered again and answered; the topic is not made again before."""
    from strandline.coordination import znodes as zn

    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "6000"})
    controller = c.controller_id
    leader, other = [b for b in (1, 2, 3) if b != controller][:2]
    create(c, "t", [leader, controller, other])
    assert produce(c, leader, "t", [b"old"]).error_code == ErrorCode.none
    c.partition_brokers([leader])               # its followers stop hearing from it
    produce_request(c, leader, "t", [b"late"], acks=1)
    c.advance(10)
    c.pause(leader)
    c.heal_all_links()
    c.advance(8000)                             # its session expired: it is not live
    assert leader not in c.brokers[controller].core.controller.ctx.live_brokers
    delete(c, "t")
    c.advance(1000)
    body = {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [other]}], "configs": []}],
            "timeout": 1000, "validate_only": False}
    refused = c.call(controller, 19, 5, body).topics[0]
    assert refused.error_code == ErrorCode.topic_already_exists and "marked for deletion" in refused.error_message
    c.resume(leader)                            # it shrinks its old ISR at once, then registers again
    deadline = c.now + 20000
    while zn.DeleteTopicsTopicZNode.path("t") in c.zk.nodes and c.now < deadline:
        c.advance(100)
    assert zn.DeleteTopicsTopicZNode.path("t") not in c.zk.nodes
    assert c.call(controller, 19, 5, body).topics[0].error_code == ErrorCode.none
    c.advance(3 * LAG_MS)
    state = c.state("t")
    assert (state.leader, tuple(state.isr)) == (other, (other,)), state


def test_a_controller_that_lost_its_office_while_recording_a_deletion_writes_nothing_after():
    """Controller 1, cut from ZooKeeper and the brokers, is asked to delete t and tries to record
    the deletion again every second; its session expires and broker 2 or 3 takes office. Healed, it
    learns it lost its office, yet its next retry wrote the record (through its new session), and no
    controller carried the deletion out: the topic could not be made again, ever (sim explore seed
    1000041, full menu). Its retries now stop with its office, and its writes carry the controller
    epoch's check: nothing is recorded, the client is told NOT_CONTROLLER, and t stays."""
    from strandline.coordination import znodes as zn

    c = SimCluster((1, 2, 3), **{"zookeeper.session.timeout.ms": "6000"})
    create(c, "t", [2, 3])
    old = c.controller_id
    assert old == 1
    c.cut_off(old)
    c.request(old, 20, 4, {"topic_names": ["t"], "timeout_ms": 30000}, "admin")
    c.advance(9000)
    assert c.controller_id not in (-1, old)
    c.heal(old)
    c.advance(5000)
    answer = c.response(old, 20, 4, "admin")
    assert answer is not None and answer.responses[0].error_code == ErrorCode.not_controller, answer
    assert zn.DeleteTopicsTopicZNode.path("t") not in c.zk.nodes
    assert zn.TopicZNode.path("t") in c.zk.nodes


def test_a_deletion_recorded_by_a_tool_is_carried_out_at_once():
    """Kafka's own tools (kafka-topics --zookeeper --delete) ask for a deletion by writing
    /admin/delete_topics/<t>: the controller watches those records (Kafka's TopicDeletionHandler)
    and deletes the topic then, not at its next change of office."""
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import Create

    c = SimCluster((1, 2, 3), **{"zookeeper.session.timeout.ms": "6000"})
    create(c, "t", [2, 3])
    assert produce(c, 2, "t", [b"x"]).error_code == ErrorCode.none
    c.tool_zk([Create(zn.DeleteTopicsTopicZNode.path("t"), b"", make_parents=True)])
    c.advance(1000)
    assert zn.TopicZNode.path("t") not in c.zk.nodes and zn.DeleteTopicsTopicZNode.path("t") not in c.zk.nodes
    assert [b for b, node in c.brokers.items() if any(k[0] == "t" for k in node.core.partitions)] == []
