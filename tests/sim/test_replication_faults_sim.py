"""ISR changes under faults, durability on flush, and the limit of SAFE-1, in the simulator.

Each test plays one defect that measurement found (lost or unknown ZooKeeper replies, stale
fetches, late results, followers that do not flush) or one loss case of the seeds (LOSS-6).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination.store import Create, GetData, SetData
from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_sim import LAG_MS, create, produce, produce_request, values_on

#: the leader writes its ISR changes itself (inter.broker.protocol.version before 2.7): the tests
#: that play that mechanism's failures (a lost or late answer of its write) run in that mode
LEGACY = {"inter.broker.protocol.version": "2.6"}

FETCH = 1


def inject(c: SimCluster, fault: Callable[[int, list], Any]) -> list[tuple[int, Any]]:
    """Install ``fault`` as the cluster's ZooKeeper fault (:attr:`SimCluster.zk_fault`) and return
    the list it fills with ``(broker, fault)`` for every request it faulted: a test asserts that
    its fault fired, or it shows nothing about the fault."""
    fired: list[tuple[int, Any]] = []

    def counted(broker_id: int, ops: list) -> Any:
        answer = fault(broker_id, ops)
        if answer is not None:
            fired.append((broker_id, answer))
        return answer
    c.zk_fault = counted
    return fired


def state_write(broker_id: int, topic: str):
    """Matches the leader's compare-and-set of a partition's state znode."""
    def matches(b: int, ops: list) -> bool:
        return b == broker_id and any(isinstance(op, SetData) and op.path.endswith(f"/topics/{topic}/partitions/0/state")
                                      for op in ops)
    return matches


def produce_many(c: SimCluster, broker: int, topic: str, values: list[bytes], acks: int = -1,
                 timeout_ms: int = 500, wait_ms: int = 600) -> list[bytes]:
    """Send each value as its own request (own client), wait, and return the acknowledged values."""
    for v in values:
        produce_request(c, broker, topic, [v], acks=acks, client=v.decode(), timeout_ms=timeout_ms)
    c.advance(wait_ms)
    acked = []
    for v in values:
        resp = c.response(broker, 0, 7, v.decode())
        if resp is not None and resp.responses[0].partition_responses[0].error_code == ErrorCode.none:
            acked.append(v)
    return acked


def stall(c: SimCluster, leader: int, topic: str, *followers: int) -> None:
    """Pause followers and keep writing (acks=1) until the leader drops them from the ISR: a
    follower that has everything stays in the ISR however long it is silent (ISR-4)."""
    for b in followers:
        c.pause(b)
    produce_request(c, leader, topic, [b"during-stall"], acks=1, client="staller")
    c.advance(2 * LAG_MS)


def follower_fetch(c: SimCluster, leader: int, follower: int, topic: str, offset: int, epoch: int):
    body = {"replica_id": follower, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": epoch,
                                                         "fetch_offset": offset, "log_start_offset": 0,
                                                         "partition_max_bytes": 1 << 20}]}]}
    return c.call(leader, FETCH, 11, body, client=f"fake-replica-{follower}").responses[0].partitions[0]


# ---------------------------------------------------------------------------- ISR writes (ISR-5)


def test_isr_5_an_isr_expansion_applied_although_zookeeper_answered_connection_loss_is_read_back():
    """The expansion that puts broker 4 back is applied in ZooKeeper but the leader hears
    CONNECTION_LOSS. It must read the state back (Kafka's checkLeaderAndIsrZkData) and count 4 in
    the ISR: otherwise it acknowledges acks=all writes that 4 lacks, and when it dies the controller
    elects 4 (first live ISR member in replica order) and every one of them is lost."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), **LEGACY})
    create(c, "u", [2, 4, 3], min_isr=2)
    assert produce(c, 2, "u", [b"m0"]).error_code == ErrorCode.none
    stall(c, 2, "u", 4)
    assert c.state("u").isr == (2, 3)
    expansion = state_write(2, "u")
    fired = inject(c, lambda b, ops: "applied-reply-lost" if expansion(b, ops) else None)
    c.resume(4)
    c.advance(20)
    assert fired == [(2, "applied-reply-lost")]
    assert set(c.state("u").isr) == {2, 3, 4}                # applied, whatever the leader heard
    c.zk_fault = None
    c.pause(4)                                                # 4 stalls again, still in the ISR...
    c.advance(LAG_MS + 100)                                   # ...for longer than the lag time
    acked = produce_many(c, 2, "u", [b"w%d" % i for i in range(5)])
    assert len(acked) == 5                                    # once 4 left the ISR (2 and 3 have them)
    c.crash(2)
    c.resume(4)
    c.advance(3000)
    leader = c.state("u").leader
    assert leader in (3, 4)
    survivors = values_on(c, leader, "u")
    assert [v for v in acked if v not in survivors] == []


def test_isr_5_an_isr_write_that_was_not_applied_leaves_the_leader_serving_and_it_tries_again():
    """CONNECTION_LOSS and the state in ZooKeeper unchanged: the write was lost, the leader's view
    is still current, so it goes on and proposes the change again."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "n", [1, 2, 3], min_isr=2)
    shrink = state_write(1, "n")
    faults = iter(["not-applied"])
    fired = inject(c, lambda b, ops: next(faults, None) if shrink(b, ops) else None)
    stall(c, 1, "n", 3)
    c.advance(LAG_MS)
    assert fired == [(1, "not-applied")]
    assert c.state("n").isr == (1, 2)
    assert c.partition(1, "n").isr == (1, 2)
    assert produce(c, 1, "n", [b"m1"]).error_code == ErrorCode.none


@pytest.mark.parametrize("mode", ["legacy", "alter-isr"])
def test_net_4_after_a_failed_isr_change_the_old_leader_acknowledges_no_write_not_even_acks_1(mode):
    """NET-4: cut from ZooKeeper and the other brokers, the leader's ISR shrink cannot complete:
    its write fails (legacy) or its proposal to the controller gets no answer within
    request.timeout.ms (AlterIsr). From then on it must not acknowledge any write of that
    partition (acks=1 included) until the controller tells it its role; before, a cut leader
    acknowledged every acks=1 write for as long as the cut lasted."""
    request_timeout_ms = 3000
    config = LEGACY if mode == "legacy" else {"request.timeout.ms": str(request_timeout_ms)}
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), **config})
    assert c.controller_id != 2
    create(c, "n", [2, 3, 4], min_isr=2)
    assert produce(c, 2, "n", [b"m1"]).error_code == ErrorCode.none
    c.cut_off(2)
    assert produce(c, 2, "n", [b"before"], acks=1).error_code == ErrorCode.none    # LOSS-3: acknowledged...
    c.advance(2 * LAG_MS)                                     # ...then its ISR shrink is attempted...
    if mode == "alter-isr":
        assert produce(c, 2, "n", [b"pending"], acks=1).error_code == ErrorCode.none   # (a proposal in flight)
        c.advance(request_timeout_ms)                         # ...and its request gets no answer
    assert c.partition(2, "n").is_leader
    late = produce_many(c, 2, "n", [b"a%d" % i for i in range(10)], acks=1)
    assert late == []
    answer = produce(c, 2, "n", [b"x"], acks=1)
    assert answer.error_code == ErrorCode.not_leader_or_follower


def test_isr_5_a_late_isr_write_result_does_not_overwrite_a_newer_state():
    """The result of the leader's ISR write arrives after the controller has already given the
    partition a newer state (a dead follower removed, leader epoch + 1): it must be ignored."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), **LEGACY})
    create(c, "l", [2, 3, 4], min_isr=1)
    assert produce(c, 2, "l", [b"m1"]).error_code == ErrorCode.none
    stall(c, 2, "l", 4)
    assert c.state("l").isr == (2, 3)
    expansion = state_write(2, "l")
    fired = inject(c, lambda b, ops: ("reply-delayed", 300) if expansion(b, ops) else None)
    c.resume(4)
    c.advance(20)
    assert fired == [(2, ("reply-delayed", 300))]
    assert set(c.state("l").isr) == {2, 3, 4}                 # applied; the answer is on its way
    c.zk_fault = None
    c.crash(3)                                                # the controller removes 3: epoch + 1
    c.advance(50)
    assert c.state("l").isr == (2, 4) and c.state("l").leader_epoch == 1
    c.advance(400)                                            # the old answer arrives now
    partition = c.partition(2, "l")
    assert (partition.leader_epoch, partition.isr, partition.zk_version) == \
        (1, (2, 4), c.state("l").zk_version)


# ---------------------------------------------------------------------------- followers on the leader


def test_net_3_a_failed_follower_fetch_neither_moves_its_leo_nor_puts_it_back_in_the_isr():
    """A follower's fetch that the leader answers with an error (here UNKNOWN_LEADER_EPOCH) must not
    count as that follower's progress."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "f", [1, 2, 3], min_isr=1)
    stall(c, 1, "f", 3)
    assert c.state("f").isr == (1, 2)
    assert produce(c, 1, "f", [b"m1"]).error_code == ErrorCode.none
    leo = c.partition(1, "f").log_end_offset
    answer = follower_fetch(c, 1, 3, "f", leo, epoch=7)
    assert answer.error_code == ErrorCode.unknown_leader_epoch
    c.advance(10)
    assert c.partition(1, "f").remote_replicas[3].log_end_offset != leo
    assert c.state("f").isr == (1, 2)


def test_net_3_the_leader_never_adds_a_broker_the_controller_considers_dead():
    """KIP-841: a follower whose ZooKeeper session expired is out of the ISR (CTL-6); even if its
    fetches still reach the leader and are caught up, the leader must not put it back until the
    controller lists it as alive again."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "2000"})
    create(c, "d", [2, 3, 4], min_isr=1)
    assert produce(c, 2, "d", [b"m1"]).error_code == ErrorCode.none
    c.cut_from_zookeeper(4)
    c.advance(2500)
    assert 4 not in c.state("d").isr and 4 not in c.brokers[2].core.metadata.brokers
    leo = c.partition(2, "d").log_end_offset
    follower_fetch(c, 2, 4, "d", leo, epoch=-1)             # caught up, and no epoch to fence it
    c.advance(10)
    assert 4 not in c.state("d").isr
    c.heal_zookeeper(4)
    c.advance(3000)
    assert set(c.state("d").isr) == {2, 3, 4}


def test_isr_4_a_follower_outside_the_isr_rejoins_under_a_steady_write_rate():
    """KAFKA-4485: a follower caught up within the lag time holds the high watermark back on the
    append path too, so it reaches the HW and rejoins although new writes keep arriving while its
    fetches travel."""
    c = SimCluster((1, 2), latency_ms=5, **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "s", [1, 2], min_isr=1)
    stall(c, 1, "s", 2)
    assert c.state("s").isr == (1,)
    c.resume(2)
    for i in range(5000):                                     # a write every 2 ms for 10 s
        produce_request(c, 1, "s", [b"w%d" % i], acks=1, client=f"p{i % 50}")
        c.advance(2)
        if c.state("s").isr == (1, 2):
            break
    assert c.state("s").isr == (1, 2)


def test_isr_leader_keeps_what_it_knows_of_its_followers_across_a_leader_and_isr_that_keeps_it_leader():
    """A LeaderAndIsr that only shrinks the ISR (the leader stays) must not forget the followers'
    log end offsets, or acks=all waits a whole fetch round after every controller ISR change."""
    c = SimCluster((1, 2, 3, 4), latency_ms=5, **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "k", [2, 3, 4], min_isr=1)
    assert produce(c, 2, "k", [b"m1"]).error_code == ErrorCode.none
    c.advance(50)
    c.crash(4)
    while c.partition(2, "k").leader_epoch == 0:
        c.advance(1)
    assert c.state("k").leader_epoch == 1
    assert c.partition(2, "k").remote_replicas[3].log_end_offset == 1


# ---------------------------------------------------------------------------- propagation (ISR-6)


def test_isr_6_a_failed_isr_change_notification_is_written_again():
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), **LEGACY})
    create(c, "p", [2, 3, 1], min_isr=1)
    faults = iter(["not-applied"])
    fired = inject(c, lambda b, ops: next(faults, None) if b == 2 and any(
        isinstance(op, Create) and "isr_change_notification" in op.path for op in ops) else None)
    stall(c, 2, "p", 3)
    c.advance(15000)
    assert fired == [(2, "not-applied")]
    assert c.state("p").isr == (2, 1)
    assert c.brokers[1].core.metadata.topics["p"].states[0].isr == (2, 1)


