"""Errors a user can act on; the broker's broken invariants; one line describing an exception."""

from __future__ import annotations

import traceback


class StrandlineError(Exception):
    """An error a user can fix; its message is one clear line. A `strandline` command ended by it
    exits with its ``exit_status``: the same status for the same kind of error, whatever the
    command (the table is in docs/operations.md)."""

    exit_status = 2


class UsageError(StrandlineError):
    """A malformed option, value, address or file: nothing was asked of the cluster."""

    exit_status = 2


class Refused(StrandlineError):
    """The cluster answered with an error (Kafka's error code names it)."""

    exit_status = 1


class Unreachable(StrandlineError):
    """No broker of the given addresses answered (nothing listens there, or it timed out)."""

    exit_status = 3


class NotFound(StrandlineError):
    """What the command names (a topic, a partition, a group, a broker) does not exist."""

    exit_status = 4


class BrokenInvariant(Exception):
    """The broker's own state broke a rule it must always keep (a log whose segments overlap, a
    controller writing without its office): nothing it does next can be trusted, so it stops,
    with one line in its log. Raised by the core; never an answer to bad input.

    Every other exception while a request is handled is a fault of that one request (a malformed
    request the decoder let through, a handler's bug): the request is answered with Kafka's error
    (UNKNOWN_SERVER_ERROR), or its connection is closed, and the broker goes on serving everyone
    else (:meth:`strandline.broker.apis.KafkaApis.handle_request`)."""


def describe_exception(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` of where ``exc`` was raised: one line."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name})" \
        if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
