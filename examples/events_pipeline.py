"""An event pipeline on Strandline and Spark Structured Streaming.

1. `produce` writes JSON click events (user, page, event time) to the topic `events`, spread over
   the last hour.
2. `aggregate` is a streaming job: it reads `events` with the `strandline` source, counts clicks
   per page in 1-minute event-time windows (10-minute watermark), and appends the closed windows to
   Parquet: a window is written once events 10 minutes newer have arrived. Stop it and start it
   again: it resumes from its checkpoint, each event counted once.

With `make run` in another terminal:

    .venv/bin/python examples/events_pipeline.py produce --events 20000
    .venv/bin/python examples/events_pipeline.py aggregate --once      # or without --once: runs on
    .venv/bin/python examples/events_pipeline.py show

Options: --bootstrap (default $STRANDLINE_BOOTSTRAP_SERVERS, else the three brokers of `make run`,
127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094: any of them that is up will do), --dir (default
./data/pipeline) for the checkpoint and the Parquet output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timezone

PAGES = ["/", "/docs", "/pricing", "/blog", "/signup"]
EVENT_SCHEMA = "user STRING, page STRING, ts TIMESTAMP"


def produce(bootstrap: str, topic: str, events: int, start_ms: int | None = None, seed: int = 7,
            minutes: float | None = None) -> int:
    """``events`` clicks, 10 ms apart from ``start_ms``, or spread over the last ``minutes``."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "compression.type": "lz4"})
    step = 10.0 if minutes is None else minutes * 60000 / max(events, 1)
    now = start_ms if start_ms is not None else int(time.time() * 1000 - events * step)
    for i in range(events):
        ts = datetime.fromtimestamp((now + i * step) / 1000.0, tz=timezone.utc)
        event = {"user": f"u{rng.randrange(1000)}", "page": rng.choice(PAGES),
                 "ts": ts.isoformat(timespec="milliseconds")}
        producer.produce(topic, key=event["user"].encode(), value=json.dumps(event).encode())
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)
    return events


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName("strandline-events")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC").getOrCreate())


def aggregate(spark, bootstrap: str, topic: str, directory: str, once: bool):
    """Start the streaming aggregation; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    events = (spark.readStream.format("strandline")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50000").load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*"))
    counts = (events.withWatermark("ts", "10 minutes")
              .groupBy(F.window("ts", "1 minute").alias("window"), "page").count()
              .select(F.col("window.start").alias("window_start"), "page", "count"))
    writer = (counts.writeStream.format("parquet").outputMode("append")
              .option("path", os.path.join(directory, "clicks_per_minute"))
              .option("checkpointLocation", os.path.join(directory, "checkpoint")))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime="5 seconds")
    return writer.start()


def main() -> int:
    parser = argparse.ArgumentParser(description="Click events through Strandline into per-minute counts.")
    parser.add_argument("command", choices=("produce", "aggregate", "show"))
    parser.add_argument("--bootstrap", default=os.environ.get("STRANDLINE_BOOTSTRAP_SERVERS")
                        or "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--dir", default=os.path.join("data", "pipeline"))
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--minutes", type=float, default=60.0, help="produce: spread the events over this past time")
    parser.add_argument("--once", action="store_true", help="process what is there, then stop (Trigger.AvailableNow)")
    args = parser.parse_args()
    if args.command == "produce":
        n = produce(args.bootstrap, args.topic, args.events, minutes=args.minutes)
        print(f"produced {n} events of the last {args.minutes:g} minutes to {args.topic}")
        return 0
    spark = session()
    if args.command == "show":
        spark.read.parquet(os.path.join(args.dir, "clicks_per_minute")).orderBy("window_start", "page").show(50)
        return 0
    query = aggregate(spark, args.bootstrap, args.topic, args.dir, args.once)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
