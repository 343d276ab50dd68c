"""The console's record browser and group descriptions, read with a Kafka client (confluent-kafka).

:func:`read_records` reads a bounded number of records of one partition from an offset or a
time (``offsetsForTimes``), as a consumer reads them (``read_committed`` or not), and returns them
JSON-ready: key and value as text where they are UTF-8, else as hex, headers, timestamps.
:func:`describe_groups` asks the groups' coordinators for their members and assignments.

Blocking: the console calls them in a thread.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from strandline.cli import client_config
from strandline.errors import StrandlineError

MAX_RECORDS = 500           # at most this many records per read
MAX_BYTES = 4 << 20         # and about this many bytes of keys and values
SHOWN_BYTES = 4096          # a key or value longer than this is cut, saying so
READ_TIMEOUT_S = 5.0


def show_bytes(data: bytes | None) -> dict[str, Any] | None:
    """A key, value or header value for the page: ``{"text"|"hex": ..., "size", "truncated"}``."""
    if data is None:
        return None
    shown = data[:SHOWN_BYTES]
    try:
        text: str | None = shown.decode("utf-8")
    except UnicodeDecodeError as exc:      # a character cut at the limit is still text
        cut = len(data) > SHOWN_BYTES and exc.start >= len(shown) - 3 and exc.end == len(shown)
        text = shown[:exc.start].decode("utf-8", errors="replace") if cut else None
    printable = text is not None and all(c.isprintable() or c in "\n\r\t" for c in text)
    entry: dict[str, Any] = {"text": text} if printable else {"hex": shown.hex()}
    entry.update(size=len(data), truncated=len(data) > SHOWN_BYTES)
    return entry


def _bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def _headers(msg: Message) -> list[tuple[str, str | bytes | None]]:
    """A record's headers, in order (confluent-kafka gives a list of pairs, or None for none)."""
    headers = msg.headers() or []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _security() -> dict[str, Any]:
    """librdkafka's TLS and SASL settings of the console's ``--command-config`` (none without it)."""
    return client_config.librdkafka() if client_config.given() else {}


def read_records(bootstrap: str, topic: str, partition: int, *, offset: int | None = None,
                 time_ms: int | None = None, limit: int = 50, read_committed: bool = False,
                 timeout_s: float = READ_TIMEOUT_S) -> dict[str, Any]:
    """Up to ``limit`` (at most :data:`MAX_RECORDS`) records of ``topic``-``partition`` from
    ``offset`` (negative: that many before the end; None with no time: the beginning) or from the
    first record at or after ``time_ms``, stopping at the end of the partition (its high
    watermark, or the last stable offset with ``read_committed``), at :data:`MAX_BYTES` or after
    ``timeout_s``. Raises :class:`StrandlineError` with Kafka's error for an unknown topic or
    partition."""
    limit = max(1, min(int(limit), MAX_RECORDS))
    consumer = Consumer({**_security(), "bootstrap.servers": bootstrap, "group.id": "strandline-console-browser",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                         "fetch.max.bytes": MAX_BYTES, "max.partition.fetch.bytes": MAX_BYTES,
                         "client.id": "strandline-console", "socket.timeout.ms": int(timeout_s * 1000),
                         "log_level": 0})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            raise StrandlineError(f"topic {topic}: {meta.error.str() if meta and meta.error else 'unknown'}")
        if partition not in meta.partitions:
            raise StrandlineError(f"topic {topic} has no partition {partition} (it has {len(meta.partitions)})")
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if time_ms is not None:
            [found] = consumer.offsets_for_times([TopicPartition(topic, partition, int(time_ms))], timeout=timeout_s)
            if found.error is not None:
                raise StrandlineError(f"offsets for time {time_ms}: {found.error}")
            start = found.offset if found.offset >= 0 else high
        elif offset is None:
            start = low
        elif offset < 0:
            start = max(low, high + offset)
        else:
            start = offset
        records: list[dict[str, Any]] = []
        result = {"topic": topic, "partition": partition, "low_watermark": low, "high_watermark": high,
                  "start": start, "records": records, "read_committed": read_committed, "end": False,
                  "limited": False}
        if start >= high and not read_committed:
            result["end"] = True
            return result
        consumer.assign([TopicPartition(topic, partition, start if start >= 0 else OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        size = 0
        while len(records) < limit and size < MAX_BYTES and time.monotonic() < deadline:
            for msg in consumer.consume(min(limit - len(records), 100), timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        result["end"] = True
                        continue
                    raise StrandlineError(f"reading {topic}-{partition}: {err.str()}")
                key, value = _bytes(msg.key()), _bytes(msg.value())
                size += len(key or b"") + len(value or b"")
                kind, ts = msg.timestamp()
                records.append({"offset": msg.offset(), "timestamp_ms": ts,
                                "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(kind, "none"),
                                "key": show_bytes(key), "value": show_bytes(value),
                                "headers": [{"key": k, "value": show_bytes(_bytes(v))} for k, v in _headers(msg)]})
                if len(records) >= limit or size >= MAX_BYTES:
                    break
            if result["end"]:
                break
        result["limited"] = (len(records) >= limit or size >= MAX_BYTES) and records[-1]["offset"] + 1 < high
        return result
    except KafkaException as exc:
        raise StrandlineError(f"reading {topic}-{partition}: {exc.args[0].str() if exc.args else exc}") from None
    finally:
        consumer.close()


def admin_client(bootstrap: str, timeout_s: float = 3.0) -> AdminClient:
    """The Admin client the console keeps for :func:`describe_groups`."""
    return AdminClient({**_security(), "bootstrap.servers": bootstrap, "client.id": "strandline-console",
                        "socket.timeout.ms": int(timeout_s * 1000), "log_level": 0})


def describe_groups(admin: AdminClient, groups: list[str], timeout_s: float = 3.0) -> dict[str, dict[str, Any]]:
    """group -> {"state", "members": [{"member_id", "client_id", "host", "assignment": [[topic,
    partition], ...]}]} for the groups their coordinators describe; the others are left out."""
    if not groups:
        return {}
    described = {}
    for group, future in admin.describe_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            d = future.result(timeout=timeout_s)
        except Exception:            # the coordinator moved or does not answer: next time
            continue
        described[group] = {
            "state": d.state.name if d.state is not None else None,
            "members": sorted(({"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                                "assignment": sorted([tp.topic, tp.partition]
                                                     for tp in (m.assignment.topic_partitions if m.assignment else []))}
                               for m in d.members), key=lambda m: m["member_id"])}
    return described
