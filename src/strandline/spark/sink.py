"""Writing DataFrames to Strandline topics: the ``strandline`` data source's batch and streaming
writers. The schema and options follow Spark's Kafka sink (KafkaWriter): ``value`` binary or
string, optional ``key``, ``topic``, ``partition`` and ``headers``. Each task produces with its own
idempotent producer id, acks=all, one batch per partition at a time.

``exactlyOnce=true`` (Strandline's option, streaming queries only; needs the ``topic`` option):
Spark's own Kafka sink is at-least-once, since a micro-batch replayed after a failure is written
again. Here each task of micro-batch B writes in one Kafka transaction, as ``transactional.id``
``strandline-sink-<query id>-<partition>``, and commits with its records the offset B+1 of a
progress group of the same name (on the output topic's partition 0). A replayed task first
initializes the transactional id (which fences an earlier attempt and finishes or aborts its
transaction), then reads the group's committed offset: B already written, it writes nothing.
Readers with ``isolation.level=read_committed`` see each row once.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from strandline.group.records import varint
from strandline.spark.options import OptionError
from strandline.spark.client import Row, StrandlineClient, TransactionalProducer, committed_offset

NAME = "strandline"
WRITE_OPTIONS = {"kafka.bootstrap.servers", "topic", "includeheaders", "path", "checkpointlocation", "exactlyonce"}
TopicPartition = tuple[str, int]

@dataclass
class WriteSummary(WriterCommitMessage):
    records: int


def validate_write_schema(schema: StructType, topic_option: str | None) -> None:
    """As KafkaWriter.validateQuery: value binary or string; key, topic, partition, headers typed."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise OptionError(f"{name} attribute type must be a string or binary, got {fields[name].simpleString()}")
    if topic_option is None and "topic" not in fields:
        raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option for "
                          "setting a topic.")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"topic attribute type must be a string, got {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"partition attribute type must be an int, got {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [(f.name, type(f.dataType)) for f in h.elementType.fields] == [("key", StringType), ("value", BinaryType)]
        if not ok:
            raise OptionError("headers attribute type must be array<struct<key:string,value:binary>>, got "
                              f"{h.simpleString()}")


def _as_bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    return v.encode() if isinstance(v, str) else bytes(v)


_SMALL = [varint(n) for n in range(1 << 14)]       # zig-zag varints of 0..16383, for lengths and deltas


def encode_batch(rows: list[Row], producer_id: int, producer_epoch: int, sequence: int, now_ms: int,
                 transactional: bool = False) -> bytes:
    """An uncompressed v2 batch of (key, value, headers) for an idempotent (or transactional) producer."""
    import struct

    import crc32c

    small = _SMALL
    parts: list[bytes] = []
    append = parts.append
    null = varint(-1)
    for delta, (key, value, headers) in enumerate(rows):
        rec = [b"\0\0", small[delta] if delta < 16384 else varint(delta)]
        if key is None:
            rec.append(null)
        else:
            rec.append(small[len(key)] if len(key) < 16384 else varint(len(key)))
            rec.append(key)
        if value is None:
            rec.append(null)
        else:
            rec.append(small[len(value)] if len(value) < 16384 else varint(len(value)))
            rec.append(value)
        rec.append(small[len(headers)])
        for hk, hv in headers:
            kb = hk.encode()
            rec += [varint(len(kb)), kb] + ([null] if hv is None else [varint(len(hv)), hv])
        body = b"".join(rec)
        append(small[len(body)] if len(body) < 16384 else varint(len(body)))
        append(body)
    records = b"".join(parts)
    after_crc = struct.pack(">hiqqqhii", 0x10 if transactional else 0, len(rows) - 1, now_ms, now_ms, producer_id,
                            producer_epoch, sequence, len(rows)) + records
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


class _Writing:
    """Shared by the batch and the streaming writer: Arrow batches in, acks=all produce out."""

    BATCH_BYTES = 512 * 1024       # below the broker's message.max.bytes (1 MiB)

    def __init__(self, bootstrap: str, topic: str | None, schema: StructType, exactly_once: bool = False) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.columns = [f.name for f in schema.fields]
        self.exactly_once = exactly_once

    def write_batches(self, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
        with StrandlineClient(self.bootstrap) as client:
            txn = None
            if self.exactly_once:
                txn, progress = self._begin(client)
                if txn is None:
                    for _ in batches:               # this micro-batch's part is written already
                        pass
                    return WriteSummary(0)
            else:
                pid, epoch = client.init_producer_id()
            sequences: dict[TopicPartition, int] = {}
            pending: dict[TopicPartition, list[Row]] = {}
            size: dict[TopicPartition, int] = {}
            robin = 0
            written = 0

            def flush(tp: TopicPartition) -> None:
                rows = pending.pop(tp, [])
                if not rows:
                    return
                if txn is not None:
                    txn.produce(tp, rows, lambda rows, p, e, s: encode_batch(rows, p, e, s, int(time.time() * 1000),
                                                                           transactional=True))
                    return
                seq = sequences.get(tp, 0)
                client.produce(tp, encode_batch(rows, pid, epoch, seq, int(time.time() * 1000)))
                sequences[tp] = seq + len(rows)

            for batch in batches:
                data = batch.to_pydict()
                n = batch.num_rows
                for i in range(n):
                    topic = data["topic"][i] if "topic" in data and data["topic"][i] is not None else self.topic
                    if self.topic is not None:
                        topic = self.topic
                    if topic is None:
                        raise RuntimeError("a row has no topic (null 'topic' column and no topic option)")
                    parts = client.partitions.get(topic) or client.ensure_topic(topic)
                    key = _as_bytes(data["key"][i]) if "key" in data else None
                    part = data["partition"][i] if "partition" in data else None
                    if part is None:
                        if key is not None:
                            part = parts[(zlib.crc32(key) & 0x7FFFFFFF) % len(parts)]
                        else:
                            part = parts[robin % len(parts)]
                            robin += 1
                    headers = [(h["key"], _as_bytes(h["value"])) for h in (data["headers"][i] or [])] \
                        if "headers" in data else []
                    tp = (topic, int(part))
                    value = _as_bytes(data["value"][i])
                    rows = pending.setdefault(tp, [])
                    rows.append((key, value, headers))
                    size[tp] = size.get(tp, 0) + len(value or b"") + len(key or b"") + 16
                    written += 1
                    if size[tp] >= self.BATCH_BYTES:
                        size[tp] = 0
                        flush(tp)
            for tp in list(pending):
                flush(tp)
            if txn is not None:
                assert progress is not None and self.topic is not None        # _begin gave both
                group, batch_id = progress
                txn.commit_offset(group, (self.topic, 0), batch_id + 1)
                txn.end(commit=True)
        return WriteSummary(written)

    def _begin(self, client: StrandlineClient) -> tuple[TransactionalProducer | None, tuple[str, int] | None]:
        """The transactional producer of this task of this micro-batch, or (None, None) when a
        previous attempt already committed it."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if ctx is None or query is None or batch is None:
            raise RuntimeError("option exactlyOnce is for streaming queries (writeStream) only")
        if self.topic is None:
            raise RuntimeError("option exactlyOnce needs the option topic")
        transactional_id = f"strandline-sink-{query}-{ctx.partitionId()}"
        # first fence any earlier attempt: its transaction is then committed or aborted for good
        txn = TransactionalProducer(client, transactional_id)
        if committed_offset(client, transactional_id, (self.topic, 0)) >= int(batch) + 1:
            return None, None
        return txn, (transactional_id, int(batch))


class StrandlineBatchWriter(DataSourceArrowWriter):
    def __init__(self, writing: _Writing) -> None:
        self.writing = writing

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return self.writing.write_batches(iterator)


class StrandlineStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, writing: _Writing) -> None:
        self.writing = writing

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return self.writing.write_batches(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def writing(options: dict[str, Any], schema: StructType, overwrite: bool) -> _Writing:
    """Check the write options and schema on the driver, and create the topic named by the
    ``topic`` option before any task starts."""
    opts = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in WRITE_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise OptionError(f"unknown option {unknown[0]!r} for writing to {NAME}")
    if overwrite:
        raise OptionError(f"{NAME} topics are append-only: use mode('append')")
    if not opts.get("kafka.bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers must be set")
    validate_write_schema(schema, opts.get("topic"))
    exactly_once = opts.get("exactlyonce", "false").strip().lower()
    if exactly_once not in ("true", "false"):
        raise OptionError(f"option exactlyOnce: expected true or false, got {opts['exactlyonce']!r}")
    if exactly_once == "true" and opts.get("topic") is None:
        raise OptionError("option exactlyOnce needs the topic option (the progress of each task is kept with it)")
    if opts.get("topic") is not None:
        with StrandlineClient(opts["kafka.bootstrap.servers"]) as client:
            client.ensure_topic(opts["topic"])
    return _Writing(opts["kafka.bootstrap.servers"], opts.get("topic"), schema, exactly_once == "true")
