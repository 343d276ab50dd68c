"""Requests through the broker core that Kafka answers and Strandline used to drop or get wrong:
bytes after a request's body, null arrays, sizes beyond what ZooKeeper can hold, deleting an
internal topic, ListOffsets by timestamp inside a batch, commits for unknown topics."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.broker.effects import Send
from tests.unit.test_broker_core import Harness
from tests.unit.test_protocol_samples import read_response, request_frame


def answer(h: Harness, frame: bytes, api_key: int, version: int, conn: int = 1):
    """Feed one raw request frame; the decoded response body (asserts a well-formed answer)."""
    h.run(h.broker.handle_request(conn, frame, h.now))
    effect = h.sent[conn].pop(0)
    assert isinstance(effect, Send), effect
    return read_response(b"".join(bytes(b) for b in effect.buffers), api_key, version)[1]


def test_an_all_topics_metadata_v12_with_three_trailing_bytes_is_answered():
    """What librdkafka 2.15+ sends for AdminClient.list_topics() and regex subscriptions."""
    h = Harness()
    h.create("listed")
    body = answer(h, request_frame(3, 12, body={"topics": None}) + b"\x00\x00\x00", 3, 12)
    assert [t.name for t in body.topics] == ["listed"]
