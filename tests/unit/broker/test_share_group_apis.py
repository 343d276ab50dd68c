"""Share groups through a broker's core (KIP-932): ShareGroupHeartbeat assigns the partition to
both members of a group; ShareFetch hands each record to one of them under a lock, in a share
session; acknowledgements (on ShareFetch and ShareAcknowledge) settle them; a lock that expires
hands a record to the other member with a higher delivery count; the APIs are served and
advertised only with group.share.enable."""

from __future__ import annotations

import dataclasses
import random
import uuid

from kio.schema.errors import ErrorCode

from strandline.broker.broker import Broker
from strandline.core.effects import BrokerSend, Send
from strandline.group.share.records import ShareStateKey
from strandline.log.manager import LogManager

from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness

GROUP = "sg"
HEARTBEAT, DESCRIBE, FETCH, ACK = 76, 77, 78, 79


LOOPBACK_CONN = 999


class ShareHarness(Harness):
    """A one-broker cluster whose requests to itself (the partition leader's to the share
    coordinator) are delivered and answered, as the shell would."""

    unanswered = 0          # how many of the next requests to itself get no answer

    def run(self, effects):
        own = [e for e in effects if isinstance(e, BrokerSend) and e.broker_id == 1]
        super().run([e for e in effects if e not in own])
        for send in own:
            if self.unanswered:
                self.unanswered -= 1
                self.run(self.broker.on_broker_response(send.token, None, self.now))
                continue
            super().run(self.broker.handle_request(LOOPBACK_CONN, send.frame, self.now))
            answer = self.sent[LOOPBACK_CONN].pop(0)
            assert isinstance(answer, Send), answer
            frame = b"".join(bytes(b) for b in answer.buffers)[4:]
            self.run(self.broker.on_broker_response(send.token, frame, self.now))


def harness(**overrides: str) -> Harness:
    h = ShareHarness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
                        "share.coordinator.state.topic.replication.factor": "1",
                        "share.coordinator.state.topic.num.partitions": "3",
                        "group.share.enable": "true", "group.share.record.lock.duration.ms": "15000", **overrides})
    h.create("t")
    h.run(h.broker.auto_topics.create("__share_group_state", lambda *_: [], h.now))
    h.call(10, 3, {"key": GROUP, "key_type": 0})      # creates __consumer_offsets
    h.call(10, 3, {"key": GROUP, "key_type": 0})
    return h


def topic_id(h: Harness) -> uuid.UUID:
    return h.broker.metadata.topics["t"].topic_id


def join(h: Harness, member: str):
    return h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": member, "member_epoch": 0, "rack_id": None,
                                 "subscribed_topic_names": ["t"]})


def share_fetch_body(h: Harness, member: str, epoch: int, acks=(), max_records: int = 500, partitions=True,
                     max_wait: int = 0):
    parts = [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)} for f, last, types in acks]}]
    return {"group_id": GROUP, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records, "batch_size": 500,
            "topics": [{"topic_id": topic_id(h), "partitions": parts}] if partitions or acks else [],
            "forgotten_topics_data": []}


def share_fetch(h: Harness, member: str, epoch: int, acks=(), max_records: int = 500, partitions=True, conn=1):
    answer = h.call(FETCH, 1, share_fetch_body(h, member, epoch, acks, max_records, partitions), conn)
    h.tick(0)           # what is due now: a share-partition's state read from the share coordinator
    return answer


