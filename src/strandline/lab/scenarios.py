"""The catalogue: the seed documents' partition scenarios (NET-*) and loss cases (LOSS-*) as runs.

Each scenario is a function of a :class:`Run` that injects its faults while the workload writes;
the lab heals, waits until the replicas agree, reads every log and audits the history. The
scenario states what SPEC.md expects: ``loss`` (acknowledged writes must be lost: the run shows
it) or ``no-loss`` (not one acknowledged write may be lost, and no replica may differ below the
high watermark).

Timeouts are shortened so a run takes seconds, not minutes (``zookeeper.session.timeout.ms`` 4 s
instead of 18 s, ``replica.lag.time.max.ms`` 2 s instead of 30 s); every other key keeps Kafka's
default. The values used are written to the run's ``run.json``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable

from strandline.errors import StrandlineError
from strandline.lab.network import CLIENTS, ZOOKEEPER

SESSION_MS = 4000
LAG_MS = 2000
LAB_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.socket.timeout.ms": "3000",
    "controller.socket.timeout.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "500",
    "replica.high.watermark.checkpoint.interval.ms": "200",   # the sampler reads followers' HW there
}


class LabError(StrandlineError):
    """A run that could not be carried out as written (the cut did not take effect, a wait timed out)."""


@dataclass
class Scenario:
    name: str
    summary: str                     # one line, from the seeds
    expect: str                      # "loss" | "no-loss"
    expectation: str                 # how the verdict line describes the expected outcome
    drive: Callable[["Run"], None]
    acks: str = "all"
    idempotence: bool = True
    min_isr: int = 2
    unclean: bool = False
    needs_network: bool = False
    broker_config: dict[str, str] = field(default_factory=dict)
    topic_config: dict[str, str] = field(default_factory=dict)
    producer_config: dict = field(default_factory=dict)
    bound: str = ""                  # what bounds the loss, printed after the count
    check: Callable[[dict, dict, list], str | None] | None = None
    """``check(run info, audit result, sampled views)``: why the outcome is not the one the seed
    describes, beyond the count (e.g. a loss that outlasted its bound), or None."""


class Run:
    """What a scenario's ``drive`` works with: the cluster, the network, the workload, the clock."""

    def __init__(self, cluster, network, workload, sampler, topic: str, rng: random.Random) -> None:
        self.cluster = cluster
        self.network = network
        self.workload = workload
        self.sampler = sampler
        self.topic = topic
        self.rng = rng
        self.faults: list[dict] = []      # {"label", "start_ms", "end_ms", "brokers"}
        self.notes: list[str] = []

    # -- the clock and waiting ------------------------------------------------------------------------

    @staticmethod
    def now_ms() -> float:
        return time.time() * 1000.0

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise LabError(f"{what}: not seen within {timeout_s:.0f} s")
            time.sleep(0.1)

    def hold(self, seconds: float) -> None:
        """Let the workload run for ``seconds`` with the current faults in place."""
        time.sleep(seconds)

    def begin(self, label: str, brokers: list[int]) -> dict:
        fault = {"label": label, "start_ms": self.now_ms(), "end_ms": None, "brokers": brokers}
        self.faults.append(fault)
        return fault

    def end(self, fault: dict) -> None:
        fault["end_ms"] = self.now_ms()

    # -- what the brokers say ------------------------------------------------------------------------

    def view(self, broker: int, partition: int = 0):
        return self.sampler.latest().get((broker, partition))

    def leader(self, partition: int = 0, among: list[int] | None = None) -> int:
        """The leader most live brokers report (-1 if none)."""
        votes: dict[int, int] = {}
        for b in among or list(self.cluster.brokers):
            v = self.view(b, partition)
            if v is not None and v.state == "up" and v.leader >= 0:
                votes[v.leader] = votes.get(v.leader, 0) + 1
        return max(votes, key=votes.get) if votes else -1

    def isr(self, broker: int, partition: int = 0) -> set[int]:
        v = self.view(broker, partition)
        return {int(x) for x in v.isr.split(",") if x} if v is not None and v.isr else set()

    def controller(self) -> int:
        votes: dict[int, int] = {}
        for b in self.cluster.brokers:
            v = self.view(b)
            if v is not None and v.state == "up" and v.controller >= 0:
                votes[v.controller] = votes.get(v.controller, 0) + 1
        return max(votes, key=votes.get) if votes else -1

    def others(self, *brokers: int) -> list[int]:
        return [b for b in self.cluster.brokers if b not in brokers]

    def wait_isr(self, leader: int, want: set[int], timeout_s: float = 30.0, partition: int = 0) -> None:
        """Until ``leader`` reports exactly ``want`` as the ISR (the check that a fault took effect)."""
        self.wait_for(f"ISR {sorted(want)} on broker {leader}",
                      lambda: self.isr(leader, partition) == want and self.view(leader, partition).leader == leader,
                      timeout_s)

    def wait_new_leader(self, old: int, timeout_s: float = 30.0, partition: int = 0) -> int:
        """Until a broker other than ``old`` leads the partition, as it says itself; that broker."""
        found: list[int] = []

        def elected() -> bool:
            views = self.sampler.latest()
            found[:] = [b for b in self.others(old) if (v := views.get((b, partition))) is not None
                        and v.state == "up" and v.leader == b]
            return bool(found)
        self.wait_for(f"a leader other than broker {old}", elected, timeout_s)
        return found[0]

    def wait_acks(self, count: int = 1, timeout_s: float = 30.0) -> None:
        """Until the workload has ``count`` more acknowledgements (writes go on)."""
        since = self.now_ms()
        self.wait_for(f"{count} new acknowledged writes", lambda: self.workload.acked_since(since) >= count, timeout_s)