@pytest.mark.parametrize("read", ["/isr_change_notification/", "/topics/p/partitions/0/state"])
def test_isr_6_a_read_the_controller_got_no_answer_for_is_made_again(read):
    """The controller reads the notifications, then the state of each partition they list, and
    deletes the notifications: a read whose answer is lost must be made again, or the brokers
    never hear of the new ISR (and a move waiting for its targets to join the ISR never ends:
    sim seed 1360054, safe --reassign)."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), **LEGACY})
    create(c, "p", [2, 3, 1], min_isr=1)
    controller = c.controller_id
    faults = iter(["not-applied"])
    c.zk_fault = lambda b, ops: next(faults, None) if b == controller and any(
        isinstance(op, GetData) and read in op.path for op in ops) else None
    stall(c, 2, "p", 3)
    c.advance(15000)
    assert next(faults, "used") == "used"
    assert c.state("p").isr == (2, 1)
    assert c.brokers[1].core.metadata.topics["p"].states[0].isr == (2, 1)


@pytest.mark.parametrize("read", ["/brokers/topics/n", "/config/topics/n"])
def test_a_topic_read_zookeeper_did_not_answer_is_made_again_before_the_broker_takes_its_role(read):
    """A broker told about a topic it does not know reads its assignment and configs first: a read
    whose answer is lost is made again. Taking the role without them would lose the partition, or
    run it on the broker's defaults (``min.insync.replicas`` 1 where the topic asks 2: acks=all
    acknowledged by the leader alone)."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    leader = next(b for b in (1, 2, 3) if b != c.controller_id)
    faults = iter(["not-applied"])
    c.zk_fault = lambda b, ops: next(faults, None) if b == leader and any(
        isinstance(op, GetData) and op.path == read for op in ops) else None
    create(c, "n", [leader, *(b for b in (1, 2, 3) if b != leader)], min_isr=2)
    c.advance(5000)
    assert next(faults, "used") == "used"
    core = c.brokers[leader].core
    assert core.config.topic_value(core.metadata.topics["n"].configs, "min.insync.replicas") == 2
    assert c.partition(leader, "n").is_leader