def acquired(answer) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def test_two_members_share_one_partition_and_each_record_goes_to_one_of_them_at_a_time():
    h = harness()
    a = join(h, "member-a")
    assert a.error_code == ErrorCode.none and a.member_epoch == 1
    assert [(t.topic_id, list(t.partitions)) for t in a.assignment.topic_partitions] == [(topic_id(h), [0])]
    b = join(h, "member-b")
    assert b.member_epoch == 2 and [list(t.partitions) for t in b.assignment.topic_partitions] == [[0]]
    assert share_fetch(h, "member-a", 0).error_code == ErrorCode.none     # the session starts at the high watermark
    h.produce("t", make_batch([b"v%d" % i for i in range(10)]))
    h.response(0, 7)
    got_a = share_fetch(h, "member-a", 1, max_records=4)
    assert got_a.acquisition_lock_timeout.total_seconds() == 15
    assert acquired(got_a) == [(0, 3, 1)] and got_a.responses[0].partitions[0].records
    got_b = share_fetch(h, "member-b", 0)
    assert acquired(got_b) == [(4, 9, 1)]
    # a acknowledges with its next fetch: accepts 0-2, releases 3; 3 goes out again, counted twice
    again = share_fetch(h, "member-a", 2, acks=[(0, 3, [1, 1, 1, 2])])
    assert again.responses[0].partitions[0].acknowledge_error_code == ErrorCode.none
    assert acquired(again) == [(3, 3, 2)]
    # b may not acknowledge what a holds; what it holds it acknowledges with ShareAcknowledge
    wrong = h.call(ACK, 1, {"group_id": GROUP, "member_id": "member-b", "share_session_epoch": 1, "topics": [
        {"topic_id": topic_id(h), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 3, "last_offset": 9, "acknowledge_types": [1]}]}]}]})
    assert wrong.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    right = h.call(ACK, 1, {"group_id": GROUP, "member_id": "member-b", "share_session_epoch": 2, "topics": [
        {"topic_id": topic_id(h), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 4, "last_offset": 9, "acknowledge_types": [1]}]}]}]})
    assert right.error_code == ErrorCode.none and right.responses[0].partitions[0].error_code == ErrorCode.none
    sp = h.broker.apis.share_apis.led.partitions[(GROUP, topic_id(h), 0)].sp
    assert sp.start_offset == 3 and sp.end_offset == 10
    # a is gone without a word: its lock on 3 expires and b gets it, a third delivery
    h.tick(15_000)
    assert acquired(share_fetch(h, "member-b", 3)) == [(3, 3, 3)]


def test_a_share_fetch_with_nothing_to_hand_out_waits_until_records_come_or_its_max_wait_ends():
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)
    h.request(FETCH, 1, share_fetch_body(h, "m", 1, max_wait=5000), conn=2)
    assert not h.sent.get(2)                                   # long-polling
    h.produce("t", make_batch([b"x"]))
    h.response(0, 7)
    assert acquired(h.response(FETCH, 1, conn=2)) == [(0, 0, 1)]      # answered as the record came
    h.request(FETCH, 1, share_fetch_body(h, "m", 2, max_wait=5000), conn=2)
    h.tick(4999)
    assert not h.sent.get(2)
    h.tick(1)
    answer = h.response(FETCH, 1, conn=2)
    assert answer.error_code == ErrorCode.none and acquired(answer) == []


def test_share_sessions_and_heartbeats_answer_kafkas_errors():
    h = harness()
    join(h, "m")
    assert share_fetch(h, "m", 5).error_code == ErrorCode.share_session_not_found
    assert share_fetch(h, "m", 0, acks=[(0, 0, [1])]).error_code == ErrorCode.invalid_request
    assert share_fetch(h, "m", 0).error_code == ErrorCode.none
    assert share_fetch(h, "m", 3).error_code == ErrorCode.invalid_share_session_epoch
    assert share_fetch(h, "", 0).error_code == ErrorCode.invalid_request
    stale = h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "m", "member_epoch": 9, "rack_id": None,
                                  "subscribed_topic_names": None})
    assert stale.error_code == ErrorCode.fenced_member_epoch
    described = h.call(DESCRIBE, 1, {"group_ids": [GROUP, "none"], "include_authorized_operations": False}).groups
    assert (described[0].group_state, described[0].assignor_name, [m.member_id for m in described[0].members]) == \
        ("Stable", "simple", ["m"])
    assert described[1].error_code == ErrorCode.group_id_not_found


