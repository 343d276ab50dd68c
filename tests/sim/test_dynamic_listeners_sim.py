"""A per-broker dynamic ``advertised.listeners`` on simulated brokers: the broker rewrites its
registration (same broker epoch), the controller sees a broker modification and every broker's
Metadata answer names the new address."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.sim.cluster import SimCluster

BROKER = 4
SET = 0


def alter(c: SimCluster, via: int, name: str, value: str):
    body = {"resources": [{"resource_type": BROKER, "resource_name": name, "configs": [
        {"name": "advertised.listeners", "config_operation": SET, "value": value}]}], "validate_only": False}
    return c.call(via, 44, 1, body, "admin").responses[0]


def addresses(c: SimCluster, via: int) -> dict[int, tuple[str, int]]:
    body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    return {b.node_id: (b.host, b.port) for b in c.call(via, 3, 12, body, "admin").brokers}


def test_a_new_advertised_listener_reaches_every_brokers_metadata():
    c = SimCluster((1, 2, 3))
    c.settle()
    path = znodes.BrokerIdZNode.path(2)
    epoch = c.zk.czxid[path]
    result = alter(c, 2, "2", "PLAINTEXT://broker-two.example:19092")
    assert result.error_code == ErrorCode.none, result.error_message
    c.settle()
    for via in (1, 2, 3):
        assert addresses(c, via)[2] == ("broker-two.example", 19092), via
    assert addresses(c, 1)[1] != ("broker-two.example", 19092)
    assert znodes.BrokerIdZNode.decode(c.zk.nodes[path][0], 2).host == "broker-two.example"
    assert c.zk.czxid[path] == epoch                        # the broker epoch stays
    assert any("Updated broker metadata" in line for b in c.brokers.values() for line in b.log)


def test_advertised_listeners_is_refused_as_a_cluster_default_and_checked():
    c = SimCluster((1, 2, 3))
    c.settle()
    default = alter(c, 1, "", "PLAINTEXT://x:1")
    assert default.error_code == ErrorCode.invalid_request
    assert "Cannot update these configs at default cluster level, broker id must be specified: " \
           "advertised.listeners" in default.error_message
    bad = alter(c, 1, "1", "SSL://x:1")
    assert bad.error_code == ErrorCode.invalid_request and "SSL is not one of the listeners" in bad.error_message
    assert addresses(c, 3)[1] != ("x", 1)
