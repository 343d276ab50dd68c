"""kafka-python's own SSL and SASL integration tests, unchanged, against Strandline brokers.

    python -m tests.kafka_python_suite.run [--junitxml FILE] [-- PYTEST ARGS]

1. The sdist of the installed kafka-python (``pip download --no-deps --no-binary :all:``) is fetched
   into ``~/.cache/strandline/kafka-python-<version>/`` and unpacked there, once.
2. A suite directory beside it gets the sdist's ``test/`` and ``pyproject.toml`` (its pytest
   settings) and not its ``kafka/``, so that the tests run the installed kafka-python. The sdist
   leaves out the few files of kafka-python's repository its fixture needs besides the tests
   (``test/__init__.py``, ``test/service.py`` and the broker templates under ``servers/``): those are
   in ``harness/``, unchanged, and fill in what the sdist does not have.
3. A KAFKA_ROOT shim (``<cache>/kafka-root-<kafka version>/bin``): ``kafka-run-class.sh kafka.Kafka
   <properties>`` runs a Strandline broker (``shim.py``); every other class (ZooKeeper's
   QuorumPeerMain, ConfigCommand, TopicCommand, the ZooKeeper shell) runs on Apache Kafka 3.9's jars
   (``strandline.reference``), as Kafka's scripts run them.
4. ``pytest test/integration/test_ssl_integration.py test/integration/test_sasl_integration.py``
   from the suite directory with ``KAFKA_VERSION`` = that Kafka's version (a ZooKeeper one) and no
   ``KAFKA_URI``, so that the fixture starts ZooKeeper and the brokers itself.

Prints one summary line, ``kafka-python <version> SSL/SASL suite: N passed, N failed, N errors,
N skipped``, and exits with pytest's status. Exit status 3 with one line when a prerequisite
cannot be had: 4 when PyPI cannot be reached, 5 when Kafka 3.9's jars cannot be fetched (Maven
Central unreachable), 6 when they failed to fetch otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib.metadata import version as installed_version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARNESS = HERE / "harness"
TESTS = ("test/integration/test_ssl_integration.py", "test/integration/test_sasl_integration.py")

EXIT_NO_PYPI = 4
EXIT_NO_MAVEN = 5
EXIT_KAFKA_FETCH = 6

#: The scripts of Kafka's bin/ the fixture runs, besides kafka-run-class.sh: each one runs
#: kafka-run-class.sh with its main class, as Kafka's do.
SCRIPTS = {
    "kafka-configs.sh": "kafka-configs",
    "kafka-topics.sh": "kafka-topics",
}

RUN_CLASS = """#!/bin/bash
# kafka-run-class.sh of the kafka-python suite's KAFKA_ROOT shim (tests/kafka_python_suite/run.py):
# kafka.Kafka is a Strandline broker; any other class runs on Apache Kafka {version}'s jars.
if [ "$1" = kafka.Kafka ]; then
  shift
  exec {python} {shim} "$@"
fi
LOG_DIR=${{LOG_DIR:-{home}/logs}}
mkdir -p "$LOG_DIR"
exec {java} -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -Djava.awt.headless=true \\
  -Dkafka.logs.dir="$LOG_DIR" $KAFKA_LOG4J_OPTS $KAFKA_OPTS -cp '{libs}/*' "$@"
