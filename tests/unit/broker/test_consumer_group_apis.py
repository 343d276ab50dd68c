"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) through a broker's core: the
answers on the wire, the records in __consumer_offsets and their replay by a coordinator taking
over, the session timeout as a deadline of the broker's tick, offset commits and fetches checked
against the member epoch, one protocol per group, and the switch that turns the protocol off."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.config import BrokerConfig
from strandline.core.config_key import ConfigError
from strandline.group.offsets_topic import OFFSETS_TOPIC
from tests.unit.broker.test_broker_core import Harness

GROUP = "g"


def harness(**overrides: str) -> Harness:
    h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1", **overrides})
    h.create("t", partitions=4)
    h.call(10, 3, {"key": GROUP, "key_type": 0})      # creates __consumer_offsets
    h.call(10, 3, {"key": GROUP, "key_type": 0})
    return h


def beat(h: Harness, member_id: str, epoch: int, owned: list[int] | None = None, join: bool = False, conn: int = 1):
    topic_id = h.broker.metadata.topics["t"].topic_id
    body = {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30_000 if join else -1, "subscribed_topic_names": ["t"] if join else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": [] if join else None if owned is None else [{"topic_id": topic_id,
                                                                              "partitions": owned}]}
    return h.call(68, 1, body, conn)


def assigned(answer) -> list[int]:
    return sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)


def offsets_log_records(h: Harness) -> int:
    return h.broker.replica_manager.partitions[(OFFSETS_TOPIC, 0)].log.log_end_offset


def test_a_member_joins_gets_every_partition_and_its_records_are_in_consumer_offsets():
    h = harness()
    before = offsets_log_records(h)
    answer = beat(h, "m1", 0, join=True)
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (ErrorCode.none, "m1", 1)
    assert answer.heartbeat_interval.total_seconds() * 1000 == 5000          # Kafka's default
    assert assigned(answer) == [0, 1, 2, 3]
    assert offsets_log_records(h) > before
    again = beat(h, "m1", 1, owned=[0, 1, 2, 3])
    assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.none, 1, None)


def test_a_second_member_gets_half_once_the_first_gave_them_up():
    h = harness()
    beat(h, "m1", 0, join=True)
    b = beat(h, "m2", 0, join=True)
    assert (b.member_epoch, assigned(b)) == (2, [])             # its partitions are still m1's
    a = beat(h, "m1", 1, owned=[0, 1, 2, 3])
    assert (a.member_epoch, len(assigned(a))) == (1, 2)         # it keeps its epoch until it gives them up
    kept = assigned(a)
    a = beat(h, "m1", 1, owned=kept)
    assert a.member_epoch == 2
    b = beat(h, "m2", 2, owned=[])
    assert sorted(assigned(b) + kept) == [0, 1, 2, 3]


def test_a_new_coordinator_replays_the_group_and_the_member_goes_on_at_its_epoch():
    h = harness()
    beat(h, "m1", 0, join=True)
    topics = h.broker.offsets_topic
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, False, h.now, h.broker.consumer_groups))
    assert h.broker.consumer_groups.holds(GROUP) is None
    assert beat(h, "m1", 1, owned=[0, 1, 2, 3]).error_code == ErrorCode.not_coordinator
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, True, h.now, h.broker.consumer_groups))
    group = h.broker.consumer_groups.holds(GROUP)
    assert group is not None and group.group_epoch == 1 and group.members["m1"].member_epoch == 1
    assert beat(h, "m1", 1, owned=[0, 1, 2, 3]).error_code == ErrorCode.none


