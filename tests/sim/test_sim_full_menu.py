"""The explorer with its whole menu (what ``strandline sim explore`` runs by default): every family
of faults, every operator's request (partition moves, added partitions, a topic deleted and made
again, DeleteRecords) and consumers reading from followers, in each configuration. A fixed range
of seeds per configuration must break no invariant (SAFE-1) or be caught losing data (LOSS-1,
LOSS-2, EPO-4); the checks keep catching what they must with DeleteRecords excusing the records
it deleted, and no more."""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from strandline.log.log import Log
from strandline.replication.partition import Partition
from strandline.sim import txn_checker, txn_workload
from strandline.sim.explore import CONFIGS, Explorer, run_seed
from strandline.sim.menu import EVERYTHING, FULL_MENU, run_options
from tests.conftest import strandline_cmd


@pytest.mark.parametrize("config, seeds", [("safe", range(1, 9)), ("compact", range(1, 5)), ("txn", range(1, 5))])
def test_safe_1_holds_with_the_whole_menu(config, seeds):
    drawn: Counter[str] = Counter()
    for seed in seeds:
        explorer = Explorer(seed, CONFIGS[config], **FULL_MENU)
        result = explorer.run()
        assert result.ok, f"seed {seed} [{config}]: {result.all_violations}\n" + "\n".join(result.trace)
        assert result.acked > 0 and result.faults > 10
        drawn += explorer.nemesis.drawn
    expected = set(EVERYTHING) - {"rack-reads", "isr-power-loss"} - ({"power-loss"} if config == "txn" else set())
    assert set(drawn) >= expected, drawn


@pytest.mark.parametrize("config", ["acks1", "unclean", "legacy"])
def test_configurations_that_must_lose_data_are_caught_with_the_whole_menu(config):
    for seed in range(1, 21):
        result = run_seed(seed, config, **FULL_MENU)
        if result.lost:
            assert "acknowledged writes survive" in "; ".join(result.all_violations)
            return
    pytest.fail(f"no seed of {config} in 1-20 lost an acknowledged write")


def test_every_family_is_on_by_default_and_each_can_be_left_out():
    assert FULL_MENU == {"reassign": True, "add_partitions": True, "recreate": True, "delete_records": True,
                         "rack_reads": True, "without": frozenset()}
    options = run_options({"network", "delete-records"})
    assert options["without"] == {"network"} and options["delete_records"] is False and options["reassign"]
    with pytest.raises(ValueError, match="unknown: netwrok"):
        run_options({"netwrok"})
    explorer = Explorer(3, CONFIGS["safe"], duration_ms=20000, **run_options(set(EVERYTHING) - {"clock"}))
    explorer.run()
    drawn = {line.split("nemesis: ")[1].split()[0] for line in explorer.trace if "nemesis: " in line}
    assert drawn <= {"clock", "healing"}, drawn


def deletes_one_more(monkeypatch) -> None:
    """A broker that deletes one record more than DeleteRecords asks."""
    real = Log.maybe_increment_log_start_offset

    def one_more(self, offset):
        return real(self, min(offset + 1, self.log_end_offset))
    monkeypatch.setattr(Log, "maybe_increment_log_start_offset", one_more)


def test_a_record_deleted_beyond_the_offset_asked_is_caught(monkeypatch):
    """DeleteRecords excuses the records below the offset asked, not one more: acknowledged
    records lost there are caught."""
    deletes_one_more(monkeypatch)
    result = run_seed(5, "safe", duration_ms=30000, delete_records=True)
    assert any(v.startswith(("acknowledged writes survive", "consumed records survive"))
               for v in result.all_violations), result.all_violations


def test_with_transactions_a_record_deleted_beyond_the_offset_asked_is_caught(monkeypatch):
    deletes_one_more(monkeypatch)
    result = run_seed(1, "txn", **FULL_MENU)
    assert any(v.startswith(("committed transactions are whole", "acknowledged writes are visible",
                             "read_committed records stay", "an undecided transaction is all or nothing"))
               for v in result.all_violations), result.all_violations


def test_with_records_deleted_the_transaction_checks_still_catch_an_lso_past_open_transactions(monkeypatch):
    monkeypatch.setattr(Partition, "last_stable_offset", lambda self: self.high_watermark)
    result = run_seed(2, "txn", duration_ms=20000, **FULL_MENU)
    assert any(v.startswith("read_committed shows only committed transactions") for v in result.all_violations), \
        result.all_violations


def test_with_records_deleted_the_transaction_checks_still_catch_aborted_records(monkeypatch):
    monkeypatch.setattr(txn_workload, "_aborted", lambda answer: [])
    monkeypatch.setattr(txn_checker, "_aborted", lambda answer: [])
    result = run_seed(2, "txn", duration_ms=20000, **FULL_MENU)
    assert any(v.startswith("aborted transactions stay invisible") for v in result.all_violations), \
        result.all_violations


def test_the_command_runs_the_whole_menu_and_prints_what_a_replay_leaves_out():
    lossy = subprocess.run(strandline_cmd("sim", "explore", "--seeds", "3", "--config", "acks1", "--duration-ms",
                                          "30000", "--without", "recreate", "--without", "rack-reads,clock"),
                           capture_output=True, text=True, timeout=300)
    lines = lossy.stdout.strip().splitlines()
    assert lossy.returncode == 1 and lines[-1].endswith("violations"), lossy.stdout + lossy.stderr
    assert all(line.endswith("--config acks1 --without clock,recreate,rack-reads --duration-ms 30000)")
               for line in lines[:-1]), lines
    typo = subprocess.run(strandline_cmd("sim", "explore", "--seeds", "1", "--without", "recreat"),
                          capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and not typo.stdout
    assert typo.stderr.startswith("strandline sim explore: --without: unknown: recreat (the menu: clock,")
