"""Consumers of the KIP-848 protocol driven against a ConsumerGroupCoordinator in tests, with the
invariant the simulator checks: no partition is owned by two consumers at one time."""

from __future__ import annotations

import itertools
import uuid

from kio.schema.errors import ErrorCode

from strandline.group.consumer import records as rec
from strandline.group.consumer.group import ConsumerGroup
from strandline.group.consumer.heartbeat import (ConsumerGroupConfig, ConsumerGroupCoordinator, HeartbeatRequest,
                                                 HeartbeatResponse)
from strandline.group.consumer.model import Assignment, TopicMetadata, pairs

ORDERS = TopicMetadata(uuid.UUID(int=1), "orders", 6)
PAYMENTS = TopicMetadata(uuid.UUID(int=2), "payments", 3)
TOPICS = {t.name: t for t in (ORDERS, PAYMENTS)}
GROUP = "g"


class Client:
    """A consumer: it owns what its last answer gave it, giving up at once what an answer no
    longer lists; fenced, it gives up everything and joins again."""

    def __init__(self, name: str, topics: tuple[str, ...] = ("orders", "payments"), instance_id: str | None = None,
                 assignor: str | None = None, member_id: str = "") -> None:
        self.name = name
        self.topics = topics
        self.instance_id = instance_id
        self.assignor = assignor
        self.member_id = member_id
        self.epoch = 0
        self.owned: Assignment = {}
        self.last_beat_ms = 0
        #: an answer was lost: the next heartbeat is a full one, which is answered with the assignment
        self.full = False

    def request(self) -> HeartbeatRequest:
        owned = tuple((t, tuple(sorted(ps))) for t, ps in sorted(self.owned.items()))
        if self.epoch == 0:
            return HeartbeatRequest(GROUP, self.member_id, 0, self.instance_id, None, 30_000, self.topics, None,
                                    self.assignor, (), self.name, "/127.0.0.1")
        if self.full:
            return HeartbeatRequest(GROUP, self.member_id, self.epoch, self.instance_id, None, 30_000, self.topics,
                                    None, self.assignor, owned, self.name, "/127.0.0.1")
        return HeartbeatRequest(GROUP, self.member_id, self.epoch, self.instance_id, topic_partitions=owned,
                                client_id=self.name, client_host="/127.0.0.1")

    def take(self, response: HeartbeatResponse) -> None:
        self.full = False
        if response.error_code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.owned, self.epoch = {}, 0
            return
        assert response.error_code is ErrorCode.none, response
        assert response.member_id is not None
        self.member_id = response.member_id
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = dict(response.assignment)


class Harness:
    """A coordinator, its log of records as bytes, and the time."""

    def __init__(self, config: ConsumerGroupConfig | None = None) -> None:
        ids = (f"member-{i}" for i in itertools.count(1))
        self.coordinator = ConsumerGroupCoordinator(config or ConsumerGroupConfig(), lambda: next(ids))
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now = 0
        self.clients: list[Client] = []

    @property
    def group(self) -> ConsumerGroup:
        return self.coordinator.groups[GROUP]

    def append(self, records: list[rec.Record]) -> None:
        self.log.extend(rec.encode(r) for r in records)

    def send(self, request: HeartbeatRequest) -> HeartbeatResponse:
        records, response = self.coordinator.heartbeat(request, TOPICS, self.now)
        self.append(records)
        return response

    def beat(self, client: Client, lost: bool = False) -> HeartbeatResponse:
        """One heartbeat of ``client``; with ``lost`` its answer never reaches it."""
        response = self.send(client.request())
        client.last_beat_ms = self.now
        if lost:
            client.full = True
        else:
            client.take(response)
        self.check()
        return response

    def leave(self, client: Client, epoch: int = -1) -> HeartbeatResponse:
        response = self.send(HeartbeatRequest(GROUP, client.member_id, epoch, client.instance_id))
        assert response.error_code is ErrorCode.none, response
        client.owned, client.epoch = {}, 0
        self.check()
        return response

    def expire(self, now: int) -> list[rec.Record]:
        self.now = now
        records = self.coordinator.expire(TOPICS, now)
        self.append(records)
        self.check()
        return records

    def check(self) -> None:
        """No partition owned by two consumers, nor by two members as the coordinator sees them;
        and what a consumer owns, the coordinator counts as its member's."""
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients:
            for tp in pairs(client.owned):
                assert tp not in seen, f"partition {tp} owned by {seen[tp]} and {client.name} at once"
                seen[tp] = client.name
        group = self.coordinator.groups.get(GROUP)
        if group is None:
            return
        held: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for tp in pairs(member.assigned) + pairs(member.pending_revocation):
                assert tp not in held, f"partition {tp} of members {held[tp]} and {member.member_id}"
                held[tp] = member.member_id
        for client in self.clients:
            for tp in pairs(client.owned):
                assert held.get(tp) == client.member_id, f"{client.name} owns {tp}, the coordinator says {held.get(tp)}"

    def replayed(self) -> ConsumerGroup:
        """The group a new coordinator rebuilds from the log's bytes."""
        other = ConsumerGroupCoordinator(self.coordinator.config, lambda: "unused")
        decoded = [rec.decode(k, v) for k, v in self.log]
        other.load([r for r in decoded if r is not None], self.now)
        return other.groups[GROUP]
