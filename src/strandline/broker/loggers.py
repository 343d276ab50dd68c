"""The BROKER_LOGGER config resource (KIP-412): this broker's loggers and their levels.

The core keeps the table (logger name -> its own level, or None when it inherits one); the shell
hands it the loggers that exist when the broker starts and carries out every change as a
:class:`~strandline.core.effects.SetLoggerLevel` effect on its Python loggers (the simulator, whose brokers share one
process, leaves them alone). As in Kafka the levels are not persisted: a restart starts from the
configured ones. Levels use log4j's names; ``root`` is the root logger.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine, SetLoggerLevel

ROOT_LOGGER = "root"
LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
#: Python's numeric level of each log4j level (TRACE is registered by the shell under that name)
PYTHON_LEVELS = {"FATAL": 50, "ERROR": 40, "WARN": 30, "INFO": 20, "DEBUG": 10, "TRACE": 5}
DYNAMIC_BROKER_LOGGER_CONFIG = 6        # DescribeConfigs config_source
#: the loggers of a broker whose shell reports none (the simulator, unit tests)
DEFAULT_LOGGERS: dict[str, str | None] = {ROOT_LOGGER: "INFO", "kazoo": "WARN", "strandline": None,
                                          "strandline.broker": None, "strandline.zookeeper": None}


def level_name(python_level: int) -> str | None:
    """The log4j name of a Python level; None for NOTSET (inherits)."""
    if python_level <= 0:
        return None
    for name in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR"):
        if python_level <= PYTHON_LEVELS[name]:
            return name
    return "FATAL"


class LoggerRefused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class BrokerLoggers:
    def __init__(self, levels: dict[str, str | None] | None = None) -> None:
        self.levels: dict[str, str | None] = dict(DEFAULT_LOGGERS if levels is None else levels)
        self.levels.setdefault(ROOT_LOGGER, "INFO")

    def effective(self, name: str) -> str:
        """The level ``name`` logs at: its own, else its nearest ancestor's, else the root's."""
        while name:
            level = self.levels.get(name)
            if level is not None:
                return level
            name = name.rpartition(".")[0]
        return self.levels[ROOT_LOGGER] or "INFO"

    def describe(self, keys: Any) -> list[dict[str, Any]]:
        names = sorted(self.levels, key=lambda n: (n != ROOT_LOGGER, n))
        if keys:
            names = [n for n in names if n in set(keys)]
        return [{"name": n, "value": self.effective(n), "read_only": False,
                 "config_source": DYNAMIC_BROKER_LOGGER_CONFIG, "is_default": False, "is_sensitive": False,
                 "synonyms": [], "config_type": 0, "documentation": None} for n in names]

    def validate(self, ops: list[tuple[int, str, str | None]]) -> None:
        """Kafka's checks of (operation, logger, level) in order; raises :class:`LoggerRefused`."""
        for op, name, level in ops:
            if op == 0:                                   # SET
                self._exists(name)
                if level not in LEVELS:
                    raise LoggerRefused(ErrorCode.invalid_config,
                                        f"Cannot set the log level of {name} to {level} as it is not a supported "
                                        f"log level. Valid log levels are {', '.join(LEVELS)}")
            elif op == 1:                                 # DELETE
                self._exists(name)
                if name == ROOT_LOGGER:
                    raise LoggerRefused(ErrorCode.invalid_request,
                                        f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
            elif op in (2, 3):
                verb = "APPEND" if op == 2 else "SUBTRACT"
                raise LoggerRefused(ErrorCode.invalid_request,
                                    f"{verb} operation is not allowed for the BROKER_LOGGER resource")
            else:
                raise LoggerRefused(ErrorCode.invalid_request, f"Unknown config operation {op} for config key: {name}")

    def _exists(self, name: str) -> None:
        if name not in self.levels:
            raise LoggerRefused(ErrorCode.invalid_config, f"Logger {name} does not exist!")

    def apply(self, ops: list[tuple[int, str, str | None]]) -> list[Effect]:
        """Carry out validated operations: the new table, and the effects for the shell."""
        effects: list[Effect] = []
        for op, name, level in ops:
            if op == 0:
                self.levels[name] = level
                effects += [LogLine("info", f"Updating the log level of {name} to {level}"), SetLoggerLevel(name, level)]
            else:
                self.levels[name] = None
                effects += [LogLine("info", f"Unset the log level of {name}"), SetLoggerLevel(name, None)]
        return effects
