"""The Spark tests' shared set-up: a local SparkSession per module (:func:`spark_fixture`), and a
topic holding committed, aborted and open transactions (:func:`write_transactions`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest


def local_session(app: str, jars: Sequence[Path] = ()) -> Any:
    """A local[2] SparkSession without its web UI, two shuffle partitions, ``jars`` on its
    classpath; Spark's Python workers use this venv."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName(app).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
    if jars:
        builder = builder.config("spark.jars", ",".join(map(str, jars)))
    return builder.getOrCreate()


def spark_fixture(app: str, start: Callable[[], Any] | None = None,
                  stop: Callable[[Any], None] | None = None) -> Any:
    """A module-scoped fixture yielding a SparkSession: ``start()`` (default: :func:`local_session`
    named ``app``), stopped by ``stop(session)`` (default: ``session.stop()``) after the module."""
    @pytest.fixture(scope="module")
    def spark() -> Iterator[Any]:
        session = start() if start is not None else local_session(app)
        yield session
        if stop is not None:
            stop(session)
        else:
            session.stop()
    return spark


def write_transactions(bootstrap: str, topic: str, transactional_id: str) -> Any:
    """Four transactions of 50 records each over ``topic``'s partitions 0 and 1 (values
    ``b"<n>-<i>"``: 0 and 2 committed, 1 and 3 aborted), then a fifth, still open, holding
    ``b"open"`` in partition 0: its producer, for the test to commit it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    for n, commit in enumerate((True, False, True, False)):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, b"%d-%02d" % (n, i), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    producer.begin_transaction()                       # still open: held back at the last stable offset
    producer.produce(topic, b"open", partition=0)
    producer.flush(30)
    return producer
