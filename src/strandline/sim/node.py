"""One simulated machine: a broker's core (when it runs), its disk, its clock and connections."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.broker.broker import Broker
from strandline.sim.disk import MemoryDisk

#: Who a connection is from: ("client", name, gen) or ("broker", source id, channel, gen)
Peer = tuple[str, str, int] | tuple[str, int, str, int]

#: A broker's cached next deadline, not yet asked
STALE = object()


@dataclass
class ServerConn:
    """A connection a broker accepted: requests are answered one at a time, in order."""

    peer: Peer
    queue: collections.deque[tuple[bytes, Callable[[bytes], None]]] = field(
        default_factory=collections.deque)                                # (frame, reply_to)
    reply_to: Callable[[bytes], None] | None = None                       # of the request in hand
    busy: bool = False


@dataclass
class SimBroker:
    id: int
    disk: MemoryDisk
    core: Broker | None = None
    session: int = 0
    incarnation: int = 0
    paused: bool = False
    clock_offset_ms: int = 0
    held: list[Callable[[], object]] = field(default_factory=list)     # what waits while it is paused
    conns: dict[int, ServerConn] = field(default_factory=dict)
    by_peer: dict[Peer, int] = field(default_factory=dict)
    next_conn: int = 1
    log: list[str] = field(default_factory=list)
    events: list[tuple[str, tuple[str, int] | None]] = field(default_factory=list)   # the timeline's (kind, partition)
    zk_lost_at: int | None = None    # since when ZooKeeper has not heard from it (cut, paused)
    session_expired: bool = False    # ZooKeeper expired its session; it learns so on reconnecting
    waiting_to_register: bool = False
    deadline: Any = STALE            # cached next timer (sim clock), or STALE

    def __setattr__(self, name: str, value: Any) -> None:
        # whatever changes how the broker runs makes its cached deadline stale
        if name in ("core", "paused", "clock_offset_ms"):
            object.__setattr__(self, "deadline", STALE)
        object.__setattr__(self, name, value)

    def forget_deadline(self) -> None:
        """Something reached the broker: its next timer must be asked again."""
        object.__setattr__(self, "deadline", STALE)

    @property
    def alive(self) -> bool:
        return self.core is not None
