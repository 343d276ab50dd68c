"""Group configs (Kafka 4.x's GroupConfig; KIP-848, KIP-932): IncrementalAlterConfigs and
DescribeConfigs on GROUP resources, kept at /config/groups/<group> and applied by every broker
through /config/changes; their checks; a share group's ``share.auto.offset.reset`` and
``share.record.lock.duration.ms`` on the share-partition leader; a consumer group's session
timeout and heartbeat interval on its coordinator."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination.store import Create, GetData
from strandline.core.config_key import ConfigError
from strandline.core.group_keys import OffsetReset, parse_group_configs, parse_offset_reset
from tests.unit.batches import make_batch
from tests.unit.broker.test_admin_configs import DELETE, SET, alter, describe, notify
from tests.unit.broker.test_broker_core import Harness
from tests.unit.broker.test_share_group_apis import GROUP, acquired, harness, join, share_fetch

GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5


# -- the keys ---------------------------------------------------------------------------------------


def test_share_auto_offset_reset_takes_latest_earliest_and_an_iso_8601_duration():
    assert parse_offset_reset("k", "latest") == OffsetReset("latest")
    assert parse_offset_reset("k", "EARLIEST") == OffsetReset("earliest")
    assert parse_offset_reset("k", "by_duration:PT1H30M") == OffsetReset("by_duration", 5_400_000)
    assert parse_offset_reset("k", "by_duration:P1DT0.5S") == OffsetReset("by_duration", 86_400_500)
    for bad in ("newest", "by_duration:", "by_duration:PT", "by_duration:1h", "by_duration:-PT1H"):
        with pytest.raises(ConfigError, match="share.auto.offset.reset|k"):
            parse_offset_reset("k", bad)


def test_group_configs_are_checked_as_kafkas_group_config_checks_them():
    broker = Harness().config.values
    assert parse_group_configs({"share.record.lock.duration.ms": "20000"}, broker) == \
        {"share.record.lock.duration.ms": 20000}
    with pytest.raises(ConfigError, match="Unknown group config name: retention.ms"):
        parse_group_configs({"retention.ms": "1"}, broker)
    with pytest.raises(ConfigError, match="share.record.lock.duration.ms must be greater than or equal to "
                                          "group.share.min.record.lock.duration.ms"):
        parse_group_configs({"share.record.lock.duration.ms": "5000"}, broker)
    with pytest.raises(ConfigError, match="consumer.session.timeout.ms must be less than or equal to "
                                          "group.consumer.max.session.timeout.ms"):
        parse_group_configs({"consumer.session.timeout.ms": "90000"}, broker)
    with pytest.raises(ConfigError, match="Invalid value 'x'"):
        parse_group_configs({"share.heartbeat.interval.ms": "x"}, broker)


# -- the wire and ZooKeeper -------------------------------------------------------------------------


def test_a_group_config_is_stored_in_zookeeper_described_with_its_source_and_applied_by_the_broker():
    h = harness()
    result = alter(h, GROUP_RESOURCE, GROUP, [("share.auto.offset.reset", SET, "earliest"),
                                              ("share.record.lock.duration.ms", SET, "20000")])
    assert result.error_code == ErrorCode.none, result
    [entity] = h.zk.execute([GetData(f"/config/groups/{GROUP}")])
    assert json.loads(entity.data) == {"version": 1, "config": {"share.auto.offset.reset": "earliest",
                                                                "share.record.lock.duration.ms": "20000"}}
    configs = describe(h, GROUP_RESOURCE, GROUP)
    assert (configs["share.auto.offset.reset"].value, configs["share.auto.offset.reset"].config_source) == \
        ("earliest", GROUP_CONFIG_SOURCE)
    lock = configs["share.record.lock.duration.ms"]
    assert (lock.value, lock.config_source) == ("20000", GROUP_CONFIG_SOURCE)
    assert [(s.name, s.value) for s in lock.synonyms] == [("share.record.lock.duration.ms", "20000"),
                                                          ("group.share.record.lock.duration.ms", "15000"),
                                                          ("group.share.record.lock.duration.ms", "30000")]
    session = configs["share.session.timeout.ms"]
    assert (session.value, session.config_source) == ("45000", DEFAULT_CONFIG)
    # the broker applies it only when told of it (/config/changes)
    assert h.broker.group_configs.value(GROUP, "share.auto.offset.reset") == "latest"
    notify(h)
    assert h.broker.group_configs.value(GROUP, "share.auto.offset.reset") == "earliest"
    assert h.broker.group_configs.value(GROUP, "share.record.lock.duration.ms") == 20000
    assert h.broker.group_configs.value("another", "share.record.lock.duration.ms") == 15000
    # deleting the override returns the group to the broker's value
    assert alter(h, GROUP_RESOURCE, GROUP, [("share.record.lock.duration.ms", DELETE, None)]).error_code == \
        ErrorCode.none
    notify(h)
    assert h.broker.group_configs.value(GROUP, "share.record.lock.duration.ms") == 15000


def test_bad_group_configs_get_kafkas_errors_and_change_nothing():
    h = harness()
    unknown = alter(h, GROUP_RESOURCE, GROUP, [("retention.ms", SET, "1")])
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.invalid_config,
                                                           "Unknown group config name: retention.ms")
    low = alter(h, GROUP_RESOURCE, GROUP, [("share.session.timeout.ms", SET, "1000")])
    assert low.error_code == ErrorCode.invalid_config and "group.share.min.session.timeout.ms" in low.error_message
    bad = alter(h, GROUP_RESOURCE, GROUP, [("share.auto.offset.reset", SET, "newest")])
    assert bad.error_code == ErrorCode.invalid_config
    default = alter(h, GROUP_RESOURCE, "", [("share.auto.offset.reset", SET, "earliest")])
    assert (default.error_code, default.error_message) == (ErrorCode.invalid_request,
                                                           "Default group resources are not allowed.")
    [entity] = h.zk.execute([GetData(f"/config/groups/{GROUP}")])
    assert entity.data is None or json.loads(entity.data)["config"] == {}


def test_a_broker_starting_reads_every_groups_config():
    h = harness()
    h.zk.execute([Create("/config/groups/g%2F1", json.dumps(
        {"version": 1, "config": {"share.auto.offset.reset": "by_duration:PT1H"}}).encode())])
    h.run(h.broker.load_entity_configs(h.now))
    assert h.broker.group_configs.offset_reset("g/1") == OffsetReset("by_duration", 3_600_000)
    assert h.broker.group_configs.offset_reset(GROUP) == OffsetReset("latest")


# -- what the configs change ------------------------------------------------------------------------


def _records_before_the_group(h: Harness) -> None:
    h.produce("t", make_batch([b"v%d" % i for i in range(5)]))
    h.response(0, 7)


def test_share_auto_offset_reset_latest_skips_what_was_written_before_the_group_and_earliest_reads_it():
    latest = harness()
    _records_before_the_group(latest)
    join(latest, "m")
    share_fetch(latest, "m", 0)
    assert acquired(share_fetch(latest, "m", 1)) == []            # the default: from the high watermark

    earliest = harness()
    _records_before_the_group(earliest)
    assert alter(earliest, GROUP_RESOURCE, GROUP, [("share.auto.offset.reset", SET, "earliest")]).error_code == \
        ErrorCode.none
    notify(earliest)
    join(earliest, "m")
    share_fetch(earliest, "m", 0)
    got = share_fetch(earliest, "m", 1)
    assert acquired(got) == [(0, 4, 1)]
    assert got.acquisition_lock_timeout.total_seconds() == 15


def test_share_auto_offset_reset_by_duration_starts_at_the_first_record_written_within_it():
    h = harness()
    h.produce("t", make_batch([b"old"], timestamp_ms=h.now - 7_200_000))       # two hours ago
    h.response(0, 7)
    h.produce("t", make_batch([b"new1", b"new2"], timestamp_ms=h.now - 60_000))  # a minute ago
    h.response(0, 7)
    assert alter(h, GROUP_RESOURCE, GROUP, [("share.auto.offset.reset", SET, "by_duration:PT1H")]).error_code == \
        ErrorCode.none
    notify(h)
    join(h, "m")
    share_fetch(h, "m", 0)
    assert acquired(share_fetch(h, "m", 1)) == [(1, 2, 1)]


def test_a_groups_record_lock_duration_is_what_its_members_are_told_and_what_their_locks_last():
    h = harness()
    assert alter(h, GROUP_RESOURCE, GROUP, [("share.record.lock.duration.ms", SET, "20000")]).error_code == \
        ErrorCode.none
    notify(h)
    join(h, "a")
    join(h, "b")
    share_fetch(h, "a", 0)
    share_fetch(h, "b", 0)
    h.produce("t", make_batch([b"x"]))
    h.response(0, 7)
    got = share_fetch(h, "a", 1)
    assert acquired(got) == [(0, 0, 1)] and got.acquisition_lock_timeout.total_seconds() == 20
    h.tick(15_000)                                     # the broker's 15 s have passed: still locked
    assert acquired(share_fetch(h, "b", 1)) == []
    h.tick(5_000)
    assert acquired(share_fetch(h, "b", 2)) == [(0, 0, 2)]


def test_a_consumer_groups_own_session_timeout_and_heartbeat_interval_reach_its_members():
    h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
                   "group.consumer.min.session.timeout.ms": "10000"})
    h.create("t")
    h.call(10, 3, {"key": "cg", "key_type": 0})
    h.call(10, 3, {"key": "cg", "key_type": 0})
    assert alter(h, GROUP_RESOURCE, "cg", [("consumer.session.timeout.ms", SET, "10000"),
                                           ("consumer.heartbeat.interval.ms", SET, "6000")]).error_code == \
        ErrorCode.none
    notify(h)
    beat = h.call(68, 1, {"group_id": "cg", "member_id": "m1", "member_epoch": 0, "instance_id": None,
                          "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
                          "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []})
    assert beat.error_code == ErrorCode.none and beat.heartbeat_interval.total_seconds() == 6
    h.tick(9_999)
    assert "m1" in h.broker.consumer_groups.core.groups["cg"].members
    h.tick(2)                                              # 10 s without a heartbeat: fenced
    assert "m1" not in h.broker.consumer_groups.core.groups["cg"].members
