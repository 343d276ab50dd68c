"""The BROKER_LOGGER config resource (type 8): DescribeConfigs lists a broker's loggers with their
levels, IncrementalAlterConfigs SET/DELETE changes them live (an effect the shell carries out)."""

from __future__ import annotations

import logging

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.effects import SetLoggerLevel
from strandline.broker.loggers import DYNAMIC_BROKER_LOGGER_CONFIG
from strandline.runtime.loggers import current_loggers, register_level_names, set_logger_level
from tests.unit.broker.test_broker_core import Harness

BROKER_LOGGER = 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class LoggerHarness(Harness):
    """A broker whose shell reports these loggers; the SetLoggerLevel effects it gets are kept."""

    def __init__(self):
        self.changes: list[SetLoggerLevel] = []
        super().__init__()

    def run(self, effects):
        effects = list(effects)
        self.changes += [e for e in effects if isinstance(e, SetLoggerLevel)]
        super().run([e for e in effects if not isinstance(e, SetLoggerLevel)])


def describe(h: Harness, name: str = "1", keys=None, version: int = 4):
    body = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False}
    return h.call(32, version, body).results[0]


def alter(h: Harness, ops, name: str = "1", validate_only: bool = False):
    body = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": name, "configs": [
        {"name": n, "config_operation": op, "value": v} for op, n, v in ops]}], "validate_only": validate_only}
    return h.call(44, 1, body).responses[0]


def levels(result) -> dict[str, str]:
    return {c.name: c.value for c in result.configs}


def test_describe_lists_the_root_logger_first_and_every_logger_with_its_level():
    result = describe(Harness())
    assert result.error_code == ErrorCode.none
    assert result.configs[0].name == "root"
    assert levels(result) == {"root": "INFO", "kazoo": "WARN", "strandline": "INFO", "strandline.broker": "INFO",
                              "strandline.zookeeper": "INFO"}
    assert {(c.config_source, c.read_only, c.is_sensitive) for c in result.configs} == {
        (DYNAMIC_BROKER_LOGGER_CONFIG, False, False)}


def test_describe_only_the_named_loggers():
    assert levels(describe(Harness(), keys=["kazoo", "no.such"])) == {"kazoo": "WARN"}


@pytest.mark.parametrize("name,message", [
    ("", "Broker id must not be empty"),
    ("x", "Broker id must be an integer, but it is: x"),
    ("2", "Unexpected broker id, expected 1 but received 2"),
])
def test_describe_of_another_broker_or_no_broker_is_invalid_request(name, message):
    result = describe(Harness(), name)
    assert (result.error_code, result.error_message) == (ErrorCode.invalid_request, message)


def test_set_changes_the_level_live_and_children_follow_it():
    h = LoggerHarness()
    assert alter(h, [(SET, "strandline", "DEBUG")]).error_code == ErrorCode.none
    assert h.changes == [SetLoggerLevel("strandline", "DEBUG")]
    assert levels(describe(h))["strandline.broker"] == "DEBUG"
    assert alter(h, [(DELETE, "strandline", None)]).error_code == ErrorCode.none
    assert h.changes[-1] == SetLoggerLevel("strandline", None)
    assert levels(describe(h))["strandline"] == "INFO"
    assert any("Updating the log level of strandline to DEBUG" in log.message for log in h.logs)


def test_validate_only_changes_nothing():
    h = LoggerHarness()
    assert alter(h, [(SET, "root", "TRACE")], validate_only=True).error_code == ErrorCode.none
    assert h.changes == [] and levels(describe(h))["root"] == "INFO"


@pytest.mark.parametrize("ops,code,message", [
    ([(SET, "kazoo", "VERBOSE")], ErrorCode.invalid_config,
     "Cannot set the log level of kazoo to VERBOSE as it is not a supported log level. "
     "Valid log levels are FATAL, ERROR, WARN, INFO, DEBUG, TRACE"),
    ([(SET, "no.such.logger", "INFO")], ErrorCode.invalid_config, "Logger no.such.logger does not exist!"),
    ([(DELETE, "root", None)], ErrorCode.invalid_request, "Removing the log level of the root logger is not allowed"),
    ([(APPEND, "kazoo", "INFO")], ErrorCode.invalid_request,
     "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    ([(SUBTRACT, "kazoo", "INFO")], ErrorCode.invalid_request,
     "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
    ([(SET, "kazoo", "INFO"), (SET, "root", "NOPE")], ErrorCode.invalid_config,
     "Cannot set the log level of root to NOPE as it is not a supported log level. "
     "Valid log levels are FATAL, ERROR, WARN, INFO, DEBUG, TRACE"),
])
def test_refused_operations_change_nothing(ops, code, message):
    h = LoggerHarness()
    result = alter(h, ops)
    assert (result.error_code, result.error_message) == (code, message)
    assert h.changes == [] and levels(describe(h))["kazoo"] == "WARN"


def test_altering_another_brokers_loggers_is_invalid_request():
    h = LoggerHarness()
    result = alter(h, [(SET, "root", "DEBUG")], name="2")
    assert (result.error_code, result.error_message) == (
        ErrorCode.invalid_request, "Unexpected broker id, expected 1, but received 2")
    assert h.changes == []


def test_alter_configs_does_not_take_broker_loggers():
    body = {"resources": [{"resource_type": BROKER_LOGGER, "resource_name": "1",
                           "configs": [{"name": "root", "value": "DEBUG"}]}], "validate_only": False}
    result = Harness().call(33, 2, body).responses[0]
    assert result.error_code == ErrorCode.invalid_request


def test_the_shell_reports_its_loggers_and_applies_a_change():
    register_level_names()
    name = "strandline.test_broker_loggers"
    logger = logging.getLogger(name)
    try:
        assert current_loggers()[name] is None
        set_logger_level(SetLoggerLevel(name, "TRACE"))
        assert logger.level == 5 and current_loggers()[name] == "TRACE" and logger.isEnabledFor(5)
        set_logger_level(SetLoggerLevel(name, None))
        assert logger.level == logging.NOTSET
    finally:
        logger.setLevel(logging.NOTSET)
