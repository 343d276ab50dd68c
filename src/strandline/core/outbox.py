"""What the broker's components ask the shell to do, and the answers they wait for.

Every component of the core (the controller, the replica manager, the group coordinator, the
request router) is pure: it returns effects. Those that need an answer (a ZooKeeper result, another
broker's response, a timer) register a callback here under a token; the shell hands the answer to
:class:`strandline.broker.broker.Broker`, which passes it back through :meth:`Outbox.on_zk_result`,
:meth:`Outbox.on_broker_response` and :meth:`Outbox.tick`. One ``Outbox`` per broker, shared.

A callback may be a named wait: an object called with the answer whose ``repr`` says what its
component waits for (the controller's ``AwaitingLeaderAndIsrWrite(...)``, for one);
:meth:`Outbox.pending` lists every wait not yet answered, so that a trace can show them.
"""

from __future__ import annotations

import heapq
from functools import partial
from types import FunctionType, MethodType
from typing import Any, Callable, Protocol, Sequence

from strandline.core.effects import BrokerSend, Effect, ReadClusterState, ZkRequest

#: Kafka's request timeout per channel; ``request.timeout.ms`` for the others.
TIMEOUT_KEYS = {"fetcher": "replica.socket.timeout.ms", "controller": "controller.socket.timeout.ms"}


class BrokerAddress(Protocol):
    """Where another broker listens (``strandline.coordination.znodes.BrokerInfo`` is one)."""

    @property
    def id(self) -> int: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def describe_wait(callback: object) -> str:
    """What a registered callback waits for: a named wait's ``repr``; a function's qualified name."""
    if isinstance(callback, partial):
        return describe_wait(callback.func)
    if isinstance(callback, MethodType):
        return f"{type(callback.__self__).__qualname__}.{callback.__func__.__name__}"
    if isinstance(callback, FunctionType):
        return callback.__qualname__
    return repr(callback)


class Outbox:
    def __init__(self, config: Any) -> None:
        self.config = config
        self._next_token = 1
        self._zk_callbacks: dict[int, Callable[[Any, int], list[Effect]]] = {}
        self._broker_callbacks: dict[int, Callable[[bytes | None, int], list[Effect]]] = {}
        self._delayed: list[tuple[int, int, Callable[[int], list[Effect]]]] = []

    def new_token(self) -> int:
        token = self._next_token
        self._next_token = token + 1 if token < 0x7FFFFFFF else 1
        return token

    # -- ZooKeeper

    def zk(self, ops: Sequence[Any], callback: Callable[[Any, int], list[Effect]],
           transaction: bool = False) -> ZkRequest:
        """Run ``ops`` (a multi when ``transaction``); ``callback(results, now_ms)`` gets the results."""
        token = self.new_token()
        self._zk_callbacks[token] = callback
        return ZkRequest(token, ops, transaction)

    def read_cluster_state(self, callback: Callable[[Any, int], list[Effect]]) -> ReadClusterState:
        """Read the whole cluster; ``callback((brokers, topics, broker_epochs), now_ms)``."""
        token = self.new_token()
        self._zk_callbacks[token] = callback
        return ReadClusterState(token)

    def on_zk_result(self, token: int, results: Any, now_ms: int) -> list[Effect]:
        callback = self._zk_callbacks.pop(token, None)
        return callback(results, now_ms) if callback is not None else []

    # -- other brokers

    def send(self, broker: BrokerAddress | None, channel: str, frame_for: Callable[[int], bytes],
             callback: Callable[[bytes | None, int], list[Effect]], now_ms: int) -> list[Effect]:
        """One request to another broker; ``frame_for(correlation_id)`` encodes it. ``callback``
        gets the response frame, or None when the broker is unknown, the connection failed or no
        answer came within the channel's request timeout."""
        if broker is None:
            return callback(None, now_ms)
        host, port = broker.host, broker.port
        endpoint = getattr(broker, "endpoint", None)
        if endpoint is not None:            # the other broker's endpoint of the inter-broker listener
            address = endpoint(getattr(self.config, "inter_broker_listener", None))
            if address is None:
                return callback(None, now_ms)
            host, port = address
        token = self.new_token()
        self._broker_callbacks[token] = callback
        timeout_ms = self.config[TIMEOUT_KEYS.get(channel, "request.timeout.ms")]
        return [BrokerSend(token, broker.id, host, port, channel, frame_for(token), timeout_ms)]

    def on_broker_response(self, token: int, frame: bytes | None, now_ms: int) -> list[Effect]:
        callback = self._broker_callbacks.pop(token, None)
        return callback(frame, now_ms) if callback is not None else []

    # -- timers

    def after(self, due_ms: int, action: Callable[[int], list[Effect]]) -> list[Effect]:
        """Run ``action(now_ms)`` at ``due_ms`` (a retry or a backoff); returns no effects now."""
        heapq.heappush(self._delayed, (due_ms, self.new_token(), action))
        return []

    # -- what is waited for

    def pending(self) -> list[str]:
        """Every wait not yet answered, oldest first in each kind: ``zk``, ``broker`` (a response)
        and ``timer`` (with its due time), described by :func:`describe_wait`."""
        return ([f"zk {describe_wait(cb)}" for cb in self._zk_callbacks.values()]
                + [f"broker {describe_wait(cb)}" for cb in self._broker_callbacks.values()]
                + [f"timer at {due} {describe_wait(cb)}"
                   for due, _, cb in sorted(self._delayed, key=lambda entry: entry[:2])])

    def next_deadline_ms(self) -> int | None:
        return self._delayed[0][0] if self._delayed else None

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, _, action = heapq.heappop(self._delayed)
            effects.extend(action(now_ms))
        return effects
