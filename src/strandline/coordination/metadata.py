"""The cluster as a broker knows it: brokers, topics, assignments and partition states.

``LeaderAndIsr`` is a partition's state as the controller records it in ZooKeeper; a
``MetadataCache`` is one broker's view, which the controller's UpdateMetadata requests keep current.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from strandline.coordination.znodes import BrokerInfo, LeaderAndIsr

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def topic_name_error(name: str | None) -> str | None:
    """Kafka's topic-name rules; returns why a name is invalid, or None."""
    if not name:
        return "Topic name is empty"
    if name in (".", ".."):
        return f"Topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is longer than {MAX_TOPIC_NAME} characters"
    if not LEGAL_TOPIC.match(name):
        return f"Topic name {name!r} is illegal: only ASCII alphanumerics, '.', '_' and '-' are allowed"
    return None


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    assignment: dict[int, tuple[int, ...]]
    states: dict[int, LeaderAndIsr] = field(default_factory=dict)
    configs: dict[str, Any] = field(default_factory=dict)
    #: a reassignment in progress (KIP-455): replicas being added and removed per partition
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)


@dataclass(slots=True)
class MetadataCache:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)
