"""The KAFKA_ROOT shim that runs kafka-python's own test suites against Strandline
(tests/kafka_python_suite/shim.py): the JAAS file of ``-Djava.security.auth.login.config`` becomes
the ``listener.name.<l>.<mechanism>.sasl.jaas.config`` keys Kafka gives the same configuration with,
and the line it waits for is the broker's ready line."""

from __future__ import annotations

from strandline.runtime.broker_main import READY_PREFIX
from strandline.security import jaas
from tests.kafka_python_suite import shim

#: kafka-python's servers/resources/default/kafka_server_jaas.conf, rendered for SCRAM
JAAS_FILE = '''KafkaServer {
    org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="alice-secret";

};
Client {};
'''


def test_the_shim_waits_for_the_broker_s_own_ready_line():
    assert shim.READY_PREFIX == READY_PREFIX


def test_the_kafka_server_section_becomes_each_sasl_listener_s_jaas_key(tmp_path):
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(JAAS_FILE)
    props = {"listeners": "SASL_PLAINTEXT://localhost:9093,PLAINTEXT://localhost:9092",
             "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    [override] = shim.jaas_overrides(props, f"-Xmx1g -Djava.security.auth.login.config={path}")
    key, value = override.split("=", 1)
    assert key == "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"
    module = jaas.single(value)
    assert module.name.endswith("ScramLoginModule") and module.options == {"username": "alice",
                                                                           "password": "alice-secret"}
    # a mechanism whose login module is not in the section, no SASL listener, no JAAS file: nothing
    assert shim.jaas_overrides({**props, "sasl.enabled.mechanisms": "PLAIN"}, f"-Djava.security.auth.login.config={path}") == []
    assert shim.jaas_overrides({**props, "listeners": "SSL://localhost:9093"}, f"-Djava.security.auth.login.config={path}") == []
    assert shim.jaas_overrides(props, "") == []


def test_quotes_and_backslashes_survive_the_translation():
    module = jaas.LoginModule("org.apache.kafka.common.security.plain.PlainLoginModule", "required",
                              {"username": "a\"b", "password": "c\\d", "user_alice": "x\"y\\z"})
    assert jaas.single(shim.module_text(module)) == module