# -- the scenarios ------------------------------------------------------------------------------------


def total_loss(info: dict) -> str | None:
    """LOSS-6: not one write acknowledged before the leader lost its disk may survive."""
    import pyarrow.parquet as pq
    from pathlib import Path

    run_dir = Path(info["run_dir"])
    lost_at = next(f["start_ms"] for f in info["faults"] if "disk" in f["label"])
    acked = {r["value"] for r in pq.read_table(run_dir / "ops.parquet").to_pylist()
             if r["type"] == "ok" and r["time_ms"] < lost_at}
    final = {r["partition"]: r for r in pq.read_table(run_dir / "final.parquet").to_pylist()}
    kept = {r["value"] for r in pq.read_table(run_dir / "records.parquet").to_pylist()
            if r["partition"] in final and r["broker"] == final[r["partition"]]["leader"]
            and r["offset"] < final[r["partition"]]["high_watermark"]}
    survivors = len(acked & kept)
    if not acked:
        return "nothing was acknowledged before the disk was lost"
    return f"{survivors} of {len(acked)} writes acknowledged before the disk loss survived" if survivors else None



def split_brain_bound(info: dict, result: dict, views: list) -> str | None:
    """NET-4 / LOSS-3: the deposed leader acknowledges only until its first ISR change fails, which
    it attempts once the followers have not fetched for replica.lag.time.max.ms (its check runs
    every half of that). Every lost write must have been acknowledged within that bound of the new
    leader's election (plus the sampler's period)."""
    if not result["lost"]:
        return None
    first_leader = next((v for v in views if v["state"] == "up" and v["leader"] >= 0), None)
    if first_leader is None:
        return "no leader was ever sampled"
    old = first_leader["leader"]
    elected = next((v["time_ms"] for v in views if v["state"] == "up" and v["leader"] == v["broker"] != old), None)
    if elected is None:
        return "no new leader was sampled"
    lag = int(info["broker_config"]["replica.lag.time.max.ms"])
    bound_ms = 1.5 * lag + 1000
    late = result["lost_acked_last_ms"] - elected
    if late > bound_ms:
        return (f"the deposed leader acknowledged lost writes until {late / 1000:.1f} s after the new leader's "
                f"election, beyond replica.lag.time.max.ms ({lag} ms) and its check")
    return None



def net_1(run: Run) -> None:
    leader = run.leader()
    follower = run.others(leader)[0]
    fault = run.begin(f"broker {follower} cut from leader {leader}", [follower])
    run.network.cut_both(leader, follower)
    run.wait_isr(leader, set(run.cluster.brokers) - {follower})           # the cut took effect
    run.wait_acks(50)                                                       # writes go on
    run.network.heal()
    run.end(fault)
    run.wait_isr(leader, set(run.cluster.brokers))                          # rejoins


