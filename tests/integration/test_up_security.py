"""`strandline up --security sasl_ssl`: one cluster of two brokers for the module, as a user starts it.

up makes a CA and the brokers' certificate, users admin, broker and client with random
SCRAM-SHA-512 passwords, and client.properties/admin.properties (0600) for --command-config; it
prints where they are and their keys, never a password. The brokers' one listener is SASL_SSL,
and they authenticate to each other on it as User:broker with SCRAM-SHA-512 over TLS (a topic
with a replica on each broker gets both in sync). Then SCRAM-SHA-512 over SASL_SSL with each
real client (confluent-kafka, kafka-python, aiokafka, kcat): a round trip, a wrong password, an
unknown user, and a user without ACLs. Last, up started again on the same data directory keeps
the CA and the passwords: the same client.properties still works."""

from __future__ import annotations

import json
import stat
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import new_cluster, poll_until, run_cli, strandline_cmd
from tests.integration.security_clients import CLIENTS, Auth, auth_failure, produce, refused_as, round_trip

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    parent = tmp_path_factory.mktemp("up-security")
    c = new_cluster(parent, 2)
    c.security = "sasl_ssl"
    c.stdout = parent / "up.out"
    c.start(120)
    c.dir = c.data_dir / "security"
    c.passwords = json.loads((c.dir / "users.json").read_text())
    yield c
    c.stop()


def cli(c, *args: str, user: str = "client"):
    return run_cli(*args, "--bootstrap-server", c.bootstrap, "--command-config", str(c.dir / f"{user}.properties"))


def scram(c, user: str, password: str | None = None) -> Auth:
    return Auth(c.bootstrap, "SASL_SSL", "SCRAM-SHA-512", user, c.passwords.get(user, "") if password is None
                else password, ca=str(c.dir / "ca.pem"))


def test_up_prints_where_the_client_properties_are_and_never_a_password(secured):
    c = secured
    printed = c.printed
    assert f"client.properties={c.dir / 'client.properties'}" in printed
    assert f"admin.properties={c.dir / 'admin.properties'}" in printed
    assert "keys: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.type, " \
           "ssl.truststore.location" in printed
    assert c.info["security"] == {"mode": "sasl_ssl", "protocol": "SASL_SSL",
                                  "client_properties": str(c.dir / "client.properties"),
                                  "admin_properties": str(c.dir / "admin.properties")}
    secrets = [c.dir / name for name in ("users.json", "ca.key", "broker.pem", "client.properties",
                                          "admin.properties")] + \
        [c.data_dir / f"broker-{i}" / "server.properties" for i in (1, 2)]
    for path in secrets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(c.dir.stat().st_mode) == 0o700
    logs = [printed, c.log_path.read_text()] + \
        [(c.data_dir / f"broker-{i}" / name).read_text() for i in (1, 2) for name in ("broker.log", "broker.out")]
    assert set(c.passwords) == {"admin", "client", "broker"} and len(set(c.passwords.values())) == 3
    for password in c.passwords.values():
        assert len(password) >= 20 and not any(password in text for text in logs)
    props = (c.dir / "client.properties").read_text()
    assert f'username="client" password="{c.passwords["client"]}"' in props and "security.protocol=SASL_SSL" in props
    server = (c.data_dir / "broker-1" / "server.properties").read_text()
    assert f"listeners=SASL_SSL://127.0.0.1:{c.base_port}" in server
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" in server
    assert "inter.broker.listener.name=SASL_SSL" in server and "PLAINTEXT://" not in server


