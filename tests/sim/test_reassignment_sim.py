"""CTL-11: the controller moves a partition's replicas (KIP-455 on ZooKeeper) in the simulator:
add the targets, wait for them in the ISR, move leadership in a new epoch, remove the others;
change the replication factor; cancel; a new controller resumes a move in progress."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.coordination.store import GetData
from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_faults_sim import inject
from tests.sim.test_replication_sim import LAG_MS, create, produce, values_on

FAST = {"replica.lag.time.max.ms": str(LAG_MS), "replica.socket.timeout.ms": "2000",
        "controller.socket.timeout.ms": "2000"}


def reassign(c: SimCluster, topic: str, replicas: list[int] | None, partition: int = 0):
    body = {"timeout": 30000, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "replicas": replicas}]}]}
    resp = c.call(c.controller_id, 45, 0, body)
    assert resp.error_code == ErrorCode.none, resp
    return resp.responses[0].partitions[0]


def ongoing(c: SimCluster) -> dict:
    resp = c.call(c.controller_id, 46, 0, {"timeout": 30000, "topics": None})
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def stored(c: SimCluster, topic: str):
    [res] = c.zk.execute([GetData(znodes.TopicZNode.path(topic))])
    return znodes.TopicZNode.decode(res.data)


def test_ctl_11_every_replica_moves_and_the_replication_factor_grows_with_nothing_lost():
    c = SimCluster((1, 2, 3, 4, 5), latency_ms=1, **FAST)
    create(c, "m", [1, 2], min_isr=1)
    written = [b"v%d" % i for i in range(20)]
    for v in written:
        assert produce(c, 1, "m", [v]).error_code == ErrorCode.none
    epoch = c.state("m").leader_epoch
    assert reassign(c, "m", [3, 4, 5]).error_code == ErrorCode.none
    assert ongoing(c) == {("m", 0): ([3, 4, 5, 1, 2], [3, 4, 5], [1, 2])}
    assert stored(c, "m").adding_replicas == {0: (3, 4, 5)}      # a new controller could resume it
    c.advance(10_000)
    assert ongoing(c) == {}
    state = c.state("m")
    assert stored(c, "m").partitions == {0: (3, 4, 5)} and not stored(c, "m").adding_replicas
    assert state.leader in (3, 4, 5) and set(state.isr) == {3, 4, 5} and state.leader_epoch >= epoch + 2
    for broker in (3, 4, 5):
        assert values_on(c, broker, "m") == written
    for broker in (1, 2):
        assert c.partition(broker, "m") is None                  # stopped, log deleted
    assert produce(c, state.leader, "m", [b"after"]).error_code == ErrorCode.none


def test_ctl_11_a_move_waits_for_its_targets_in_the_isr():
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "w", [1, 2])
    assert produce(c, 1, "w", [b"x"]).error_code == ErrorCode.none
    c.pause(3)
    assert reassign(c, "w", [2, 3]).error_code == ErrorCode.none
    c.advance(2000)
    assert ongoing(c) == {("w", 0): ([2, 3, 1], [3], [1])}       # broker 3 cannot catch up
    assert c.partition(1, "w") is not None
    c.resume(3)
    c.advance(10_000)
    assert ongoing(c) == {} and stored(c, "w").partitions == {0: (2, 3)}
    assert c.state("w").leader == 2 and values_on(c, 3, "w") == [b"x"]


def test_ctl_11_cancel_goes_back_to_the_original_replicas():
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "k", [1, 2])
    assert produce(c, 1, "k", [b"x"]).error_code == ErrorCode.none
    c.pause(3)
    reassign(c, "k", [3, 2])
    c.advance(500)
    assert reassign(c, "k", None).error_code == ErrorCode.none
    c.resume(3)
    c.advance(2000)
    assert ongoing(c) == {} and stored(c, "k").partitions == {0: (1, 2)}
    assert c.partition(3, "k") is None
    assert reassign(c, "k", None).error_code == ErrorCode.no_reassignment_in_progress


def test_ctl_11_bad_targets_are_refused_and_change_nothing():
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "b", [1, 2])
    c.crash(3)
    c.advance(LAG_MS * 2)
    assert reassign(c, "b", [1, 3]).error_code == ErrorCode.invalid_replica_assignment   # a dead broker
    assert reassign(c, "b", [1, 1]).error_code == ErrorCode.invalid_replica_assignment
    assert reassign(c, "b", []).error_code == ErrorCode.invalid_replica_assignment
    assert reassign(c, "nope", [1]).error_code == ErrorCode.unknown_topic_or_partition
    assert ongoing(c) == {} and stored(c, "b").partitions == {0: (1, 2)}


def test_ctl_11_a_new_controller_resumes_a_move_in_progress():
    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    create(c, "f", [2, 3])
    assert produce(c, 2, "f", [b"x"]).error_code == ErrorCode.none
    first = c.controller_id
    target = [b for b in (1, 2, 3, 4) if b not in (2, 3) and b != first][0]
    c.pause(target)
    reassign(c, "f", [2, target])
    c.advance(500)
    c.crash(first)
    c.advance(LAG_MS * 3)
    assert c.controller_id not in (-1, first)
    c.resume(target)
    c.advance(10_000)
    assert ongoing(c) == {} and stored(c, "f").partitions == {0: (2, target)}
    assert values_on(c, target, "f") == [b"x"]


def alter_configs(c: SimCluster, rtype: int, name: str, configs: dict[str, str]) -> None:
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}], "validate_only": False}
    assert c.call(1, 44, 1, body).responses[0].error_code == ErrorCode.none
    c.advance(100)


@pytest.mark.parametrize("side,replicas", [("leader", "*"), ("follower", "0:3")])
def test_ctl_11_a_throttled_move_catches_up_slowly_while_the_isr_keeps_acknowledging(side, replicas):
    """<side>.replication.throttled.rate with <side>.replication.throttled.replicas: the new,
    out-of-sync replica is held near the rate; the in-sync follower is never throttled."""
    c = SimCluster((1, 2, 3), latency_ms=1, **{**FAST, "replica.fetch.max.bytes": "10000"})
    create(c, "t", [1, 2], min_isr=2)
    for i in range(200):
        assert produce(c, 1, "t", [bytes([i % 256]) * 1000]).error_code == ErrorCode.none
    alter_configs(c, 4, "", {f"{side}.replication.throttled.rate": "10000"})
    alter_configs(c, 2, "t", {f"{side}.replication.throttled.replicas": replicas})
    reassign(c, "t", [1, 2, 3])
    c.advance(3000)
    leader = c.partition(1, "t")
    behind = leader.log_end_offset - c.partition(3, "t").log_end_offset
    assert behind > 50, behind                    # ~10 KB/s (with Kafka's 10 s measuring window)
    started = c.now
    assert produce(c, 1, "t", [b"during"]).error_code == ErrorCode.none
    assert c.now - started < 100                  # broker 2, in sync, is not throttled
    c.advance(40_000)
    assert ongoing(c) == {} and set(c.state("t").isr) == {1, 2, 3}
    assert values_on(c, 3, "t") == values_on(c, 1, "t")


def test_ctl_11_without_a_throttle_the_same_move_is_quick():
    c = SimCluster((1, 2, 3), latency_ms=1, **{**FAST, "replica.fetch.max.bytes": "10000"})
    create(c, "t", [1, 2], min_isr=2)
    for i in range(200):
        assert produce(c, 1, "t", [bytes([i % 256]) * 1000]).error_code == ErrorCode.none
    alter_configs(c, 2, "t", {"leader.replication.throttled.replicas": "*"})    # listed, but no rate set
    reassign(c, "t", [1, 2, 3])
    c.advance(3000)
    assert c.partition(1, "t").log_end_offset == c.partition(3, "t").log_end_offset


def test_ctl_11_the_admin_reassign_partitions_znode_starts_moves_and_goes_once_they_are_done():
    from strandline.coordination.store import Create

    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "z", [1, 2], partitions=2)
    assert produce(c, 1, "z", [b"x"]).error_code == ErrorCode.none
    path = znodes.ReassignPartitionsZNode.path()
    c.pause(3)
    c.tool_zk([Create(path, znodes.ReassignPartitionsZNode.encode(
        {("z", 0): [2, 3], ("z", 1): [1, 3], ("nope", 0): [1]}), make_parents=True)])
    c.advance(500)
    assert set(ongoing(c)) == {("z", 0), ("z", 1)}
    [res] = c.zk.execute([GetData(path)])
    assert znodes.ReassignPartitionsZNode.decode(res.data) == {("z", 0): (2, 3), ("z", 1): (1, 3)}  # refused: gone
    c.resume(3)
    c.advance(10_000)
    assert ongoing(c) == {} and stored(c, "z").partitions == {0: (2, 3), 1: (1, 3)}
    [res] = c.zk.execute([GetData(path)])
    assert res.error.name == "NO_NODE"


def test_ctl_11_a_new_controller_whose_read_of_the_admin_reassign_partitions_znode_got_no_answer_reads_it_again():
    """A controller reads ``/admin/reassign_partitions`` when it takes office: a read ZooKeeper
    did not answer is made again, or the moves it lists never start."""
    from strandline.coordination.store import Create

    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    create(c, "y", [1, 2])
    assert produce(c, 1, "y", [b"x"]).error_code == ErrorCode.none
    first = c.controller_id
    path = znodes.ReassignPartitionsZNode.path()
    faults = iter(["not-applied"])
    c.zk_fault = lambda b, ops: next(faults, None) if b != first and any(
        isinstance(op, GetData) and op.path == path for op in ops) else None
    c.pause(first)            # its watch is held: the move is left to the next controller
    c.tool_zk([Create(path, znodes.ReassignPartitionsZNode.encode({("y", 0): [3, 4]}), make_parents=True)])
    c.crash(first)
    c.advance(LAG_MS * 3)
    assert c.controller_id not in (-1, first)
    c.advance(10_000)
    assert next(faults, "used") == "used"
    assert stored(c, "y").partitions == {0: (3, 4)}



def add_partitions(c: SimCluster, topic: str, count: int, client: str = "adder") -> None:
    body = {"topics": [{"name": topic, "count": count, "assignments": None}], "timeout_ms": 30000,
            "validate_only": False}
    c.request(c.controller_id, 37, 1, body, client=client)


def topic_write(ops: list) -> bool:
    from strandline.coordination.store import SetData
    return any(isinstance(op, SetData) and op.path == znodes.TopicZNode.path("w") for op in ops)


@pytest.mark.parametrize("fault", ["applied-reply-lost", "not-applied"])
def test_partitions_added_while_zookeeper_lost_the_answer_are_followed_or_not_there(fault):
    """CreatePartitions whose ZooKeeper answer is lost: the controller reads the topic back and
    follows what ZooKeeper has. Added: the answer says so, the new partition gets a leader and a
    retry is told it exists; not added: the answer is an error and a retry adds it."""
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "w", [1, 2])
    ctl = c.controller_id
    faults = iter([fault])
    c.zk_fault = lambda b, ops: next(faults, None) if b == ctl and topic_write(ops) else None
    add_partitions(c, "w", 2)
    c.advance(5000)
    assert next(faults, "used") == "used"
    applied = fault == "applied-reply-lost"
    first = c.response(ctl, 37, 1, client="adder").results[0]
    assert first.error_code == (ErrorCode.none if applied else ErrorCode.unknown_server_error), first
    add_partitions(c, "w", 2, client="retry")
    c.advance(5000)
    retry = c.response(ctl, 37, 1, client="retry").results[0]
    assert retry.error_code == (ErrorCode.invalid_partitions if applied else ErrorCode.none), retry
    assert set(stored(c, "w").partitions) == {0, 1}
    assert all(c.partition(b, "w", 1) is not None for b in stored(c, "w").partitions[1])
    assert c.state("w", 1).leader in stored(c, "w").partitions[1]


@pytest.mark.parametrize("fault", ["applied-reply-lost", "not-applied"])
def test_a_topic_created_while_zookeeper_lost_the_answer_is_followed_or_not_there(fault):
    """CreateTopics whose ZooKeeper answer is lost: the controller reads the topic back. Created:
    the answer says so and its partitions get leaders; not created: a retry creates it."""
    from strandline.coordination.store import Create
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    ctl = c.controller_id
    faults = iter([fault])
    c.zk_fault = lambda b, ops: next(faults, None) if b == ctl and any(
        isinstance(op, Create) and op.path == znodes.TopicZNode.path("v") for op in ops) else None
    body = {"topics": [{"name": "v", "num_partitions": 2, "replication_factor": 2, "assignments": [],
                        "configs": []}], "timeout": 30000, "validate_only": False}
    c.request(ctl, 19, 5, body, client="creator")
    c.advance(5000)
    assert next(faults, "used") == "used"
    applied = fault == "applied-reply-lost"
    first = c.response(ctl, 19, 5, client="creator").topics[0]
    assert first.error_code == (ErrorCode.none if applied else ErrorCode.unknown_server_error), first
    c.request(ctl, 19, 5, body, client="retry")
    c.advance(5000)
    retry = c.response(ctl, 19, 5, client="retry").topics[0]
    assert retry.error_code == (ErrorCode.topic_already_exists if applied else ErrorCode.none), retry
    for index, replicas in stored(c, "v").partitions.items():
        assert c.state("v", index).leader in replicas
        assert all(c.partition(b, "v", index) is not None for b in replicas)


def test_ctl_11_a_move_asked_for_while_partitions_are_being_added_keeps_the_new_partitions():
    """CreatePartitions, whose ZooKeeper answer is lost and its write applied late, and a move of
    another partition of the same topic asked for meanwhile: the topic znode must end with the
    new partition and the move, each write made from the assignment the one before it left."""
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "w", [1, 2])
    ctl = c.controller_id
    faults = iter([("applied-late", 500)])
    c.zk_fault = lambda b, ops: next(faults, None) if b == ctl and topic_write(ops) else None
    add_partitions(c, "w", 2)
    c.advance(5)
    c.request(ctl, 45, 0, {"timeout": 30000, "topics": [{"name": "w", "partitions": [
        {"partition_index": 0, "replicas": [2, 3]}]}]}, client="mover")
    state_path = znodes.TopicPartitionStateZNode.path("w", 1)
    for _ in range(1000):         # never a partition with znodes of its own that the topic znode lacks
        c.advance(10)
        [state] = c.zk.execute([GetData(state_path)])
        assert state.error.name == "NO_NODE" or 1 in stored(c, "w").partitions, \
            f"partition 1 is missing from the topic znode at {c.now}: {stored(c, 'w')}"
    assert next(faults, "used") == "used"
    added = c.response(ctl, 37, 1, client="adder").results[0]
    moved = c.response(ctl, 45, 0, client="mover").responses[0].partitions[0]
    assert (added.error_code, moved.error_code) == (ErrorCode.none, ErrorCode.none), (added, moved)
    assert ongoing(c) == {}
    assert stored(c, "w").partitions == {0: (2, 3), 1: (2, 3)}
    assert c.state("w", 1).leader in (2, 3)


def test_ctl_11_a_move_zookeeper_recorded_without_answering_is_read_back_before_the_topics_next_write():
    """A move's topic znode write is applied but its answer lost, while CreatePartitions waits
    behind it: the controller reads the znode back first, follows the move (so the partitions are
    refused while it goes on) and completes it; it never leaves a move recorded in ZooKeeper that
    it does not follow."""
    c = SimCluster((1, 2, 3), latency_ms=1, **FAST)
    create(c, "w", [1, 2])
    ctl = c.controller_id
    faults = iter(["applied-reply-lost", "not-applied"])
    fired = inject(c, lambda b, ops: next(faults, None) if b == ctl and topic_write(ops) else None)
    c.request(ctl, 45, 0, {"timeout": 30000, "topics": [{"name": "w", "partitions": [
        {"partition_index": 0, "replicas": [2, 3]}]}]}, client="mover")
    add_partitions(c, "w", 2)
    c.advance(10_000)
    assert fired == [(ctl, "applied-reply-lost"), (ctl, "not-applied")]
    added = c.response(ctl, 37, 1, client="adder").results[0]
    assert added.error_code == ErrorCode.reassignment_in_progress, added
    assert ongoing(c) == {}
    assert stored(c, "w").partitions == {0: (2, 3)} and not stored(c, "w").adding_replicas


def test_ctl_11_a_move_replacing_another_that_zookeeper_recorded_without_answering_is_the_one_followed():
    """A move to [1, 2, 3] waits (broker 3 cannot fetch); a second move, to [1, 2, 4], replaces it
    and its topic znode write is applied but its answer lost. The controller reads the znode back
    and follows the move ZooKeeper records, not the one it followed before (the simulator's seed
    6584563: the new target was never told, and an offline partition's unclean recovery waited
    forever for a replica that had never heard of it)."""
    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    create(c, "w", [1, 2])
    written = [b"v%d" % i for i in range(5)]
    for v in written:
        assert produce(c, c.state("w").leader, "w", [v]).error_code == ErrorCode.none
    for broker in (1, 2):
        c.cut_link(3, broker)
    assert reassign(c, "w", [1, 2, 3]).error_code == ErrorCode.none
    c.advance(2_000)
    assert ongoing(c) == {("w", 0): ([1, 2, 3], [3], [])}
    ctl = c.controller_id
    fired = inject(c, lambda b, ops: "applied-reply-lost" if b == ctl and topic_write(ops) else None)
    c.request(ctl, 45, 0, {"timeout": 30000, "topics": [{"name": "w", "partitions": [
        {"partition_index": 0, "replicas": [1, 2, 4]}]}]}, client="mover")
    c.advance(1_000)
    c.zk_fault = None
    assert fired and fired[0] == (ctl, "applied-reply-lost")
    c.advance(10_000)
    assert ongoing(c) == {}
    assert stored(c, "w").partitions == {0: (1, 2, 4)} and not stored(c, "w").adding_replicas
    assert values_on(c, 4, "w") == written and set(c.state("w").isr) == {1, 2, 4}


def move_r_0_off_broker_3_while_the_controller_cannot_reach_it(c: SimCluster) -> None:
    """Move r-0 from [1, 2, 3] to [1, 2, 4] with the link from the controller (1) to broker 3 cut:
    the move ends, and its StopReplica to broker 3 waits for an answer."""
    c.cut_link(1, 3)
    assert reassign(c, "r", [1, 2, 4]).error_code == ErrorCode.none
    deadline = c.now + 20_000
    while ongoing(c) and c.now < deadline:
        c.advance(10)
    assert ongoing(c) == {}


def test_ctl_11_a_stop_replica_retried_after_the_replica_moved_back_does_not_delete_it():
    """A move takes partition r-0 off broker 3 while the controller cannot reach it: the
    StopReplica (delete) times out and waits for its retry. The link heals and a second move gives
    the replica back to broker 3 before that retry, which then came after the newer LeaderAndIsr.
    Without leader epochs in StopReplica (KIP-570), broker 3 deleted the replica the controller
    had just given it, and a stale LeaderAndIsr made it a follower again in an older epoch; the
    broker fences such a StopReplica (test_protocol_control.py), and the retry now leaves out
    r-0, which the later LeaderAndIsr named."""
    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST)
    logs: list[tuple[int, int, str]] = []
    c.on_log = lambda broker, level, message: logs.append((c.now, broker, message))
    create(c, "r", [1, 2, 3], min_isr=2)
    written = [b"v%d" % i for i in range(5)]
    for value in written:
        assert produce(c, 1, "r", [value]).error_code == ErrorCode.none
    move_r_0_off_broker_3_while_the_controller_cannot_reach_it(c)
    c.advance(2050)                 # the StopReplica to broker 3 timed out; its retry comes in 1 s
    c.heal_link(1, 3)
    c.advance(50)
    back = c.now
    assert reassign(c, "r", [1, 2, 3]).error_code == ErrorCode.none
    c.advance(10_000)
    assert ongoing(c) == {} and set(c.state("r").isr) == {1, 2, 3}
    after = [(broker, message) for t, broker, message in logs if t >= back]
    assert (3, "Deleted log of r-0") not in after
    epochs = [int(m.split("epoch ")[1].split(",")[0]) for b, m in after if b == 3 and m.startswith("Follower of r-0")]
    assert epochs == sorted(epochs) and values_on(c, 3, "r") == written


def test_ctl_11_a_move_ends_when_the_controller_writes_an_isr_holding_its_targets():
    """A move to [1, 3, 4] waits for broker 4 in the ISR. Leader 2 adds it, but ZooKeeper loses its
    answer and no read of the state comes back: the leader never learns its change was applied,
    so it writes no ISR change notification. A preferred leader election then writes that ISR
    (leadership to 1) itself: the controller ends the move there, as Kafka's controller, which
    watches the state znode of each partition being moved, does. Before, the move waited for an
    ISR change notification that never came (sim explore --config acks1 seed 1, 30 s). The leader
    writes its own ISR here (inter.broker.protocol.version 2.6)."""
    c = SimCluster((1, 2, 3, 4), latency_ms=1, **FAST, **{"inter.broker.protocol.version": "2.6"})
    assert c.controller_id == 1
    create(c, "w", [2, 1, 3], min_isr=1)
    assert produce(c, 2, "w", [b"v0"]).error_code == ErrorCode.none
    state_path = znodes.TopicPartitionStateZNode.path("w", 0)
    lost: list[str] = []

    def leader_loses_answers(broker_id, ops):
        if broker_id == 2 and any(getattr(op, "path", None) == state_path for op in ops):
            lost.append(type(ops[0]).__name__)
            return "applied-reply-lost" if type(ops[0]).__name__ == "SetData" else "not-applied"
        return None
    c.zk_fault = leader_loses_answers
    assert reassign(c, "w", [1, 3, 4]).error_code == ErrorCode.none
    c.advance(3000)
    assert "SetData" in lost and "GetData" in lost        # the expansion applied, unknown to the leader
    assert 4 in c.state("w").isr and ("w", 0) in ongoing(c)
    resp = c.call(c.controller_id, 43, 2, {"election_type": 0, "topic_partitions": [
        {"topic": "w", "partitions": [0]}], "timeout_ms": 30000})
    assert resp.error_code == ErrorCode.none, resp
    c.zk_fault = None
    c.advance(3000)
    assert ongoing(c) == {}
    assert stored(c, "w").partitions == {0: (1, 3, 4)}
    assert c.partition(2, "w") is None


def test_ctl_11_a_broker_that_is_not_the_controller_answers_the_error_alone():
    """AlterPartitionReassignments sent to a broker that is not the controller: NOT_CONTROLLER at the
    top level and no partitions, as Kafka's controller callback answers it (found by
    tests/differential: reassignment-not-controller); nothing moves."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "r", [1, 2])
    before = stored(c, "r")
    other = next(b for b in (1, 2, 3) if b != c.controller_id)
    answer = c.call(other, 45, 0, {"timeout": 5000, "topics": [
        {"name": "r", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]}]})
    assert (answer.error_code, list(answer.responses)) == (ErrorCode.not_controller, [])
    c.advance(2000)
    assert ongoing(c) == {} and stored(c, "r") == before


