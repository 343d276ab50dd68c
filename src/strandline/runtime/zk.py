"""The ZooKeeper session (kazoo) behind the ``CoordinationStore`` interface.

Every call blocks the calling thread for at most ``connection_timeout_ms`` (like Kafka's
``ZooKeeperClient``, which waits that long for a connection); the asyncio shell calls them with
``asyncio.to_thread`` or the ``aexecute`` / ``atransaction`` helpers. Expected outcomes are
``ZkError`` values in ``OpResult``s; a request that timed out is ``CONNECTION_LOSS`` (it may still
be applied later, exactly as with a real connection loss).

Threads: state listeners and watch callbacks run on kazoo's threads. They must not block and must
not call the store; the asyncio shell hops back to its loop with ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import (EXCEPTIONS, BadVersionError, ConnectionClosedError, ConnectionLoss, KazooException,
                              NodeExistsError, NoNodeError, NotEmptyError, OperationTimeoutError,
                              RolledBackError, RuntimeInconsistency, SessionExpiredError, UnimplementedError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import GetChildren as KazooGetChildren
from kazoo.protocol.serialization import GetData as KazooGetData
from kazoo.protocol.serialization import (MultiHeader, int_struct, multiheader_struct, read_buffer, read_string,
                                          stat_struct)
from kazoo.protocol.states import ZnodeStat
from kazoo.protocol.states import KazooState

from strandline.coordination import znodes
from strandline.coordination.store import (CheckVersion, Create, Delete, GetChildren, GetData, Op, OpResult, SetData,
                                           TransactionOp, ZkError)
from strandline.errors import StrandlineError

log = logging.getLogger("strandline.zookeeper")

#: Session states passed to state listeners (kazoo's ``KazooState`` values).
CONNECTED, SUSPENDED, LOST = KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST

_ERRORS: tuple[tuple[type[BaseException], ZkError], ...] = (
    (NoNodeError, ZkError.NO_NODE),
    (NodeExistsError, ZkError.NODE_EXISTS),
    (BadVersionError, ZkError.BAD_VERSION),
    (NotEmptyError, ZkError.NOT_EMPTY),
    (ConnectionLoss, ZkError.CONNECTION_LOSS),
    (OperationTimeoutError, ZkError.CONNECTION_LOSS),
    (KazooTimeoutError, ZkError.CONNECTION_LOSS),
    (ConnectionClosedError, ZkError.SESSION_EXPIRED),  # the store was stopped: the session is gone
    (SessionExpiredError, ZkError.SESSION_EXPIRED),
    (OSError, ZkError.CONNECTION_LOSS),   # the client could not talk to ZooKeeper (e.g. out of file descriptors)
)


#: What a kazoo call raises for an outcome (kazoo's request timeout is not a KazooException, and
#: a system error such as EMFILE reaches the caller as a plain OSError).
ZK_FAILURES = (KazooException, KazooTimeoutError, OSError)


def zk_error(exc: BaseException) -> ZkError:
    """The ``ZkError`` for a kazoo exception."""
    for cls, code in _ERRORS:
        if isinstance(exc, cls):
            return code
    return ZkError.OTHER


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _join(parent: str, child: str) -> str:
    return f"/{child}" if parent == "/" else f"{parent}/{child}"


MULTI_READ_OPS = 1000   # reads per multiRead request (its answer stays well under a MiB)


def _kazoo_read(client: KazooClient, op: Op) -> Any:
    path = client.chroot + op.path if client.chroot else op.path
    return KazooGetData(path, None) if isinstance(op, GetData) else KazooGetChildren(path, None)


class _MultiRead(tuple[list[Any]]):
    """ZooKeeper's multiRead request (opcode 22, ZooKeeper 3.6+): reads in one request, each
    answered on its own (data and stat, children, or its error), as a kazoo request object."""

    type = 22

    def __new__(cls, operations: list[Any]) -> "_MultiRead":
        return super().__new__(cls, (operations,))

    def serialize(self) -> bytearray:
        b = bytearray()
        for op in self[0]:
            b += MultiHeader(op.type, False, -1).serialize() + op.serialize()
        b += multiheader_struct.pack(-1, True, -1)
        return b

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == KazooGetData.type:
                value, offset = read_buffer(data, offset)
                results.append((value, ZnodeStat._make(stat_struct.unpack_from(data, offset))))
                offset += stat_struct.size
            elif header.type == KazooGetChildren.type:
                count = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(data, offset)
                    children.append(child)
                results.append(children)
            else:                                                  # an error result
                err = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[err]())
            header, offset = MultiHeader.deserialize(data, offset)
        return results


class KazooStore:
    """A ZooKeeper session implementing ``CoordinationStore`` (plus the broker's registration and watches)."""

    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000.0,
                                  connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0})
        #: Called as ``listener(state)`` with "CONNECTED", "SUSPENDED" or "LOST", from kazoo's thread.
        self.listeners: list[Callable[[str], Any]] = []
        self._closing = False
        self._multi_read = True      # until the server says it has no multiRead
        self.client.add_listener(self._on_state)

    # -- session

    @property
    def request_timeout_s(self) -> float:
        return self.connection_timeout_ms / 1000.0

    @property
    def servers(self) -> str:
        """The connect string without its chroot (for messages)."""
        return self.connect.split("/", 1)[0]

    def start(self, timeout_s: float | None = None) -> None:
        """Open the session; StrandlineError "cannot connect to ZooKeeper at host:port" on timeout."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        self._closing = False
        try:
            self.client.start(timeout=timeout_s)
        except KazooTimeoutError:
            raise StrandlineError(f"cannot connect to ZooKeeper at {self.servers} within {timeout_s:g} s") from None
        if self.client.chroot:
            self._ensure_chroot(timeout_s)
        log.info("ZooKeeper session 0x%x open on %s (timeout %d ms)", self.session_id or 0, self.connect,
                 self.negotiated_session_timeout_ms)

    def _ensure_chroot(self, timeout_s: float) -> None:
        """Create the chroot of ``host:port/chroot`` if missing, as Kafka does, with a chroot-less client."""
        if self.client.exists("/") is not None:
            return
        root = KazooClient(hosts=self.servers, timeout=self.session_timeout_ms / 1000.0)
        try:
            root.start(timeout=timeout_s)
            root.ensure_path(self.client.chroot)
        finally:
            root.stop()
            root.close()

    def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once); idempotent. Listeners hear nothing of it."""
        self._closing = True
        try:
            self.client.stop()
            self.client.close()
        except ZK_FAILURES as exc:  # closing a dead session is best effort
            log.debug("Closing the ZooKeeper session: %s", exc)

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    @property
    def session_id(self) -> int | None:
        """The current session id (kazoo opens a new session after an expiry), None before the first."""
        sid = self.client.client_id
        return sid[0] if sid else None

    @property
    def negotiated_session_timeout_ms(self) -> int:
        return int(getattr(self.client, "_session_timeout", self.session_timeout_ms))

    def add_listener(self, callback: Callable[[str], Any]) -> None:
        """``callback(state)`` on every session state change: "CONNECTED", "SUSPENDED" (connection
        dropped, session maybe alive) or "LOST" (session expired or closed; kazoo then opens a new
        session and reports "CONNECTED" again, with a new ``session_id`` and no ephemeral nodes).

        Runs on kazoo's connection thread: it must not block or call the store. Hop to the asyncio
        loop with ``loop.call_soon_threadsafe``.
        """
        self.listeners.append(callback)

    add_state_listener = add_listener

    def _on_state(self, state: str) -> None:
        if self._closing:
            return  # our own stop() is not a session expiry
        if state == LOST:
            log.warning("ZooKeeper session lost (expired or closed)")
        elif state == SUSPENDED:
            log.warning("ZooKeeper connection suspended; reconnecting")
        for listener in list(self.listeners):
            try:
                listener(str(state))
            except Exception:  # a broken listener must not kill kazoo's connection thread
                log.exception("ZooKeeper state listener failed")

    # -- primitive calls with a deadline

    def _wait(self, async_result: Any) -> Any:
        return async_result.get(timeout=self.request_timeout_s)

    def _create(self, op: Create) -> OpResult:
        c = self.client
        try:
            path, stat = self._wait(c.create_async(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential,
                                                   include_data=True))
        except NoNodeError:
            if not op.make_parents:
                raise
            self._ensure_path(_parent(op.path))
            path, stat = self._wait(c.create_async(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential,
                                                   include_data=True))
        return OpResult(ZkError.NONE, version=stat.version, path=path, ephemeral_owner=stat.ephemeralOwner)

    def _ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing ancestors, persistent and empty."""
        if path in ("", "/"):
            return
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            try:
                self._wait(self.client.create_async("/" + "/".join(parts[:i]), b""))
            except NodeExistsError:
                pass

    def _delete_recursive(self, path: str, version: int) -> None:
        """Delete the descendants of ``path`` (any version), then ``path`` itself (``version``)."""
        for _ in range(10):  # children created concurrently give NOT_EMPTY: go again
            children = self._wait(self.client.get_children_async(path))
            for child in children:
                try:
                    self._delete_recursive(_join(path, child), -1)
                except NoNodeError:
                    pass
            try:
                self._wait(self.client.delete_async(path, version))
                return
            except NotEmptyError:
                continue
        raise NotEmptyError()

    def _run(self, op: Op) -> OpResult:
        c = self.client
        try:
            if isinstance(op, GetData):
                data, stat = self._wait(c.get_async(op.path))
                return OpResult(ZkError.NONE, data=data, version=stat.version, ephemeral_owner=stat.ephemeralOwner,
                                ctime_ms=stat.ctime)
            if isinstance(op, GetChildren):
                return OpResult(ZkError.NONE, children=tuple(sorted(self._wait(c.get_children_async(op.path)))))
            if isinstance(op, Create):
                return self._create(op)
            if isinstance(op, SetData):
                stat = self._wait(c.set_async(op.path, op.data, version=op.version))
                return OpResult(ZkError.NONE, version=stat.version, ephemeral_owner=stat.ephemeralOwner)
            if isinstance(op, Delete):
                if op.recursive:
                    self._delete_recursive(op.path, op.version)
                else:
                    self._wait(c.delete_async(op.path, version=op.version))
                return OpResult(ZkError.NONE)
            if isinstance(op, CheckVersion):
                stat = self._wait(c.exists_async(op.path))
                if stat is None:
                    return OpResult(ZkError.NO_NODE)
                return OpResult(ZkError.NONE if op.version in (-1, stat.version) else ZkError.BAD_VERSION,
                                version=stat.version)
        except ZK_FAILURES as exc:  # a stale version or a lost connection is a result, not a crash
            return OpResult(zk_error(exc))
        raise TypeError(f"unknown ZooKeeper operation {op!r}")

    # -- CoordinationStore

    def execute(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run ``ops`` one by one; each gets its own result. Reads only (a controller loading
        thousands of partition states) are pipelined: all are sent, then all answers awaited, so
        they take one round trip, not one each."""
        if len(ops) > 1 and all(isinstance(op, (GetData, GetChildren)) for op in ops):
            return self._read_pipelined(ops)
        return [self._run(op) for op in ops]

    def _read_pipelined(self, ops: Sequence[Op]) -> list[OpResult]:
        """ZooKeeper 3.6+'s multiRead carries up to ``MULTI_READ_OPS`` reads per request (kazoo
        costs a few hundred microseconds per request of its own); a server without it gets the
        reads one request each, all sent before the first answer is awaited."""
        c = self.client
        try:
            if self._multi_read:
                sent = []
                for i in range(0, len(ops), MULTI_READ_OPS):
                    answer = c.handler.async_result()
                    c._call(_MultiRead([_kazoo_read(c, op) for op in ops[i:i + MULTI_READ_OPS]]), answer)
                    sent.append(answer)
            else:
                sent = [c.get_async(op.path) if isinstance(op, GetData) else c.get_children_async(op.path)
                        for op in ops]
        except ZK_FAILURES as exc:
            return [OpResult(zk_error(exc)) for _ in ops]
        deadline = time.monotonic() + self.request_timeout_s      # for the whole batch
        values: list[Any] = []         # kazoo's answers, or the exception of each
        for i, answer in enumerate(sent):
            try:
                value = answer.get(timeout=max(0.001, deadline - time.monotonic()))
            except UnimplementedError:                            # a server older than 3.6
                self._multi_read = False
                return self._read_pipelined(ops)
            except ZK_FAILURES as exc:
                value = exc
            except Exception as exc:     # an answer that is no multiRead answer: a server without it
                if not self._multi_read:
                    raise
                log.warning("ZooKeeper did not answer a multiRead (%s); reading one request each from now on", exc)
                self._multi_read = False
                return self._read_pipelined(ops)
            if self._multi_read:
                chunk = len(ops[i * MULTI_READ_OPS:(i + 1) * MULTI_READ_OPS])
                values.extend(value if isinstance(value, list) else [value] * chunk)
            else:
                values.append(value)
        results = []
        for op, value in zip(ops, values):
            if isinstance(value, BaseException):
                results.append(OpResult(zk_error(value)))
            elif isinstance(op, GetData):
                data, stat = value
                results.append(OpResult(ZkError.NONE, data=data, version=stat.version,
                                        ephemeral_owner=stat.ephemeralOwner, ctime_ms=stat.ctime))
            else:
                results.append(OpResult(ZkError.NONE, children=tuple(sorted(value))))
        return results

    def transaction(self, ops: Sequence[TransactionOp]) -> list[OpResult]:
        """Run ``ops`` as one ZooKeeper multi: all or nothing.

        ``Create(make_parents=True)`` creates the missing ancestors first, outside the transaction
        (they are empty persistent nodes, harmless if the transaction then fails).
        ``Delete(recursive=True)`` reads the subtree first and deletes it in the transaction; a
        child added in between makes the transaction fail with ``NOT_EMPTY``.
        On failure every op carries the error that aborted the transaction (see ``OpResult``).
        """
        for op in ops:
            if not isinstance(op, (Create, SetData, Delete, CheckVersion)):
                raise TypeError(f"{op!r} cannot be part of a transaction")
        expanded: list[TransactionOp] = []
        owner: list[int] = []  # index in ``ops`` of each expanded op
        for index, op in enumerate(ops):
            if isinstance(op, Create) and op.make_parents:
                try:
                    self._ensure_path(_parent(op.path))
                except ZK_FAILURES as exc:
                    return [OpResult(zk_error(exc)) for _ in ops]
            if isinstance(op, Delete) and op.recursive:
                try:
                    descendants = self._descendants(op.path)
                except NoNodeError:
                    descendants = []
                except ZK_FAILURES as exc:
                    return [OpResult(zk_error(exc)) for _ in ops]
                for path in descendants:
                    expanded.append(Delete(path))
                    owner.append(index)
            expanded.append(op)
            owner.append(index)
        tx = self.client.transaction()
        for op in expanded:
            if isinstance(op, Create):
                tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                tx.set_data(op.path, op.data, version=op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, version=op.version)
            else:
                tx.check(op.path, op.version)
        try:
            raw = self._wait(tx.commit_async())
        except ZK_FAILURES as exc:
            return [OpResult(zk_error(exc)) for _ in ops]
        failures = [item for item in raw if isinstance(item, BaseException)
                    and not isinstance(item, (RolledBackError, RuntimeInconsistency))]
        if failures or any(isinstance(item, BaseException) for item in raw):
            error = zk_error(failures[0]) if failures else ZkError.OTHER
            return [OpResult(error) for _ in ops]
        results: list[OpResult | None] = [None] * len(ops)
        for index, op, item in zip(owner, expanded, raw):
            if op is not ops[index]:
                continue  # a descendant deleted for a recursive Delete
            if isinstance(op, Create):
                results[index] = OpResult(ZkError.NONE, version=0, path=item)
            elif isinstance(op, SetData):
                results[index] = OpResult(ZkError.NONE, version=item.version, ephemeral_owner=item.ephemeralOwner)
            elif isinstance(op, CheckVersion):
                results[index] = OpResult(ZkError.NONE, version=op.version)
            else:
                results[index] = OpResult(ZkError.NONE)
        return [r if r is not None else OpResult(ZkError.NONE) for r in results]

    def _descendants(self, path: str) -> list[str]:
        """Every node below ``path``, deepest first."""
        out: list[str] = []
        for child in self._wait(self.client.get_children_async(path)):
            child_path = _join(path, child)
            try:
                out.extend(self._descendants(child_path))
            except NoNodeError:
                continue
            out.append(child_path)
        return out

    async def aexecute(self, ops: Sequence[Op]) -> list[OpResult]:
        """``execute`` on a worker thread, for the asyncio shell."""
        return await asyncio.to_thread(self.execute, ops)

    async def atransaction(self, ops: Sequence[TransactionOp]) -> list[OpResult]:
        """``transaction`` on a worker thread, for the asyncio shell."""
        return await asyncio.to_thread(self.transaction, ops)

    # -- Kafka's startup steps

    def ensure_persistent_paths(self) -> None:
        """Create Kafka's persistent paths (``znodes.PERSISTENT_PATHS``) that do not exist yet."""
        try:
            for path in znodes.PERSISTENT_PATHS:
                self._ensure_path(path)
        except ZK_FAILURES as exc:
            raise StrandlineError(f"cannot create Kafka's paths in ZooKeeper at {self.connect}: "
                                  f"{zk_error(exc).name}") from None

    def ensure_paths(self, paths: tuple[str, ...]) -> None:
        """Create each of ``paths`` (and its ancestors) that does not exist yet."""
        try:
            for path in paths:
                self._ensure_path(path)
        except ZK_FAILURES as exc:
            raise StrandlineError(f"cannot create {', '.join(paths)} in ZooKeeper at {self.connect}: "
                                  f"{zk_error(exc).name}") from None

    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None = None,
                        wait_s: float | None = None, endpoints: list[tuple[str, str, int, str]] | None = None,
                        clean_shutdown: bool | None = None) -> int:
        """Create the ephemeral ``/brokers/ids/<id>`` (SPEC CTL-2) and return the broker epoch (its czxid).

        If the node exists and belongs to another session, e.g. this broker's previous life that
        was SIGKILLed and whose session has not expired yet, wait (up to ``wait_s``, by default the
        session timeout plus 5 s) for ZooKeeper to delete it. If it is still there, the id is taken:
        StrandlineError naming the broker id. A node owned by our own session (a create retried
        after a connection loss) counts as registered.
        """
        path = znodes.BrokerIdZNode.path(broker_id)
        if wait_s is None:
            wait_s = self.session_timeout_ms / 1000.0 + 5.0
        deadline = time.monotonic() + wait_s
        announced = False
        while True:
            self._check_not_stopped(broker_id)
            data = znodes.BrokerIdZNode.encode(broker_id, host, port, rack, int(time.time() * 1000),
                                               endpoints=endpoints, clean_shutdown=clean_shutdown)
            try:
                _, stat = self._wait(self.client.create_async(path, data, ephemeral=True, include_data=True))
                epoch: int = stat.czxid
                log.info("Registered broker %d at %s (broker epoch %d)", broker_id, path, epoch)
                return epoch
            except NoNodeError:
                self._try(lambda: self._ensure_path(_parent(path)))
                continue
            except NodeExistsError:
                pass
            except ZK_FAILURES as exc:
                if time.monotonic() >= deadline:
                    raise StrandlineError(f"cannot register broker {broker_id} in ZooKeeper at {self.connect}: "
                                          f"{zk_error(exc).name}") from None
                self._pause(deadline)
                continue
            gone = threading.Event()
            try:
                stat = self._wait(self.client.exists_async(path, watch=lambda event, gone=gone: gone.set()))
            except ZK_FAILURES:
                stat = None
                gone.set()
            if stat is not None and stat.ephemeralOwner == self.session_id:
                epoch = stat.czxid
                log.info("Broker %d is already registered by this session (broker epoch %d)", broker_id, epoch)
                return epoch
            if stat is None:
                continue  # deleted meanwhile: create again
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StrandlineError(
                    f"broker id {broker_id} is already registered in ZooKeeper by another live session "
                    f"(0x{stat.ephemeralOwner:x}): is another broker running with broker.id={broker_id}?")
            if not announced:
                log.info("Broker id %d is still registered by session 0x%x (a previous run?); waiting up to "
                         "%.0f s for that session to expire", broker_id, stat.ephemeralOwner, remaining)
                announced = True
            # the watch fires when ZooKeeper deletes the stale node; stop() ends the wait too
            while not gone.wait(min(0.1, max(0.0, deadline - time.monotonic()))) and time.monotonic() < deadline:
                self._check_not_stopped(broker_id)

    def _check_not_stopped(self, broker_id: int) -> None:
        if self._closing:
            raise StrandlineError(f"stopped before broker {broker_id} was registered in ZooKeeper")

    def _try(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except ZK_FAILURES:
            pass

    def _pause(self, deadline: float) -> None:
        """Back off briefly after a connection problem, never past ``deadline``."""
        threading.Event().wait(max(0.0, min(0.2, deadline - time.monotonic())))

    # -- watches

    def watch_children(self, path: str, callback: Callable[[list[str]], Any]) -> Any:
        """Call ``callback(sorted children)`` now and after every change of ``path``'s children.

        kazoo's ``ChildrenWatch``: re-armed after each event and after reconnects. ``path`` must
        exist (use the persistent paths); if it is deleted the watch ends. Returning ``False`` from
        the callback ends it too. The first call runs on the calling thread, later ones on kazoo's
        thread: hop to the asyncio loop with ``loop.call_soon_threadsafe``.
        """
        return self.client.ChildrenWatch(path, lambda children: callback(sorted(children)))

    def watch_data(self, path: str, callback: Callable[[bytes | None, int], Any]) -> Any:
        """Call ``callback(data, version)`` now and after every change of ``path`` (``None, -1`` when
        it does not exist). kazoo's ``DataWatch``; same threading rules as ``watch_children``."""
        return self.client.DataWatch(path, lambda data, stat: callback(data, stat.version if stat else -1))
