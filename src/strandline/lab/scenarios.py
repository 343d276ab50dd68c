"""The catalogue: the seed documents' partition scenarios (NET-*), loss cases (LOSS-*) and leader
epoch cases (EPO-3), each with its faults (:mod:`strandline.lab.faults`) and what SPEC.md expects.

The lab heals, waits until the replicas agree, reads every log and audits the history; the
verdict compares the audit with the expectation: ``loss`` (acknowledged writes must be lost: the
run shows it), ``no-loss`` (not one acknowledged write may be lost, and no replica may differ
below the high watermark), ``divergence`` / ``no-divergence`` (replicas must, or must not, differ
below the high watermark). Whatever the expectation, the counts a scenario promises to be 0
(:meth:`Scenario.promised_zero`: records no producer sent; with an idempotent producer, records
written twice or out of order) must be 0. A scenario's ``check`` adds what the seed says beyond
the count, and the numbers it measured.
"""


from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.lab.faults import (epo_3, epo_3_divergence, loss_1, loss_2, loss_4, loss_5, loss_6, loss_6_elr, net_1, net_2,
                                   net_3, net_4, net_5, net_6, net_6_shrunk, net_7, net_8, safe_trial,
                                   split_brain_bound_ms)
from strandline.lab.run import LAB_BROKER_CONFIG, LabError, Run


@dataclass
class Finding:
    """What a scenario's own check measured in a run, printed with the verdict's count, and why the
    outcome is not the one the seed describes (None when it is)."""
    words: str
    problem: str | None = None


@dataclass
class Scenario:
    name: str
    summary: str                     # one line, from the seeds
    expect: str                      # "loss" | "no-loss" | "divergence" | "no-divergence"
    expectation: str                 # how the verdict line describes the expected outcome
    drive: Callable[["Run"], None]
    acks: str = "all"
    idempotence: bool = True
    min_isr: int = 2
    unclean: bool = False
    needs_network: bool = False
    broker_config: dict[str, str] = field(default_factory=dict)
    topic_config: dict[str, str] = field(default_factory=dict)
    producer_config: dict[str, Any] = field(default_factory=dict)
    bound: str = ""                  # what bounds the loss, printed after the count
    check: Callable[[dict[str, Any], dict[str, Any], list[dict[str, Any]] | None], Finding | None] | None = None
    """``check(run info, audit result, sampled views)``: what the run measured beyond the count
    (e.g. how long after an election lost writes were acknowledged, against their bound) and
    whether that is what the seed describes; None when there is nothing to say."""

    def promised_zero(self) -> tuple[str, ...]:
        """The audit's counts this scenario promises to be 0 whatever its faults: no record that no
        producer sent, and with an idempotent producer no record written twice or out of its
        producer's order."""
        return (("duplicated", "reordered") if self.idempotence else ()) + ("unexpected",)


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.2f} s"


def disk_loss_account(acked: list[tuple[float, str]], kept: set[str], lost_at_ms: float) -> Finding:
    """LOSS-6 from the producers' acknowledgements (``(time_ms, value)``), the values the final
    leader holds below its high watermark, and the moment the leader lost its disk: every write
    acknowledged before that moment must be gone (its only copy was on that disk, and the
    followers truncated to the empty log); the words say how many of them were, and how many
    written after it were lost."""
    before = {v for t, v in acked if t < lost_at_ms}
    after = {v for t, v in acked if t >= lost_at_ms} - before
    if not before:
        return Finding("no write was acknowledged before the disk loss",
                       "nothing was acknowledged before the disk was lost")
    survived = len(before & kept)
    words = f"{len(before) - survived} of {len(before)} writes acknowledged before the disk loss lost"
    words += f", {survived} survived" if survived else " (all of them)"
    words += f"; {len(after - kept)} of {len(after)} acknowledged after it lost"
    problem = f"{survived} of {len(before)} writes acknowledged before the disk loss survived" if survived else None
    return Finding(words, problem)


def total_loss(info: dict[str, Any], result: dict[str, Any] | None = None, views: list[dict[str, Any]] | None = None
               ) -> Finding:
    """LOSS-6: not one write acknowledged before the leader lost its disk may survive."""
    import pyarrow.parquet as pq
    from pathlib import Path

    run_dir = Path(info["run_dir"])
    lost_at = next(f["start_ms"] for f in info["faults"] if "disk" in f["label"])
    acked = [(r["time_ms"], r["value"]) for r in pq.read_table(run_dir / "ops.parquet").to_pylist()
             if r["type"] == "ok"]
    final = {r["partition"]: r for r in pq.read_table(run_dir / "final.parquet").to_pylist()}
    kept = {r["value"] for r in pq.read_table(run_dir / "records.parquet").to_pylist()
            if r["partition"] in final and r["broker"] == final[r["partition"]]["leader"]
            and r["offset"] < final[r["partition"]]["high_watermark"]}
    return disk_loss_account(acked, kept, lost_at)


