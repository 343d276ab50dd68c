"""CreateTopics v5+ answers every config of the new topic (KIP-525), as DescribeConfigs describes
it: the request's overrides as TOPIC_CONFIG (1) with their values as Kafka writes them
("compact", not a list), the rest DEFAULT_CONFIG (5) or the broker's setting. Found by
tests/differential (create-layout, create-topics-v5..v7): Strandline answered only the overrides,
a list value as Python's repr."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.core.topic_keys import TOPIC_KEYS
from tests.unit.broker.test_broker_core import Harness


def test_create_topics_answers_every_config_of_the_new_topic():
    h = Harness(**{"log.segment.bytes": "2000000"})
    for validate_only in (True, False):
        answer = h.call(19, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": [
                                                {"name": "cleanup.policy", "value": "compact"},
                                                {"name": "max.message.bytes", "value": "2048"}]}],
                                "timeout": 1000, "validate_only": validate_only})
        [topic] = answer.topics
        assert topic.error_code == ErrorCode.none
        configs = {c.name: (c.value, int(c.config_source)) for c in topic.configs}
        assert set(configs) == set(TOPIC_KEYS)
        assert configs["cleanup.policy"] == ("compact", 1)
        assert configs["max.message.bytes"] == ("2048", 1)
        assert configs["segment.bytes"] == ("2000000", 4)           # the broker's log.segment.bytes
        assert configs["retention.ms"] == ("604800000", 5)
