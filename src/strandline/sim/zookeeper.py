"""ZooKeeper in memory for the simulator and unit tests: versions, ephemeral nodes, transactions.

It implements :class:`strandline.coordination.store.CoordinationStore` with ZooKeeper's rules
for what the core uses: compare-and-set on versions, all-or-nothing transactions, sequential
nodes, and ephemeral nodes owned by a session that :meth:`MemoryZooKeeper.expire` deletes.
Every operation completes at once; the simulator decides when its result is delivered.
"""

from __future__ import annotations

from typing import Callable, Sequence, cast

from strandline.coordination.store import (CheckVersion, Create, Delete, GetChildren, GetData, Op, OpResult,
                                           SetData, TransactionOp, ZkError)
from strandline.coordination import zk_layout
from strandline.coordination.znodes import PERSISTENT_PATHS


class MemoryZooKeeper:
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int, int]] = {"/": (b"", 0, 0)}   # path -> (data, version, owner)
        self.sequence = 0
        self.zxid = 0
        self.changes = 0          # counts every write, so observers can tell when to look again
        self.czxid: dict[str, int] = {}
        self.ctime_ms: dict[str, int] = {}
        #: The time a node's creation is stamped with (its ``ctime``); the simulator sets its clock.
        self.clock: Callable[[], int] = lambda: 0
        for path in PERSISTENT_PATHS:
            self._create_parents(path + "/x")

    def _create_parents(self, path: str) -> None:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            p = "/" + "/".join(parts[:i])
            if p not in self.nodes:
                self._put(p, b"", 0, 0)

    def _put(self, path: str, data: bytes, version: int, owner: int) -> None:
        if path not in self.nodes:
            self.zxid += 1
            self.czxid[path] = self.zxid
            self.ctime_ms[path] = self.clock()
        self.nodes[path] = (data, version, owner)

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    def _node(self, path: str, version: int = -1) -> tuple[bytes, int, int] | OpResult:
        """The node at ``path``, or the failed result of an operation on it: NO_NODE, or
        BAD_VERSION unless ``version`` is -1 (any) or the node's."""
        node = self.nodes.get(path)
        if node is None:
            return OpResult(ZkError.NO_NODE)
        if version not in (-1, node[1]):
            return OpResult(ZkError.BAD_VERSION)
        return node

    def _one(self, op: Op, session: int) -> OpResult:
        if not isinstance(op, (GetData, GetChildren, CheckVersion)):
            self.changes += 1
        if isinstance(op, Create):
            path = op.path
            if op.sequential:
                self.sequence += 1
                path = f"{path}{self.sequence:010d}"
            parent = path.rsplit("/", 1)[0] or "/"
            if path in self.nodes:
                return OpResult(ZkError.NODE_EXISTS)
            if parent not in self.nodes:
                if not op.make_parents:
                    return OpResult(ZkError.NO_NODE)
                self._create_parents(path)
            self._put(path, op.data, 0, session if op.ephemeral else 0)
            return OpResult(ZkError.NONE, path=path, version=0)
        if isinstance(op, SetData):
            node = self._node(op.path, op.version)
            if isinstance(node, OpResult):
                return node
            self.nodes[op.path] = (op.data, node[1] + 1, node[2])
            return OpResult(ZkError.NONE, version=node[1] + 1)
        if isinstance(op, CheckVersion):
            node = self._node(op.path)
            if isinstance(node, OpResult):
                return node
            return OpResult(ZkError.NONE if node[1] == op.version else ZkError.BAD_VERSION, version=node[1])
        if isinstance(op, GetData):
            node = self._node(op.path)
            if isinstance(node, OpResult):
                return node
            return OpResult(ZkError.NONE, data=node[0], version=node[1], ephemeral_owner=node[2],
                            ctime_ms=self.ctime_ms.get(op.path, 0))
        if isinstance(op, GetChildren):
            if op.path not in self.nodes:
                return OpResult(ZkError.NO_NODE)
            return OpResult(ZkError.NONE, children=tuple(self.children(op.path)))
        if isinstance(op, Delete):
            node = self._node(op.path, op.version)
            if isinstance(node, OpResult):
                return node
            below = [p for p in self.nodes if p.startswith(op.path.rstrip("/") + "/")]
            if below and not op.recursive:
                return OpResult(ZkError.NOT_EMPTY)
            for p in below + [op.path]:
                del self.nodes[p]
                self.czxid.pop(p, None)
                self.ctime_ms.pop(p, None)
            return OpResult(ZkError.NONE)
        raise TypeError(f"unknown operation {op!r}")

    def execute(self, ops: Sequence[Op], session: int = 0) -> list[OpResult]:
        return [self._one(op, session) for op in ops]

    def transaction(self, ops: Sequence[TransactionOp], session: int = 0) -> list[OpResult]:
        if zk_layout.multi_size(ops) > zk_layout.JUTE_MAXBUFFER:
            # a real server closes the connection of a request over jute.maxbuffer ("Len error")
            return [OpResult(ZkError.CONNECTION_LOSS)] * len(ops)
        saved = (dict(self.nodes), self.sequence, self.zxid, dict(self.czxid))
        results = []
        for op in ops:
            result = self._one(op, session)
            if result.error is not ZkError.NONE:
                self.nodes, self.sequence, self.zxid, self.czxid = saved
                return [OpResult(result.error)] * len(ops)
            results.append(result)
        return results

    def run(self, ops: Sequence[Op], transaction: bool, session: int = 0) -> list[OpResult]:
        if transaction:         # a multi holds writes and version checks only (as ZooKeeper's)
            return self.transaction(cast("Sequence[TransactionOp]", ops), session)
        return self.execute(ops, session)

    def expire(self, session: int) -> list[str]:
        """End ``session``: delete its ephemeral nodes; returns their paths."""
        gone = [p for p, (_, _, owner) in self.nodes.items() if owner == session and session]
        self.changes += len(gone)
        for p in gone:
            del self.nodes[p]
            self.czxid.pop(p, None)
        return gone