def net_2(run: Run) -> None:
    leader = run.leader()
    fault = run.begin(f"leader {leader} cut from all followers", [leader])
    for f in run.others(leader):
        run.network.cut_both(leader, f)
    run.wait_isr(leader, {leader})
    run.hold(2.0)       # acks=all with min.insync.replicas=2: refused (NOT_ENOUGH_REPLICAS)
    run.network.heal()
    run.end(fault)
    run.wait_isr(leader, set(run.cluster.brokers))


def net_3(run: Run) -> None:
    leader = run.leader()
    follower = run.others(leader, run.controller())[0] if len(run.others(leader, run.controller())) else \
        run.others(leader)[0]
    fault = run.begin(f"broker {follower} cut from ZooKeeper", [follower])
    run.network.cut_both(follower, ZOOKEEPER)
    run.wait_isr(leader, set(run.cluster.brokers) - {follower}, timeout_s=SESSION_MS / 1000 + 20)
    run.wait_acks(50)
    run.network.heal()
    run.end(fault)
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def net_4(run: Run) -> None:
    leader = run.leader()
    fault = run.begin(f"leader {leader} cut from ZooKeeper", [leader])
    run.network.cut_both(leader, ZOOKEEPER)
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 20)
    run.notes.append(f"broker {new} elected while broker {leader} still led in its own view")
    run.hold(LAG_MS / 1000 + 2)                 # the old leader acks acks=1 until its ISR change fails
    run.network.heal()
    run.end(fault)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def _isolate(run: Run, broker: int, label: str) -> None:
    fault = run.begin(label, [broker])
    run.network.isolate(broker)
    return fault


def net_5(run: Run) -> None:
    leader = run.leader()
    follower = run.others(leader, run.controller())[0] if run.others(leader, run.controller()) else \
        run.others(leader)[0]
    fault = _isolate(run, follower, f"broker {follower} isolated")
    run.wait_isr(leader, set(run.cluster.brokers) - {follower})
    run.wait_acks(50)
    run.network.heal()
    run.end(fault)
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def net_6(run: Run) -> None:
    leader = run.leader()
    fault = _isolate(run, leader, f"leader {leader} isolated")
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 20)
    run.wait_acks(50)                           # clients moved to the new leader
    run.network.heal()
    run.end(fault)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def net_6_shrunk(run: Run) -> None:
    """NET-6's variant: the followers fall behind first (cut from the leader) until the ISR is the
    leader alone, then the leader is isolated from everything but the clients."""
    leader = run.leader()
    followers = run.others(leader)
    behind = run.begin(f"followers {followers} cut from leader {leader}", followers)
    for f in followers:
        run.network.cut_both(leader, f)
    run.wait_isr(leader, {leader})
    iso = run.begin(f"leader {leader} isolated (the clients still reach it)", [leader])
    run.network.isolate(leader)
    run.wait_for("the partition offline (its only ISR member gone)",
                 lambda: all(run.view(f) is not None and run.view(f).leader == -1 for f in followers),
                 SESSION_MS / 1000 + 20)
    run.hold(2.0)               # the isolated leader: ISR of itself, min.insync.replicas=2 refuses acks=all
    run.network.heal()
    run.end(iso)
    run.end(behind)
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def net_7(run: Run) -> None:
    controller = run.controller()
    leader = run.leader()
    if leader == controller:
        raise LabError("the controller leads the partition; NET-7 needs them apart")
    fault = run.begin(f"controller {controller} cut from the other brokers", [controller])
    for b in run.others(controller):
        run.network.cut_both(controller, b)
    kill = run.begin(f"SIGKILL leader {leader}", [leader])
    run.cluster.kill(leader)
    run.hold(SESSION_MS / 1000 + 2)             # the controller elects, but cannot tell anyone
    run.network.heal()
    run.end(fault)
    new = run.wait_new_leader(leader, timeout_s=30)
    run.cluster.restart(leader)
    run.end(kill)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def net_8(run: Run) -> None:
    controller = run.controller()
    fault = run.begin(f"controller {controller} cut from ZooKeeper", [controller])
    run.network.cut_both(controller, ZOOKEEPER)
    run.wait_for("a new controller", lambda: run.controller() not in (-1, controller)
                 and all(run.view(b).controller != controller for b in run.others(controller)),
                 SESSION_MS / 1000 + 20)
    run.wait_acks(50)
    run.network.heal()
    run.end(fault)
    leader = run.leader()
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def loss_1(run: Run) -> None:
    """acks=1: the leader acknowledges before any follower has the record; a failover loses it."""
    leader = run.leader()
    followers = run.others(leader)
    pause = run.begin(f"followers {followers} paused for 1 s (they stay in the ISR)", followers)
    for f in followers:
        run.cluster.pause(f)
    run.hold(1.0)
    kill = run.begin(f"SIGKILL leader {leader}", [leader])
    run.cluster.kill(leader)
    for f in followers:
        run.cluster.resume(f)
    run.end(pause)
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 30)
    run.wait_acks(50)
    run.cluster.restart(leader)
    run.end(kill)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def loss_2(run: Run) -> None:
    """Unclean election: an out-of-sync replica becomes leader and the others truncate to it."""
    leader = run.leader()
    stale, other = run.others(leader)
    pause = run.begin(f"broker {stale} paused", [stale])
    run.cluster.pause(stale)
    run.wait_isr(leader, {leader, other}, timeout_s=SESSION_MS / 1000 + 20)
    run.wait_acks(100)                          # acknowledged by the leader and broker `other` only
    kill = run.begin(f"SIGKILL brokers {leader} and {other}", [leader, other])
    run.cluster.kill(other)
    run.cluster.kill(leader)
    run.cluster.resume(stale)
    run.end(pause)
    run.wait_for(f"broker {stale} elected (unclean)",
                 lambda: run.view(stale) is not None and run.view(stale).leader == stale, SESSION_MS / 1000 + 30)
    run.wait_acks(50)
    run.cluster.restart(leader)
    run.cluster.restart(other)
    run.end(kill)
    run.wait_isr(stale, set(run.cluster.brokers), timeout_s=60)


