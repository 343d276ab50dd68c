"""A starting broker core: it listens before it has loaded the cluster from ZooKeeper (CLI-1).

Until ``load_metadata`` a client's request waits (an answer would list no brokers, no controller
and no topics, and clients such as librdkafka then drop every broker they knew); the
controller's requests, which arrive on the same port, are served at once.
"""

from __future__ import annotations

import random
import uuid

from kio.schema.errors import ErrorCode

from strandline.broker.broker import Broker
from strandline.core.config import BrokerConfig
from strandline.core.effects import Send
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import BrokerInfo
from strandline.log.manager import LogManager
from strandline.protocol import api, control
from strandline.coordination.metadata import LeaderAndIsr
from strandline.sim.disk import MemoryDisk

NOW = 1_700_000_000_000
METADATA, API_VERSIONS = 3, 18
BROKERS = {b: BrokerInfo(b, "127.0.0.1", 9091 + b) for b in (1, 2, 3)}


def starting_broker() -> Broker:
    config = BrokerConfig.from_properties({"broker.id": "2", "zookeeper.connect": "zk:2181",
                                           "log.dirs": "/data/logs"})
    logs = LogManager(MemoryDisk(), ["/data/logs"], config.log_config())
    logs.startup(NOW)
    return Broker(config, logs, rng=random.Random(1), now_ms=NOW)


def topics() -> dict[str, TopicMetadata]:
    return {"t": TopicMetadata("t", uuid.UUID(int=7), {0: (1, 2, 3)},
                               {0: LeaderAndIsr(1, 4, (1, 2, 3), 1, 4)}, {})}


def sends(effects: list, conn_id: int) -> list[bytes]:
    return [b"".join(bytes(b) for b in e.buffers)[4:] for e in effects if isinstance(e, Send) and e.conn_id == conn_id]


def metadata_request(correlation_id: int) -> bytes:
    return api.encode_request(METADATA, 9, correlation_id, "client",
                              {"topics": [{"name": "t"}], "allow_auto_topic_creation": False,
                               "include_cluster_authorized_operations": False,
                               "include_topic_authorized_operations": False})


def test_cli_1_a_metadata_request_before_the_cluster_is_loaded_waits_and_is_answered_with_it():
    broker = starting_broker()
    assert sends(broker.handle_request(7, metadata_request(1), NOW), 7) == []
    [answer] = sends(broker.load_metadata("c", BROKERS, topics(), 1, 5, NOW), 7)
    resp = api.decode_response(METADATA, 9, answer)
    assert sorted(b.node_id for b in resp.brokers) == [1, 2, 3]
    assert resp.controller_id == 1
    [topic] = resp.topics
    assert topic.error_code == ErrorCode.none and topic.partitions[0].leader_id == 1


def test_cli_1_api_versions_and_the_controllers_requests_are_served_before_the_cluster_is_loaded():
    broker = starting_broker()
    [versions] = sends(broker.handle_request(7, api.encode_request(API_VERSIONS, 3, 1, "client", {
        "client_software_name": "librdkafka", "client_software_version": "2.16.0"}), NOW), 7)
    assert api.decode_response(API_VERSIONS, 3, versions).error_code == ErrorCode.none
    broker.on_registered(0x1000000a2, NOW)       # registered, as the shell does before loading the cluster
    body = {"controller_id": 1, "controller_epoch": 5, "broker_epoch": 0x1000000a2, "topic_states": [],
            "live_brokers": [{"id": b.id, "endpoints": [{"port": b.port, "host": b.host, "listener": "PLAINTEXT",
                                                         "security_protocol": 0}], "rack": None}
                             for b in BROKERS.values()]}
    [answer] = sends(broker.handle_request(8, control.encode_request(control.UPDATE_METADATA, 1, "ctl", body), NOW), 8)
    assert control.decode_response(control.UPDATE_METADATA, answer)["error_code"] == ErrorCode.none


def test_requests_of_a_connection_closed_before_the_cluster_is_loaded_are_dropped():
    broker = starting_broker()
    broker.handle_request(7, metadata_request(1), NOW)
    broker.connection_closed(7)
    assert sends(broker.load_metadata("c", BROKERS, topics(), 1, 5, NOW), 7) == []
