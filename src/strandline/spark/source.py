"""The ``strandline`` Python data source: topics as DataFrames, batch and streaming, read and write
(the writing side is :mod:`strandline.spark.sink`).

Options and schema follow Spark's built-in Kafka source (``spark-sql-kafka-0-10``). Reads see
committed records only (below the high watermark); each Spark task fetches one topic-partition
offset range from the partition's leader and decodes its record batches into Arrow. Offsets are
``{"topic": {"partition": next_offset}}`` JSON, written canonically (sorted keys) because Spark
compares them as strings.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, InputPartition)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from strandline.spark.options import OptionError
from strandline.spark.client import EARLIEST, LATEST, StrandlineClient
from strandline.spark.decode import Columns, decode_into
from strandline.spark.sink import NAME, StrandlineBatchWriter, StrandlineStreamWriter, writing

READ_OPTIONS = {
    "kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingoffsetsbytimestamp", "startingtimestamp", "failondataloss", "maxoffsetspertrigger",
    "minoffsetspertrigger", "maxtriggerdelay", "minpartitions", "includeheaders", "path", "checkpointlocation",
}
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
TopicPartition = tuple[str, int]


def read_schema(include_headers: bool) -> StructType:
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                   StructField("value", BinaryType())]))))
    return StructType(fields)


def _arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())])))))
    return pa.schema(fields)


def canonical(offsets: dict[str, Any]) -> dict[str, Any]:
    """Offsets with topics sorted and partition keys as strings in numeric order."""
    return {t: {str(p): int(o) for p, o in sorted(((int(p), o) for p, o in parts.items()))}
            for t, parts in sorted(offsets.items())}


def _bool(options: dict[str, Any], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise OptionError(f"option {key}: expected true or false, got {value!r}")
    return str(value).lower() == "true"


def _int(options: dict[str, Any], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option {key}: expected an integer, got {value!r}") from None
    if number <= 0:
        raise OptionError(f"option {key}: must be positive, got {number}")
    return number


def _duration_ms(options: dict[str, Any], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", value)
    if not m:
        raise OptionError(f"option {key}: expected a duration like 15m or 30s, got {value!r}")
    scale = {"ms": 1, "s": 1000, "m": 60000, "min": 60000, "h": 3600000}[m.group(2) or "ms"]
    return int(m.group(1)) * scale


#: startingOffsets / endingOffsets: "earliest", "latest", or {topic: {partition: offset}} (-2 earliest, -1 latest)
OffsetSpec = str | dict[str, dict[str, int]]


@dataclass
class Settings:
    bootstrap: str
    subscribe: list[str] | None
    pattern: str | None
    assign: list[TopicPartition] | None
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    max_per_trigger: int | None
    min_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    include_headers: bool
    starting_timestamps: dict[str, Any] | None
    starting_timestamp: int | None
    isolation: int = 0          # kafka.isolation.level: 1 read_committed

    @classmethod
    def parse(cls, options: dict[str, Any], streaming: bool) -> "Settings":
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(k for k in opts if k not in READ_OPTIONS and not k.startswith("kafka."))
        if unknown:
            raise OptionError(f"unknown option {unknown[0]!r} for the {NAME} source")
        bootstrap = opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise OptionError("option kafka.bootstrap.servers must be set")
        ways = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(ways) != 1:
            raise OptionError("exactly one of the options subscribe, subscribePattern or assign must be set"
                              + (f" (got {', '.join(ways)})" if ways else ""))
        assign = None
        if "assign" in ways:
            try:
                raw = json.loads(opts["assign"])
                assign = sorted((t, int(p)) for t, parts in raw.items() for p in parts)
            except (ValueError, AttributeError, TypeError):
                raise OptionError(f"option assign: expected JSON like {{\"topic\":[0,1]}}, got {opts['assign']!r}") \
                    from None
        subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()] if "subscribe" in ways else None
        pattern = opts.get("subscribepattern") if "subscribepattern" in ways else None
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option subscribePattern: {exc}") from None

        def offsets(key: str, default: str, allowed: tuple[str, ...]) -> OffsetSpec:
            value: str = opts.get(key, default)
            if value.strip().lower() in allowed:
                return value.strip().lower()
            try:
                parsed = json.loads(value)
                if not isinstance(parsed, dict):
                    raise ValueError
                return canonical(parsed)
            except (ValueError, TypeError, AttributeError):
                raise OptionError(f"option {key}: expected {' or '.join(allowed)} or JSON offsets, got {value!r}") \
                    from None

        starting = offsets("startingoffsets", "latest" if streaming else "earliest", ("earliest", "latest"))
        if "endingoffsets" in opts and streaming:
            raise OptionError("option endingOffsets is for batch queries only")
        ending = offsets("endingoffsets", "latest", ("latest",))
        if not streaming and starting == "latest":
            raise OptionError("option startingOffsets: latest is not allowed for batch queries")
        by_ts = opts.get("startingoffsetsbytimestamp")
        starting_timestamps = None
        if by_ts is not None:
            try:
                starting_timestamps = canonical(json.loads(by_ts))
            except (ValueError, TypeError, AttributeError):
                raise OptionError(f"option startingOffsetsByTimestamp: expected JSON, got {by_ts!r}") from None
        starting_timestamp = None
        if opts.get("startingtimestamp") is not None:
            try:
                starting_timestamp = int(opts["startingtimestamp"])
            except ValueError:
                raise OptionError(f"option startingTimestamp: expected milliseconds, got "
                                  f"{opts['startingtimestamp']!r}") from None
        max_per = _int(opts, "maxoffsetspertrigger")
        min_per = _int(opts, "minoffsetspertrigger")
        if not streaming and (max_per or min_per):
            raise OptionError("options maxOffsetsPerTrigger/minOffsetsPerTrigger are for streaming queries only")
        if max_per and min_per and min_per > max_per:
            raise OptionError("option minOffsetsPerTrigger must not exceed maxOffsetsPerTrigger")
        delay = _duration_ms(opts, "maxtriggerdelay")
        if delay is not None and min_per is None:
            raise OptionError("option maxTriggerDelay needs minOffsetsPerTrigger")
        level = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
        if level not in ISOLATION_LEVELS:
            raise OptionError(f"option kafka.isolation.level: expected read_uncommitted or read_committed, "
                              f"got {opts['kafka.isolation.level']!r}")
        return cls(bootstrap, subscribe, pattern, assign, starting, ending, _bool(opts, "failondataloss", True),
                   max_per, min_per, delay if delay is not None else 15 * 60000, _int(opts, "minpartitions"),
                   _bool(opts, "includeheaders", False), starting_timestamps, starting_timestamp,
                   ISOLATION_LEVELS[level])

    # -- offsets from the cluster

    def topic_partitions(self, client: StrandlineClient) -> list[TopicPartition]:
        if self.assign is not None:
            return list(self.assign)
        if self.pattern is not None:
            topics = client.topics_matching(self.pattern)
        else:
            client.refresh(self.subscribe)
            topics = list(self.subscribe or [])
        return [(t, p) for t in sorted(topics) for p in client.partitions.get(t, [])]

    def resolve(self, client: StrandlineClient, spec: OffsetSpec, tps: list[TopicPartition],
                default: int) -> dict[TopicPartition, int]:
        out = {}
        for tp in tps:
            if spec == "earliest":
                out[tp] = client.list_offset(tp, EARLIEST)
            elif isinstance(spec, str):
                out[tp] = client.list_offset(tp, LATEST)
            else:
                value = spec.get(tp[0], {}).get(str(tp[1]), default)
                out[tp] = client.list_offset(tp, value) if value in (EARLIEST, LATEST) else int(value)
        return out

    def starting_offsets(self, client: StrandlineClient, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self.starting_timestamps is not None or self.starting_timestamp is not None:
            out = {}
            for tp in tps:
                ts = self.starting_timestamp if self.starting_timestamp is not None else \
                    (self.starting_timestamps or {}).get(tp[0], {}).get(str(tp[1]))
                if ts is None:
                    raise OptionError(f"option startingOffsetsByTimestamp has no timestamp for {tp[0]}-{tp[1]}")
                found = client.list_offset(tp, int(ts))
                out[tp] = found if found >= 0 else client.list_offset(tp, LATEST)
            return out
        return self.resolve(client, self.starting, tps, EARLIEST)


def as_offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, Any]:
    raw: dict[str, dict[str, int]] = {}
    for (t, p), o in offsets.items():
        raw.setdefault(t, {})[str(p)] = o
    return canonical(raw)


def from_offsets_json(offsets: dict[str, Any]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


# ------------------------------------------------------------------------------ reading


class RangePartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def split_ranges(ranges: list[tuple[TopicPartition, int, int]], min_partitions: int | None) -> list[RangePartition]:
    """One task per topic-partition range, split in proportion to size (as Kafka's source) so that
    there are at least minPartitions tasks."""
    ranges = [r for r in ranges if r[2] > r[1]]
    total = sum(end - start for _, start, end in ranges)
    out: list[RangePartition] = []
    for (topic, part), start, end in ranges:
        pieces = 1
        if min_partitions and total and len(ranges) < min_partitions:
            pieces = max(1, -(-(end - start) * min_partitions // total))   # ceil: at least minPartitions
        step = -(-(end - start) // pieces)
        for lo in range(start, end, step):
            out.append(RangePartition(topic, part, lo, min(end, lo + step)))
    return out


def read_range(settings: Settings, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Fetch [start, end) of one partition from its leader and yield Arrow batches."""
    client = StrandlineClient(settings.bootstrap, isolation=settings.isolation)
    schema = _arrow_schema(settings.include_headers)
    tp = (part.topic, part.partition)
    offset = part.start
    try:
        while offset < part.end:
            error, hw, log_start, records, aborted = client.fetch(tp, offset)
            if error.name == "offset_out_of_range" or offset < log_start:
                if settings.fail_on_data_loss:
                    raise RuntimeError(
                        f"Cannot fetch records in [{offset}, {min(part.end, log_start)}) of {part.topic}-{part.partition}: "
                        f"they are gone (log start offset {log_start}, high watermark {hw}). Some data may have been "
                        f"lost because they are not available in the broker any more; either the data was aged out "
                        f"by retention or the topic may have been deleted. If you don't want your query to fail in "
                        f"such cases, set the source option \"failOnDataLoss\" to \"false\".")
                if log_start >= part.end or error.name == "offset_out_of_range" and offset >= hw:
                    return
                offset = log_start
                continue
            if error.value != 0:
                raise RuntimeError(f"fetching {part.topic}-{part.partition} at {offset}: {error.name.upper()}")
            if not records:
                if hw <= offset:
                    if settings.fail_on_data_loss:
                        raise RuntimeError(
                            f"Cannot fetch records in [{offset}, {part.end}) of {part.topic}-{part.partition}: the "
                            f"high watermark is {hw}. Some data may have been lost (an unclean leader election?). "
                            f"Set the source option \"failOnDataLoss\" to \"false\" to go on.")
                    return
                time.sleep(0.01)
                continue
            cols = Columns()
            offset = decode_into(records, cols, offset, part.end, settings.include_headers, aborted)
            if cols.offsets:
                n = len(cols.offsets)
                arrays = [pa.array(cols.keys, pa.binary()), pa.array(cols.values, pa.binary()),
                          pa.repeat(pa.scalar(part.topic, pa.string()), n),
                          pa.repeat(pa.scalar(part.partition, pa.int32()), n),
                          pa.array(cols.offsets, pa.int64()),
                          pc.multiply(pa.array(cols.timestamps, pa.int64()), 1000).cast(
                              pa.timestamp("us", tz="UTC")),
                          pa.array(cols.types, pa.int32())]
                if settings.include_headers:
                    arrays.append(pa.array(cols.headers, schema.field("headers").type))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    finally:
        client.close()


class StrandlineBatchReader(DataSourceReader):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def partitions(self) -> list[RangePartition]:
        client = StrandlineClient(self.settings.bootstrap, isolation=self.settings.isolation)
        try:
            tps = self.settings.topic_partitions(client)
            start = self.settings.starting_offsets(client, tps)
            end = self.settings.resolve(client, self.settings.ending, tps, LATEST)
        finally:
            client.close()
        parts = split_ranges([(tp, start[tp], end[tp]) for tp in tps], self.settings.min_partitions)
        return parts or [RangePartition("", -1, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)        # what partitions() made
        if partition.partition < 0:
            return iter(())
        return read_range(self.settings, partition)


class StrandlineStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.target: dict[str, Any] | None = None
        self.held_since: float | None = None

    def _client(self) -> StrandlineClient:
        return StrandlineClient(self.settings.bootstrap, isolation=self.settings.isolation)

    def initialOffset(self) -> dict[str, Any]:
        client = self._client()
        try:
            tps = self.settings.topic_partitions(client)
            return as_offsets_json(self.settings.starting_offsets(client, tps))
        finally:
            client.close()

    def _latest(self) -> dict[TopicPartition, int]:
        client = self._client()
        try:
            tps = self.settings.topic_partitions(client)
            return {tp: client.list_offset(tp, LATEST) for tp in tps}
        finally:
            client.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_per_trigger:
            return ReadMaxRows(self.settings.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = as_offsets_json(self._latest())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_offsets_json(start)
        latest = from_offsets_json(self.target) if self.target is not None else self._latest()
        for tp, offset in list(begin.items()):
            if tp in latest and latest[tp] < offset:
                if self.settings.fail_on_data_loss:
                    raise RuntimeError(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {offset} to {latest[tp]}, "
                                       f"some data may have been missed. Some data may have been lost because they "
                                       f"are not available in the broker any more (an unclean leader election?). If "
                                       f"you don't want your query to fail in such cases, set the source option "
                                       f"\"failOnDataLoss\" to \"false\".")
                begin[tp] = latest[tp]
        for tp in latest:
            begin.setdefault(tp, 0)                      # a partition that appeared: from its start
        backlog = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
        total = sum(backlog.values())
        if self.settings.min_per_trigger and self.target is None and total < self.settings.min_per_trigger:
            now = time.monotonic()
            if self.held_since is None:
                self.held_since = now
            if (now - self.held_since) * 1000 < self.settings.max_trigger_delay_ms:
                return canonical(start)
        self.held_since = None
        max_rows = getattr(limit, "max_rows", None)
        end = dict(latest)
        if max_rows is not None and total > max_rows:
            # as Kafka's rateLimit: each partition gets its share of the backlog
            for tp, n in backlog.items():
                end[tp] = begin[tp] + int(max_rows * n / total)
        return as_offsets_json({tp: max(begin[tp], end[tp]) for tp in latest})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, finish = from_offsets_json(start), from_offsets_json(end)
        ranges = [(tp, begin.get(tp, 0), finish[tp]) for tp in sorted(finish)]
        return split_ranges(ranges, self.settings.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)        # what partitions() made
        return read_range(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass


# ------------------------------------------------------------------------------ the source


class StrandlineDataSource(DataSource):
    """``spark.read.format("strandline")`` and friends; options as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        value = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return read_schema(str(value).lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return StrandlineBatchReader(Settings.parse(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StrandlineStreamReader(Settings.parse(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> StrandlineBatchWriter:
        return StrandlineBatchWriter(writing(dict(self.options), schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StrandlineStreamWriter:
        return StrandlineStreamWriter(writing(dict(self.options), schema, overwrite))


def register(spark: Any) -> None:
    """Register the ``strandline`` source with a SparkSession (not needed when the
    ``pyspark_strandline`` module is importable by Spark's Python workers)."""
    spark.dataSource.register(StrandlineDataSource)
