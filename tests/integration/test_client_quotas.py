"""Client quotas with real clients against a 1-broker Strandline: kafka-python's protocol classes
alter and describe quotas (AlterClientQuotas, DescribeClientQuotas, DescribeUserScramCredentials);
confluent-kafka's producer and consumer are held to ``producer_byte_rate`` and
``consumer_byte_rate`` as Kafka's ClientQuotaManager holds them (throttle_time_ms in the answers,
the connection muted), while a client id without a quota runs at full speed.

Kafka measures a rate over 11 one-second windows and counts at least 10 s, so a client may first
send 10 s' worth of its quota at once and is then held back: over a run of T seconds it moves at
most the quota times (T + 10 s) / T, which is the upper bound checked here (T = 12 s: 1.83 times
the quota); the lower bound (half the quota) only shows the client was not stopped.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration

QUOTA = 100 * 1024              # bytes per second
RUN_S = 12.0
VALUE = b"q" * 1000


def _admin(cluster):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)


def _send(admin, request):
    """One request through kafka-python's own client (it negotiates the version with ApiVersions)."""
    async def send():
        return await admin._manager.send(request)

    return admin._manager.run(send)


def _alter(admin, entity: list[tuple[str, str | None]], ops: list[tuple[str, float | None]]):
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

    response = _send(admin, AlterClientQuotasRequest(entries=[(
        [(t, n) for t, n in entity], [(k, 0.0 if v is None else v, v is None) for k, v in ops])],
        validate_only=False))
    return [(e.error_code, e.error_message) for e in response.entries]


def _describe(admin, components: list[tuple[str, int, str | None]], strict: bool) -> dict:
    from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest

    response = _send(admin, DescribeClientQuotasRequest(components=components, strict=strict))
    assert response.error_code == 0, response
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


@pytest.fixture(scope="module")
def quotas(cluster):
    """client-id quota-producer: 100 KB/s produced; (User:ANONYMOUS, quota-consumer): 100 KB/s
    fetched (every connection here is PLAINTEXT, so its user is ANONYMOUS, as in Kafka)."""
    admin = _admin(cluster)
    try:
        assert _alter(admin, [("client-id", "quota-producer")], [("producer_byte_rate", float(QUOTA))]) == [(0, None)]
        assert _alter(admin, [("user", "ANONYMOUS"), ("client-id", "quota-consumer")],
                      [("consumer_byte_rate", float(QUOTA))]) == [(0, None)]
        yield admin
    finally:
        admin.close()


def test_a_real_client_alters_and_describes_quotas(quotas):
    admin = quotas
    assert _alter(admin, [("user", "bob")], [("producer_byte_rate", 1.5)]) == [
        (42, "Configuration producer_byte_rate must be a LONG value")]          # INVALID_REQUEST
    assert _alter(admin, [("user", "bob")], [("no_such_quota", 1.0)]) == [(42, "Invalid configuration key no_such_quota")]
    assert _describe(admin, [("client-id", 0, "quota-producer")], strict=True) == {
        (("client-id", "quota-producer"),): {"producer_byte_rate": float(QUOTA)}}
    assert _describe(admin, [("user", 2, None)], strict=False) == {
        (("user", "ANONYMOUS"), ("client-id", "quota-consumer")): {"consumer_byte_rate": float(QUOTA)}}
    assert admin.describe_user_scram_credentials() == {}                        # none stored


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float) -> tuple[float, list[int]]:
    """Produce as fast as the broker lets for ``seconds``; (acknowledged value bytes per second, throttle times)."""
    from confluent_kafka import Producer

    acked, throttles = [0], []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time),
                         "queue.buffering.max.kbytes": 256})

    def delivered(err, msg):
        if err is None and time.monotonic() < deadline:
            acked[0] += len(msg.value())

    start = time.monotonic()
    deadline = start + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return acked[0] / seconds, [int(t * 1000) if isinstance(t, float) else t for t in throttles]


