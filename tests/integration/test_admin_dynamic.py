"""Dynamic changes Kafka makes to a running broker, against a real 3-broker cluster: the levels of
a broker's loggers (BROKER_LOGGER, KIP-412) and a broker's advertised listeners."""

from __future__ import annotations

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli

pytestmark = pytest.mark.integration


cluster = cluster_fixture("dynamic", 3)


def loggers_cli(cluster, action: str, broker_id: int, *args: str):
    return run_cli("configs", action, "--bootstrap-server", cluster.bootstrap, "--entity-type", "broker-loggers",
                   "--entity-name", str(broker_id), *args)


def test_a_brokers_logger_levels_are_described_and_changed_live(cluster):
    described = loggers_cli(cluster, "describe", 2)
    assert described.returncode == 0, described.stderr
    assert "Dynamic configs for the loggers of broker 2 are:" in described.stdout
    assert "  root=INFO " in described.stdout and "  strandline.broker=INFO " in described.stdout

    log = cluster.data_dir / "broker-2" / "broker.log"
    for step in (["--add-config", "strandline.broker=WARN"],      # its own INFO lines stop from here on
                 ["--add-config", "kazoo=ERROR"],                   # logged at INFO: not written
                 ["--delete-config", "strandline.broker"],          # inherits INFO again
                 ["--add-config", "kazoo=WARN"]):                   # written
        done = loggers_cli(cluster, "alter", 2, *step)
        assert done.returncode == 0, done.stderr
    poll_until(lambda: "Updating the log level of kazoo to WARN" in log.read_text(errors="replace"), 20,
               message="broker 2 logs at INFO again")
    text = log.read_text(errors="replace")
    assert "Updating the log level of strandline.broker to WARN" in text
    assert "Updating the log level of kazoo to ERROR" not in text
    after = loggers_cli(cluster, "describe", 2).stdout
    assert "  kazoo=WARN " in after and "  strandline.broker=INFO " in after

    bad = loggers_cli(cluster, "alter", 2, "--add-config", "root=LOUD")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "INVALID_CONFIG: Cannot set the log level of root to LOUD" in bad.stderr
    gone = loggers_cli(cluster, "alter", 2, "--delete-config", "root")
    assert gone.returncode == 1 and "INVALID_REQUEST: Removing the log level of the root logger is not allowed" \
        in gone.stderr, gone.stderr


def metadata_brokers(address: str) -> dict[int, tuple[str, int]]:
    from strandline.runtime.client import KafkaConnection

    with KafkaConnection(address) as conn:
        body = conn.request(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    return {b.node_id: (b.host, b.port) for b in body.brokers}


def broker_entry(admin, broker_id: int, key: str):
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("broker", str(broker_id))
    return admin.describe_configs([resource])[resource].result(30)[key]


def test_advertised_listeners_changes_per_broker_and_every_broker_tells_clients(cluster):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    before = metadata_brokers(cluster.bootstrap)
    host, port = before[2]
    assert host == "127.0.0.1"
    entry = broker_entry(admin, 2, "advertised.listeners")
    assert entry.is_read_only is False

    # the same socket under another name, so that broker 2 stays reachable under both
    done = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                   "--entity-name", "2", "--add-config", f"advertised.listeners=PLAINTEXT://localhost:{port}")
    assert done.returncode == 0, done.stderr
    addresses = [f"127.0.0.1:{p}" for _, p in sorted(before.values())]
    for address in addresses:
        poll_until(lambda a=address: metadata_brokers(a)[2] == ("localhost", port), 20,
                   message=f"{address} advertises broker 2 at localhost")
    assert metadata_brokers(addresses[0])[1] == before[1]
    assert broker_entry(admin, 2, "advertised.listeners").value == f"PLAINTEXT://localhost:{port}"

    refused = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                      "--entity-default", "--add-config", "advertised.listeners=PLAINTEXT://elsewhere:1")
    assert refused.returncode == 1 and "broker id must be specified: advertised.listeners" in refused.stderr, \
        refused.stderr

    back = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                   "--entity-name", "2", "--delete-config", "advertised.listeners")
    assert back.returncode == 0, back.stderr
    for address in addresses:
        poll_until(lambda a=address: metadata_brokers(a)[2] == (host, port), 20,
                   message=f"{address} advertises broker 2 at {host} again")
