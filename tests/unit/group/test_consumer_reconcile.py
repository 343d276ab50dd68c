"""One member's step towards its target assignment (Kafka's CurrentAssignmentBuilder): it gives up
partitions before it moves to the target's epoch, and is given a partition only once no other
member owns it."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.group.consumer.model import ConsumerGroupError, ConsumerGroupMember, MemberState
from strandline.group.consumer.reconcile import reconcile

T = uuid.UUID(int=7)


def nobody(topic_id, partition):
    return -1


def member(epoch, assigned, state=MemberState.STABLE, revoking=()):
    return ConsumerGroupMember("a", member_epoch=epoch, previous_member_epoch=epoch - 1, state=state,
                               assigned={T: frozenset(assigned)} if assigned else {},
                               pending_revocation={T: frozenset(revoking)} if revoking else {})


def test_a_reconciled_member_stays_as_it_is():
    m = member(3, {0})
    assert reconcile(m, 3, {T: frozenset({0, 1})}, nobody, [(T, [0])]) is m


def test_a_member_gives_up_partitions_at_its_epoch_before_it_moves_on():
    m = member(1, {0, 1})
    step = reconcile(m, 2, {T: frozenset({0})}, nobody, [(T, [0, 1])])
    assert (step.state, step.member_epoch, step.previous_member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 1, 1)
    assert step.assigned == {T: frozenset({0})} and step.pending_revocation == {T: frozenset({1})}
    # still owning partition 1 (or not saying what it owns): no step
    assert reconcile(step, 2, {T: frozenset({0})}, nobody, [(T, [0, 1])]) is step
    assert reconcile(step, 2, {T: frozenset({0})}, nobody, None) is step
    done = reconcile(step, 2, {T: frozenset({0})}, nobody, [(T, [0])])
    assert (done.state, done.member_epoch, done.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    assert done.assigned == {T: frozenset({0})} and done.pending_revocation == {}


def test_a_member_that_already_gave_up_what_it_loses_moves_on_at_once():
    step = reconcile(member(1, {0, 1}), 2, {T: frozenset({0})}, nobody, [(T, [0])])
    assert (step.state, step.member_epoch, step.assigned) == (MemberState.STABLE, 2, {T: frozenset({0})})


def test_a_partition_another_member_owns_is_not_given_until_it_is_released():
    owned_by_b = {(T, 1): 4}

    def owner(topic_id, partition):
        return owned_by_b.get((topic_id, partition), -1)

    step = reconcile(member(4, {0}), 5, {T: frozenset({0, 1, 2})}, owner, [(T, [0])])
    assert (step.state, step.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 5)
    assert step.assigned == {T: frozenset({0, 2})}
    again = reconcile(step, 5, {T: frozenset({0, 1, 2})}, owner, [(T, [0, 2])])
    assert (again.state, again.member_epoch, again.assigned) == (step.state, 5, step.assigned)
    owned_by_b.clear()
    done = reconcile(step, 5, {T: frozenset({0, 1, 2})}, owner, [(T, [0, 2])])
    assert (done.state, done.member_epoch, done.assigned) == (MemberState.STABLE, 5, {T: frozenset({0, 1, 2})})


def test_a_member_in_a_state_this_coordinator_does_not_know_must_start_over():
    m = member(2, {0}, state=MemberState.of(99))
    assert m.state is MemberState.UNKNOWN
    with pytest.raises(ConsumerGroupError) as e:
        reconcile(m, 3, {T: frozenset({0})}, nobody, [(T, [0])])
    assert e.value.error is ErrorCode.fenced_member_epoch
    again = reconcile(m, 3, {T: frozenset({0})}, nobody, [])
    assert (again.state, again.member_epoch) == (MemberState.STABLE, 3)
