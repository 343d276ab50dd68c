"""OffsetFetch answered with a group's error (here NOT_COORDINATOR: the broker coordinates no
group): v0-v1, which have no error of their own, repeat it in each partition asked for; v2+ answer
it alone, without topics, as Kafka's OffsetFetchRequest.getErrorResponse (found by
tests/differential: offset-fetch-not-coordinator-v7)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.unit.broker.test_broker_core import Harness


def test_a_group_error_is_in_each_partition_in_v1_and_alone_in_v2_and_later():
    h = Harness()
    h.create("t")
    body = {"group_id": "g", "require_stable": False, "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    v1 = h.call(9, 1, body)
    assert [(p.partition_index, p.error_code) for t in v1.topics for p in t.partitions] == \
        [(0, ErrorCode.not_coordinator), (1, ErrorCode.not_coordinator)]
    for version in (2, 5, 7):
        answer = h.call(9, version, body)
        assert (answer.error_code, list(answer.topics)) == (ErrorCode.not_coordinator, []), version
