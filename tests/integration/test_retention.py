"""Retention on a running broker moves the log start offset; ListOffsets(earliest) follows it."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.runtime.client import KafkaConnection
from tests.conftest import Cluster, free_ports, poll_until
from tests.unit.batches import make_batch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def retaining(tmp_path_factory):
    ports = free_ports(2)
    data = tmp_path_factory.mktemp("retention") / "data"
    data.mkdir()
    c = Cluster(data, 1, ports[1], ports[0], overrides=["log.retention.check.interval.ms=200"]).start()
    yield c
    c.stop()


def earliest(conn: KafkaConnection, topic: str) -> int:
    resp = conn.request(2, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
    return resp.topics[0].partitions[0].offset


def test_retention_by_size_deletes_old_segments_and_moves_the_log_start_offset(retaining):
    with KafkaConnection(retaining.bootstrap) as conn:
        resp = conn.request(19, 4, {"topics": [{"name": "short", "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": [
                                                    {"name": "segment.bytes", "value": "1024"},
                                                    {"name": "retention.bytes", "value": "2048"}]}],
                                    "timeout": 10000, "validate_only": False})
        assert resp.topics[0].error_code == ErrorCode.none
        for i in range(40):
            produced = conn.request(0, 7, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                {"name": "short", "partition_data": [{"index": 0, "records": bytes(make_batch([b"x" * 200]))}]}]})
            assert produced.responses[0].partition_responses[0].base_offset == i
        assert poll_until(lambda: earliest(conn, "short") > 0, 20, message="log start offset moved")
        start = earliest(conn, "short")
        assert 0 < start < 40
        fetched = conn.request(1, 4, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                      "isolation_level": 0, "topics": [{"topic": "short", "partitions": [
                                          {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
