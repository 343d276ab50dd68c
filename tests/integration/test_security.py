"""Security listeners against a real broker, with real clients (confluent-kafka, kafka-python): one
broker with four listeners, PLAINTEXT (the launcher's), SSL with ``ssl.client.auth=required``,
SASL_PLAINTEXT and SASL_SSL with PLAIN, an ACL authorizer and ``super.users=User:admin``, key
and trust stores inline in PEM (KIP-651), certificates from :mod:`strandline.security.certs`.

Then a second broker joins on the same ZooKeeper with SASL_SSL as the inter-broker listener: the
brokers authenticate to each other (TLS checked against the CA and the host name, SASL PLAIN as
User:admin) and replicate a topic between them."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from strandline.load.quota_probe import produce_flat_out
from strandline.security.certs import CertificateAuthority
from tests.conftest import free_ports, new_cluster, poll_until, wait_for_line

pytestmark = pytest.mark.integration

CA = CertificateAuthority.new("Strandline test CA")
BROKER_CERT = CA.issue("localhost", organization="Strandline", hosts=["127.0.0.1", "localhost"])
CLIENT_CERT = CA.issue("client", organization="Strandline")
ROGUE_CA = CertificateAuthority.new("Rogue CA")
ROGUE_CERT = ROGUE_CA.issue("client", organization="Strandline")

#: SASL_PLAINTEXT's sessions last this long (KIP-368): its clients re-authenticate
REAUTH_MS = 3000


def jaas(password: str = "admin-secret") -> str:
    """The listeners' PLAIN users; ``password``: the broker's own, for the inter-broker listener."""
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{password}" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


def security_properties(inter_broker: str = "SASL_SSL", password: str = "admin-secret") -> list[str]:
    return [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        f"inter.broker.listener.name={inter_broker}",
        "ssl.keystore.type=PEM", f"ssl.keystore.key={BROKER_CERT.key_pem.decode()}",
        f"ssl.keystore.certificate.chain={BROKER_CERT.cert_pem.decode()}",
        "ssl.truststore.type=PEM", f"ssl.truststore.certificates={CA.cert_pem.decode()}",
        "listener.name.ssl.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN", "sasl.mechanism.inter.broker.protocol=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas()}",
        f"listener.name.sasl_plaintext.connections.max.reauth.ms={REAUTH_MS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas(password)}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:admin;User:ANONYMOUS",
        "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0", "replica.lag.time.max.ms=3000",
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = new_cluster(tmp_path_factory.mktemp("security"), 1)
    ssl_port, sasl_port, sasl_ssl_port = free_ports(3)
    c.overrides += [f"listeners=PLAINTEXT://127.0.0.1:{c.base_port},SSL://127.0.0.1:{ssl_port},"
                    f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
                    *security_properties()]
    c.ports = {"SSL": ssl_port, "SASL_PLAINTEXT": sasl_port, "SASL_SSL": sasl_ssl_port}
    c.start(90)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    paths = {}
    for name, data in (("ca.pem", CA.cert_pem), ("client.key", CLIENT_CERT.key_pem),
                       ("client.pem", CLIENT_CERT.cert_pem), ("rogue.key", ROGUE_CERT.key_pem),
                       ("rogue.pem", ROGUE_CERT.cert_pem)):
        (d / name).write_bytes(data)
        paths[name] = str(d / name)
    return paths


def conf(cluster, files, listener: str, user: str | None = None, password: str | None = None, **extra) -> dict:
    c = {"bootstrap.servers": f"127.0.0.1:{cluster.ports[listener]}", "security.protocol": listener,
         "socket.timeout.ms": 5000}
    if listener.endswith("SSL"):
        c["ssl.ca.location"] = files["ca.pem"]
    if user is not None:
        c.update({"sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": password})
    c.update(extra)
    return c


def new_topic(cluster, partitions: int = 1, replicas: int = 1) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(30)
    return name


def produce(config: dict, topic: str, value: bytes = b"v") -> str:
    """One record; its delivery's error name ("NO_ERROR" if none)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**config, "message.timeout.ms": 8000, "retries": 0})
    producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err.name() if err else "NO_ERROR"))
    producer.flush(15)
    return errors[0] if errors else "NO_DELIVERY_REPORT"


