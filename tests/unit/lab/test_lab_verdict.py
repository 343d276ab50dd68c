"""The lab's verdict line from synthetic runs: its words must say what its numbers count.

LOSS-6 counts the writes acknowledged before the leader lost its disk, and says how many of them
were lost and how many survived; NET-4 / LOSS-3 print how long after the new leader's election
the last lost write was acknowledged, next to the bound the check uses and what that bound is
made of; every verdict requires the counts its scenario promises to be 0 (never-sent records;
with an idempotent producer, duplicated or reordered ones)."""

from __future__ import annotations

import pytest

from strandline.lab import history
from strandline.lab.faults import CLIENT_ACK_MS, net_4, split_brain_bound_ms
from strandline.lab.run import LAB_BROKER_CONFIG
from strandline.lab.runner import verdict
from strandline.lab.scenarios import (ELR_VARIANTS, SAFE, SCENARIOS, disk_loss_account, disk_loss_kept,
                                      split_brain_bound, total_loss)

T0 = 1_000_000.0


def audit_result(lost: int = 0, acked: int = 1000, **counts) -> dict:
    return {"ops": {"invoke": acked, "ok": acked}, "lost": lost, "duplicated": 0, "reordered": 0, "unexpected": 0,
            "divergent_batches": 0, "divergent_replicas": [], "lost_acked_first_ms": None,
            "lost_acked_last_ms": None, "lost_records": [], **counts}


def view(t_s: float, broker: int, leader: int, state: str = "up") -> dict:
    return {"time_ms": T0 + t_s * 1000, "broker": broker, "partition": 0, "state": state, "leader": leader,
            "leader_epoch": 0 if leader == 1 else 1, "isr": "1,2,3", "controller": 2, "leo": 0, "hw": 0}


def split_brain_views(elected_s: float = 4.0) -> list[dict]:
    """Broker 1 leads; broker 3 is elected at ``elected_s`` while 1 still says it leads (cut from
    ZooKeeper), until 9 s."""
    views = []
    t = 0.0
    while t < 12:
        views.append(view(t, 1, 1 if t < 9 else 3))
        views.append(view(t, 2, 1 if t < elected_s + 0.2 else 3))
        views.append(view(t, 3, 1 if t < elected_s else 3))
        t = round(t + 0.2, 1)
    return views


def net_4_info() -> dict:
    return {"scenario": "NET-4", "broker_config": dict(LAB_BROKER_CONFIG), "faults": [], "error": None,
            "started_ms": T0}


# ---------------------------------------------------------------------------- NET-4 / LOSS-3


def test_the_split_brain_bound_is_made_of_the_lag_time_its_check_the_zookeeper_timeout_and_the_client():
    bound, parts = split_brain_bound_ms(LAB_BROKER_CONFIG)
    assert [ms for ms, _ in parts] == [2000, 1000, 4000, CLIENT_ACK_MS]
    assert bound == 7000 + CLIENT_ACK_MS
    assert "replica.lag.time.max.ms" in parts[0][1] and "zookeeper.connection.timeout.ms" in parts[2][1]
    # zookeeper.connection.timeout.ms defaults to the session timeout; set, it is the one used
    assert split_brain_bound_ms({**LAB_BROKER_CONFIG, "zookeeper.connection.timeout.ms": "6000"})[0] == \
        9000 + CLIENT_ACK_MS


@pytest.mark.parametrize("name", ["NET-4", "LOSS-3"])
def test_net_4_prints_the_measured_span_of_lost_writes_next_to_the_bound(name):
    """The last lost write 2.53 s after the sampled election: both numbers and the bound's parts
    are on the line, and the outcome is the seed's."""
    views = split_brain_views(elected_s=4.0)
    result = audit_result(lost=2089, acked=7364, lost_acked_first_ms=T0 + 3900, lost_acked_last_ms=T0 + 6530)
    finding = split_brain_bound(net_4_info(), result, views)
    assert finding is not None and finding.problem is None
    assert "acknowledged 2.53 s after broker 3's election, within the bound of 7.50 s" in finding.words
    assert "2000 ms replica.lag.time.max.ms" in finding.words and "4000 ms zookeeper.connection.timeout.ms" in \
        finding.words and f"{CLIENT_ACK_MS} ms for the producer" in finding.words
    ok, line = verdict(SCENARIOS[name], {**net_4_info(), "scenario": name}, result, views)
    assert ok, line
    assert line.startswith(f"{name}: ") and "2089 lost of 7364 acknowledged" in line and "2.53 s after" in line
    assert "7.50 s" in line and line.endswith("- as the seed says")
    assert "bounded by replica.lag.time.max.ms" not in line      # a bound the numbers did not keep


def test_net_4_a_deposed_leader_acknowledging_beyond_the_bound_is_not_the_seed():
    views = split_brain_views(elected_s=4.0)
    result = audit_result(lost=5000, lost_acked_first_ms=T0 + 3900, lost_acked_last_ms=T0 + 4000 + 7600)
    finding = split_brain_bound(net_4_info(), result, views)
    assert finding is not None and finding.problem is not None
    assert "7.60 s after broker 3's election, beyond the bound of 7.50 s" in finding.words
    ok, line = verdict(SCENARIOS["NET-4"], net_4_info(), result, views)
    assert not ok and "NOT as the seed says: the deposed leader acknowledged lost writes until 7.60 s" in line


