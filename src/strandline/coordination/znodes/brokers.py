"""The broker znodes: ``/brokers/ids/<id>`` (a broker's registration, ``BrokerInfo``),
``/brokers/ids`` and ``/brokers/seqid``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, json_bytes as _json,
    json_int as _int, json_object as _object)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What a broker registration says about the broker (``/brokers/ids/<id>``)."""

    id: int
    host: str
    port: int
    rack: str | None = None
    #: Every endpoint it registered: (listener name, host, port, security protocol). Empty: only
    #: ``host``/``port`` (a PLAINTEXT listener) are known.
    endpoints: tuple[tuple[str, str, int, str], ...] = ()
    #: with eligible leader replicas (KIP-966): whether the broker's log dirs held the
    #: clean-shutdown marker when it started (False: it may have lost what it had not flushed);
    #: None when the registration does not say
    clean_shutdown: bool | None = None
    #: the broker epoch (czxid) of the registration whose unclean shutdown a controller handled
    unclean_shutdown_handled: int | None = None

    @staticmethod
    def of(broker_id: int, endpoints: Iterable[tuple[str, str, int, str]], rack: str | None = None) -> "BrokerInfo":
        """A broker with these endpoints; ``host``/``port`` are its PLAINTEXT listener's (else the
        first one's). One PLAINTEXT endpoint alone is kept as ``host``/``port`` only."""
        eps = tuple(endpoints)
        if not eps:
            return BrokerInfo(broker_id, "", -1, rack)
        plain = [e for e in eps if e[3] == "PLAINTEXT"]
        _, host, port, _ = (plain or eps)[0]
        if len(eps) == 1 and eps[0][0] == "PLAINTEXT" and eps[0][3] == "PLAINTEXT":
            eps = ()
        return BrokerInfo(broker_id, host, port, rack, eps)

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """Where the broker listens for listener ``listener``: None when it has no such listener;
        ``host``/``port`` when no listener is named (or it registered only a PLAINTEXT one)."""
        if listener is None:
            return self.host, self.port
        if not self.endpoints:
            return (self.host, self.port) if listener == "PLAINTEXT" else None
        for name, host, port, _ in self.endpoints:
            if name == listener:
                return host, port
        return None


class BrokerIdsZNode(_FixedPathZNode):
    """``/brokers/ids``: one ephemeral child per live broker; the controller watches its children."""

    PATH = "/brokers/ids"


def _split_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``"PLAINTEXT://host:9092"`` (or ``[::1]:9092``) -> (listener, host, port)."""
    listener, sep, rest = endpoint.partition("://")
    if not sep:
        raise ValueError(f"bad endpoint {endpoint!r}")
    host, _, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return listener, host, int(port)


def _endpoint(host: str, port: int, listener: str = "PLAINTEXT") -> str:
    return f"{listener}://[{host}]:{port}" if ":" in host else f"{listener}://{host}:{port}"


class BrokerIdZNode:
    """``/brokers/ids/<id>``: the broker's ephemeral registration, JSON version 4 (Kafka 0.10.0 - 2.6),
    one endpoint per advertised listener.

    ``{"version":4,"host":"h","port":9092,"jmx_port":-1,"timestamp":"<ms>","endpoints":["PLAINTEXT://h:9092"],
    "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"rack":"r"}``. Like Kafka, ``rack`` is
    left out when the broker has none; ``decode`` accepts it absent or null. The broker id is the
    znode's name, not part of its data: pass it to ``decode``. The broker epoch (KIP-380) is the
    znode's czxid.

    A broker adds ``"clean_shutdown":true|false`` (KIP-966): Kafka's KRaft broker sends its
    previous broker epoch, kept in its clean-shutdown file, in its registration (-1 after an
    unclean shutdown), and the controller takes a broker back from an unclean shutdown out of the
    ISRs (and ELRs); having done so it adds ``"unclean_shutdown_handled":<broker epoch>``
    (:mod:`strandline.controller.unclean_shutdown`). A reader that does not know the fields ignores
    them.
    """

    VERSION = 4

    @staticmethod
    def path(broker_id: int | str) -> str:
        return f"{BrokerIdsZNode.path()}/{broker_id}"

    @staticmethod
    def encode(broker_id: int, host: str, port: int, rack: str | None, timestamp_ms: int,
               jmx_port: int = -1, endpoints: Iterable[tuple[str, str, int, str]] | None = None,
               clean_shutdown: bool | None = None) -> bytes:
        """``endpoints``: (listener, host, port, protocol) of every advertised listener; without
        them one PLAINTEXT listener at ``host:port``. As Kafka, the top-level ``host``/``port`` are
        the PLAINTEXT endpoint's (null and -1 without one)."""
        eps = list(endpoints) if endpoints is not None else [("PLAINTEXT", host, port, "PLAINTEXT")]
        plain = next(((h, p) for _, h, p, proto in eps if proto == "PLAINTEXT"), (None, -1))
        obj: dict[str, Any] = {"version": BrokerIdZNode.VERSION, "host": plain[0], "port": plain[1],
                               "jmx_port": jmx_port, "timestamp": str(timestamp_ms),
                               "endpoints": [_endpoint(h, p, name) for name, h, p, _ in eps],
                               "listener_security_protocol_map": {name: proto for name, _, _, proto in eps}}
        if rack is not None:
            obj["rack"] = rack
        if clean_shutdown is not None:
            obj["clean_shutdown"] = bool(clean_shutdown)
        return _json(obj)

    @staticmethod
    def decode(data: bytes | None, broker_id: int | None = None) -> BrokerInfo:
        """``broker_id`` is the znode's name (``int(child)``); without it the result's ``id`` is -1."""
        path = BrokerIdZNode.path(broker_id) if broker_id is not None else BrokerIdZNode.path("<id>")

        def parse(obj: Any) -> BrokerInfo:
            obj = _object(obj)
            version = _int(obj["version"])
            if version < 1:
                raise ValueError(f"unsupported registration version {version}")
            host, port = obj.get("host"), obj.get("port")
            registered: tuple[tuple[str, str, int, str], ...] = ()
            if version >= 2 and obj.get("endpoints"):
                protocols = obj.get("listener_security_protocol_map") or {}
                endpoints = [_split_endpoint(e) for e in obj["endpoints"]]
                registered = tuple((name, h, p, str(protocols.get(name, name))) for name, h, p in endpoints)
                host, port = BrokerInfo.of(-1, registered).host, BrokerInfo.of(-1, registered).port
                registered = BrokerInfo.of(-1, registered).endpoints
            if not isinstance(host, str) or not host:
                raise ValueError("no host")
            rack = obj.get("rack")
            if rack is not None and not isinstance(rack, str):
                raise TypeError(f"rack must be a string or null, got {rack!r}")
            clean, handled = obj.get("clean_shutdown"), obj.get("unclean_shutdown_handled")
            return BrokerInfo(broker_id if broker_id is not None else -1, host, _int(port), rack, registered,
                              clean if isinstance(clean, bool) else None,
                              handled if isinstance(handled, int) and not isinstance(handled, bool) else None)

        return _decode(path, data, parse)


class BrokerSequenceIdZNode(_FixedPathZNode):
    """``/brokers/seqid``: Kafka's broker-id generator (created at startup, otherwise unused here)."""

    PATH = "/brokers/seqid"