def consume_all(config: dict, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        poll_until(lambda: (msg := consumer.poll(0.5)) is not None and not msg.error() and
                   got.append(msg.value()) is None and len(got) >= count, 30, message="records")
    finally:
        consumer.close()
    return got


def auth_error(config: dict) -> str:
    """The error a client gets asking for metadata: its error callback's, as text."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    seen: list[str] = []
    admin = AdminClient({**config, "error_cb": lambda err: seen.append(f"{err.name()}: {err.str()}")})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=6)
    poll_until(lambda: seen or admin.poll(0.2) or seen, 10, message="an error callback")
    return " | ".join(dict.fromkeys(seen))[:2000]


def test_every_listener_is_registered_in_zookeeper_as_kafka_writes_it(cluster):
    """/brokers/ids/<id> version 4: an endpoint per listener, the protocol map, and at the top the
    PLAINTEXT endpoint (what Kafka's tools and older clients read)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=f"127.0.0.1:{cluster.zk_port}")
    zk.start(10)
    try:
        data, _ = zk.get("/brokers/ids/1")
    finally:
        zk.stop()
        zk.close()
    obj = json.loads(data)
    p = cluster.ports
    assert (obj["version"], obj["host"], obj["port"]) == (4, "127.0.0.1", cluster.base_port)
    assert obj["endpoints"] == [f"PLAINTEXT://127.0.0.1:{cluster.base_port}", f"SSL://127.0.0.1:{p['SSL']}",
                                f"SASL_PLAINTEXT://127.0.0.1:{p['SASL_PLAINTEXT']}",
                                f"SASL_SSL://127.0.0.1:{p['SASL_SSL']}"]
    assert obj["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_plain_over_sasl_listeners_produces_and_consumes_and_metadata_names_that_listener(cluster, files, listener):
    from confluent_kafka.admin import AdminClient

    topic = new_topic(cluster)
    config = conf(cluster, files, listener, "admin", "admin-secret")
    brokers = AdminClient(config).list_topics(timeout=15).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", cluster.ports[listener])]
    assert produce(config, topic, b"secret-" + listener.encode()) == "NO_ERROR"
    assert consume_all(config, topic, 1) == [b"secret-" + listener.encode()]


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "whatever")])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_wrong_password_and_unknown_user_are_refused_with_kafkas_error(cluster, files, listener, user, password):
    error = auth_error(conf(cluster, files, listener, user, password))
    assert "_AUTHENTICATION" in error and "Invalid username or password" in error, error


def test_kafka_python_authenticates_with_plain_and_a_wrong_password_fails(cluster, files):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    base = {"bootstrap_servers": f"127.0.0.1:{cluster.ports['SASL_SSL']}", "security_protocol": "SASL_SSL",
            "ssl_cafile": files["ca.pem"], "sasl_mechanism": "PLAIN", "request_timeout_ms": 8000}
    topic = new_topic(cluster)
    admin = KafkaAdminClient(**base, sasl_plain_username="admin", sasl_plain_password="admin-secret")
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    # kafka-python 3 takes SASL_AUTHENTICATION_FAILED (or the connection's close after it) as a failed
    # connection and tries again until its bootstrap timeout (30 s by default)
    with pytest.raises(KafkaError):
        KafkaAdminClient(**base, sasl_plain_username="admin", sasl_plain_password="nope",
                         bootstrap_timeout_ms=3000).close()


def test_a_principal_without_an_acl_is_refused_and_one_with_it_is_served(cluster, files):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
        ResourcePatternType, ResourceType

    topic = new_topic(cluster)
    alice = conf(cluster, files, "SASL_PLAINTEXT", "alice", "alice-secret")
    assert produce(alice, topic) == "TOPIC_AUTHORIZATION_FAILED"
    grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    admin = AdminClient(conf(cluster, files, "SASL_PLAINTEXT", "admin", "admin-secret"))
    for future in admin.create_acls([grant]).values():
        future.result(30)
    poll_until(lambda: produce(alice, topic) == "NO_ERROR", 20, message="alice's write allowed")
    bob = conf(cluster, files, "SASL_PLAINTEXT", "bob", "bob-secret")
    assert produce(bob, topic) == "TOPIC_AUTHORIZATION_FAILED"          # the ACL names alice only


