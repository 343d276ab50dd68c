"""Kafka error codes: kio's ``ErrorCode`` enum (it knows which errors are retriable)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "code"]


def code(e: ErrorCode | int) -> int:
    """The int16 wire value of an ``ErrorCode`` (or of an int that already is one)."""
    return int(e.value) if isinstance(e, ErrorCode) else int(e)
