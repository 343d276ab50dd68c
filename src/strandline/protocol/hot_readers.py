"""Hand-written readers for the two hot messages, which never copy record bytes: the Produce
request (v0-v13) a leader receives and the Fetch response (v11) a follower receives.

kio copies every partition's records into a new ``bytes``; the leader then needs a mutable copy
to stamp offsets and its leader epoch into the batches. These readers instead hand out each
partition's records as a ``memoryview`` of the frame itself: writable when the frame is a
``bytearray`` (a large frame, read straight into its own buffer), so the leader stamps and
appends the very bytes the socket delivered, and a follower appends the bytes of the answer.

They read exactly the layout kio reads and return objects with kio's attribute names. Anything
they do not recognise (a malformed frame, a tagged field they do not expect) makes them return
None, and the caller decodes the frame with kio, which then names the problem.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from strandline.protocol.shapes import Malformed, _read_uvarint

_HEAD = struct.Struct(">hhih")      # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")

PRODUCE = 0
FIRST_VERSION, LAST_VERSION = 0, 13     # the Produce versions read here (v9+ flexible)
TRANSACTIONAL_ID_VERSION = 3            # v0-v2 have no transactional id
TOPIC_ID_VERSION = 13                   # topics named by id (KIP-516), not by name


class PartitionProduceData(NamedTuple):
    index: int  # type: ignore[assignment]  # Kafka's field name; it shadows tuple.index on purpose
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str | None                    # None from v13 on
    partition_data: list[PartitionProduceData]
    topic_id: uuid.UUID | None = None   # v13+


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout: int                        # milliseconds (kio gives a timedelta)
    topic_data: list[TopicProduceData]


class _Bad(Exception):
    """Not a frame this reader takes: kio decodes it instead."""


def _length(view: memoryview, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A string, bytes or array length: compact (unsigned varint of length + 1) when flexible,
    else ``fixed`` (int16 or int32); -1 is null."""
    if flexible:
        n, pos = _read_uvarint(view, pos, len(view))
        return n - 1, pos
    return fixed.unpack_from(view, pos)[0], pos + fixed.size


def _no_tags(view: memoryview, pos: int) -> int:
    """A tagged-field section: only an empty one is taken (Produce defines no tagged fields)."""
    if view[pos] != 0:
        raise _Bad()
    return pos + 1


