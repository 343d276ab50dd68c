"""Metadata v10+ naming a topic by its id alone (KIP-516), as librdkafka's KIP-848 consumer does
to learn the names of the topics of its assignment: the topic is answered by name; an id no topic
has is UNKNOWN_TOPIC_ID; a topic named by id is never created."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tests.unit.broker.test_broker_core import Harness


def test_a_topic_asked_for_by_id_is_answered_with_its_name_and_an_unknown_id_is_refused():
    h = Harness()
    h.create("orders", partitions=2)
    topic_id = h.broker.metadata.topics["orders"].topic_id
    stranger = uuid.UUID(int=7)
    answer = h.call(3, 12, {"topics": [{"name": None, "topic_id": topic_id}, {"name": None, "topic_id": stranger}],
                            "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    found = {t.topic_id: (t.error_code, t.name, len(t.partitions)) for t in answer.topics}
    assert found == {topic_id: (ErrorCode.none, "orders", 2), stranger: (ErrorCode.unknown_topic_id, None, 0)}
    assert set(h.broker.metadata.topics) == {"orders"}
