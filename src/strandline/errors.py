"""Errors a user can act on."""


class StrandlineError(Exception):
    """An error a user can fix; its message is one clear line."""


class BrokenInvariant(Exception):
    """The broker's own state broke a rule it must always keep (a log whose segments overlap, a
    controller writing without its office): nothing it does next can be trusted, so it stops,
    with one line in its log. Raised by the core; never an answer to bad input.

    Every other exception while a request is handled is a fault of that one request (a malformed
    request the decoder let through, a handler's bug): the request is answered with Kafka's error
    (UNKNOWN_SERVER_ERROR), or its connection is closed, and the broker goes on serving everyone
    else (:meth:`strandline.broker.apis.KafkaApis.handle_request`)."""
