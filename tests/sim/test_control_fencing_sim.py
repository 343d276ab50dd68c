"""The inter-broker requests (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown) are
taken only from the controller, about a broker's current registration (KIP-380's broker epoch,
beyond Kafka: an unknown, later or misnamed one too), in the deterministic simulator.

A client that forges one with a stale, unknown (-1) or wrong controller id, controller epoch or
broker epoch is refused and moves nothing; the cluster's own controller still gets through in the
races where a broker learns of a new controller or of its own new registration after the
controller spoke to it (the controller sends again). CTL-4, CTL-9.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.protocol import control
from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_sim import produce, values_on

TOPIC = "f"
PARTITIONS = 6
ASSIGNMENTS = [[1 + (p % 3), 1 + ((p + 1) % 3), 1 + ((p + 2) % 3)] for p in range(PARTITIONS)]


def create_topic(c: SimCluster) -> None:
    body = {"topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": p, "broker_ids": a} for p, a in enumerate(ASSIGNMENTS)],
                        "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
            "timeout": 1000, "validate_only": False}
    assert c.call(c.controller_id, 19, 5, body).topics[0].error_code == ErrorCode.none
    c.advance(100)


def registration(c: SimCluster, broker_id: int) -> int:
    """The broker's epoch: the czxid of its ``/brokers/ids`` znode."""
    return c.zk.czxid[znodes.BrokerIdZNode.path(broker_id)]


def control_call(c: SimCluster, broker_id: int, api_key: int, body: dict, version: int | None = None,
                 client: str = "forger") -> dict | None:
    """A control request from a plain client; its answer (None: the connection was closed)."""
    frame = control.encode_request(api_key, c.next_correlation(), client, body, version)
    answers: list = []
    c.client_send(broker_id, client, frame, answers.append, timeout_ms=5000)
    c.settle()
    waited = 0
    while not answers and waited < 1000:
        c.advance(1)
        waited += 1
    assert answers, "no answer"
    return None if answers[0] is None else control.decode_response(api_key, answers[0], version)


def cluster_state(c: SimCluster) -> dict:
    """Each partition's leader, leader epoch and ISR in ZooKeeper, and as each broker holds it."""
    zk = {p: (s.leader, s.leader_epoch, s.isr) for p in range(PARTITIONS) for s in [c.state(TOPIC, p)]}
    held = {(b, p): (part.is_leader, part.leader_epoch)
            for b, node in c.brokers.items() if node.core is not None
            for p in range(PARTITIONS) for part in [node.core.partitions.get((TOPIC, p))] if part is not None}
    return {"zk": zk, "brokers": held}


@pytest.fixture(scope="module")
def fenced():
    """Three brokers, broker 2 bounced once (its first registration is stale), a topic whose six
    partitions each broker leads two of."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "1000"})
    stale = registration(c, 2)
    c.bounce(2)
    c.advance(2000)
    assert registration(c, 2) > stale
    create_topic(c)
    assert {c.state(TOPIC, p).leader for p in range(PARTITIONS)} == {1, 2, 3}
    return c, stale


def victim(c: SimCluster) -> int:
    """A broker that is not the controller and leads partitions."""
    return next(b for b in (2, 3) if b != c.controller_id)


def test_ctl_9_forged_controlled_shutdowns_are_refused_and_move_no_leadership(fenced):
    """ControlledShutdown names the stopping broker and (v2+) its registration; a client naming a
    stale, unknown (-1), later registration, or a broker not registered, or an older version
    without the epoch, is answered STALE_BROKER_EPOCH, and no leadership or ISR moves."""
    c, stale = fenced
    target = victim(c)
    current = registration(c, target)
    before = cluster_state(c)
    forged = [(3, {"broker_id": target, "broker_epoch": -1}),
              (3, {"broker_id": target, "broker_epoch": current + 1}),
              (3, {"broker_id": target, "broker_epoch": current - 1}),
              (2, {"broker_id": target, "broker_epoch": -1}),
              (1, {"broker_id": target}),
              (0, {"broker_id": target}),
              (3, {"broker_id": 9, "broker_epoch": current})]
    if target == 2:
        forged.append((3, {"broker_id": 2, "broker_epoch": stale}))
    for version, body in forged:
        answer = control_call(c, c.controller_id, control.CONTROLLED_SHUTDOWN, body, version)
        assert answer == {"error_code": ErrorCode.stale_broker_epoch, "remaining_partitions": []}, (version, body)
    c.advance(2000)
    assert cluster_state(c) == before
    assert not c.brokers[c.controller_id].core.controller.ctx.shutting_down


def test_ctl_9_the_test_sees_a_move_the_broker_s_own_registration_is_not_refused():
    """What the test above would see had a forged request got through: the same request naming the
    broker's current registration moves its leaderships (as a broker stopping would ask)."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "1000"})
    create_topic(c)
    target = 2
    before = cluster_state(c)
    answer = control_call(c, c.controller_id, control.CONTROLLED_SHUTDOWN,
                          {"broker_id": target, "broker_epoch": registration(c, target)})
    assert answer["error_code"] == ErrorCode.none
    c.advance(100)
    assert cluster_state(c) != before
    assert all(c.state(TOPIC, p).leader != target for p in range(PARTITIONS))


