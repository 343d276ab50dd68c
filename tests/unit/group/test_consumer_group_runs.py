"""Generated runs of a consumer group on the KIP-848 protocol: consumers join (some static, some
with their own assignor), heartbeat, lose answers, leave, leave for a while and come back, crash
and are fenced when their sessions end. After every step no partition is owned by two consumers;
once the run settles every partition is owned by exactly one consumer, within one of an even
share; and the records written rebuild the group exactly."""

from __future__ import annotations

import random

from strandline.group.consumer.group import ConsumerGroupState
from strandline.group.consumer.heartbeat import ConsumerGroupConfig
from strandline.group.consumer.model import pairs, size
from tests.unit.group.consumer_clients import TOPICS, Client, Harness

SESSION_MS = 10_000


def run(seed: int, steps: int = 120) -> Harness:
    rng = random.Random(seed)
    h = Harness(ConsumerGroupConfig(session_timeout_ms=SESSION_MS))
    away: list[Client] = []                        # static members gone for a while
    names = iter(range(1000))

    def new_client() -> Client:
        n = next(names)
        static = rng.random() < 0.3
        return Client(f"c{n}", instance_id=f"i{n}" if static else None,
                      assignor=rng.choice([None, None, "uniform"]))

    for _ in range(steps):
        h.now += rng.randint(0, 400)
        op = rng.random()
        if op < 0.15 and len(h.clients) < 6:
            client = new_client()
            h.clients.append(client)
            h.beat(client)
        elif op < 0.22 and h.clients:
            client = rng.choice(h.clients)
            if client.epoch > 0:
                h.leave(client)
                h.clients.remove(client)
        elif op < 0.27 and h.clients:
            client = rng.choice(h.clients)
            if client.epoch > 0 and client.instance_id is not None:
                h.leave(client, epoch=-2)
                h.clients.remove(client)
                away.append(client)
        elif op < 0.32 and away:
            client = away.pop(rng.randrange(len(away)))
            back = Client(client.name, instance_id=client.instance_id, assignor=client.assignor,
                          member_id=f"{client.name}-again-{h.now}")
            if client.instance_id in h.coordinator.groups["g"].static_members:
                h.clients.append(back)
                h.beat(back)
        elif op < 0.35 and h.clients:
            h.clients.remove(rng.choice(h.clients))       # it crashes: it owns nothing any more
        elif h.clients:
            h.beat(rng.choice(h.clients), lost=rng.random() < 0.1)
        for client in list(h.clients):                      # the live keep their sessions
            if h.now - client.last_beat_ms > SESSION_MS // 2:
                h.beat(client)
        h.expire(h.now)
    return h


def settle(h: Harness) -> None:
    """Heartbeats of every live consumer until the group is stable (bounded)."""
    for _ in range(5):                                      # the crashed and the away are fenced
        h.now += SESSION_MS // 2
        for client in h.clients:
            h.beat(client)
        h.expire(h.now)
    for _ in range(12):
        for client in h.clients:
            h.beat(client)
        group = h.coordinator.groups.get("g")
        if group is not None and group.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
            return


def test_generated_runs_never_give_a_partition_to_two_consumers_and_settle_balanced():
    for seed in range(60):
        try:
            h = run(seed)
            settle(h)
            group = h.coordinator.groups.get("g")
            if group is None:
                continue
            assert group.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY), group.state
            if h.clients:
                owned = [tp for c in h.clients for tp in pairs(c.owned)]
                assert sorted(owned) == sorted((t.topic_id, p) for t in TOPICS.values() for p in range(t.partitions))
                sizes = [size(c.owned) for c in h.clients]
                assert max(sizes) - min(sizes) <= 1, sizes
                assert {c.epoch for c in h.clients} == {group.group_epoch}
            assert h.replayed() == group
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {e}") from e
