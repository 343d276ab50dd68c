"""A small blocking Kafka protocol client (kio schemas) for the CLI and tests' admin work."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strandline.errors import StrandlineError
from strandline.protocol.api import build


class KafkaConnection:
    def __init__(self, address: str, timeout_s: float = 30.0, client_id: str = "strandline-cli") -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        try:
            self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
        except (OSError, ValueError) as exc:
            raise StrandlineError(f"cannot connect to broker {address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: dict) -> Any:
        req_cls = load_request_schema(api_key, version)
        header_cls = req_cls.__header_schema__
        self.correlation_id += 1
        fields = {"request_api_key": api_key, "request_api_version": version,
                  "correlation_id": self.correlation_id, "client_id": self.client_id}
        header = build(header_cls, fields)
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, header)
        entity_writer(req_cls)(buf, build(req_cls, body))
        data = bytearray(buf.getvalue())
        struct.pack_into(">i", data, 0, len(data) - 4)
        try:
            self.sock.sendall(data)
            size = struct.unpack(">i", self._read(4))[0]
            frame = self._read(size)
        except OSError as exc:
            raise StrandlineError(f"broker {self.address} failed: {exc}") from None
        resp_cls = load_response_schema(api_key, version)
        resp_header, offset = entity_reader(resp_cls.__header_schema__)(frame, 0)
        response, _ = entity_reader(resp_cls)(frame, offset)
        return response

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

    def __enter__(self) -> "KafkaConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