def loss_4(run: Run) -> None:
    """ISR shrunk to the leader (followers stalled), then the leader isolated: min.insync.replicas=1
    lets it acknowledge acks=all writes alone, and an unclean election elsewhere discards them."""
    leader = run.leader()
    followers = run.others(leader)
    stall = run.begin(f"followers {followers} paused", followers)
    for f in followers:
        run.cluster.pause(f)
    run.wait_isr(leader, {leader}, timeout_s=30)
    run.wait_acks(100)                          # acks=all, acknowledged by the leader alone
    iso = run.begin(f"leader {leader} isolated from brokers and ZooKeeper", [leader])
    run.network.isolate(leader)
    for f in followers:
        run.cluster.resume(f)
    run.end(stall)
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 30)
    run.hold(2.0)
    run.network.heal()
    run.end(iso)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def loss_6(run: Run) -> None:
    """The followers cut from the leader until the ISR is the leader alone; the leader dies, loses
    its disk and returns empty after the controller has seen it gone: it is the only ISR member, so
    it is elected again (a new leader epoch) and the followers truncate to its empty log."""
    import shutil

    leader = run.leader()
    followers = run.others(leader)
    cut = run.begin(f"followers {followers} cut from leader {leader}", followers)
    for f in followers:
        run.network.cut_both(leader, f)
    run.wait_isr(leader, {leader}, timeout_s=30)
    disk = run.begin(f"leader {leader} dies and loses its disk", [leader])
    run.cluster.kill(leader)
    shutil.rmtree(run.cluster.brokers[leader].log_dir, ignore_errors=True)
    run.wait_for("the partition offline (its only ISR member gone)",
                 lambda: all(run.view(f) is not None and run.view(f).leader == -1 for f in followers),
                 SESSION_MS / 1000 + 20)
    run.network.heal()
    run.end(cut)
    run.cluster.restart(leader)
    run.wait_for(f"broker {leader} elected again", lambda: run.view(leader) is not None
                 and run.view(leader).leader == leader and run.view(leader).leader_epoch > 0, 30)
    run.end(disk)
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def epo_3(run: Run) -> None:
    """KIP-101's first case with real processes: two failovers in a row.

    The leader's answers stop reaching one follower (``last``): its fetches still arrive, so the
    leader's high watermark and acknowledgements reach that follower's log end, but the follower
    never hears the new high watermark. The leader dies; the next in line (the controller) is
    elected; ``last``, told to follow it, cannot send it a request. In the legacy mode it cuts its
    log to its own, stale, high watermark: acknowledged records go. Then the new leader dies too
    and ``last`` is elected with what it kept. With leader epochs it must ask the new leader
    before it truncates, cannot, and keeps everything."""
    from strandline.lab.cluster import BROKER_PORT

    first = run.leader()
    successor = run.controller()
    if successor == first:
        raise LabError("the controller leads the partition; EPO-3 needs them apart")
    [last] = run.others(first, successor)
    cut = run.begin(f"broker {first}'s answers to broker {last} dropped; broker {last} cannot send requests "
                    f"to broker {successor}", [last])
    run.network.cut(first, last)
    run.network.cut_requests(last, successor, BROKER_PORT)
    run.hold(1.0)                                # less than replica.lag.time.max.ms: `last` stays in the ISR
    kill = run.begin(f"SIGKILL leader {first}", [first])
    run.cluster.kill(first)
    run.wait_for(f"broker {last} following broker {successor}",
                 lambda: run.view(last) is not None and run.view(last).leader == successor
                 and run.view(successor).leader == successor, SESSION_MS / 1000 + 20)
    second = run.begin(f"SIGKILL leader {successor}", [successor])
    run.cluster.kill(successor)
    run.wait_for(f"broker {last} elected", lambda: run.view(last).leader == last, SESSION_MS / 1000 + 20)
    run.network.heal()
    run.end(cut)
    run.cluster.restart(first)
    run.end(kill)
    run.cluster.restart(successor)
    run.end(second)
    run.wait_isr(last, set(run.cluster.brokers), timeout_s=60)