# ---------------------------------------------------------------------------- durability (DUR-3, LOSS-6)


def test_dur_3_with_flush_on_ack_followers_flush_before_the_high_watermark_passes_a_batch():
    """DUR-2/DUR-3: every ISR member has flushed an acknowledged batch, so the whole ISR losing power
    at once loses nothing, whichever member comes back first and leads."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "d", [2, 3, 4], min_isr=2, configs={"flush.on.ack": "true"})
    assert produce(c, 2, "d", [b"m1"]).error_code == ErrorCode.none
    assert produce(c, 2, "d", [b"m2"]).error_code == ErrorCode.none
    for b in (2, 3, 4):
        c.crash(b, lose_unflushed=True)
    c.advance(100)
    c.start(3)
    c.start(4)
    c.advance(3000)
    assert c.state("d").leader in (3, 4)
    assert values_on(c, c.state("d").leader, "d") == [b"m1", b"m2"]


def test_ctl_7_a_partition_whose_replicas_all_restarted_before_the_controller_noticed_comes_back():
    """Every replica crashes and registers again before the controller handles the watch: it sees
    them all bounced (new broker epochs) in one event. It handles them as dead, then as new, and the
    new ones must lead again (CTL-7), not leave the partition offline for good."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "b", [2, 3, 4], min_isr=2)
    assert produce(c, 2, "b", [b"m1"]).error_code == ErrorCode.none
    c.advance(10)
    for b in (2, 3, 4):
        c.crash(b, lose_unflushed=False)
    for b in (2, 3, 4):
        c.start(b)
    c.advance(3000)
    assert c.state("b").leader in (2, 3, 4)
    assert produce(c, c.state("b").leader, "b", [b"m2"]).error_code == ErrorCode.none
    assert values_on(c, c.state("b").leader, "b") == [b"m1", b"m2"]


