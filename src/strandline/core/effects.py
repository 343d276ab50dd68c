"""What the broker core asks its shell to do. The core returns these; it never does network I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``buffers`` to connection ``conn_id``; this answers that connection's current request.

    An empty ``buffers`` list answers without a response (acks=0): the connection may go on.
    ``throttle_ms``: the client went over its quota; read no further request of this connection
    for that long after this answer (Kafka mutes a throttled client's channel).
    """

    conn_id: int
    buffers: Sequence[bytes | bytearray | memoryview] = ()
    throttle_ms: int = 0


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn_id`` (malformed input, or acks=0 with an error)."""

    conn_id: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ZkRequest:
    """Run ZooKeeper operations; the result goes to ``Broker.on_zk_result(token, results)``.

    ``transaction`` runs all of ``ops`` atomically (a ZooKeeper multi).
    """

    token: int
    ops: Sequence[Any]
    transaction: bool = False


@dataclass(frozen=True, slots=True)
class LogLine:
    """A line for the broker's log. ``event`` names a cluster event worth a place on the operator's
    timeline (``leader``, ``offline``, ``unclean``, ``isr_shrink``, ``isr_expand``, ``broker_gone``,
    ``broker_joined``, ``controlled_shutdown``), with the partition it concerns, if any. ``kind``
    names what a line that may repeat many times says (a refused request, a failing fetch),
    whatever its details: the shell's log keeps the first line of a kind and counts the others
    (:mod:`strandline.runtime.loggers`)."""

    level: str
    message: str
    event: str | None = None
    partition: tuple[str, int] | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class SetLoggerLevel:
    """Set the Python logger ``logger`` (``root``: the root logger) to the log4j level ``level``
    (TRACE, DEBUG, INFO, WARN, ERROR, FATAL), or let it inherit its parent's when None."""

    logger: str
    level: str | None


@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Replace the file ``path`` by ``content`` atomically and durably (``.tmp``, fsync, rename,
    fsync the directory), away from the event loop, as Kafka's scheduler thread writes its
    checkpoint files: an fsync can take a second on a busy disk. Writes land in the order given; a
    write waiting behind another gives way to a newer one of the same path. A write that fails stops
    the broker (Kafka takes the log dir offline)."""

    path: str
    content: bytes


@dataclass(frozen=True, slots=True)
class FlushFiles:
    """fsync the files at ``paths`` (a rolled segment's and the roll's producer snapshot) away
    from the event loop, as Kafka's scheduler thread flushes a segment after a roll, then report it
    with ``Broker.on_files_flushed(token)``. A file deleted by then is skipped. Flushes complete in
    the order given; one that fails stops the broker (Kafka takes the log dir offline)."""

    paths: tuple[str, ...]
    token: int


@dataclass(frozen=True, slots=True)
class BrokerSend:
    """Send a request frame (no size prefix; its correlation id is ``token``) to another broker.

    The shell keeps one connection per ``(broker_id, channel)``: the controller's requests, the
    replica fetcher and forwarded requests each get their own, so a long-polling fetch never
    delays a LeaderAndIsr. The response frame goes to ``Broker.on_broker_response(token, frame)``;
    ``frame`` is None when the connection failed before the answer came, or when no answer came
    within ``timeout_ms``: the shell then closes the connection, as Kafka's network client does
    (``replica.socket.timeout.ms`` for the fetcher, ``controller.socket.timeout.ms`` for the
    controller, ``request.timeout.ms`` otherwise).
    """

    token: int
    broker_id: int
    host: str
    port: int
    channel: str
    frame: bytes
    timeout_ms: int = 30000


@dataclass(frozen=True, slots=True)
class ReadClusterState:
    """Read the whole cluster from ZooKeeper (what a newly elected controller needs): the result,
    ``(brokers, topics, broker_epochs, listing)``, goes to ``Broker.on_zk_result(token, result)``;
    ``listing`` numbers its read of the live brokers among the shell's others (see
    ``Broker.on_brokers_changed``), None when unnumbered."""

    token: int


#: Everything the core may ask of its shell; the shell (:mod:`strandline.runtime.server`) and the
#: simulator (:mod:`strandline.sim.cluster`) handle each of these.
Effect = (Send | Close | ZkRequest | LogLine | SetLoggerLevel | WriteCheckpoint | FlushFiles | BrokerSend
          | ReadClusterState)
