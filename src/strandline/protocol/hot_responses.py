"""Hand-written encoders for the hot responses (Produce, Fetch, Metadata), byte-identical to kio's.

:func:`encode_fetch_response` returns a list of buffers, so stored record batches are sent as they
lie (never copied into one frame), and :func:`encode_produce_response` skips the dataclass round trip.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from strandline.protocol.header import RequestHeader

# -- hand-written encoders for the hot responses ----------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_NULL_ARRAY = _I32.pack(-1)
_NULL_STRING = _I16.pack(-1)


_SMALL_UVARINTS = [bytes((n,)) for n in range(128)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else _NULL_STRING
    return _string(s, flexible)


def _array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return b"\x00" if flexible else _NULL_ARRAY
    return _uvarint(n + 1) if flexible else _I32.pack(n)


class PartitionData(NamedTuple):
    """One partition of a Fetch response, for :func:`encode_fetch_response`.

    ``records`` is a bytes-like object, a list/tuple of them (written back to back, e.g. the
    batches of several segments; never copied) or None (null). ``aborted_transactions`` is
    None (null, READ_UNCOMMITTED) or a list of (producer_id, first_offset). ``diverging_epoch``
    (epoch, end_offset) and ``current_leader`` (leader_id, leader_epoch) are tagged fields,
    written in v12 only and only when given and not (-1, -1), as kio does.
    """

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = b""
    preferred_read_replica: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


_PARTITION_FIELDS = PartitionData._fields


def _partition_from(p: Any) -> PartitionData:
    if isinstance(p, PartitionData):
        return p
    if isinstance(p, Mapping):
        return PartitionData(**{k: p[k] for k in _PARTITION_FIELDS if k in p})
    return PartitionData(*p)


@lru_cache(maxsize=None)
def _fetch_partition_structs(version: int) -> tuple[struct.Struct, struct.Struct]:
    """(general, common) layouts of a Fetch partition's fixed fields for ``version``.

    general: partition_index, error_code, high_watermark, last_stable_offset[, log_start v5+].
    common (aborted_transactions null, records present): the same, then the null array, the
    preferred read replica (v11+) and, non-flexible, the int32 records length, in one pack.
    """
    general = ">ihqqq" if version >= 5 else ">ihqq"
    if version >= 12:
        common = general + "bi"            # null compact array (0), replica; uvarint size follows
    elif version >= 11:
        common = general + "iii"           # null array (-1), replica, records size
    else:
        common = general + "ii"            # null array (-1), records size
    return struct.Struct(general), struct.Struct(common)


def _fetch_args_from_body(body: Mapping[str, Any]) -> tuple[Any, ...]:
    topics = [(t["topic_id"] if "topic_id" in t else t["topic"], t["partitions"]) for t in body.get("responses", ())]
    return (body.get("throttle_time", 0), body.get("error_code", 0), body.get("session_id", 0),
            topics)


def encode_fetch_response(header: RequestHeader, throttle_ms: Any = 0, error_code: int = 0,  # noqa: C901  (the hot path: every version's fields in one loop, without calls)
                          session_id: int = 0, topics: Sequence[Any] = ()) -> list[Any]:
    """A framed Fetch v0..v16 response as a list of buffers, for ``transport.writelines``.

    ``topics`` is a list of ``(topic, [PartitionData | dict | tuple, ...])``: the topic's name up
    to v12, its id (a UUID) from v13 (KIP-516). The record
    buffers are placed in the list as they are (never copied); the concatenation of the list is
    byte-identical to kio's encoding of the same response. For compatibility the second
    argument may instead be a whole response body dict (``throttle_time``, ``error_code``,
    ``session_id``, ``responses``: [{"topic", "partitions": [dict, ...]}]).
    """
    if isinstance(throttle_ms, Mapping):
        throttle_ms, error_code, session_id, topics = _fetch_args_from_body(throttle_ms)
    if isinstance(throttle_ms, timedelta):
        throttle_ms = round(throttle_ms.total_seconds() * 1000)
    v = header.api_version
    if not 4 <= v <= 16:
        if 0 <= v <= 3:
            return [_encode_old_fetch_response(header, throttle_ms, topics)]
        raise ValueError(f"encode_fetch_response handles Fetch v0-v16, not v{v}")
    by_id = v >= 13
    flexible = v >= 12
    fixed, common = _fetch_partition_structs(v)
    parts: list[Any] = []
    head = bytearray(b"\0\0\0\0")  # size, filled in at the end
    head += _I32.pack(header.correlation_id)
    if flexible:
        head += b"\x00"  # response header v1: no tagged fields
    head += _I32.pack(throttle_ms)
    if v >= 7:
        head += _I16.pack(error_code)
        head += _I32.pack(session_id)
    head += _array_len(len(topics), flexible)
    total = 0
    null = b"\x00" if flexible else _NULL_ARRAY
    with_log_start = v >= 5
    with_replica = v >= 11
    for name, partitions in topics:
        head += name.bytes if by_id else _string(name, flexible)
        head += _array_len(len(partitions), flexible)
        for p in partitions:
            if p.__class__ is not PartitionData:
                p = _partition_from(p)
            (index, error, high_watermark, last_stable, log_start, records, replica, aborted,
             diverging, leader) = p
            if records is not None and aborted is None:
                if records.__class__ is list or records.__class__ is tuple:
                    size = sum(map(len, records))
                else:
                    size = len(records)
                if flexible:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, 0, replica)
                    head += _uvarint(size + 1)
                elif with_replica:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, -1, replica, size)
                elif with_log_start:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, -1, size)
                else:
                    head += common.pack(index, error, high_watermark, last_stable, -1, size)
            else:
                size = 0
                if with_log_start:
                    head += fixed.pack(index, error, high_watermark, last_stable, log_start)
                else:
                    head += fixed.pack(index, error, high_watermark, last_stable)
                if aborted is None:
                    head += null
                else:
                    head += _array_len(len(aborted), flexible)
                    for producer_id, first_offset in aborted:
                        head += _I64_I64.pack(producer_id, first_offset)
                        if flexible:
                            head += b"\x00"
                if with_replica:
                    head += _I32.pack(replica)
                if records is None:
                    head += null
                else:
                    if records.__class__ is list or records.__class__ is tuple:
                        size = sum(map(len, records))
                    else:
                        size = len(records)
                    head += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(head if not parts else bytes(head))
                total += len(head) + size
                if records.__class__ is list or records.__class__ is tuple:
                    parts += [b for b in records if len(b)]
                else:
                    parts.append(records)
                head = bytearray()
            if flexible:
                if diverging is None and leader is None:
                    head += b"\x00"
                else:
                    head += _fetch_partition_tags(diverging, leader)
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    parts.append(head if not parts else bytes(head))
    total += len(head)
    first = parts[0]  # always the first head segment, still a bytearray: fill in the size
    _I32.pack_into(first, 0, total - 4)
    parts[0] = bytes(first)
    return parts


def _encode_old_fetch_response(header: RequestHeader, throttle_ms: int, topics: Sequence[Any]) -> bytes:
    """Fetch v0-v3: per partition only its index, error, high watermark and records (a legacy
    message set); a throttle time from v1. One buffer: the records were converted for it."""
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(header.correlation_id)
    if header.api_version >= 1:
        out += _I32.pack(throttle_ms)
    out += _I32.pack(len(topics))
    for name, partitions in topics:
        out += _string(name, False)
        out += _I32.pack(len(partitions))
        for p in partitions:
            p = _partition_from(p)
            records = p.records
            if records.__class__ is list or records.__class__ is tuple:
                records = b"".join(bytes(r) for r in records)
            elif records is not None and not isinstance(records, (bytes, bytearray, memoryview)):
                records = bytes(records)
            out += struct.pack(">ihq", p.partition_index, p.error_code, p.high_watermark)
            if records is None:
                out += _I32.pack(-1)
            else:
                out += _I32.pack(len(records))
                out += records
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _fetch_partition_tags(diverging: Any, leader: Any) -> bytes:
    if diverging is not None and tuple(diverging) == (-1, -1):
        diverging = None
    if leader is not None and tuple(leader) == (-1, -1):
        leader = None
    if diverging is None and leader is None:
        return b"\x00"
    out = bytearray(_uvarint((diverging is not None) + (leader is not None)))
    if diverging is not None:  # tag 0: EpochEndOffset {epoch int32, end_offset int64, tags}
        out += b"\x00\x0d" + struct.pack(">iq", diverging[0], diverging[1]) + b"\x00"
    if leader is not None:  # tag 1: LeaderIdAndEpoch {leader_id int32, leader_epoch int32, tags}
        out += b"\x01\x09" + struct.pack(">ii", leader[0], leader[1]) + b"\x00"
    return bytes(out)


class PartitionProduceResult(NamedTuple):
    """One partition of a Produce response, for :func:`encode_produce_response`.

    A plain tuple of the first five fields works too. ``log_append_time`` is epoch ms, -1 for
    CreateTime topics. ``record_errors`` is a list of (batch_index, message | None) (v8+);
    ``current_leader`` (leader_id, leader_epoch) is the v10 tagged field (KIP-951).
    """

    index: int  # type: ignore[assignment]  # Kafka's field name; it shadows tuple.index on purpose
    error_code: int
    base_offset: int
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()
    current_leader: tuple[int, int] | None = None


def encode_produce_response(header: RequestHeader, topics: Sequence[Any], throttle_ms: int = 0,
                            node_endpoints: Sequence[Any] = ()) -> bytes:
    """A framed Produce v0..v13 response, byte-identical to kio's encoding (v0-v2: to the encoding
    of the schemas :mod:`strandline.protocol.old_versions` derives).

    ``topics`` is ``[(name, [(index, error_code, base_offset, log_append_time,
    log_start_offset[, error_message[, record_errors[, current_leader]]]), ...]), ...]``.
    ``node_endpoints`` (v10+, tagged) is a list of (node_id, host, port, rack | None). From v13 a
    topic is its id (a ``uuid.UUID`` in place of the name).
    """
    v = header.api_version
    if not 0 <= v <= 13:
        raise ValueError(f"encode_produce_response handles Produce v0-v13, not v{v}")
    flexible = v >= 9
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(header.correlation_id)
    if flexible:
        out += b"\x00"
    out += _array_len(len(topics), flexible)
    for name, partitions in topics:
        out += name.bytes if v >= 13 else _string(name, flexible)
        out += _array_len(len(partitions), flexible)
        for p in partitions:
            n = len(p)
            if v < 2:       # v0-v1: no log append time
                out += struct.pack(">ihq", p[0], p[1], p[2])
                continue
            out += struct.pack(">ihqq", p[0], p[1], p[2], p[3])
            if v >= 5:
                out += _I64.pack(p[4])
            if v >= 8:
                record_errors = p[6] if n > 6 else ()
                out += _array_len(len(record_errors), flexible)
                for batch_index, message in record_errors:
                    out += _I32.pack(batch_index)
                    out += _nullable_string(message, flexible)
                    if flexible:
                        out += b"\x00"
                out += _nullable_string(p[5] if n > 5 else None, flexible)
            if flexible:
                leader = p[7] if n > 7 and v >= 10 else None
                if leader is not None and tuple(leader) != (-1, -1):
                    out += b"\x01\x00\x09" + struct.pack(">ii", leader[0], leader[1]) + b"\x00"
                else:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    if v >= 1:
        out += _I32.pack(throttle_ms)
    if flexible:
        if v >= 10 and node_endpoints:
            tag = bytearray(_array_len(len(node_endpoints), True))
            for node_id, host, port, rack in node_endpoints:
                tag += _I32.pack(node_id) + _string(host, True) + _I32.pack(port)
                tag += _nullable_string(rack, True) + b"\x00"
            out += b"\x01\x00" + _uvarint(len(tag)) + tag
        else:
            out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# -- the follower's Fetch request (v11) ---------------------------------------------------------

FETCH_REQUEST_VERSION = 11
_FETCH_REQUEST = struct.Struct(">iiiibii")   # replica, max wait, min bytes, max bytes, isolation, session, epoch
_FETCH_REQUEST_PARTITION = struct.Struct(">iiqqi")


def encode_fetch_request(correlation_id: int, client_id: str, body: Mapping[str, Any]) -> bytes:
    """A Fetch v11 request frame without its size prefix, byte-identical to kio's, from the same
    body ``encode_request`` takes (the follower's: plain ints, topics named)."""
    out = bytearray(struct.pack(">hhi", 1, FETCH_REQUEST_VERSION, correlation_id))
    out += _string(client_id, False)
    out += _FETCH_REQUEST.pack(body["replica_id"], body["max_wait"], body["min_bytes"], body["max_bytes"],
                               body["isolation_level"], body["session_id"], body["session_epoch"])
    topics = body["topics"]
    out += _I32.pack(len(topics))
    pack = _FETCH_REQUEST_PARTITION.pack
    for topic in topics:
        out += _string(topic["topic"], False)
        partitions = topic["partitions"]
        out += _I32.pack(len(partitions))
        for p in partitions:
            out += pack(p["partition"], p["current_leader_epoch"], p["fetch_offset"], p["log_start_offset"],
                        p["partition_max_bytes"])
    forgotten = body["forgotten_topics_data"]
    out += _I32.pack(len(forgotten))
    for topic in forgotten:
        out += _string(topic["topic"], False)
        indexes = topic["partitions"]
        out += _I32.pack(len(indexes))
        out += struct.pack(f">{len(indexes)}i", *indexes)
    out += _string(body["rack_id"], False)
    return bytes(out)


PRODUCE_REQUEST_VERSION = 7
_PRODUCE_REQUEST = struct.Struct(">hi")      # acks, timeout


def encode_produce_request(correlation_id: int, client_id: str, body: Mapping[str, Any]) -> bytes:
    """A Produce v7 request frame without its size prefix, byte-identical to kio's, from the same
    body ``encode_request`` takes (topics named, records as bytes)."""
    out = bytearray(struct.pack(">hhi", 0, PRODUCE_REQUEST_VERSION, correlation_id))
    out += _string(client_id, False)
    out += _nullable_string(body["transactional_id"], False)
    out += _PRODUCE_REQUEST.pack(body["acks"], body["timeout"])
    topics = body["topic_data"]
    out += _I32.pack(len(topics))
    for topic in topics:
        out += _string(topic["name"], False)
        partitions = topic["partition_data"]
        out += _I32.pack(len(partitions))
        for p in partitions:
            records = p["records"]
            out += _I32.pack(p["index"])
            if records is None:
                out += _I32.pack(-1)
            else:
                out += _I32.pack(len(records))
                out += records
    return bytes(out)



# -- Metadata (every client asks for it; a refreshing one often) --------------------------------

_UNKNOWN_OPERATIONS = -2147483648
_NIL_UUID = b"\0" * 16


def _int32_array(values: Sequence[int], flexible: bool) -> bytes:
    return _array_len(len(values), flexible) + struct.pack(f">{len(values)}i", *values)


def encode_metadata_response(header: RequestHeader, body: Mapping[str, Any]) -> bytes:
    """A framed Metadata v0..v13 response, byte-identical to kio's, from the body
    ``encode_response`` takes (a dict: ``brokers``, ``cluster_id``, ``controller_id``, ``topics``
    with their ``partitions``, ``cluster_authorized_operations``, ``throttle_time`` in ms,
    ``error_code``; a missing field takes kio's default)."""
    v = header.api_version
    if not 0 <= v <= 13:
        raise ValueError(f"encode_metadata_response handles Metadata v0-v13, not v{v}")
    flexible = v >= 9
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(header.correlation_id)
    if flexible:
        out += b"\x00"
    if v >= 3:
        out += _I32.pack(_ms(body.get("throttle_time", 0)))
    brokers = body.get("brokers") or ()
    out += _array_len(len(brokers), flexible)
    for b in brokers:
        out += _I32.pack(b["node_id"])
        out += _string(b["host"], flexible)
        out += _I32.pack(b["port"])
        if v >= 1:
            out += _nullable_string(b.get("rack"), flexible)
        if flexible:
            out += b"\x00"
    if v >= 2:
        out += _nullable_string(body.get("cluster_id"), flexible)
    if v >= 1:
        controller = body.get("controller_id")
        out += _I32.pack(-1 if controller is None else controller)
    topics = body.get("topics") or ()
    out += _array_len(len(topics), flexible)
    for t in topics:
        out += _I16.pack(int(t.get("error_code") or 0))
        out += _nullable_string(t.get("name"), flexible) if v >= 12 else _string(t.get("name") or "", flexible)
        if v >= 10:
            topic_id = t.get("topic_id")
            out += topic_id.bytes if topic_id is not None else _NIL_UUID
        if v >= 1:
            out += b"\x01" if t.get("is_internal") else b"\x00"
        partitions = t.get("partitions") or ()
        out += _array_len(len(partitions), flexible)
        for p in partitions:
            out += struct.pack(">hii", int(p.get("error_code") or 0), p["partition_index"], p["leader_id"])
            if v >= 7:
                epoch = p.get("leader_epoch")
                out += _I32.pack(-1 if epoch is None else epoch)
            out += _int32_array(p.get("replica_nodes") or (), flexible)
            out += _int32_array(p.get("isr_nodes") or (), flexible)
            if v >= 5:
                out += _int32_array(p.get("offline_replicas") or (), flexible)
            if flexible:
                out += b"\x00"
        if v >= 8:
            ops = t.get("topic_authorized_operations")
            out += _I32.pack(_UNKNOWN_OPERATIONS if ops is None else ops)
        if flexible:
            out += b"\x00"
    if 8 <= v <= 10:
        ops = body.get("cluster_authorized_operations")
        out += _I32.pack(_UNKNOWN_OPERATIONS if ops is None else ops)
    if v >= 13:
        out += _I16.pack(int(body.get("error_code") or 0))
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _ms(value: Any) -> int:
    """A duration in ms, given as ms or as a timedelta."""
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


METADATA_REQUEST_VERSION = 9


def encode_metadata_request(correlation_id: int, client_id: str, body: Mapping[str, Any]) -> bytes:
    """A Metadata v9 request frame without its size prefix, byte-identical to kio's, from the same
    body ``encode_request`` takes (``topics``: ``[{"name": ...}]`` or None for every topic)."""
    out = bytearray(struct.pack(">hhi", 3, METADATA_REQUEST_VERSION, correlation_id))
    out += _nullable_string(client_id, False)          # the request header's client id: always legacy
    out += b"\x00"
    topics = body.get("topics")
    out += _array_len(None if topics is None else len(topics), True)
    for topic in topics or ():
        out += _string(topic["name"], True) + b"\x00"
    out += b"\x01" if body.get("allow_auto_topic_creation", True) else b"\x00"
    out += b"\x01" if body.get("include_cluster_authorized_operations") else b"\x00"
    out += b"\x01" if body.get("include_topic_authorized_operations") else b"\x00"
    out += b"\x00"
    return bytes(out)
