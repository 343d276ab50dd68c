"""A broker's error code as the one line a `strandline` command ends with, and its exit status:
what the command names does not exist (NotFound, 4), or the cluster refused (Refused, 1)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.errors import NotFound, Refused, StrandlineError

#: the codes that say the topic, partition, group, transaction or resource named does not exist
NOT_FOUND = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id, ErrorCode.group_id_not_found,
                       ErrorCode.resource_not_found, ErrorCode.transactional_id_not_found})


def error_code(code: ErrorCode | int) -> ErrorCode:
    """A response's error code, as kio reads it (an ErrorCode) or as a number (a frame read by hand)."""
    return code if isinstance(code, ErrorCode) else ErrorCode(code)


def refusal(code: ErrorCode | int, what: str, message: str | None = None) -> StrandlineError:
    """The error for a broker's ``code`` about ``what`` (e.g. "topic t"), with the broker's message."""
    error = error_code(code)
    said = f": {message}" if message else ""
    if error in NOT_FOUND:
        return NotFound(f"{what} does not exist ({error.name.upper()}{said})")
    return Refused(f"{what}: {error.name.upper()}{said}")
