"""A small blocking Kafka protocol client (kio schemas) for the CLI and tests' admin work."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any, Self

from strandline.errors import StrandlineError, Unreachable, UsageError
from strandline.protocol.api import decode_response, encode_request


def parse_addresses(address: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as Kafka's tools take a bootstrap list; a malformed entry is
    a :class:`UsageError` naming it."""
    parsed = []
    for item in (a.strip() for a in address.split(",")):
        host, sep, port = item.rpartition(":")
        if not item or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"bad broker address {item!r} in {address!r}: expected host:port "
                             f"(e.g. 127.0.0.1:9092), a port from 1 to 65535")
        parsed.append((host.strip("[]"), int(port)))
    return parsed


class KafkaConnection:
    def __init__(self, address: str, timeout_s: float = 30.0, client_id: str = "strandline-cli") -> None:
        """Connect to ``address``, ``host:port`` or a comma-separated bootstrap list as Kafka's tools
        take it: the first broker in the list that accepts the connection is used."""
        candidates = parse_addresses(address)
        failures = []
        for host, port in candidates:
            try:
                self.sock = socket.create_connection((host, port), timeout=timeout_s)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            self.address = f"{host}:{port}"
            break
        else:
            if len(candidates) == 1:
                raise Unreachable(f"cannot connect to broker {failures[0]}")
            raise Unreachable(f"cannot connect to any broker of {address!r} ({'; '.join(failures)})")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return decode_response(api_key, version, self.raw_request(api_key, version, body))

    def raw_request(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        """The response frame (without its size), for a response kio cannot read."""
        self.correlation_id += 1
        frame = encode_request(api_key, version, self.correlation_id, self.client_id, body)
        try:
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", self._read(4))[0]
            return self._read(size)
        except ssl.SSLError as exc:          # TLS 1.3: a refused client certificate shows at the first read
            raise StrandlineError(f"broker {self.address} failed: {exc}") from None
        except OSError as exc:
            raise Unreachable(f"broker {self.address} failed: {exc}") from None

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
