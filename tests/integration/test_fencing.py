"""Inter-broker requests from non-brokers, and internal topics' replication factor, with real
broker processes (CTL-4, CTL-9).

One 3-broker cluster for the module: a client sends a forged ControlledShutdown over a raw socket
and moves no leadership; with a broker stopped FindCoordinator answers COORDINATOR_NOT_AVAILABLE
and creates no internal topic, which gets its three replicas once the broker is back.
"""

from __future__ import annotations

import socket
import struct

from kio.schema.errors import ErrorCode

from strandline.protocol import control
from strandline.runtime.client import KafkaConnection
from tests.conftest import cluster_fixture, Cluster, poll_until, run_cli
from tests.integration.replication_helpers import METADATA, address, create_topic

PARTITIONS = 6
FIND_COORDINATOR = 10


fc = cluster_fixture("fencing", 3, overrides=["offsets.topic.num.partitions=3",
                                              "transaction.state.log.num.partitions=3",
                                              "controlled.shutdown.retry.backoff.ms=500"])


def metadata(c: Cluster, broker_id: int, topics: list[str] | None):
    with KafkaConnection(address(c, broker_id), timeout_s=5) as conn:
        return conn.request(METADATA, 10, {"topics": None if topics is None else [{"name": t} for t in topics],
                                           "allow_auto_topic_creation": False})


def leaders(c: Cluster, topic: str) -> dict[int, tuple[int, int, tuple]]:
    [t] = metadata(c, 1, [topic]).topics
    return {p.partition_index: (p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes))) for p in t.partitions}


def raw_control(c: Cluster, broker_id: int, api_key: int, body: dict, version: int) -> dict:
    """A control request on a plain socket, as any client could send it."""
    frame = control.encode_request(api_key, 1, "not-a-broker", body, version)
    with socket.create_connection(("127.0.0.1", c.base_port + broker_id - 1), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, "the broker closed the connection"
            data += chunk
    return control.decode_response(api_key, data[4:], version)


def test_ctl_9_a_forged_controlled_shutdown_moves_no_leadership(fc):
    """A client names a running broker (not the controller) in ControlledShutdown v3 with the
    unknown epoch -1 and with a made-up one, and in v1 (no epoch): each is answered
    STALE_BROKER_EPOCH, and every partition keeps its leader, leader epoch and ISR (an accepted
    request is answered only once its leaderships have moved)."""
    controller = metadata(fc, 1, []).controller_id
    target = next(b for b in (1, 2, 3) if b != controller)
    create_topic(fc, "fenced", {p: [1 + (p + i) % 3 for i in range(3)] for p in range(PARTITIONS)})
    poll_until(lambda: len(leaders(fc, "fenced")) == PARTITIONS and
               all(len(isr) == 3 and leader >= 0 for leader, _, isr in leaders(fc, "fenced").values()), 30,
               message="every partition led, with a full ISR")
    before = leaders(fc, "fenced")
    assert sum(leader == target for leader, _, _ in before.values()) == 2
    for version, body in [(3, {"broker_id": target, "broker_epoch": -1}),
                          (3, {"broker_id": target, "broker_epoch": 1 << 33}),
                          (1, {"broker_id": target})]:
        answer = raw_control(fc, controller, control.CONTROLLED_SHUTDOWN, body, version)
        assert leaders(fc, "fenced") == before, (version, body, answer)
        assert answer == {"error_code": ErrorCode.stale_broker_epoch, "remaining_partitions": []}, (version, body)


def find_coordinator(c: Cluster, broker_id: int, key_type: int):
    with KafkaConnection(address(c, broker_id), timeout_s=5) as conn:
        return conn.request(FIND_COORDINATOR, 3, {"key": "g" if key_type == 0 else "tx", "key_type": key_type})


def test_internal_topics_wait_for_enough_brokers_then_get_three_replicas(fc):
    """With broker 3 stopped, FindCoordinator for a group and for a transactional id answers
    COORDINATOR_NOT_AVAILABLE and neither internal topic is created (the default replication
    factor is 3); with it back, both are created with 3 replicas per partition."""
    names = ["__consumer_offsets", "__transaction_state"]
    assert not {t.name for t in metadata(fc, 1, None).topics} & set(names)
    result = run_cli("cluster", "stop", "3", "--data-dir", str(fc.data_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    poll_until(lambda: all(sorted(b.node_id for b in metadata(fc, b, []).brokers) == [1, 2] for b in (1, 2)), 30,
               message="brokers 1 and 2 see broker 3 gone")
    for _ in range(3):
        for broker in (1, 2):
            for key_type in (0, 1):
                assert find_coordinator(fc, broker, key_type).error_code == ErrorCode.coordinator_not_available
    assert not {t.name for t in metadata(fc, 1, None).topics} & set(names)
    result = run_cli("cluster", "start", "3", "--data-dir", str(fc.data_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    poll_until(lambda: sorted(b.node_id for b in metadata(fc, 1, []).brokers) == [1, 2, 3], 30,
               message="broker 1 sees broker 3 back")
    for key_type in (0, 1):
        poll_until(lambda: find_coordinator(fc, 1, key_type).error_code == ErrorCode.none, 30,  # noqa: B023
                   message=f"a coordinator for key type {key_type}")
    for topic in metadata(fc, 1, names).topics:
        assert topic.error_code == ErrorCode.none and len(topic.partitions) == 3, topic
        assert all(len(p.replica_nodes) == 3 for p in topic.partitions), topic
