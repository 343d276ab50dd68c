"""A consumer group as its records make it: the state it is in, and the invariant replay keeps (no
partition given to a member while another owns it)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strandline.errors import BrokenInvariant
from strandline.group.consumer import records as rec
from strandline.group.consumer.group import ConsumerGroup, ConsumerGroupState, rebuild
from strandline.group.consumer.model import MemberState
from tests.unit.group.test_state_tables import _state_changes

T = uuid.UUID(int=3)


def current(member_id, epoch, assigned, state=MemberState.STABLE, revoking=()):
    return (rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, "g", member_id),
            rec.CurrentAssignmentValue(epoch, epoch - 1, state, {T: frozenset(assigned)} if assigned else {},
                                       {T: frozenset(revoking)} if revoking else {}))


def subscribed(member_id):
    return (rec.Key(rec.MEMBER_METADATA, "g", member_id),
            rec.MemberMetadataValue(None, None, "c", "h", ("t",), None, 1000, None))


def epochs(group_epoch, target_epoch):
    return [(rec.Key(rec.GROUP_METADATA, "g"), rec.GroupEpochValue(group_epoch)),
            (rec.Key(rec.TARGET_ASSIGNMENT_METADATA, "g"), rec.TargetAssignmentEpochValue(target_epoch))]


def test_the_state_follows_the_epochs_and_the_members():
    group = ConsumerGroup("g")
    assert group.state is ConsumerGroupState.EMPTY
    for record in [subscribed("a"), *epochs(2, 1), current("a", 1, {0})]:
        group.replay(record)
    assert group.state is ConsumerGroupState.ASSIGNING
    group.replay(epochs(2, 2)[1])
    assert group.state is ConsumerGroupState.RECONCILING
    group.replay(current("a", 2, {0}))
    assert group.state is ConsumerGroupState.STABLE
    for key_type in (rec.CURRENT_MEMBER_ASSIGNMENT, rec.TARGET_ASSIGNMENT_MEMBER, rec.MEMBER_METADATA):
        group.replay((rec.Key(key_type, "g", "a"), None))
    assert group.state is ConsumerGroupState.EMPTY and group.owners == {}
    group.replay((rec.Key(rec.TARGET_ASSIGNMENT_METADATA, "g"), None))
    group.replay((rec.Key(rec.GROUP_METADATA, "g"), None))
    assert group.state is ConsumerGroupState.DEAD


def test_a_partition_owned_by_a_member_cannot_be_given_to_another():
    group = rebuild("g", [subscribed("a"), subscribed("b"), current("a", 3, {0, 1}, MemberState.UNREVOKED_PARTITIONS,
                                                                          revoking={2})])
    assert group.owner_epoch(T, 2) == 3 and group.owner_epoch(T, 5) == -1
    with pytest.raises(BrokenInvariant, match=r"partition .*-2 given to member b at epoch 4 is still owned by member a"):
        group.replay(current("b", 4, {2}))
    group.replay(current("a", 4, {0, 1}))                 # a gave it up
    group.replay(current("b", 4, {2}))
    assert group.owners[(T, 2)] == ("b", 4)


def test_a_group_with_members_cannot_be_deleted():
    group = rebuild("g", [subscribed("a")])
    with pytest.raises(BrokenInvariant):
        group.replay((rec.Key(rec.GROUP_METADATA, "g"), None))


def test_a_members_state_changes_only_in_reconciliation_replay_and_a_restart():
    """As for the classic group's states: a member's state is set in three places only, the
    reconciliation step, the replay of its record, and a member starting over from epoch 0."""
    package = Path(__file__).resolve().parents[3] / "src" / "strandline" / "group" / "consumer"
    changes = {(path.name, function) for path in sorted(package.glob("*.py")) for function, _ in _state_changes(path)}
    assert changes == {("reconcile.py", "_with"), ("group.py", "replay"), ("heartbeat.py", "_restart")}
