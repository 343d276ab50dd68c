"""The `strandline` Spark source's options, offsets and rate limits, without Spark or brokers."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from strandline.spark.source import (OptionError, Settings, StrandlineStreamReader, canonical, split_ranges)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.mark.parametrize("options,named", [
    ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
    ({**BASE, "assign": '{"t":[0]}'}, "subscribe"),
    ({**BASE, "typo": "1"}, "typo"),
    ({**BASE, "startingOffsets": "{bad"}, "startingoffsets"),
    ({**BASE, "maxOffsetsPerTrigger": "-5"}, "maxoffsetspertrigger"),
    ({**BASE, "maxTriggerDelay": "5m"}, "maxTriggerDelay"),
    ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger"),
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
])
def test_bad_options_are_refused_naming_the_option(options, named):
    with pytest.raises(OptionError, match=named):
        Settings.parse(options, streaming=True)


def test_batch_only_and_stream_only_options():
    with pytest.raises(OptionError, match="endingOffsets"):
        Settings.parse({**BASE, "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="latest is not allowed"):
        Settings.parse({**BASE, "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match="streaming queries only"):
        Settings.parse({**BASE, "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_offsets_are_canonical_json():
    assert json.dumps(canonical({"b": {"10": 1, "2": 3}, "a": {"0": 5}})) == '{"a": {"0": 5}, "b": {"2": 3, "10": 1}}'


def test_min_partitions_splits_ranges_in_proportion_and_reaches_the_minimum():
    parts = split_ranges([(("t", 0), 0, 900), (("t", 1), 0, 100), (("t", 2), 5, 5)], 6)
    assert len(parts) >= 6 and not [p for p in parts if p.partition == 2]
    assert sum(p.end - p.start for p in parts if p.partition == 0) == 900
    assert sorted((p.start, p.end) for p in parts if p.partition == 1) == [(0, 100)]


class Reader(StrandlineStreamReader):
    def __init__(self, options: dict, latest: dict) -> None:
        super().__init__(Settings.parse({**BASE, **options}, streaming=True))
        self.latest = latest

    def _latest(self):
        return dict(self.latest)


def test_max_offsets_per_trigger_shares_the_limit_by_backlog_like_kafka():
    r = Reader({"maxOffsetsPerTrigger": "100"}, {("t", 0): 300, ("t", 1): 100})
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    end = r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(100))
    assert end == {"t": {"0": 75, "1": 25}}
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"t": {"0": 300, "1": 100}}


def test_min_offsets_per_trigger_holds_until_enough_or_the_delay(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("strandline.spark.source.time.monotonic", lambda: clock[0])
    r = Reader({"minOffsetsPerTrigger": "50", "maxTriggerDelay": "30s"}, {("t", 0): 10})
    start = {"t": {"0": 0}}
    assert r.latestOffset(start, ReadAllAvailable()) == start          # 10 < 50: wait
    clock[0] += 29
    assert r.latestOffset(start, ReadAllAvailable()) == start
    clock[0] += 2                                                      # the delay is over
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 10}}
    r.latest = {("t", 0): 80}
    assert r.latestOffset({"t": {"0": 10}}, ReadAllAvailable()) == {"t": {"0": 80}}   # enough at once


def test_available_now_never_reads_past_the_offsets_it_started_with():
    r = Reader({}, {("t", 0): 40})
    r.prepareForTriggerAvailableNow()
    r.latest = {("t", 0): 90}
    assert r.latestOffset({"t": {"0": 0}}, ReadAllAvailable()) == {"t": {"0": 40}}


def test_offsets_that_went_backwards_fail_unless_failondataloss_is_false():
    r = Reader({}, {("t", 0): 11})
    with pytest.raises(RuntimeError, match="offset was changed from 21 to 11"):
        r.latestOffset({"t": {"0": 21}}, ReadAllAvailable())
    r = Reader({"failOnDataLoss": "false"}, {("t", 0): 11})
    assert r.latestOffset({"t": {"0": 21}}, ReadAllAvailable()) == {"t": {"0": 11}}
