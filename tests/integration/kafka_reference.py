"""Apache Kafka's own jars for the tests that run Kafka next to Strandline.

:func:`kafka_or_skip` fetches a Kafka line (once, into ~/.cache/strandline) or skips the test
with one line. Where Maven Central cannot be reached at all (no network), the tests skip, under
CI=true too: nothing on the machine is missing, and the jars cannot be had. Any other failure to
fetch (no Maven, an artifact refused, a broken cache) is a missing prerequisite: a skip
elsewhere, a failure under CI=true (.ci/run).
"""

from __future__ import annotations

import pytest

from strandline.reference import KafkaDist, KafkaFetchError, ensure_kafka
from tests.conftest import missing_prerequisite

#: The Kafka lines every Kafka test runs with: 3.9 (ZooKeeper) and the newest 4.x the pom pins.
LINES = ("3.9", "4")


def kafka_or_skip(line: str) -> KafkaDist:
    try:
        return ensure_kafka(line)
    except KafkaFetchError as exc:
        if exc.unreachable:
            pytest.skip(f"Kafka {line}: Maven Central cannot be reached, so Kafka's jars cannot be fetched: {exc}")
        missing_prerequisite(f"Kafka {line}'s jars could not be fetched: {exc}")
        raise