def epo_3_divergence(run: Run) -> None:
    """KIP-101's second case: every replica crashes at once, the one that restarts first had lost
    power (what it had not fsynced is gone) and leads; it takes new writes at the offsets it lost.
    The others come back: in the legacy mode each cuts only to its checkpointed high watermark and
    keeps its old records there (divergent replicas, below the HW, for good); with leader epochs
    each asks the new leader where its epoch ended and cuts to that. Every batch is one record
    (the producers' batch.num.messages=1), so a follower's fetch from its high watermark is never
    in the middle of a leader's batch."""
    from strandline.lab.workload import Sampler

    first = run.leader()
    successor = run.controller()
    if successor == first:
        raise LabError("the controller leads the partition; EPO-3 needs them apart")
    [last] = run.others(first, successor)
    crash = run.begin(f"brokers {first} and {last} killed, broker {successor} loses power, at once",
                      [first, successor, last])
    run.cluster.kill(first)
    run.cluster.kill(last)
    dropped = run.cluster.power_off(successor)
    run.notes.append(f"broker {successor} dropped {dropped} bytes it had not fsynced")
    checkpointed = max(Sampler._checkpointed_hw(run.cluster.brokers[b]).get((run.topic, 0), 0) for b in (first, last))
    run.cluster.restart(successor)
    run.wait_for(f"broker {successor} leading", lambda: run.view(successor) is not None
                 and run.view(successor).leader == successor and run.view(successor).leader_epoch > 0, 30)
    run.wait_for(f"broker {successor} past the others' high watermark ({checkpointed})",
                 lambda: run.view(successor).leo > checkpointed + 100, 60)
    run.cluster.restart(first)
    run.cluster.restart(last)
    run.end(crash)
    run.wait_isr(successor, set(run.cluster.brokers), timeout_s=60)


