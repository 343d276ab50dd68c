"""Kafka's text form of a UUID (cluster ids, topic ids): URL-safe base64 of its 16 bytes, no padding."""

from __future__ import annotations

import base64
import uuid


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString()``; ValueError unless ``text`` is 22 base64url characters of 16 bytes."""
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"not a base64 UUID: {text!r}")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"not a base64 UUID: {text!r}")
    return uuid.UUID(bytes=raw)
