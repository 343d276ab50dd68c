"""The leader's side of AlterIsr (KIP-497), pure: the pending ISR, the maximal ISR the high
watermark waits for, one proposal in flight per partition (and one request per broker), retries
on retriable answers, and the stale view a fenced answer means (ISR-3, ISR-4, ISR-5, REP-3, NET-4).

The controller is played by the test: it sees each request the manager sends and answers it."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import MetadataCache
from strandline.coordination.znodes import LeaderAndIsr
from strandline.core.outbox import Outbox
from strandline.replication.alter_isr_manager import ALTER_ISR_RETRY_MS, AlterIsrManager
from strandline.replication.isr_manager import IsrManager
from strandline.replication.partition import Partition

LAG = 10_000
T0 = 1_000_000


class FakeLog:
    """What Partition asks of its log for these rules: offsets and a producer state."""

    def __init__(self, leo: int) -> None:
        self.log_end_offset = leo
        self.log_start_offset = 0
        self.producer_state = self
        self.leader_epoch_cache = self

    def assign(self, epoch: int, offset: int) -> None:
        pass

    def on_high_watermark_updated(self, hw: int) -> None:
        pass


class Controller:
    """Takes the requests the manager sends; answers them when the test says."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, object]] = []

    def __call__(self, body, on_response, now_ms):
        self.requests.append((body, on_response))
        return []

    def answer(self, body, now_ms: int = T0, index: int = -1):
        _, on_response = self.requests[index]
        return on_response(body, now_ms)

    def proposed(self, index: int = -1) -> list[tuple]:
        body, _ = self.requests[index]
        return [(t["name"], p["partition_index"], p["leader_epoch"], tuple(p["new_isr"]), p["current_isr_version"])
                for t in body["topics"] for p in t["partitions"]]


def ok(name: str, index: int, leader: int, epoch: int, isr: tuple, version: int) -> dict:
    return {"partition_index": index, "error_code": ErrorCode.none, "leader_id": leader, "leader_epoch": epoch,
            "isr": list(isr), "current_isr_version": version}


def error(index: int, code: ErrorCode) -> dict:
    return {"partition_index": index, "error_code": code, "leader_id": 0, "leader_epoch": 0, "isr": [],
            "current_isr_version": 0}


def body(name: str, *partitions: dict, top: ErrorCode = ErrorCode.none) -> dict:
    return {"throttle_time": 0, "error_code": top,
            "topics": [{"name": name, "partitions": list(partitions)}] if partitions else []}


class Setup:
    def __init__(self, partitions: int = 1) -> None:
        self.outbox = Outbox({"request.timeout.ms": 30000})
        self.controller = Controller()
        self.manager = AlterIsrManager(1, lambda: 77, self.outbox)
        self.manager.send = self.controller
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.hw_moves: list = []
        self.isr = IsrManager(self.partitions, MetadataCache(), self.outbox,
                              lambda keys, now: self.hw_moves.append(keys) or [], T0, self.manager)
        for i in range(partitions):
            p = Partition("t", i, 1, FakeLog(10), replica_lag_time_max_ms=LAG)   # type: ignore[arg-type]  # a stand-in log
            p.make_leader(LeaderAndIsr(1, 5, (1, 2, 3), 1, 7), (1, 2, 3), T0)
            self.partitions[("t", i)] = p

    def p(self, i: int = 0) -> Partition:
        return self.partitions[("t", i)]


def test_a_shrink_is_pending_until_the_controller_answers_and_the_hw_waits_for_the_maximal_isr():
    """ISR-3 with AlterIsr: the proposal goes to the controller with the leader epoch and the
    version it was made against; until answered, the ISR is unchanged and the member proposed out
    still holds the high watermark back (Kafka's maximal ISR); the answer's state is installed."""
    s = Setup()
    p = s.p()
    p.update_follower_fetch_state(2, 10, T0 + 1)
    p.update_follower_fetch_state(3, 4, T0 + 1)               # broker 3 is behind...
    now = T0 + LAG + 2                                        # ...for longer than the lag time
    s.isr.maybe_shrink_isrs(now)
    assert s.controller.proposed() == [("t", 0, 5, (1, 2), 7)]
    assert s.controller.requests[-1][0]["broker_epoch"] == 77
    assert (p.isr, p.pending_isr, p.maximal_isr) == ((1, 2, 3), (1, 2), (1, 2, 3))
    assert not p.maybe_increment_high_watermark(now) and p.high_watermark == 4
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)), now)
    assert (p.isr, p.pending_isr, p.zk_version) == ((1, 2), None, 8)
    assert p.high_watermark == 10                             # broker 3 holds it back no more
    assert s.isr.isr_shrinks == 1 and not s.manager.unsent


