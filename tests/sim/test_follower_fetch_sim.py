"""Consumers reading from followers (KIP-392), in the simulator.

Unset, ``replica.selector.class`` keeps CLI-2: only leaders serve consumers
(``test_replication_sim.py::test_rep_4_and_cli_2_followers_refuse_clients_and_consumers_stop_at_the_hw``).
Set to Kafka's rack-aware selector, a leader sends a consumer in another rack to a replica in
the consumer's rack, and a follower serves Fetch v11+ below its own high watermark (REP-4)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_sim import create, produce, values_of

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LAG_MS = 10000


def rack_cluster(**config: str) -> SimCluster:
    racks = {str(b): {"broker.rack": f"r{b}"} for b in (1, 2, 3)}
    return SimCluster((1, 2, 3), overrides=racks, **{"replica.lag.time.max.ms": str(LAG_MS),
                                                      "replica.selector.class": RACK_AWARE, **config})


def fetch_body(offset: int, rack: str = "", max_wait: int = 0, session_epoch: int = -1) -> dict:
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": session_epoch, "forgotten_topics_data": [], "rack_id": rack,
            "topics": [{"topic": "f", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                      "fetch_offset": offset, "log_start_offset": -1,
                                                      "partition_max_bytes": 1 << 20}]}]}


def fetch(c: SimCluster, broker: int, offset: int, rack: str = "", version: int = 11, **kw):
    return c.call(broker, 1, version, fetch_body(offset, rack, **kw), "consumer").responses[0].partitions[0]


def written(c: SimCluster, values: list[bytes]) -> None:
    create(c, "f", [1, 2, 3], min_isr=2)
    assert produce(c, 1, "f", values).error_code == ErrorCode.none
    c.advance(600)          # the followers' next fetch brings them the high watermark


def test_cli_2_a_leader_sends_a_consumer_of_another_rack_to_the_replica_in_its_rack_which_serves_it():
    c = rack_cluster()
    written(c, [b"a", b"b", b"c"])
    started = c.now
    at_leader = fetch(c, 1, 0, rack="r2", max_wait=5000)
    assert c.now - started < 100                       # answered at once, not after max_wait
    assert at_leader.error_code == ErrorCode.none and at_leader.preferred_read_replica == 2
    assert not at_leader.records and at_leader.high_watermark == 3
    at_follower = fetch(c, 2, 0, rack="r2")
    assert at_follower.error_code == ErrorCode.none and at_follower.preferred_read_replica == -1
    assert values_of(bytes(at_follower.records)) == [b"a", b"b", b"c"]
    assert at_follower.high_watermark == 3


def test_a_consumer_in_the_leaders_rack_or_in_none_reads_from_the_leader():
    c = rack_cluster()
    written(c, [b"a"])
    for rack in ("r1", "", "r9"):
        answer = fetch(c, 1, 0, rack=rack)
        assert answer.preferred_read_replica == -1 and values_of(bytes(answer.records)) == [b"a"], rack


def test_without_a_selector_the_leader_names_no_other_replica():
    c = SimCluster((1, 2, 3), overrides={str(b): {"broker.rack": f"r{b}"} for b in (1, 2, 3)},
                   **{"replica.lag.time.max.ms": str(LAG_MS)})
    written(c, [b"a"])
    answer = fetch(c, 1, 0, rack="r2")
    assert answer.preferred_read_replica == -1 and values_of(bytes(answer.records)) == [b"a"]
    assert fetch(c, 2, 0, rack="r2").error_code == ErrorCode.not_leader_or_follower


def test_rep_4_a_follower_serves_a_consumer_below_its_own_high_watermark_only():
    c = rack_cluster()
    written(c, [b"a"])
    c.pause(3)
    assert produce(c, 1, "f", [b"not-yet-committed"], acks=1).error_code == ErrorCode.none
    c.advance(600)
    assert c.partition(2, "f").log_end_offset == 2              # broker 2 holds it ...
    answer = fetch(c, 2, 0, rack="r2")
    assert answer.high_watermark == 1                           # ... but broker 3 does not: not committed
    assert values_of(bytes(answer.records)) == [b"a"]
    above = fetch(c, 2, 1, rack="r2")
    assert above.error_code == ErrorCode.none and not above.records
    assert fetch(c, 2, 3, rack="r2").error_code == ErrorCode.offset_out_of_range   # past its log's end


def test_a_follower_refuses_consumer_fetches_older_than_v11_and_checks_the_leader_epoch():
    c = rack_cluster()
    written(c, [b"a"])
    assert fetch(c, 2, 0, version=10).error_code == ErrorCode.not_leader_or_follower
    epoch = c.partition(2, "f").leader_epoch
    body = fetch_body(0, "r2")
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch + 1
    assert c.call(2, 1, 11, body, "consumer").responses[0].partitions[0].error_code == \
        ErrorCode.unknown_leader_epoch
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
    assert values_of(bytes(c.call(2, 1, 11, body, "consumer").responses[0].partitions[0].records)) == [b"a"]


def test_a_consumer_waiting_at_a_follower_is_answered_once_the_followers_high_watermark_moves():
    c = rack_cluster()
    written(c, [b"a"])
    c.request(2, 1, 11, fetch_body(1, "r2", max_wait=5000), "consumer")
    c.settle()
    started = c.now
    assert produce(c, 1, "f", [b"b"]).error_code == ErrorCode.none
    waited = 0
    while not c.inbox[(2, "consumer")] and waited < 5000:
        c.advance(1)
        waited += 1
    # the follower learns the new high watermark in the answer to its next fetch (at most
    # replica.fetch.wait.max.ms later), and the consumer's fetch is answered then, not at max_wait
    assert c.now - started < 1500
    answer = c.response(2, 1, 11, "consumer").responses[0].partitions[0]
    assert values_of(bytes(answer.records)) == [b"b"] and answer.high_watermark == 2


def test_an_incremental_fetch_session_at_the_leader_names_the_preferred_replica_each_time():
    c = rack_cluster()
    written(c, [b"a"])
    full = c.call(1, 1, 11, fetch_body(0, "r3", session_epoch=0), "consumer")
    assert full.session_id and full.responses[0].partitions[0].preferred_read_replica == 3
    body = fetch_body(0, "r3", session_epoch=1)
    body["session_id"] = full.session_id
    body["topics"] = []
    again = c.call(1, 1, 11, body, "consumer")
    assert again.error_code == ErrorCode.none
    assert [p.preferred_read_replica for t in again.responses for p in t.partitions] == [3]
