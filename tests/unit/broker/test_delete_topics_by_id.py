"""DeleteTopics v6 names a topic by name or by its id (KIP-516), as Kafka 2.8: an id is resolved to
the topic's name and the topic deleted; an unknown id is UNKNOWN_TOPIC_ID; each answer echoes the id
it was asked with (the zero id for a name); a name and an id together are INVALID_REQUEST. Found
by tests/differential (delete-topics-v6, delete-topics-unknown-id-v6)."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tests.unit.broker.test_broker_core import Harness

ZERO = uuid.UUID(int=0)


def delete(h: Harness, *topics: dict) -> list[tuple]:
    answer = h.call(20, 6, {"topics": list(topics), "timeout": 1000})
    return [(r.name, r.topic_id or ZERO, r.error_code) for r in answer.responses]


def test_delete_topics_by_id_and_by_name():
    h = Harness()
    for name in ("a", "b"):
        assert h.create(name).error_code == ErrorCode.none
    a_id = h.broker.metadata.topics["a"].topic_id
    unknown = uuid.UUID("b3f1b6a5-0c6e-4a5d-8b8e-1c2d3e4f5a6b")
    assert delete(h, {"name": None, "topic_id": a_id}, {"name": None, "topic_id": unknown},
                  {"name": "b", "topic_id": ZERO}, {"name": "b", "topic_id": a_id}) == [
        ("a", a_id, ErrorCode.none), (None, unknown, ErrorCode.unknown_topic_id), ("b", ZERO, ErrorCode.none),
        ("b", a_id, ErrorCode.invalid_request)]
    for _ in range(50):
        h.tick(100)
    assert "a" not in h.broker.metadata.topics and "b" not in h.broker.metadata.topics
    assert delete(h, {"name": "a", "topic_id": ZERO}) == [("a", ZERO, ErrorCode.unknown_topic_or_partition)]
