"""The lab on Kafka 3.9, without starting anything: which scenarios Kafka cannot play (one line
each, with the reason), what a Kafka lab broker's server.properties carries, and the compare
image (both timelines one above the other)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strandline.errors import StrandlineError
from strandline.lab.compare import compare_command, stack_images
from strandline.lab.kafka import KAFKA_3_9, STRANDLINE, KafkaLabBroker, kafka_properties, make_cluster, unplayable
from strandline.lab.run import LAB_BROKER_CONFIG
from strandline.lab.runner import NOT_RUN, run_scenario
from strandline.lab.scenarios import SAFE, SCENARIOS

NOT_ON_KAFKA = {"EPO-3-legacy", "EPO-3-divergence-legacy", "DUR-3", "LOSS-5", "EPO-3-divergence"}


def test_kafka_plays_every_scenario_but_strandlines_own_keys_and_the_flush_ledger_power_loss():
    for scenario in [*SCENARIOS.values(), SAFE]:
        assert unplayable(scenario, STRANDLINE) is None
        reason = unplayable(scenario, KAFKA_3_9)
        assert (reason is not None) == (scenario.name in NOT_ON_KAFKA), (scenario.name, reason)
        if reason is not None:
            assert reason.startswith(f"{scenario.name}: not played on Kafka 3.9: ") and "\n" not in reason
    assert "replication.truncation" in unplayable(SCENARIOS["EPO-3-legacy"], KAFKA_3_9)
    assert "flush.on.ack" in unplayable(SCENARIOS["DUR-3"], KAFKA_3_9)
    assert "flush ledger" in unplayable(SCENARIOS["LOSS-5"], KAFKA_3_9)


def test_an_unknown_cluster_is_one_clear_error(tmp_path):
    with pytest.raises(StrandlineError, match=r"--cluster 'kafka-2\.8': give one of strandline, kafka-3\.9"):
        unplayable(SCENARIOS["NET-1"], "kafka-2.8")
    with pytest.raises(StrandlineError, match="give one of"):
        make_cluster("kafka-2.8", tmp_path, 3, {}, None)


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_scenario_kafka_cannot_play_says_so_in_one_line_and_exits_3(command, capsys, tmp_path):
    if command == "run":
        status = run_scenario("EPO-3-legacy", 1, str(tmp_path), system=KAFKA_3_9)
    else:                               # compare with Kafka alone: nothing left to run
        status = compare_command("EPO-3-legacy", 1, str(tmp_path), systems=(KAFKA_3_9,))
    out = capsys.readouterr().out.splitlines()
    assert status == NOT_RUN
    assert len(out) == 1 and out[0].startswith("EPO-3-legacy: not played on Kafka 3.9: "), out
    assert not any(tmp_path.iterdir())


def test_a_kafka_lab_brokers_properties_carry_the_lab_keys_and_its_namespace_address(tmp_path):
    b = KafkaLabBroker(2, 9092, tmp_path, host="10.201.30.12")
    text = kafka_properties(b, "10.201.30.2:2181", {**LAB_BROKER_CONFIG, "unclean.leader.election.enable": "true"})
    props = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert props["broker.id"] == "2"
    assert props["listeners"] == "PLAINTEXT://10.201.30.12:9092"
    assert props["log.dirs"] == str(tmp_path / "kafka-2" / "logs")
    assert props["zookeeper.connect"] == "10.201.30.2:2181"
    assert props["replica.lag.time.max.ms"] == LAB_BROKER_CONFIG["replica.lag.time.max.ms"]
    assert props["zookeeper.session.timeout.ms"] == LAB_BROKER_CONFIG["zookeeper.session.timeout.ms"]
    assert props["replica.high.watermark.checkpoint.interval.ms"] == "200"
    assert props["unclean.leader.election.enable"] == "true"


def test_compare_stacks_the_two_timelines_one_above_the_other(tmp_path):
    from PIL import Image

    pngs = []
    for name, size, colour in (("a", (300, 100), "red"), ("b", (200, 50), "blue")):
        path = Path(tmp_path / f"{name}.png")
        Image.new("RGB", size, colour).save(path)
        pngs.append(path)
    out = stack_images(pngs, tmp_path / "both.png")
    with Image.open(out) as image:
        assert image.size == (300, 150)
        assert image.getpixel((150, 50)) == (255, 0, 0)
        assert image.getpixel((150, 125)) == (0, 0, 255)
        assert image.getpixel((10, 125)) == (255, 255, 255)      # the narrower one centred on white
