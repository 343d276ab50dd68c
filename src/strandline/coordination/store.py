"""ZooKeeper operations as plain values, and their results.

The core returns these as effects (``ZkRequest(ops, transaction=...)``); a shell runs them on a
``CoordinationStore`` (``runtime.zk.KazooStore`` on real ZooKeeper, a model in ``sim/``) and hands
back one ``OpResult`` per op. Expected outcomes (a missing node, a stale version, a lost
connection) are ``ZkError`` values in results, never exceptions.

Versions follow ZooKeeper: ``-1`` matches any version; a node's version counts its ``SetData``
calls and starts at 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence, Union

ANY_VERSION = -1


@dataclass(frozen=True, slots=True)
class Create:
    """Create ``path``; ``sequential`` appends a 10-digit counter (the created path is in the result);
    ``make_parents`` first creates missing persistent, empty ancestors."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False
    make_parents: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    """Replace the data of ``path`` if its version is ``version`` (-1: any)."""

    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete ``path`` if its version is ``version``; ``recursive`` deletes its descendants first."""

    path: str
    version: int = ANY_VERSION
    recursive: bool = False


@dataclass(frozen=True, slots=True)
class CheckVersion:
    """Succeed only if ``path`` has version ``version`` (guards a transaction, e.g. the controller epoch)."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class GetData:
    path: str


@dataclass(frozen=True, slots=True)
class GetChildren:
    path: str


#: Any operation; ``TransactionOp`` are those a transaction (ZooKeeper multi) may hold.
Op = Union[Create, SetData, Delete, CheckVersion, GetData, GetChildren]
TransactionOp = Union[Create, SetData, Delete, CheckVersion]


class ZkError(enum.Enum):
    NONE = "none"
    NO_NODE = "no_node"
    NODE_EXISTS = "node_exists"
    BAD_VERSION = "bad_version"
    NOT_EMPTY = "not_empty"
    #: The request may or may not have been applied (the connection dropped or the store timed out).
    CONNECTION_LOSS = "connection_loss"
    #: The session is gone (expired, or the store was stopped): its ephemeral nodes are deleted.
    SESSION_EXPIRED = "session_expired"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class OpResult:
    """The outcome of one op.

    ``data`` / ``version`` / ``ephemeral_owner`` / ``ctime_ms`` (creation time): GetData (``version`` also after Create = 0, SetData,
    CheckVersion). ``children``: GetChildren, sorted. ``path``: the created path (Create, sequential
    or not). ``ephemeral_owner`` is the owning session id, 0 for a persistent node.

    A transaction is all or nothing, and so are its results: when it fails, nothing was applied
    and *every* op carries the error that aborted it (e.g. ``NODE_EXISTS`` for the create that
    collided, or ``CONNECTION_LOSS``), so no result ever claims a success that did not happen.
    """

    error: ZkError
    data: bytes | None = None
    version: int = -1
    children: tuple[str, ...] = ()
    path: str | None = None
    ephemeral_owner: int = 0
    ctime_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.error is ZkError.NONE


class CoordinationStore(Protocol):
    def execute(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run ``ops`` one by one, in order; each gets its own result (a failure does not stop the rest)."""

    def transaction(self, ops: Sequence[TransactionOp]) -> list[OpResult]:
        """Run Create/SetData/Delete/CheckVersion ``ops`` atomically (a ZooKeeper multi): all or nothing."""
