"""The ZooKeeper session (kazoo) behind the CoordinationStore interface."""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError,
                              SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError

from strandline.coordination import znodes
from strandline.coordination.store import (CheckVersion, Create, Delete, GetChildren, GetData, OpResult, SetData,
                                           ZkError)
from strandline.errors import StrandlineError

log = logging.getLogger("strandline.zookeeper")

_ERRORS = {NoNodeError: ZkError.NO_NODE, NodeExistsError: ZkError.NODE_EXISTS, BadVersionError: ZkError.BAD_VERSION,
           NotEmptyError: ZkError.NOT_EMPTY, ConnectionLoss: ZkError.CONNECTION_LOSS,
           SessionExpiredError: ZkError.SESSION_EXPIRED}


def _error_of(exc: BaseException) -> ZkError:
    for cls, code in _ERRORS.items():
        if isinstance(exc, cls):
            return code
    return ZkError.OTHER


class KazooStore:
    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000.0,
                                  connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                                  command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0})
        self.listeners: list[Callable[[str], None]] = []
        self.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        for listener in self.listeners:
            listener(state)

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """``callback(state)`` with "LOST", "SUSPENDED" or "CONNECTED", from kazoo's thread."""
        self.listeners.append(callback)

    def start(self, timeout_s: float) -> None:
        try:
            self.client.start(timeout=timeout_s)
        except KazooTimeoutError:
            self.client.stop()
            raise StrandlineError(f"cannot connect to ZooKeeper at {self.connect} within {timeout_s:.0f} s") from None

    def stop(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # closing a dead session is best effort
            pass

    @property
    def session_id(self) -> int | None:
        sid = self.client.client_id
        return sid[0] if sid else None

    def ensure_persistent_paths(self) -> None:
        for path in znodes.PERSISTENT_PATHS:
            self.client.ensure_path(path)

    def _run(self, op: object) -> OpResult:
        c = self.client
        try:
            if isinstance(op, GetData):
                data, stat = c.get(op.path)
                return OpResult(ZkError.NONE, data=data, version=stat.version, ephemeral_owner=stat.ephemeralOwner)
            if isinstance(op, GetChildren):
                return OpResult(ZkError.NONE, children=tuple(sorted(c.get_children(op.path))))
            if isinstance(op, Create):
                path = c.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential,
                                makepath=op.make_parents)
                return OpResult(ZkError.NONE, path=path, version=0)
            if isinstance(op, SetData):
                stat = c.set(op.path, op.data, version=op.version)
                return OpResult(ZkError.NONE, version=stat.version)
            if isinstance(op, Delete):
                c.delete(op.path, version=op.version, recursive=op.recursive)
                return OpResult(ZkError.NONE)
            if isinstance(op, CheckVersion):
                stat = c.exists(op.path)
                if stat is None:
                    return OpResult(ZkError.NO_NODE)
                return OpResult(ZkError.NONE if stat.version == op.version else ZkError.BAD_VERSION,
                                version=stat.version)
        except Exception as exc:  # mapped to a result: a stale version is an outcome, not a crash
            return OpResult(_error_of(exc))
        raise TypeError(f"unknown ZooKeeper operation {op!r}")

    def execute(self, ops: Sequence[object]) -> list[OpResult]:
        return [self._run(op) for op in ops]

    def transaction(self, ops: Sequence[object]) -> list[OpResult]:
        tx = self.client.transaction()
        for op in ops:
            if isinstance(op, Create):
                tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                tx.set_data(op.path, op.data, version=op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, version=op.version)
            elif isinstance(op, CheckVersion):
                tx.check(op.path, op.version)
            else:
                raise TypeError(f"{op!r} cannot be part of a transaction")
        try:
            raw = tx.commit()
        except Exception as exc:
            return [OpResult(_error_of(exc)) for _ in ops]
        results = []
        for item in raw:
            if isinstance(item, BaseException):
                results.append(OpResult(_error_of(item)))
            elif isinstance(item, str):
                results.append(OpResult(ZkError.NONE, path=item))
            elif hasattr(item, "version"):
                results.append(OpResult(ZkError.NONE, version=item.version))
            else:
                results.append(OpResult(ZkError.NONE))
        return results

    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None, wait_s: float) -> None:
        """Create the ephemeral ``/brokers/ids/<id>``; wait out a previous session's stale node."""
        path = znodes.BrokerIdZNode.path(broker_id)
        data = znodes.BrokerIdZNode.encode(broker_id, host, port, rack, int(time.time() * 1000))
        deadline = time.monotonic() + wait_s
        announced = False
        while True:
            try:
                self.client.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            stat = self.client.exists(path)
            if stat is not None and stat.ephemeralOwner == self.session_id:
                return
            if time.monotonic() >= deadline:
                raise StrandlineError(f"broker id {broker_id} is already registered in ZooKeeper by another "
                                      f"session (another broker with the same broker.id?)")
            if not announced:
                log.info("Broker id %d is still registered by a previous session; waiting up to %.0f s "
                         "for it to expire", broker_id, wait_s)
                announced = True
            time.sleep(0.1)  # the previous session expires on ZooKeeper's clock, not ours

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """Calls ``callback(children)`` now and on every change, from kazoo's thread."""
        self.client.ChildrenWatch(path, callback)
