"""The lab against Apache Kafka 3.9: ``strandline lab compare NET-1`` runs NET-1 on Strandline's
brokers and on three Kafka 3.9 brokers (ZooKeeper mode) in the same network namespaces, with the
same workload, fault, sampler and Spark audit, and both must do what the seed says: the follower
cut from its leader leaves the ISR and rejoins, and not one acknowledged write is lost,
duplicated, reordered or unexpected. Needs root (namespaces and nftables) and Kafka's jars
(skips with one line where Maven Central cannot be reached, see kafka_reference.py)."""

from __future__ import annotations

import json
import re

import pytest

from strandline.lab import history
from strandline.lab.network import unavailable_reason
from tests.conftest import missing_prerequisite, run_cli
from tests.integration.kafka_reference import dist, kafka_lines_or_skip

pytestmark = pytest.mark.integration
DISTS = kafka_lines_or_skip(("3.9",))
NO_NETWORK = unavailable_reason()


def test_lab_compare_net_1_on_strandline_and_kafka_3_9_loses_nothing_on_either(tmp_path):
    """NET-1 on both systems: a verdict line each, with its numbers, and both timelines in one image."""
    dist(DISTS, "3.9")
    if NO_NETWORK:
        missing_prerequisite(f"NET-1: {NO_NETWORK}")
    result = run_cli("lab", "compare", "NET-1", "--seed", "5", "--data-dir", str(tmp_path), timeout=600)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    verdicts = {}
    for system in ("strandline", "kafka-3.9"):
        [line] = [ln for ln in out.splitlines() if ln.startswith(f"{system}: NET-1: ")]
        match = re.search(r": 0 lost of (\d+) acknowledged, 0 duplicated, 0 reordered, 0 unexpected - as the seed "
                          r"says$", line)
        assert match and int(match.group(1)) > 100, line
        verdicts[system] = line
    runs = {d.name.split("-2")[0]: d for d in tmp_path.iterdir() if d.is_dir()}
    assert set(runs) == {"NET-1-strandline", "NET-1-kafka-3.9"}, runs
    kafka_run = runs["NET-1-kafka-3.9"]
    info = json.loads((kafka_run / "run.json").read_text())
    assert info["cluster"] == "kafka-3.9" and info["network"] == "namespaces" and info["error"] is None
    # Kafka's own brokers, with the lab's keys, listening in their namespaces
    for b in (1, 2, 3):
        props = (kafka_run / f"kafka-{b}" / "server.properties").read_text()
        assert "replica.lag.time.max.ms=2000" in props and "zookeeper.session.timeout.ms=4000" in props, props
        assert re.search(rf"^listeners=PLAINTEXT://10\.201\.\d+\.{10 + b}:9092$", props, re.M), props
        assert "Kafka version: 3.9" in (kafka_run / f"kafka-{b}" / "server.log").read_text()
    # the fault took effect on Kafka too: its leader said the ISR was the other two during the cut
    [fault] = info["faults"]
    [cut] = fault["brokers"]
    shrunk = {v["isr"] for v in history.read_views(kafka_run) if v["state"] == "up" and v["leader"] == v["broker"]
              and fault["start_ms"] <= v["time_ms"] <= fault["end_ms"]}
    assert ",".join(str(b) for b in (1, 2, 3) if b != cut) in shrunk, shrunk
    audit = json.loads((kafka_run / "audit.json").read_text())
    assert audit["lost"] == 0 and audit["ops"]["ok"] > 100
    from PIL import Image

    [image] = list(tmp_path.glob("NET-1-compare-*.png"))
    with Image.open(image) as both, Image.open(runs["NET-1-strandline"] / "timeline.png") as one, \
            Image.open(kafka_run / "timeline.png") as other:
        assert both.height == one.height + other.height
