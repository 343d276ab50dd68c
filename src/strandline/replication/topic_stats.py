"""``BrokerTopicStats``: what this broker took in and served, per topic (Kafka's BrokerTopicStats).

Plain counters, only ever increased, read by the metrics endpoint as Kafka's
``kafka.server:type=BrokerTopicMetrics`` meters (their counts): bytes and messages in, bytes out
to consumers and to followers (replication), produce and fetch requests, and the failed ones. A
partition's counts go to its topic; the broker-wide value is their sum.
"""

from __future__ import annotations

from collections import defaultdict

from kio.schema.errors import ErrorCode

from strandline.protocol.records import HEADER_SIZE, Buffer
from strandline.replication.fetch_types import FetchedTopic

RECORDS_COUNT = HEADER_SIZE - 4     # the offset of a v2 batch's record count
UNKNOWN = (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id)

#: the counters kept per topic, in Kafka's meter names lower-cased
COUNTERS = ("bytesin", "messagesin", "bytesout", "replicationbytesin", "replicationbytesout",
            "totalproducerequests", "failedproducerequests", "totalfetchrequests", "failedfetchrequests",
            "bytesrejected")


class BrokerTopicStats:
    def __init__(self) -> None:
        self.topics: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTERS, 0))
        self.total: dict[str, int] = dict.fromkeys(COUNTERS, 0)    # the broker-wide counts, never lowered

    def _add(self, topic: str, key: str, n: int) -> None:
        self.topics[topic][key] += n
        self.total[key] += n

    def produced(self, topic: str, records: Buffer | None, error: ErrorCode) -> None:
        """One partition's record batch of a Produce request, appended or refused with ``error``
        (bytes rejected: refused for their size, as Kafka counts them)."""
        size = len(records) if records else 0
        self._add(topic, "totalproducerequests", 1)
        if error is not ErrorCode.none:
            self._add(topic, "failedproducerequests", 1)
            if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
                self._add(topic, "bytesrejected", size)
        else:
            self._add(topic, "bytesin", size)
            # the batch's record count (the header's last field), as validated on append
            count = int.from_bytes(records[RECORDS_COUNT:HEADER_SIZE], "big") if records else 0
            self._add(topic, "messagesin", count)

    def fetched(self, topics: list[FetchedTopic], by_follower: bool) -> None:
        """The partitions of a Fetch answer as sent (consumer or follower)."""
        out = "replicationbytesout" if by_follower else "bytesout"
        for topic in topics:
            requests = failed = size = 0
            for entry in topic["partitions"]:
                if entry["error_code"] in UNKNOWN:
                    continue        # no series for names that are not topics here
                requests += 1
                failed += bool(entry["error_code"])
                size += len(entry["records"])
            if requests:
                name = topic["topic"]
                self._add(name, "totalfetchrequests", requests)
                if failed:
                    self._add(name, "failedfetchrequests", failed)
                if size:
                    self._add(name, out, size)

    def replicated_in(self, topic: str, size: int) -> None:
        """A follower appended ``size`` bytes fetched from its leader."""
        self._add(topic, "replicationbytesin", size)

    def remove_topic(self, topic: str) -> None:
        """A deleted topic's counts go, as Kafka removes its meters (the totals keep them)."""
        self.topics.pop(topic, None)