def test_share_groups_are_served_and_advertised_only_when_enabled():
    on, off = harness(), Harness()
    advertised_on = {k.api_key for k in on.call(18, 3, {"client_software_name": "t",
                                                        "client_software_version": "1"}).api_keys}
    advertised_off = {k.api_key for k in off.call(18, 3, {"client_software_name": "t",
                                                          "client_software_version": "1"}).api_keys}
    assert {76, 77, 78, 79} <= advertised_on and not {76, 77, 78, 79} & advertised_off
    assert off.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "m", "member_epoch": 0, "rack_id": None,
                                   "subscribed_topic_names": ["t"]}).error_code == ErrorCode.unsupported_version


def test_a_share_fetch_of_a_topic_the_client_may_not_read_is_refused_for_that_partition():
    """Kafka: share consumers need READ on each topic they fetch (TOPIC_AUTHORIZATION_FAILED)."""
    from strandline.security.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType,
                                         ResourcePattern, ResourceType)
    h = harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    for conn, host in ((1, "10.0.0.1"), (2, "10.0.0.2")):
        h.broker.connection_opened(conn, host)
    h.broker.authorizer.load({ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW),
         AccessControlEntry("User:ANONYMOUS", "10.0.0.2", AclOperation.READ, AclPermissionType.DENY)})})
    join(h, "m")
    h.produce("t", make_batch([b"x"]))
    h.response(0, 7)
    refused = share_fetch(h, "m", 0, conn=2)
    assert refused.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    assert acquired(refused) == []
    assert share_fetch(h, "m2", 0, conn=1).responses[0].partitions[0].error_code == ErrorCode.none


def ack_body(h, member, epoch, first, last, kind=1):
    return {"group_id": GROUP, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": topic_id(h), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}]}]}]}


def one_record_acquired() -> Harness:
    """A share group of one member, "m", holding the topic's one record (offset 0), session epoch 2 next."""
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)
    h.produce("t", make_batch([b"x"]))
    h.response(0, 7)
    assert acquired(share_fetch(h, "m", 1)) == [(0, 0, 1)]
    return h


def restart(h: ShareHarness) -> ShareHarness:
    """The broker stops and starts again on the same disk (nothing lost): a new leader epoch, the
    share coordinator's partitions replayed from ``__share_group_state``."""
    topics = dict(h.broker.metadata.topics)
    again = ShareHarness.__new__(ShareHarness)
    again.config, again.disk, again.now, again.zk = h.config, h.disk, h.now + 1000, h.zk
    logs = LogManager(h.disk, ["/data/logs"], h.config.log_config())
    logs.startup(again.now)
    again.broker = Broker(h.config, logs, rng=random.Random(2), now_ms=again.now)
    again.correlation, again.sent, again.logs, again.brokers = 0, {}, [], dict(h.brokers)
    again.broker_sent = []
    again.run(again.broker.load_metadata("cluster", again.brokers, topics, 1, 1, again.now))
    return again


