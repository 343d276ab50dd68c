"""Spark's own Kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``), unchanged, fetched
from Maven Central by tests/integration/spark_kafka/pom.xml into ~/.cache/strandline/spark-kafka-V/libs
(never into the work tree), and a SparkSession that has it on its classpath (``spark.jars``).

The connector is fetched at the installed pyspark's version. Spark publishes the connector modules
apart from Spark's core: where Maven Central has no ``spark-sql-kafka-0-10_2.13`` at that version
(pyspark 4.3.0 in December 2026: spark-core and spark-sql 4.3.0 are there, spark-sql-kafka-0-10 and
spark-token-provider-kafka-0-10 4.3.0 are not), the connector of :data:`UNPUBLISHED_FALLBACK` is
used and :func:`connector` says which. Only the jars Spark does not ship itself are passed (the
connector, spark-token-provider-kafka, kafka-clients, commons-pool2): the pyspark wheel's jars
(Scala, Hadoop, lz4, snappy, slf4j, ...) stay the ones in use.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.maven_build import MavenRun, run_maven
from tests.integration.spark_session import local_session

POM = Path(__file__).resolve().with_name("spark_kafka") / "pom.xml"
#: pyspark's version -> the connector used where Maven Central has none at that version.
UNPUBLISHED_FALLBACK = {"4.3.0": "4.2.0"}
NOT_PUBLISHED = re.compile(r"(Could not find artifact|Failure to find) org\.apache\.spark:spark-sql-kafka-0-10_2\.13"
                           r"|spark-sql-kafka-0-10_2\.13:jar:\S+ was not found")


def fetch(spark_version: str) -> tuple[str, MavenRun]:
    """(the connector's version, the Maven run that copied it and its dependencies)."""
    def attempt(version: str) -> MavenRun:
        return run_maven(POM, ["dependency:copy-dependencies"], f"spark-kafka-{version}",
                         {"spark.version": spark_version, "connector.version": version,
                          "connector.libs": "{out}/libs"})

    run = attempt(spark_version)
    if run.failure is not None and NOT_PUBLISHED.search(run.output) and spark_version in UNPUBLISHED_FALLBACK:
        return UNPUBLISHED_FALLBACK[spark_version], attempt(UNPUBLISHED_FALLBACK[spark_version])
    return spark_version, run


def connector_jars(out: Path) -> list[Path]:
    """The fetched jars that the pyspark wheel does not ship (compared by artifact name)."""
    import pyspark

    def artifact(name: str) -> str:
        return re.sub(r"-\d[\w.\-]*\.jar$", "", name)

    shipped = {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in (out / "libs").glob("*.jar") if artifact(p.name) not in shipped)


def stop_spark_jvm() -> None:
    """Stop the active SparkContext and the JVM that PySpark started for it (by its process), so
    that the next SparkSession starts a JVM of its own with its own spark.jars: jars given to a
    SparkContext in a JVM that is already running do not reach the driver's class loader, where
    Spark looks data sources up."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()            # PythonGatewayServer exits when its stdin closes
        try:
            proc.wait(60)
        except Exception:
            proc.kill()
            proc.wait(30)
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def session_with_connector(jars: list[Path], app: str):
    """A local[2] SparkSession in a JVM of its own with ``jars`` on its classpath."""
    stop_spark_jvm()
    return local_session(app, jars)