def test_a_member_silent_for_the_session_timeout_is_fenced_by_the_brokers_tick():
    h = harness(**{"group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "6000"})
    beat(h, "m1", 0, join=True)
    deadline = h.broker.next_deadline_ms()
    assert deadline is not None and deadline <= h.now + 6000
    h.tick(5000)
    assert "m1" in h.broker.consumer_groups.holds(GROUP).members
    h.tick(1000)
    assert "m1" not in h.broker.consumer_groups.holds(GROUP).members
    assert beat(h, "m1", 1, owned=[0, 1, 2, 3]).error_code == ErrorCode.unknown_member_id


def commit(h: Harness, epoch: int, member_id: str = "m1", version: int = 9):
    answer = h.call(8, version, {"group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member_id,
                                 "group_instance_id": None, "retention_time_ms": -1, "topics": [
                                     {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                                   "committed_leader_epoch": -1,
                                                                   "committed_metadata": ""}]}]})
    return answer.topics[0].partitions[0].error_code


def fetch(h: Harness, epoch: int, member_id: str | None = "m1"):
    answer = h.call(9, 9, {"groups": [{"group_id": GROUP, "member_id": member_id, "member_epoch": epoch,
                                       "topics": [{"name": "t", "partition_indexes": [0]}]}],
                           "require_stable": False})
    group = answer.groups[0]
    return group.error_code, [p.committed_offset for t in group.topics for p in t.partitions]


def test_offset_commits_and_fetches_of_a_member_are_checked_against_its_epoch():
    h = harness()
    beat(h, "m1", 0, join=True)
    assert commit(h, 2) == ErrorCode.stale_member_epoch
    assert commit(h, 1, member_id="nobody") == ErrorCode.unknown_member_id
    assert commit(h, -1, member_id="") == ErrorCode.unknown_member_id      # from outside, while it has members
    assert commit(h, 1, version=8) == ErrorCode.unsupported_version
    assert commit(h, 1) == ErrorCode.none
    assert fetch(h, 1) == (ErrorCode.none, [42])
    assert fetch(h, 0) == (ErrorCode.stale_member_epoch, [])
    assert fetch(h, -1, member_id=None) == (ErrorCode.none, [42])          # an admin's fetch


def test_a_group_of_another_protocol_type_is_not_mixed_with_a_consumer_group():
    """Members of the classic protocol and of the consumer one share a group only for the embedded
    consumer protocol (see test_group_migration.py); a Connect group is of one kind."""
    h = harness()
    beat(h, "m1", 0, join=True)
    join = h.call(11, 5, {"group_id": GROUP, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                          "member_id": "", "group_instance_id": None, "protocol_type": "connect",
                          "protocols": [{"name": "default", "metadata": b""}]})
    assert join.error_code == ErrorCode.inconsistent_group_protocol
    h.request(11, 3, {"group_id": "classic", "session_timeout": 10_000, "rebalance_timeout": 10_000,
                      "member_id": "", "protocol_type": "connect", "protocols": [{"name": "default", "metadata": b""}]})
    h.tick(3_000)                                       # group.initial.rebalance.delay.ms
    assert h.response(11, 3).error_code == ErrorCode.none
    body = {"group_id": "classic", "member_id": str(uuid.uuid4()), "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    answer = h.call(68, 1, body)
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.group_id_not_found, "Cannot upgrade classic group classic to consumer group because the group "
                                      "does not use the consumer embedded protocol.")
    answer = h.call(68, 1, {**body, "member_epoch": 3})
    assert (answer.error_code, answer.error_message) == (ErrorCode.group_id_not_found,
                                                         "Group classic is not a consumer group.")


def test_describe_and_list_show_a_consumer_group():
    h = harness()
    beat(h, "m1", 0, join=True)
    described = h.call(69, 0, {"group_ids": [GROUP, "other"], "include_authorized_operations": False})
    g, other = described.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignor_name) == (ErrorCode.none, "Stable", 1, "uniform")
    assert [(m.member_id, m.member_epoch) for m in g.members] == [("m1", 1)]
    assert other.error_code == ErrorCode.group_id_not_found
    v1 = h.call(69, 1, {"group_ids": [GROUP], "include_authorized_operations": False}).groups[0]
    assert [m.member_type for m in v1.members] == [1]
    listed = h.call(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert [(x.group_id, x.group_type, x.protocol_type, x.group_state) for x in listed.groups] == \
        [(GROUP, "consumer", "consumer", "Stable")]
    assert h.call(16, 5, {"states_filter": [], "types_filter": ["classic"]}).groups == ()
    old = h.call(15, 5, {"groups": [GROUP], "include_authorized_operations": False}).groups[0]
    assert (old.error_code, old.group_state) == (ErrorCode.none, "Dead")    # not a classic group


def advertised(h: Harness) -> set[int]:
    return {k.api_key for k in h.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).api_keys}