def _header(c: SimCluster, target: int, **changes) -> dict:
    """The controller's request header as the current controller would send it to ``target``."""
    header = {"controller_id": c.controller_id, "controller_epoch": c.brokers[c.controller_id].core.controller_epoch,
              "broker_epoch": registration(c, target)}
    return {**header, **changes}


def _forgeries(c: SimCluster, target: int, stale: int) -> list[tuple[str, dict]]:
    ctl = c.controller_id
    other = next(b for b in (1, 2, 3) if b not in (ctl, target))
    epoch = c.brokers[ctl].core.controller_epoch
    current = registration(c, target)
    cases = [("broker epoch -1", _header(c, target, broker_epoch=-1)),
             ("a later broker epoch", _header(c, target, broker_epoch=current + 1)),
             ("an earlier broker epoch", _header(c, target, broker_epoch=current - 1)),
             ("another broker as controller", _header(c, target, controller_id=other)),
             ("an unknown controller", _header(c, target, controller_id=-1)),
             ("a newer controller epoch from another broker", _header(c, target, controller_id=other,
                                                                      controller_epoch=epoch + 1)),
             ("an older controller epoch", _header(c, target, controller_epoch=epoch - 1))]
    if target == 2:
        cases.append(("broker 2's earlier registration", _header(c, target, broker_epoch=stale)))
    return cases


def _refused(case: str, answer: dict | None) -> None:
    assert answer is not None, case
    expected = ErrorCode.stale_controller_epoch if "controller" in case else ErrorCode.stale_broker_epoch
    assert answer["error_code"] == expected, (case, answer)


def test_ctl_4_forged_leader_and_isr_is_refused_and_makes_no_leader(fenced):
    """A LeaderAndIsr making the target leader of the partitions it follows, in a far newer leader
    epoch (it would then refuse the real controller's states), and claiming every other partition."""
    c, stale = fenced
    target = victim(c)
    before = cluster_state(c)
    followed = [p for p in range(PARTITIONS) if c.state(TOPIC, p).leader != target]
    topic_id = c.brokers[target].core.metadata.topics[TOPIC].topic_id
    for case, header in _forgeries(c, target, stale):
        body = {**header, "type": 0, "live_leaders": [], "topic_states": [{
            "topic_name": TOPIC, "topic_id": topic_id, "partition_states": [{
                "partition_index": p, "controller_epoch": header["controller_epoch"], "leader": target,
                "leader_epoch": 100, "isr": [target], "zk_version": 100, "replicas": ASSIGNMENTS[p],
                "adding_replicas": [], "removing_replicas": [], "is_new": False} for p in followed]}]}
        _refused(case, control_call(c, target, control.LEADER_AND_ISR, body))
    c.advance(2000)
    assert cluster_state(c) == before