def loss_5(run: Run) -> None:
    """Every replica loses power at once: what was acknowledged but never fsynced is gone from all
    of them (Kafka acknowledges from the page cache; DUR-2's flush.on.ack closes this)."""
    brokers = list(run.cluster.brokers)
    power = run.begin(f"brokers {brokers} lose power at once", brokers)
    dropped = sum(run.cluster.power_off(b) for b in brokers)
    run.notes.append(f"{dropped} bytes not fsynced were dropped from the brokers' files")
    for b in brokers:
        run.cluster.restart(b)
    run.end(power)
    run.wait_for("a leader", lambda: run.leader() >= 0, 60)
    run.wait_isr(run.leader(), set(brokers), timeout_s=60)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("NET-1", "a follower cut from the leader, still on ZooKeeper: it leaves the ISR and rejoins",
             "no-loss", "a follower cut from the leader leaves the ISR and rejoins", net_1, needs_network=True),
    Scenario("NET-2", "the leader cut from all followers: the ISR shrinks to it; min.insync.replicas=2 refuses acks=all",
             "no-loss", "acks=all writes refused while the ISR is the leader alone", net_2, needs_network=True),
    Scenario("NET-3", "a follower cut from ZooKeeper: its session expires, it leaves the ISR, then rejoins",
             "no-loss", "a follower without ZooKeeper is dropped from the ISR and rejoins", net_3, needs_network=True),
    Scenario("NET-4", "the leader cut from ZooKeeper: a new leader is elected; the old one acks acks=1 briefly",
             "loss", "expected loss of acks=1 writes acknowledged by the deposed leader", net_4,
             acks="1", idempotence=False, min_isr=1, needs_network=True, bound="bounded by replica.lag.time.max.ms",
             check=split_brain_bound),
    Scenario("NET-5", "a follower fully isolated: it leaves the ISR and rejoins after healing",
             "no-loss", "an isolated follower leaves the ISR and rejoins", net_5, needs_network=True),
    Scenario("NET-6", "the leader fully isolated: a new leader is elected; acks=all with min.insync.replicas=2 loses nothing",
             "no-loss", "an isolated leader is replaced without losing an acks=all write", net_6, needs_network=True),
    Scenario("NET-6b", "NET-6 after the ISR had shrunk to the leader: min.insync.replicas=2 refuses every write, "
             "no unclean election: the partition waits offline",
             "no-loss", "an isolated leader alone in its ISR acknowledges nothing and loses nothing", net_6_shrunk,
             needs_network=True),
    Scenario("NET-7", "the controller cut from the other brokers: leader changes are not delivered until healed",
             "no-loss", "a controller that cannot reach the brokers delays a failover, loses nothing", net_7,
             needs_network=True),
    Scenario("NET-8", "the controller cut from ZooKeeper: a new controller is elected; the old one stops acting",
             "no-loss", "a controller cut from ZooKeeper is replaced", net_8, needs_network=True),
    Scenario("EPO-3", "two failovers in a row, the last leader told to follow the first while cut from it: "
             "leader epochs keep every acknowledged write",
             "no-loss", "a follower that cannot ask its new leader keeps its log (leader epochs)", epo_3,
             needs_network=True),
    Scenario("EPO-3-legacy", "the same with replication.truncation=high-watermark (pre-0.11 Kafka): "
             "the follower cuts to its high watermark and is then elected",
             "loss", "expected loss of acks=all writes cut away with the follower's high watermark", epo_3,
             needs_network=True, broker_config={"replication.truncation": "high-watermark"},
             bound="what the last leader's high watermark had not yet caught up with"),
    Scenario("EPO-3-divergence", "every replica crashes, the first back had lost power and leads: "
             "leader epochs leave the replicas identical",
             "no-divergence", "identical replicas after the followers asked the new leader where their epoch ended",
             epo_3_divergence, min_isr=1, producer_config={"batch.num.messages": 1}),
    Scenario("EPO-3-divergence-legacy", "the same with replication.truncation=high-watermark: the replicas "
             "diverge below the high watermark, for good",
             "divergence", "expected divergent replicas: the followers kept their old records below their "
             "checkpointed high watermark", epo_3_divergence, min_isr=1, producer_config={"batch.num.messages": 1},
             broker_config={"replication.truncation": "high-watermark"}),
    Scenario("LOSS-1", "acks=1 and a leader failover: writes the leader acknowledged alone are lost",
             "loss", "expected loss of acks=1 writes no follower had copied", loss_1,
             acks="1", idempotence=False, min_isr=1, bound="bounded by what the followers had not fetched"),
    Scenario("LOSS-2", "an unclean leader election loses acknowledged writes, even with acks=all",
             "loss", "expected loss of acks=all writes the unclean leader never had", loss_2,
             min_isr=1, unclean=True, idempotence=False, bound="everything written after the new leader fell out of the ISR"),
    Scenario("LOSS-3", "acks=1 and the leader cut from ZooKeeper (a short split brain): loss",
             "loss", "expected loss of acks=1 writes acknowledged during the split brain", net_4,
             acks="1", idempotence=False, min_isr=1, needs_network=True, bound="bounded by replica.lag.time.max.ms",
             check=split_brain_bound),
    Scenario("LOSS-4", "the ISR shrunk to the leader, min.insync.replicas=1, the leader isolated: loss even with acks=all",
             "loss", "expected loss of acks=all writes acknowledged by a leader alone in its ISR", loss_4,
             min_isr=1, unclean=True, idempotence=False, needs_network=True),
    Scenario("LOSS-5", "every replica crashes at once before the data reaches the disk: loss",
             "loss", "expected loss of acknowledged writes that only the page cache held", loss_5,
             bound="everything since the last fsync"),
    Scenario("DUR-3", "the same power loss with flush.on.ack=true: every ISR member fsyncs before the HW passes",
             "no-loss", "no acknowledged write lost to a power loss of every replica with flush.on.ack", loss_5,
             topic_config={"flush.on.ack": "true"}),
    Scenario("LOSS-6", "the ISR shrunk to the leader alone, then the leader loses its disk: total loss",
             "loss", "expected loss of every acknowledged write (KIP-966's case, even with min.insync.replicas=2)",
             loss_6, needs_network=True, check=lambda info, result, views: total_loss(info)),
]}


