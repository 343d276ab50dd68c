"""ConsumerGroupHeartbeat in the pure core: members join, reconcile, leave and are fenced, with
Kafka's epochs and errors, and the records written rebuild the group."""

from __future__ import annotations

from kio.schema.consumer_group_describe.v0 import response as kio
from kio.schema.errors import ErrorCode

from strandline.group.consumer.describe import describe
from strandline.group.consumer.group import ConsumerGroupState
from strandline.group.consumer.heartbeat import ConsumerGroupConfig, HeartbeatRequest, RebalanceTimeout, SessionTimeout
from strandline.group.consumer.model import MemberState, pairs, size
from tests.unit.group.consumer_clients import GROUP, TOPICS, Client, Harness


def joined(h: Harness, name: str, **kwargs) -> Client:
    client = Client(name, **kwargs)
    h.clients.append(client)
    h.beat(client)
    return client


def test_three_members_join_then_one_leaves_and_no_partition_is_ever_owned_twice():
    h = Harness()
    a = joined(h, "a")
    assert (a.member_id, a.epoch, size(a.owned)) == ("member-1", 1, 9)
    assert (h.group.group_epoch, h.group.assignment_epoch, h.group.state) == (1, 1, ConsumerGroupState.STABLE)

    b = joined(h, "b")                           # epoch 2: b's share is a's until a gives it up
    assert (b.epoch, b.owned) == (2, {})
    assert h.group.members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    assert h.group.state is ConsumerGroupState.RECONCILING
    h.beat(a)                                    # a is asked to give up 4, at its epoch
    assert (a.epoch, size(a.owned)) == (1, 5)
    assert h.group.members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    h.beat(b)                                    # still owned by a (pending revocation): nothing yet
    assert b.owned == {}
    h.beat(a)                                    # a no longer owns them: it moves to epoch 2
    assert (a.epoch, size(a.owned)) == (2, 5)
    h.beat(b)
    assert (b.epoch, size(b.owned)) == (2, 4)
    assert h.group.state is ConsumerGroupState.STABLE

    c = joined(h, "c")
    for client in (a, b, c, a, b, c):
        h.beat(client)
    assert [(x.epoch, size(x.owned)) for x in (a, b, c)] == [(3, 3), (3, 3), (3, 3)]
    assert h.group.state is ConsumerGroupState.STABLE

    b_had = set(b.owned)
    response = h.leave(b)
    assert (response.member_id, response.member_epoch) == (b.member_id, -1)
    h.clients.remove(b)
    assert b.member_id not in h.group.members and h.group.group_epoch == 4
    assert h.group.state is ConsumerGroupState.ASSIGNING
    for client in (a, c):
        h.beat(client)
    assert [(x.epoch, size(x.owned)) for x in (a, c)] == [(4, 5), (4, 4)]     # the extra one to the first id
    assert h.group.state is ConsumerGroupState.STABLE
    assert b_had <= set(a.owned) | set(c.owned)

    assert h.replayed() == h.group


def test_a_heartbeat_answers_the_assignment_only_when_it_changed_or_was_asked_for():
    h = Harness()
    a = joined(h, "a")
    response = h.beat(a)
    assert response.assignment is None and response.heartbeat_interval_ms == 5000
    full = HeartbeatRequest(GROUP, a.member_id, a.epoch, rebalance_timeout_ms=30_000,
                            subscribed_topic_names=a.topics, topic_partitions=a.request().topic_partitions)
    assert h.send(full).assignment == a.owned


def test_wrong_epochs_and_unknown_members_are_fenced():
    h = Harness()
    a = joined(h, "a")
    b = joined(h, "b")
    for client in (a, a, b):
        h.beat(client)
    assert (a.epoch, b.epoch) == (2, 2)
    ahead = HeartbeatRequest(GROUP, a.member_id, 3, topic_partitions=())
    assert h.send(ahead).error_code is ErrorCode.fenced_member_epoch
    # the previous epoch with a subset of the assignment: the answer that bumped it was lost
    previous = HeartbeatRequest(GROUP, a.member_id, 1, topic_partitions=a.request().topic_partitions)
    assert h.send(previous).error_code is ErrorCode.none
    behind = HeartbeatRequest(GROUP, b.member_id, 1, topic_partitions=a.request().topic_partitions)
    assert h.send(behind).error_code is ErrorCode.fenced_member_epoch
    unknown = HeartbeatRequest(GROUP, "nobody", 2, topic_partitions=())
    assert h.send(unknown).error_code is ErrorCode.unknown_member_id
    assert h.send(HeartbeatRequest("other", "x", 1)).error_code is ErrorCode.group_id_not_found
    assert h.send(HeartbeatRequest(GROUP, "", 0, subscribed_topic_names=("orders",))).error_code \
        is ErrorCode.invalid_request                                   # no rebalance timeout
    assert h.send(HeartbeatRequest(GROUP, "", 0, rebalance_timeout_ms=1, subscribed_topic_names=("orders",),
                                   topic_partitions=(), server_assignor="sticky")).error_code \
        is ErrorCode.unsupported_assignor
    # a refused heartbeat changes nothing and writes nothing
    written = len(h.log)
    assert h.send(ahead).error_code is ErrorCode.fenced_member_epoch and len(h.log) == written
    assert h.replayed() == h.group


