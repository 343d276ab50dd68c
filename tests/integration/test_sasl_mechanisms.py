"""Every SASL mechanism on a real broker, with real clients: one broker whose SASL_PLAINTEXT
listener offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's unsecured tokens,
KIP-255). SCRAM users are made with `strandline configs --entity-type users` (stored in
ZooKeeper as Kafka stores them, KIP-554); each client produces and reads back a record, and a
wrong password or an unknown user is refused with SASL_AUTHENTICATION_FAILED."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import free_ports, new_cluster, run_cli

pytestmark = pytest.mark.integration

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = new_cluster(tmp_path_factory.mktemp("sasl-mechanisms"), 1)
    [sasl_port] = free_ports(1)
    c.overrides += [f"listeners=PLAINTEXT://127.0.0.1:{c.base_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                    f"sasl.enabled.mechanisms={','.join(MECHANISMS)}",
                    f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                    f"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={OAUTH_JAAS}",
                    "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0"]
    c.sasl = f"127.0.0.1:{sasl_port}"
    c.start(90)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        made = run_cli("configs", "--bootstrap-server", c.bootstrap, "--entity-type", "users", "--entity-name",
                       "carol", "--alter", "--add-config", f"{mechanism}=[iterations=4096,password=carol-secret]")
        assert made.returncode == 0, made.stderr
    yield c
    c.stop()


def client_conf(cluster, mechanism: str, user: str = "", password: str = "") -> dict:
    conf = {"bootstrap.servers": cluster.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "socket.timeout.ms": 5000}
    if mechanism == "OAUTHBEARER":
        conf.update({"enable.sasl.oauthbearer.unsecure.jwt": "true",
                     "sasl.oauthbearer.config": f"principal={user} lifeSeconds=3600"})
    else:
        conf.update({"sasl.username": user, "sasl.password": password})
    return conf


def round_trip(conf: dict) -> tuple[str, list[bytes]]:
    """Produce one record to a new topic and read it back: (the delivery's error name, values read)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"mech-{uuid.uuid4().hex[:8]}"
    outcome: list[str] = []
    producer = Producer({**conf, "message.timeout.ms": 10000, "retries": 0})
    producer.produce(topic, b"hello " + topic.encode(), on_delivery=lambda err, msg: outcome.append(
        err.name() if err else "NO_ERROR"))
    producer.flush(20)
    if outcome != ["NO_ERROR"]:
        return (outcome or ["NO_DELIVERY_REPORT"])[0], []
    consumer = Consumer({**conf, "group.id": "g-" + topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        read = [m.value() for m in consumer.consume(num_messages=1, timeout=15) if m.error() is None]
    finally:
        consumer.close()
    return "NO_ERROR", read


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "alice-secret"),
                                                       ("SCRAM-SHA-256", "carol", "carol-secret"),
                                                       ("SCRAM-SHA-512", "carol", "carol-secret"),
                                                       ("OAUTHBEARER", "dave", "")])
def test_confluent_kafka_authenticates_with_each_mechanism(cluster, mechanism, user, password):
    error, read = round_trip(client_conf(cluster, mechanism, user, password))
    assert error == "NO_ERROR" and len(read) == 1 and read[0].startswith(b"hello "), (error, read)


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "x"),
                                                       ("SCRAM-SHA-256", "carol", "wrong"),
                                                       ("SCRAM-SHA-512", "nobody", "carol-secret")])
def test_a_wrong_password_or_an_unknown_user_is_refused(cluster, mechanism, user, password):
    import time

    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError] = []
    producer = Producer({**client_conf(cluster, mechanism, user, password), "log_level": 0,
                         "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    assert "Authentication failed" in errors[0].str(), errors[0].str()


def test_kafka_python_authenticates_with_scram(cluster):
    from kafka import KafkaConsumer, KafkaProducer

    common = {"bootstrap_servers": cluster.sasl, "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}
    topic = f"mech-kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**common)
    producer.send(topic, b"from kafka-python").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, **common, auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [b"from kafka-python"]


# -- kafka-python, aiokafka and kcat with each mechanism (tests/integration/security_clients.py) ----

#: a user of each mechanism, and its password
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("carol", "carol-secret"),
         "SCRAM-SHA-512": ("carol", "carol-secret"), "OAUTHBEARER": ("dave", "")}


def auth(cluster, mechanism: str, user: str, password: str, **extra):
    from tests.integration.security_clients import Auth

    return Auth(cluster.sasl, "SASL_PLAINTEXT", mechanism, user, password, **extra)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_other_clients_round_trip_with_each_mechanism(cluster, client, mechanism):
    """kafka-python with SCRAM-SHA-512 is test_kafka_python_authenticates_with_scram."""
    from tests.integration.security_clients import round_trip

    if (client, mechanism) == ("kafka-python", "SCRAM-SHA-512"):
        pytest.skip("proved by test_kafka_python_authenticates_with_scram")
    round_trip(client, auth(cluster, mechanism, *USERS[mechanism]))


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "x"),
                                                       ("SCRAM-SHA-256", "carol", "wrong"),
                                                       ("SCRAM-SHA-256", "nobody", "carol-secret")])
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_other_clients_are_refused_a_wrong_password_or_an_unknown_user(cluster, client, mechanism, user, password):
    from tests.integration.security_clients import auth_failure, refused_as

    error = auth_failure(client, auth(cluster, mechanism, user, password))
    assert refused_as(error, "Authentication failed") if client == "kafka-python" else \
        "Authentication failed" in error, error


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_an_expired_oauthbearer_token_is_refused(cluster, client):
    """A token whose exp passed a minute ago (each client's token callback gives it; kcat makes its
    own tokens, always unexpired): the broker answers invalid_token, then SASL_AUTHENTICATION_FAILED."""
    from tests.integration.security_clients import auth_failure, refused_as

    error = auth_failure(client, auth(cluster, "OAUTHBEARER", "dave", "", token_lifetime_s=-60))
    assert refused_as(error, "invalid_token") if client == "kafka-python" else "invalid_token" in error, error
