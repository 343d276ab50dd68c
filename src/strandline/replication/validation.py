"""Append-time validation of produced record batches, without decoding records.

Kafka's LogValidator rules that can be checked from batch headers: magic 2, CRC-32C, a
complete batch, exactly one batch per partition per request, record count consistent with the
last offset delta, size within ``max.message.bytes``, no control batches from clients, a
sequence number whenever a producer id is set, a producer id on every transactional batch, and (CreateTime topics) the batch's first and
largest timestamps within ``message.timestamp.difference.max.ms`` of the broker's clock.
Then ``compression.type``: a batch whose codec differs is recompressed, and in a compacted
topic every record must have a key (Kafka's ``validateKey``): the two cases where the broker
decodes records.
"""

from __future__ import annotations

from typing import NamedTuple

from kio.schema.errors import ErrorCode

from strandline.protocol.records import (HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader, Buffer,
                                         UndecodableRecordsError, crc_ok, iter_records, read_header, recompress)


class Validated(NamedTuple):
    error: ErrorCode
    header: BatchHeader | None
    message: str | None = None
    #: ``(index of the record in its batch, message)`` of each record refused (KIP-467)
    record_errors: tuple[tuple[int, str], ...] = ()
    #: refused before the log is asked (the request's shape, a corrupt or oversized batch): the
    #: answer carries no log start offset (-1), as Kafka's
    early: bool = False


NO_TIMESTAMP = -1

#: compression.type: the codec batches are stored with (None: as the producer sent them)
CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def validate_produce_records(records: Buffer | None, max_message_bytes: int, max_timestamp_difference_ms: int | None = None,
                             now_ms: int = 0) -> Validated:
    """Check the records of one partition in a Produce request (v3+: one v2 batch)."""
    if records is None or len(records) == 0:
        return Validated(ErrorCode.invalid_record, None, "no record batch", early=True)
    size = len(records)
    if size > MAGIC_OFFSET and records[MAGIC_OFFSET] not in (0, 1, 2):
        # Kafka's ByteBufferLogInputStream: a magic above the newest (or negative) is corrupt
        magic = records[MAGIC_OFFSET] - 256 if records[MAGIC_OFFSET] > 127 else records[MAGIC_OFFSET]
        return Validated(ErrorCode.corrupt_message, None, f"Invalid magic found in record: {magic}", early=True)
    if size > MAGIC_OFFSET and records[MAGIC_OFFSET] != 2:
        # Kafka's ProduceRequest.validateRecords (v3+), whatever the set's length
        return Validated(ErrorCode.invalid_record, None, f"record batch magic {records[MAGIC_OFFSET]} is not 2: "
                                                         "Produce v3+ carries record batches of magic 2 only",
                         early=True)
    if size < HEADER_SIZE:
        return Validated(ErrorCode.corrupt_message, None, f"record batch of {size} bytes is shorter than its header",
                         early=True)
    header = read_header(records, 0)
    batch_size = LOG_OVERHEAD + header.batch_length
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or batch_size > size:
        return Validated(ErrorCode.corrupt_message, None, "record batch length does not match the bytes sent",
                         early=True)
    if batch_size < size:
        return Validated(ErrorCode.invalid_record, None, "more than one record batch for a partition", early=True)
    if batch_size > max_message_bytes:
        return Validated(ErrorCode.message_too_large, None,
                         f"record batch of {batch_size} bytes exceeds max.message.bytes {max_message_bytes}",
                         early=True)
    if not crc_ok(records, 0, header):
        return Validated(ErrorCode.corrupt_message, None, "record batch CRC-32C mismatch", early=True)
    if header.records_count <= 0 or header.last_offset_delta + 1 != header.records_count:
        return Validated(ErrorCode.invalid_record, None, "record count does not match the last offset delta")
    if header.is_control:
        return Validated(ErrorCode.invalid_record, None, "clients may not produce control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        return Validated(ErrorCode.invalid_record, None, "producer id set without a base sequence")
    if header.is_transactional and header.producer_id < 0:
        return Validated(ErrorCode.invalid_record, None, "a transactional batch without a producer id")
    if max_timestamp_difference_ms is not None:
        for timestamp in (header.base_timestamp, header.max_timestamp):
            if timestamp != NO_TIMESTAMP and abs(timestamp - now_ms) > max_timestamp_difference_ms:
                return Validated(ErrorCode.invalid_timestamp, None, (
                    f"Timestamp {timestamp} of a record is out of range: it must be within "
                    f"[{now_ms - max_timestamp_difference_ms}, {now_ms + max_timestamp_difference_ms}] "
                    f"(message.timestamp.difference.max.ms)"))
    return Validated(ErrorCode.none, header)


def apply_compression_type(records: Buffer, header: BatchHeader, compression_type: str,
                           max_message_bytes: int) -> tuple[Buffer, Validated]:
    """The batch as it is stored under ``compression.type``: unchanged when the codec matches
    (or is ``producer``), else recompressed; CORRUPT_MESSAGE when it cannot be decompressed,
    MESSAGE_TOO_LARGE when the recompressed batch exceeds ``max.message.bytes``."""
    codec = CODECS[compression_type]
    if codec is None or header.compression == codec:
        return records, Validated(ErrorCode.none, header)
    try:
        records = recompress(records, header, codec)
    except Exception as exc:     # whatever the codec's library raises on bad input
        return records, Validated(ErrorCode.corrupt_message, None, f"records cannot be decompressed: {exc}")
    if len(records) > max_message_bytes:
        return records, Validated(ErrorCode.message_too_large, None, (
            f"record batch of {len(records)} bytes once recompressed exceeds max.message.bytes {max_message_bytes}"))
    return records, Validated(ErrorCode.none, read_header(records, 0))


def check_keys(records: Buffer, header: BatchHeader, topic: str, partition: int) -> Validated:
    """A compacted topic's batch: INVALID_RECORD unless every record has a key, naming each record
    without one (KIP-467's record errors, so that a client fails those and retries the others, as
    Kafka's LogValidator does); CORRUPT_MESSAGE if the records do not decode."""
    try:
        keyless = [i for i, record in enumerate(iter_records(records, 0, header)) if record.key is None]
    except UndecodableRecordsError as exc:
        return Validated(ErrorCode.corrupt_message, None, str(exc))
    if not keyless:
        return Validated(ErrorCode.none, header)
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
    errors = tuple((i, why) for i in keyless)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i, _ in errors[:3])
    return Validated(ErrorCode.invalid_record, None, (
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
        f"showing the first three errors at most: [{shown}]"), errors)