def test_the_apis_are_served_and_advertised_only_when_the_consumer_protocol_is_enabled():
    assert {68, 69} <= advertised(harness())
    h = harness(**{"group.coordinator.rebalance.protocols": "classic"})
    assert not {68, 69} & advertised(h)
    assert beat(h, "m1", 0, join=True).error_code == ErrorCode.unsupported_version


@pytest.mark.parametrize("overrides, message", [
    ({"group.coordinator.rebalance.protocols": "consumer"}, "disabling the 'classic' protocol"),
    ({"group.consumer.heartbeat.interval.ms": "50000", "group.consumer.max.heartbeat.interval.ms": "60000"},
     "must be less than group.consumer.session.timeout.ms"),
    ({"group.consumer.session.timeout.ms": "5000"}, "must be between group.consumer.min.session.timeout.ms"),
    ({"group.consumer.assignors": "sticky"}, "unknown assignor"),
])
def test_the_consumer_group_keys_are_checked_as_kafka_does(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181", **overrides})


def delete_groups(h: Harness, *names: str) -> dict[str, ErrorCode]:
    return {r.group_id: r.error_code for r in h.call(42, 2, {"groups_names": list(names)}).results}


def test_an_empty_consumer_group_is_deleted_with_its_offsets_and_one_with_members_is_not():
    h = harness()
    beat(h, "m1", 0, join=True)
    assert commit(h, 1) == ErrorCode.none
    assert delete_groups(h, GROUP) == {GROUP: ErrorCode.non_empty_group}
    assert beat(h, "m1", -1).error_code == ErrorCode.none                   # leaves
    assert delete_groups(h, GROUP) == {GROUP: ErrorCode.none}
    assert h.broker.consumer_groups.holds(GROUP) is None
    assert fetch(h, -1, member_id=None) == (ErrorCode.none, [-1])
    topics = h.broker.offsets_topic                                          # and so it stays when replayed
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, True, h.now, h.broker.consumer_groups))
    assert h.broker.consumer_groups.holds(GROUP) is None


def test_a_classic_member_takes_over_the_id_of_an_empty_consumer_group():
    h = harness()
    beat(h, "m1", 0, join=True)
    beat(h, "m1", -1)
    h.request(11, 3, {"group_id": GROUP, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                      "member_id": "", "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    h.tick(3_000)                                       # group.initial.rebalance.delay.ms
    assert h.response(11, 3).error_code == ErrorCode.none
    assert h.broker.consumer_groups.holds(GROUP) is None
    answer = beat(h, "m2", 0, join=True)
    assert answer.error_code == ErrorCode.group_id_not_found               # now a classic group with a member


def test_a_transactional_offset_commit_of_a_member_is_checked_against_its_epoch():
    h = harness()
    beat(h, "m1", 0, join=True)

    def txn_commit(epoch: int, member_id: str) -> ErrorCode:
        answer = h.call(28, 3, {"transactional_id": "tx", "group_id": GROUP, "producer_id": 1, "producer_epoch": 0,
                                "generation_id": epoch, "member_id": member_id, "group_instance_id": None,
                                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                         "committed_leader_epoch": -1,
                                                                         "committed_metadata": ""}]}]})
        return answer.topics[0].partitions[0].error_code

    assert txn_commit(5, "m1") == ErrorCode.stale_member_epoch
    assert txn_commit(1, "nobody") == ErrorCode.unknown_member_id


