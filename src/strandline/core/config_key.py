"""One configuration key (Kafka's ``ConfigDef.ConfigKey``): its type, default, bounds and valid
values, and how a value given as text is parsed and checked. A value that is refused raises
:class:`ConfigError`, whose message is one line naming the key.

The tables of keys are :data:`strandline.core.config.BROKER_KEYS`,
:data:`strandline.core.security_keys.SECURITY_KEYS` and :data:`strandline.core.topic_keys.TOPIC_KEYS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


_Number = TypeVar("_Number", int, float)


class ConfigError(ValueError):
    """A configuration key or value that is refused; the message is one line naming the key."""


def parse_int(key: str, raw: str, lo: float | None, hi: float | None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: not a number") from None
    return _within(key, value, lo, hi)


def _parse_double(key: str, raw: str, lo: float | None, hi: float | None) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: not a number") from None
    if value != value:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: not a number")
    return _within(key, value, lo, hi)


def _within(key: str, value: _Number, lo: float | None, hi: float | None) -> _Number:
    """``value`` if it lies in [lo, hi] (None: no bound), else the ConfigError naming ``key``."""
    if lo is not None and value < lo:
        raise ConfigError(f"Invalid value {value} for configuration {key}: must be at least {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"Invalid value {value} for configuration {key}: must be at most {hi}")
    return value


def _parse_bool(key: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"Invalid value {raw!r} for configuration {key}: expected true or false")


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # "int", "long", "double", "bool", "string", "password", "list", "choice"
    default: Any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""
    validator: Callable[[str, Any, Any], None] | None = None

    def parse(self, raw: Any) -> Any:
        if self.kind in ("int", "long"):
            hi = self.hi if self.hi is not None else (INT_MAX if self.kind == "int" else LONG_MAX)
            return parse_int(self.name, raw, self.lo, hi)
        if self.kind == "bool":
            return _parse_bool(self.name, raw)
        if self.kind == "choice":
            text = str(raw).strip()
            if text not in self.choices:
                raise ConfigError(
                    f"Invalid value {raw!r} for configuration {self.name}: "
                    f"expected one of {', '.join(self.choices)}"
                )
            return text
        if self.kind == "double":
            return _parse_double(self.name, raw, self.lo, self.hi)
        if self.kind == "list":
            items = [part.strip() for part in str(raw).split(",") if part.strip()]
            bad = [item for item in items if self.choices and item not in self.choices]
            if bad:
                raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: "
                                  f"each item must be one of {', '.join(self.choices)}")
            if self.validator is not None:
                self.validator(self.name, raw, items)
            return items
        text = str(raw).strip()
        if self.validator is not None:
            self.validator(self.name, raw, text)
        return text

    @property
    def sensitive(self) -> bool:
        """A password: DescribeConfigs shows no value (Kafka's PASSWORD type)."""
        return self.kind == "password"

    @property
    def type_id(self) -> int:
        """Kafka's DescribeConfigs config type (KIP-569): BOOLEAN 1, STRING 2, INT 3, LONG 5,
        DOUBLE 6, LIST 7, PASSWORD 9."""
        return {"bool": 1, "string": 2, "choice": 2, "int": 3, "long": 5, "double": 6, "list": 7,
                "password": 9}[self.kind]


def key_table(*keys: Key) -> dict[str, Key]:
    """The keys by name."""
    return {k.name: k for k in keys}