def test_loss_6_the_isr_shrunk_to_the_leader_which_then_loses_its_disk_loses_everything():
    """LOSS-6 (S0 case 4b), the limit of SAFE-1: followers stall, the ISR shrinks to the leader
    alone; the leader loses power (nothing was flushed) and comes back empty. It is the only broker
    that may lead cleanly, so it is elected and the followers truncate to its empty log: every
    acknowledged acks=all write is lost, although min.insync.replicas is 2."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "x", [2, 3, 4], min_isr=2)
    acked = [v for v in (b"m1", b"m2", b"m3") if produce(c, 2, "x", [v]).error_code == ErrorCode.none]
    assert len(acked) == 3 and values_on(c, 3, "x") == acked
    stall(c, 2, "x", 3, 4)
    assert c.state("x").isr == (2,)
    assert produce(c, 2, "x", [b"refused"]).error_code == ErrorCode.not_enough_replicas
    c.crash(2, lose_unflushed=True)
    c.resume(3)
    c.resume(4)
    c.advance(1000)
    assert c.state("x").leader == -1                          # no clean candidate: offline
    c.start(2)
    c.advance(3000)
    assert c.state("x").leader == 2
    assert [values_on(c, b, "x") for b in (2, 3, 4)] == [[], [], []]


# ---------------------------------------------------------------------------- the controller (CTL-3)


def test_ctl_3_a_broker_whose_election_was_applied_but_not_answered_acts_as_controller():
    """The election multi-op (ephemeral /controller + epoch) is applied but its answer is lost:
    /controller names this broker, so no other broker runs; it must take office all the same,
    or the cluster has no controller and no partition ever gets a new leader."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "c", [3, 2], min_isr=1)
    election = lambda b, ops: any(isinstance(op, Create) and op.path == "/controller" for op in ops)  # noqa: E731
    fired = inject(c, lambda b, ops: "applied-reply-lost" if b == 2 and election(b, ops) else None)
    c.crash(1)
    c.advance(100)
    c.zk_fault = None
    assert fired == [(2, "applied-reply-lost")]
    assert c.controller_id == 2
    c.crash(3)                                                # the leader of c-0 dies: broker 2 must take over
    c.advance(100)
    assert c.state("c").leader == 2


