"""The transaction audit's rules (strandline.lab.txn_audit) over small histories written by hand.

A clean history (two committed transactions of producer 0 over partitions 0 and 1, one aborted
over 0 and 2, one of unknown outcome of which nothing was written; a read_committed consumer
that read every committed value once in order, a read_uncommitted one that read everything) must
give no anomaly; each variant breaks one rule and must be counted by it. All histories are audited
in one Spark job (one JVM for the module)."""

from __future__ import annotations

import pytest

from strandline.lab.txn import FINAL_READ, POLLS, TXN_WRITES, _write, txn_verdict, SCENARIOS
from strandline.lab.txn_audit import ANOMALIES

pytest.importorskip("pyspark")

A0, A1 = "t0-000000-0", "t0-000000-1"          # committed: partitions 0 and 1
X0, X2 = "t0-000001-0", "t0-000001-2"          # aborted: partitions 0 and 2
B0, B1 = "t0-000002-0", "t0-000002-1"          # committed: partitions 0 and 1
U0, U1 = "t0-000003-0", "t0-000003-1"          # unknown outcome: partitions 0 and 1

WRITES = [(1.0, 2.0, 0, "lab-tx-0", 0, "committed", "", A0, 0, 0), (1.0, 2.0, 0, "lab-tx-0", 0, "committed", "", A1, 1, 1),
          (3.0, 4.0, 0, "lab-tx-0", 1, "aborted", "on purpose", X0, 0, 10),
          (3.0, 4.0, 0, "lab-tx-0", 1, "aborted", "on purpose", X2, 2, 11),
          (5.0, 6.0, 0, "lab-tx-0", 2, "committed", "", B0, 0, 20), (5.0, 6.0, 0, "lab-tx-0", 2, "committed", "", B1, 1, 21),
          (7.0, 8.0, 0, "lab-tx-0", 3, "unknown", "_TIMED_OUT", U0, 0, 30),
          (7.0, 8.0, 0, "lab-tx-0", 3, "unknown", "_TIMED_OUT", U1, 1, 31)]
# the log: partition 0 holds A0 at 0, X0 at 1, its abort marker at 2, B0 at 3; partition 1 A1 at 0, B1 at 2
FINAL = [(0, 0, A0), (0, 3, B0), (1, 0, A1), (1, 2, B1)]
UNCOMMITTED = [(0, 0, A0), (0, 1, X0), (0, 3, B0), (1, 0, A1), (1, 2, B1), (2, 0, X2)]


def polls(consumer: int, isolation: str, read: list[tuple[int, int, str]]) -> list[tuple]:
    return [(consumer, isolation, seq, 10.0 + seq, p, o, v) for seq, (p, o, v) in enumerate(read)]


CLEAN = {"writes": WRITES, "final": FINAL,
         "polls": polls(0, "read_committed", FINAL) + polls(1, "read_uncommitted", UNCOMMITTED)}


def variant(**changes) -> dict:
    return {**CLEAN, **changes}


def committed_reads(read: list[tuple[int, int, str]]) -> list[tuple]:
    return polls(0, "read_committed", read) + polls(1, "read_uncommitted", UNCOMMITTED)


