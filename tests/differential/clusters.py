"""The two clusters the corpus is sent to: a real Apache Kafka 3.9 (3 brokers, ids 1-3, on the
ZooKeeper of the Strandline cluster under Kafka's own chroot ``/kafka-3.9``), started with
``strandline.reference``'s Python API, and a 3-broker Strandline (``strandline up``, ids 1-3).

Both get the same settings that shape answers (internal topics' partition counts, no initial
rebalance delay, no topics created by Metadata v0-v3 or Produce: where they would be placed is
each controller's random choice); everything else is each broker's default, which is Kafka's for both.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

from strandline.errors import StrandlineError

#: settings of every broker of both clusters (Kafka's keys)
SETTINGS = [
    "offsets.topic.num.partitions=3",
    "transaction.state.log.num.partitions=3",
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "group.initial.rebalance.delay.ms=0",
    "auto.create.topics.enable=false",
]
BROKERS = (1, 2, 3)
TIMEOUT_S = 40.0


class Closed(Exception):
    """The broker closed the connection instead of answering."""


class Conn:
    """One connection to one broker: frames out, frames back (the size prefix handled here)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.correlation_id = 0

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.sock

    def next_id(self) -> int:
        self.correlation_id += 1
        return self.correlation_id

    def exchange(self, frame: bytes, expect_answer: bool = True) -> bytes | None:
        """Send ``frame`` (without its size); the answer's frame (without its size), None when no
        answer is due; :class:`Closed` when the broker closed the connection."""
        sock = self._connect()
        try:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            if not expect_answer:
                return None
            size = struct.unpack(">i", self._read(4))[0]
            return self._read(size)
        except (ConnectionError, Closed) as exc:
            self.close()
            raise Closed(str(exc)) from None
        except OSError:                 # a timeout: the connection is out of step, not reused
            self.close()
            raise

    def _read(self, n: int) -> bytes:
        assert self.sock is not None
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise Closed("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


@dataclass
class Side:
    """One cluster as the runner sees it: its name, each broker's port, a connection per broker."""

    name: str
    ports: dict[int, int]
    conns: dict[int, Conn] = field(default_factory=dict)

    def conn(self, broker: int) -> Conn:
        if broker not in self.conns:
            self.conns[broker] = Conn(self.ports[broker])
        return self.conns[broker]

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()


class KafkaCluster:
    """Kafka 3.9's brokers, started and stopped by PID with ``strandline.reference``'s API."""

    def __init__(self, root: Path, ports: list[int], zk_connect: str) -> None:
        from strandline.reference import ensure_kafka
        from strandline.reference.cluster import KafkaNode
        from strandline.launch.zookeeper import check_java

        self.dist = ensure_kafka("3.9")
        self.java = check_java(17)
        self.zk_connect = zk_connect
        self.nodes = [KafkaNode(b, ports[i], root) for i, b in enumerate(BROKERS)]

    def start(self, timeout_s: float = 180) -> "KafkaCluster":
        from strandline.reference.cluster import node_properties, start_node, wait_ready

        for node in self.nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            node.config_path.write_text(node_properties(self.dist, node, self.nodes, self.zk_connect, SETTINGS))
        try:
            for node in self.nodes:
                start_node(self.dist, node, self.java)
            wait_ready(self.nodes, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def side(self) -> Side:
        return Side("kafka", {n.id: n.port for n in self.nodes})

    def stop(self) -> None:
        from strandline.reference.cluster import stop_nodes

        stop_nodes(self.nodes, 30.0)


def strandline_side(bootstrap: str) -> Side:
    ports = [int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",")]
    if len(ports) != len(BROKERS):
        raise StrandlineError(f"expected {len(BROKERS)} brokers in {bootstrap}")
    return Side("strandline", dict(zip(BROKERS, ports)))