def safe_trial(run: Run) -> None:
    """A random mix of faults under SAFE-1 (acks=all, min.insync.replicas=2, no unclean election)."""
    kinds = ["kill", "terminate", "pause", "kill-controller"]
    if run.network is not None:
        kinds += ["cut-follower", "cut-leader-followers", "leader-from-zk", "isolate", "controller-from-zk",
                  "controller-from-brokers"]
    for _ in range(run.rng.randint(1, 3)):
        kind = run.rng.choice(kinds)
        leader = run.leader()
        if leader < 0:
            run.wait_for("a leader", lambda: run.leader() >= 0, 60)
            leader = run.leader()
        controller = run.controller()
        target = leader if run.rng.random() < 0.6 else run.rng.choice(list(run.cluster.brokers))
        duration = run.rng.uniform(1.0, SESSION_MS / 1000 * 2)
        fault = run.begin(f"{kind} broker {controller if 'controller' in kind else target} for {duration:.1f} s",
                          [controller if "controller" in kind else target])
        if kind in ("kill", "kill-controller"):
            victim = controller if kind == "kill-controller" else target
            run.cluster.kill(victim)
            run.hold(duration)
            run.cluster.restart(victim)
        elif kind == "terminate":
            run.cluster.terminate(target)
            run.hold(duration)
            run.cluster.restart(target)
        elif kind == "pause":
            run.cluster.pause(target)
            run.hold(duration)
            run.cluster.resume(target)
        else:
            if kind == "cut-follower":
                run.network.cut_both(leader, run.rng.choice(run.others(leader)))
            elif kind == "cut-leader-followers":
                for f in run.others(leader):
                    run.network.cut_both(leader, f)
            elif kind == "leader-from-zk":
                run.network.cut_both(target, ZOOKEEPER)
            elif kind == "isolate":
                run.network.isolate(target, from_clients=run.rng.random() < 0.5)
            elif kind == "controller-from-zk":
                run.network.cut_both(controller, ZOOKEEPER)
            elif kind == "controller-from-brokers":
                for b in run.others(controller):
                    run.network.cut_both(controller, b)
            run.hold(duration)
            run.network.heal()
        run.end(fault)
        run.hold(run.rng.uniform(0.5, 3.0))


SAFE = Scenario("SAFE", "random mixes of kills, pauses, partitions and controller failovers under SAFE-1",
                "no-loss", "no acknowledged write lost under acks=all, min.insync.replicas=2, no unclean election",
                safe_trial)

__all__ = ["SCENARIOS", "SAFE", "Scenario", "Run", "LabError", "LAB_BROKER_CONFIG", "CLIENTS"]
