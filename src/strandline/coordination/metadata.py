"""The cluster as a broker knows it: brokers, topics, assignments and partition states.

``LeaderAndIsr`` is a partition's state as the controller records it in ZooKeeper; a
``MetadataCache`` is one broker's view, which the controller's UpdateMetadata requests keep current.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.core.config_key import ConfigError
from strandline.core.topic_keys import parse_topic_configs
from strandline.core.effects import Effect, LogLine
from strandline.coordination import znodes
from strandline.coordination.store import GetData, OpResult, ZkError
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
    #: topic id -> name, as last built; checked against :attr:`topics` at each lookup
    _names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)

    def topic_name_of(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with this id (None: no such topic). The index is rebuilt when
        :attr:`topics` no longer agrees with it (a topic created, deleted or recreated)."""
        name = self._names_by_id.get(topic_id) if topic_id is not None else None
        topic = self.topics.get(name) if name is not None else None
        if topic is not None and topic.topic_id == topic_id:
            return name
        self._names_by_id = {t.topic_id: n for n, t in self.topics.items()}
        name = self._names_by_id.get(topic_id) if topic_id is not None else None
        return name

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def load_topics(self, names: list[str], then: Callable[[int, list[str]], list[Effect]]
                    ) -> tuple[list[GetData], Callable[[list[OpResult], int], list[Effect]]]:
        """The ZooKeeper reads of topics' assignment, id and configs, and what takes their results
        into the cache (topics it knows by then are left as they are) and then calls
        ``then(now_ms, unread)``: ``unread`` names the topics ZooKeeper did not answer for."""
        ops = []
        for name in names:
            ops += [GetData(znodes.TopicZNode.path(name)), GetData(znodes.ConfigEntityZNode.path("topics", name))]

        def on_result(results: list[OpResult], when_ms: int) -> list[Effect]:
            effects: list[Effect] = []
            unread: list[str] = []
            for i, name in enumerate(names):
                topic_res, config_res = results[2 * i], results[2 * i + 1]
                if name in self.topics or topic_res.error is ZkError.NO_NODE:
                    continue
                if topic_res.error is not ZkError.NONE or config_res.error not in (ZkError.NONE, ZkError.NO_NODE):
                    unread.append(name)
                    continue
                assignment, topic_id = znodes.TopicZNode.decode(topic_res.data)
                configs: dict[str, Any] = {}
                if config_res.error is ZkError.NONE and config_res.data:
                    try:
                        configs = parse_topic_configs(znodes.ConfigEntityZNode.decode(config_res.data))
                    except ConfigError as exc:
                        effects.append(LogLine("warning", f"Ignoring bad config of topic {name}: {exc}"))
                self.topics[name] = TopicMetadata(
                    name, topic_id or uuid.UUID(int=0), {int(p): tuple(r) for p, r in assignment.items()}, {}, configs)
            return effects + then(when_ms, unread)

        return ops, on_result