# name: (history, the anomaly it must show)
HISTORIES = {
    "clean": (CLEAN, None),
    "aborted-read": (variant(polls=committed_reads([(0, 0, A0), (0, 1, X0), (0, 3, B0), (1, 0, A1), (1, 2, B1)])),
                     "aborted_reads"),
    "lost": (variant(final=[(0, 0, A0), (1, 0, A1), (1, 2, B1)]), "lost"),
    "torn-final": (variant(final=FINAL + [(0, 5, U0)]), "torn"),
    "torn-read": (variant(polls=committed_reads([(0, 0, A0), (0, 3, B0), (1, 0, A1)])), "torn"),
    "poll-skip": (variant(polls=committed_reads([(0, 0, A0), (0, 3, B0), (1, 2, B1)])), "poll_skips"),
    "nonmonotonic-poll": (variant(polls=committed_reads(FINAL[:2] + [(0, 0, A0)] + FINAL[2:])),
                          "nonmonotonic_polls"),
    "nonmonotonic-offsets": (variant(final=[(0, 0, B0), (0, 3, A0), (1, 0, A1), (1, 2, B1)]), "nonmonotonic_offsets"),
    "duplicated": (variant(final=FINAL + [(0, 4, A0)]), "duplicated"),
    "never-read": (variant(polls=polls(1, "read_uncommitted", UNCOMMITTED)), "never_read"),
    "unexpected": (variant(final=FINAL + [(2, 3, "t7-000000-0")]), "unexpected"),
}


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    from strandline.lab.audit import spark_session
    from strandline.lab.txn_audit import audit_txn

    root = tmp_path_factory.mktemp("txn-histories")
    dirs = []
    for name, (h, _) in HISTORIES.items():
        d = root / name
        d.mkdir()
        _write(d / "txn_writes.parquet", TXN_WRITES, h["writes"])
        _write(d / "polls.parquet", POLLS, h["polls"])
        _write(d / "final_read.parquet", FINAL_READ, h["final"])
        dirs.append(d)
    spark = spark_session(log_path=root / "spark.log")
    try:
        results = audit_txn(dirs, spark=spark)
    finally:
        spark.stop()
    return {d.name: r for d, r in zip(dirs, results)}


def test_a_clean_history_has_no_anomaly(audited):
    result = audited["clean"]
    assert {a: result[a] for a in ANOMALIES} == dict.fromkeys(ANOMALIES, 0), result
    assert result["transactions"] == {"committed": 2, "aborted": 1, "unknown": 1}
    assert result["reads"] == {"read_committed": 4, "read_uncommitted": 6, "final": 4,
                               "aborted values read_uncommitted": 2}
    ok, line = txn_verdict(SCENARIOS["TXN"], {"error": None}, result)
    assert ok and line.endswith("as expected"), line


@pytest.mark.parametrize("name", [n for n in HISTORIES if n != "clean"])
def test_each_rule_counts_its_anomaly(audited, name):
    result = audited[name]
    anomaly = HISTORIES[name][1]
    assert result[anomaly] >= 1, result
    assert result["examples"][anomaly], result
    ok, line = txn_verdict(SCENARIOS["TXN"], {"error": None}, result)
    assert not ok and "NOT as expected" in line, line


def test_the_exact_counts_of_a_few_rules(audited):
    assert audited["lost"]["lost"] == 1 and audited["lost"]["torn"] == 1          # B0 gone, B1 alone
    assert audited["poll-skip"]["poll_skips"] == 1                                 # A1 at 1-0 was jumped over
    assert audited["poll-skip"]["examples"]["poll_skips"] == [f"consumer 0 skipped {A1} at 1-0"]
    assert audited["never-read"]["never_read"] == 4                               # A0, A1, B0, B1
    assert audited["torn-final"]["torn"] == 1 and audited["torn-final"]["lost"] == 0  # U0 without U1


def test_the_control_passes_only_when_the_checker_fails(audited):
    hang = SCENARIOS["TXN-hang"]
    info = {"error": None, "late_produce_error": 0}
    assert not txn_verdict(hang, info, audited["clean"])[0]
    ok, line = txn_verdict(hang, info, audited["lost"])
    assert ok and "the checker can fail" in line, line
    assert not txn_verdict(hang, {"error": None, "late_produce_error": 48}, audited["lost"])[0]
    verified = SCENARIOS["TXN-hang-verified"]
    assert txn_verdict(verified, {"error": None, "late_produce_error": 48}, audited["clean"])[0]
    assert not txn_verdict(verified, {"error": None, "late_produce_error": 0}, audited["clean"])[0]
