"""CTL-11: the election rules on a state whose ISR still names replicas a reassignment removed
(the move's end narrows the assignment before its own election writes). The state a rule leaves
or writes names only assigned replicas, so the brokers are never sent an ISR outside their
replicas (sim explore seed 1220026 of --config txn --reassign)."""

from __future__ import annotations

from types import SimpleNamespace

from strandline.controller.elections import PartitionElections
from strandline.coordination.metadata import LeaderAndIsr


class _Config(SimpleNamespace):
    """The broker keys the rules read (eligible leader replicas off), and ``topic_value``."""

    def __getitem__(self, key: str):
        return {"eligible.leader.replicas.enable": False, "inter.broker.protocol.version": "2.8"}[key]


def rules(unclean: bool = False):
    controller = SimpleNamespace(config=_Config(topic_value=lambda configs, key: unclean))
    ctx = SimpleNamespace(shutting_down=set(), unclean_shutdown=set(), epoch=7)
    elections = PartitionElections(controller)
    return elections.offline_rule(ctx), elections.preferred_rule(ctx)


def topic(*replicas: int):
    return SimpleNamespace(assignment={0: replicas}, configs={})


def test_ctl_11_a_rule_with_nothing_to_change_writes_the_isr_without_the_removed_replicas():
    offline, preferred = rules()
    current = LeaderAndIsr(4, 6, (3, 2, 4), 7, 12)
    for rule in (offline, preferred):              # preferred replica 1 is not in the ISR
        state, unclean = rule(topic(1, 4, 2), 0, current, {1, 2, 3, 4}, set())
        assert (state.leader, state.leader_epoch, state.isr, unclean) == (4, 7, (2, 4), False)


def test_ctl_11_a_leader_no_longer_assigned_gives_way_to_the_next_isr_member():
    offline, preferred = rules()
    current = LeaderAndIsr(1, 5, (1, 2, 3), 7, 3)  # leader 1 was moved away; preferred 2 is down
    for rule in (offline, preferred):
        state, _ = rule(topic(2, 3), 0, current, {1, 3}, set())
        assert (state.leader, state.isr) == (3, (3,))


def test_a_state_within_the_assignment_is_left_as_it_is():
    offline, preferred = rules()
    current = LeaderAndIsr(2, 5, (2, 3), 7, 3)
    assert offline(topic(2, 3), 0, current, {2, 3}, set()) is None
    assert preferred(topic(2, 3), 0, current, {2, 3}, set()) is None
