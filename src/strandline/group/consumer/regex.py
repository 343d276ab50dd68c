"""Regular expression subscriptions of the consumer group protocol (KIP-848; Kafka 4.0's
``GroupMetadataManager``: ``maybeUpdateRegularExpressions``, ``refreshRegularExpressions``).

A member may subscribe with ``SubscribedTopicRegex``. The coordinator compiles a regular
expression that no other member of the group uses yet with RE2's syntax, as Kafka compiles it
with RE2/J (INVALID_REGULAR_EXPRESSION, error 128, otherwise: no backreferences, no lookaround),
and resolves the group's regular expressions to the topics whose whole names they match, keeping
only those the member whose heartbeat triggered the resolution may DESCRIBE. The result is a
record per regular expression (type 16: its topics, the version of the topic set it was resolved
against, the time), which a new coordinator replays; the last member using one leaving writes its
tombstone. A resolution runs at most every 10 s per group, when a regular expression is not
resolved yet, when the cluster's topics changed since, or when the last is 10 minutes old.
"""

from __future__ import annotations

from typing import Any, Callable, Collection

import re2

from kio.schema.errors import ErrorCode

from strandline.group.consumer import records as rec
from strandline.group.consumer.group import ConsumerGroup
from strandline.group.consumer.model import ConsumerGroupError

#: Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS
MIN_REFRESH_INTERVAL_MS = 10_000
#: Kafka's group.consumer.regex.refresh.interval.ms (an internal key there), its default
REFRESH_INTERVAL_MS = 600_000

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False             # an invalid expression is the client's error, answered to it


class InvalidRegex(ConsumerGroupError):
    """A subscribed regular expression RE2 refuses: INVALID_REGULAR_EXPRESSION and Kafka's message."""

    def __init__(self, regex: str, reason: str) -> None:
        super().__init__(ErrorCode.invalid_regular_expression,
                         f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}.")


def compile_regex(regex: str) -> Any:
    """``regex`` compiled with RE2's syntax; :class:`InvalidRegex` if it is not one."""
    try:
        return re2.compile(regex, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        raise InvalidRegex(regex, reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) \
            from None


def subscribed_regexes(group: ConsumerGroup) -> set[str]:
    return {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}


def refresh_due(group: ConsumerGroup, topics_version: int, now_ms: int, forced: bool = False) -> bool:
    """Whether the group's regular expressions are to be resolved now: it has some, the last
    resolution is at least 10 s old, and one is not resolved yet (or a member just brought a new
    one, ``forced``), the topics changed since, or the last resolution is 10 minutes old."""
    regexes = subscribed_regexes(group)
    if not regexes:
        return False
    last = group.last_regex_refresh_ms
    if last >= 0 and now_ms < last + MIN_REFRESH_INTERVAL_MS:
        return False
    resolved = [group.resolved_regexes[r] for r in regexes if r in group.resolved_regexes]
    # (none resolved yet, ``last`` -1, is the second case)
    return (forced or len(resolved) < len(regexes) or any(r.version < topics_version for r in resolved)
            or now_ms > last + REFRESH_INTERVAL_MS)


def resolve(group: ConsumerGroup, topic_names: Collection[str], may_describe: Callable[[str], bool],
            topics_version: int, now_ms: int) -> tuple[list[rec.Record], bool]:
    """A record for each of the group's regular expressions: the topics of ``topic_names`` it
    matches in full that ``may_describe`` lets through. Also whether any resolved set changed."""
    records: list[rec.Record] = []
    changed = False
    allowed = {name: may_describe(name) for name in topic_names}
    for regex in sorted(subscribed_regexes(group)):
        try:
            pattern = compile_regex(regex)
        except InvalidRegex:       # kept by an earlier version that compiled it otherwise: matches nothing
            pattern = None
        topics = tuple(sorted(n for n in topic_names if pattern is not None and allowed[n]
                              and pattern.fullmatch(n) is not None))
        before = group.resolved_regexes.get(regex)
        changed = changed or before is None or before.topics != topics
        records.append((rec.Key(rec.REGULAR_EXPRESSION, group.group_id, regex=regex),
                        rec.RegularExpressionValue(topics, topics_version, now_ms)))
    return records, changed


def tombstone(group_id: str, regex: str) -> rec.Record:
    return rec.Key(rec.REGULAR_EXPRESSION, group_id, regex=regex), None