def decode_produce_request(frame: bytes | bytearray) -> tuple[int, int, str | None, ProduceRequest] | None:
    """``(api_version, correlation_id, client_id, request)`` of a Produce v0-v13 frame (without
    its size prefix), or None when the frame is anything else or not exactly that layout."""
    try:
        return _decode(memoryview(frame))
    except (_Bad, Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None


def _string(view: memoryview, pos: int, size: int) -> tuple[str, int]:
    end = pos + size
    if size < 0 or end > len(view):
        raise _Bad()
    return str(view[pos:end], "utf-8"), end


def _decode(view: memoryview) -> tuple[int, int, str | None, ProduceRequest]:
    end = len(view)
    api_key, version, correlation_id, size = _HEAD.unpack_from(view, 0)
    if api_key != PRODUCE or not FIRST_VERSION <= version <= LAST_VERSION:
        raise _Bad()
    pos = _HEAD.size
    client_id = None
    if size >= 0:
        client_id, pos = _string(view, pos, size)
    elif size != -1:
        raise _Bad()
    flexible = version >= 9
    if flexible:
        pos = _no_tags(view, pos)
    transactional_id = None
    if version >= TRANSACTIONAL_ID_VERSION:
        size, pos = _length(view, pos, flexible, _I16)
        if size >= 0:
            transactional_id, pos = _string(view, pos, size)
        elif size != -1:
            raise _Bad()
    acks, timeout = _ACKS_TIMEOUT.unpack_from(view, pos)
    pos += _ACKS_TIMEOUT.size
    count, pos = _length(view, pos, flexible, _I32)
    if count < 0:
        raise _Bad()                    # a null topic array: kio's error
    topics: list[TopicProduceData] = []
    by_id = version >= TOPIC_ID_VERSION
    for _ in range(count):
        name: str | None = None
        topic_id = None
        if by_id:
            if pos + 16 > end:
                raise _Bad()
            topic_id = uuid.UUID(bytes=bytes(view[pos:pos + 16]))
            pos += 16
        else:
            size, pos = _length(view, pos, flexible, _I16)
            name, pos = _string(view, pos, size)
        n, pos = _length(view, pos, flexible, _I32)
        if n < 0:
            raise _Bad()
        partitions: list[PartitionProduceData] = []
        for _ in range(n):
            index = _I32.unpack_from(view, pos)[0]
            size, pos = _length(view, pos + 4, flexible, _I32)
            if size >= 0:
                stop = pos + size
                if stop > end:
                    raise _Bad()
                records: memoryview | None = view[pos:stop]
                pos = stop
            elif size == -1:
                records = None
            else:
                raise _Bad()
            if flexible:
                pos = _no_tags(view, pos)
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            pos = _no_tags(view, pos)
        topics.append(TopicProduceData(name, partitions, topic_id))
    if flexible:
        pos = _no_tags(view, pos)
    if pos != end:
        raise _Bad()
    return version, correlation_id, client_id, ProduceRequest(transactional_id, acks, timeout, topics)


# -- Fetch response v11 (a follower's) ----------------------------------------------------------

_FETCH_HEAD = struct.Struct(">iihii")       # correlation id, throttle, error, session id, topic count
_FETCH_PARTITION = struct.Struct(">ihqqqi")  # index, error, high watermark, LSO, log start, aborted count
_I64_I64 = struct.Struct(">qq")

FETCH_RESPONSE_VERSION = 11


class FetchedPartition(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    preferred_read_replica: int
    records: memoryview | None


class FetchedTopic(NamedTuple):
    topic: str
    partitions: list[FetchedPartition]


class FetchResponse(NamedTuple):
    throttle_time: int
    error_code: int
    session_id: int
    responses: list[FetchedTopic]


def decode_fetch_response(frame: bytes | bytearray) -> FetchResponse | None:
    """A Fetch v11 response frame (correlation id first, no size prefix), or None when it is not
    exactly that layout."""
    try:
        return _decode_fetch(memoryview(frame))
    except (_Bad, Malformed, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None


def _decode_fetch(view: memoryview) -> FetchResponse:
    end = len(view)
    _, throttle, error, session_id, count = _FETCH_HEAD.unpack_from(view, 0)
    error = ErrorCode(error)        # a code this version does not know: ValueError, kio decides
    pos = _FETCH_HEAD.size
    if count < 0:
        raise _Bad()
    topics: list[FetchedTopic] = []
    for _ in range(count):
        size = _I16.unpack_from(view, pos)[0]
        name, pos = _string(view, pos + 2, size)
        n = _I32.unpack_from(view, pos)[0]
        pos += 4
        if n < 0:
            raise _Bad()
        partitions: list[FetchedPartition] = []
        for _ in range(n):
            index, perror, hw, lso, log_start, aborted_count = _FETCH_PARTITION.unpack_from(view, pos)
            perror = ErrorCode(perror)
            pos += _FETCH_PARTITION.size
            aborted: list[tuple[int, int]] | None = None
            if aborted_count >= 0:
                aborted = []
                for _ in range(aborted_count):
                    aborted.append(_I64_I64.unpack_from(view, pos))
                    pos += 16
            elif aborted_count != -1:
                raise _Bad()
            replica, size = struct.unpack_from(">ii", view, pos)
            pos += 8
            records: memoryview | None = None
            if size >= 0:
                stop = pos + size
                if stop > end:
                    raise _Bad()
                records = view[pos:stop]
                pos = stop
            elif size != -1:
                raise _Bad()
            partitions.append(FetchedPartition(index, perror, hw, lso, log_start, aborted, replica, records))
        topics.append(FetchedTopic(name, partitions))
    if pos != end:
        raise _Bad()
    return FetchResponse(throttle, error, session_id, topics)