def test_an_expansion_counts_for_the_hw_while_pending():
    """ISR-4 with AlterIsr: the follower proposed in counts for the high watermark at once (it may
    be in ZooKeeper's ISR already), before the controller answers."""
    s = Setup()
    p = s.p()
    p.make_leader(LeaderAndIsr(1, 6, (1, 2), 1, 8), (1, 2, 3), T0)
    p.update_follower_fetch_state(2, 10, T0)
    p.update_follower_fetch_state(3, 10, T0)
    assert p.high_watermark == 10
    new_isr = p.isr_to_expand(3)
    assert new_isr == (1, 2, 3)
    s.isr.change_isr(p, new_isr, T0)
    assert (p.isr, p.maximal_isr) == ((1, 2), (1, 2, 3))
    p.log.log_end_offset = 12                                 # a new write: broker 3 must have it too
    p.update_follower_fetch_state(2, 12, T0 + 1)
    assert p.high_watermark == 10
    p.update_follower_fetch_state(3, 12, T0 + 2)
    assert p.high_watermark == 12


def test_one_proposal_in_flight_per_partition_and_one_request_per_broker():
    """While a partition's proposal is pending it proposes nothing else; while a request is in
    flight the others wait and go together in the next one."""
    s = Setup(partitions=3)
    s.isr.change_isr(s.p(0), (1, 2), T0)
    assert s.p(0).isr_to_shrink(T0 + 10 * LAG) is None       # pending: nothing more proposed
    assert s.p(0).isr_to_expand(3) is None
    s.isr.change_isr(s.p(1), (1, 3), T0)
    s.isr.change_isr(s.p(2), (1,), T0)
    assert len(s.controller.requests) == 1                    # the first is in flight
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert len(s.controller.requests) == 2
    assert s.controller.proposed() == [("t", 1, 5, (1, 3), 7), ("t", 2, 5, (1,), 7)]


def test_retriable_answers_are_proposed_again_and_fenced_ones_drop_the_change():
    """A partition answered with a retriable error is proposed again (in the next request); one
    answered FENCED_LEADER_EPOCH or INVALID_UPDATE_VERSION drops its change, is not proposed again,
    and acknowledges nothing until a LeaderAndIsr tells it its role (NET-4)."""
    s = Setup(partitions=3)
    s.isr.change_isr(s.p(0), (1, 2), T0)
    s.controller.answer(None)                                 # no answer: sent again after the back-off...
    for i in (1, 2):
        s.isr.change_isr(s.p(i), (1, 2), T0)
    s.outbox.tick(T0 + ALTER_ISR_RETRY_MS)                    # ...with the proposals made meanwhile
    assert len(s.controller.proposed()) == 3
    s.controller.answer(body("t", error(0, ErrorCode.unknown_server_error), error(1, ErrorCode.fenced_leader_epoch),
                             error(2, ErrorCode.invalid_update_version)))
    assert s.controller.proposed() == [("t", 0, 5, (1, 2), 7)]
    assert s.p(0).pending_isr == (1, 2) and not s.p(0).isr_update_failed
    for i in (1, 2):
        p = s.p(i)
        assert (p.isr, p.pending_isr, p.isr_update_failed, p.accepts_writes) == ((1, 2, 3), None, True, False)
        assert p.isr_to_shrink(T0 + 10 * LAG) is None
        assert ("t", i) in s.hw_moves[-1] or [("t", i)] in s.hw_moves   # the waiting acks=all are told
    assert s.isr.failed_isr_updates == 2
    # the controller's LeaderAndIsr brings the truth: the partition acts again
    s.p(1).make_leader(LeaderAndIsr(1, 6, (1, 2, 3), 1, 9), (1, 2, 3), T0)
    assert s.p(1).accepts_writes and s.p(1).pending_isr is None


def test_a_request_without_an_answer_or_with_a_top_level_error_is_sent_again_later():
    """No answer (the controller unreachable), NOT_CONTROLLER or STALE_BROKER_EPOCH: the same
    proposals go again after the back-off, with the broker epoch of that moment."""
    s = Setup()
    s.isr.change_isr(s.p(), (1, 2), T0)
    for answer in (None, body("t", top=ErrorCode.not_controller), body("t", top=ErrorCode.stale_broker_epoch)):
        sent = len(s.controller.requests)
        s.controller.answer(answer, T0)
        assert len(s.controller.requests) == sent             # not at once...
        s.manager.broker_epoch = lambda: 78
        s.outbox.tick(T0 + ALTER_ISR_RETRY_MS)                # ...after the back-off
        assert len(s.controller.requests) == sent + 1
        assert s.controller.proposed() == [("t", 0, 5, (1, 2), 7)]
        assert s.controller.requests[-1][0]["broker_epoch"] == 78
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert s.p().isr == (1, 2)


