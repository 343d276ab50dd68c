"""TXN on real processes: transactional producers and read_committed / read_uncommitted consumers
under a coordinator failover, audited by the Spark job; and the control, a hanging transaction
(KIP-890's defence off), which the audit must find.

Both runs are audited in one Spark job. The TXN trial here is short (one coordinator failover);
``strandline lab run TXN --trials N`` adds the random mixes of faults. Its faults include none
that needs root, but the lab's partition runs do: without root both tests skip with the reason
(under CI=true they fail: `make test` installs what they need)."""

from __future__ import annotations

import dataclasses

import pytest

from strandline.lab.network import unavailable_reason
from strandline.lab.run import Run
from strandline.lab.txn import SCENARIOS, coordinator_failover, execute_txn, txn_verdict
from strandline.lab.txn_audit import ANOMALIES
from tests.conftest import missing_prerequisite

pytestmark = pytest.mark.integration
NO_NETWORK = unavailable_reason()


def failover_then_commits(run: Run) -> None:
    """TXN's short trial: a coordinator failover, then 20 more values committed."""
    coordinator_failover(run)
    run.wait_acks(20, timeout_s=60)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from strandline.lab.audit import spark_session
    from strandline.lab.txn_audit import audit_txn

    if NO_NETWORK:
        missing_prerequisite(f"TXN: {NO_NETWORK}")
    root = tmp_path_factory.mktemp("txn")
    short = dataclasses.replace(SCENARIOS["TXN"], drive=failover_then_commits)
    infos = {"TXN": execute_txn(short, root / "TXN", 11),
             "TXN-hang": execute_txn(SCENARIOS["TXN-hang"], root / "TXN-hang", 11)}
    spark = spark_session(log_path=root / "spark.log")
    try:
        results = audit_txn([root / name for name in infos], spark=spark)
    finally:
        spark.stop()
    return {name: (info, result) for (name, info), result in zip(infos.items(), results)}


def test_txn_a_coordinator_failover_leaves_no_anomaly(runs):
    info, result = runs["TXN"]
    ok, line = txn_verdict(SCENARIOS["TXN"], info, result)
    assert info["error"] is None, line
    assert result["transactions"].get("committed", 0) > 10 and result["transactions"].get("aborted", 0) > 0, line
    assert {a: result[a] for a in ANOMALIES} == dict.fromkeys(ANOMALIES, 0), line
    assert result["reads"].get("read_committed", 0) > 0 and result["reads"].get("read_uncommitted", 0) > 0, line
    assert result["reads"].get("aborted values read_uncommitted", 0) > 0, line     # aborted records were written
    assert ok, line


def test_txn_hang_without_verification_the_checker_finds_the_hanging_transaction(runs):
    info, result = runs["TXN-hang"]
    ok, line = txn_verdict(SCENARIOS["TXN-hang"], info, result)
    assert info["error"] is None, line
    assert info["late_produce_error"] == 0, line              # appended: verification is off
    # what stands behind the open transaction on partition 0 is never read_committed
    assert result["lost"] > 0 and result["never_read"] > 0 and result["torn"] > 0, line
    assert result["aborted_reads"] == 0 and result["duplicated"] == 0 and result["unexpected"] == 0, line
    assert ok and "the checker can fail" in line, line