def test_offset_delete_keeps_the_offsets_of_the_topics_a_consumer_group_subscribes_to():
    h = harness()
    h.create("other")
    beat(h, "m1", 0, join=True)
    assert commit(h, 1) == ErrorCode.none
    answer = h.call(47, 0, {"group_id": GROUP, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]},
                                                          {"name": "other", "partitions": [{"partition_index": 0}]}]})
    assert answer.error_code == ErrorCode.none
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == \
        {"t": ErrorCode.group_subscribed_to_topic, "other": ErrorCode.none}
    assert fetch(h, 1) == (ErrorCode.none, [42])


def test_from_v1_the_consumer_makes_its_member_id_and_in_v0_the_coordinator_does():
    h = harness()
    assert (beat(h, "", 0, join=True).error_code, beat(h, "", 0, join=True).error_message) == \
        (ErrorCode.invalid_request, "MemberId can't be empty.")
    body = {"group_id": GROUP, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"], "server_assignor": None,
            "topic_partitions": []}
    answer = h.call(68, 0, body)
    assert answer.error_code == ErrorCode.none and answer.member_id and answer.member_epoch == 1


def test_topics_a_client_may_not_describe_refuse_its_heartbeat_and_hide_a_group_it_describes():
    """Kafka 4.0's KAFKA-18813: a heartbeat subscribing to a topic the client may not DESCRIBE is
    refused whole (the group not touched); a group whose members are assigned such a topic is
    described as TOPIC_AUTHORIZATION_FAILED, with no members, to that client only."""
    from strandline.security.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType,
                                         ResourcePattern, ResourceType)
    h = harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    for conn, host in ((1, "10.0.0.1"), (2, "10.0.0.2")):
        h.broker.connection_opened(conn, host)
    assert beat(h, "m1", 0, join=True, conn=1).error_code == ErrorCode.none
    h.broker.authorizer.load({ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.ALLOW),
         AccessControlEntry("User:ANONYMOUS", "10.0.0.2", AclOperation.DESCRIBE, AclPermissionType.DENY)})})
    refused = beat(h, "m2", 0, join=True, conn=2)
    assert (refused.error_code, refused.member_epoch) == (ErrorCode.topic_authorization_failed, 0)
    body = {"group_ids": [GROUP], "include_authorized_operations": True}
    hidden = h.call(69, 0, body, 2).groups[0]
    assert (hidden.error_code, hidden.error_message, hidden.members, hidden.group_state) == (
        ErrorCode.topic_authorization_failed,
        "The group has described topic(s) that the client is not authorized to describe.", (), "")
    seen = h.call(69, 0, body, 1).groups[0]
    assert seen.error_code == ErrorCode.none and [m.member_id for m in seen.members] == ["m1"]


def test_a_fencing_the_log_refuses_at_once_leaves_the_group_as_its_log_has_it_and_is_tried_again():
    """The simulator's seed 6800016 (``--consumer-groups``): a session timeout fenced a member
    while the offsets partition's ISR was below min.insync.replicas, so its records were refused
    at once; the coordinator kept the member removed in memory, gave its partition to another and
    wrote that, and the next coordinator, replaying the log, met the partition owned twice
    (BrokenInvariant, the broker stopped). A write refused with nothing appended now leaves the
    group as the log has it, and the fencing is tried again 500 ms later."""
    h = harness(**{"group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "6000"})
    beat(h, "m1", 0, join=True)
    appends = h.broker.consumer_groups.classic
    real = appends.append
    refused = []

    def refuse_once(index, records, done, now_ms, producer=None):
        if not refused:
            refused.append(records)
            return done(ErrorCode.coordinator_not_available, now_ms, -1)      # nothing appended
        return real(index, records, done, now_ms, producer)
    appends.append = refuse_once
    h.tick(6000)
    assert refused and "m1" in h.broker.consumer_groups.holds(GROUP).members
    h.tick(500)
    assert "m1" not in h.broker.consumer_groups.holds(GROUP).members
    topics = h.broker.offsets_topic
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, False, h.now, h.broker.consumer_groups))
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, True, h.now, h.broker.consumer_groups))
    assert h.broker.consumer_groups.holds(GROUP).members == {}          # the log has the fencing
