"""The faults of each scenario: functions of a :class:`~strandline.lab.run.Run` that break the
cluster while the workload writes, wait for each fault to take effect (or raise LabError: the run
did not go as written), and heal what they broke."""

from __future__ import annotations

from typing import Any

from strandline.lab.network import ZOOKEEPER
from strandline.lab.run import SESSION_MS, Fault, LabError, Run


def wait_all_in_isr(run: Run, timeout_s: float = 60.0) -> None:
    """Until whichever broker leads has every broker in its ISR. After a controller failover the
    leader need not be the one the faults elected: a new controller (Kafka's and Strandline's) runs
    its first automatic preferred-leader election 5 s after taking office
    (auto.leader.rebalance.enable), and moves leadership back to the preferred replica once it is
    in the ISR."""
    everyone = set(run.cluster.brokers)
    run.wait_for(f"ISR {sorted(everyone)} on the leader",
                 lambda: (leader := run.leader()) >= 0 and run.isr(leader) == everyone
                 and run.seen(leader).leader == leader, timeout_s)


def net_1(run: Run) -> None:
    """A follower other than the controller (as in NET-3 and NET-5): cut from the controller too,
    a leader that sends its ISR change to the controller (Kafka 2.7+'s AlterIsr, AlterPartition in
    3.x) could not shrink its ISR until the cut heals, and acks=all writes would wait that long."""
    leader = run.leader()
    follower = run.others(leader, run.controller())[0] if run.others(leader, run.controller()) else \
        run.others(leader)[0]
    fault = run.begin(f"broker {follower} cut from leader {leader}", [follower])
    run.network.cut_both(leader, follower)
    run.wait_isr(leader, set(run.cluster.brokers) - {follower})           # the cut took effect
    run.wait_acks(50)                                                       # writes go on
    run.network.heal()
    run.end(fault)
    run.wait_isr(leader, set(run.cluster.brokers))                          # rejoins


def stop_fetching(run: Run, leader: int, followers: list[int]) -> Fault:
    """The followers' requests to the leader's listener dropped, until the leader's ISR is itself
    alone: they cannot fetch, while the leader still reaches the controller. A leader that sends
    its ISR change to the controller (Kafka 3.9's AlterPartition) could not shrink its ISR if it
    were cut from every follower both ways (the controller is one of them), so both ways would
    leave Kafka's ISR as it was; Strandline's leader writes it to ZooKeeper either way.

    The shrink is seen in any broker's metadata: Kafka's leader answers Metadata from the cache
    the controller's UpdateMetadata fills, and the controller, a follower, cannot reach it now."""
    from strandline.lab.cluster import BROKER_PORT

    fault = run.begin(f"followers {followers} cannot send requests to leader {leader} (no fetches)", followers)
    for f in followers:
        run.network.cut_requests(f, leader, BROKER_PORT)

    def shrunk() -> bool:
        views = [run.view(b) for b in run.cluster.brokers]
        return any(v is not None and v.state == "up" and v.leader == leader and v.isr == str(leader) for v in views)
    run.wait_for(f"ISR [{leader}] in a broker's metadata", shrunk, 30)
    return fault


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


#: What a producer's delivery callback may lag behind the broker's answer: the lab's producers
#: poll every 2.5 ms; the rest is room for a busy machine.
CLIENT_ACK_MS = 500