def test_a_share_partitions_state_survives_a_new_leader_through_the_share_coordinator():
    """KIP-932: the leader writes each change to the share coordinator (``__share_group_state``);
    a new leader reads it: what was accepted or rejected is not handed out again, what was
    released or still locked is, one delivery more."""
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)
    h.produce("t", make_batch([b"v%d" % i for i in range(10)]))
    h.response(0, 7)
    assert acquired(share_fetch(h, "m", 1)) == [(0, 9, 1)]
    # accept 0-3, release 4, reject 5; 6-9 stay locked
    ack = h.call(ACK, 1, {"group_id": GROUP, "member_id": "m", "share_session_epoch": 2, "topics": [
        {"topic_id": topic_id(h), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 5, "acknowledge_types": [1, 1, 1, 1, 2, 3]}]}]}]})
    assert ack.responses[0].partitions[0].error_code == ErrorCode.none
    key = ShareStateKey(GROUP, topic_id(h), 0)
    stored = h.broker.share_coordinator.states[key]
    assert stored.start_offset == 4 and [(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
                                         for b in stored.batches] == [(4, 4, 0, 1), (5, 5, 4, 1), (6, 9, 0, 1)]
    after = restart(h)
    assert after.broker.share_coordinator.states[key] == stored          # replayed from the log
    join(after, "m")
    share_fetch(after, "m", 0)
    assert acquired(share_fetch(after, "m", 1)) == [(4, 4, 2), (6, 9, 2)]


def test_an_acknowledgement_is_answered_once_the_share_coordinator_has_it():
    h = one_record_acquired()
    held = []
    h.run = lambda effects, run=h.run: held.extend(effects)        # requests to the coordinator held
    h.request(ACK, 1, ack_body(h, "m", 2, 0, 0))
    assert [type(e).__name__ for e in held] == ["BrokerSend"]        # the write, no answer yet
    del h.run
    h.run(held)
    assert h.response(ACK, 1).responses[0].partitions[0].error_code == ErrorCode.none


def test_an_acknowledgement_the_share_coordinator_did_not_get_is_refused_and_its_record_comes_again():
    """Kafka's leader rolls back an acknowledgement it could not persist: the member hears
    COORDINATOR_NOT_AVAILABLE, the record stays locked to it until the lock ends, then goes out
    again."""
    h = one_record_acquired()
    h.unanswered = 1
    refused = h.call(ACK, 1, ack_body(h, "m", 2, 0, 0))
    assert refused.responses[0].partitions[0].error_code == ErrorCode.coordinator_not_available
    assert acquired(share_fetch(h, "m", 3)) == []                    # still locked to m
    h.tick(15_000)
    assert acquired(share_fetch(h, "m", 4)) == [(0, 0, 2)]


def test_acknowledgements_waiting_when_a_new_leader_epoch_begins_are_all_answered():
    """A write in flight, a second acknowledgement waiting behind it, and a new leader epoch of the
    same leader (a follower left the ISR): each ShareAcknowledge gets its answer."""
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)
    h.produce("t", make_batch([b"x", b"y"]))
    h.response(0, 7)
    assert acquired(share_fetch(h, "m", 1)) == [(0, 1, 1)]
    held = []
    h.run = lambda effects, run=h.run: held.extend(effects)
    h.request(ACK, 1, ack_body(h, "m", 2, 0, 0), conn=2)         # its write goes out and is held
    h.request(ACK, 1, ack_body(h, "m", 3, 1, 1), conn=3)         # waits behind it
    del h.run
    h.broker.partitions[("t", 0)].leader_epoch += 1              # led again, in a new epoch
    h.call(FETCH, 1, share_fetch_body(h, "m", 4))                # takes it afresh (its read not yet sent)
    h.run(held)                                                  # the first write is kept
    assert h.response(ACK, 1, conn=2).responses[0].partitions[0].error_code == ErrorCode.none
    assert h.response(ACK, 1, conn=3).responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_a_share_partition_whose_leadership_moved_while_its_state_was_read_is_dropped():
    h = harness()
    join(h, "m")
    held = []
    h.run = lambda effects, run=h.run: held.extend(effects)
    h.request(FETCH, 1, share_fetch_body(h, "m", 0))
    h.tick(0)                                                    # the read goes out, held
    del h.run
    h.broker.partitions[("t", 0)].leader_epoch += 1              # leadership moved on meanwhile
    h.run(held)
    h.tick(0)
    assert (GROUP, topic_id(h), 0) not in h.broker.apis.share_apis.led.partitions


def test_an_acknowledgement_whose_write_fails_at_once_is_not_answered_as_kept_by_the_retry():
    """No share coordinator known: the write fails before the acknowledgement's wait begins. It was
    rolled back, so it is answered COORDINATOR_NOT_AVAILABLE, not NONE when a later write (the
    retry, without it) succeeds; its record comes again (seed 6950344 had it accepted twice)."""
    h = one_record_acquired()
    persister = h.broker.apis.share_apis.led.persister
    persister.coordinator = lambda key: None
    h.request(ACK, 1, ack_body(h, "m", 2, 0, 0))
    del persister.coordinator
    h.tick(500)                                                  # the retry's write succeeds
    assert h.response(ACK, 1).responses[0].partitions[0].error_code == ErrorCode.coordinator_not_available
    h.tick(15_000)
    assert acquired(share_fetch(h, "m", 3)) == [(0, 0, 2)]


