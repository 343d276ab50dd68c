"""Topic ids in the controller's requests (KIP-516): a broker's replicas of an earlier topic of the same name.

A broker that missed a topic's deletion (it was stopped or cut off, or the controller failed over
before telling it) keeps the topic in its metadata and the logs of its partitions. When a topic of
the same name is created again, LeaderAndIsr names it with its new id: the broker reads the topic
from ZooKeeper again (:func:`other_topic`), deletes the logs that record another id
(``partition.metadata``), and takes its roles with empty logs, as Kafka's brokers check a log's
topic id against LeaderAndIsr's (``Partition.checkOrSetTopicId``). A request naming an id
ZooKeeper no longer holds is of a deleted topic: its partitions are answered
INCONSISTENT_TOPIC_ID and left as they are.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import TopicMetadata


def named_id(topic_state: dict[str, Any]) -> uuid.UUID | None:
    """The topic id a LeaderAndIsr topic state names (None: none, or the zero id of a topic without one)."""
    topic_id: uuid.UUID | None = topic_state.get("topic_id")
    return topic_id if topic_id is not None and topic_id.int else None


def other_topic(known: TopicMetadata | None, topic_state: dict[str, Any]) -> bool:
    """Whether a topic this broker knows is another topic (another id) than the one a request names."""
    named = named_id(topic_state)
    return known is not None and named is not None and known.topic_id.int != 0 and known.topic_id != named


def stale_log(log_topic_id: uuid.UUID | None, topic: TopicMetadata) -> bool:
    """Whether a local log records another topic id than ``topic``'s (a log of an earlier topic)."""
    return log_topic_id is not None and topic.topic_id.int != 0 and log_topic_id != topic.topic_id


def leader_and_isr_answer(body: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """LeaderAndIsr v5's answer: the partition errors grouped by topic id (each group also names
    its topic, which v0-v4 answer in place of the id)."""
    ids = {ts["topic_name"]: ts.get("topic_id") or uuid.UUID(int=0) for ts in body["topic_states"]}
    topics: dict[str, list[dict[str, Any]]] = {}
    for e in errors:
        topics.setdefault(e["topic_name"], []).append(
            {"partition_index": e["partition_index"], "error_code": e["error_code"]})
    return {"error_code": ErrorCode.none,
            "topics": [{"topic_id": ids[name], "topic_name": name, "partition_errors": parts} for name, parts in topics.items()]}