def split_brain_bound_ms(config: dict[str, Any]) -> tuple[int, list[tuple[int, str]]]:
    """NET-4 / LOSS-3: how long after the new leader's election the deposed leader, cut from
    ZooKeeper, may still acknowledge writes, and what that bound is made of, from the brokers'
    configuration. The new leader stops fetching from the old one when it takes its role (before
    the lab samples it as leader); the old leader counts it out of sync once it has not caught up
    for ``replica.lag.time.max.ms``, notices at its next ISR check (every half of that), and
    acknowledges until its ISR write fails, which ZooKeeper's client reports at the latest after
    ``zookeeper.connection.timeout.ms`` (default: the session timeout). The producer records the
    acknowledgement a moment after the broker sent it."""
    lag = int(config["replica.lag.time.max.ms"])
    zk = int(config.get("zookeeper.connection.timeout.ms") or config["zookeeper.session.timeout.ms"])
    parts = [(lag, "replica.lag.time.max.ms until the deposed leader counts the new one out of sync"),
             (max(1, lag // 2), "until its next ISR check (every half of that)"),
             (zk, "zookeeper.connection.timeout.ms until its ISR write fails"),
             (CLIENT_ACK_MS, "for the producer to record the acknowledgement")]
    return sum(ms for ms, _ in parts), parts


def net_4(run: Run) -> None:
    """The leader cut from ZooKeeper: a new leader is elected; the old one acknowledges acks=1
    writes until its ISR change fails. The cut lasts 2 s beyond :func:`split_brain_bound_ms` after
    the election, so that a deposed leader acknowledging for as long as the cut lasts is seen
    beyond the bound."""
    leader = run.leader()
    fault = run.begin(f"leader {leader} cut from ZooKeeper", [leader])
    run.network.cut_both(leader, ZOOKEEPER)
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 20)
    run.notes.append(f"broker {new} elected while broker {leader} still led in its own view")
    bound_ms, _ = split_brain_bound_ms(run.cluster.overrides)
    run.hold(bound_ms / 1000 + 2)
    run.network.heal()
    run.end(fault)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def _isolate(run: Run, broker: int, label: str) -> Fault:
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
    """The leader cut from its followers, the controller and ZooKeeper; the clients still reach it.
    Whether they move to the new leader during the cut is the client's affair: one that asks only
    the isolated broker for metadata is told that broker still leads (its metadata is as stale as
    Kafka's would be) and waits for the heal. The run notes which happened."""
    leader = run.leader()
    fault = _isolate(run, leader, f"leader {leader} isolated")
    new = run.wait_new_leader(leader, timeout_s=SESSION_MS / 1000 + 20)
    elected = run.now_ms()
    run.hold(5.0)
    moved = run.workload.acked_since(elected)
    run.notes.append(f"{moved} writes acknowledged in the 5 s after broker {new}'s election, while broker "
                     f"{leader} was isolated" + ("" if moved else ": the clients still asked the isolated leader"))
    run.network.heal()
    run.end(fault)
    run.wait_isr(new, set(run.cluster.brokers), timeout_s=60)


def net_6_shrunk(run: Run) -> None:
    """NET-6's variant: the followers fall behind first (:func:`stop_fetching`) until the ISR is
    the leader alone, then the leader is isolated from everything but the clients."""
    leader = run.leader()
    followers = run.others(leader)
    behind = stop_fetching(run, leader, followers)
    iso = run.begin(f"leader {leader} isolated (the clients still reach it)", [leader])
    run.network.isolate(leader)
    run.wait_for("the partition offline (its only ISR member gone)",
                 lambda: all(run.view(f) is not None and run.seen(f).leader == -1 for f in followers),
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
                 and all(run.seen(b).controller != controller for b in run.others(controller)),
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
                 lambda: run.view(stale) is not None and run.seen(stale).leader == stale, SESSION_MS / 1000 + 30)
    run.wait_acks(50)
    run.cluster.restart(leader)
    run.cluster.restart(other)
    run.end(kill)
    wait_all_in_isr(run)


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
    """The followers stop fetching (:func:`stop_fetching`) until the ISR is the leader alone; the
    leader dies, loses its disk and returns empty after the controller has seen it gone: it is the
    only ISR member, so it is elected again (a new leader epoch) and the followers truncate to its
    empty log."""
    import shutil

    leader = run.leader()
    followers = run.others(leader)
    cut = stop_fetching(run, leader, followers)
    disk = run.begin(f"leader {leader} dies and loses its disk", [leader])
    run.cluster.kill(leader)
    shutil.rmtree(run.cluster.brokers[leader].log_dir, ignore_errors=True)
    run.wait_for("the partition offline (its only ISR member gone)",
                 lambda: all(run.view(f) is not None and run.seen(f).leader == -1 for f in followers),
                 SESSION_MS / 1000 + 20)
    run.network.heal()
    run.end(cut)
    run.cluster.restart(leader)
    run.wait_for(f"broker {leader} elected again", lambda: run.view(leader) is not None
                 and run.seen(leader).leader == leader and run.seen(leader).leader_epoch > 0, 30)
    run.end(disk)
    run.wait_isr(leader, set(run.cluster.brokers), timeout_s=60)


def loss_6_elr(run: Run) -> None:
    """LOSS-6 with eligible leader replicas (KIP-966): the same faults as :func:`loss_6`. The
    followers left the ISR below min.insync.replicas, so they are its ELR, and the leader's high
    watermark stopped when they left. The leader dies and loses its disk: the controller elects a
    follower from the ELR, which holds every acknowledged write. The old leader returns empty,
    registers after an unclean shutdown (its log dir holds no clean-shutdown marker), is not
    eligible, follows and catches up."""
    import shutil

    leader = run.leader()
    followers = run.others(leader)
    cut = stop_fetching(run, leader, followers)
    disk = run.begin(f"leader {leader} dies and loses its disk", [leader])
    run.cluster.kill(leader)
    shutil.rmtree(run.cluster.brokers[leader].log_dir, ignore_errors=True)
    run.wait_for("a follower elected from the ELR",
                 lambda: any(run.view(f) is not None and run.seen(f).leader in followers for f in followers),
                 SESSION_MS / 1000 + 20)
    run.network.heal()
    run.end(cut)
    new_leader = run.leader(among=followers)
    run.cluster.restart(leader)
    run.wait_for(f"broker {leader} back as a follower of {new_leader}",
                 lambda: run.view(leader) is not None and run.seen(leader).leader == new_leader, 30)
    run.end(disk)
    wait_all_in_isr(run)        # the controller's preferred-leader election may have moved it


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
                 lambda: run.view(last) is not None and run.seen(last).leader == successor
                 and run.seen(successor).leader == successor, SESSION_MS / 1000 + 20)
    second = run.begin(f"SIGKILL leader {successor}", [successor])
    run.cluster.kill(successor)
    run.wait_for(f"broker {last} elected", lambda: run.seen(last).leader == last, SESSION_MS / 1000 + 20)
    run.network.heal()
    run.end(cut)
    run.cluster.restart(first)
    run.end(kill)
    run.cluster.restart(successor)
    run.end(second)
    wait_all_in_isr(run)