def test_ctl_3_a_broker_that_could_not_read_the_controller_epoch_runs_again():
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "e", [2, 3], min_isr=1)
    reads = iter([2, 3])
    epoch_read = lambda ops: any(op.path == "/controller_epoch" and type(op).__name__ == "GetData" for op in ops)  # noqa: E731
    fired = inject(c, lambda b, ops: "not-applied" if epoch_read(ops) and b == next(reads, None) else None)
    c.crash(1)
    c.advance(3000)
    assert fired == [(2, "not-applied"), (3, "not-applied")]       # each one's first read of the epoch
    assert c.controller_id in (2, 3)
    assert c.brokers[c.controller_id].core.is_controller


def test_ctl_6_a_leader_election_applied_although_zookeeper_answered_connection_loss_is_announced():
    """The controller's write of a new leader is applied but its answer is lost. Reading the
    state again it finds nothing left to change; it must still tell the brokers, or the new leader
    never learns it leads and the partition stays unavailable."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "w", [2, 3], min_isr=1)
    assert produce(c, 2, "w", [b"m1"]).error_code == ErrorCode.none
    election = lambda b, ops: b == 1 and any(isinstance(op, SetData) and op.path.endswith("/w/partitions/0/state")  # noqa: E731
                                             for op in ops)
    faults = iter(["applied-reply-lost"])
    fired = inject(c, lambda b, ops: next(faults, None) if election(b, ops) else None)
    c.crash(2)
    c.advance(2000)
    assert fired == [(1, "applied-reply-lost")]
    assert c.state("w").leader == 3
    assert c.partition(3, "w").is_leader
    assert produce(c, 3, "w", [b"m2"]).error_code == ErrorCode.none


def test_ctl_6_a_controller_that_cannot_read_a_state_back_reads_it_again():
    """As above, and the first read of the state after the lost answer fails too."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "r", [2, 3], min_isr=1)
    state_path = "/brokers/topics/r/partitions/0/state"
    write_faults, read_faults = iter(["applied-reply-lost"]), iter(["not-applied"])

    def fault(b: int, ops: list):
        if b != 1 or getattr(ops[-1], "path", None) != state_path:
            return None
        if isinstance(ops[-1], SetData):
            return next(write_faults, None)
        if isinstance(ops[-1], GetData) and fired:             # a read after the write's lost answer
            return next(read_faults, None)
        return None
    fired = inject(c, fault)
    c.crash(2)
    c.advance(3000)
    assert fired == [(1, "applied-reply-lost"), (1, "not-applied")]
    assert c.state("r").leader == 3 and c.partition(3, "r").is_leader


def test_ctl_7_a_broker_that_becomes_controller_as_it_starts_elects_leaders_for_offline_partitions():
    """Kafka's onControllerFailover elects leaders for every offline partition, also when the
    controller is elected while its broker starts: the partition offline since its only ISR
    member died comes back when that broker, starting first, becomes controller."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "o", [2, 3], min_isr=1)
    assert produce(c, 2, "o", [b"m1"]).error_code == ErrorCode.none
    c.crash(3)
    c.advance(100)
    c.crash(2)
    c.advance(100)
    assert c.state("o").leader == -1 and c.state("o").isr == (2,)
    c.crash(1)
    c.start(2)
    c.advance(1000)
    assert c.controller_id == 2
    assert c.state("o").leader == 2
    assert produce(c, 2, "o", [b"m2"]).error_code == ErrorCode.none


def test_ctl_7_a_broker_back_while_the_controller_writes_its_partition_offline_is_elected():
    """The controller decides a partition is offline (its only ISR member died) and writes it; the
    broker registers again before the write's answer is back, when the controller still thinks it
    leads. Once the answer arrives, the partition must be elected again, not stay offline."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "q", [2, 3], min_isr=1)
    assert produce(c, 2, "q", [b"m1"]).error_code == ErrorCode.none
    c.crash(3)
    c.advance(100)
    assert c.state("q").isr == (2,)
    offline = lambda b, ops: b == 1 and any(isinstance(op, SetData) and op.path.endswith("/q/partitions/0/state")  # noqa: E731
                                            for op in ops)
    faults = iter([("reply-delayed", 300)])
    fired = inject(c, lambda b, ops: next(faults, None) if offline(b, ops) else None)
    c.crash(2)
    c.advance(50)
    assert fired == [(1, ("reply-delayed", 300))]
    assert c.state("q").leader == -1
    c.start(2)
    c.advance(2000)
    assert c.state("q").leader == 2 and c.partition(2, "q").is_leader


