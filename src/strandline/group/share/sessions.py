"""Share sessions (KIP-932): the partitions a share consumer fetches from one broker.

A member's ShareFetch with epoch 0 opens its session with this broker (replacing one it had), with
the partitions the request names; each later request carries the next epoch and names only the
partitions to add, and its ForgottenTopicsData those to drop; epoch -1 closes the session (its
last request may still acknowledge). ShareAcknowledge needs an open session, at the next epoch, or
-1 to close it. Kafka's errors: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
SHARE_SESSION_LIMIT_REACHED (``group.share.max.share.sessions``), INVALID_REQUEST for an opening
request that acknowledges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable
from uuid import UUID

from kio.schema.errors import ErrorCode

OPEN_EPOCH = 0
FINAL_EPOCH = -1

#: a partition of a share session: (topic id, partition index)
SessionPartition = tuple[UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1                       # the epoch the next request must carry
    partitions: list[SessionPartition] = field(default_factory=list)


class ShareSessions:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, added: Iterable[SessionPartition],
              forgotten: Iterable[SessionPartition], acknowledges: bool) -> tuple[ShareSession | None, ErrorCode]:
        """A ShareFetch's session: the session after the request (None when it closed one), or why
        the request is refused. The session's partitions are those it fetches."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            session = self.sessions.pop(key, None)
            return (session, ErrorCode.none) if session is not None else (None, ErrorCode.share_session_not_found)
        if epoch == OPEN_EPOCH:
            if acknowledges:
                return None, ErrorCode.invalid_request
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                return None, ErrorCode.share_session_limit_reached
            session = self.sessions[key] = ShareSession(group_id, member_id)
            _add(session, added)
            return session, ErrorCode.none
        session = self.sessions.get(key)
        if session is None:
            return None, ErrorCode.share_session_not_found
        if epoch != session.epoch:
            return None, ErrorCode.invalid_share_session_epoch
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        gone = set(forgotten)
        session.partitions = [p for p in session.partitions if p not in gone]
        _add(session, added)
        return session, ErrorCode.none

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> tuple[ShareSession | None, ErrorCode]:
        """A ShareAcknowledge's session (the one it closes, for epoch -1), or why it is refused."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            return None, ErrorCode.invalid_share_session_epoch
        session = self.sessions.get(key)
        if session is None:
            return None, ErrorCode.share_session_not_found
        if epoch == FINAL_EPOCH:
            return self.sessions.pop(key), ErrorCode.none
        if epoch != session.epoch:
            return None, ErrorCode.invalid_share_session_epoch
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session, ErrorCode.none

    def drop_member(self, group_id: str, member_id: str) -> ShareSession | None:
        """The member left its group: its session goes."""
        return self.sessions.pop((group_id, member_id), None)


def _add(session: ShareSession, added: Iterable[SessionPartition]) -> None:
    for partition in added:
        if partition not in session.partitions:
            session.partitions.append(partition)