def test_ssl_client_certificate_is_the_principal(cluster, files):
    """ssl.client.auth=required: a certificate signed by the CA is served as User:CN=client,O=Strandline
    (Kafka's default principal: the whole distinguished name)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
        ResourcePatternType, ResourceType

    topic = new_topic(cluster)
    signed = conf(cluster, files, "SSL", **{"ssl.certificate.location": files["client.pem"],
                                            "ssl.key.location": files["client.key"]})
    assert produce(signed, topic) == "TOPIC_AUTHORIZATION_FAILED"
    grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:CN=client,O=Strandline", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_acls([grant]).values():
        future.result(30)
    poll_until(lambda: produce(signed, topic) == "NO_ERROR", 20, message="the certificate's write allowed")


def test_a_client_certificate_of_another_ca_or_none_is_refused(cluster, files):
    """ssl.client.auth=required: the TLS handshake fails for a certificate the CA did not sign and
    for none (TLS 1.3 reports it on the client's first read); the broker serves on."""
    import socket
    import ssl

    for cert in ("rogue", None):
        ctx = ssl.create_default_context(cafile=files["ca.pem"])
        if cert:
            ctx.load_cert_chain(files[f"{cert}.pem"], files[f"{cert}.key"])
        with socket.create_connection(("127.0.0.1", cluster.ports["SSL"]), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(b"\0\0\0\0")
                    assert tls.recv(1) == b""       # closed, if no alert came first
                    raise ConnectionResetError("closed without an alert")
        error = auth_error(conf(cluster, files, "SSL", **({"ssl.certificate.location": files[f"{cert}.pem"],
                                                          "ssl.key.location": files[f"{cert}.key"]} if cert else {})))
        assert error, "no error reported to confluent-kafka"
    # a certificate the CA signed is served; the broker serves on
    from confluent_kafka.admin import AdminClient

    signed = conf(cluster, files, "SSL", **{"ssl.certificate.location": files["client.pem"],
                                            "ssl.key.location": files["client.key"]})
    assert AdminClient(signed).list_topics(timeout=15).brokers
    assert produce(conf(cluster, files, "SASL_SSL", "admin", "admin-secret"), new_topic(cluster)) == "NO_ERROR"


def test_a_sasl_listener_closes_a_connection_that_sends_a_request_before_authenticating(cluster):
    from strandline.errors import StrandlineError
    from strandline.runtime.client import KafkaConnection

    with KafkaConnection(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}", timeout_s=5) as conn:
        with pytest.raises(StrandlineError, match="closed"):
            conn.request(3, 1, {"topics": None})
    with KafkaConnection(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}", timeout_s=5) as conn:
        answer = conn.request(17, 1, {"mechanism": "SCRAM-SHA-256"})
        assert int(answer.error_code) == 33 and list(answer.mechanisms) == ["PLAIN"]   # UNSUPPORTED_SASL_MECHANISM
    # before authentication a frame may not exceed sasl.server.max.receive.size (512 KiB)
    with KafkaConnection(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}", timeout_s=5) as conn:
        conn.sock.sendall((600_000).to_bytes(4, "big") + b"\0" * 1000)
        assert conn.sock.recv(1) == b""


def test_sessions_expire_without_reauthentication_and_librdkafka_reauthenticates(cluster, files):
    """connections.max.reauth.ms on SASL_PLAINTEXT (KIP-368): SaslAuthenticate v1 answers the
    session lifetime; a client that does not re-authenticate is closed once it has passed, while
    librdkafka, which does, keeps producing on its connection across several lifetimes."""
    import time

    from confluent_kafka import Producer

    from strandline.errors import StrandlineError
    from strandline.runtime.client import KafkaConnection
    from strandline.security.sasl import plain_client_token

    with KafkaConnection(f"127.0.0.1:{cluster.ports['SASL_PLAINTEXT']}", timeout_s=5) as conn:
        assert int(conn.request(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
        began = time.monotonic()
        answer = conn.request(36, 1, {"auth_bytes": plain_client_token("alice", "alice-secret")})
        assert int(answer.error_code) == 0 and answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS

        def closed() -> bool:
            try:
                conn.request(3, 1, {"topics": []})
                return False
            except StrandlineError:
                return True
        poll_until(closed, REAUTH_MS / 1000 + 10, interval=0.2, message="the expired session closed")
        assert time.monotonic() - began >= REAUTH_MS / 1000 - 0.5

    topic = new_topic(cluster)
    config = conf(cluster, files, "SASL_PLAINTEXT", "admin", "admin-secret")
    producer = Producer({**config, "message.timeout.ms": 8000, "retries": 0, "linger.ms": 0})
    errors: list[str] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:          # bounded: three session lifetimes, a record each 0.1 s
        producer.produce(topic, b"%d" % sent, on_delivery=lambda err, msg: errors.append(err.name() if err else "OK"))
        sent += 1
        producer.flush(10)
        producer.poll(0.1)
    # without re-authentication the broker closes the connection when a request comes after the
    # session's end, failing that produce (retries=0)
    assert sent >= 3 and errors == ["OK"] * sent
    assert len(consume_all(config, topic, sent)) == sent


def start_broker(cluster, tmp_path, broker_id: int, password: str = "admin-secret") -> subprocess.Popen:
    """Another broker on the cluster's ZooKeeper, with the same listeners (on other ports)."""
    plain, ssl_port, sasl_port, sasl_ssl_port = free_ports(4)
    props = [f"broker.id={broker_id}", f"log.dirs={tmp_path / f'logs-{broker_id}'}",
             f"zookeeper.connect=127.0.0.1:{cluster.zk_port}",
             f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},"
             f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}"]
    (tmp_path / f"server-{broker_id}.properties").write_text("\n".join(props) + "\n")
    cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config",
           str(tmp_path / f"server-{broker_id}.properties")]
    for item in security_properties(password=password):
        cmd += ["--override", item]
    with open(tmp_path / f"broker-{broker_id}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    wait_for_line(proc, "strandline broker ready", 60)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def create_assigned(cluster, assignment: list[int]) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"repl-{uuid.uuid4().hex[:8]}"
    creator = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        creator.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                        replica_assignments={0: assignment})])
    finally:
        creator.close()
    return topic


