"""A streaming query, source to sink with ``exactlyOnce=true``, that stops for good between the
write of a micro-batch and its checkpoint commit, so a test can SIGKILL it there.

``python spark_crash_job.py BOOTSTRAP SOURCE SINK CHECKPOINT MARKER_DIR CRASH_BATCH``

The sink is Strandline's, subclassed here only to mark the moment: when Spark calls the stream
writer's ``commit`` for batch ``CRASH_BATCH`` (every task's transaction is committed by then, and
Spark writes ``commits/<batch>`` only after this call returns), it writes
``MARKER_DIR/written-<batch>`` and waits to be killed.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession

from strandline.spark.sink import StrandlineStreamWriter
from strandline.spark.source import StrandlineDataSource


def main() -> None:
    bootstrap, source, sink, checkpoint, marker_dir, crash_batch = sys.argv[1:7]

    class StoppingWriter(StrandlineStreamWriter):
        def commit(self, messages, batchId: int) -> None:
            super().commit(messages, batchId)
            if batchId == int(crash_batch):
                with open(os.path.join(marker_dir, f"written-{batchId}"), "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(600)                     # the test kills the job here

    class StoppingSource(StrandlineDataSource):
        @classmethod
        def name(cls) -> str:
            return "strandline-stopping"

        def streamWriter(self, schema, overwrite):
            plain = super().streamWriter(schema, overwrite)
            return StoppingWriter(plain.writing)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("strandline-crash-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.dataSource.register(StrandlineDataSource)
    spark.dataSource.register(StoppingSource)
    stream = (spark.readStream.format("strandline").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "200").load().selectExpr("key", "value"))
    query = (stream.writeStream.format("strandline-stopping").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink).option("exactlyOnce", "true")
             .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds").start())
    print("STARTED", flush=True)
    query.awaitTermination(300)


if __name__ == "__main__":
    main()
