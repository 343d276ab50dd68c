"""Requests out and answers back as plain trees (dicts, lists, ints, strings, bytes).

A request body is one of:
* a dict (or kio dataclass): encoded with Strandline's protocol module (kio's schemas, and the
  older versions :mod:`strandline.protocol.old_versions` derives), or, for the controller's APIs
  (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown) in the versions
  :mod:`strandline.protocol.control` knows, with that module;
* a kafka-python ``Struct`` (its hand-written structs of old versions);
* a :class:`Raw` body: bytes laid out by hand, for the few versions no library here describes
  (ControlledShutdown v0-v2, delegation tokens v0, AlterIsr v0), whose answers are read
  only as far as :attr:`Raw.head` says.

Answers are decoded with the same schema and turned into trees (:func:`tree`): kio's enums become
ints, UUIDs strings, durations milliseconds, and record sets lists of batches read by
kafka-python's record readers (every magic), not by Strandline's.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from strandline.protocol import api as kio_api
from strandline.protocol import control

CLIENT_ID = "differential"


@dataclass(frozen=True)
class Raw:
    """A body laid out by hand. ``flexible``: the v2 request header (tagged fields) and the v1
    response header; ``head``: the answer's first fields read, as ``(name, "int16"|"int32"|"int64"|"string"|
    "compact_string")``."""

    body: bytes
    flexible: bool = False
    head: tuple[tuple[str, str], ...] = (("error_code", "int16"),)
    header_v0: bool = False     # ControlledShutdown v0's request header: no client id


def _header(api_key: int, version: int, correlation_id: int, flexible: bool, v0: bool = False) -> bytes:
    if v0:
        return struct.pack(">hhi", api_key, version, correlation_id)
    cid = CLIENT_ID.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid + (b"\0" if flexible else b"")


def encode(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """The request frame, without its size prefix."""
    if isinstance(body, Raw):
        return _header(api_key, version, correlation_id, body.flexible, body.header_v0) + body.body
    if hasattr(body, "SCHEMA") and hasattr(body, "encode"):          # kafka-python Struct
        return _header(api_key, version, correlation_id, False) + body.encode()
    if api_key in control.SCHEMAS:
        return control.encode_request(api_key, correlation_id, CLIENT_ID, body, version)
    return kio_api.encode_request(api_key, version, correlation_id, CLIENT_ID, body)


def decode(api_key: int, version: int, body: Any, frame: bytes) -> Any:
    """The answer's body as a tree (the correlation id checked by the caller)."""
    if isinstance(body, Raw):
        pos = 4 + (1 if body.flexible else 0)
        out = {}
        for name, kind in body.head:
            if kind in ("string", "compact_string"):            # a non-null string (compact: length + 1, < 128)
                size = struct.unpack_from(">h", frame, pos)[0] if kind == "string" else frame[pos] - 1
                pos += 2 if kind == "string" else 1
                out[name] = frame[pos:pos + size].decode()
                pos += size
                continue
            fmt = {"int16": ">h", "int32": ">i", "int64": ">q"}[kind]
            (out[name],) = struct.unpack_from(fmt, frame, pos)
            pos += struct.calcsize(fmt)
        return out
    if hasattr(body, "SCHEMA") and hasattr(body, "encode"):
        import importlib

        module = importlib.import_module(type(body).__module__)
        response = getattr(module, type(body).__name__.replace("Request", "Response"))
        return tree(response.decode(frame[4:]).to_object())
    if api_key in control.SCHEMAS:
        return tree(control.decode_response(api_key, frame, version))
    return tree(kio_api.decode_response(api_key, version, frame))


def correlation_id(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 0)[0]


# -- trees ---------------------------------------------------------------------------------------

def tree(obj: Any) -> Any:
    """A plain, comparable tree of a decoded answer."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("kafka_type") == "records":
                out[f.name] = records(value)
            else:
                out[f.name] = tree(value)
        return out
    if isinstance(obj, dict):
        return {k: tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [tree(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return int(obj.value) if isinstance(obj.value, int) else obj.value
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, datetime.timedelta):
        return int(obj.total_seconds() * 1000)
    if isinstance(obj, datetime.datetime):
        return int(obj.timestamp() * 1000)
    if isinstance(obj, memoryview):
        return bytes(obj)
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)
    return obj


def records(data: bytes | None) -> Any:
    """Every batch (or legacy message set) of ``data``, read by kafka-python: the batch's header
    fields and its records (offset, timestamp, key, value, headers); None for null records."""
    if data is None:
        return None
    from kafka.record.memory_records import MemoryRecords

    out = []
    mem = MemoryRecords(bytes(data))
    while mem.has_next():
        batch = mem.next_batch()
        if batch is None:
            break
        entry: dict[str, Any] = {"magic": batch.magic, "base_offset": batch.base_offset,
                                 "compression": batch.compression_type, "crc_ok": batch.validate_crc()}
        if batch.magic == 2:
            entry.update(attributes=batch.attributes, last_offset_delta=batch.last_offset_delta,
                         first_timestamp=batch.first_timestamp, max_timestamp=batch.max_timestamp,
                         producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                         base_sequence=batch.base_sequence, leader_epoch=batch.leader_epoch)
        entry["records"] = [{"offset": r.offset, "timestamp": r.timestamp, "key": r.key, "value": r.value,
                             "headers": [list(h) for h in getattr(r, "headers", [])]} for r in batch]
        out.append(entry)
    return out
