"""The asyncio shell around the broker core: sockets, the clock, timers and ZooKeeper calls.

Each client connection (:mod:`strandline.runtime.connection`) hands the core its requests one at a
time, in order; the shell carries out the effects the core returns: answers and closes, requests
to other brokers (:mod:`strandline.runtime.channels`), ZooKeeper calls on worker threads, and
checkpoint writes and segment flushes (:mod:`strandline.runtime.flushers`).

Every event reaches the core through :meth:`BrokerShell.run`. An exception there, in a task of
the shell or in any callback of the loop is not an outcome the broker can go on from (the core's
expected outcomes are error codes, ZooKeeper's are ``ZkError`` results): :class:`Stopper` logs it
as one ERROR line and the broker stops, exiting non-zero.

A client's request cannot stop the broker that way: the request router
(:meth:`strandline.broker.apis.KafkaApis.handle_request`) answers a request whose handling fails
with UNKNOWN_SERVER_ERROR, or closes its connection when its frame cannot be parsed, and lets
only a :class:`~strandline.errors.BrokenInvariant` of the broker's own state, a failing disk
(``OSError``) or ``MemoryError`` through (``STOPS_THE_BROKER``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Coroutine

from strandline.broker.broker import Broker
from strandline.coordination.store import OpResult, ZkError
from strandline.core.effects import (BrokerSend, Close, FlushFiles, LogLine, ReadClusterState, Send, SetLoggerLevel,
                                     WriteCheckpoint, ZkRequest)
from strandline.errors import describe_exception
from strandline.runtime.channels import BrokerChannels
from strandline.runtime.clock import now_ms
from strandline.runtime.connection import PLAINTEXT_SPEC, Connection, ListenerSpec
from strandline.runtime.flushers import CheckpointWriter, SegmentFlusher
from strandline.runtime.live_brokers import BrokerListings, read_full_cluster_state
from strandline.runtime.loggers import set_logger_level
from strandline.core.effects import Effect

#: How soon a ZooKeeper request made while the session has no connection is answered CONNECTION_LOSS.
DISCONNECTED_ZK_ANSWER_S = 0.1

log = logging.getLogger("strandline.broker")


class Stopper:
    """Ends the broker: a stop asked for (a signal), or the first failure of the shell's tasks and
    callbacks, reported as one ERROR line naming what failed (the traceback at DEBUG)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.requested = asyncio.Event()
        self.failure: str | None = None
        loop.set_exception_handler(self._on_loop_exception)

    def fail(self, what: str, exc: BaseException | None = None) -> None:
        if self.failure is None:
            self.failure = f"{what} failed: {describe_exception(exc)}" if exc is not None else what
            log.error("Stopping the broker: %s", self.failure)
            if exc is not None:
                log.debug("Traceback of the failure", exc_info=exc)
        self.requested.set()

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.fail(context.get("message") or "a callback of the event loop", context.get("exception"))


