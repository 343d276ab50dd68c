"""Transaction markers (KIP-98): the control batch a partition leader appends when a transaction
ends. Its attributes say transactional and control; its one record's key is ``(version 0, type:
0 abort, 1 commit)`` and its value ``(version 0, coordinator epoch)``."""

from __future__ import annotations

import struct

import crc32c

from strandline.protocol.records import BatchHeader, Buffer, iter_records, write_varint

TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
ABORT_MARKER, COMMIT_MARKER = 0, 1


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytearray:
    """A control batch holding one commit or abort marker of ``producer_id``'s transaction (the
    log stamps its offset and leader epoch)."""
    key = struct.pack(">hh", 0, COMMIT_MARKER if commit else ABORT_MARKER)
    value = struct.pack(">hi", 0, coordinator_epoch)
    rec = b"\0" + write_varint(0) + write_varint(0) + write_varint(len(key)) + key + write_varint(len(value)) + value + write_varint(0)
    after_crc = struct.pack(">hiqqqhii", TRANSACTIONAL_BIT | CONTROL_BIT, 0, timestamp_ms, timestamp_ms, producer_id,
                            producer_epoch, -1, 1) + write_varint(len(rec)) + rec
    return bytearray(struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc)


def marker_type(key: bytes | None) -> int | None:
    """ABORT_MARKER or COMMIT_MARKER for a control record's key; None for another control record."""
    if key is None or len(key) < 4:
        return None
    version, kind = struct.unpack_from(">hh", key)
    return kind if version == 0 and kind in (ABORT_MARKER, COMMIT_MARKER) else None


def read_marker(records: Buffer, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """``(marker type, coordinator epoch)`` of the control batch at ``pos``; None for another
    kind of control record."""
    for record in iter_records(records, pos, header):
        kind = marker_type(record.key)
        if kind is None:
            return None
        value = record.value or b""
        coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True) if len(value) >= 6 else -1
        return kind, coordinator_epoch
    return None
