"""The transaction audit of TXN runs, as a PySpark job over their Parquet histories (SPK-2's way).

Its input, per run folder (see :mod:`strandline.lab.txn`): ``txn_writes.parquet`` (every value a
transactional producer sent, with its transaction and the transaction's outcome: committed,
aborted or unknown), ``polls.parquet`` (every record each consumer polled, in poll order, and its
isolation level) and ``final_read.parquet`` (a read_committed read of every partition from the
beginning, after healing). It counts Jepsen's anomalies for Kafka:

* **aborted_reads**: values of aborted transactions that a read_committed consumer (or the final
  read) read;
* **lost**: values of committed transactions absent from the final read;
* **torn**: transactions (committed, or unknown: all or nothing) of which the final read holds some
  values but not all, plus (read_committed consumer, transaction) pairs where the consumer read some
  but not all of a committed or unknown transaction's values;
* **poll_skips**: records of the final read that a consumer jumped over: it polled offset ``o``
  then ``o' > o`` of one partition (``o`` is -1 before its first poll: every consumer starts at
  the beginning), the final read holds a record between them, and that consumer never polled it;
* **nonmonotonic_polls**: a consumer polled a partition's offset ``o'`` after ``o >= o'``;
* **nonmonotonic_offsets**: values of the final read that stand, in their partition, after a
  value their producer sent later (a producer's values must be in its send order);
* **duplicated**: values present more than once in the final read;
* **never_read**: values of committed transactions (and of unknown ones the final read holds) that
  no read_committed consumer polled during the run;
* **unexpected**: values in the final read that no producer sent.

The job writes ``audit.json`` into each run folder and returns the same dictionaries.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

import json
from pathlib import Path

from strandline.lab.audit import _load, audit_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ANOMALIES = ("aborted_reads", "lost", "torn", "poll_skips", "nonmonotonic_polls", "nonmonotonic_offsets",
             "duplicated", "never_read", "unexpected")
SAMPLES = 10        # examples of each anomaly kept in audit.json


def audit_txn(run_dirs: list[Path], spark: SparkSession | None = None) -> list[dict[str, Any]]:
    """Audit every TXN run in ``run_dirs``; one dictionary per run, also written to its audit.json."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    with audit_session(run_dirs, spark) as (spark, run_dirs, cached):
        writes = cached(_load(spark, run_dirs, "txn_writes.parquet"))
        polls = cached(_load(spark, run_dirs, "polls.parquet"))
        final = cached(_load(spark, run_dirs, "final_read.parquet"))
        committed_reads = polls.where(F.col("isolation") == "read_committed")
        aborted = writes.where(F.col("outcome") == "aborted").select("run", "value")
        present = cached(final.select("run", "value").distinct())

        aborted_reads = (committed_reads.select("run", "value").unionByName(final.select("run", "value"))
                         .distinct().join(aborted, ["run", "value"]))
        lost = (writes.where(F.col("outcome") == "committed").select("run", "value", "partition")
                .join(present, ["run", "value"], "left_anti"))

        ended = writes.where(F.col("outcome") != "aborted")
        sizes = ended.groupBy("run", "producer", "txn").agg(F.count("value").alias("size"))
        in_final = (ended.join(present, ["run", "value"]).groupBy("run", "producer", "txn")
                    .agg(F.count("value").alias("seen")))
        torn_final = (in_final.join(sizes, ["run", "producer", "txn"])
                      .where((F.col("seen") > 0) & (F.col("seen") < F.col("size")))
                      .select("run", F.format_string("final read: t%d-%06d: %d of %d values", "producer", "txn",
                                                     "seen", "size").alias("what")))
        by_consumer = (committed_reads.select("run", "consumer", "value").distinct()
                       .join(ended.select("run", "value", "producer", "txn"), ["run", "value"])
                       .groupBy("run", "consumer", "producer", "txn").agg(F.count("value").alias("seen")))
        torn_reads = (by_consumer.join(sizes, ["run", "producer", "txn"]).where(F.col("seen") < F.col("size"))
                      .select("run", F.format_string("consumer %d: t%d-%06d: %d of %d values", "consumer",
                                                     "producer", "txn", "seen", "size").alias("what")))
        torn = torn_final.unionByName(torn_reads)

        order = Window.partitionBy("run", "consumer", "partition").orderBy("seq")
        steps = polls.withColumn("prev", F.lag("offset").over(order))
        nonmonotonic_polls = steps.where(F.col("prev").isNotNull() & (F.col("offset") <= F.col("prev")))
        # a consumer starts at the beginning of every partition: its first poll follows offset -1
        gaps = (steps.withColumn("prev", F.coalesce("prev", F.lit(-1).cast("long")))
                .where(F.col("offset") > F.col("prev") + 1)
                .select("run", "consumer", "partition", "prev", F.col("offset").alias("next")))
        between = (gaps.join(final.select("run", "partition", "offset", "value"), ["run", "partition"])
                   .where((F.col("offset") > F.col("prev")) & (F.col("offset") < F.col("next"))))
        poll_skips = (between.join(polls.select("run", "consumer", "partition", "offset"),
                                   ["run", "consumer", "partition", "offset"], "left_anti")
                      .select("run", "consumer", "partition", "offset", "value").distinct())

        producer = F.regexp_extract("value", r"^t(\d+)-", 1)
        placed = final.join(writes.select("run", "value", "order"), ["run", "value"]).withColumn("producer", producer)
        window = (Window.partitionBy("run", "partition", "producer").orderBy("offset")
                  .rowsBetween(Window.unboundedPreceding, -1))
        nonmonotonic_offsets = (placed.withColumn("latest_before", F.max("order").over(window))
                                .where(F.col("order") < F.col("latest_before")))

        duplicated = final.groupBy("run", "value").count().where(F.col("count") > 1)
        readable = (writes.where(F.col("outcome") == "committed").select("run", "value")
                    .unionByName(writes.where(F.col("outcome") == "unknown").select("run", "value")
                                 .join(present, ["run", "value"]))).distinct()
        never_read = readable.join(committed_reads.select("run", "value").distinct(), ["run", "value"], "left_anti")
        unexpected = present.join(writes.select("run", "value"), ["run", "value"], "left_anti")

        def described(df: DataFrame, fmt: str, *cols: str) -> DataFrame:
            return df.select("run", F.format_string(fmt, *cols).alias("what"))

        examples = {
            "aborted_reads": described(aborted_reads, "%s", "value"),
            "lost": described(lost, "%s (partition %d)", "value", "partition"),
            "torn": torn,
            "poll_skips": described(poll_skips, "consumer %d skipped %s at %d-%d", "consumer", "value",
                                    "partition", "offset"),
            "nonmonotonic_polls": described(nonmonotonic_polls, "consumer %d polled %d-%d after offset %d",
                                            "consumer", "partition", "offset", "prev"),
            "nonmonotonic_offsets": described(nonmonotonic_offsets, "%s at %d-%d", "value", "partition", "offset"),
            "duplicated": described(duplicated, "%s (%d times)", "value", "count"),
            "never_read": described(never_read, "%s", "value"),
            "unexpected": described(unexpected, "%s", "value"),
        }
        # every figure in one Spark job (each action costs its scheduling): rows of (run, kind, key,
        # count, examples), kind "anomaly", "outcome" (transactions) or "reads" (records read)
        no_examples = F.lit(None).cast("array<string>").alias("examples")
        rows = None
        for name, df in examples.items():
            counted = df.groupBy("run").agg(F.count("what").alias("count"),
                                            F.slice(F.sort_array(F.collect_list("what")), 1, SAMPLES).alias("examples"))
            counted = counted.select("run", F.lit("anomaly").alias("kind"), F.lit(name).alias("key"), "count",
                                     "examples")
            rows = counted if rows is None else rows.unionByName(counted)
        assert rows is not None
        outcome_rows = (writes.select("run", "producer", "txn", "outcome").distinct().groupBy("run", "outcome").count()
                        .select("run", F.lit("outcome").alias("kind"), F.col("outcome").alias("key"), "count",
                                no_examples))
        aborted_uncommitted = (polls.where(F.col("isolation") == "read_uncommitted").select("run", "value").distinct()
                               .join(aborted, ["run", "value"]).groupBy("run").count()
                               .select("run", F.lit("aborted values read_uncommitted").alias("key"), "count"))
        read_rows = (polls.groupBy("run", "isolation").count().select("run", F.col("isolation").alias("key"), "count")
                     .unionByName(final.groupBy("run").count().select("run", F.lit("final").alias("key"), "count"))
                     .unionByName(aborted_uncommitted)
                     .select("run", F.lit("reads").alias("kind"), "key", "count", no_examples))
        counts: dict[str, dict[str, int]] = {}
        outcomes: dict[str, dict[str, int]] = {}
        reads: dict[str, dict[str, int]] = {}
        samples: dict[str, dict[str, list[str]]] = {}
        for r in rows.unionByName(outcome_rows).unionByName(read_rows).collect():
            if r["kind"] == "anomaly":
                counts.setdefault(r["run"], {})[r["key"]] = r["count"]
                samples.setdefault(r["run"], {})[r["key"]] = list(r["examples"])
            elif r["kind"] == "outcome":
                outcomes.setdefault(r["run"], {})[r["key"]] = r["count"]
            else:
                reads.setdefault(r["run"], {})[r["key"]] = r["count"]
        results = []
        for d in run_dirs:
            key = str(d)
            figure = counts.get(key, {})
            result: dict[str, Any] = {"run": key, "transactions": outcomes.get(key, {}), "reads": reads.get(key, {}),
                                      **{a: figure.get(a, 0) for a in ANOMALIES},
                                      "anomalies": sum(figure.get(a, 0) for a in ANOMALIES),
                                      "examples": samples.get(key, {})}
            (d / "audit.json").write_text(json.dumps(result, indent=2) + "\n")
            results.append(result)
        return results
