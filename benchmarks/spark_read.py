"""Spark batch read and write throughput of the `strandline` data source (local[2]).

Starts `strandline up --brokers 3`, fills a 6-partition topic with N records of 100 bytes
(default 5 million), then times a batch read into Spark's `noop` sink and a DataFrame write of
`--write-rows` rows. A benchmark, not a test:

    .venv/bin/python benchmarks/spark_read.py [--records 5000000] [--write-rows 1000000] [--profile]
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
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        read = spark.read.format("strandline").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "bench")
        read.load().limit(1).collect()                       # warm up the Python workers
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            read.load().write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"batch read: {args.records / best / 1e6:.2f} M rows/s best, {args.records / sorted(times)[len(times) // 2] / 1e6:.2f} "
              f"M rows/s median ({', '.join(f'{t:.2f}' for t in times)} s for {args.records} rows)", flush=True)
        rows = spark.range(args.write_rows).selectExpr("CAST(id AS STRING) AS key",
                                                       "repeat('x', 100) AS value").cache()
        rows.count()
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            rows.write.format("strandline").option("kafka.bootstrap.servers", bootstrap).option("topic", "sink") \
                .mode("append").save()
            times.append(time.perf_counter() - start)
        best = min(times)
        print(f"DataFrame write: {args.write_rows / best / 1e3:.0f} k rows/s best ({', '.join(f'{t:.2f}' for t in times)} s "
              f"for {args.write_rows} rows)", flush=True)
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
