"""SPK-2: the durability audit of lab runs, as a PySpark job over their Parquet histories.

For each run folder (see :mod:`strandline.lab.history`) it counts:

* **lost**: acknowledged (``ok``) values that are absent, after healing, from the final leader's
  log below its high watermark (what every consumer reads);
* **duplicated**: values present more than once in that log;
* **reordered**: records, per producer and partition, that come after a record the same producer
  sent later (its sequence number is lower than one before it in the log);
* **unexpected**: values in the log that no producer ever invoked;
* **divergent**: batches below the high watermark on some replica whose bytes differ from the
  leader's batch at that offset (compared by the digest of the whole batch), and the replicas
  holding them.

The job writes ``audit.json`` into each run folder and returns the same dictionaries.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, TYPE_CHECKING

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path


if TYPE_CHECKING:       # pyspark is imported when an audit runs (a JVM starts with it)
    from pyspark.sql import DataFrame, SparkSession

def spark_session(app: str = "strandline-lab-audit", log_path: Path | None = None) -> SparkSession:
    """A local Spark session; with ``log_path`` the JVM's own messages go to that file, not the terminal."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    saved = None
    if log_path is not None:
        sys.stderr.flush()
        saved = os.dup(2)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)          # the JVM inherits it: Spark's start-up chatter lands in the file
        os.close(fd)
    try:
        session = (SparkSession.builder.master("local[2]").appName(app)
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "3g").getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        return session
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


def _load(spark: SparkSession, run_dirs: list[Path], name: str) -> DataFrame:
    """One table ``name`` of every run, read at once, with the run folder's path as ``run``."""
    from pyspark.sql import functions as F

    by_name = {d.name: str(d) for d in run_dirs}
    folder = F.regexp_extract(F.input_file_name(), r"([^/]+)/[^/]+$", 1)
    mapping = F.create_map(*[x for k, v in by_name.items() for x in (F.lit(k), F.lit(v))])
    return spark.read.parquet(*[str(d / name) for d in run_dirs]).withColumn("run", mapping[folder])



@contextmanager
def audit_session(run_dirs: Iterable[Path], spark: SparkSession | None = None
                  ) -> Iterator[tuple[SparkSession, list[Path], Callable[[DataFrame], DataFrame]]]:
    """What every audit of run folders shares: the folders, resolved (their names tell the runs
    apart, so two of one name are refused); a Spark session, the caller's or one of its own that
    is stopped at the end; and ``cached``, which caches a table read more than once for the audit
    and drops it at its end."""
    dirs = [Path(d).resolve() for d in run_dirs]
    if len({d.name for d in dirs}) != len(dirs):
        raise ValueError("two run folders of one audit have the same name")
    own = spark is None
    session = spark or spark_session(log_path=dirs[0].parent / "spark.log")
    caches: list[DataFrame] = []

    def cached(df: DataFrame) -> DataFrame:
        caches.append(df.cache())
        return df

    try:
        yield session, dirs, cached
    finally:
        for df in caches:
            try:
                df.unpersist()
            except Exception:   # a session that broke holds no cache; the audit's own error, if any, goes on
                pass
        if own:
            session.stop()


