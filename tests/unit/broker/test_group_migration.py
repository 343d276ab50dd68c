"""A live group moving between the classic protocol and the consumer protocol of KIP-848, as Kafka
4.x's coordinator moves it (``group.consumer.migration.policy``), through a broker's core: the
upgrade when a member of the consumer protocol joins a classic group, the classic members served
by the consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), no partition owned by two
members on the way, the records a new coordinator replays, and the downgrade when the last member
of the consumer protocol leaves."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.config_key import ConfigError

from strandline.group.consumer import embedded
from strandline.group.offsets_topic import OFFSETS_TOPIC
from tests.unit.broker.test_consumer_group_apis import GROUP, assigned, beat, harness


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription(owned: list[int] = (), topic: str = "t") -> bytes:
    """ConsumerProtocolSubscription v1: topics, no user data, the partitions owned."""
    out = struct.pack(">h", 1) + struct.pack(">i", 1) + _s(topic) + struct.pack(">i", -1)
    out += struct.pack(">i", 1) + _s(topic) + struct.pack(">i", len(owned))
    return out + b"".join(struct.pack(">i", p) for p in owned)


def assignment_of(partitions: list[int], topic: str = "t") -> bytes:
    return embedded.encode_assignment({topic: list(partitions)}, 1)


def partitions_in(data: bytes) -> list[int]:
    return sorted(p for _, ps in embedded.decode_assignment(data) for p in ps)


def join(h, member_id: str, owned: list[int] = (), conn: int = 2, protocols=("range",)):
    return h.call(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                          "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                          "protocols": [{"name": n, "metadata": subscription(owned)} for n in protocols],
                          "reason": None}, conn)


def sync(h, member_id: str, generation: int, assignments=(), conn: int = 2):
    return h.call(14, 5, {"group_id": GROUP, "generation_id": generation, "member_id": member_id,
                          "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                          "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]}, conn)


def heartbeat(h, member_id: str, generation: int, conn: int = 2):
    return h.call(12, 4, {"group_id": GROUP, "generation_id": generation, "member_id": member_id,
                          "group_instance_id": None}, conn).error_code


def classic_group(h) -> tuple[str, int]:
    """A classic group of one consumer owning the four partitions of t; its id and generation."""
    first = join(h, "")
    assert first.error_code == ErrorCode.member_id_required
    member_id = first.member_id
    h.request(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": subscription()}], "reason": None}, 2)
    h.tick(3_000)                                        # group.initial.rebalance.delay.ms
    joined = h.response(11, 7, 2)
    assert (joined.error_code, joined.leader) == (ErrorCode.none, member_id)
    synced = sync(h, member_id, joined.generation_id, [(member_id, assignment_of([0, 1, 2, 3]))])
    assert partitions_in(synced.assignment) == [0, 1, 2, 3]
    return member_id, joined.generation_id


def groups_listed(h) -> list[tuple[str, str, str]]:
    return [(g.group_id, g.group_type, g.group_state) for g in h.call(16, 5, {"states_filter": [],
                                                                              "types_filter": []}).groups]


def test_a_consumer_of_the_new_protocol_upgrades_a_live_classic_group_and_the_classic_member_moves_over():
    h = harness()
    classic_id, generation = classic_group(h)
    answer = beat(h, "m1", 0, join=True)
    # the upgrade: the classic member is a member at the generation's epoch, owning its four partitions;
    # the new member bumps the group epoch and waits for the ones it is to get
    assert (answer.error_code, answer.member_epoch, assigned(answer)) == (ErrorCode.none, generation + 1, [])
    assert groups_listed(h) == [(GROUP, "consumer", "Reconciling")]
    described = h.call(69, 1, {"group_ids": [GROUP], "include_authorized_operations": False}).groups[0]
    assert sorted((m.member_id, m.member_type, m.member_epoch) for m in described.members) == sorted(
        [(classic_id, 0, generation), ("m1", 1, generation + 1)])
    # the classic member is told to join again, and gives up half of what it owns through two joins
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress
    rejoined = join(h, classic_id, owned=[0, 1, 2, 3])
    assert (rejoined.error_code, rejoined.generation_id, rejoined.leader) == (ErrorCode.none, generation, "")
    kept = partitions_in(sync(h, classic_id, generation).assignment)
    assert len(kept) == 2
    assert beat(h, "m1", generation + 1, owned=[]).assignment is None   # nothing before the classic member gives up
    again = join(h, classic_id, owned=kept)
    assert again.generation_id == generation + 1
    assert partitions_in(sync(h, classic_id, generation + 1).assignment) == kept
    assert heartbeat(h, classic_id, generation + 1) == ErrorCode.none
    got = assigned(beat(h, "m1", generation + 1, owned=[]))
    assert sorted(got + kept) == [0, 1, 2, 3] and not set(got) & set(kept)
    assert groups_listed(h) == [(GROUP, "consumer", "Stable")]


def test_the_records_of_an_upgraded_group_replay_on_a_new_coordinator_with_the_classic_member_in_it():
    h = harness()
    classic_id, generation = classic_group(h)
    beat(h, "m1", 0, join=True)
    topics = h.broker.offsets_topic
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, False, h.now, h.broker.consumer_groups))
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, True, h.now, h.broker.consumer_groups))
    group = h.broker.consumer_groups.holds(GROUP)
    assert group is not None and sorted(group.members) == sorted([classic_id, "m1"])
    classic = group.members[classic_id].classic
    assert classic is not None and classic.session_timeout_ms == 30_000 and classic.protocols[0][0] == "range"
    assert not h.broker.groups.groups.get(GROUP) or not h.broker.groups.groups[GROUP].members
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress


def test_the_last_member_of_the_new_protocol_leaving_downgrades_the_group_to_a_classic_one():
    h = harness()
    classic_id, generation = classic_group(h)
    beat(h, "m1", 0, join=True)
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress
    join(h, classic_id, owned=[0, 1, 2, 3])
    epoch = beat(h, "m1", -1).member_epoch                 # m1 leaves
    assert epoch == -1
    assert h.broker.consumer_groups.holds(GROUP) is None
    assert groups_listed(h) == [(GROUP, "classic", "PreparingRebalance")]
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress
    h.request(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": classic_id, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": subscription([0, 1])}], "reason": None}, 2)
    joined = h.response(11, 7, 2)                        # every member joined: the rebalance completes
    assert (joined.error_code, joined.leader) == (ErrorCode.none, classic_id)
    synced = sync(h, classic_id, joined.generation_id, [(classic_id, assignment_of([0, 1, 2, 3]))])
    assert partitions_in(synced.assignment) == [0, 1, 2, 3]
    assert groups_listed(h) == [(GROUP, "classic", "Stable")]
    # and a new coordinator reads it back as a classic group
    topics = h.broker.offsets_topic
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, False, h.now, h.broker.consumer_groups))
    h.run(topics.on_leadership(h.broker.groups, OFFSETS_TOPIC, 0, True, h.now, h.broker.consumer_groups))
    assert h.broker.consumer_groups.holds(GROUP) is None
    assert list(h.broker.groups.groups[GROUP].members) == [classic_id]


def test_a_classic_member_leaving_a_consumer_group_with_consumer_members_is_fenced_and_the_group_rebalances():
    h = harness()
    classic_id, generation = classic_group(h)
    beat(h, "m1", 0, join=True)
    left = h.call(13, 4, {"group_id": GROUP, "members": [{"member_id": classic_id, "group_instance_id": None,
                                                          "reason": None}]}, 2)
    assert (left.error_code, [m.error_code for m in left.members]) == (ErrorCode.none, [ErrorCode.none])
    after = beat(h, "m1", generation + 1, owned=[])
    assert (after.member_epoch, assigned(after)) == (generation + 2, [0, 1, 2, 3])


def test_a_classic_member_joins_a_consumer_group_with_members():
    h = harness()
    beat(h, "m1", 0, join=True)
    first = join(h, "")
    assert first.error_code == ErrorCode.member_id_required
    joined = join(h, first.member_id)
    assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 2)
    assert sync(h, first.member_id, 2).error_code == ErrorCode.none
    # a member offering no protocol every classic member offers is refused
    assert join(h, "", protocols=("roundrobin",), conn=3).error_code == ErrorCode.inconsistent_group_protocol


def test_with_migration_disabled_a_live_classic_group_is_not_upgraded():
    h = harness(**{"group.consumer.migration.policy": "disabled"})
    classic_group(h)
    answer = beat(h, "m1", 0, join=True)
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.group_id_not_found,
        f"Cannot upgrade classic group {GROUP} to consumer group because online upgrade is disabled.")
    assert groups_listed(h) == [(GROUP, "classic", "Stable")]


def test_a_classic_group_whose_members_share_a_partition_is_refused_and_stays_classic():
    h = harness()
    member_id, generation = classic_group(h)
    other = join(h, "", conn=3).member_id
    h.request(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": other, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": subscription()}], "reason": None}, 3)
    assert heartbeat(h, member_id, generation) == ErrorCode.rebalance_in_progress
    h.request(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": subscription()}], "reason": None}, 2)
    leader = h.response(11, 7, 2)
    h.response(11, 7, 3)
    both = assignment_of([0, 1, 2, 3])                   # a broken client assignor: both get everything
    h.request(14, 5, {"group_id": GROUP, "generation_id": leader.generation_id, "member_id": other,
                      "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                      "assignments": []}, 3)
    sync(h, member_id, leader.generation_id, [(member_id, both), (other, both)])
    answer = beat(h, "m1", 0, join=True)
    assert answer.error_code == ErrorCode.group_id_not_found
    assert "two members were assigned one partition" in answer.error_message
    assert groups_listed(h) == [(GROUP, "classic", "Stable")]


def test_the_consumer_member_whose_session_expires_last_downgrades_the_group_on_the_tick():
    h = harness()
    classic_id, generation = classic_group(h)
    beat(h, "m1", 0, join=True)                          # m1's session: group.consumer.session.timeout.ms, 45 s
    h.tick(20_000)
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress
    h.tick(20_000)
    assert heartbeat(h, classic_id, generation) == ErrorCode.rebalance_in_progress
    assert h.broker.consumer_groups.holds(GROUP) is not None
    h.tick(6_000)                                        # m1 is fenced: only the classic member stays
    assert h.broker.consumer_groups.holds(GROUP) is None
    assert groups_listed(h) == [(GROUP, "classic", "PreparingRebalance")]
    assert list(h.broker.groups.groups[GROUP].members) == [classic_id]


def test_a_classic_group_in_its_first_rebalance_is_upgraded_with_members_that_own_nothing():
    """Seed 6961002 of --classic-members: a classic group whose first rebalance had not completed
    (no protocol chosen yet) was refused as malformed, and the consumer's heartbeat failed."""
    h = harness()
    first = join(h, "")
    h.request(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": first.member_id, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": subscription()}], "reason": None}, 2)
    assert groups_listed(h) == [(GROUP, "classic", "PreparingRebalance")]
    answer = beat(h, "m1", 0, join=True)
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.none, 1)
    waiting = h.response(11, 7, 2)                       # the classic member's JoinGroup is told to join again
    assert waiting.error_code == ErrorCode.rebalance_in_progress
    rejoined = join(h, first.member_id)
    assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.none, 1)
    mine = partitions_in(sync(h, first.member_id, 1).assignment)
    theirs = assigned(answer)                            # free partitions: m1 had its share at once
    assert sorted(mine + theirs) == [0, 1, 2, 3] and len(mine) == 2


