"""strandline.reference: Kafka's jars fetched once by Maven into the cache, a marker when complete,
and a clear error that says whether Maven Central could be reached at all. Maven here is a stand-in
script on the PATH (no network)."""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from strandline.errors import StrandlineError
from strandline.reference import (KafkaFetchError, KafkaDist, ensure_kafka, fetched, normalize_line, pom_path,
                                  pom_version)

FAKE_MVN = """#!/bin/sh
# Stand-in for mvn: records its arguments, then does what $MODE says.
echo "$@" >> "$CALLS"
for arg in "$@"; do case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac; done
case "$MODE" in
  ok) mkdir -p "$out" && cp "$JARS"/*.jar "$out"/ ;;
  offline) echo "[ERROR] Failed to execute goal on project kafka-4: Could not transfer artifact org.apache.kafka:kafka_2.13:pom:4.4.0 from/to central (https://repo.maven.apache.org/maven2): Unknown host repo.maven.apache.org: Temporary failure in name resolution"; exit 1 ;;
  no-plugin) echo "[ERROR] No plugin found for prefix 'dependency' in the current project and in the plugin groups [org.apache.maven.plugins, org.codehaus.mojo] available from the repositories [local (/root/.m2/repository), central (https://repo.maven.apache.org/maven2)] -> [Help 1]"; exit 1 ;;
  missing) echo "[ERROR] Failed to execute goal on project kafka-4: Could not resolve dependencies for project strandline.reference:kafka-4:pom:1: Could not find artifact org.apache.kafka:kafka_2.13:jar:4.4.0 in central (https://repo.maven.apache.org/maven2)"; exit 1 ;;
esac
"""


@pytest.fixture
def fake_mvn(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN)
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    jars = tmp_path / "jars"
    jars.mkdir()
    with zipfile.ZipFile(jars / "kafka_2.13-4.4.0.jar", "w") as z:
        z.writestr("kafka/Kafka.class", b"")
        z.writestr("kafka/tools/StorageTool.class", b"")
    with zipfile.ZipFile(jars / "kafka-tools-4.4.0.jar", "w") as z:
        z.writestr("org/apache/kafka/tools/ConfigCommand.class", b"")
        z.writestr("org/apache/kafka/tools/TopicCommand.class", b"")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("JARS", str(jars))
    return tmp_path


def calls(tmp: Path) -> list[str]:
    path = tmp / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_lines_and_their_poms():
    assert [normalize_line(x) for x in ("3.9", "3.9.2", "4", "4.x", "4.4", "4.4.0")] == ["3.9"] * 2 + ["4"] * 4
    with pytest.raises(StrandlineError, match="3.9 or 4"):
        normalize_line("2.8")
    assert pom_version("3.9").startswith("3.9.") and pom_version("4").startswith("4.")
    for line in ("3.9", "4"):
        text = pom_path(line).read_text()
        assert "<artifactId>kafka_2.13</artifactId>" in text and "<artifactId>kafka-tools</artifactId>" in text


def test_a_fetch_runs_maven_once_and_leaves_a_marker(fake_mvn, monkeypatch):
    monkeypatch.setenv("MODE", "ok")
    assert fetched("4") is None
    dist = ensure_kafka("4")
    home = fake_mvn / "cache" / "strandline" / f"kafka-{pom_version('4')}"
    assert dist.home == home and dist.classpath == str(home / "libs" / "*")
    marker = json.loads((home / "complete.json").read_text())
    assert marker["jars"] == ["kafka-tools-4.4.0.jar", "kafka_2.13-4.4.0.jar"]
    [call] = calls(fake_mvn)
    assert "dependency:copy-dependencies" in call and str(pom_path("4")) in call
    assert not list(home.glob("libs.*.tmp"))
    ensure_kafka("4.x")                  # the marker is there: Maven is not run again
    assert len(calls(fake_mvn)) == 1
    assert dist.main_class("kafka-configs") == "org.apache.kafka.tools.ConfigCommand"
    assert dist.main_class("kafka-storage") == "kafka.tools.StorageTool"
    with pytest.raises(StrandlineError, match="kafka-acls"):
        dist.main_class("kafka-acls")    # none of its classes in these jars
    (home / "libs" / "kafka-tools-4.4.0.jar").unlink()     # a jar gone: fetched again
    assert fetched("4") is None
    ensure_kafka("4")
    assert len(calls(fake_mvn)) == 2


def test_no_network_is_told_apart_from_a_failed_fetch(fake_mvn, monkeypatch):
    monkeypatch.setenv("MODE", "offline")
    with pytest.raises(KafkaFetchError) as offline:
        ensure_kafka("4")
    assert offline.value.unreachable and "Unknown host" in str(offline.value)
    monkeypatch.setenv("MODE", "missing")
    with pytest.raises(KafkaFetchError) as missing:
        ensure_kafka("4")
    assert not missing.value.unreachable and "Could not find artifact" in str(missing.value)
    assert "\n" not in str(missing.value)
    assert fetched("4") is None          # nothing half-fetched is taken for complete


@pytest.mark.parametrize("reachable", [False, True], ids=["central-unreachable", "central-reachable"])
def test_no_network_with_no_plugins_cached_is_told_apart_too(fake_mvn, monkeypatch, reachable):
    """With an empty local repository and no network, quiet Maven names no host: it only finds no
    plugin for the prefix 'dependency' (its download failures are warnings, which -q hides). Then
    whether Maven Central answers a connection tells no network from a broken setup."""
    import strandline.reference as reference

    monkeypatch.setenv("MODE", "no-plugin")
    monkeypatch.setattr(reference, "maven_central_reachable", lambda timeout=5.0: reachable, raising=False)
    with pytest.raises(KafkaFetchError) as exc:
        ensure_kafka("4")
    assert exc.value.unreachable is not reachable, str(exc.value)
    assert "No plugin found for prefix 'dependency'" in str(exc.value)


def test_no_maven_is_one_clear_line(fake_mvn, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KafkaFetchError, match="Maven .mvn. is not installed") as exc:
        ensure_kafka("3.9")
    assert not exc.value.unreachable


def test_a_tool_runs_as_kafkas_script_runs_it(fake_mvn, monkeypatch):
    monkeypatch.setenv("MODE", "ok")
    dist: KafkaDist = ensure_kafka("4")
    cmd = dist.tool_command("kafka-topics", ["--list"], java="/usr/bin/java")
    assert cmd[0] == "/usr/bin/java"
    assert cmd[cmd.index("-cp") + 1] == dist.classpath
    assert cmd[-2:] == ["org.apache.kafka.tools.TopicCommand", "--list"]
    assert any(flag.startswith("-Dlog4j2.configurationFile=") for flag in cmd)
