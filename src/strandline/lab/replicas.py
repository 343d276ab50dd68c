"""What the lab reads of each replica: its state over time, and its log at the end (the
producers' operations are recorded by :class:`strandline.load.history.Workload`).

* :class:`Sampler`: every ``interval_s``, asks each running broker for its own view (Metadata:
  the leader, leader epoch and ISR it knows, the controller) and for its replica's log end offset
  (ListOffsets from Kafka's debugging replica id, -2, which any replica answers), and the leader
  for the high watermark.
* :func:`read_replica_logs`: after healing, every batch of every replica, read from the log
  directories on disk (the lab owns them), with its bytes' digest and its records' values.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from strandline.errors import StrandlineError
from strandline.lab.cluster import LabBroker, LabCluster
from strandline.load.history import now_ms
from strandline.protocol.records import iter_batches, iter_records
from strandline.runtime.client import KafkaConnection

METADATA, LIST_OFFSETS = 3, 2
DEBUGGING_REPLICA_ID, CONSUMER_REPLICA_ID = -2, -1


#: a complete batch of a log: (partition, base offset, last offset, leader epoch, digest of its bytes,
#: [(offset, value)] of its records)
StoredBatch = tuple[int, int, int, int, str, list[tuple[int, str]]]


@dataclass
class ReplicaView:
    """One broker's answer about one partition at one moment."""

    time_ms: float
    broker: int
    partition: int
    state: str              # up | paused | down | unreachable
    leader: int = -1        # the leader this broker knows of
    leader_epoch: int = -1
    isr: str = ""
    controller: int = -1
    leo: int = -1           # this replica's log end offset
    hw: int = -1            # its high watermark (a follower's as last checkpointed, within 200 ms)


class Sampler:
    """Polls every broker every ``interval_s`` until stopped; ``views`` holds what it saw."""

    def __init__(self, cluster: LabCluster, topic: str, partitions: int, interval_s: float = 0.2) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.views: list[ReplicaView] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab-sampler", daemon=True)
        self._connections: dict[int, KafkaConnection] = {}
        self._lock = threading.Lock()
        self._latest: dict[tuple[int, int], ReplicaView] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for conn in self._connections.values():
            conn.close()

    def latest(self) -> dict[tuple[int, int], ReplicaView]:
        """The last view of each (broker, partition)."""
        with self._lock:
            return dict(self._latest)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for b in list(self.cluster.brokers.values()):
                t = now_ms()
                if not b.alive or b.paused:
                    self._connections.pop(b.id, None)
                    state = "paused" if b.alive else "down"
                    self._add([ReplicaView(t, b.id, p, state) for p in range(self.partitions)])
                    continue
                try:
                    self._add(self.ask(b, t))
                except (StrandlineError, OSError, AttributeError, ValueError):
                    conn = self._connections.pop(b.id, None)
                    if conn is not None:
                        conn.close()
                    self._add([ReplicaView(t, b.id, p, "unreachable") for p in range(self.partitions)])

    def _add(self, views: list[ReplicaView]) -> None:
        with self._lock:
            self.views.extend(views)
            for v in views:
                self._latest[(v.broker, v.partition)] = v

    def ask(self, b: LabBroker, t: float) -> list[ReplicaView]:
        conn = self._connections.get(b.id)
        if conn is None:
            conn = self._connections[b.id] = KafkaConnection(b.address, timeout_s=0.5, client_id="strandline-lab")
        meta = conn.request(METADATA, 9, {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False,
                                          "include_cluster_authorized_operations": False,
                                          "include_topic_authorized_operations": False})
        known = {p.partition_index: p for t_ in meta.topics for p in t_.partitions}
        parts = [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                 for p in range(self.partitions)]
        leo = self._offsets(conn, DEBUGGING_REPLICA_ID, parts)
        hw = self._offsets(conn, CONSUMER_REPLICA_ID, parts)        # answered by the leader only
        if len(hw) < self.partitions:
            checkpointed = self._checkpointed_hw(b)
            for p in range(self.partitions):
                hw.setdefault(p, checkpointed.get((self.topic, p), -1))
        views = []
        for p in range(self.partitions):
            m = known.get(p)
            views.append(ReplicaView(
                t, b.id, p, "up", int(m.leader_id) if m else -1, int(m.leader_epoch) if m else -1,
                ",".join(str(int(r)) for r in sorted(m.isr_nodes)) if m else "", int(meta.controller_id),
                leo.get(p, -1), hw.get(p, -1)))
        return views

    @staticmethod
    def _checkpointed_hw(b: LabBroker) -> dict[tuple[str, int], int]:
        """A follower's high watermark as it last checkpointed it (Kafka has no request for it;
        the lab's brokers checkpoint every replica.high.watermark.checkpoint.interval.ms=200)."""
        from strandline.log import checkpoint
        from strandline.log.manager import HIGH_WATERMARK_CHECKPOINT
        from strandline.runtime.disk import OsDisk

        try:
            return checkpoint.read_offsets(OsDisk(), str(b.log_dir / HIGH_WATERMARK_CHECKPOINT))
        except Exception:  # noqa: BLE001 - absent, or being replaced: no value this time
            return {}

    def _offsets(self, conn: KafkaConnection, replica_id: int, parts: list[dict[str, int]]) -> dict[int, int]:
        resp = conn.request(LIST_OFFSETS, 5, {"replica_id": replica_id, "isolation_level": 0,
                                               "topics": [{"name": self.topic, "partitions": parts}]})
        return {int(p.partition_index): int(p.offset) for t_ in resp.topics for p in t_.partitions
                if p.error_code == 0}


def read_replica_logs(log_dir: Path, topic: str, partitions: int) -> list[StoredBatch]:
    """Every complete batch in a broker's log directory: (partition, base_offset, last_offset,
    leader_epoch, digest of the batch's bytes, [values])."""
    out: list[StoredBatch] = []
    for p in range(partitions):
        for segment in sorted((log_dir / f"{topic}-{p}").glob("*.log")):
            data = segment.read_bytes()
            for pos, header in iter_batches(data):
                digest = hashlib.sha1(data[pos:pos + header.size]).hexdigest()
                values = [] if header.is_control else [
                    (r.offset, r.value.decode(errors="replace") if r.value is not None else "")
                    for r in iter_records(data, pos, header)]
                out.append((p, header.base_offset, header.last_offset, header.partition_leader_epoch,
                            digest, values))
    return out