def audit(run_dirs: list[Path], spark: SparkSession | None = None, keep_lost: int = 20000) -> list[dict[str, Any]]:
    """Audit every run in ``run_dirs``; one dictionary per run, also written to its audit.json."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    with audit_session(run_dirs, spark) as (spark, run_dirs, cached):
        # the tables read more than once are cached for the audit, and dropped at its end
        ops = cached(_load(spark, run_dirs, "ops.parquet"))
        records = _load(spark, run_dirs, "records.parquet")
        batches = cached(_load(spark, run_dirs, "batches.parquet"))
        final = cached(_load(spark, run_dirs, "final.parquet"))

        # what a consumer reads after healing: the final leader's records below its high watermark
        read = (records.join(final, ["run", "partition"])
                .where((F.col("broker") == F.col("leader")) & (F.col("offset") < F.col("high_watermark")))
                .select("run", "partition", "offset", "value"))
        read = cached(read)
        acked = ops.where(F.col("type") == "ok").select("run", "value", "time_ms", "partition",
                                                        F.col("offset").alias("acked_offset"))
        invoked = ops.where(F.col("type") == "invoke").select("run", "value").distinct()
        present = read.select("run", "value").distinct()

        lost = acked.join(present, ["run", "value"], "left_anti")
        duplicated = read.groupBy("run", "value").count().where(F.col("count") > 1)
        unexpected = present.join(invoked, ["run", "value"], "left_anti")

        producer = F.regexp_extract("value", r"^p(\d+)-", 1)
        sequence = F.regexp_extract("value", r"-(\d+)$", 1).cast("long")
        ordered = read.withColumn("producer", producer).withColumn("sequence", sequence)
        window = (Window.partitionBy("run", "partition", "producer").orderBy("offset")
                  .rowsBetween(Window.unboundedPreceding, -1))
        reordered = (ordered.withColumn("highest_before", F.max("sequence").over(window))
                     .where(F.col("sequence") < F.col("highest_before")))

        leader_batches = (batches.join(final, ["run", "partition"]).where(F.col("broker") == F.col("leader"))
                          .select("run", "partition", "base_offset", F.col("digest").alias("leader_digest")))
        below_hw = batches.join(final, ["run", "partition"]).where(F.col("last_offset") < F.col("high_watermark"))
        divergent = cached(below_hw.join(leader_batches, ["run", "partition", "base_offset"], "left")
                           .where(F.col("leader_digest").isNull() | (F.col("leader_digest") != F.col("digest"))))

        # Every figure in one Spark job (each action costs the job's scheduling, about half a
        # second here): rows of (run, what, key, count, ms), ``what`` naming the figure.
        none = F.lit(None).cast("double").alias("ms")

        def tagged(df: DataFrame, what: str) -> DataFrame:
            return df.select("run", F.lit(what).alias("what"), F.lit("").alias("key"), "count", none)

        lost = cached(lost)
        span = lost.groupBy("run").agg(F.min("time_ms").alias("first"), F.max("time_ms").alias("last"))
        figures = (ops.groupBy("run", "type").count()
                   .select("run", F.lit("ops").alias("what"), F.col("type").alias("key"), "count", none)
                   .unionByName(tagged(lost.groupBy("run").count(), "lost"))
                   .unionByName(tagged(duplicated.groupBy("run").count(), "duplicated"))
                   .unionByName(tagged(unexpected.groupBy("run").count(), "unexpected"))
                   .unionByName(tagged(reordered.groupBy("run").count(), "reordered"))
                   .unionByName(tagged(read.groupBy("run").count(), "read"))
                   .unionByName(tagged(divergent.groupBy("run").count(), "divergent"))
                   .unionByName(divergent.select("run", F.lit("replica").alias("what"),
                                                 F.format_string("broker %d partition %d", "broker", "partition")
                                                 .alias("key"), F.lit(1).cast("long").alias("count"), none)
                                .distinct())
                   .unionByName(span.select("run", F.lit("lost_span").alias("what"), F.lit("").alias("key"),
                                            F.lit(0).cast("long").alias("count"), F.col("first").alias("ms")))
                   .unionByName(span.select("run", F.lit("lost_span_end").alias("what"), F.lit("").alias("key"),
                                            F.lit(0).cast("long").alias("count"), F.col("last").alias("ms"))))
        op_counts: dict[str, dict[str, int]] = {}
        per_run: dict[str, dict[str, int]] = {}
        div_replicas: dict[str, list[str]] = {}
        lost_span: dict[str, list[float | None]] = {}
        for r in figures.collect():
            if r["what"] == "ops":
                op_counts.setdefault(r["run"], {})[r["key"]] = r["count"]
            elif r["what"] == "replica":
                div_replicas.setdefault(r["run"], []).append(r["key"])
            elif r["what"] == "lost_span":
                lost_span.setdefault(r["run"], [None, None])[0] = r["ms"]
            elif r["what"] == "lost_span_end":
                lost_span.setdefault(r["run"], [None, None])[1] = r["ms"]
            else:
                per_run.setdefault(r["run"], {})[r["what"]] = r["count"]
        lost_rows: dict[str, list[dict[str, Any]]] = {}
        for r in lost.orderBy("time_ms").collect():
            rows = lost_rows.setdefault(r["run"], [])
            if len(rows) < keep_lost:
                rows.append({"value": r["value"], "partition": r["partition"], "offset": r["acked_offset"],
                             "acked_ms": r["time_ms"]})
        results = []
        for d in run_dirs:
            key = str(d)
            figure = per_run.get(key, {})
            result = {
                "run": key, "ops": op_counts.get(key, {}), "read": figure.get("read", 0),
                "lost": figure.get("lost", 0), "duplicated": figure.get("duplicated", 0),
                "reordered": figure.get("reordered", 0), "unexpected": figure.get("unexpected", 0),
                "divergent_batches": figure.get("divergent", 0),
                "divergent_replicas": sorted(div_replicas.get(key, [])),
                "lost_acked_first_ms": lost_span.get(key, (None, None))[0],
                "lost_acked_last_ms": lost_span.get(key, (None, None))[1],
                "lost_records": lost_rows.get(key, []),
            }
            (d / "audit.json").write_text(json.dumps(result, indent=2) + "\n")
            results.append(result)
        return results
