"""ConsumerGroups between the pure core and __consumer_offsets: a heartbeat is answered once its
records are written; a write that fails answers the coordinator's error, and puts the group back as
it was when the log refused it at once (nothing appended); fencing by the session timeout writes
its records; a group's records are replayed."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from strandline.core.config import BrokerConfig
from strandline.group.consumer.heartbeat import HeartbeatRequest, HeartbeatResponse
from strandline.group.consumer.model import TopicMetadata
from strandline.group.consumer_groups import ConsumerGroups
from strandline.group.coordinator import GroupCoordinator

TOPICS = {"t": TopicMetadata(uuid.UUID(int=1), "t", 4)}


class Offsets:
    """An offsets topic whose writes complete when the test says so."""

    def __init__(self) -> None:
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.pending: list = []
        self.refuse: ErrorCode | None = None        # the next append is refused at once

    def append(self, partition, records, done, now_ms, producer=None):
        if self.refuse is not None:
            error, self.refuse = self.refuse, None
            return done(error, now_ms, -1)
        self.pending.append((partition, list(records), done))
        return []

    def complete(self, error: ErrorCode = ErrorCode.none):
        partition, records, done = self.pending.pop(0)
        if error is ErrorCode.none:
            self.log += [(len(self.log) + i, k, v) for i, (k, v) in enumerate(records)]
        return done(error, 0, len(self.log))


def setup():
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181",
                                           "offsets.topic.num.partitions": "1"})
    offsets = Offsets()
    classic = GroupCoordinator(config, offsets.append, lambda: "x")
    classic.owned.add(0)
    groups = ConsumerGroups(config, classic, lambda: TOPICS, lambda: "unused")
    return groups, offsets


def join(member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest("g", member_id, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",),
                            topic_partitions=())


def test_a_heartbeat_is_answered_once_its_records_are_written_and_undone_when_the_log_refuses_them():
    groups, offsets = setup()
    answers: list[HeartbeatResponse] = []

    def respond(answer):
        answers.append(answer)
        return []

    groups.heartbeat(join("a"), respond, 0)
    assert answers == []                                      # not before the ISR has the records
    offsets.complete()
    assert answers[-1].error_code is ErrorCode.none and answers[-1].member_epoch == 1
    offsets.refuse = ErrorCode.coordinator_not_available          # too few replicas: nothing appended
    groups.heartbeat(join("b"), respond, 10)
    assert answers[-1].error_code is ErrorCode.coordinator_not_available
    group = groups.holds("g")
    assert set(group.members) == {"a"} and group.group_epoch == 1
    groups.heartbeat(join("c"), respond, 20)
    assert set(groups.holds("g").members) == {"a", "c"}
    offsets.complete(ErrorCode.request_timed_out)                 # appended, not copied in time
    assert answers[-1].error_code is ErrorCode.coordinator_not_available
    assert set(groups.holds("g").members) == {"a", "c"}         # the records are in the log


def test_fencing_writes_its_records_and_a_new_coordinator_replays_them():
    groups, offsets = setup()
    groups.heartbeat(join("a"), lambda answer: [], 0)
    offsets.complete()
    assert groups.next_deadline_ms() == 45_000                # group.consumer.session.timeout.ms
    assert groups.tick(44_999) == [] and not offsets.pending
    groups.tick(45_000)
    offsets.complete()
    assert groups.holds("g").members == {}
    fresh, _ = setup()
    fresh.load_partition(0, offsets.log, 50_000)
    replayed = fresh.holds("g")
    assert replayed is not None and replayed.members == {} and replayed.group_epoch == 2


def committed_setup():
    """ConsumerGroups whose offsets partition commits only what ``committed[0]`` says; each wait
    for more is held in ``waits`` as (required offset, done)."""
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181",
                                           "offsets.topic.num.partitions": "1"})
    offsets = Offsets()
    classic = GroupCoordinator(config, offsets.append, lambda: "x")
    classic.owned.add(0)
    committed = [0]
    waits: list = []

    def wait_committed(partition, required, timeout_ms, done, now_ms):
        if committed[0] >= required:
            return done(ErrorCode.none, now_ms)
        waits.append((required, done))
        return []
    groups = ConsumerGroups(config, classic, lambda: TOPICS, lambda: "unused",
                            lambda partition: len(offsets.log) + sum(len(r) for _, r, _ in offsets.pending),
                            wait_committed)
    return groups, offsets, committed, waits


def test_consumer_group_describe_shows_a_group_only_once_what_it_shows_is_committed():
    """ConsumerGroupDescribe built from a member whose records were appended but not committed
    (they timed out on their way to the followers) waits until they are: a leader change could
    take them back, and the group described would never have been. Not in time: the group says
    COORDINATOR_NOT_AVAILABLE; committed: it is shown, with the member."""
    groups, offsets, committed, waits = committed_setup()
    groups.heartbeat(join("a"), lambda answer: [], 0)
    offsets.complete(ErrorCode.request_timed_out)                 # appended, not committed
    described: list = []
    groups.describe_committed(["g", "other"], lambda found: described.append(found) or [], 10)
    assert described == [] and len(waits) == 1
    waits.pop()[1](ErrorCode.request_timed_out, 5010)
    [[g, other]] = described
    assert g["group_id"] == "g" and g["error_code"] is ErrorCode.coordinator_not_available and g["members"] == []
    assert other["error_code"] is ErrorCode.group_id_not_found           # as it was: no wait
    groups.describe_committed(["g"], lambda found: described.append(found) or [], 6000)
    required, done = waits.pop()
    committed[0] = required
    done(ErrorCode.none, 6010)
    assert described[-1][0]["error_code"] is ErrorCode.none and list(m["member_id"] for m in described[-1][0]["members"]) == ["a"]


def test_an_answer_that_writes_nothing_waits_for_what_it_was_read_from_to_commit():
    """The simulator's seed 6810077 (compact, ``--consumer-groups``): a coordinator cut off from
    the other brokers appended a member's new assignment, which timed out uncommitted; kept in
    memory (the records are in its log), it answered the member's next heartbeat, which wrote
    nothing, from it at once. The partition's next leader never had the records and gave the same
    partition to another member at the same epoch. Such an answer now waits until every record
    written to the partition is committed (COORDINATOR_NOT_AVAILABLE when it is not in time)."""
    groups, offsets, committed, waits = committed_setup()
    answers: list[HeartbeatResponse] = []
    groups.heartbeat(join("a"), lambda answer: answers.append(answer) or [], 0)
    offsets.complete(ErrorCode.request_timed_out)                 # appended, never copied
    assert answers[-1].error_code is ErrorCode.coordinator_not_available
    groups.heartbeat(join("a"), lambda answer: answers.append(answer) or [], 10)     # writes nothing
    assert len(answers) == 1 and len(waits) == 1                   # held until the records commit
    required, done = waits.pop()
    done(ErrorCode.request_timed_out, 5010)
    assert answers[-1].error_code is ErrorCode.coordinator_not_available
    groups.heartbeat(join("a"), lambda answer: answers.append(answer) or [], 6000)
    committed[0] = required
    waits.pop()[1](ErrorCode.none, 6010)
    assert answers[-1].error_code is ErrorCode.none and answers[-1].member_epoch == 1


def test_a_member_whose_leaving_the_log_refused_is_still_fenced_when_its_session_ends():
    """Seed 6961006 of --classic-members: a LeaveGroup whose records were refused put the member
    back without its session, and it stayed in the group for good, holding its partition."""
    groups, offsets = setup()
    groups.heartbeat(join("a"), lambda answer: [], 0)
    offsets.complete()
    offsets.refuse = ErrorCode.coordinator_not_available          # too few replicas: nothing appended
    answers: list[HeartbeatResponse] = []
    groups.heartbeat(HeartbeatRequest("g", "a", -1), lambda answer: answers.append(answer) or [], 10)
    assert answers[-1].error_code is ErrorCode.coordinator_not_available
    assert set(groups.holds("g").members) == {"a"}               # put back as it was
    due = groups.next_deadline_ms()
    assert due is not None
    groups.tick(due)                                              # its session ends: it is fenced
    offsets.complete()
    assert set(groups.holds("g").members) == set()
