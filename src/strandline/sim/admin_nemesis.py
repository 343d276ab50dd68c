"""The explorer's admin faults: requests an operator sends in the middle of the other faults,
never awaited (a refusal is part of the run): partition moves (``--reassign``), partitions added
(``--add-partitions``) and records deleted (``--delete-records``)."""

from __future__ import annotations

import random
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.sim.cluster import SimCluster

MAX_ADDED_PARTITIONS = 3      # partitions the nemesis adds to the topic at most (--add-partitions)


class AdminNemesis:
    def __init__(self, sim: SimCluster, topic: str, partitions: int, replication_factor: int,
                 note: Callable[[str], None], partition_count: Callable[[], int]) -> None:
        self.sim = sim
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.note = note
        self.partition_count = partition_count      # the topic's partitions, as ZooKeeper has them

    def _controller(self) -> int | None:
        controller = self.sim.controller_id
        return None if controller < 0 or self.sim.brokers[controller].core is None else controller

    def reassign(self, index: int, rng: random.Random) -> None:
        """Ask the controller to move a partition to three brokers (or, now and then, to cancel
        its move)."""
        controller = self._controller()
        if controller is None:
            return
        if rng.random() < 0.2:
            target = None
            self.note(f"nemesis: cancel the reassignment of partition {index}")
        else:
            target = rng.sample(sorted(self.sim.brokers), self.replication_factor)
            self.note(f"nemesis: reassign partition {index} to {target}")
        body = {"timeout": 30000, "topics": [{"name": self.topic, "partitions": [
            {"partition_index": index, "replicas": target}]}]}
        self.sim.request(controller, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, "admin")

    def add_partition(self) -> None:
        """Ask the controller for one more partition of the topic (at most
        ``MAX_ADDED_PARTITIONS`` in a run; a move of the topic in progress refuses it). Nobody
        writes to the new partitions: the final checks want each led by a full ISR and listed in
        the topic znode."""
        controller = self._controller()
        if controller is None:
            return
        count = self.partition_count() + 1
        if count > self.partitions + MAX_ADDED_PARTITIONS:
            return
        self.note(f"nemesis: grow the topic to {count} partitions")
        body = {"topics": [{"name": self.topic, "count": count, "assignments": None}], "timeout_ms": 30000,
                "validate_only": False}
        self.sim.request(controller, ApiKey.CREATE_PARTITIONS, 1, body, "admin")

    def delete_records(self, index: int, rng: random.Random) -> int | None:
        """Ask the partition's leader (as ZooKeeper names it) to delete the records below an
        offset between its log start offset and the middle of what it holds below its high
        watermark; returns that offset (the records below it may be gone from then on), None if
        nothing was asked."""
        sim = self.sim
        leader = sim.state(self.topic, index).leader
        node = sim.brokers.get(leader)
        partition = node.core.partitions.get((self.topic, index)) if node is not None and node.core else None
        if partition is None:
            return None
        start = partition.log.log_start_offset
        offset = rng.randint(start, max(start, (start + partition.high_watermark) // 2))
        self.note(f"nemesis: delete the records of partition {index} below offset {offset} (on broker {leader})")
        body = {"topics": [{"name": self.topic, "partitions": [{"partition_index": index, "offset": offset}]}],
                "timeout": 5000}
        frame = api.encode_request(ApiKey.DELETE_RECORDS, 2, sim.next_correlation(), "admin", body)

        def answered(response: bytes | None) -> None:
            if response is not None:
                [p] = api.decode_response(ApiKey.DELETE_RECORDS, 2, response).topics[0].partitions
                self.note(f"DeleteRecords of partition {index} below {offset}: {ErrorCode(p.error_code).name}, "
                          f"low watermark {p.low_watermark}")
        sim.client_send(leader, "admin", frame, answered, timeout_ms=30000)
        return offset
