"""benchmarks/kafka_compare.py's pure parts: reading both producer tools' final lines, and the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import kafka_compare as kc  # noqa: E402

from strandline.load.stats import Window, final_line  # noqa: E402

#: the last line of Kafka 3.9's ProducerPerformance
KAFKA_LINE = ("100000 records sent, 11190.7 records/sec (10.93 MB/sec), 1138.35 ms avg latency, 1309.00 ms max "
              "latency, 1208 ms 50th, 1290 ms 95th, 1303 ms 99th, 1309 ms 99.9th.")


def test_reads_producer_performance_final_line() -> None:
    out = "49981 records sent, 9996.2 records/sec (9.76 MB/sec), 12.0 ms avg latency, 300.0 ms max latency.\n" + KAFKA_LINE
    assert kc.final_figures(out, "ProducerPerformance") == {"mb_s": 10.93, "p50": 1208.0, "p99": 1303.0,
                                                            "p999": 1309.0, "max": 1309.0}


def test_reads_bench_produce_final_line() -> None:
    w = Window()
    for ms in range(1, 1001):
        w.record(1024, float(ms))
    out = final_line("sent", w, 2.0, [float(ms) for ms in range(1, 1001)])
    figures = kc.final_figures(out, "bench produce")
    assert (figures["p50"], figures["p99"], figures["p999"], figures["max"]) == (500, 990, 999, 1000)
    assert figures["mb_s"] == pytest.approx(1000 * 1024 / 2 / 1024 / 1024, abs=0.01)


def test_no_final_line_is_not_measured() -> None:
    with pytest.raises(kc.NotMeasured, match="no final line"):
        kc.final_figures("org.apache.kafka.common.errors.TimeoutException: boom", "ProducerPerformance")


def test_table_ratios_targets_and_figures_not_measured() -> None:
    strandline: kc.Results = {"bench_mb_s": 80.0, "paced_p99": 12.0, "rss_loaded": 500.0,
                              "failover_s": "not measured: topics create failed: boom"}
    kafka: kc.Results = {"bench_mb_s": 100.0, "paced_p99": 24.0, "rss_loaded": 1200.0, "failover_s": 19.0}
    lines = kc.table({kc.STRANDLINE: [strandline], kc.KAFKA: [kafka]})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines}
    assert rows["saturated produce, `bench produce --processes 2`"].endswith(
        "| 80.0 MB/s | 100 MB/s | 0.80x | >= 1.00x | **missed** |")
    assert rows["10 MB/s `bench produce`: p99"].endswith("| 12.0 ms | 24.0 ms | 0.50x | <= 1.00x | met |")
    # 500 MB is more than a third of 1,200 MB
    assert rows["RSS of the 3 brokers after the loads (summed)"].endswith("| 0.42x | <= 0.33x | **missed** |")
    assert rows["SIGKILL of the controller -> its partitions led elsewhere"].endswith("| - | 19.0 s | - | <= 1.00x |  |")
    assert ("SIGKILL of the controller -> its partitions led elsewhere: Strandline not measured: topics create "
            "failed: boom") in lines
