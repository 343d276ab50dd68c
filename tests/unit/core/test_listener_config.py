"""Listeners as Kafka configures them: names, the security protocol map, the inter-broker
listener, per-listener security keys."""

import pytest

from strandline.core.config import BrokerConfig
from strandline.core.config_key import ConfigError


def cfg(**props):
    return BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", **props})


def test_kafka_default_protocol_map_and_inter_broker_listener():
    c = cfg(**{"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://:9094"})
    assert [(l.name, l.protocol, l.port) for l in c.listeners] == [
        ("PLAINTEXT", "PLAINTEXT", 9092), ("SSL", "SSL", 9093), ("SASL_SSL", "SASL_SSL", 9094)]
    assert c.inter_broker_listener == "PLAINTEXT" and c["inter.broker.listener.name"] is None
    assert c.registered_endpoints()[2] == ("SASL_SSL", "127.0.0.1", 9094, "SASL_SSL")   # a wildcard host


def test_named_listeners_and_their_keys():
    c = cfg(**{"listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:0",
               "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,REPLICATION:SSL",
               "inter.broker.listener.name": "REPLICATION",
               "ssl.client.auth": "requested",
               "listener.name.replication.ssl.client.auth": "required",
               "listener.name.client.plain.sasl.jaas.config": "x required;",
               "sasl.enabled.mechanisms": "PLAIN"})
    assert c.inter_broker_listener == "REPLICATION"
    assert next(l for l in c.listeners if l.name == c.inter_broker_listener).protocol == "SSL"
    assert c.listener_config("REPLICATION")["ssl.client.auth"] == "required"
    assert c.listener_config("CLIENT")["ssl.client.auth"] == "requested"
    assert c.listener_config("CLIENT")["plain.sasl.jaas.config"] == "x required;"
    assert c.listener_config("CLIENT")["sasl.enabled.mechanisms"] == ["PLAIN"]
    c.bound("REPLICATION", 40123)               # port 0: advertised as bound
    assert c.advertised.port == 40123 and c.advertised.name == "REPLICATION"


@pytest.mark.parametrize("props,message", [
    ({"listeners": "CLIENT://:9092"}, "no security protocol defined for listener CLIENT"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "PLAINTEXT is listed twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "different port"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:9093"}, "SSL is not one of the listeners"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "SSL"}, "inter.broker.listener.name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name": "SSL",
      "security.inter.broker.protocol": "SSL"}, "Only one of inter.broker.listener.name"),
    ({"listener.security.protocol.map": "A:TLS"}, "listener.security.protocol.map"),
    ({"listener.name.ssl.no.such.key": "1"}, "listener.name.ssl.no.such.key"),
    ({"listener.name.ssl.ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
])
def test_bad_listener_configs_are_named(props, message):
    with pytest.raises(ConfigError, match=message):
        cfg(**props)