def test_a_leader_the_metadata_says_was_replaced_hands_nothing_out():
    """A replica the controller could not reach when it moved the partition away still believes it
    leads; the metadata it was sent since names a newer leader epoch. It answers
    NOT_LEADER_OR_FOLLOWER, so that share consumers look for the leader (seed 6950235: they
    fetched from such a broker, which had no new records, until the run ended)."""
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)
    topic = h.broker.metadata.topics["t"]
    topic.states[0] = dataclasses.replace(topic.states[0], leader=2, leader_epoch=topic.states[0].leader_epoch + 3)
    answer = share_fetch(h, "m", 1)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


DESCRIBE_OFFSETS, READ_SUMMARY = 90, 87


def test_describe_share_group_offsets_reports_each_share_partitions_start_from_its_share_coordinator():
    """kafka-share-groups --describe: the start offset the share coordinator committed, -1 where
    there is no state; with no topics named, only the share-partitions that have one."""
    h = harness()
    h.create("other")
    join(h, "m")
    share_fetch(h, "m", 0)
    h.produce("t", make_batch([b"v%d" % i for i in range(5)]))
    h.response(0, 7)
    assert acquired(share_fetch(h, "m", 1)) == [(0, 4, 1)]
    share_fetch(h, "m", 2, acks=[(0, 2, [1])])          # 0-2 accepted: the start moves to 3
    named = h.call(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": GROUP, "topics": [
        {"topic_name": "t", "partitions": [0]}, {"topic_name": "other", "partitions": [0]},
        {"topic_name": "missing", "partitions": [0]}]}]})
    [group] = named.groups
    assert group.error_code == ErrorCode.none
    got = {(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch, p.error_code)
           for t in group.topics for p in t.partitions}
    assert got == {("t", 0): (3, 0, ErrorCode.none), ("other", 0): (-1, 0, ErrorCode.none),
                   ("missing", 0): (-1, 0, ErrorCode.none)}
    assert {t.topic_name: t.topic_id for t in group.topics}["missing"] in (None, uuid.UUID(int=0))   # the zero id
    every = h.call(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": GROUP, "topics": None}]})
    assert [(t.topic_name, t.topic_id, [(p.partition_index, p.start_offset) for p in t.partitions])
            for t in every.groups[0].topics] == [("t", topic_id(h), [(0, 3)])]
    # the share coordinator's own summary: what was delivered for good counts from the start offset
    summary = h.call(READ_SUMMARY, 1, {"group_id": GROUP, "topics": [
        {"topic_id": topic_id(h), "partitions": [{"partition": 0, "leader_epoch": -1}]}]}, conn=LOOPBACK_CONN)
    [p] = summary.results[0].partitions
    assert (p.error_code, p.start_offset, p.delivery_complete_count) == (ErrorCode.none, 3, 0)
    # another group, or a broker that is not the group's coordinator
    unknown = h.call(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": "nobody", "topics": None}]})
    assert unknown.groups[0].error_code in (ErrorCode.none, ErrorCode.not_coordinator) and \
        not unknown.groups[0].topics


def test_describe_share_group_offsets_is_refused_without_share_groups():
    h = harness(**{"group.share.enable": "false"})
    answer = h.call(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": GROUP, "topics": None}]})
    assert answer.groups[0].error_code == ErrorCode.unsupported_version


def reload_offsets_partition(h: Harness) -> None:
    """The group coordinator moves away and back: its groups are rebuilt from __consumer_offsets."""
    for listener in list(h.broker.replica_manager.leadership_listeners):
        h.run(listener("__consumer_offsets", 0, False, h.now) or [])
    assert GROUP not in h.broker.apis.share_apis.groups
    for listener in list(h.broker.replica_manager.leadership_listeners):
        h.run(listener("__consumer_offsets", 0, True, h.now) or [])


def test_a_share_group_is_written_to_consumer_offsets_and_a_new_coordinator_resumes_it():
    """Kafka 4.x's share group records (types 10-14): after the coordinator moves, the members go on
    with their epochs and partitions instead of joining again, and the group stays described."""
    h = harness()
    a = join(h, "member-a")
    b = join(h, "member-b")
    assert (a.member_epoch, b.member_epoch) == (1, 2)
    key_types = {int.from_bytes(key[:2], "big") for key in record_keys(h)}
    assert {10, 11, 12, 13, 14} <= key_types
    reload_offsets_partition(h)
    group = h.broker.apis.share_apis.groups[GROUP]
    assert (group.group_epoch, group.assignment_epoch, sorted(group.members)) == (2, 2, ["member-a", "member-b"])
    again = h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "member-b", "member_epoch": 2, "rack_id": None,
                                  "subscribed_topic_names": None})
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, 2)          # not UNKNOWN_MEMBER_ID
    # a member that leaves is gone for good: its records are tombstoned
    gone = h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "member-a", "member_epoch": -1, "rack_id": None,
                                 "subscribed_topic_names": None})
    assert gone.error_code == ErrorCode.none
    reload_offsets_partition(h)
    group = h.broker.apis.share_apis.groups[GROUP]
    assert sorted(group.members) == ["member-b"] and group.group_epoch == 3
    assert group.members["member-b"].assignment == {topic_id(h): frozenset({0})}
    described = h.call(DESCRIBE, 1, {"group_ids": [GROUP], "include_authorized_operations": False})
    assert described.groups[0].group_state == "Stable" and len(described.groups[0].members) == 1