def test_net_4_lost_writes_all_acknowledged_before_the_election_are_said_so():
    views = split_brain_views(elected_s=4.0)
    result = audit_result(lost=10, lost_acked_first_ms=T0 + 3500, lost_acked_last_ms=T0 + 3800)
    finding = split_brain_bound(net_4_info(), result, views)
    assert finding.problem is None and "acknowledged 0.20 s before broker 3's election" in finding.words


def test_net_4_without_a_new_leader_sampled_is_not_the_seed():
    views = [view(t / 5, b, 1) for t in range(50) for b in (1, 2, 3)]
    finding = split_brain_bound(net_4_info(), audit_result(lost=3, lost_acked_last_ms=T0 + 100), views)
    assert finding.problem == "no new leader was sampled"


class _StubRun:
    """What net_4 asks of a Run, recording how long it holds the cut after the election."""

    def __init__(self) -> None:
        self.held: list[float] = []
        self.notes: list[str] = []
        self.cluster = type("C", (), {"overrides": dict(LAB_BROKER_CONFIG), "brokers": {1: 0, 2: 0, 3: 0}})()
        self.network = type("N", (), {"cut_both": lambda *a: None, "heal": lambda *a: None})()

    def leader(self) -> int:
        return 1

    def begin(self, label: str, brokers: list[int]) -> dict:
        return {}

    def end(self, fault: dict) -> None:
        pass

    def wait_new_leader(self, old: int, timeout_s: float) -> int:
        return 3

    def wait_isr(self, *args, **kwargs) -> None:
        pass

    def hold(self, seconds: float) -> None:
        self.held.append(seconds)


def test_net_4_holds_the_cut_beyond_the_bound_so_that_a_leader_acknowledging_throughout_is_seen():
    run = _StubRun()
    net_4(run)
    bound, _ = split_brain_bound_ms(LAB_BROKER_CONFIG)
    assert run.held == [bound / 1000 + 2]


# ---------------------------------------------------------------------------- LOSS-6


def test_loss_6_counts_the_writes_acknowledged_before_the_disk_loss():
    acked = [(T0 + i, f"p0-{i:09d}") for i in range(457)] + [(T0 + 10_000 + i, f"p1-{i:09d}") for i in range(312)]
    kept = {v for t, v in acked if t >= T0 + 10_000}
    finding = disk_loss_account(acked, kept, lost_at_ms=T0 + 5000)
    assert finding.problem is None
    assert finding.words == ("457 of 457 writes acknowledged before the disk loss lost (all of them); "
                             "0 of 312 acknowledged after it lost")


def test_loss_6_says_how_many_writes_acknowledged_before_the_disk_loss_survived():
    acked = [(T0 + i, f"p0-{i:09d}") for i in range(457)]
    kept = {f"p0-{i:09d}" for i in range(7)}
    finding = disk_loss_account(acked, kept, lost_at_ms=T0 + 5000)
    assert finding.words == ("450 of 457 writes acknowledged before the disk loss lost, 7 survived; "
                             "0 of 0 acknowledged after it lost")
    assert finding.problem == "7 of 457 writes acknowledged before the disk loss survived"


def test_loss_6_with_nothing_acknowledged_before_the_disk_loss_is_not_the_seed():
    finding = disk_loss_account([(T0 + 9000, "p0-000000000")], set(), lost_at_ms=T0 + 5000)
    assert finding.problem == "nothing was acknowledged before the disk was lost"


def test_loss_6_verdict_from_a_run_folder(tmp_path):
    """The check reads the run's own files (operations, final logs): 300 writes acknowledged
    before the disk loss, all gone; 200 after it, kept by the final leader below its HW."""
    lost_at = T0 + 5000
    ops = [(T0 + i, 0, "ok", f"p0-{i:09d}", 0, i, "") for i in range(300)]
    ops += [(lost_at + 1000 + i, 0, "ok", f"p0-{300 + i:09d}", 0, i, "") for i in range(200)]
    history.write_ops(tmp_path, ops)
    history.write_logs(tmp_path, {b: [(0, 0, 199, 1, "d", [(i, f"p0-{300 + i:09d}") for i in range(200)])]
                                  for b in (1, 2, 3)})
    history.write_final(tmp_path, [(0, 2, 200)])
    info = {"scenario": "LOSS-6", "run_dir": str(tmp_path), "error": None, "started_ms": T0,
            "faults": [{"label": "followers [1, 3] cut from leader 2", "start_ms": T0 + 4000, "end_ms": lost_at},
                       {"label": "leader 2 dies and loses its disk", "start_ms": lost_at, "end_ms": lost_at + 900}]}
    finding = total_loss(info)
    assert finding.words.startswith("300 of 300 writes acknowledged before the disk loss lost (all of them)")
    ok, line = verdict(SCENARIOS["LOSS-6"], info, audit_result(lost=300, acked=500))
    assert ok, line
    assert "every write acknowledged before the leader lost its disk" in line
    assert "300 lost of 500 acknowledged" in line and "300 of 300 writes acknowledged before the disk loss lost" in line
    assert "expected loss of every acknowledged write" not in line