def partition(cluster, topic: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=5).topics[topic] \
        .partitions.get(0)


def test_brokers_replicate_over_the_sasl_ssl_inter_broker_listener(cluster, files, tmp_path):
    """inter.broker.listener.name=SASL_SSL: the controller's requests and the replica fetches go
    over TLS (the CA and host name checked) and SASL PLAIN as User:admin, both ways: a topic led
    by each broker gets both replicas in sync and serves what was written with acks=all."""
    proc = start_broker(cluster, tmp_path, 2)
    try:
        for assignment in ([1, 2], [2, 1]):
            topic = create_assigned(cluster, assignment)

            def in_sync(topic=topic, leader=assignment[0]):
                part = partition(cluster, topic)
                return part is not None and part.leader == leader and sorted(part.isrs) == [1, 2]
            poll_until(in_sync, 30, message=f"both replicas of {assignment} in sync")
            client = conf(cluster, files, "SASL_SSL", "admin", "admin-secret")
            assert produce({**client, "acks": "all"}, topic, b"replicated") == "NO_ERROR"
            assert consume_all(client, topic, 1) == [b"replicated"]
    finally:
        stop(proc)


def test_a_broker_with_a_wrong_inter_broker_password_cannot_fetch(cluster, files, tmp_path):
    """The follower's fetches to the leader are refused (SASL_AUTHENTICATION_FAILED): it says so in
    its log and stays out of the ISR, while the leader keeps serving."""
    proc = start_broker(cluster, tmp_path, 3, password="wrong")
    try:
        topic = create_assigned(cluster, [1, 3])
        log = tmp_path / "broker-3.log"
        poll_until(lambda: "SASL authentication failed (sasl_authentication_failed)" in log.read_text(), 30,
                   message="broker 3's failed authentication logged")
        poll_until(lambda: partition(cluster, topic).isrs == [1], 20, message="broker 3 out of the ISR")
        assert partition(cluster, topic).leader == 1
        assert produce(conf(cluster, files, "SASL_SSL", "admin", "admin-secret"), topic) == "NO_ERROR"
    finally:
        stop(proc)


