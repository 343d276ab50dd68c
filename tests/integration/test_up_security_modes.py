"""`strandline up --security ssl` and `--security sasl_plaintext` (sasl_ssl is test_up_security.py):
a cluster of two brokers for each mode, one after the other. With ssl the listener requires client
certificates (ssl.client.auth=required), a certificate's CN is the user
(ssl.principal.mapping.rules), the brokers fetch from each other with their own certificate
(CN=broker, a super user) and client.properties carries the client's PEM key store; with
sasl_plaintext they authenticate with SCRAM-SHA-512, without TLS."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.conftest import new_cluster, poll_until, run_cli, strandline_cmd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["ssl", "sasl_plaintext"])
def secured(request, tmp_path_factory):
    parent = tmp_path_factory.mktemp(f"up-security-{request.param}")
    c = new_cluster(parent, 2)
    c.security = request.param
    c.stdout = parent / "up.out"
    c.start(120)
    c.dir = c.data_dir / "security"
    yield c
    c.stop()


def cli(c, *args: str, user: str = "client", stdin: str | None = None):
    return subprocess.run(strandline_cmd(*args, "--bootstrap-server", c.bootstrap, "--command-config",
                                         str(c.dir / f"{user}.properties")),
                          input=stdin, capture_output=True, text=True, timeout=60)


def test_the_cli_works_with_client_properties_and_the_brokers_replicate(secured):
    c = secured
    keys, listener = {"ssl": ("security.protocol, ssl.truststore.type, ssl.truststore.location, ssl.keystore.type, "
                              "ssl.keystore.location", "SSL"),
                      "sasl_plaintext": ("security.protocol, sasl.mechanism, sasl.jaas.config", "SASL_PLAINTEXT")}[
        c.security]
    assert f"keys: {keys};" in c.printed
    server = (c.data_dir / "broker-1" / "server.properties").read_text()
    assert f"listeners={listener}://127.0.0.1:{c.base_port}" in server
    assert ("ssl.client.auth=required" in server) == (c.security == "ssl")
    topic = f"modes-{uuid.uuid4().hex[:8]}"
    made = cli(c, "topics", "create", "--topic", topic, "--partitions", "2", "--replication-factor", "2")
    assert made.returncode == 0, made.stderr
    assert cli(c, "produce", "--topic", topic, "--acks", "all", stdin="one\ntwo\n").returncode == 0
    read = cli(c, "consume", "--topic", topic, "--from-beginning", "--exit-at-end")
    assert read.returncode == 0 and sorted(read.stdout.split()) == ["one", "two"], read.stderr

    def in_sync() -> bool:
        described = cli(c, "topics", "describe", "--topic", topic).stdout
        return described.count("Isr: 1,2") + described.count("Isr: 2,1") == 2
    poll_until(in_sync, 30, 0.5, "both partitions' replicas in sync")


def test_client_is_refused_the_acls_admin_is_served_and_no_credential_fails(secured):
    """client is User:client (refused the ACLs), admin User:admin (a super user), by their
    certificate or their SCRAM credential; without either the connection fails in one line."""
    refused = cli(secured, "acls", "list")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    listed = cli(secured, "acls", "list", user="admin")
    assert listed.returncode == 0 and listed.stdout.count("principal=User:client") == 4, listed.stderr
    nameless = secured.dir / "anonymous.properties"
    nameless.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location="
                        f"{secured.dir / 'ca.pem'}\n" if secured.security == "ssl" else "security.protocol=PLAINTEXT\n")
    failed = run_cli("topics", "list", "--bootstrap-server", secured.bootstrap, "--command-config", str(nameless))
    assert failed.returncode != 0 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
