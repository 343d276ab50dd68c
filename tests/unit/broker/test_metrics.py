"""The broker's metrics (Kafka's names) and timeline events, checked against known actions in the
simulator: what was produced and replicated, a follower that stalls, a broker that dies."""

from __future__ import annotations

from strandline.broker.metrics import collect
from strandline.broker.status import status
from strandline.sim.cluster import SimCluster
from tests.unit.batches import make_batch
from tests.sim.test_replication_faults_sim import stall
from tests.sim.test_replication_sim import LAG_MS, create, produce


def metric(c: SimCluster, broker: int, name: str, **labels: str) -> float:
    """One sample's value; a family's sample without labels unless ``labels`` are given."""
    for family in collect(c.brokers[broker].core):
        if family.name == name:
            for sample_labels, value in family.samples:
                if sample_labels == labels:
                    return value
            return 0.0
    raise KeyError(name)


def test_topic_counters_count_what_was_produced_and_replicated():
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "m", [1, 2, 3], min_isr=2)
    values = [b"a" * 10, b"b" * 20, b"c" * 30]
    assert produce(c, 1, "m", values).error_code == 0
    size = len(make_batch(values))
    assert metric(c, 1, "kafka_server_brokertopicmetrics_bytesin", topic="m") == size
    assert metric(c, 1, "kafka_server_brokertopicmetrics_messagesin", topic="m") == 3
    assert metric(c, 1, "kafka_server_brokertopicmetrics_messagesin") == 3          # the broker-wide sample
    assert metric(c, 1, "kafka_server_brokertopicmetrics_totalproducerequests", topic="m") == 1
    assert metric(c, 2, "kafka_server_brokertopicmetrics_bytesin", topic="m") == 0  # followers take no producer bytes
    for follower in (2, 3):
        assert metric(c, follower, "kafka_server_brokertopicmetrics_replicationbytesin", topic="m") == size
    assert metric(c, 1, "kafka_server_brokertopicmetrics_replicationbytesout", topic="m") == 2 * size
    assert metric(c, 1, "kafka_log_log_logendoffset", topic="m", partition="0") == 3
    assert metric(c, 1, "kafka_topic_partition_current_offset", topic="m", partition="0") == 3
    assert metric(c, 1, "kafka_server_replicamanager_leadercount") == 1
    assert metric(c, 2, "kafka_server_replicamanager_partitioncount") == 1
    # a refused batch (too large) is a failed produce request and rejected bytes, not bytes in
    big = [b"x" * 2_000_000]
    assert produce(c, 1, "m", big).error_code != 0
    assert metric(c, 1, "kafka_server_brokertopicmetrics_failedproducerequests", topic="m") == 1
    assert metric(c, 1, "kafka_server_brokertopicmetrics_bytesrejected", topic="m") == len(make_batch(big))
    assert metric(c, 1, "kafka_server_brokertopicmetrics_bytesin", topic="m") == size


def test_a_stalled_follower_shrinks_the_isr_and_its_return_expands_it():
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS)})
    create(c, "s", [1, 2, 3], min_isr=3)
    assert metric(c, 1, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    stall(c, 1, "s", 3)
    assert c.state("s").isr == (1, 2)
    assert metric(c, 1, "kafka_server_replicamanager_isrshrinks") == 1
    assert metric(c, 1, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert metric(c, 1, "kafka_server_replicamanager_underminisrpartitioncount") == 1
    assert metric(c, 1, "kafka_cluster_partition_underreplicated", topic="s", partition="0") == 1
    assert ("isr_shrink", ("s", 0)) in c.brokers[1].events
    c.resume(3)
    c.advance(2 * LAG_MS)
    assert c.state("s").isr == (1, 2, 3)
    assert metric(c, 1, "kafka_server_replicamanager_isrexpands") == 1
    assert metric(c, 1, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert metric(c, 1, "kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert ("isr_expand", ("s", 0)) in c.brokers[1].events
    assert metric(c, 1, "strandline_partition_follower_lag", topic="s", partition="0", replica="3") == 0


def test_a_dead_leader_is_an_election_and_a_dead_isr_an_offline_partition_on_the_controller():
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS)})
    controller = c.controller_id
    first, second = [b for b in (1, 2, 3) if b != controller]
    create(c, "e", [first, controller], min_isr=1)
    create(c, "o", [second], min_isr=1)
    assert metric(c, controller, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert metric(c, first, "kafka_controller_kafkacontroller_activecontrollercount") == 0
    assert metric(c, controller, "kafka_controller_kafkacontroller_globaltopiccount") == 2
    assert metric(c, first, "kafka_controller_kafkacontroller_globaltopiccount") == 0     # the controller's only
    before = metric(c, controller, "kafka_controller_controllerstats_leaderelections")
    c.crash(first)
    c.advance(100)
    assert c.state("e").leader == controller
    assert metric(c, controller, "kafka_controller_controllerstats_leaderelections") == before + 1
    assert ("leader", ("e", 0)) in c.brokers[controller].events
    assert ("broker_gone", None) in c.brokers[controller].events
    assert metric(c, controller, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    c.crash(second)
    c.advance(100)
    assert metric(c, controller, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert ("offline", ("o", 0)) in c.brokers[controller].events
    view = status(c.brokers[controller].core)
    assert view["is_controller"] and view["topics"]["o"]["partitions"]["0"]["leader"] == -1


def test_a_controlled_shutdown_is_an_event_on_the_controller_also_its_own():
    """SPEC CTL-9: the controller's timeline names every controlled shutdown it carried out,
    that of another broker and its own."""
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS)})
    controller = c.controller_id
    other, third = [b for b in (1, 2, 3) if b != controller]
    create(c, "cs", [controller, third], min_isr=1)
    c.begin_controlled_shutdown(other)
    c.advance(200)
    assert ("controlled_shutdown", None) in c.brokers[controller].events
    assert c.brokers[controller].events.count(("controlled_shutdown", None)) == 1
    c.begin_controlled_shutdown(controller)
    c.advance(200)
    assert c.brokers[controller].events.count(("controlled_shutdown", None)) == 2
    assert c.state("cs").leader == third


def test_isr_changes_a_leader_proposes_are_counted_on_the_controller_that_wrote_them():
    """ISR-5 (AlterIsr): with the default inter.broker.protocol.version the controller writes the
    shrink and the expansion its leader proposes and counts them; in the legacy mode (2.6) the
    leader writes them itself and the controller counts nothing. Either way the leader counts its
    shrinks and expansions."""
    for version, written in (("2.8-IV1", 2), ("2.6", 0)):
        c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": str(LAG_MS),
                                                    "inter.broker.protocol.version": version})
        controller = c.controller_id
        leader, follower = [b for b in (1, 2, 3) if b != controller]
        create(c, "a", [leader, follower, controller], min_isr=2)
        stall(c, leader, "a", follower)
        assert c.state("a").isr == (leader, controller), version
        c.resume(follower)
        c.advance(2 * LAG_MS)
        assert sorted(c.state("a").isr) == [1, 2, 3], version
        assert metric(c, controller, "kafka_controller_controllerstats_isrchanges") == written, version
        assert metric(c, leader, "kafka_controller_controllerstats_isrchanges") == 0, version
        assert metric(c, leader, "kafka_server_replicamanager_isrshrinks") == 1, version
        assert metric(c, leader, "kafka_server_replicamanager_isrexpands") == 1, version