def _metadata_v0(correlation_id: int) -> bytes:
    """A Metadata v0 request for every topic, framed."""
    import struct

    body = struct.pack(">hhih", 3, 0, correlation_id, -1) + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def test_the_fuzzers_check_sees_an_answer_given_before_authentication(cluster):
    """The fuzzer's check can fail: a Metadata answered on a listener taken to ask for SASL (the
    PLAINTEXT one) is recorded; on the SASL listener the same frame is not answered, the
    connection is closed."""
    import asyncio

    from strandline.fuzz.run import Access, exchange

    told_sasl = Access(sasl=True)
    on_plaintext = asyncio.run(exchange("127.0.0.1", cluster.base_port, _metadata_v0(7), 1 << 20, 10, told_sasl))
    assert on_plaintext.served and "[3]" in on_plaintext.served, on_plaintext
    on_sasl = asyncio.run(exchange("127.0.0.1", cluster.ports["SASL_PLAINTEXT"], _metadata_v0(7), 1 << 20, 10,
                                   told_sasl))
    assert on_sasl.served is None and on_sasl.hang is None and not on_sasl.refused, on_sasl


def admin_properties(tmp_path, files) -> str:
    """A --command-config file: User:admin with PLAIN over SASL_SSL, the CA's certificate trusted."""
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                          f"sasl.password=admin-secret\nssl.truststore.location={files['ca.pem']}\n"
                          "ssl.truststore.type=PEM\n")
    return str(properties)


def test_bench_produces_and_consumes_over_sasl_ssl_with_command_config(cluster, files, tmp_path):
    """`strandline bench produce|consume --command-config` hands the listener's settings to every
    worker's client; the raw consumer, which speaks PLAINTEXT only, is refused in one line."""
    from tests.conftest import run_cli

    topic = new_topic(cluster)
    base = ["--bootstrap-server", f"127.0.0.1:{cluster.ports['SASL_SSL']}", "--command-config",
            admin_properties(tmp_path, files), "--topic", topic, "--num-records", "3000"]
    produced = run_cli("bench", "produce", *base, "--record-size", "100", "--processes", "2", timeout=120)
    assert produced.returncode == 0, produced.stdout[-2000:] + produced.stderr[-2000:]
    assert "3000 records sent" in produced.stdout, produced.stdout
    consumed = run_cli("bench", "consume", *base, timeout=120)
    assert consumed.returncode == 0, consumed.stdout[-2000:] + consumed.stderr[-2000:]
    assert "3000 records" in consumed.stdout.splitlines()[-1], consumed.stdout
    raw = run_cli("bench", "consume", *base, "--client", "raw", timeout=60)
    assert (raw.returncode, raw.stderr.count("\n")) == (2, 1), raw
    assert "--client raw speaks PLAINTEXT only" in raw.stderr, raw.stderr


