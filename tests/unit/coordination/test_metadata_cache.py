"""The metadata cache's index of topics by id: right after topics are created, deleted and
recreated under the same name with a new id."""

from __future__ import annotations

import uuid

from strandline.coordination.metadata import MetadataCache, TopicMetadata


def test_topic_name_of_follows_creation_deletion_and_recreation():
    cache = MetadataCache()
    first, second = uuid.UUID(int=1), uuid.UUID(int=2)
    assert cache.topic_name_of(first) is None
    cache.topics["t"] = TopicMetadata("t", first, {0: (1,)})
    assert cache.topic_name_of(first) == "t" and cache.topic_name_of(None) is None
    cache.topics["t"] = TopicMetadata("t", second, {0: (1,)})       # recreated
    assert cache.topic_name_of(first) is None and cache.topic_name_of(second) == "t"
    del cache.topics["t"]
    assert cache.topic_name_of(second) is None
