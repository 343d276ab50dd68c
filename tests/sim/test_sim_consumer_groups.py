"""The explorer with consumers of the consumer group protocol (KIP-848, ``--consumer-groups``):
three members of one group heartbeat through the faults, leave and stall now and then; no
partition is owned by two members at one epoch, and the group settles once the faults heal."""

from __future__ import annotations

import collections

import pytest

from strandline.sim.explore import CONFIGS, Explorer
from strandline.sim.group_workload import GroupChecker
from strandline.sim.menu import run_options


@pytest.mark.parametrize("seed", [6800016, 6800030])
def test_a_consumer_group_through_the_whole_menu(seed):
    """6800016 stopped a broker: a fencing the log refused at once stayed in the coordinator's
    memory, and the next coordinator replayed a partition owned twice (BrokenInvariant);
    6800030's heartbeat was answered REQUEST_TIMED_OUT, which Kafka answers
    COORDINATOR_NOT_AVAILABLE."""
    explorer = Explorer(seed, CONFIGS["safe"], **run_options(), load="mixed", consumer_groups=True)
    result = explorer.run()
    assert result.ok, f"seed {seed}: {result.all_violations}\n" + "\n".join(result.trace)
    assert explorer.group is not None and explorer.group.checker.changes >= 5


def test_a_member_whose_answer_went_unheard_asks_for_its_whole_assignment_even_after_another_answer():
    """6963642 (beside a share group): a member paused while its heartbeat's answer, which gave it
    partition 3, was on its way; running again, it heartbeated before that answer came, ignored
    it as a paused process's, and marked its next request full; but the answer to the request sent
    meanwhile (not a full one, no assignment in it) cleared the mark, and partition 3 stayed with
    nobody for good. Only a full request's answer clears it now, as Kafka's client sends every
    field again after a failure until a request carries them."""
    explorer = Explorer(6963642, CONFIGS["safe"], **run_options(), load="mixed", consumer_groups=True,
                        share_groups=True)
    result = explorer.run()
    assert result.ok, f"{result.all_violations}\n" + "\n".join(result.trace)


@pytest.mark.parametrize("seed, mix, conversions", [(6960002, "g1 of the consumer protocol, c1, c2", 2),
                                                    (6960001, "g1, g2, g3 of the consumer protocol, c1", 0),
                                                    (6961006, "g1 of the consumer protocol, c1, c2", 1),
                                                    (6961028, "g1 of the consumer protocol, c1, c2", 1)])
def test_classic_members_in_the_consumer_group_through_the_whole_menu(seed, mix, conversions):
    """``--classic-members``: with one member of the consumer protocol and two classic ones, the
    group turns classic each time the one leaves and back when it returns (Kafka 4.x's online
    downgrade and upgrade); with three and one, the classic member is served inside the consumer
    group. No partition has two owners at one epoch (a classic member's generation is its member
    epoch), and the group settles. 6961006 kept a member whose leaving the log refused in the group
    for good (no session); in 6961028 a classic member paused while its SyncGroup's answer came, and
    never heard of the partition given to it (it now joins again, as a client whose request timed
    out does)."""
    explorer = Explorer(seed, CONFIGS["safe"], **run_options(), load="mixed", classic_members=True)
    explorer.trace = collections.deque()                  # the whole trace, to count the conversions
    result = explorer.run()
    assert result.ok, f"seed {seed}: {result.all_violations}\n" + "\n".join(result.trace)
    trace = list(explorer.trace)
    assert any(f"the group: {mix} of the classic protocol" in line for line in trace)
    downgrades = sum("Converted the consumer group to a classic group" in line for line in trace)
    upgrades = sum("Converted the classic group to a consumer group" in line for line in trace)
    assert downgrades >= conversions and upgrades >= conversions, (downgrades, upgrades)
    assert explorer.group is not None and explorer.group.checker.changes >= 5


def test_the_checker_fails_two_owners_of_a_partition_at_one_epoch_and_allows_a_zombie():
    failures: list[tuple[str, str]] = []
    checker = GroupChecker(lambda invariant, detail: failures.append((invariant, detail)), lambda line: None)
    checker.owns("a", 5, frozenset({0, 1}))
    checker.owns("b", 6, frozenset({1}))                  # a zombie still believes it owns 1, at 5
    assert failures == []
    checker.owns("c", 6, frozenset({1, 2}))
    assert failures == [("no partition has two owners of one epoch",
                         "members b and c both own partitions [1] at epoch 6")]
