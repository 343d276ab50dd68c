"""Spark's own Kafka connector (spark-sql-kafka-0-10, unchanged, fetched by
tests/integration/spark_kafka/pom.xml: see tests/integration/spark_connector.py) against a 3-broker
Strandline, and the same queries through Strandline's ``format("strandline")`` data source: each
query gives the same rows through both (SPK-1).

One cluster and one SparkSession (in a JVM of its own, with the connector's jars in spark.jars) for
the module.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from tests.conftest import Cluster, cluster_fixture, poll_until
from tests.integration.maven_build import built, skip_or_reason
from tests.integration.replication_helpers import create_topic
from tests.integration.spark_connector import connector_jars, fetch, session_with_connector, stop_spark_jvm
from tests.integration.spark_session import spark_fixture, write_transactions

pytestmark = pytest.mark.integration


def _fetched():
    import pyspark

    version, run = fetch(pyspark.__version__)
    return version, skip_or_reason(run)


CONNECTOR_VERSION, FETCHED = _fetched()
FORMATS = ("kafka", "strandline")


sc = cluster_fixture("spark-kafka", 3, overrides=["log.retention.check.interval.ms=300"])


def _session_with_connector() -> Any:
    jars = connector_jars(built(FETCHED))
    assert any(j.name.startswith("spark-sql-kafka-0-10_2.13-") for j in jars), jars
    session = session_with_connector(jars, "strandline-spark-kafka-connector")
    print(f"spark {session.version}, spark-sql-kafka-0-10 {CONNECTOR_VERSION}: {[j.name for j in jars]}")
    return session


# the modules after this one start a JVM without the connector
spark = spark_fixture("strandline-spark-kafka-connector", _session_with_connector, lambda session: stop_spark_jvm())


def read(spark, fmt: str, c: Cluster, **options):
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", c.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def stream(spark, fmt: str, c: Cluster, **options):
    r = spark.readStream.format(fmt).option("kafka.bootstrap.servers", c.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def same_through_both(spark, c: Cluster, **options) -> list[tuple]:
    """The rows of one batch query, read through both formats: equal, or the test fails."""
    through = {fmt: rows(read(spark, fmt, c, **options)) for fmt in FORMATS}
    assert through["kafka"] == through["strandline"], \
        (len(through["kafka"]), len(through["strandline"]),
         sorted(set(through["kafka"]) ^ set(through["strandline"]))[:5])
    return through["kafka"]


def produce(c: Cluster, topic: str, n: int, prefix: str, compression: str = "none", **extra) -> list[bytes]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "compression.type": compression, "linger.ms": 5, "acks": "all",
                  **extra})
    values = [f"{prefix}-{i:06d}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v, headers=[("n", str(i).encode())])
    assert p.flush(60) == 0
    return values


def test_batch_reads_and_writes_give_the_same_rows_through_both(sc, spark):
    """A batch read (every codec, headers, an assigned offset range) and a batch write (key, value,
    partition and headers columns) through Spark's connector and through format("strandline")."""
    create_topic(sc, "batch", partitions=3, min_isr=2)
    values = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        values += produce(sc, "batch", 300, codec, codec)
    everything = same_through_both(spark, sc, subscribe="batch", includeHeaders="true")
    assert sorted(r[1] for r in everything) == sorted(values)
    assert len({(r[3], r[4]) for r in everything}) == len(values)
    assert [r[7] for r in everything if r[1] == b"zstd-000007"] == [[("n", b"7")]]
    ranged = same_through_both(spark, sc, assign=json.dumps({"batch": [0, 2]}),
                               startingOffsets=json.dumps({"batch": {"0": 5, "2": -2}}),
                               endingOffsets=json.dumps({"batch": {"0": 25, "2": 40}}))
    assert sorted((r[3], r[4]) for r in ranged) == [(0, o) for o in range(5, 25)] + [(2, o) for o in range(40)]

    source = spark.createDataFrame(
        [(f"k{i}", f"value-{i}", i % 3, [("h", str(i).encode())]) for i in range(600)],
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>")
    for fmt in FORMATS:
        create_topic(sc, f"written-{fmt}", partitions=3, min_isr=2)
        (source.write.format(fmt).option("kafka.bootstrap.servers", sc.bootstrap).option("topic", f"written-{fmt}")
         .mode("append").save())
    written = {fmt: rows(read(spark, "kafka", sc, subscribe=f"written-{fmt}", includeHeaders="true")
                         .selectExpr("partition", "CAST(key AS STRING)", "CAST(value AS STRING)", "headers"))
               for fmt in FORMATS}
    assert written["kafka"] == written["strandline"]
    assert sorted(written["kafka"]) == sorted((i % 3, f"k{i}", f"value-{i}", [("h", str(i).encode())])
                                              for i in range(600))


def test_a_streaming_read_restarted_from_its_checkpoint_reads_every_record_once_through_both(sc, spark, tmp_path):
    create_topic(sc, "stream", partitions=2, min_isr=2)
    first = produce(sc, "stream", 2000, "a", "lz4")

    def run(fmt: str) -> None:
        query = (stream(spark, fmt, sc, subscribe="stream", startingOffsets="earliest", maxOffsetsPerTrigger="700")
                 .writeStream.format("parquet").option("path", str(tmp_path / fmt))
                 .option("checkpointLocation", str(tmp_path / f"ck-{fmt}")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None

    for fmt in FORMATS:
        run(fmt)
    second = produce(sc, "stream", 1000, "b", "gzip")
    for fmt in FORMATS:
        run(fmt)                            # from the checkpoint: the new records only
    out = {fmt: rows(spark.read.parquet(str(tmp_path / fmt)).select("partition", "offset", "key", "value"))
           for fmt in FORMATS}
    assert out["kafka"] == out["strandline"]
    assert len({(r[0], r[1]) for r in out["kafka"]}) == len(out["kafka"]) == 3000
    assert sorted(r[3] for r in out["kafka"]) == sorted(first + second)
    batches = {fmt: len(os.listdir(tmp_path / f"ck-{fmt}" / "commits")) for fmt in FORMATS}
    assert batches["kafka"] == batches["strandline"] >= 5, batches      # 700 a trigger: 3 + 2 micro-batches


def test_a_streaming_write_writes_the_same_records_through_both(sc, spark, tmp_path):
    create_topic(sc, "to-copy", partitions=3, min_isr=2)
    values = produce(sc, "to-copy", 1500, "c", "snappy")
    for fmt in FORMATS:
        create_topic(sc, f"copied-{fmt}", partitions=3, min_isr=2)
        query = (stream(spark, "kafka", sc, subscribe="to-copy", startingOffsets="earliest", includeHeaders="true",
                        maxOffsetsPerTrigger="500")
                 .selectExpr("key", "value", "partition", "headers")
                 .writeStream.format(fmt).option("kafka.bootstrap.servers", sc.bootstrap)
                 .option("topic", f"copied-{fmt}").option("checkpointLocation", str(tmp_path / f"ck-{fmt}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
    copied = {fmt: rows(read(spark, "kafka", sc, subscribe=f"copied-{fmt}", includeHeaders="true")
                        .select("partition", "key", "value", "headers")) for fmt in FORMATS}
    source = rows(read(spark, "kafka", sc, subscribe="to-copy", includeHeaders="true")
                  .select("partition", "key", "value", "headers"))
    assert copied["kafka"] == copied["strandline"] == source
    assert sorted(r[2] for r in source) == sorted(values)


def test_read_committed_hides_aborted_and_open_transactions_through_both(sc, spark):
    """kafka.isolation.level=read_committed: committed transactions only, up to the last stable
    offset; read_uncommitted (the default) reads aborted records too."""
    create_topic(sc, "txns", partitions=2, min_isr=2)
    producer = write_transactions(sc.bootstrap, "txns", "spark-connector-txns")
    try:
        committed = same_through_both(spark, sc, subscribe="txns", **{"kafka.isolation.level": "read_committed"})
        assert sorted(r[1] for r in committed) == sorted(b"%d-%02d" % (n, i) for n in (0, 2) for i in range(50))
        everything = same_through_both(spark, sc, subscribe="txns")
        assert len(everything) == 201 and {b"1-00", b"3-49", b"open"} <= {r[1] for r in everything}
    finally:
        producer.commit_transaction(30)
    after = same_through_both(spark, sc, subscribe="txns", **{"kafka.isolation.level": "read_committed"})
    assert len(after) == 101 and b"open" in {r[1] for r in after}


def test_starting_offsets_by_timestamp_pick_the_same_records_through_both(sc, spark):
    from confluent_kafka import Producer

    create_topic(sc, "timed", partitions=2, min_isr=2)
    t0 = 1_767_225_600_000                                  # 2026-01-01 00:00 UTC
    p = Producer({"bootstrap.servers": sc.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(200):
        p.produce("timed", value=b"t-%03d" % i, partition=i % 2, timestamp=t0 + i * 1000)
    assert p.flush(30) == 0
    picked = same_through_both(spark, sc, subscribe="timed",
                               startingOffsetsByTimestamp=json.dumps({"timed": {"0": t0 + 100_000,
                                                                                "1": t0 + 150_500}}))
    assert sorted(r[1] for r in picked) == sorted([b"t-%03d" % i for i in range(100, 200, 2)]
                                                  + [b"t-%03d" % i for i in range(151, 200, 2)])
    assert min(r[4] for r in picked if r[3] == 0) == 50 and min(r[4] for r in picked if r[3] == 1) == 75
    one_for_all = same_through_both(spark, sc, subscribe="timed", startingTimestamp=str(t0 + 190_000))
    assert sorted(r[1] for r in one_for_all) == [b"t-%03d" % i for i in range(190, 200)]


def test_fail_on_data_loss_for_records_gone_with_retention_through_both(sc, spark, tmp_path):
    """Records a query would read next are deleted by retention: with failOnDataLoss=true (the
    default) the batch read and the restarted streaming query fail; with false both formats go on
    from the new log start and read the same rows."""
    create_topic(sc, "aged", partitions=1, min_isr=2, configs={"segment.bytes": "2048", "retention.bytes": "4096"})
    produce(sc, "aged", 40, "early", **{"linger.ms": 0, "batch.num.messages": 1})
    checkpoints = {fmt: str(tmp_path / f"ck-{fmt}") for fmt in FORMATS}

    def run(fmt: str, fail_on_data_loss: str):
        query = (stream(spark, fmt, sc, subscribe="aged", startingOffsets="earliest",
                        failOnDataLoss=fail_on_data_loss)
                 .writeStream.format("parquet").option("path", str(tmp_path / fmt))
                 .option("checkpointLocation", checkpoints[fmt]).trigger(availableNow=True).start())
        try:
            query.awaitTermination(180)
        except Exception:
            pass
        return query.exception()

    for fmt in FORMATS:
        assert run(fmt, "true") is None
        assert spark.read.parquet(str(tmp_path / fmt)).count() == 40
    late = produce(sc, "aged", 400, "late", **{"linger.ms": 0, "batch.num.messages": 1})
    earliest = lambda: read(spark, "kafka", sc, subscribe="aged").agg({"offset": "min"}).collect()[0][0]  # noqa: E731
    poll_until(lambda: (earliest() or 0) > 340, 30, interval=0.3, message="retention moved the log start past 340")
    from_zero = json.dumps({"aged": {"0": 0}})
    for fmt in FORMATS:
        with pytest.raises(Exception) as err:
            read(spark, fmt, sc, subscribe="aged", startingOffsets=from_zero).count()
        assert "failOnDataLoss" in str(err.value), (fmt, str(err.value)[:2000])
    skipped = same_through_both(spark, sc, subscribe="aged", startingOffsets=from_zero, failOnDataLoss="false")
    assert skipped and min(r[4] for r in skipped) > 340 and max(r[4] for r in skipped) == 439
    for fmt in FORMATS:
        shutil.copytree(checkpoints[fmt], checkpoints[fmt] + "-before")
        error = run(fmt, "true")
        assert error is not None, fmt
        shutil.rmtree(checkpoints[fmt])
        shutil.copytree(checkpoints[fmt] + "-before", checkpoints[fmt])
        assert run(fmt, "false") is None
    out = {fmt: rows(spark.read.parquet(str(tmp_path / fmt)).select("offset", "value")) for fmt in FORMATS}
    assert out["kafka"] == out["strandline"]
    assert {r[1] for r in skipped} <= {v for _, v in out["kafka"]} and late[-1] in {v for _, v in out["kafka"]}
    assert not {v for _, v in out["kafka"]} & set(late[:300])                 # aged out: skipped, not read
