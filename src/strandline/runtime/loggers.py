"""This process's Python loggers as the BROKER_LOGGER config resource sees them (the shell's side
of :mod:`strandline.broker.loggers`): the table the core starts from, and its changes applied."""

from __future__ import annotations

import logging

from strandline.broker.effects import SetLoggerLevel
from strandline.broker.loggers import PYTHON_LEVELS, ROOT_LOGGER, level_name


def register_level_names() -> None:
    """log4j's level names in log lines (WARN, FATAL, and TRACE below DEBUG)."""
    logging.addLevelName(PYTHON_LEVELS["TRACE"], "TRACE")
    logging.addLevelName(logging.WARNING, "WARN")
    logging.addLevelName(logging.CRITICAL, "FATAL")


def current_loggers() -> dict[str, str | None]:
    """Every logger of this process with its own level (None: inherits), the root as ``root``."""
    table: dict[str, str | None] = {ROOT_LOGGER: level_name(logging.getLogger().level) or "INFO"}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            table[name] = level_name(logger.level)
    return table


def set_logger_level(effect: SetLoggerLevel) -> None:
    logger = logging.getLogger() if effect.logger == ROOT_LOGGER else logging.getLogger(effect.logger)
    logger.setLevel(logging.NOTSET if effect.level is None else PYTHON_LEVELS[effect.level])
