"""ZooKeeper operations as plain values, and their results (the core returns these as effects)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False
    make_parents: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1
    recursive: bool = False


@dataclass(frozen=True, slots=True)
class CheckVersion:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class GetData:
    path: str


@dataclass(frozen=True, slots=True)
class GetChildren:
    path: str


class ZkError(enum.Enum):
    NONE = "none"
    NO_NODE = "no_node"
    NODE_EXISTS = "node_exists"
    BAD_VERSION = "bad_version"
    NOT_EMPTY = "not_empty"
    CONNECTION_LOSS = "connection_loss"
    SESSION_EXPIRED = "session_expired"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class OpResult:
    error: ZkError
    data: bytes | None = None
    version: int = -1
    children: tuple[str, ...] = ()
    path: str | None = None
    ephemeral_owner: int = 0


class CoordinationStore(Protocol):
    def execute(self, ops: Sequence[object]) -> list[OpResult]:
        """Run ``ops`` one by one; each gets its own result."""

    def transaction(self, ops: Sequence[object]) -> list[OpResult]:
        """Run Create/SetData/Delete/CheckVersion ``ops`` atomically (a ZooKeeper multi)."""