def _consume_for(bootstrap: str, topic: str, client_id: str, seconds: float, limit: int) -> tuple[float, list]:
    """Read partition 0 from the start for ``seconds`` or until ``limit`` bytes; (value bytes per second, throttles)."""
    from confluent_kafka import Consumer, TopicPartition

    throttles = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                         "enable.auto.commit": False, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    start = time.monotonic()
    deadline = start + seconds
    try:
        while time.monotonic() < deadline and read < limit:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                read += len(msg.value())
    finally:
        consumer.close()
    return read / (time.monotonic() - start), throttles


def test_a_producer_is_held_to_its_byte_rate_and_another_client_is_not(cluster, quotas):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("produced", 1, 1)])["produced"].result(30)
    free, free_throttles = _produce_for(cluster.bootstrap, "produced", "free-producer", 3.0)
    held, throttles = _produce_for(cluster.bootstrap, "produced", "quota-producer", RUN_S)
    print(f"producer with a {QUOTA} B/s quota: {held:.0f} B/s over {RUN_S} s; without: {free:.0f} B/s; "
          f"{len(throttles)} throttled answers")
    assert free > 4 * QUOTA and not free_throttles
    assert throttles and max(throttles) > 0
    assert 0.5 * QUOTA <= held <= QUOTA * (RUN_S + 10) / RUN_S, held


def test_a_consumer_is_held_to_its_byte_rate_and_another_client_is_not(cluster, quotas):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("fetched", 1, 1)])["fetched"].result(30)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "client.id": "filler"})
    total = 3 * 1024 * 1024
    for _ in range(total // len(VALUE)):
        while True:
            try:
                producer.produce("fetched", VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    filled = (total // len(VALUE)) * len(VALUE)
    free, free_throttles = _consume_for(cluster.bootstrap, "fetched", "free-consumer", 30.0, filled)
    held, throttles = _consume_for(cluster.bootstrap, "fetched", "quota-consumer", RUN_S, filled)
    print(f"consumer with a {QUOTA} B/s quota: {held:.0f} B/s over {RUN_S} s; without: {free:.0f} B/s; "
          f"{len(throttles)} throttled answers")
    assert free > 4 * QUOTA and not free_throttles
    assert throttles
    assert 0.5 * QUOTA <= held <= QUOTA * (RUN_S + 10) / RUN_S, held


def test_strandline_configs_creates_scram_credentials_and_user_quotas(cluster):
    """`strandline configs --entity-type users` (kafka-configs' syntax): the SCRAM credential lands in
    ZooKeeper's /config/users/<user> as Kafka stores it, and a SCRAM exchange against what was
    stored succeeds with the password (scramp's client, Strandline's SCRAM server) and fails with
    another one; quotas are described back and deleted."""
    import json

    import scramp
    from kazoo.client import KazooClient

    from strandline.security.sasl import AuthenticationFailed, SaslContext
    from strandline.security.scram_server import ScramServer
    from tests.conftest import run_cli

    base = ["configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "users", "--entity-name", "carol"]
    done = run_cli(*base, "--alter", "--add-config",
                   "SCRAM-SHA-256=[iterations=8192,password=carol-pw],consumer_byte_rate=2048")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Completed updating config for user carol.\n", "")
    described = run_cli(*base, "--describe")
    assert described.stdout == ("Quota configs for user-principal 'carol' are consumer_byte_rate=2048.0\n"
                                "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192\n"
                                ), described

    zk = KazooClient(hosts=f"127.0.0.1:{cluster.zk_port}")
    zk.start(timeout=10)
    try:
        stored = json.loads(zk.get("/config/users/carol")[0])["config"]
    finally:
        zk.stop()
    assert stored["consumer_byte_rate"] == "2048" and stored["SCRAM-SHA-256"].endswith(",iterations=8192")

    def exchange(password: str) -> str:
        server = ScramServer(SaslContext("SASL_SSL", {}, lambda u, m: stored.get(m) if u == "carol" else None, 0),
                             "SCRAM-SHA-256")
        client = scramp.ScramClient(["SCRAM-SHA-256"], "carol", password)
        client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
        client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
        return server.authorization_id
    assert exchange("carol-pw") == "carol"
    with pytest.raises(AuthenticationFailed):
        exchange("guess")

    done = run_cli(*base, "--alter", "--delete-config", "SCRAM-SHA-256,consumer_byte_rate")
    assert done.returncode == 0, done.stderr
    assert run_cli(*base, "--describe").stdout == ""
