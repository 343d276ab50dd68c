"""Differential tests: every case of :mod:`tests.differential.corpus` sent in lockstep to a 3-broker
Apache Kafka 3.9.2 and to a 3-broker Strandline, the answers compared after
:mod:`tests.differential.normalize`. A case passes when the answers are equal, or, for a kept
difference (:data:`tests.differential.corpus.KEPT`, docs/compatibility.md "Differential tests"),
when they differ exactly at the paths the case names.

One cluster of each per module: Strandline's (``strandline up``) and Kafka's (started by
``strandline.reference`` on Strandline's ZooKeeper, under Kafka's chroot ``/kafka-3.9``); each
JVM with -Xmx512m. The cases run in the corpus's order (later cases read what earlier ones wrote).
Skipped, in one line, where Maven Central cannot be reached (tests/integration/kafka_reference.py).

``DIFFERENTIAL_REPORT=path`` writes every case's outcome (its differences, kept or not) as JSON lines.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.conftest import Cluster, free_ports
from tests.differential.clusters import SETTINGS, KafkaCluster, strandline_side
from tests.differential.corpus import CASES, KEPT
from tests.differential.runner import Ctx, describe, run_case, unexplained
from tests.integration.kafka_reference import dist, kafka_lines_or_skip

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip(("3.9",))
#: under CI=true a fetch that reached Maven Central and failed leaves the reason here: then
#: test_kafka_is_there fails with it, once, instead of every case
FETCHED = not isinstance(KAFKA["3.9"], str)


def test_kafka_is_there():
    assert dist(KAFKA, "3.9").version.startswith("3.9")


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    root = tmp_path_factory.mktemp("differential")
    ports = free_ports(7)
    strandline = Cluster(root / "strandline", 3, ports[1], ports[0], overrides=list(SETTINGS))
    strandline.data_dir.mkdir(parents=True)
    kafka = None
    try:
        strandline.start()
        kafka = KafkaCluster(root / "kafka", ports[4:7], f"127.0.0.1:{ports[0]}").start()
        run = uuid.uuid4().hex[:6]
        k, s = Ctx(kafka.side(), run), Ctx(strandline_side(strandline.bootstrap), run)
        yield k, s
        k.side.close()
        s.side.close()
    finally:
        if kafka is not None:
            kafka.stop()
        strandline.stop()


@pytest.mark.skipif(not FETCHED, reason="Kafka 3.9 could not be fetched (test_kafka_is_there says why)")
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_differential(case, sides):
    kafka, strandline = sides
    outcome = run_case(case, kafka, strandline)
    loose, unused = unexplained(outcome)
    report = os.environ.get("DIFFERENTIAL_REPORT")
    if report:
        with open(report, "a") as out:
            out.write(json.dumps({"case": case.name, "kept": case.kept[0] if case.kept else None,
                                  "diffs": [[p, repr(a)[:300], repr(b)[:300]] for p, a, b in outcome.diffs]}) + "\n")
    if case.kept:
        assert case.kept[0] in KEPT, case.kept[0]
    assert not loose, describe(outcome) + ("\nkept as " + case.kept[0] if case.kept else "")
    assert not unused, f"{case.name}: kept difference {case.kept[0]!r} expected at {unused} but the answers " \
                       f"agree there:\n{describe(outcome)}"