def epo_3_divergence(run: Run) -> None:
    """KIP-101's second case: every replica crashes at once, the one that restarts first had lost
    power (what it had not fsynced is gone) and leads; it takes new writes at the offsets it lost.
    The others come back: in the legacy mode each cuts only to its checkpointed high watermark and
    keeps its old records there (divergent replicas, below the HW, for good); with leader epochs
    each asks the new leader where its epoch ended and cuts to that. Every batch is one record
    (the producers' batch.num.messages=1), so a follower's fetch from its high watermark is never
    in the middle of a leader's batch: a legacy follower whose high watermark falls inside one
    cannot append what it fetches (Kafka 2.x marks such a partition failed; Strandline's follower
    retries every replica.fetch.backoff.ms and says why), so both EPO-3 pairs write one record per
    batch."""
    from strandline.lab.replicas import Sampler

    first = run.leader()
    successor = run.controller()
    if successor == first:
        raise LabError("the controller leads the partition; EPO-3 needs them apart")
    [last] = run.others(first, successor)

    def checkpointed_hw(b: int) -> int:
        return Sampler._checkpointed_hw(run.cluster.brokers[b]).get((run.topic, 0), 0)

    # the records must be below the others' checkpointed high watermarks before the crash
    run.wait_for(f"brokers {first} and {last} checkpointing a high watermark past 200",
                 lambda: min(checkpointed_hw(first), checkpointed_hw(last)) > 200, 30)
    crash = run.begin(f"brokers {first} and {last} killed, broker {successor} loses power, at once",
                      [first, successor, last])
    run.cluster.kill(first)
    run.cluster.kill(last)
    dropped = run.cluster.power_off(successor)
    run.notes.append(f"broker {successor} dropped {dropped} bytes it had not fsynced")
    checkpointed = max(checkpointed_hw(b) for b in (first, last))
    run.cluster.restart(successor)
    run.wait_for(f"broker {successor} leading", lambda: run.view(successor) is not None
                 and run.seen(successor).leader == successor and run.seen(successor).leader_epoch > 0, 30)
    run.wait_for(f"broker {successor} past the others' high watermark ({checkpointed})",
                 lambda: run.seen(successor).leo > checkpointed + 100, 60)
    run.cluster.restart(first)
    run.cluster.restart(last)
    run.end(crash)
    wait_all_in_isr(run)        # the controller's preferred-leader election may have moved it


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


def safe_trial(run: Run) -> None:
    """A random mix of faults under SAFE-1 (acks=all, min.insync.replicas=2, no unclean election)."""
    kinds = ["kill", "terminate", "pause", "kill-controller"]
    if run.has_network:
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
