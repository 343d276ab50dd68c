"""Share groups' members (KIP-932): ShareGroupHeartbeat's joins, heartbeats and leaves with Kafka's
errors, the group epoch, the simple assignor (every partition read, members spread by a hash of
their ids, nothing taken from a member that stays), and fencing after the session timeout."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from strandline.group.share.assignor import assign, java_string_hash
from strandline.group.share.group import ShareGroup, ShareGroupConfig, ShareHeartbeat

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TOPICS = {"t": (T, 4), "u": (U, 2)}
CONFIG = ShareGroupConfig()


def beat(group: ShareGroup, member: str, epoch: int, topics=("t",), now_ms: int = 0, known=TOPICS):
    return group.heartbeat(ShareHeartbeat("g", member, epoch, None if topics is None else tuple(topics)),
                           known, CONFIG, now_ms)


def test_java_string_hash_is_javas():
    # values of "...".hashCode() in Java
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("é") == 233


def test_every_partition_is_read_and_a_second_member_shares_without_taking_anything():
    g = ShareGroup("g")
    a = beat(g, "a", 0)
    assert (a.error_code, a.member_epoch, a.heartbeat_interval_ms) == (ErrorCode.none, 1, 5000)
    assert a.assignment == {T: frozenset({0, 1, 2, 3})}
    b = beat(g, "b", 0)
    assert b.member_epoch == 2 and len(b.assignment[T]) == 1          # the partition its id hashes to
    again = beat(g, "a", 1, topics=None)
    assert again.member_epoch == 2 and again.assignment is None         # a keeps all four: unchanged
    assert beat(g, "a", 2, topics=None).assignment is None


def test_partitions_nobody_reads_are_dealt_round_robin_and_a_member_leaving_frees_its_own():
    split = assign({"a": frozenset({T}), "b": frozenset({T})}, {T: 4}, {})
    assert set(split["a"][T]) | set(split["b"][T]) == {0, 1, 2, 3}
    g = ShareGroup("g")
    beat(g, "a", 0)
    beat(g, "b", 0)
    assert beat(g, "a", 1, topics=None).member_epoch == 2
    left = beat(g, "a", 1, topics=None)            # a late copy: a's epoch is 2 now
    assert left.error_code is ErrorCode.fenced_member_epoch and "smaller member epoch (1)" in left.error_message
    bye = beat(g, "a", -1, topics=None)
    assert (bye.error_code, bye.member_epoch) == (ErrorCode.none, -1)
    b = beat(g, "b", 2, topics=None)
    assert b.member_epoch == 3 and b.assignment == {T: frozenset({0, 1, 2, 3})}


def test_a_subscription_change_and_new_partitions_bump_the_epoch_and_reassign():
    g = ShareGroup("g")
    beat(g, "a", 0)
    both = beat(g, "a", 1, topics=("t", "u"))
    assert both.member_epoch == 2 and both.assignment == {T: frozenset(range(4)), U: frozenset(range(2))}
    only_u = beat(g, "a", 2, topics=("u",))
    assert only_u.assignment == {U: frozenset(range(2))}                 # t's partitions go with t
    grown = beat(g, "a", 3, topics=None, known={"t": (T, 4), "u": (U, 3)})
    assert grown.member_epoch == 4 and grown.assignment == {U: frozenset(range(3))}
    gone = beat(g, "a", 4, topics=None, known={"t": (T, 4)})
    assert gone.member_epoch == 5 and gone.assignment == {}


def test_kafkas_errors_for_bad_heartbeats():
    g = ShareGroup("g")
    assert beat(g, "", 0).error_code is ErrorCode.invalid_request
    assert beat(g, "a", -2).error_message == "MemberEpoch is invalid."
    assert beat(g, "a", 0, topics=()).error_message == "SubscribedTopicNames must be set in first request."
    assert beat(g, "a", 3, topics=None).error_code is ErrorCode.unknown_member_id
    assert beat(g, "a", -1, topics=None).error_code is ErrorCode.unknown_member_id
    beat(g, "a", 0)
    assert beat(g, "a", 7, topics=None).error_code is ErrorCode.fenced_member_epoch
    small = ShareGroupConfig(max_size=1)
    full = g.heartbeat(ShareHeartbeat("g", "b", 0, ("t",)), TOPICS, small, 0)
    assert full.error_code is ErrorCode.group_max_size_reached and "b" not in g.members
    assert g.group_epoch == 1


def test_a_silent_member_is_fenced_after_the_session_timeout():
    g = ShareGroup("g")
    beat(g, "a", 0, now_ms=0)
    beat(g, "b", 0, now_ms=10_000)
    assert g.next_deadline_ms() == 45_000
    assert g.expire(TOPICS, 44_999) == []
    assert g.expire(TOPICS, 45_000) == ["a"]
    assert g.group_epoch == 3 and g.targets == {"b": {T: frozenset(range(4))}}
    assert beat(g, "a", 2, topics=None).error_code is ErrorCode.unknown_member_id