def test_ctl_11_a_control_request_retried_after_a_later_one_to_the_broker_leaves_out_what_that_one_named():
    """CTL-4. A move takes partition t-0 off its leader while the leader's answers cannot reach
    the controller: its LeaderAndIsr (the move's first epoch) and later the StopReplica (delete)
    arrive, and it deletes its replica, but no answer comes back. The controller sends a request
    again when it gets no answer; it also sent the StopReplica before the LeaderAndIsr was
    answered, so that LeaderAndIsr's retry arrived after the deletion and made the broker leader
    again, in the old epoch, with an empty log (seed 3101241, config txn: a leader's high
    watermark went from 146 to 0). A Kafka broker hears its controller's requests in the order they
    were sent (one in flight per broker, the RequestSendThread); a retry now leaves out every
    partition a later request to that broker named, and a LeaderAndIsr left with none is not sent."""
    c = SimCluster((1, 2, 3, 4, 5), latency_ms=1, **FAST)
    logs: list[tuple[int, int, str]] = []
    c.on_log = lambda broker, level, message: logs.append((c.now, broker, message))
    controller = c.controller_id
    moved_off, a, b, target = [broker for broker in (1, 2, 3, 4, 5) if broker != controller]
    create(c, "t", [moved_off, a, b], min_isr=1)
    written = [b"v%d" % i for i in range(5)]
    for value in written:
        assert produce(c, moved_off, "t", [value]).error_code == ErrorCode.none
    c.cut_link(moved_off, controller)             # the leader's answers to the controller are held
    assert reassign(c, "t", [target, a, b]).error_code == ErrorCode.none
    c.advance(10_000)                             # timeouts, retries; the move ends meanwhile
    c.heal_link(moved_off, controller)
    c.advance(10_000)
    assert ongoing(c) == {} and stored(c, "t").partitions == {0: (target, a, b)}
    assert c.partition(moved_off, "t") is None, "the broker moved off holds t-0 again"
    deleted = [t for t, broker, m in logs if broker == moved_off and m == "Deleted log of t-0"]
    assert deleted, logs
    again = [m for t, broker, m in logs if broker == moved_off and t > deleted[0] and "of t-0 in epoch" in m]
    assert not again, again
    assert c.state("t").leader in (target, a, b)
    for broker in (target, a, b):
        assert values_on(c, broker, "t") == written