class BrokerShell:
    """Runs one :class:`Broker` core on an asyncio loop."""

    def __init__(self, broker: Broker, store: Any, max_request_bytes: int, stopper: Stopper,
                 monitoring: Any = None, client_security: Any = None) -> None:
        self.broker = broker
        self.monitoring = monitoring      # runtime.monitoring.Monitoring, or None without an endpoint
        self.request_metrics = monitoring.requests if monitoring is not None else None
        self.timeline = monitoring.timeline if monitoring is not None else None
        self.store = store
        self.broker_listings = BrokerListings(store)      # every read of /brokers/ids, numbered
        self.stopper = stopper
        self.max_request_bytes = max_request_bytes
        self.loop = asyncio.get_running_loop()
        self.connections: dict[int, Connection] = {}
        self._next_conn = 1
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.base_events.Server | None = None     # the first listener's
        self.servers: list[asyncio.base_events.Server] = []
        self.channels = BrokerChannels(self.loop, self._on_broker_response, stopper.fail, client_security)
        self.controlled_shutdown_done = asyncio.Event()
        self.checkpoints = CheckpointWriter(lambda: broker.logs.disk, self.spawn)
        self.segment_flusher = SegmentFlusher(self.spawn, self._on_files_flushed)
        self.closing = False                  # close() began: the core gets no more events or ticks

    def protocol_factory(self, spec: ListenerSpec = PLAINTEXT_SPEC) -> Connection:
        conn = Connection(self, self._next_conn, spec)
        self._next_conn += 1
        return conn

    async def listen(self, host: str, port: int, spec: ListenerSpec = PLAINTEXT_SPEC) -> int:
        """Serve a listener (each its own server socket); returns the port it listens on."""
        server = await self.loop.create_server(lambda: self.protocol_factory(spec), host, port,
                                               reuse_address=True, backlog=1024, ssl=spec.ssl_context,
                                               ssl_handshake_timeout=10.0 if spec.ssl_context else None)
        self.servers.append(server)
        if self.server is None:
            self.server = server
        self.reschedule()
        bound: int = server.sockets[0].getsockname()[1]
        return bound

    def run(self, what: str, event: Callable[[], list[Effect]]) -> None:
        """Hand one event to the core (``event()`` returns its effects) and carry them out; any
        exception stops the broker. Once it is stopping or closing, events are dropped."""
        if self.stopper.failure is not None or self.closing:
            return
        try:
            self.apply(event())
        except Exception as exc:
            self.stopper.fail(what, exc)

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                conn = self.connections.get(effect.conn_id)
                if conn is not None:
                    conn.send(effect.buffers, effect.throttle_ms)
                    if conn.queue:
                        self.loop.call_soon(conn.pump)
            elif isinstance(effect, Close):
                conn = self.connections.get(effect.conn_id)
                if conn is not None:
                    conn.close(effect.reason)
            elif isinstance(effect, BrokerSend):
                self.channels.send(effect)
            elif isinstance(effect, ReadClusterState):
                self.spawn("reading the cluster state from ZooKeeper", self._read_cluster_state(effect.token))
            elif isinstance(effect, ZkRequest):
                self.spawn("a ZooKeeper request", self._run_zk(effect))
            elif isinstance(effect, WriteCheckpoint):
                self.checkpoints.write(effect.path, effect.content)
            elif isinstance(effect, FlushFiles):
                self.segment_flusher.flush(effect)
            elif isinstance(effect, SetLoggerLevel):
                set_logger_level(effect)
            elif isinstance(effect, LogLine):
                log.log(logging.getLevelName(effect.level.upper()), "%s", effect.message,
                        extra={"kind": effect.kind} if effect.kind else None)
                if effect.event is not None and self.timeline is not None:
                    self.timeline.record(effect.event, effect.message, effect.partition, effect.level)
            else:
                raise TypeError(f"unknown effect {effect!r}")
        if self.broker.controlled_shutdown_done:
            self.controlled_shutdown_done.set()
        self.reschedule()

    def spawn(self, what: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of the shell; if it raises, the broker stops."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and (exc := task.exception()) is not None:
                self.stopper.fail(what, exc)

        task.add_done_callback(done)

    async def _read_cluster_state(self, token: int) -> None:
        try:
            state = await asyncio.to_thread(read_full_cluster_state, self.store, self.broker_listings)
        except Exception as exc:  # ZooKeeper unreachable: the controller cannot start; say so, try later
            log.warning("Reading the cluster state from ZooKeeper failed: %s", exc)
            self.loop.call_later(1.0, lambda: self.spawn("reading the cluster state from ZooKeeper",
                                                         self._read_cluster_state(token)))
            return
        self.run("applying the cluster state read from ZooKeeper",
                 lambda: self.broker.on_zk_result(token, state, now_ms()))

    async def _run_zk(self, request: ZkRequest) -> None:
        ops = list(request.ops)
        if not self.store.connected:
            # Kazoo would queue it until the connection returns, and the core would wait that long
            # without knowing whether ZooKeeper has it. Kafka's leader blocks its appends during such
            # a write; ours learns within DISCONNECTED_ZK_ANSWER_S that the outcome is unknown and
            # acts on it (NET-4). The pause keeps a caller that retries at once from spinning.
            await asyncio.sleep(DISCONNECTED_ZK_ANSWER_S)
            results = [OpResult(ZkError.CONNECTION_LOSS) for _ in ops]
        elif request.transaction:
            results = await asyncio.to_thread(self.store.transaction, ops)
        else:
            results = await asyncio.to_thread(self.store.execute, ops)
        self.run("applying a ZooKeeper result", lambda: self.broker.on_zk_result(request.token, results, now_ms()))

    def _on_files_flushed(self, token: int) -> None:
        self.run("a rolled log segment flushed", lambda: self.broker.on_files_flushed(token, now_ms()))

    def _on_broker_response(self, token: int, frame: bytes | None) -> None:
        self.run("handling another broker's answer", lambda: self.broker.on_broker_response(token, frame, now_ms()))

    def reschedule(self) -> None:
        if self.closing:
            return
        deadline = self.broker.next_deadline_ms()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            delay = max(0.0, (deadline - now_ms()) / 1000.0)
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.run("the broker's timers", lambda: self.broker.tick(now_ms()))

    async def close(self) -> None:
        self.closing = True
        self.channels.close()
        for server in self.servers:
            server.close()
        for conn in list(self.connections.values()):
            if conn.transport is not None:
                conn.transport.close()
        for server in self.servers:
            await server.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        # Before the clean shutdown writes the checkpoints itself, so no older write lands after it.
        await self.checkpoints.drained()
        for task in list(self._tasks):
            task.cancel()

