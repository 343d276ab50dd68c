"""A broker config is dynamic only under the key Kafka 2.8 reconfigures: a topic config's broker
key (DynamicLogConfig: LogConfig.TopicConfigSynonyms' values), so ``log.retention.ms`` but not its
``.minutes``/``.hours`` synonyms, ``log.roll.ms`` but not ``log.roll.hours``, and not
``log.message.format.version``: those are refused with Kafka's message, nothing stored (found by
tests/differential: incremental-alter-configs-broker, where Kafka answers INVALID_REQUEST)."""

from __future__ import annotations

import pytest

from strandline.core.config import BrokerConfig
from strandline.core.config_key import ConfigError
from strandline.broker.dynamic_config import validate_broker_update

CONFIG = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/data"})


@pytest.mark.parametrize("key,value", [("log.retention.hours", "1"), ("log.retention.minutes", "5"),
                                       ("log.roll.hours", "2"), ("log.roll.jitter.hours", "1"),
                                       ("log.message.format.version", "2.8")])
def test_synonyms_and_the_message_format_are_not_dynamic(key, value):
    for per_broker in (True, False):
        with pytest.raises(ConfigError, match=f"Cannot update these configs dynamically: {key}"):
            validate_broker_update(CONFIG, {key: value}, per_broker)


@pytest.mark.parametrize("key,value", [("log.retention.ms", "3600000"), ("log.roll.ms", "7200000"),
                                       ("log.cleaner.threads", "2"), ("message.max.bytes", "2000000")])
def test_the_broker_keys_of_topic_configs_are_dynamic(key, value):
    validate_broker_update(CONFIG, {key: value}, True)