def test_a_fenced_member_gives_up_everything_and_joins_again_under_its_id_keeping_its_assignment():
    """Kafka 4.2 (KAFKA-19233): a member that joins again with epoch 0 under the id the group
    knows keeps its epoch and its assignment, answered in full; nothing is written for it."""
    h = Harness()
    a = joined(h, "a")
    lost_epoch = a.epoch
    a.epoch = lost_epoch + 5                      # a client gone wrong
    h.beat(a)
    assert (a.epoch, a.owned) == (0, {})
    before, logged = h.group, len(h.log)
    h.beat(a)
    assert (a.member_id, a.epoch, size(a.owned)) == ("member-1", lost_epoch, 9)
    assert h.group == before and len(h.log) == logged
    assert h.replayed() == h.group


def test_a_static_member_leaves_for_a_while_and_comes_back_under_a_new_id_without_a_rebalance():
    h = Harness()
    a = joined(h, "a", instance_id="i-a")
    b = joined(h, "b", instance_id="i-b")
    for client in (a, b, a, b):
        h.beat(client)
    epoch, b_had = h.group.group_epoch, dict(b.owned)
    response = h.leave(b, epoch=-2)
    assert response.member_epoch == -2 and h.group.members[b.member_id].member_epoch == -2
    assert h.group.group_epoch == epoch                       # its place is kept
    twin = Client("b2", instance_id="i-a")          # a's instance id is not free
    assert h.send(twin.request()).error_code is ErrorCode.unreleased_instance_id
    back = Client("b", instance_id="i-b", member_id="member-9")
    h.clients[h.clients.index(b)] = back
    h.beat(back)
    assert back.member_id == "member-9" and back.owned == b_had and h.group.group_epoch == epoch
    assert b.member_id not in h.group.members and h.group.static_members["i-b"] == "member-9"
    assert ("session", GROUP, b.member_id) not in h.coordinator.deadlines
    stale = HeartbeatRequest(GROUP, b.member_id, b.epoch or 2, "i-b", topic_partitions=())
    assert h.send(stale).error_code is ErrorCode.fenced_instance_id
    assert h.replayed() == h.group


def test_a_member_that_stops_heartbeating_is_fenced_when_its_session_ends():
    h = Harness(ConsumerGroupConfig(session_timeout_ms=45_000))
    a = joined(h, "a")
    b = joined(h, "b")
    for client in (a, b, a, b):
        h.beat(client)
    h.now = 10_000
    h.beat(a)
    assert h.coordinator.deadlines[("session", GROUP, b.member_id)] == SessionTimeout(GROUP, b.member_id, 45_000)
    assert h.coordinator.next_deadline_ms() == 45_000
    assert h.expire(44_999) == []
    h.clients.remove(b)                           # b crashed: it owns nothing any more
    fenced = h.expire(45_000)
    assert [key.type for key, _ in fenced] == [8, 7, 5, 3]
    assert b.member_id not in h.group.members and h.group.group_epoch == 3
    h.beat(a)
    assert size(a.owned) == 9 and a.epoch == 3
    assert h.replayed() == h.group


def test_a_member_that_keeps_what_it_must_give_up_is_fenced_after_its_rebalance_timeout():
    h = Harness()
    a = joined(h, "a")
    joined(h, "b")
    h.now = 1_000
    h.beat(a, lost=True)                           # a is asked to give up partitions; it never does
    member = h.group.members[a.member_id]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert h.coordinator.deadlines[("rebalance", GROUP, a.member_id)] == \
        RebalanceTimeout(GROUP, a.member_id, member.member_epoch, 31_000)
    h.clients.remove(a)
    h.expire(31_000)
    assert a.member_id not in h.group.members
    assert h.replayed() == h.group


def regex_join(h: Harness, regex: str, member_id: str = "") -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(),
                            subscribed_topic_regex=regex, topic_partitions=())