def test_ctl_4_a_control_request_addressed_to_a_broker_that_restarted_meanwhile_is_refused():
    """KIP-380: the controller's StopReplica for a broker in controlled shutdown cannot reach it
    before it restarts; the controller's retry then reaches the new life of that broker, which
    must refuse it (STALE_BROKER_EPOCH) instead of stopping its fetchers for good."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "k", [2, 3], min_isr=1)
    assert produce(c, 2, "k", [b"m1"]).error_code == ErrorCode.none
    node = c.brokers[3]
    c.cut_link(1, 3)                                          # the controller's requests wait...
    c.apply(node, node.core.begin_controlled_shutdown(c.clock_of(node)))
    c.advance(50)
    c.bounce(3, lose_unflushed=False)                         # ...and the broker restarts meanwhile
    c.heal_link(1, 3)
    c.advance(3000)
    assert c.state("k").isr == (2, 3) and c.state("k").leader == 2
    assert produce(c, 2, "k", [b"m2"]).error_code == ErrorCode.none
    c.advance(100)
    assert values_on(c, 3, "k") == [b"m1", b"m2"]


def test_isr_a_follower_the_controller_removed_does_not_hold_the_high_watermark_back():
    """As Kafka's makeLeader: a LeaderAndIsr that keeps the leader resets which followers count as
    caught up to the new ISR. A follower whose session expired (removed by the controller) must not
    hold the high watermark back for replica.lag.time.max.ms as a follower caught up lately would."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "30000"})
    create(c, "h", [2, 3], min_isr=1)
    assert produce(c, 2, "h", [b"m1"]).error_code == ErrorCode.none
    c.pause(3)
    produce_request(c, 2, "h", [b"m2"], timeout_ms=20000)
    c.expire_session(3)                                       # the controller removes 3 from the ISR
    c.advance(50)
    assert c.state("h").isr == (2,)
    answer = c.response(2, 0, 7, "producer")
    assert answer is not None and answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_ctl_4_a_controller_deposed_while_it_reads_partition_states_writes_nothing():
    """The controller reads partition states to move a stopping broker's leaderships; before the
    answer arrives its session expires and another broker takes office. Its writes are fenced by the
    controller epoch's version while it is in office; once it resigned it must not write at all (an
    unfenced write of a deposed controller overwrote partition states the new one had sent)."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), "controlled.shutdown.retry.backoff.ms": "200"})
    assert c.controller_id == 1
    create(c, "z", [3, 2], min_isr=1)
    reads = lambda b, ops: b == 1 and any(isinstance(op, GetData) and op.path.endswith("/z/partitions/0/state")  # noqa: E731
                                          for op in ops)
    faults = iter([("reply-delayed", 300)])
    deposed_writes = []

    def fault(b: int, ops: list):
        if b == 1 and not c.brokers[1].core.is_controller and any(
                isinstance(op, SetData) and op.path.endswith("/state") for op in ops):
            deposed_writes.append(ops)
        return next(faults, None) if reads(b, ops) else None
    fired = inject(c, fault)
    node = c.brokers[3]
    c.apply(node, node.core.begin_controlled_shutdown(c.clock_of(node)))   # controller 1 reads z-0 to move it...
    c.advance(10)
    assert fired == [(1, ("reply-delayed", 300))]
    c.expire_session(1)                                       # ...and loses office meanwhile
    c.advance(2000)
    assert c.controller_id == 2 and not c.brokers[1].core.is_controller
    assert deposed_writes == []
    assert c.state("z").leader == 2                           # moved by the controller in office
    assert c.brokers[3].core.controlled_shutdown_done


def electing_under_a_zk_fault(topic: str, op_type: type, fault: tuple[str, int], crashed: int) -> SimCluster:
    """Topic ``topic`` on brokers 2 and 3, broker 3 out of the ISR (the leader 2 alone); ZooKeeper
    answers the controller's (broker 1's) first ``op_type`` of the partition's state with ``fault``,
    and broker ``crashed`` dies: the election it starts meets the fault."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, topic, [2, 3], min_isr=1)
    assert produce(c, 2, topic, [b"m1"]).error_code == ErrorCode.none
    stall(c, 2, topic, 3)
    assert c.state(topic).isr == (2,)
    state_path = f"/{topic}/partitions/0/state"

    def on_state(broker: int, ops: list) -> bool:
        return broker == 1 and any(isinstance(op, op_type) and op.path.endswith(state_path) for op in ops)

    faults = iter([fault])
    fired = inject(c, lambda b, ops: next(faults, None) if on_state(b, ops) else None)
    c.crash(crashed)
    c.advance(50)
    assert fired == [(1, fault)]
    return c


