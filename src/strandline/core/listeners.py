"""Listeners (Kafka's ``EndPoint``): a name, where it listens, and its security protocol, as
``listeners`` and ``advertised.listeners`` give them (``NAME://host:port``) with
``listener.security.protocol.map`` naming each one's protocol."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from strandline.core.config_key import ConfigError, parse_int

#: Kafka's security protocols, by their id in UpdateMetadata's endpoints
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def check_protocol_map(key: str, raw: str, items: list[str]) -> None:
    for item in items:
        name, sep, protocol = item.partition(":")
        if not sep or not _LISTENER_NAME.match(name.strip()) or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {item!r} is not NAME:PROTOCOL with "
                              f"a protocol among {', '.join(SECURITY_PROTOCOLS)}")


@dataclass(frozen=True)
class Listener:
    """A listener (or advertised listener): its name, where it listens, its security protocol."""

    name: str
    host: str
    port: int
    protocol: str = "PLAINTEXT"

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_listener(key: str, text: str, protocols: Mapping[str, str]) -> Listener:
    """``NAME://host:port`` -> a Listener; its protocol from ``protocols`` (the listener security
    protocol map), which must name it."""
    name, sep, rest = text.partition("://")
    if not sep or ":" not in rest:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: expected NAME://host:port")
    host, _, port = rest.rpartition(":")
    name = name.strip().upper()
    if not _LISTENER_NAME.match(name):
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: {name!r} is not a listener name "
                          f"(letters, digits and _)")
    protocol = protocols.get(name)
    if protocol is None:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: no security protocol defined for "
                          f"listener {name} (listener.security.protocol.map)")
    host = host.strip("[]") or "0.0.0.0"
    return Listener(name, host, parse_int(key, port, 0, 65535), protocol)


def protocol_map(items: list[str]) -> dict[str, str]:
    """``listener.security.protocol.map``'s items -> {listener name: protocol}."""
    result: dict[str, str] = {}
    for item in items:
        name, _, protocol = item.partition(":")
        result[name.strip().upper()] = protocol.strip().upper()
    return result


def check_unique(key: str, listeners: list[Listener], ports: bool) -> None:
    """Each listener of ``key`` has its own name and, with ``ports``, its own port (0 aside)."""
    names = [l.name for l in listeners]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"Invalid value for configuration {key}: each listener must have a different name, "
                          f"{dup[0]} is listed twice")
    if ports:
        taken = [l.port for l in listeners if l.port]
        dup_ports = sorted({p for p in taken if taken.count(p) > 1})
        if dup_ports:
            raise ConfigError(f"Invalid value for configuration {key}: each listener must have a different port, "
                              f"{dup_ports[0]} is listed twice")