def test_a_regular_expression_subscribes_to_the_topics_it_matches_in_full():
    """Resolved at the join (a record of type 16 with the topics), matched in full with RE2's
    syntax: Kafka's RE2/J refuses what RE2 refuses, lookahead included, with its message."""
    h = Harness()
    a = Client("a", topics=())
    h.clients.append(a)
    a.take(h.send(regex_join(h, "pay.*")))
    assert set(h.group.subscription_metadata) == {"payments"} and size(a.owned) == 3
    assert h.group.resolved_regexes["pay.*"].topics == ("payments",)
    assert h.replayed() == h.group
    for bad, reason in (("(", "missing ): ("), ("(?=orders)", "invalid perl operator: (?=")):
        answer = h.send(regex_join(h, bad))
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{bad}` is not a valid regular expression: {reason}.")


def test_a_regular_expression_resolves_to_the_topics_the_member_may_describe_at_most_every_10_s():
    """Kafka 4.0: the topics a regular expression resolves to are filtered by the DESCRIBE the
    member's client has; a resolution runs at most every 10 s, so a topic created meanwhile joins
    at the first heartbeat 10 s after the last resolution; the last member using a regular
    expression leaving writes its tombstone."""
    from strandline.group.consumer.model import TopicMetadata
    import uuid
    h = Harness()
    hidden = {"payments"}
    records, answer = h.coordinator.heartbeat(regex_join(h, ".*"), TOPICS, 0, lambda t: t not in hidden)
    h.append(records)
    assert h.group.resolved_regexes[".*"].topics == ("orders",)
    member_id, epoch = answer.member_id, answer.member_epoch
    more = {**TOPICS, "orders2": TopicMetadata(uuid.UUID(int=9), "orders2", 2)}
    beat = HeartbeatRequest(GROUP, member_id, epoch, topic_partitions=None)
    records, answer = h.coordinator.heartbeat(beat, more, 5_000, lambda t: t not in hidden)
    h.append(records)
    assert h.group.resolved_regexes[".*"].topics == ("orders",)          # 5 s after: not yet
    records, answer = h.coordinator.heartbeat(beat, more, 10_000, lambda t: t not in hidden)
    h.append(records)
    assert h.group.resolved_regexes[".*"].topics == ("orders", "orders2")
    assert "orders2" in h.group.subscription_metadata and h.group.group_epoch == 2
    assert h.replayed() == h.group
    records, _ = h.coordinator.heartbeat(HeartbeatRequest(GROUP, member_id, -1), more, 11_000)
    h.append(records)
    assert h.group.resolved_regexes == {} and h.replayed() == h.group


def test_the_assignor_is_the_one_members_ask_for_most_else_the_first_configured():
    h = Harness(ConsumerGroupConfig.from_properties({"group.consumer.assignors": "range,uniform"}))
    a = joined(h, "a", topics=("orders",))
    b = joined(h, "b", topics=("orders",))
    for client in (a, b, a, b):
        h.beat(client)
    ids = sorted((a, b), key=lambda c: c.member_id)
    assert [[p for _, p in pairs(c.owned)] for c in ids] == [[0, 1, 2], [3, 4, 5]]


def test_the_configuration_takes_kafkas_keys_and_class_names():
    config = ConsumerGroupConfig.from_properties({
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
        "group.consumer.session.timeout.ms": "10000", "group.consumer.heartbeat.interval.ms": "1000"})
    assert (config.assignors, config.session_timeout_ms, config.heartbeat_interval_ms) == (("uniform",), 10000, 1000)
    assert ConsumerGroupConfig.from_properties({}) == ConsumerGroupConfig()


def test_consumer_group_describe_answers_each_member_with_its_assignment_and_target():
    h = Harness()
    a = joined(h, "a", assignor="range")
    b = joined(h, "b", instance_id="i-b")
    h.beat(a)
    (group, missing) = describe(h.coordinator.groups, ["g", "nope"], "uniform", TOPICS)
    assert missing["error_code"] is ErrorCode.group_id_not_found
    assert (group["group_state"], group["group_epoch"], group["assignment_epoch"], group["assignor_name"]) == \
        ("Reconciling", 2, 2, "range")
    by_id = {m["member_id"]: m for m in group["members"]}
    assert by_id[b.member_id]["instance_id"] == "i-b" and by_id[b.member_id]["assignment"]["topic_partitions"] == []
    assert [tp["partitions"] for tp in by_id[b.member_id]["target_assignment"]["topic_partitions"]] == [[0, 1, 2], [0, 1]]  # static first
    assert [tp["topic_name"] for tp in by_id[a.member_id]["assignment"]["topic_partitions"]] == ["orders", "payments"]
    assert {m["member_type"] for m in group["members"]} == {1}           # v1's MemberType: the consumer protocol
    # the body has the fields of kio's DescribedGroup, v0 (which has no MemberType)
    def assignment(a):
        return kio.Assignment(topic_partitions=tuple(kio.TopicPartitions(**{**tp, "partitions": tuple(tp["partitions"])})
                                                     for tp in a["topic_partitions"]))

    members = tuple(kio.Member(**{**{k: v for k, v in m.items() if k != "member_type"},
                                  "assignment": assignment(m["assignment"]),
                                  "target_assignment": assignment(m["target_assignment"]),
                                  "subscribed_topic_names": tuple(m["subscribed_topic_names"])})
                    for m in group["members"])
    kio.DescribedGroup(**{**group, "members": members})
