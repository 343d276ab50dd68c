"""Java built or fetched by Maven for the tests that run JVM clients against Strandline (Kafka
Streams, Spark's Kafka connector), into ~/.cache/strandline (``$XDG_CACHE_HOME`` honoured), never
into the work tree.

:func:`maven_or_skip` runs ``mvn -q -B -f POM GOALS -DKEY=VALUE...`` under a lock file beside the
output, unless a stamp there shows that the same pom, sources and properties were built already
(then Maven is not run). It skips the calling module (one line) when it cannot build: where Maven
Central cannot be reached at all (no network) the tests skip, under CI=true too; any other failure
(no Maven, an artifact refused, a compile error) skips elsewhere and, under CI=true, fails each test
of the module with the reason, as tests/integration/kafka_reference.py does for Kafka's jars.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from strandline.reference import cache_root, maven_executable, maven_unreachable

MAVEN_TIMEOUT_S = 900.0
STAMP = "built.sha256"


@dataclass
class MavenRun:
    """One Maven run: ``out`` the output directory; ``failure`` None when it succeeded, else its
    first error line; ``unreachable`` whether Maven Central could not be reached at all."""

    out: Path
    failure: str | None
    output: str = ""
    unreachable: bool = False


def _fingerprint(pom: Path, goals: list[str], properties: dict[str, str]) -> str:
    digest = hashlib.sha256(repr((goals, sorted(properties.items()))).encode())
    for path in sorted([pom, *(p for p in (pom.parent / "src").rglob("*") if p.is_file())]):
        digest.update(str(path.relative_to(pom.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_maven(pom: Path, goals: list[str], cache_name: str, properties: dict[str, str]) -> MavenRun:
    """Run Maven on ``pom`` (once per content: see the stamp above); ``properties`` may name
    ``{out}``, the directory ``~/.cache/strandline/<cache_name>``."""
    out = cache_root() / cache_name
    out.mkdir(parents=True, exist_ok=True)
    values = {k: v.format(out=out) for k, v in properties.items()}
    fingerprint = _fingerprint(pom, goals, values)
    stamp = out / STAMP
    mvn = maven_executable()
    with open(out.parent / f"{cache_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == fingerprint:
            return MavenRun(out, None)
        if mvn is None:
            return MavenRun(out, f"Maven (mvn) is not installed to build {pom.parent.name}: "
                                 f"install Maven (apt-get install maven)")
        stamp.unlink(missing_ok=True)
        cmd = [mvn, "-q", "-B", "-f", str(pom), *goals, *(f"-D{k}={v}" for k, v in values.items())]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return MavenRun(out, f"mvn {' '.join(goals)} on {pom} took over {MAVEN_TIMEOUT_S:.0f} s", "", True)
        output = done.stdout + done.stderr
        if done.returncode == 0:
            stamp.write_text(fingerprint + "\n")
            return MavenRun(out, None, output)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)            # Maven's colour codes
    errors = [ln.strip() for ln in plain.splitlines() if "[ERROR]" in ln and ln.strip() != "[ERROR]"]
    first = (errors or plain.strip().splitlines() or ["no output"])[0]
    return MavenRun(out, f"mvn {' '.join(goals)} failed on {pom}: {first[:400]}", output,
                    maven_unreachable(output))


def skip_or_reason(run: MavenRun) -> Path | str:
    """A failed run skips the module (see above), or under CI=true gives the reason as a string for
    :func:`built` to fail each test with; a run that succeeded gives its output directory."""
    if run.failure is None:
        return run.out
    if run.unreachable:
        pytest.skip(f"Maven Central cannot be reached: {run.failure}", allow_module_level=True)
    if os.environ.get("CI") != "true":
        pytest.skip(run.failure, allow_module_level=True)
    return f"{run.failure} (CI=true: the suite's prerequisites must be installed)"


def maven_or_skip(pom: Path, goals: list[str], cache_name: str, properties: dict[str, str]) -> Path | str:
    """:func:`run_maven`, then :func:`skip_or_reason`."""
    return skip_or_reason(run_maven(pom, goals, cache_name, properties))


def built(value: Path | str) -> Path:
    """The output directory of :func:`maven_or_skip`; the test fails with the reason where it could
    not be built (CI=true)."""
    if isinstance(value, str):
        pytest.fail(value, pytrace=False)
    return value
