"""The simulator's network: links between brokers (and clients) and the connections over them.

Messages on a link arrive in order, ``latency_ms`` (plus jitter, plus a slow link's extra) after
they leave; a cut link holds them, as TCP retransmits, until it heals. A channel is the sending end
of one connection (a broker's to another broker, a client's): requests with a timeout, answered in
order by the receiving broker; a timeout, a crash or a restart closes it, as Kafka's network client
does. Part of :class:`strandline.sim.cluster.SimCluster`, whose clock and brokers it uses.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from strandline.core.effects import BrokerSend, Send
from strandline.sim.node import Peer, ServerConn, SimBroker
from strandline.sim.world import SimWorld

CLIENT = "client"
#: a channel's key: its source (a broker id, or ("client", name)), its destination broker, its name
ChannelKey = tuple[Any, int, str]


@dataclass(eq=False)
class Channel:
    """The sending end of one connection: a broker's channel to another broker, or a client's."""

    src: Any                       # a broker id, or ("client", name)
    dst: int
    name: str
    gen: int
    dst_incarnation: int
    src_incarnation: int = 0
    waiting: dict[int, Callable[[bytes | None], None]] = field(default_factory=dict)
    closed: bool = False


class SimNetwork:
    def __init__(self, sim: SimWorld) -> None:
        self.sim = sim
        self.cut: set[tuple[Any, Any]] = set()             # directed links that drop (held) messages
        self.slow: dict[tuple[Any, Any], int] = {}          # extra latency of a directed link
        self.channels: dict[ChannelKey, Channel] = {}
        self.gens = 0
        self._held_links: dict[tuple[Any, Any], list[Callable[[], None]]] = collections.defaultdict(list)
        self._link_clock: dict[tuple[Any, Any], int] = {}


    def latency(self, src: Any, dst: Any) -> int:
        sim = self.sim
        jitter = sim.rng.randint(0, sim.jitter_ms) if sim.jitter_ms else 0
        return sim.latency_ms + jitter + self.slow.get((src, dst), 0) if self.slow else sim.latency_ms + jitter

    def transmit(self, src: Any, dst: Any, action: Callable[[], None]) -> None:
        """Carry a message from ``src`` to ``dst`` (broker ids, or CLIENT): first in, first out per
        link; while the link is cut it waits, as a TCP segment being retransmitted."""
        link = (src, dst)
        when = self.sim.now + self.latency(src, dst)
        last = self._link_clock.get(link, 0)
        if last > when:
            when = last
        self._link_clock[link] = when
        self.sim.schedule_at(when, functools.partial(self._deliver, link, action))

    def _deliver(self, link: tuple[Any, Any], action: Callable[[], None]) -> None:
        """A message arrives over ``link``, or waits while it is cut. (A method with its arguments
        bound, not a closure that names itself: such a closure is a reference cycle, garbage that
        only the cyclic collector frees, and the simulator makes one per message.)"""
        if link in self.cut:
            self._held_links[link].append(functools.partial(self._deliver, link, action))
            return
        action()

    def cut_link(self, src: int, dst: int) -> None:
        """Messages from broker ``src`` to broker ``dst`` stop arriving (one direction)."""
        self.cut.add((src, dst))

    def heal_link(self, src: int, dst: int) -> None:
        self.cut.discard((src, dst))
        for deliver in self._held_links.pop((src, dst), []):
            self.transmit(src, dst, deliver)

    def partition_brokers(self, group_a: Iterable[int], group_b: Iterable[int] | None = None) -> None:
        """Cut every link between ``group_a`` and ``group_b`` (default: every other broker), both ways."""
        a = set(group_a)
        b = set(group_b) if group_b is not None else set(self.sim.brokers) - a
        for x in a:
            for y in b:
                if x != y:
                    self.cut_link(x, y)
                    self.cut_link(y, x)

    def heal_all_links(self) -> None:
        for src, dst in sorted(self.cut, key=repr):
            self.heal_link(src, dst)
        self.slow.clear()

    def send(self, node: SimBroker, effect: Send) -> None:
        conn = node.conns.get(effect.conn_id)
        if conn is None:
            return
        reply_to, conn.reply_to = conn.reply_to, None
        if reply_to is not None:
            buffers = effect.buffers
            if len(buffers) == 2 and len(buffers[0]) == 4:      # the size, then the response: no copy
                body = buffers[1]
                reply_to(body if type(body) is bytes else bytes(body))
            else:
                data = b"".join(buffers)
                if data:
                    reply_to(data[4:])
        if effect.throttle_ms > 0:      # a throttled client's connection reads nothing for that long
            def unmute() -> None:
                conn.busy = False
                self.pump(node, effect.conn_id)
            self.sim.schedule_in(effect.throttle_ms, unmute)
            return
        conn.busy = False
        self.pump(node, effect.conn_id)

    def pump(self, node: SimBroker, conn_id: int) -> None:
        conn = node.conns.get(conn_id)
        while conn is not None and not conn.busy and conn.queue and node.core is not None and not node.paused:
            frame, conn.reply_to = conn.queue.popleft()
            conn.busy = True
            self.sim.apply(node, node.core.handle_request(conn_id, frame, self.sim.clock_of(node)))
            conn = node.conns.get(conn_id)

    def server_conn(self, node: SimBroker, peer: Peer) -> int:
        conn_id = node.by_peer.get(peer)
        if conn_id is None:
            conn_id = node.next_conn
            node.next_conn += 1
            node.conns[conn_id] = ServerConn(peer)
            node.by_peer[peer] = conn_id
        return conn_id

    def close_server_conn(self, node: SimBroker, conn_id: int) -> None:
        conn = node.conns.pop(conn_id, None)
        if conn is None:
            return
        node.forget_deadline()
        self.sim.touched.add(node.id)
        node.by_peer.pop(conn.peer, None)
        if node.core is not None:
            node.core.connection_closed(conn_id)
        channel = self.channels.get(self.channel_key_of(conn.peer, node.id))
        if channel is not None and channel.gen == conn.peer[-1]:
            src = channel.src if isinstance(channel.src, int) else CLIENT
            self.transmit(node.id, src, lambda: self.close_channel(channel, "closed by the peer"))

    @staticmethod
    def channel_key_of(peer: Peer, dst: int) -> ChannelKey:
        if len(peer) == 3:              # ("client", name, gen)
            return (("client", peer[1]), dst, "client")
        return (peer[1], dst, peer[2])

    # -- channels: requests with a timeout, answered in order

    def channel(self, src: Any, dst: int, name: str) -> Channel:
        key = (src, dst, name)
        channel = self.channels.get(key)
        target = self.sim.brokers.get(dst)
        incarnation = target.incarnation if target is not None else 0
        if channel is not None and (channel.closed or channel.dst_incarnation != incarnation):
            self.close_channel(channel, "the broker restarted")
            channel = None
        if channel is None:
            self.gens += 1
            source = self.sim.brokers.get(src) if isinstance(src, int) else None
            channel = Channel(src, dst, name, self.gens, incarnation,
                               source.incarnation if source is not None else 0)
            self.channels[key] = channel
        return channel

    def request(self, channel: Channel, request_id: int, frame: bytes, on_answer: Callable[[bytes | None], None],
                 timeout_ms: int, expect_answer: bool = True) -> None:
        """Send one request on ``channel``; ``on_answer(frame | None)`` (None: the connection failed
        or the request timed out, which closes the connection, as Kafka's network client does)."""
        src = channel.src if isinstance(channel.src, int) else CLIENT
        if expect_answer:
            channel.waiting[request_id] = on_answer

            def timed_out() -> None:
                if not channel.closed and request_id in channel.waiting:
                    self.close_channel(channel, "request timed out")
            self.sim.schedule_in(timeout_ms, timed_out)
        peer = ("client", channel.src[1], channel.gen) if src == CLIENT else \
            ("broker", channel.src, channel.name, channel.gen)

        def answer(response: bytes) -> None:
            def arrive() -> None:
                if channel.closed:
                    return
                callback = channel.waiting.pop(request_id, None)
                if callback is not None:
                    callback(response)
            self.transmit(channel.dst, src, arrive)

        self.transmit(src, channel.dst, functools.partial(self._arrive_at_target, channel, src, peer, frame, answer))

    def _arrive_at_target(self, channel: Channel, src: Any, peer: Peer, frame: bytes,
                          answer: Callable[[bytes], None]) -> None:
        """A request reaches the broker it was sent to (held while the broker is paused)."""
        if channel.closed:
            return
        target = self.sim.brokers.get(channel.dst)
        if target is None or target.core is None or target.incarnation != channel.dst_incarnation \
                or target.waiting_to_register:
            self.transmit(channel.dst, src, lambda: self.close_channel(channel, "connection refused"))
            return
        if target.paused:
            target.held.append(functools.partial(self._arrive_at_target, channel, src, peer, frame, answer))
            return
        conn_id = self.server_conn(target, peer)
        target.conns[conn_id].queue.append((frame, answer))
        self.pump(target, conn_id)

    def close_channel(self, channel: Channel, reason: str) -> None:
        if channel.closed:
            return
        channel.closed = True
        key = (channel.src, channel.dst, channel.name)
        if self.channels.get(key) is channel:
            del self.channels[key]
        waiting = list(channel.waiting.values())
        channel.waiting.clear()
        for callback in waiting:
            callback(None)
        src = channel.src if isinstance(channel.src, int) else CLIENT
        peer = ("client", channel.src[1], channel.gen) if src == CLIENT else \
            ("broker", channel.src, channel.name, channel.gen)

        def close_far_end() -> None:
            target = self.sim.brokers.get(channel.dst)
            if target is not None and target.incarnation == channel.dst_incarnation:
                conn_id = target.by_peer.get(peer)
                if conn_id is not None:
                    self.close_server_conn(target, conn_id)
        self.transmit(src, channel.dst, close_far_end)

    def broker_send(self, node: SimBroker, effect: BrokerSend) -> None:
        channel = self.channel(node.id, effect.broker_id, effect.channel)
        token, incarnation = effect.token, node.incarnation

        def on_answer(frame: bytes | None) -> None:
            self.sim.run_on(node.id, incarnation, 0, lambda core, t: core.on_broker_response(token, frame, t))
        self.request(channel, token, effect.frame, on_answer, effect.timeout_ms)

    def reset_broker(self, broker_id: int) -> None:
        """A broker stopped: the kernel resets connections to it; its own channels close."""
        for channel in [c for c in self.channels.values() if c.dst == broker_id or c.src == broker_id]:
            if channel.dst == broker_id:
                src = channel.src if isinstance(channel.src, int) else CLIENT
                self.transmit(broker_id, src, functools.partial(self.close_channel, channel, "connection reset"))
            else:
                self.close_channel(channel, "the broker stopped")
