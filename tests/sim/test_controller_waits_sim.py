"""The controller's waits are named: each ZooKeeper answer, broker response or retry it waits for
is an object whose ``repr`` says what it waits for, so that the outbox can list what is pending
(``Outbox.pending``) and ``strandline sim replay`` can print it with a violation's trace."""

from __future__ import annotations

from strandline.core.outbox import Outbox, describe_wait
from strandline.sim.cluster import SimCluster
from strandline.sim.explore import Explorer
from strandline.sim.configs import CONFIGS
from tests.sim.test_replication_sim import create


def pending(c: SimCluster, broker_id: int) -> list[str]:
    core = c.brokers[broker_id].core
    assert core is not None
    return core.outbox.pending()


def test_an_election_waits_for_named_reads_then_a_named_write() -> None:
    """CTL-6: broker 2 taken for dead, partition t-0 is read, decided and written; each step's
    wait says what it is, and so does the write of the ISR its leader then proposes."""
    c = SimCluster((1, 2, 3))
    create(c, "t", [1, 2, 3])
    cid = c.controller_id
    node = c.brokers[cid]
    controller = node.core.controller
    ctx = controller.ctx
    c.apply(node, controller.elections.elect(ctx, [("t", 0)], {2}, c.now))
    seen = []
    while (action := c.scheduler.pop_due()) is not None:
        seen += [w for w in pending(c, cid) if w.startswith("zk Awaiting") and w not in seen]
        action()
    assert seen == [
        "zk AwaitingPartitionStateReads(keys=[('t', 0)], dead=[2], then=None, decide=None, retry=False; "
        "controller epoch 1)",
        "zk AwaitingLeaderAndIsrWrite(partitions=[('t', 0)], then=RunsWritten(left=1, then=None); "
        "controller epoch 1)",
        # broker 2, alive after all, fetches again: its leader proposes it back (AlterIsr)
        "zk AwaitingAlterIsrWrite(key=('t', 0); controller epoch 1)"], seen
    assert ctx.topics["t"].states[0].isr == (1, 3, 2)
    assert not [w for w in pending(c, cid) if "Awaiting" in w]


def test_a_broker_running_for_controller_waits_for_the_epoch_then_the_election() -> None:
    c = SimCluster((1, 2, 3))
    cid = c.controller_id
    core = c.brokers[cid].core
    assert core is not None
    core.controller.resign("a test")
    core.controller.on_controller_changed(None, c.now)
    assert "zk AwaitingEpochToRun()" in core.outbox.pending()


def test_a_function_is_described_by_its_name_and_a_timer_by_its_due_time() -> None:
    outbox = Outbox({"request.timeout.ms": 1000})

    def retry(now_ms: int) -> list:
        return []

    outbox.after(1234, retry)
    assert outbox.pending() == [f"timer at 1234 {retry.__qualname__}"]
    assert describe_wait(outbox.pending) == "Outbox.pending"


def test_the_explorer_lists_what_each_broker_waits_for() -> None:
    explorer = Explorer(7, CONFIGS["safe"], duration_ms=1000)
    explorer._setup()
    explorer.sim.advance(50)
    waits = explorer.pending_waits()
    # the followers wait for their fetches' answers
    assert any("ReplicaFetcher" in line for line in waits), waits
    assert all(line.startswith("broker ") for line in waits), waits
