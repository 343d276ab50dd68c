"""``ControllerContext``: what the controller knows while it is in office (Kafka's ControllerContext).

A broker that is not the controller has none. A new one is made each time the broker takes office
and read from ZooKeeper (the live brokers and their registrations, every topic with its assignment
and partition states); the controller keeps it current as it decides, so its decisions never rest
on a broker's metadata cache. Callbacks of an earlier term hold their own context: once the broker
resigned, or took office again, they act on nothing.

What a term waits for (a ZooKeeper answer, a broker's response, a retry's timer) is a named wait,
an :class:`Awaiting` of the component whose state the answer changes: its ``repr`` says what is
waited for and in which term, for the outbox's list of pending waits
(:meth:`strandline.core.outbox.Outbox.pending`) and the simulator's trace.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.core.outbox import describe_wait
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import BrokerInfo

#: ``done(error, message, now_ms)``: the outcome of creating a topic.
TopicCreated = Callable[[ErrorCode, "str | None", int], list[Effect]]


@dataclass
class ControllerContext:
    epoch: int                              # the controller epoch this broker was elected in
    epoch_version: int | None               # /controller_epoch's version then: every write checks it
    ready: bool = False                     # the cluster has been read from ZooKeeper
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)     # each registration's czxid (KIP-380)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)           # brokers in controlled shutdown
    #: brokers that registered after an unclean shutdown and are being taken out of the ISRs and
    #: ELRs (eligible leader replicas, KIP-966)
    unclean_shutdown: set[int] = field(default_factory=set)
    #: partitions whose ISR and ELR are empty with an unclean recovery's try in flight (KIP-966)
    recovering: set[tuple[str, int]] = field(default_factory=set)
    creating: dict[str, list[TopicCreated]] = field(default_factory=dict)   # topics being written
    #: elections in flight per partition, and the brokers owed a partition's state once they end
    electing: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)
    owed_states: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    #: a broker change that came while the cluster was being read, handled right after
    pending_brokers: tuple[dict[int, BrokerInfo], dict[int, int], int | None] | None = None
    #: the number of the newest listing of the live brokers applied (the shell numbers them in
    #: the order they were read): an older one, delivered late, is not applied
    brokers_listing: int | None = None
    #: partition reassignments in progress: (target replicas, original replicas) per partition
    reassigning: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    #: moves being finished now: the replicas each partition had before its end narrowed them
    completing: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: writes of topic znodes, one at a time per topic (each written from the state then current)
    topic_writes: dict[str, collections.deque[Callable[[int], list[Effect]]]] = field(default_factory=dict)
    topic_writing: set[str] = field(default_factory=set)
    #: topics being deleted, and what each deletion asked for waits for (controller.deletion)
    deleting: dict[str, list[TopicCreated]] = field(default_factory=dict)
    deletions_told: set[str] = field(default_factory=set)     # deletions whose brokers are being told
    #: the moves /admin/reassign_partitions asks for, removed from it as each is done
    zk_requested: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: when the next automatic preferred-leader check is due (auto.leader.rebalance.enable): 5 s
    #: after this term read the cluster, then every leader.imbalance.check.interval.seconds
    leader_rebalance_due_ms: int | None = None

    def all_partitions(self) -> list[tuple[TopicMetadata, int]]:
        return [(t, i) for t in self.topics.values() for i in sorted(t.assignment)]

    def live_broker_ids(self) -> list[int]:
        return sorted(self.live_brokers)

    def hold_brokers(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], listing: int | None) -> None:
        """Keep a broker change that came while the cluster is read (the newest, if several)."""
        held = self.pending_brokers
        if held is None or not _older(listing, held[2]):
            self.pending_brokers = (dict(brokers), dict(epochs), listing)

    def newer_listing(self, listing: int | None) -> bool:
        """Whether a listing of the live brokers is newer than the last applied (then it is the
        last applied); an unnumbered one (None) always is."""
        if _older(listing, self.brokers_listing):
            return False
        self.brokers_listing = listing if listing is not None else self.brokers_listing
        return True

    def queue_topic_write(self, name: str, write: Callable[[int], list[Effect]], now_ms: int,
                          first: bool = False) -> list[Effect]:
        """Run ``write(now_ms)`` once no other write of topic ``name``'s znode is in flight (before
        those waiting, if ``first``); the write calls :meth:`topic_write_done` once its outcome is
        known."""
        queue = self.topic_writes.setdefault(name, collections.deque())
        queue.appendleft(write) if first else queue.append(write)
        return self._next_topic_write(name, now_ms)

    def topic_write_done(self, name: str, now_ms: int) -> list[Effect]:
        self.topic_writing.discard(name)
        return self._next_topic_write(name, now_ms)

    def _next_topic_write(self, name: str, now_ms: int) -> list[Effect]:
        queue = self.topic_writes.get(name)
        if name in self.topic_writing or not queue:
            if queue is not None and not queue:
                del self.topic_writes[name]
            return []
        self.topic_writing.add(name)
        return queue.popleft()(now_ms)


def _older(listing: int | None, than: int | None) -> bool:
    """Whether a listing of the live brokers was read no later than listing ``than``."""
    return listing is not None and than is not None and listing <= than


@dataclass(eq=False, repr=False)
class Awaiting:
    """A wait of the term ``ctx``, registered with the outbox and called with the answer. Its
    ``repr`` names it and the fields that say what it waits for (the callables among them by
    name), in the term's controller epoch."""

    ctx: ControllerContext

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={_shown(getattr(self, f.name))}" for f in fields(self)
                          if f.repr and f.name != "ctx")
        return f"{type(self).__name__}({shown}; controller epoch {self.ctx.epoch})"


def _shown(value: Any) -> str:
    if value is None or not callable(value):
        return repr(sorted(value)) if isinstance(value, (set, frozenset)) else repr(value)
    return describe_wait(value)
