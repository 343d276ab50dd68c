"""kafka-python's own SSL and SASL integration tests (test_ssl_integration.py, test_sasl_integration.py
of the installed kafka-python's sdist), unchanged, against Strandline brokers: its fixture starts
ZooKeeper and a broker per test from its own templates through a KAFKA_ROOT whose kafka.Kafka is a
Strandline broker (tests/kafka_python_suite/run.py): an SSL listener with the keytool-made key
stores, SASL_PLAINTEXT with PLAIN and with SCRAM-SHA-256/512 (the user made by Kafka's
ConfigCommand in ZooKeeper, SCRAM between brokers too). Every test must pass; none may be skipped.

Skipped with one line where PyPI (the sdist) or Maven Central (Kafka 3.9's jars, for ZooKeeper and
Kafka's tools) cannot be reached; any other failure to fetch Kafka fails under CI=true."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, missing_prerequisite
from tests.integration.kafka_reference import dist, kafka_lines_or_skip
from tests.kafka_python_suite import run

pytestmark = pytest.mark.integration

DISTS = kafka_lines_or_skip(("3.9",))
#: test_ssl_integration.py's 2 tests and test_sasl_integration.py's 3, each with 3 mechanisms
EXPECTED = 2 + 3 * 3


@pytest.mark.timeout(900)
def test_kafka_python_s_ssl_and_sasl_suites_pass_against_strandline(tmp_path):
    dist(DISTS, "3.9")
    junit = tmp_path / "report.xml"
    result = subprocess.run([sys.executable, "-m", "tests.kafka_python_suite.run", "--junitxml", str(junit)],
                            cwd=ROOT, capture_output=True, text=True, timeout=840)
    if result.returncode == run.EXIT_NO_PYPI:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    if result.returncode in (run.EXIT_NO_MAVEN, run.EXIT_KAFKA_FETCH):
        missing_prerequisite(result.stderr.strip().splitlines()[-1])
    summary = [line for line in result.stdout.splitlines() if "SSL/SASL suite:" in line]
    assert junit.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    counts = run.counts(junit)
    failures = "\n".join(line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR")))
    assert counts == {"passed": EXPECTED, "failed": 0, "errors": 0, "skipped": 0}, (summary, failures)
    assert result.returncode == 0