def record_keys(h: Harness) -> list[bytes]:
    from strandline.group.records import iter_log_records

    data = bytes(h.broker.replica_manager.partitions[("__consumer_offsets", 0)].log.read(0, 1 << 24))
    return [key for _, key, _, _, _ in iter_log_records(data) if key]


def test_a_share_group_write_that_failed_is_made_good_by_a_whole_write_later():
    """A member's leave whose records were refused (nothing appended) must not come back when a
    new coordinator replays the log: the group is written again, whole, with the tombstones."""
    h = harness()
    join(h, "member-a")
    join(h, "member-b")
    apis = h.broker.apis.share_apis
    real_append = apis.coordinator.append
    refused = []

    def refuse_once(partition, records, done, now_ms):
        if not refused:
            refused.append(records)
            return done(ErrorCode.not_enough_replicas, now_ms, -1)      # nothing appended
        return real_append(partition, records, done, now_ms)
    apis.coordinator.append = refuse_once
    gone = h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "member-a", "member_epoch": -1, "rack_id": None,
                                 "subscribed_topic_names": None})
    assert gone.error_code == ErrorCode.coordinator_not_available and refused
    h.tick(500)                                         # written again, whole
    reload_offsets_partition(h)
    assert sorted(apis.groups[GROUP].members) == ["member-b"]


def test_delete_groups_deletes_an_empty_share_group_and_its_share_partitions_state():
    h = harness()
    join(h, "m")
    share_fetch(h, "m", 0)                                  # the share-partition's state is initialized
    key = ShareStateKey(GROUP, topic_id(h), 0)
    assert key in h.broker.share_coordinator.states
    busy = h.call(42, 2, {"groups_names": [GROUP]})
    assert busy.results[0].error_code == ErrorCode.non_empty_group
    h.call(HEARTBEAT, 1, {"group_id": GROUP, "member_id": "m", "member_epoch": -1, "rack_id": None,
                          "subscribed_topic_names": None})
    deleted = h.call(42, 2, {"groups_names": [GROUP]})
    assert deleted.results[0].error_code == ErrorCode.none
    assert key not in h.broker.share_coordinator.states and GROUP not in h.broker.apis.share_apis.groups
    for listener in list(h.broker.replica_manager.leadership_listeners):       # a new coordinator: still gone
        h.run(listener("__consumer_offsets", 0, False, h.now) or [])
        h.run(listener("__consumer_offsets", 0, True, h.now) or [])
    assert GROUP not in h.broker.apis.share_apis.groups