def disk_loss_kept(info: dict[str, Any], result: dict[str, Any] | None = None,
                   views: list[dict[str, Any]] | None = None) -> Finding:
    """ELR-1 (LOSS-6 with eligible leader replicas): every write acknowledged before the leader
    lost its disk must be in the final leader's log below its high watermark."""
    import pyarrow.parquet as pq
    from pathlib import Path

    run_dir = Path(info["run_dir"])
    lost_at = next(f["start_ms"] for f in info["faults"] if "disk" in f["label"])
    acked = [(r["time_ms"], r["value"]) for r in pq.read_table(run_dir / "ops.parquet").to_pylist()
             if r["type"] == "ok"]
    final = {r["partition"]: r for r in pq.read_table(run_dir / "final.parquet").to_pylist()}
    kept = {r["value"] for r in pq.read_table(run_dir / "records.parquet").to_pylist()
            if r["partition"] in final and r["broker"] == final[r["partition"]]["leader"]
            and r["offset"] < final[r["partition"]]["high_watermark"]}
    before = {v for t, v in acked if t < lost_at}
    if not before:
        return Finding("no write was acknowledged before the disk loss",
                       "nothing was acknowledged before the disk was lost")
    survived = len(before & kept)
    words = f"{survived} of {len(before)} writes acknowledged before the disk loss kept"
    return Finding(words, None if survived == len(before) else
                   f"{len(before) - survived} writes acknowledged before the disk loss lost")


def split_brain_bound(info: dict[str, Any], result: dict[str, Any], views: list[dict[str, Any]] | None
                      ) -> Finding | None:
    """NET-4 / LOSS-3: the last lost write must have been acknowledged within
    :func:`~strandline.lab.faults.split_brain_bound_ms` of the new leader's election (as first
    sampled: the new leader stopped fetching from the old one by then). The words give the
    measured span next to the bound and what the bound is made of."""
    if not result["lost"]:
        return None
    views = views or []
    first_leader = next((v for v in views if v["state"] == "up" and v["leader"] >= 0), None)
    if first_leader is None:
        return Finding("no leader was ever sampled", "no leader was ever sampled")
    old = first_leader["leader"]
    new = next((v for v in views if v["state"] == "up" and v["leader"] == v["broker"] != old), None)
    if new is None:
        return Finding("no new leader was sampled", "no new leader was sampled")
    elected = new["time_ms"]
    bound_ms, parts = split_brain_bound_ms(info["broker_config"])
    late = result["lost_acked_last_ms"] - elected
    when = f"{_seconds(late)} after" if late >= 0 else f"{_seconds(-late)} before"
    made_of = " + ".join(f"{ms} ms {what}" for ms, what in parts)
    within = "within" if late <= bound_ms else "beyond"
    words = (f"the last lost write was acknowledged {when} broker {new['broker']}'s election, {within} the bound "
             f"of {_seconds(bound_ms)} ({made_of})")
    problem = None
    if late > bound_ms:
        problem = (f"the deposed leader acknowledged lost writes until {_seconds(late)} after the new leader's "
                   f"election, beyond the bound of {_seconds(bound_ms)}")
    return Finding(words, problem)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("NET-1", "a follower cut from the leader, still on ZooKeeper: it leaves the ISR and rejoins",
             "no-loss", "a follower cut from the leader leaves the ISR and rejoins", net_1, needs_network=True),
    Scenario("NET-2", "the leader cut from all followers: the ISR shrinks to it; min.insync.replicas=2 refuses acks=all "
             "(the seeds' design, where the leader writes its ISR itself: inter.broker.protocol.version 2.6)",
             "no-loss", "acks=all writes refused while the ISR is the leader alone", net_2, needs_network=True,
             broker_config={"inter.broker.protocol.version": "2.6"}),
    Scenario("NET-3", "a follower cut from ZooKeeper: its session expires, it leaves the ISR, then rejoins",
             "no-loss", "a follower without ZooKeeper is dropped from the ISR and rejoins", net_3, needs_network=True),
    Scenario("NET-4", "the leader cut from ZooKeeper: a new leader is elected; the old one acks acks=1 briefly",
             "loss", "expected loss of acks=1 writes acknowledged by the deposed leader", net_4,
             acks="1", idempotence=False, min_isr=1, needs_network=True, check=split_brain_bound),
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
             needs_network=True, producer_config={"batch.num.messages": 1}),
    Scenario("EPO-3-legacy", "the same with replication.truncation=high-watermark (pre-0.11 Kafka): "
             "the follower cuts to its high watermark and is then elected",
             "loss", "expected loss of acks=all writes cut away with the follower's high watermark", epo_3,
             needs_network=True, broker_config={"replication.truncation": "high-watermark"},
             producer_config={"batch.num.messages": 1},   # see epo_3_divergence: batch boundaries
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
             acks="1", idempotence=False, min_isr=1, needs_network=True, check=split_brain_bound),
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
             "loss", "expected loss of every write acknowledged before the leader lost its disk (KIP-966's case, "
             "even with min.insync.replicas=2)", loss_6, needs_network=True, check=total_loss),
    Scenario("ELR-1", "LOSS-6 with eligible leader replicas (KIP-966): a follower of the ELR leads, nothing lost",
             "no-loss", "no acknowledged write lost when the leader alone in its ISR loses its disk, with "
             "eligible.leader.replicas.enable", loss_6_elr, needs_network=True,
             broker_config={"eligible.leader.replicas.enable": "true"}, check=disk_loss_kept),
]}

#: ``strandline lab run NAME --elr``: the scenario with eligible leader replicas (KIP-966)
ELR_VARIANTS = {"LOSS-6": "ELR-1", "TXN": "TXN-ELR"}


SAFE = Scenario("SAFE", "random mixes of kills, pauses, partitions and controller failovers under SAFE-1",
                "no-loss", "no acknowledged write lost under acks=all, min.insync.replicas=2, no unclean election",
                safe_trial)

__all__ = ["SCENARIOS", "SAFE", "ELR_VARIANTS", "Scenario", "Finding", "Run", "LabError", "LAB_BROKER_CONFIG"]