def test_fuzzing_the_sasl_ssl_listener_serves_nothing_before_authentication(cluster, files, tmp_path):
    """``strandline fuzz --command-config`` against SASL_SSL: the fuzzed connections make their TLS
    handshake and never authenticate; the broker answers none of their requests but ApiVersions
    and the SASL ones, stays up, and the fuzzer's own producer and consumer, authenticated as
    admin, still work."""
    import re

    from tests.conftest import pid_alive, run_cli

    properties = admin_properties(tmp_path, files)
    result = run_cli("fuzz", "--bootstrap-server", f"127.0.0.1:{cluster.ports['SASL_SSL']}", "--command-config",
                     str(properties), "--minutes", "0.3", "--seed", "44", "--record-dir", str(tmp_path / "records"),
                     "--concurrency", "8", timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    final = result.stdout.strip().splitlines()[-1]
    m = re.search(r"fuzz: OK: ([\d,]+) frames .* 0 broker deaths, 0 hangs, 0 failed checks, "
                  r"0 answers before authentication", final)
    assert m, final
    assert int(m.group(1).replace(",", "")) > 1_000, final
    assert pid_alive(cluster.broker_pid(1))


QUOTA_BYTES = 1024 * 1024           # producer_byte_rate of User:alice: 1 MiB/s


def test_a_users_produce_quota_holds_an_authenticated_producer_within_20_percent(cluster, files):
    """Quotas by principal (KIP-55): ``strandline configs`` gives User:alice producer_byte_rate 1 MiB/s.
    alice, authenticated with SASL PLAIN over TLS, produces as fast as she can for 32 s: Kafka's
    rate window lets a client send 10 s' worth of its quota at once, so the rate is measured on
    what was acknowledged from 12 s to 32 s, and it is within 20 % of the quota; her answers carry
    throttle_time_ms. User:admin, with no quota, produces well above it unthrottled."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
        ResourcePatternType, ResourceType

    from tests.conftest import run_cli

    topic = new_topic(cluster)
    admin = AdminClient(conf(cluster, files, "SASL_SSL", "admin", "admin-secret"))
    grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([grant]).values():
        future.result(30)
    done = run_cli("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "users", "--entity-name",
                   "alice", "--alter", "--add-config", f"producer_byte_rate={QUOTA_BYTES}")
    assert done.returncode == 0, done.stderr

    # alice must be allowed before she is measured (the ACL reaches the authorizer through ZooKeeper)
    poll_until(lambda: produce(conf(cluster, files, "SASL_SSL", "alice", "alice-secret"), topic) == "NO_ERROR", 20,
               message="alice's write allowed")
    free = produce_flat_out(conf(cluster, files, "SASL_SSL", "admin", "admin-secret"), topic, 3.0)
    free_rate = free.rate_after(0.0)
    held = produce_flat_out(conf(cluster, files, "SASL_SSL", "alice", "alice-secret"), topic, 32.0)
    rate = held.rate_after(12.0)
    print(f"User:alice with producer_byte_rate {QUOTA_BYTES}: {rate:,.0f} B/s from 12 s to 32 s "
          f"({rate / QUOTA_BYTES:.2f} of the quota), {len(held.throttles)} throttled answers, max "
          f"{max(held.throttles, default=0)} ms; User:admin without a quota: {free_rate:,.0f} B/s")
    assert free_rate > 2 * QUOTA_BYTES and not free.throttled()
    assert held.throttled()
    assert 0.8 * QUOTA_BYTES <= rate <= 1.2 * QUOTA_BYTES, rate


# -- kafka-python, aiokafka and kcat with a client certificate (tests/integration/security_clients.py)

@pytest.fixture(scope="module")
def certificate_acls(cluster):
    """User:CN=client,O=Strandline may use the topics and groups the clients' round trips make."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
        ResourcePatternType, ResourceType

    principal = "User:CN=client,O=Strandline"
    grants = [AclBinding(ResourceType.TOPIC, "sec-", ResourcePatternType.PREFIXED, principal, "*",
                         AclOperation.ALL, AclPermissionType.ALLOW),
              AclBinding(ResourceType.GROUP, "g-sec-", ResourcePatternType.PREFIXED, principal, "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_acls(grants).values():
        future.result(30)
    return principal


def ssl_auth(cluster, files, cert: str | None):
    from tests.integration.security_clients import Auth

    return Auth(f"127.0.0.1:{cluster.ports['SSL']}", "SSL", ca=files["ca.pem"],
                cert=files[f"{cert}.pem"] if cert else None, key=files[f"{cert}.key"] if cert else None)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_other_clients_round_trip_with_a_client_certificate(cluster, files, certificate_acls, client):
    from tests.integration.security_clients import round_trip

    round_trip(client, ssl_auth(cluster, files, "client"))


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_other_clients_are_refused_a_certificate_of_another_ca(cluster, files, client):
    """ssl.client.auth=required: the handshake fails (TLS 1.3: the client learns it at its first
    read, as an alert or a closed connection)."""
    from tests.integration.security_clients import auth_failure

    error = auth_failure(client, ssl_auth(cluster, files, "rogue"))
    signs = {"kcat": ("ssl routines",), "kafka-python": ("unable to bootstrap", "socket disconnected"),
             "aiokafka": ("unable to bootstrap", "closed")}[client]
    assert all(sign in error.lower() for sign in signs), error


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kcat"])
def test_other_clients_round_trip_with_plain_over_sasl_ssl(cluster, files, client):
    """PLAIN inside TLS (the broker's certificate checked against the CA), as the super user admin."""
    from tests.integration.security_clients import Auth, round_trip

    round_trip(client, Auth(f"127.0.0.1:{cluster.ports['SASL_SSL']}", "SASL_SSL", "PLAIN", "admin", "admin-secret",
                            ca=files["ca.pem"]))