def test_ctl_7_a_broker_back_while_its_partition_is_being_elected_gets_the_decided_state_only():
    """The controller writes a partition offline (its only ISR member died) and the write is applied
    late, after an answer of CONNECTION_LOSS; the broker registers again meanwhile. It must not be
    sent the partition's old state (it would lead again in the epoch it led before, with an ISR the
    controller no longer trusts), and once the controller reads what it wrote after all, the
    partition, offline although its ISR member is back, is elected again."""
    c = electing_under_a_zk_fault("v", SetData, ("applied-late", 300), crashed=2)
    c.start(2)
    c.brokers[2].log.clear()
    c.advance(3000)
    assert not any("Leader of v-0 in epoch 0" in line for line in c.brokers[2].log)
    assert c.state("v").leader == 2 and c.state("v").leader_epoch >= 2
    assert c.partition(2, "v").is_leader


def test_ctl_7_a_broker_back_while_its_partition_is_being_elected_gets_the_state_that_election_keeps():
    """A follower already out of the ISR dies; the controller's election of its partition (nothing
    to change: the ISR is the leader alone) waits on a slow ZooKeeper read while the follower
    registers again. It is not sent the state while the election runs; once the election decides
    nothing changes, it must still be sent the state, or it never fetches and the ISR stays short."""
    c = electing_under_a_zk_fault("w", GetData, ("reply-delayed", 300), crashed=3)
    c.start(3)
    c.advance(3000)
    assert c.partition(3, "w").leader_epoch == c.state("w").leader_epoch
    assert c.state("w").isr == (2, 3)


def test_epo_2_a_follower_whose_last_epoch_holds_no_record_drops_it_and_catches_up():
    """A broker that led an epoch without appending anything keeps that epoch's entry at its log
    end offset. Following a later leader whose epochs it lacks, it is told to truncate to its log end
    offset: the log stays as it is, but the empty epoch must go from its epoch cache (as Kafka's
    Log.truncateTo does), or it asks the leader about the same epoch forever and never fetches.
    Found by the long sweep (seed 202247, where the broker stayed out of every ISR)."""
    c = SimCluster((4, 1, 2, 3), latency_ms=1,
                   **{"replica.lag.time.max.ms": str(LAG_MS), "unclean.leader.election.enable": "true"})
    assert c.controller_id == 4
    create(c, "u", [1, 2, 3])
    assert produce(c, 1, "u", [b"m0"]).error_code == ErrorCode.none       # on all three
    for other in (1, 2):                                                  # 3 still reaches the controller
        c.cut_link(3, other)
        c.cut_link(other, 3)
    produce_request(c, 1, "u", [b"x"], acks=1, client="x")
    c.advance(2 * LAG_MS)
    assert c.state("u").isr == (1, 2)
    c.crash(1, lose_unflushed=False)
    c.advance(100)
    assert (c.state("u").leader, c.state("u").leader_epoch) == (2, 1)
    assert produce(c, 2, "u", [b"m1"], acks=1).error_code == ErrorCode.none  # epoch 1: 3 never sees it
    c.crash(2, lose_unflushed=False)
    c.advance(100)
    assert (c.state("u").leader, c.state("u").leader_epoch) == (3, 2)     # unclean: 3 leads, appends nothing
    c.pause(3)                          # its session expires: gone for the controller, still running
    c.expire_session(3)
    c.advance(100)
    c.start(2)
    c.advance(100)
    assert c.state("u").leader == 2
    assert values_on(c, 2, "u") == [b"m0", b"x", b"m1"]
    c.heal(3)
    c.resume(3)                         # follows 2 in the same life, its empty epoch still cached
    c.advance(3 * LAG_MS)
    assert c.partition(3, "u").log_end_offset == 3
    assert values_on(c, 3, "u") == [b"m0", b"x", b"m1"]
    assert 3 in c.state("u").isr


