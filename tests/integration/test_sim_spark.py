"""``strandline sim explore --spark``: the explorer's seeds as Spark tasks (local mode), with the
same lines and exit status as a run on one machine."""

from __future__ import annotations

import subprocess

from tests.conftest import strandline_cmd


def test_the_explorer_on_spark_prints_what_it_prints_alone():
    # the seeds' own ISR writes (2.6): seeds 1-4 of acks1 then lose acknowledged writes, so both runs exit 1
    args = ("sim", "explore", "--seeds", "4", "--first-seed", "1", "--config", "acks1", "--duration-ms", "20000",
            "--inter-broker-protocol", "2.6")
    alone = subprocess.run(strandline_cmd(*args), capture_output=True, text=True, timeout=600)
    spark = subprocess.run(strandline_cmd(*args, "--spark"), capture_output=True, text=True, timeout=600)
    assert alone.returncode == spark.returncode == 1, alone.stdout + alone.stderr + spark.stdout + spark.stderr
    assert spark.stdout == alone.stdout
    assert spark.stdout.strip().splitlines()[-1].startswith("4 seeds, ")
    assert "seeds per second per core" in spark.stderr and "WARN" not in spark.stderr


def test_spark_and_processes_are_refused_together_in_one_line():
    refused = subprocess.run(strandline_cmd("sim", "explore", "--seeds", "2", "--spark", "--processes", "2"),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and not refused.stdout
    assert refused.stderr.strip() == ("strandline sim explore: --spark and --processes are two ways to run seeds "
                                      "at once: give one")
