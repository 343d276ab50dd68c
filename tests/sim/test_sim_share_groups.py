"""The explorer with consumers of a share group (KIP-932, ``--share-groups``): three members of
one share group fetch and acknowledge through the faults, leave and stall now and then; no record
is delivered past the limit or settled twice, and every record is settled (or archived at the
limit) once the faults heal. The share-partitions' state goes through the share coordinator
(``__share_group_state``), whose replicas must agree at the end."""

from __future__ import annotations

import pytest

from strandline.sim.explore import CONFIGS, Explorer
from strandline.sim.menu import run_options
from strandline.sim.share_workload import ACCEPT, LIMIT, RELEASE, ShareChecker


@pytest.mark.parametrize("seed,consumer_groups", [(6000001, False), (6000114, True), (6950344, True), (6950235, True),
                                                  (6953131, True), (6953148, True), (6953327, True),
                                                  (6954108, True), (6954938, True), (6962460, True)])
def test_a_share_group_through_the_whole_menu(seed, consumer_groups):
    """6000001 handed a record out a fourth time past the limit of three: it was locked at its last
    delivery when its leader changed, written as available, and the next leader handed it out
    again; 6000114's members dropped their acknowledgements whenever a heartbeat came between a
    fetch and its answer (the workload's own bug, which the drain's deadline caught), beside a
    consumer group of the KIP-848 protocol; 6950344 had a record accepted twice: the write of its
    first acceptance failed at once (no share coordinator known), before the acknowledgement's
    wait began, and the retry's write, without it, answered it as kept; in 6950235 a broker the
    controller could not reach when it moved a partition away still believed it led it, and the
    members fetched nothing from it until the run ended. With the share group kept in
    __consumer_offsets: in 6953131 a coordinator failover left partition 1 read by nobody (a write
    that failed, and later ones holding only their own deltas), and in 6953148 the members' session
    expiries were written as the replicas were compared (members now leave as they close, and in
    6954108, whose leave reached a coordinator that had moved, the check waits for the expiry); 6953327
    is the share coordinator's read that waited for good for a commit it could not see; in 6954938 a
    DeleteRecords moved a leader's log start (and the share-partition's start) past records that a
    later leader's log still held, which the checker took for records skipped; in 6962460 a leader's
    read was answered from a state whose append had timed out, the share coordinator moved and lost
    it, and the next leader, finding no state, started past records never settled."""
    explorer = Explorer(seed, CONFIGS["safe"], **run_options(), load="mixed", share_groups=True,
                        consumer_groups=consumer_groups)
    result = explorer.run()
    assert result.ok, f"seed {seed}: {result.all_violations}\n" + "\n".join(result.trace)
    assert explorer.share is not None and len(explorer.share.checker.settled) >= 100


def test_records_below_a_delete_records_whose_replica_left_are_not_taken_for_records_skipped():
    """6964119 (classic members beside the share group): a DeleteRecords moved the leader's log
    start past a record handed out twice, and the share-partition's start with it; a reassignment
    then deleted that replica's log, and the replicas left had never moved their log start. The
    checker, looking at the replicas' log starts alone, took the record for one skipped; it now
    also looks no lower than where DeleteRecords was asked."""
    explorer = Explorer(6964119, CONFIGS["safe"], **run_options(), load="mixed", share_groups=True,
                        classic_members=True)
    result = explorer.run()
    assert result.ok, f"{result.all_violations}\n" + "\n".join(result.trace)
    assert explorer.invariants.deleted[2] > 0


def test_the_checker_fails_a_record_past_the_limit_or_settled_twice_and_one_left_unsettled():
    failures: list[tuple[str, str]] = []
    checker = ShareChecker(lambda invariant, detail: failures.append((invariant, detail)), lambda line: None)
    checker.delivered("a", 0, 10, 1)
    checker.acknowledged("a", 0, 10, RELEASE, 1)          # released before the limit: not settled
    checker.delivered("b", 0, 10, 2)
    checker.acknowledged("b", 0, 10, ACCEPT, 2)
    checker.delivered("a", 0, 11, 1)
    assert failures == []
    nothing: set[int] = set()
    assert checker.unsettled(1, lambda p: (0, 13), lambda p: nothing) == \
        ["partition 0: 2 of offsets 10-12 unsettled, e.g. [11, 12]"]
    # 11 handed out unseen up to the limit (fetches whose answers were lost): the committed
    # state says it was archived; 12 was never handed out, and nothing says otherwise
    assert checker.unsettled(1, lambda p: (0, 13), lambda p: {11}) == \
        ["partition 0: 1 of offsets 10-12 unsettled, e.g. [12]"]
    checker.acknowledged("c", 0, 10, ACCEPT, 3)
    checker.delivered("c", 0, 12, LIMIT + 1)
    assert [f[0] for f in failures] == ["no record is settled twice", "no record is delivered past the limit"]