def test_ctl_9_a_controlled_shutdown_finished_after_the_broker_restarted_does_not_stop_its_new_life():
    """A broker asks for a controlled shutdown and is restarted before the controller has finished
    it. The StopReplica that ends the old life's shutdown must not reach the new life (KIP-380: it is
    addressed to the registration that asked), or the new life stops fetching and stays out of the
    ISR for good. Found by the long sweep (seed 207185)."""
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS)})
    assert c.controller_id == 1
    create(c, "s", [1, 2, 3])
    assert produce(c, 1, "s", [b"m0"]).error_code == ErrorCode.none
    fired = inject(c, lambda b, ops: ("reply-delayed", 300) if state_write(1, "s")(b, ops) else None)
    node = c.brokers[2]
    c.apply(node, node.core.begin_controlled_shutdown(c.now))
    c.advance(20)                                   # the controller is writing 2 out of the ISR
    assert fired == [(1, ("reply-delayed", 300))]
    c.bounce(2, lose_unflushed=False)               # and 2 is back before it has finished
    c.advance(400)
    c.zk_fault = None
    assert produce(c, 1, "s", [b"m1"]).error_code == ErrorCode.none
    c.advance(3 * LAG_MS)
    assert c.partition(2, "s").log_end_offset == 2
    assert sorted(c.state("s").isr) == [1, 2, 3]


def test_control_requests_that_come_while_a_topic_loads_apply_after_it_in_the_controllers_order():
    """An UpdateMetadata naming a topic this broker does not know waits for ZooKeeper (here a
    lost answer, read again); a later one must wait behind it, or the earlier, applied last,
    undoes it (here: a live broker list that is no longer true)."""
    from tests.unit.broker.test_broker_core import Harness
    from strandline.coordination import znodes
    from strandline.coordination.store import OpResult, ZkError

    h = Harness(brokers=(1, 2))
    h.zk.execute([Create(znodes.TopicZNode.path("t"), znodes.TopicZNode.encode({0: [1, 2]}), make_parents=True)])
    real_run, lost = h.zk.run, [True]

    def run(ops, transaction=False):
        if lost and any(getattr(op, "path", "") == znodes.TopicZNode.path("t") for op in ops):
            lost.pop()
            return [OpResult(ZkError.CONNECTION_LOSS)] * len(ops)
        return real_run(ops, transaction)

    h.zk.run = run
    answers: list[str] = []
    h.run(h.broker.on_registered(0x100000042, h.now))
    header = {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 0x100000042}
    live = [{"id": b, "endpoints": [{"port": 9091 + b, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                     "security_protocol": 0}], "rack": None} for b in (1, 2)]
    first = {**header, "live_brokers": live, "topic_states": [{"topic_name": "t", "partition_states": [
        {"partition_index": 0, "controller_epoch": 1, "leader": 2, "leader_epoch": 0, "isr": [2, 1],
         "zk_version": 0, "replicas": [1, 2], "offline_replicas": []}]}]}
    second = {**header, "live_brokers": live[:1], "topic_states": []}
    manager = h.broker.replica_manager
    h.run(manager.handle_control(6, first, lambda answer: answers.append("first") or [], h.now))
    h.run(manager.handle_control(6, second, lambda answer: answers.append("second") or [], h.now))
    assert answers == []
    h.tick(1000)
    assert answers == ["first", "second"] and not lost
    assert sorted(h.broker.metadata.brokers) == [1]


def test_a_topic_known_from_zookeeper_but_not_yet_from_update_metadata_is_not_listed_leaderless():
    """A broker reads a topic new to it from ZooKeeper when a LeaderAndIsr names it; its
    partitions' states come with the UpdateMetadata after. Until then Metadata answers as Kafka's
    cache does for a topic it does not hold yet (LEADER_NOT_AVAILABLE when the request may create
    it, else UNKNOWN_TOPIC_OR_PARTITION; left out of "every topic"), not with a topic whose
    partitions all lack a leader, which some clients take as final."""
    from tests.unit.broker.test_broker_core import Harness
    from strandline.coordination.metadata import LeaderAndIsr, TopicMetadata

    h = Harness(brokers=(1, 2))
    h.broker.metadata.topics["n"] = TopicMetadata("n", uuid.UUID(int=7), {0: (1, 2), 1: (2, 1)}, {}, {})

    def metadata(names, auto):
        body = {"topics": None if names is None else [{"name": n} for n in names],
                "allow_auto_topic_creation": auto, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        return {t.name: t for t in h.call(3, 8, body).topics}

    assert metadata(["n"], True)["n"].error_code == ErrorCode.leader_not_available
    assert metadata(["n"], False)["n"].error_code == ErrorCode.unknown_topic_or_partition
    assert "n" not in metadata(None, False)
    assert not metadata(["n"], True)["n"].partitions
    h.broker.metadata.topics["n"].states[0] = LeaderAndIsr(1, 0, (1, 2), 1, 0)
    [partition] = metadata(["n"], False)["n"].partitions       # only what UpdateMetadata told
    assert (partition.partition_index, partition.leader_id, partition.error_code) == (0, 1, ErrorCode.none)
