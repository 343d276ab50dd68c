"""DescribeCluster v0 (KIP-700, served by Kafka 2.8): the live brokers, the cluster id and the
controller, as Metadata names them; the cluster's authorized operations only when asked for.
Found by tests/differential (describe-cluster-v0): Strandline did not serve it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.protocol.api import SUPPORTED
from tests.unit.broker.test_broker_core import Harness


def test_describe_cluster_names_the_brokers_the_cluster_and_the_controller():
    assert SUPPORTED[60] == (0, 0)
    h = Harness()
    metadata = h.call(3, 9, {"topics": [], "allow_auto_topic_creation": False})
    answer = h.call(60, 0, {"include_cluster_authorized_operations": False})
    assert answer.error_code == ErrorCode.none
    assert (answer.cluster_id, answer.controller_id) == (metadata.cluster_id, metadata.controller_id)
    assert answer.brokers and [(b.broker_id, b.host, b.port, b.rack) for b in answer.brokers] == \
        [(b.node_id, b.host, b.port, b.rack) for b in metadata.brokers]
    assert answer.cluster_authorized_operations == -2147483648
    asked = h.call(60, 0, {"include_cluster_authorized_operations": True})
    assert asked.cluster_authorized_operations != -2147483648