def test_the_cli_works_with_client_properties_and_the_brokers_replicate_over_scram(secured):
    """topics, produce and consume with --command-config client.properties; the topic's two
    replicas get in sync: the follower fetched from the leader over SASL_SSL as User:broker."""
    c = secured
    topic = f"up-{uuid.uuid4().hex[:8]}"
    made = cli(c, "topics", "create", "--topic", topic, "--partitions", "2", "--replication-factor", "2")
    assert made.returncode == 0, made.stderr
    sent = subprocess.run(strandline_cmd("produce", "--bootstrap-server", c.bootstrap, "--command-config",
                                         str(c.dir / "client.properties"), "--topic", topic, "--acks", "all"),
                          input="one\ntwo\nthree\n", capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    read = cli(c, "consume", "--topic", topic, "--from-beginning", "--exit-at-end")
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == ["one", "three", "two"]

    def in_sync() -> bool:
        described = cli(c, "topics", "describe", "--topic", topic)
        return described.returncode == 0 and described.stdout.count("Isr: 1,2") + \
            described.stdout.count("Isr: 2,1") == 2
    poll_until(in_sync, 30, 0.5, "both partitions' replicas in sync")


def test_client_is_not_an_administrator_and_admin_is(secured):
    c = secured
    refused = cli(c, "acls", "list")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    listed = cli(c, "acls", "list", user="admin")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("principal=User:client") == 4


def test_without_the_client_properties_a_command_fails_in_one_line(secured):
    failed = run_cli("topics", "list", "--bootstrap-server", secured.bootstrap)
    assert failed.returncode != 0 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_round_trips_with_scram_sha_512_over_sasl_ssl(secured, client):
    round_trip(client, scram(secured, "client"))


@pytest.mark.parametrize("who", ["wrong password", "unknown user"])
@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_is_refused_a_wrong_password_or_an_unknown_user(secured, client, who):
    auth = scram(secured, "client", "wrong-password") if who == "wrong password" else scram(secured, "mallory", "x")
    error = auth_failure(client, auth)
    expected = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    assert (refused_as(error, expected) if client == "kafka-python" else expected in error), error


@pytest.fixture(scope="module")
def dave(secured):
    """A user that admin made, with no ACL, and a topic client made. The credential is set through
    each broker in turn: whichever broker is asked, the controller alters it."""
    for address in secured.bootstrap.split(","):
        made = run_cli("configs", "--bootstrap-server", address, "--command-config",
                       str(secured.dir / "admin.properties"), "--entity-type", "users", "--entity-name", "dave",
                       "--alter", "--add-config", "SCRAM-SHA-512=[iterations=4096,password=dave-secret]")
        assert made.returncode == 0, (address, made.stderr)
    topic = f"up-{uuid.uuid4().hex[:8]}"
    assert cli(secured, "topics", "create", "--topic", topic).returncode == 0
    return scram(secured, "dave", "dave-secret"), topic


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_is_refused_a_write_its_principal_has_no_acl_for(secured, dave, client):
    auth, topic = dave
    error = produce(client, auth, topic, b"no")
    assert "TOPIC_AUTHORIZATION_FAILED" in error.upper().replace(" ", "_").replace("TOPICAUTHORIZATIONFAILED",
                                                                                 "TOPIC_AUTHORIZATION_FAILED"), error


def test_the_console_reads_the_cluster_and_its_records_with_the_command_config(secured):
    """`strandline console --command-config admin.properties`: the page's cluster view lists the
    topic and its record browser (a librdkafka consumer) reads its records over SASL_SSL."""
    c = secured
    topic = f"console-{uuid.uuid4().hex[:8]}"
    assert cli(c, "topics", "create", "--topic", topic, "--partitions", "1", "--replication-factor", "2").returncode == 0
    sent = subprocess.run(strandline_cmd("produce", "--bootstrap-server", c.bootstrap, "--command-config",
                                         str(c.dir / "client.properties"), "--topic", topic, "--acks", "all"),
                          input="alpha\nbeta\n", capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    console = subprocess.Popen(strandline_cmd("console", "--bootstrap-server", c.bootstrap, "--port", "0",
                                              "--command-config", str(c.dir / "admin.properties")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = console.stdout.readline()                  # console=<url>, once it serves
        assert line.startswith("console="), (line, console.stderr.read() if console.poll() is not None else "")
        url = line.strip().split("=", 1)[1].rstrip("/")

        def cluster_view() -> dict | None:
            view = json.loads(urllib.request.urlopen(f"{url}/api/cluster", timeout=10).read())
            return view if any(t["topic"] == topic for t in view["topics"]) else None
        poll_until(cluster_view, 30, 0.5, f"the console's cluster view listing {topic}")
        query = urllib.parse.urlencode({"topic": topic, "partition": 0, "offset": 0})
        try:
            got = json.loads(urllib.request.urlopen(f"{url}/api/records?{query}", timeout=30).read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(exc.read().decode()) from None
        assert [r["value"]["text"] for r in got["records"]] == ["alpha", "beta"], got
    finally:
        console.terminate()
        console.wait(10)


def test_up_again_on_the_same_data_keeps_the_ca_and_the_passwords(secured):
    """The last test: up stopped and started again on its data directory; client.properties, the
    CA and the passwords are the same, and what was written before is read with them."""
    c = secured
    before = {name: (c.dir / name).read_bytes() for name in ("client.properties", "admin.properties", "ca.pem",
                                                               "ca.key", "users.json")}
    topic = f"up-{uuid.uuid4().hex[:8]}"
    assert produce("confluent-kafka", scram(c, "client"), topic, b"kept") == "NO_ERROR"
    assert c.stop() == 0
    c.start(120)
    assert {name: (c.dir / name).read_bytes() for name in before} == before
    read = cli(c, "consume", "--topic", topic, "--from-beginning", "--exit-at-end")
    assert read.returncode == 0 and read.stdout.split() == ["kept"], read.stderr
    assert cli(c, "acls", "list", user="admin").stdout.count("principal=User:client") == 4   # not written twice
    assert Path(c.info["security"]["client_properties"]) == c.dir / "client.properties"
