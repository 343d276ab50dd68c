"""The server-side assignors ``uniform`` and ``range`` of the consumer group protocol, tried on
many generated groups (seeded, so a failure names the case that found it)."""

from __future__ import annotations

import random
import uuid

from strandline.group.consumer.assignors import ASSIGNORS, MemberSpec, range_, uniform
from strandline.group.consumer.model import EMPTY, Assignment, pairs, size

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def spec(member_id, topics, assignment=EMPTY, instance_id=None):
    return MemberSpec(member_id, instance_id, frozenset(topics), assignment)


def owners(result: dict[str, Assignment]) -> dict[tuple[uuid.UUID, int], list[str]]:
    found: dict[tuple[uuid.UUID, int], list[str]] = {}
    for member_id, a in result.items():
        for tp in pairs(a):
            found.setdefault(tp, []).append(member_id)
    return found


def assert_each_partition_once(members, partitions, result):
    seen = owners(result)
    wanted = {(t, p) for m in members for t in m.subscribed for p in range(partitions[t])}
    assert set(seen) == wanted
    for tp, who in seen.items():
        assert len(who) == 1, f"{tp} assigned to {who}"
        assert tp[0] in next(m for m in members if m.member_id == who[0]).subscribed


def for_seeds(check, seeds=range(300)):
    """Run ``check(rng)`` on each seed; a failure says which seed found it."""
    for seed in seeds:
        try:
            check(random.Random(seed))
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {e}") from e


def random_group(rng: random.Random, homogeneous: bool):
    topics = {uuid.UUID(int=i + 1): rng.randint(1, 12) for i in range(rng.randint(1, 4))}
    count = rng.randint(1, 8)
    if homogeneous:
        chosen = frozenset(rng.sample(sorted(topics), rng.randint(1, len(topics))))
        members = [spec(f"m{i}", chosen) for i in range(count)]
    else:
        members = [spec(f"m{i}", rng.sample(sorted(topics), rng.randint(1, len(topics)))) for i in range(count)]
    return members, topics


def test_uniform_with_one_subscription_assigns_each_partition_once_within_one_of_even():
    def check(rng):
        members, partitions = random_group(rng, homogeneous=True)
        result = uniform(members, partitions)
        assert_each_partition_once(members, partitions, result)
        sizes = [size(result[m.member_id]) for m in members]
        assert max(sizes) - min(sizes) <= 1, sizes

    for_seeds(check)


def test_uniform_sticks_when_a_member_joins_and_when_one_leaves():
    """A member that joins takes only what must move: the others only lose partitions and each
    keeps at least its new even share; when a member leaves, the others keep all they had."""
    def check(rng):
        members, partitions = random_group(rng, homogeneous=True)
        before = uniform(members, partitions)
        topics = members[0].subscribed
        current = [spec(m.member_id, topics, before[m.member_id]) for m in members]
        grown = current + [spec("new", topics)]
        after = uniform(grown, partitions)
        assert_each_partition_once(grown, partitions, after)
        share = sum(partitions[t] for t in topics) // len(grown)
        for m in current:
            kept = set(pairs(after[m.member_id]))
            assert kept <= set(pairs(before[m.member_id]))
            assert len(kept) >= min(share, size(before[m.member_id]))
        moved = size(after["new"])
        assert moved == sum(size(before[m.member_id]) - size(after[m.member_id]) for m in current)
        # and no more than must: the most an even split lets the members keep, kept
        total = sum(partitions[t] for t in topics)
        held = sorted((size(before.get(m.member_id, EMPTY)) for m in grown), reverse=True)
        extra = total % len(grown)
        most = sum(min(h, share + (1 if i < extra else 0)) for i, h in enumerate(held))
        assert total - moved == most
        # one leaves
        leaver = rng.choice(current)
        rest = [m for m in current if m is not leaver]
        if rest:
            shrunk = uniform(rest, partitions)
            assert_each_partition_once(rest, partitions, shrunk)
            for m in rest:
                assert set(pairs(before[m.member_id])) <= set(pairs(shrunk[m.member_id]))

    for_seeds(check)


def test_uniform_with_different_subscriptions_assigns_to_subscribers_balanced_and_stable():
    def check(rng):
        members, partitions = random_group(rng, homogeneous=False)
        result = uniform(members, partitions)
        assert_each_partition_once(members, partitions, result)
        # no partition could go to another subscriber of its topic holding two fewer
        load = {m: size(a) for m, a in result.items()}
        for (topic_id, _), (owner,) in owners(result).items():
            for m in members:
                if topic_id in m.subscribed:
                    assert load[owner] - load[m.member_id] <= 1
        # computed again from its own result, nothing moves
        again = uniform([spec(m.member_id, m.subscribed, result[m.member_id]) for m in members], partitions)
        assert again == result

    for_seeds(check)


def test_uniform_drops_the_partitions_of_topics_a_member_left_and_those_that_no_longer_exist():
    members = [spec("a", [T1], {T1: frozenset({0, 1, 5}), T2: frozenset({0})}), spec("b", [T1])]
    result = uniform(members, {T1: 4})
    assert result == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}


def test_uniform_gives_the_extra_partitions_to_the_members_that_hold_the_most():
    """Seven partitions over three members, one of which holds one: the extra partition goes to
    a member holding three, so only one partition moves."""
    before = {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1, 2, 3})}, "c": {T1: frozenset({4, 5, 6})}}
    members = [spec(m, [T1], a) for m, a in before.items()]
    result = uniform(members, {T1: 7})
    assert result["b"] == before["b"] and result["a"] == {T1: frozenset({0, 6})}
    assert result["c"] == {T1: frozenset({4, 5})}


def kafka_range(members, partitions):
    """Range written out as Kafka's RangeAssignor describes it, on its own."""
    order = sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or m.member_id))
    result = {m.member_id: {} for m in members}
    for topic_id in partitions:
        takers = [m for m in order if topic_id in m.subscribed]
        n = len(takers)
        for i, m in enumerate(takers):
            per, extra = partitions[topic_id] // n, partitions[topic_id] % n
            start = i * per + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                result[m.member_id][topic_id] = frozenset(range(start, start + length))
    return result


def test_range_gives_each_member_a_contiguous_range_of_each_topic_as_kafka():
    members = [spec("b", [T1, T2]), spec("a", [T1, T2]), spec("c", [T1])]
    result = range_(members, {T1: 7, T2: 3})
    assert result == {"a": {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1})},
                      "b": {T1: frozenset({3, 4}), T2: frozenset({2})},
                      "c": {T1: frozenset({5, 6})}}


def test_range_puts_static_members_first_by_instance_id():
    members = [spec("a", [T1]), spec("z", [T1], instance_id="i2"), spec("y", [T1], instance_id="i1")]
    assert range_(members, {T1: 3}) == {"y": {T1: frozenset({0})}, "z": {T1: frozenset({1})},
                                         "a": {T1: frozenset({2})}}


def test_range_matches_kafkas_ranges_and_assigns_each_partition_once():
    def check(rng):
        members, partitions = random_group(rng, homogeneous=rng.random() < 0.5)
        members = [spec(m.member_id, m.subscribed, instance_id=f"i{rng.randint(0, 9)}{m.member_id}" if rng.random() < 0.3
                        else None) for m in members]
        result = range_(members, partitions)
        assert result == kafka_range(members, partitions)
        assert_each_partition_once(members, partitions, result)

    for_seeds(check)


def test_both_assignors_are_known_by_kafkas_names():
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert ASSIGNORS["uniform"]([], {T1: 3}) == {} and ASSIGNORS["range"]([], {T1: 3}) == {}
