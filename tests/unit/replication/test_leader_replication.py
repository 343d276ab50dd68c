"""The leader's side of replication in the broker core, with followers played by Fetch requests
carrying their broker id and a test clock (no sleeps).

REP-1 (followers pull; the fetch offset is the follower's LEO), REP-3 (the HW a follower learns
lags by one fetch), REP-4 (consumers read below the HW only), REP-5 (committed = on every ISR
member), ACK-1/ACK-2 (acks=all waits for the ISR; min.insync.replicas), ISR-1/ISR-3 (shrink by the
isr-expiration task), ISR-4 (expansion on the fetch path), ISR-5 (compare-and-set; a stale
version leaves the ISR alone), ISR-6 (propagation under /isr_change_notification). Broker 1 is
the controller too: with AlterIsr (inter.broker.protocol.version 2.7+, the default) its leader
proposes to it and it writes; the legacy mode (2.6) writes from the leader."""

from __future__ import annotations

import json
import weakref

from kio.schema.errors import ErrorCode

from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness

LAG = 10_000
STATE = "/brokers/topics/r/partitions/0/state"


def replicated(min_isr: int = 1, ibp: str = "2.8") -> Harness:
    h = Harness(brokers=(1, 2, 3), **{"replica.lag.time.max.ms": str(LAG), "replica.fetch.wait.max.ms": "500",
                                      "inter.broker.protocol.version": ibp})
    resp = h.call(19, 4, {"topics": [{"name": "r", "num_partitions": -1, "replication_factor": -1,
                                      "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}],
                                      "configs": [{"name": "min.insync.replicas", "value": str(min_isr)}]}],
                          "timeout": 1000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.none
    return h


def follower_fetch(h: Harness, follower: int, offset: int, conn: int | None = None):
    body = h.fetch_body("r", offset)
    body["replica_id"] = follower
    return h.call(1, 11, body, conn=conn or 100 + follower).responses[0].partitions[0]


def partition(h: Harness):
    return h.broker.partitions[("r", 0)]


def produce(h: Harness, acks: int, values=(b"m",), conn: int = 1):
    h.produce("r", make_batch(list(values)), acks=acks, conn=conn)


def consumer_sees(h: Harness) -> int:
    fetched = h.call(1, 11, h.fetch_body("r", 0), conn=50).responses[0].partitions[0]
    from strandline.protocol.records import iter_batches
    return sum(hd.records_count for _, hd in iter_batches(fetched.records or b""))


def test_ack_1_acks_all_waits_for_every_isr_member_and_rep_3_followers_learn_the_hw_a_round_later():
    h = replicated()
    produce(h, acks=-1, values=[b"m1", b"m2"])
    assert not h.sent.get(1)                               # parked in purgatory
    first = follower_fetch(h, 2, 0)                        # REP-1: follower 2 pulls from its LEO 0
    assert first.high_watermark == 0 and len(first.records) > 0
    follower_fetch(h, 3, 0)
    follower_fetch(h, 2, 2)                                # LEO 2 reported by follower 2
    assert not h.sent.get(1) and partition(h).high_watermark == 0
    second = follower_fetch(h, 3, 2)                       # ...and by follower 3: committed (REP-5)
    assert second.high_watermark == 0                      # the HW in this answer predates this fetch
    assert partition(h).high_watermark == 2
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert follower_fetch(h, 2, 2).high_watermark == 2     # learned one round later


class Frame(bytearray):
    """A request frame as the shell hands out a large one (a bytearray), that a weak reference can follow."""


def test_a_produce_waiting_for_replication_does_not_keep_its_request_frame():
    """The acks=all answer waiting for the followers keeps what it names, not the request, whose
    records are views of its frame: a producer pipelining megabyte requests would otherwise keep
    a megabyte alive per waiting Produce. The frame goes as soon as the last reference does (no
    reference cycle left for the garbage collector)."""
    h = replicated()
    frame = Frame(h.frame(0, 7, h.produce_body("r", make_batch([b"m1", b"m2"]), acks=-1)))
    held = weakref.ref(frame)
    h.run(h.broker.handle_request(1, frame, h.now))
    assert not h.sent.get(1)                               # parked until both followers have it
    del frame
    assert held() is None
    assert len(follower_fetch(h, 2, 0).records) > 0
    follower_fetch(h, 3, 0)
    follower_fetch(h, 2, 2)
    follower_fetch(h, 3, 2)
    answer = h.response(0, 7, conn=1).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none and answer.base_offset == 0


def test_rep_4_consumers_only_read_below_the_high_watermark():
    h = replicated()
    produce(h, acks=1, values=[b"a", b"b", b"c"])
    h.response(0, 7)
    assert consumer_sees(h) == 0                           # not on every ISR member yet
    follower_fetch(h, 2, 3)
    follower_fetch(h, 3, 3)
    assert consumer_sees(h) == 3


def test_acks_all_times_out_with_request_timed_out_when_a_follower_is_silent():
    h = replicated()
    produce(h, acks=-1)
    follower_fetch(h, 2, 1)
    h.tick(999)
    assert not h.sent.get(1)
    h.tick(1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.request_timed_out


def test_isr_3_silent_followers_are_dropped_by_compare_and_set_and_ack_2_min_isr_refuses():
    h = replicated(min_isr=2)
    follower_fetch(h, 2, 0)
    follower_fetch(h, 3, 0)
    produce(h, acks=1, values=[b"x"])
    h.response(0, 7)
    follower_fetch(h, 2, 1)                                # follower 2 keeps up, follower 3 goes silent
    h.tick(LAG // 2)
    assert partition(h).isr == (1, 2, 3)                   # not lagging long enough yet (ISR-1)
    h.tick(LAG)
    assert partition(h).isr == (1, 2)
    state = json.loads(h.zk.nodes[STATE][0])
    assert state["isr"] == [1, 2] and h.zk.nodes[STATE][1] == partition(h).zk_version == 1
    produce(h, acks=-1)                                    # ISR {1, 2} still meets min.insync.replicas=2
    assert not h.sent.get(1)
    follower_fetch(h, 2, 2)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    produce(h, acks=1)                                     # a caught-up follower never lags; new data...
    h.response(0, 7)
    h.tick(LAG // 2)
    assert partition(h).isr == (1, 2)
    h.tick(LAG)                                            # ...that follower 2 never fetches
    assert partition(h).isr == (1,)
    produce(h, acks=-1)
    refused = h.response(0, 7).responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.not_enough_replicas
    assert partition(h).log.log_end_offset == 3            # refused before the append


def test_isr_4_a_follower_that_catches_up_rejoins_through_compare_and_set():
    h = replicated()
    produce(h, acks=1, values=[b"a", b"b"])
    h.response(0, 7)
    follower_fetch(h, 2, 2)
    h.tick(LAG + 1)
    h.tick(LAG)
    assert 3 not in partition(h).isr
    follower_fetch(h, 3, 1)                                # behind the HW: stays out
    assert 3 not in partition(h).isr
    follower_fetch(h, 3, 2)                                # caught up: joins
    assert partition(h).isr == (1, 2, 3)
    assert json.loads(h.zk.nodes[STATE][0])["isr"] == [1, 2, 3]


def test_isr_5_a_stale_zk_version_leaves_the_isr_unchanged_legacy():
    h = replicated(ibp="2.6")
    data, version, owner = h.zk.nodes[STATE]
    h.zk.nodes[STATE] = (data, version + 1, owner)                # someone else (a controller) wrote the state
    h.tick(LAG + 1)
    h.tick(LAG)
    assert partition(h).isr == (1, 2, 3)
    assert partition(h).isr_update_failed
    # the failed ISR write is a WARN line (issue 14) and counted (kafka_server_replicamanager_failedisrupdates)
    assert [log.message for log in h.logs if log.level == "warning" and "Cached zkVersion" in log.message]
    assert h.broker.replica_manager.isr_manager.failed_isr_updates == 1
    end = partition(h).log.log_end_offset
    produce(h, acks=-1)                                    # so acks=all cannot commit on the leader alone...
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    produce(h, acks=1)                                     # ...and nothing is acknowledged (NET-4)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    assert partition(h).log.log_end_offset == end


def test_isr_6_changes_are_propagated_once_quiet_for_five_seconds_legacy():
    h = replicated(ibp="2.6")
    follower_fetch(h, 2, 0)
    h.tick(LAG + 1)                                        # the ISR shrinks here
    assert not [p for p in h.zk.nodes if p.startswith("/isr_change_notification/")]
    for _ in range(3):
        h.tick(2500)
    notes = [p for p in h.zk.nodes if p.startswith("/isr_change_notification/isr_change_")]
    assert len(notes) == 1
    assert json.loads(h.zk.nodes[notes[0]][0]) == {"version": 1, "partitions": [{"topic": "r", "partition": 0}]}


def test_isr_5_with_alter_isr_a_stale_zk_version_is_refused_by_the_controller_and_fences_the_leader():
    """ISR-5 with AlterIsr: the controller writes with compare-and-set on the version the leader
    named; someone else wrote meanwhile, so it answers INVALID_UPDATE_VERSION, the leader drops the
    change and acknowledges nothing until a LeaderAndIsr (NET-4)."""
    h = replicated()
    data, version, owner = h.zk.nodes[STATE]
    h.zk.nodes[STATE] = (data, version + 1, owner)                # someone else (a controller) wrote the state
    h.tick(LAG + 1)
    h.tick(LAG)
    p = partition(h)
    assert (p.isr, p.pending_isr, p.isr_update_failed) == ((1, 2, 3), None, True)
    assert h.zk.nodes[STATE][1] == version + 1                    # nobody wrote over it
    assert [log.message for log in h.logs if log.level == "warning" and "INVALID_UPDATE_VERSION" in log.message]
    assert h.broker.replica_manager.isr_manager.failed_isr_updates == 1
    end = p.log.log_end_offset
    produce(h, acks=1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    assert p.log.log_end_offset == end


def test_isr_5_and_isr_6_with_alter_isr_the_controller_writes_and_tells_every_broker():
    """With AlterIsr the leader writes neither the state nor /isr_change_notification: the
    controller writes the state (its controller epoch in it) and sends UpdateMetadata itself."""
    from strandline.protocol import control

    h = replicated()
    follower_fetch(h, 2, 0)
    h.broker_sent.clear()
    h.tick(LAG + 1)                                        # the ISR shrinks here
    assert partition(h).isr == (1, 2)
    state = json.loads(h.zk.nodes[STATE][0])
    assert state["isr"] == [1, 2] and h.zk.nodes[STATE][1] == partition(h).zk_version == 1
    assert h.broker.controller.alter_isrs.isr_changes_written == 1
    assert [log for log in h.logs if "as its leader proposed (AlterIsr)" in log.message]
    told = [e.broker_id for e in h.broker_sent if control.decode_request(e.frame)[0] == control.UPDATE_METADATA]
    assert sorted(told) == [2, 3]
    for _ in range(3):
        h.tick(2500)
    assert not [p for p in h.zk.nodes if p.startswith("/isr_change_notification/")]