def test_ctl_4_forged_stop_replica_is_refused_and_deletes_nothing(fenced):
    c, stale = fenced
    target = victim(c)
    before = cluster_state(c)
    data = {p: c.log_bytes(target, TOPIC, p) for p in range(PARTITIONS)}
    for case, header in _forgeries(c, target, stale):
        body = {**header, "topic_states": [{"topic_name": TOPIC, "partition_states": [
            {"partition_index": p, "leader_epoch": control.EPOCH_DURING_DELETE, "delete_partition": True}
            for p in range(PARTITIONS)]}]}
        _refused(case, control_call(c, target, control.STOP_REPLICA, body))
    c.advance(2000)
    assert cluster_state(c) == before
    assert all((TOPIC, p) in c.brokers[target].core.logs.logs for p in range(PARTITIONS))
    assert {p: c.log_bytes(target, TOPIC, p) for p in range(PARTITIONS)} == data
    assert all(any((TOPIC, p) in f.partitions for f in c.brokers[target].core.fetchers.values())
               for p in range(PARTITIONS) if c.state(TOPIC, p).leader != target)


def test_ctl_4_forged_update_metadata_is_refused_and_changes_no_metadata(fenced):
    """An UpdateMetadata that would leave no live broker and delete the topic from the cache."""
    c, stale = fenced
    target = victim(c)
    md = c.brokers[target].core.metadata
    brokers, topic = dict(md.brokers), md.topics[TOPIC]
    states = dict(topic.states)
    for case, header in _forgeries(c, target, stale):
        body = {**header, "live_brokers": [], "topic_states": [{
            "topic_name": TOPIC, "topic_id": topic.topic_id, "partition_states": [{
                "partition_index": p, "controller_epoch": header["controller_epoch"], "leader": -2,
                "leader_epoch": 0, "isr": [], "zk_version": 0, "replicas": [], "offline_replicas": []}
                for p in range(PARTITIONS)]}]}
        _refused(case, control_call(c, target, control.UPDATE_METADATA, body))
    c.advance(100)
    assert md.brokers == brokers and md.topics.get(TOPIC) is topic and topic.states == states


def test_the_cluster_still_fails_over_after_forgeries(fenced):
    """After the forgeries above: the controller's own requests still get through: a leader dies,
    the others take its partitions, acks=all writes go on, and it comes back into every ISR."""
    c, _ = fenced
    leader = c.state(TOPIC, 0).leader
    assert produce(c, leader, TOPIC, [b"m1"]).error_code == ErrorCode.none
    c.crash(leader, lose_unflushed=False)
    c.advance(100)
    state = c.state(TOPIC, 0)
    assert state.leader not in (leader, -1)
    assert produce(c, state.leader, TOPIC, [b"m2"]).error_code == ErrorCode.none
    c.start(leader)
    c.advance(3000)
    assert all(set(c.state(TOPIC, p).isr) == {1, 2, 3} for p in range(PARTITIONS))
    assert values_on(c, 1, TOPIC) == values_on(c, 2, TOPIC) == values_on(c, 3, TOPIC) == [b"m1", b"m2"]