def test_elr_1_verdict_from_a_run_folder_keeps_every_write_acknowledged_before_the_disk_loss(tmp_path):
    """ELR-1 (LOSS-6 with eligible leader replicas): the final leader, elected from the ELR, holds
    the 300 writes acknowledged before the disk loss and the 200 after it; one missing fails it."""
    lost_at = T0 + 5000
    ops = [(T0 + i, 0, "ok", f"p0-{i:09d}", 0, i, "") for i in range(300)]
    ops += [(lost_at + 1000 + i, 0, "ok", f"p0-{300 + i:09d}", 0, 300 + i, "") for i in range(200)]
    history.write_ops(tmp_path, ops)
    history.write_final(tmp_path, [(0, 3, 500)])
    info = {"scenario": "ELR-1", "run_dir": str(tmp_path), "error": None, "started_ms": T0,
            "faults": [{"label": "followers [2, 3] cannot send requests to leader 1", "start_ms": T0 + 4000,
                        "end_ms": lost_at},
                       {"label": "leader 1 dies and loses its disk", "start_ms": lost_at, "end_ms": lost_at + 900}]}
    history.write_logs(tmp_path, {b: [(0, 0, 499, 1, "d", [(i, f"p0-{i:09d}") for i in range(500)])] for b in (1, 2, 3)})
    ok, line = verdict(SCENARIOS["ELR-1"], info, audit_result(lost=0, acked=500))
    assert ok, line
    assert "300 of 300 writes acknowledged before the disk loss kept" in line
    history.write_logs(tmp_path, {b: [(0, 0, 498, 1, "d", [(i, f"p0-{i:09d}") for i in range(1, 500)])]
                                  for b in (1, 2, 3)})
    assert disk_loss_kept(info).problem == "1 writes acknowledged before the disk loss lost"


def test_lab_run_elr_names_the_variant_and_refuses_a_scenario_without_one():
    import argparse

    from strandline.cli import lab
    from strandline.errors import StrandlineError

    args = argparse.Namespace(action="run", scenario="NET-1", elr=True, seed=1, data_dir=None, trials=1,
                              cluster="strandline")
    with pytest.raises(StrandlineError, match="--elr: NET-1 has no variant with eligible leader replicas "
                                              r"\(those that have: LOSS-6, TXN\)"):
        lab.main(args)
    assert ELR_VARIANTS == {"LOSS-6": "ELR-1", "TXN": "TXN-ELR"}
    from strandline.lab.txn import SCENARIOS as TXN_SCENARIOS, txn_trial

    assert TXN_SCENARIOS["TXN-ELR"].broker_config == {"eligible.leader.replicas.enable": "true"}
    assert TXN_SCENARIOS["TXN-ELR"].drive is txn_trial and not TXN_SCENARIOS["TXN-ELR"].control
    assert SCENARIOS["ELR-1"].broker_config == {"eligible.leader.replicas.enable": "true"}
    assert SCENARIOS["ELR-1"].expect == "no-loss" and SCENARIOS["ELR-1"].needs_network


# ---------------------------------------------------------------------------- what every verdict promises


@pytest.mark.parametrize("count", ["duplicated", "reordered", "unexpected"])
def test_a_no_loss_verdict_requires_no_duplicated_reordered_or_unexpected_record(count):
    """SAFE-1 and the no-loss scenarios write with idempotent producers: a record written twice or
    out of its producer's order is not the seed's outcome, nor one no producer ever sent."""
    for scenario in (SAFE, SCENARIOS["NET-6"], SCENARIOS["DUR-3"]):
        assert scenario.idempotence
        ok, line = verdict(scenario, {"error": None}, audit_result(**{count: 3}))
        assert not ok and f"NOT as the seed says: 3 {count}, where the scenario promises" in line, line
        assert verdict(scenario, {"error": None}, audit_result())[0]


def test_without_idempotence_only_unexpected_records_are_refused():
    """acks=1 without idempotence (LOSS-1) may write a record twice when an answer is lost; a
    record no producer sent is never right."""
    scenario = SCENARIOS["LOSS-1"]
    assert scenario.promised_zero() == ("unexpected",)
    ok, line = verdict(scenario, {"error": None}, audit_result(lost=5, duplicated=2))
    assert ok and "2 duplicated" in line, line
    ok, line = verdict(scenario, {"error": None}, audit_result(lost=5, unexpected=1))
    assert not ok and "1 unexpected, where the scenario promises every record read was sent" in line, line


def test_the_verdict_says_the_expectation_it_missed_alongside_a_broken_promise():
    scenario = SCENARIOS["NET-1"]
    ok, line = verdict(scenario, {"error": None}, audit_result(lost=4, duplicated=1))
    assert not ok
    assert line.endswith("NOT as the seed says: expected no loss; 1 duplicated, where the scenario promises "
                         "every record read was sent, once and in its producer's order"), line
