"""Small helpers the request handlers share: answering a request, reading a duration field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from strandline.core.effects import Effect, Send
from strandline.protocol import api
from strandline.protocol.header import RequestHeader

#: A request as the decoder gives it: an instance of kio's class for the request's API and version
#: (each version is a class of its own, with no common base), whose fields the handler reads by name.
Request = Any
#: What answers one API: ``handler(conn_id, header, request, now_ms)`` -> the effects.
Handler = Callable[[int, RequestHeader, Request, int], list[Effect]]


def response(conn_id: int, header: RequestHeader, body: Any) -> Send:
    """The answer to a request, encoded in the request's API version."""
    return Send(conn_id, [api.encode_response(header, body)])


def duration_ms(value: Any) -> int:
    """A duration field as kio decodes it (a timedelta) or as an int, in milliseconds."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
