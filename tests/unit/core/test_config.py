"""Broker configuration: Kafka's keys and defaults; unknown keys and bad values refused by name."""

import pytest

from strandline.core.config import BrokerConfig, parse_properties
from strandline.core.config_key import ConfigError
from strandline.core.topic_keys import parse_topic_configs


def cfg(**extra):
    props = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_properties(props)


def test_kafka_defaults():
    c = cfg()
    assert c["zookeeper.session.timeout.ms"] == 18000
    assert c["replica.lag.time.max.ms"] == 30000
    assert c["min.insync.replicas"] == 1
    assert c["unclean.leader.election.enable"] is False
    assert c["auto.create.topics.enable"] is True
    assert c["message.max.bytes"] == 1048588
    assert c["log.retention.ms"] == 168 * 3600_000
    assert c["log.roll.ms"] == 168 * 3600_000
    assert c["replica.high.watermark.checkpoint.interval.ms"] == 5000
    assert c["log.flush.offset.checkpoint.interval.ms"] == 60000
    lc = c.log_config()
    assert lc.segment_bytes == 1073741824 and lc.retention_bytes == -1


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="'log.segmnet.bytes'"):
        BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "x:1", "log.segmnet.bytes": "1"})


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match="num.partitions"):
        cfg(num_partitions="many")
    with pytest.raises(ConfigError, match="auto.create.topics.enable"):
        BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "x:1", "auto.create.topics.enable": "yes"})


def test_missing_broker_id():
    with pytest.raises(ConfigError, match="broker.id"):
        BrokerConfig.from_properties({"zookeeper.connect": "x:1"})


def test_derived_retention_and_topic_overrides():
    c = cfg(log_retention_minutes="5")
    assert c["log.retention.ms"] == 300000
    topic = parse_topic_configs({"retention.ms": "1000", "segment.bytes": "4096"})
    lc = c.log_config(topic)
    assert lc.retention_ms == 1000 and lc.segment_bytes == 4096
    with pytest.raises(ConfigError, match="retention.mss"):
        parse_topic_configs({"retention.mss": "1"})


def test_properties_file_parsing():
    props = parse_properties("# comment\nbroker.id=3\n\nlisteners = PLAINTEXT://127.0.0.1:9093\n")
    assert props == {"broker.id": "3", "listeners": "PLAINTEXT://127.0.0.1:9093"}
    with pytest.raises(ConfigError, match="line 1|:1:"):
        parse_properties("garbage\n")


def test_the_server_properties_of_kafka_pythons_test_broker_are_accepted():
    """The file kafka-python's integration suite writes for a Kafka 2.8 broker (less its ACL
    authorizer line): every key is a Kafka broker key, so Strandline starts from it unchanged."""
    text = """broker.id=0
listeners=PLAINTEXT://127.0.0.1:9092
security.inter.broker.protocol=PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/data
num.partitions=4
default.replication.factor=1
replica.lag.time.max.ms=1000
replica.socket.timeout.ms=1000
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=false
offsets.commit.timeout.ms=500
offsets.topic.num.partitions=2
group.min.session.timeout.ms=1000
zookeeper.connect=127.0.0.1:2181/kp
zookeeper.connection.timeout.ms=30000
zookeeper.session.timeout.ms=500
group.initial.rebalance.delay.ms=0
"""
    c = BrokerConfig.from_properties(parse_properties(text))
    assert c["transaction.state.log.replication.factor"] == 1 and c["transaction.state.log.num.partitions"] == 50
    assert c["security.inter.broker.protocol"] == "PLAINTEXT"
    with pytest.raises(ConfigError, match="security.inter.broker.protocol"):
        cfg(**{"security.inter.broker.protocol": "SSL"})


def test_replica_selector_class_takes_kafkas_rack_aware_selector_or_none():
    base = {"broker.id": "1", "zookeeper.connect": "x:1"}
    assert BrokerConfig.from_properties(base)["replica.selector.class"] is None
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert BrokerConfig.from_properties({**base, "replica.selector.class": rack_aware})[
        "replica.selector.class"] == rack_aware
    with pytest.raises(ConfigError, match="replica.selector.class.*RackAwareReplicaSelector"):
        BrokerConfig.from_properties({**base, "replica.selector.class": "com.example.NearestReplica"})


@pytest.mark.parametrize("brokers, factor", [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_strandline_up_gives_small_clusters_internal_topics_they_can_create(brokers, factor):
    """The internal topics are created with their replication factor or not at all: `strandline up
    --brokers N` with N < 3 sets both keys to N (Kafka's single-broker server.properties sets them
    to 1), and leaves Kafka's default 3 otherwise; an --override still wins."""
    from pathlib import Path

    from strandline.core.config import load_broker_config
    from strandline.launch.brokers import broker_properties

    text = broker_properties(1, 9092, Path("/data/logs"), "127.0.0.1:2181", cluster_size=brokers)
    config = load_broker_config("server.properties", [], reader=lambda path: text)
    assert config["offsets.topic.replication.factor"] == factor
    assert config["transaction.state.log.replication.factor"] == factor
    overridden = load_broker_config("server.properties", ["offsets.topic.replication.factor=2"],
                                    reader=lambda path: text)
    assert overridden["offsets.topic.replication.factor"] == 2