def test_an_answer_to_a_proposal_a_leader_and_isr_overtook_is_ignored():
    """The controller's LeaderAndIsr (a new epoch) came before the answer: the answer is about a
    state the partition no longer has, and changes nothing; a proposal overtaken before it was
    sent is not sent."""
    s = Setup(partitions=2)
    s.isr.change_isr(s.p(0), (1, 2), T0)
    s.isr.change_isr(s.p(1), (1, 2), T0)                     # waits behind the request in flight
    s.p(0).make_leader(LeaderAndIsr(1, 6, (1, 3), 1, 9), (1, 2, 3), T0)
    s.p(1).make_leader(LeaderAndIsr(1, 6, (1, 3), 1, 9), (1, 2, 3), T0)
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert (s.p(0).isr, s.p(0).zk_version, s.p(0).isr_update_failed) == ((1, 3), 9, False)
    assert len(s.controller.requests) == 1                    # t-1's stale proposal was dropped unsent
    assert not s.manager.unsent


def test_an_answer_with_an_older_version_or_another_epoch_is_not_installed():
    """Kafka's checks of a successful answer: another leader epoch, or a version older than the
    one the leader knows, means its view is stale."""
    for answer in (ok("t", 0, 1, 4, (1, 2), 8), ok("t", 0, 1, 5, (1, 2), 6)):
        s = Setup()
        s.isr.change_isr(s.p(), (1, 2), T0)
        s.controller.answer(body("t", answer))
        assert (s.p().isr, s.p().zk_version, s.p().isr_update_failed) == ((1, 2, 3), 7, True)


def test_a_partition_left_out_of_the_answer_is_sent_again():
    s = Setup(partitions=2)
    s.isr.change_isr(s.p(0), (1, 2), T0)
    s.isr.change_isr(s.p(1), (1, 2), T0)
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert s.controller.proposed() == [("t", 1, 5, (1, 2), 7)]
    s.controller.answer(body("t"))                            # an answer that names no partition
    assert s.controller.proposed() == [("t", 1, 5, (1, 2), 7)] and len(s.controller.requests) == 3
    assert s.p(1).pending_isr == (1, 2)


def test_a_proposal_whose_request_got_no_answer_stops_the_acknowledgements_until_one_comes():
    """NET-4 with AlterIsr: the controller may have written a proposal whose request got no
    answer; until an answer says what holds, the leader acknowledges no write (as a legacy write
    whose answer was lost). Any answer lifts it."""
    s = Setup()
    p = s.p()
    s.isr.change_isr(p, (1, 2), T0)
    assert p.accepts_writes
    s.controller.answer(None)
    assert not p.accepts_writes and p.pending_isr == (1, 2)
    s.outbox.tick(T0 + ALTER_ISR_RETRY_MS)
    s.controller.answer(body("t", error(0, ErrorCode.unknown_server_error)))    # not applied: proposed again
    assert p.accepts_writes and p.pending_isr == (1, 2)
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert p.accepts_writes and p.isr == (1, 2)


@pytest.mark.parametrize("top", [ErrorCode.stale_broker_epoch, ErrorCode.not_controller])
def test_a_proposal_whose_request_was_refused_whole_stops_the_acknowledgements_until_it_is_decided(top):
    """NET-4 with AlterIsr: a leader cut from ZooKeeper alone still reaches the controller, which
    refuses its requests whole (STALE_BROKER_EPOCH once its session expired and a new leader may be
    elected); the leader acknowledges no write until a proposal is decided, not for as long as
    the cut lasts. The retries go on, and an answer lifts it."""
    s = Setup()
    p = s.p()
    s.isr.change_isr(p, (1, 2), T0)
    s.controller.answer(body("t", top=top))
    assert not p.accepts_writes and p.pending_isr == (1, 2)
    s.outbox.tick(T0 + ALTER_ISR_RETRY_MS)
    assert s.controller.proposed() == [("t", 0, 5, (1, 2), 7)]
    s.controller.answer(body("t", ok("t", 0, 1, 5, (1, 2), 8)))
    assert p.accepts_writes and p.isr == (1, 2)