"""

TOOL = """#!/bin/bash
exec "$(dirname "$0")/kafka-run-class.sh" {main_class} "$@"
"""

ZOOKEEPER_SHELL = """#!/bin/bash
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.zookeeper.ZooKeeperMainWithTlsSupportForKafka -server "$@"
"""


class Unavailable(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def cache_dir(kp_version: str) -> Path:
    from strandline.reference import cache_root

    return cache_root() / f"kafka-python-{kp_version}"


def fetch_sdist(kp_version: str, cache: Path) -> Path:
    """The unpacked sdist of kafka-python ``kp_version`` (downloaded once)."""
    src = cache / f"kafka_python-{kp_version}"
    if (src / "test" / "integration" / "fixtures.py").is_file():
        return src
    download = cache / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                             "-d", str(download), f"kafka-python=={kp_version}"],
                            capture_output=True, text=True, timeout=300)
    archives = sorted(download.glob(f"kafka_python-{kp_version}.tar.gz"))
    if result.returncode != 0 or not archives:
        last = (result.stderr.strip().splitlines() or ["no sdist downloaded"])[-1]
        raise Unavailable(f"kafka-python {kp_version}'s sdist cannot be downloaded from PyPI: {last}", EXIT_NO_PYPI)
    tmp = cache / f"unpack-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archives[0]) as tar:
        tar.extractall(tmp, filter="data")
    shutil.rmtree(src, ignore_errors=True)
    (tmp / f"kafka_python-{kp_version}").rename(src)
    shutil.rmtree(tmp, ignore_errors=True)
    return src


def make_suite(src: Path, cache: Path) -> Path:
    """The suite directory: the sdist's tests and pytest settings, the harness's files where the
    sdist has none, and no ``kafka/`` (the installed kafka-python is the one tested)."""
    suite = cache / "suite"
    shutil.rmtree(suite, ignore_errors=True)
    suite.mkdir(parents=True)
    shutil.copytree(src / "test", suite / "test")
    shutil.copy(src / "pyproject.toml", suite / "pyproject.toml")
    for path in HARNESS.rglob("*"):
        if path.is_file():
            target = suite / path.relative_to(HARNESS)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
    return suite


def kafka_dist():
    """Kafka 3.9 (the newest Kafka on ZooKeeper), fetched once into ~/.cache/strandline."""
    from strandline.reference import KafkaFetchError, ensure_kafka

    try:
        return ensure_kafka("3.9")
    except KafkaFetchError as exc:
        raise Unavailable(f"Kafka 3.9's jars cannot be fetched: {exc}",
                          EXIT_NO_MAVEN if exc.unreachable else EXIT_KAFKA_FETCH) from None


def make_kafka_root(dist, cache: Path) -> Path:
    """The KAFKA_ROOT shim: bin/ scripts only."""
    from strandline.launch.zookeeper import check_java

    root = cache / f"kafka-root-{dist.version}"
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {
        "kafka-run-class.sh": RUN_CLASS.format(version=dist.version, python=sys.executable, shim=HERE / "shim.py",
                                               home=root, java=check_java(17), libs=dist.libs),
        "zookeeper-shell.sh": ZOOKEEPER_SHELL,
    }
    for script, tool in SCRIPTS.items():
        scripts[script] = TOOL.format(main_class=dist.main_class(tool))
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return root


def counts(junit: Path) -> dict[str, int]:
    """passed, failed, errors, skipped of a pytest junit XML report."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junitxml", help="pytest's junit XML report here (default: in the cache)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    kp_version = installed_version("kafka-python")
    cache = cache_dir(kp_version)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        src = fetch_sdist(kp_version, cache)
        dist = kafka_dist()
    except Unavailable as exc:
        print(f"kafka-python suite: {exc}", file=sys.stderr)
        return exc.status
    suite = make_suite(src, cache)
    kafka_root = make_kafka_root(dist, cache)
    junit = Path(args.junitxml).resolve() if args.junitxml else cache / "report.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_URI", "ZOOKEEPER_URI", "PYTHONPATH")}
    env.update(KAFKA_VERSION=dist.version, KAFKA_ROOT=str(kafka_root), PROJECT_ROOT=str(suite))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs", f"--junitxml={junit}",
           *TESTS, *args.pytest_args]
    print(f"kafka-python suite: KAFKA_VERSION={dist.version} KAFKA_ROOT={kafka_root} (cd {suite}; "
          f"{' '.join(cmd[1:])})", flush=True)
    status = subprocess.call(cmd, cwd=suite, env=env)
    if junit.is_file():
        c = counts(junit)
        print(f"kafka-python {kp_version} SSL/SASL suite: {c['passed']} passed, {c['failed']} failed, "
              f"{c['errors']} errors, {c['skipped']} skipped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