def test_a_broker_that_learns_of_its_new_registration_after_the_controller_gets_its_requests_again():
    """The shell registers the broker again (a new ZooKeeper session) and tells the core a moment
    later; the controller, quicker, addresses the new registration: refused meanwhile, sent again,
    taken once the broker knows its epoch. Without the resend it would never rejoin an ISR."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "1000"})
    create_topic(c)
    target = victim(c)
    node = c.brokers[target]
    core = node.core
    told: list[int] = []
    core.on_registered = lambda epoch, now_ms=0: told.append(epoch) or []      # the shell is slow to say
    c.expire_session(target)
    c.advance(3000)
    assert told == [registration(c, target)] and core.broker_epoch != told[0]
    assert all(target not in c.state(TOPIC, p).isr for p in range(PARTITIONS))
    del core.on_registered
    c.apply(node, core.on_registered(told[0], c.clock_of(node)))
    c.advance(3000)
    assert all(set(c.state(TOPIC, p).isr) == {1, 2, 3} for p in range(PARTITIONS))
    leaders = {p: c.state(TOPIC, p) for p in range(PARTITIONS)}
    assert all(core.partitions[(TOPIC, p)].leader_epoch == leaders[p].leader_epoch for p in range(PARTITIONS))
    # it was refused meanwhile: the race happened
    assert any(f"Broker {target} refused" in line and "STALE_BROKER_EPOCH" in line
               for line in c.brokers[c.controller_id].log)


def test_a_broker_that_hears_of_a_new_controller_late_gets_its_requests_again():
    """Broker 3 is cut from ZooKeeper (not long enough for its session to expire) when the
    controller dies: the new controller's requests name a controller that broker 3 has not read
    in /controller yet, and are refused until it reconnects; the controller sends them again."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "60000"})
    create_topic(c)
    assert c.controller_id == 1
    c.cut_from_zookeeper(3)
    c.crash(1, lose_unflushed=False)
    c.advance(2000)
    assert c.controller_id == 2
    moved = [p for p in range(PARTITIONS) if ASSIGNMENTS[p][0] == 1]
    assert all(c.brokers[3].core.partitions[(TOPIC, p)].leader_epoch < c.state(TOPIC, p).leader_epoch
               for p in moved)
    c.heal_zookeeper(3)
    c.advance(2000)
    for p in range(PARTITIONS):
        state = c.state(TOPIC, p)
        assert c.brokers[3].core.partitions[(TOPIC, p)].leader_epoch == state.leader_epoch
        assert c.brokers[3].core.partitions[(TOPIC, p)].is_leader == (state.leader == 3)
    assert produce(c, c.state(TOPIC, 0).leader, TOPIC, [b"after"]).error_code == ErrorCode.none
    assert any("Broker 3 refused" in line and "STALE_CONTROLLER_EPOCH" in line for line in c.brokers[2].log)


def test_ctl_4_a_stale_broker_epoch_is_named_before_a_stale_controller_epoch(fenced):
    """A request both stale in its broker epoch and in its controller epoch is answered
    STALE_BROKER_EPOCH, as Kafka's KafkaApis checks the broker epoch first (found by
    tests/differential: leader-and-isr-stale, stop-replica-stale, update-metadata-stale)."""
    c, stale = fenced
    target = victim(c)
    epoch = c.brokers[c.controller_id].core.controller_epoch
    header = _header(c, target, controller_id=9, controller_epoch=epoch - 1, broker_epoch=0)
    bodies = {control.LEADER_AND_ISR: {**header, "type": 0, "topic_states": [], "live_leaders": []},
              control.STOP_REPLICA: {**header, "topic_states": []},
              control.UPDATE_METADATA: {**header, "topic_states": [], "live_brokers": []}}
    for api_key, body in bodies.items():
        answer = control_call(c, target, api_key, body)
        assert answer is not None and answer["error_code"] == ErrorCode.stale_broker_epoch, (api_key, answer)


def test_ctl_9_controlled_shutdown_sent_to_a_broker_that_is_not_the_controller(fenced):
    """Answered STALE_CONTROLLER_EPOCH ("the controller moved"), as Kafka's ControllerMovedException;
    nothing moves (found by tests/differential: controlled-shutdown-not-controller)."""
    c, stale = fenced
    other = next(b for b in (1, 2, 3) if b != c.controller_id)
    before = cluster_state(c)
    answer = control_call(c, other, control.CONTROLLED_SHUTDOWN,
                          {"broker_id": other, "broker_epoch": registration(c, other)})
    assert answer == {"error_code": ErrorCode.stale_controller_epoch, "remaining_partitions": []}
    c.advance(500)
    assert cluster_state(c) == before