def test_the_migration_policy_is_taken_in_any_case_and_an_unknown_one_is_refused():
    h = harness(**{"group.consumer.migration.policy": "UPGRADE"})      # Kafka's enum, upper case
    core = h.broker.consumer_groups.core
    assert (core.upgrade_enabled, core.downgrade_enabled) == (True, False)
    with pytest.raises(ConfigError, match="group.consumer.migration.policy"):
        harness(**{"group.consumer.migration.policy": "sideways"})


def test_a_classic_member_joining_a_consumer_group_has_its_session_checked_as_in_a_classic_group():
    h = harness()
    beat(h, "m1", 0, join=True)
    answer = h.call(11, 7, {"group_id": GROUP, "session_timeout": 1_000, "rebalance_timeout": 30_000,
                            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": [{"name": "range", "metadata": subscription()}], "reason": None}, 2)
    assert answer.error_code == ErrorCode.invalid_session_timeout     # below group.min.session.timeout.ms


def test_random_subscriptions_and_assignments_never_break_the_coordinator():
    """Members offering random bytes as their subscription, to a consumer group and to a classic
    group being upgraded: each JoinGroup is answered (an unreadable subscription:
    INCONSISTENT_GROUP_PROTOCOL; an upgrade from unreadable metadata: GROUP_ID_NOT_FOUND) and the
    group goes on serving its member of the consumer protocol."""
    import random

    rng = random.Random(848)
    h = harness()
    beat(h, "m1", 0, join=True)
    valid = subscription([0, 1])
    for n in range(300):
        cut = rng.randrange(len(valid) + 1)
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        metadata = rng.choice([garbage, valid[:cut], valid[:cut] + garbage, valid + garbage])
        answer = h.call(11, 7, {"group_id": GROUP, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                "member_id": f"fuzz-{n}", "group_instance_id": None, "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": metadata}], "reason": None}, 3)
        assert answer.error_code in (ErrorCode.none, ErrorCode.inconsistent_group_protocol), answer
    assert beat(h, "m1", 1, owned=[0, 1, 2, 3]).error_code in (ErrorCode.none, ErrorCode.fenced_member_epoch)
    # a classic group whose members' metadata is random is not upgraded, and stays classic
    other = "g-classic"
    h.request(11, 7, {"group_id": other, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
                      "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": b"\xff\xff\x00"}], "reason": None}, 4)
    first = h.response(11, 7, 4)
    h.request(11, 7, {"group_id": other, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                      "member_id": first.member_id, "group_instance_id": None, "protocol_type": "consumer",
                      "protocols": [{"name": "range", "metadata": b"\xff\xff\x00"}], "reason": None}, 4)
    h.tick(3_000)
    joined = h.response(11, 7, 4)
    h.call(14, 5, {"group_id": other, "generation_id": joined.generation_id, "member_id": first.member_id,
                   "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                   "assignments": [{"member_id": first.member_id, "assignment": b"\x00\x01\xff"}]}, 4)
    body = {"group_id": other, "member_id": "m9", "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}
    refused = h.call(68, 1, body)
    assert refused.error_code == ErrorCode.group_id_not_found, refused
    assert (other, "classic", "Stable") in groups_listed(h)
