"""Spark batch read and write throughput (local[2]): the `strandline` data source beside Spark's
own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10, fetched by Maven as
tests/integration/spark_connector.py fetches it, into ~/.cache/strandline).

Starts `strandline up --brokers 3`, fills a 6-partition topic with N records of 100 bytes
(default 5 million), then times batch reads of that topic into Spark's `noop` sink and DataFrame
writes of `--write-rows` rows, through both formats in turn (kafka, strandline, kafka, ...: the
same topic, the same records, interleaved runs), and prints both side by side. Where the connector
cannot be fetched, one line says why and the strandline format is timed alone. A benchmark, not a
test:

    .venv/bin/python benchmarks/spark_read.py [--records 5000000] [--write-rows 1000000] [--runs 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))       # tests.integration

import produce_consume as pc  # noqa: E402


def fill(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1000000,
                         "queue.buffering.max.kbytes": 1048576, "queue.buffering.max.messages": 2000000})
    payload = os.urandom(100)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=i % 6)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(600)
    return time.perf_counter() - start


def rates(rows: int, times: list[float], unit: float, name: str) -> str:
    """Best and median rows per second, and each run's seconds."""
    median = sorted(times)[len(times) // 2]
    return (f"{rows / min(times) / unit:.2f} {name} rows/s best, {rows / median / unit:.2f} {name} median "
            f"({', '.join(f'{t:.2f}' for t in times)} s for {rows} rows)")


def session():
    """A local[2] SparkSession with Spark's Kafka connector on its classpath, and the formats to
    time: ("kafka", "strandline"), or ("strandline",) with one line where the connector cannot be had."""
    import pyspark

    from tests.integration.spark_connector import connector_jars, fetch, session_with_connector

    version, run = fetch(pyspark.__version__)
    if run.failure is not None:
        print(f"Spark's Kafka connector not timed: {run.failure}", flush=True)
        return session_with_connector([], "strandline-bench"), ("strandline",)
    print(f"spark {pyspark.__version__}, spark-sql-kafka-0-10 {version}", flush=True)
    return session_with_connector(connector_jars(run.out), "strandline-bench"), ("kafka", "strandline")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--write-rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=29392)
    parser.add_argument("--zookeeper-port", type=int, default=22481)
    parser.add_argument("--profile", action="store_true", help="profile one read task's decoding in this process")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = tempfile.mkdtemp(prefix="strandline-bench-spark-")
    proc, bootstrap = pc.start_cluster(tmp, args.base_port, args.zookeeper_port, False, brokers=3)
    try:
        pc.TOPIC_OPTIONS[:] = ["--replication-factor", "1"]
        pc.create_topic(bootstrap, "bench", 6)
        pc.create_topic(bootstrap, "sink", 6)
        seconds = fill(bootstrap, "bench", args.records)
        print(f"filled {args.records} records of 100 B in {seconds:.1f} s", flush=True)
        spark, formats = session()
        brokers = pc.broker_pids(tmp)
        reads: dict[str, list[float]] = {fmt: [] for fmt in formats}
        broker_cpu: dict[str, list[float]] = {fmt: [] for fmt in formats}
        for fmt in formats:                                  # warm up the JVM's classes and the Python workers
            spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", "bench") \
                .load().limit(1).collect()
        for _ in range(args.runs):
            for fmt in formats:
                read = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", "bench")
                cpu, start = pc.cpu_seconds(brokers), time.perf_counter()
                read.load().write.format("noop").mode("overwrite").save()
                reads[fmt].append(time.perf_counter() - start)
                broker_cpu[fmt].append(pc.cpu_seconds(brokers) - cpu)
        for fmt in formats:
            print(f"batch read, {fmt:>10}: {rates(args.records, reads[fmt], 1e6, 'M')}; the brokers' CPU "
                  f"{', '.join(f'{c:.2f}' for c in broker_cpu[fmt])} s", flush=True)
        rows = spark.range(args.write_rows).selectExpr("CAST(id AS STRING) AS key",
                                                       "repeat('x', 100) AS value").cache()
        rows.count()
        writes: dict[str, list[float]] = {fmt: [] for fmt in formats}
        for _ in range(args.runs):
            for fmt in formats:
                start = time.perf_counter()
                rows.write.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", "sink") \
                    .mode("append").save()
                writes[fmt].append(time.perf_counter() - start)
        for fmt in formats:
            print(f"DataFrame write, {fmt:>10}: {rates(args.write_rows, writes[fmt], 1e3, 'k')}", flush=True)
        spark.stop()
        if args.profile:
            from strandline.spark.source import RangePartition, Settings, read_range

            settings = Settings.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": "bench"}, streaming=False)
            profiler = cProfile.Profile()
            n = args.records // 6
            profiler.runcall(lambda: sum(b.num_rows for b in read_range(settings, RangePartition("bench", 0, 0, n))))
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    finally:
        pc.stop_cluster(proc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
