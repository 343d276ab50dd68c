"""State as data: a classic group's and a transaction's states, each with Kafka's table of the
states it may be entered from (``GroupState.validPreviousStates`` in GroupMetadata.scala,
``TransactionMetadata.validPreviousStates`` in TransactionMetadata.scala, Kafka 2.8, with Kafka 4.x's
aborts of transaction version 2 from Empty, CompleteCommit and CompleteAbort).

Every pair of states is tried against a list of Kafka's transitions written out here on its own,
so a wrong entry in either table fails; a coordinator that makes a transition the table forbids
raises ``BrokenInvariant`` instead of going on; and no code of ``group/`` or ``transaction/``
sets a state except through the one method that checks it.
"""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.config import BrokerConfig
from strandline.errors import BrokenInvariant
from strandline.group import rebalance
from strandline.group.coordinator import GroupCoordinator
from strandline.group.model import VALID_PREVIOUS_STATES as GROUP_TABLE, Group, GroupState
from strandline.transaction import records as txn_records
from strandline.transaction.coordinator import TransactionCoordinator
from strandline.transaction.metadata import (VALID_PREVIOUS_STATES as TXN_TABLE, TransactionMetadata,
                                             TransactionState)

SRC = Path(__file__).resolve().parents[3] / "src" / "strandline"

#: Kafka's group transitions (from, to), by the names DescribeGroups answers with
KAFKA_GROUP_TRANSITIONS = {
    ("Empty", "PreparingRebalance"), ("Stable", "PreparingRebalance"), ("CompletingRebalance", "PreparingRebalance"),
    ("PreparingRebalance", "CompletingRebalance"),
    ("CompletingRebalance", "Stable"),
    ("PreparingRebalance", "Empty"),
    ("Empty", "Dead"), ("PreparingRebalance", "Dead"), ("CompletingRebalance", "Dead"), ("Stable", "Dead"),
    ("Dead", "Dead"),
}

#: Kafka's transaction transitions (from, to), by the names DescribeTransactions answers with
KAFKA_TXN_TRANSITIONS = {
    ("Empty", "Empty"), ("CompleteCommit", "Empty"), ("CompleteAbort", "Empty"),
    ("Ongoing", "Ongoing"), ("Empty", "Ongoing"), ("CompleteCommit", "Ongoing"), ("CompleteAbort", "Ongoing"),
    ("Ongoing", "PrepareCommit"),
    ("Ongoing", "PrepareAbort"), ("PrepareEpochFence", "PrepareAbort"),
    # Kafka 4.x, transaction version 2 (KIP-890): an abort of a transaction that added no partition
    ("Empty", "PrepareAbort"), ("CompleteCommit", "PrepareAbort"), ("CompleteAbort", "PrepareAbort"),
    ("PrepareCommit", "CompleteCommit"),
    ("PrepareAbort", "CompleteAbort"),
    ("Empty", "Dead"), ("CompleteAbort", "Dead"), ("CompleteCommit", "Dead"),
    ("Ongoing", "PrepareEpochFence"),
}


# ---------------------------------------------------------------------------------------- groups


def test_group_states_keep_kafkas_wire_names():
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert f"{GroupState.PREPARING_REBALANCE}" == "PreparingRebalance"            # log lines
    assert json.dumps({"state": GroupState.STABLE}) == '{"state": "Stable"}'      # /status
    assert GroupState.STABLE == "Stable" and GroupState.STABLE.lower() == "stable"  # ListGroups' filter
    assert set(GROUP_TABLE) == set(GroupState)


@pytest.mark.parametrize("before,after", list(itertools.product(GroupState, GroupState)),
                         ids=lambda s: s.value)
def test_each_group_transition_is_accepted_exactly_when_kafka_allows_it(before, after):
    group = Group("g")
    group._state = before                      # put there directly: the state under test
    if (before.value, after.value) in KAFKA_GROUP_TRANSITIONS:
        group.transition_to(after)
        assert group.state is after
    else:
        with pytest.raises(BrokenInvariant, match=f"group g cannot move from {before.value} to {after.value}"):
            group.transition_to(after)
        assert group.state is before


def test_a_group_state_cannot_be_assigned_past_the_table():
    group = Group("g")
    with pytest.raises(AttributeError):
        group.state = GroupState.STABLE        # type: ignore[misc]
    assert group.state is GroupState.EMPTY


def test_replaying_the_offsets_topic_restores_states_without_transitions():
    """Kafka's loadGroup builds a group in Empty or Stable (Dead marks a tombstone read in
    Strandline's replay); no other state comes from the log."""
    group = Group("g")
    group.restore(GroupState.STABLE)            # Empty -> Stable would be no transition of the table
    group.restore(GroupState.DEAD)
    group.restore(GroupState.EMPTY)             # nor Dead -> Empty
    assert group.state is GroupState.EMPTY
    for state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE):
        with pytest.raises(BrokenInvariant):
            group.restore(state)


def _coordinator() -> tuple[GroupCoordinator, list]:
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:1",
                                           "offsets.topic.num.partitions": "1"})
    log: list = []

    def append(partition, records, done, now_ms, producer=None):
        log.extend(records)
        return done(ErrorCode.none, now_ms, len(log) - len(records))

    coordinator = GroupCoordinator(config, append, lambda: "x")
    coordinator.load_partition(0, [], 0)
    return coordinator, log


def _stable_group(coordinator: GroupCoordinator) -> Group:
    answers: list = []
    join = {"group_id": "g", "member_id": "", "group_instance_id": None, "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000, "protocol_type": "consumer", "protocols": [("range", b"m")],
            "client_id": "c", "client_host": "/127.0.0.1", "version": 3}
    coordinator.join(join, lambda body: answers.append(body) or [], 0)
    assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
    coordinator.tick(10_000)                     # the initial rebalance delay is over
    joined = answers.pop()
    assert joined["error_code"] is ErrorCode.none and coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE
    coordinator.sync({"group_id": "g", "member_id": joined["member_id"], "generation_id": joined["generation_id"],
                      "assignments": [{"member_id": joined["member_id"], "assignment": b"a"}]},
                     lambda body: answers.append(body) or [], 10_001)
    assert answers.pop()["error_code"] is ErrorCode.none
    group = coordinator.groups["g"]
    assert group.state is GroupState.STABLE and group.generation == 1
    return group


def test_the_coordinator_moves_a_group_only_along_the_table_and_to_dead_when_it_goes():
    """Empty -> PreparingRebalance -> CompletingRebalance -> Stable; then the member leaves
    (PreparingRebalance -> Empty), and the group deleted or unloaded is Dead, as in Kafka."""
    coordinator, _ = _coordinator()
    group = _stable_group(coordinator)
    member = next(iter(group.members))
    coordinator.leave("g", [(member, None)], lambda body: [], 10_002)
    assert group.state is GroupState.EMPTY and group.generation == 2
    coordinator.delete("g", lambda error, now_ms: [], 10_003)
    assert group.state is GroupState.DEAD and "g" not in coordinator.groups
    group = _stable_group(coordinator)
    coordinator.unload_partition(0)
    assert group.state is GroupState.DEAD


def test_a_coordinator_completing_the_join_of_a_stable_group_stops_on_a_broken_invariant():
    """A caller that skipped maybe_complete_join's check (the group must be PreparingRebalance)
    would drop every member of a Stable group (none is waiting in JoinGroup) and persist it Empty
    in a new generation behind their back; the table stops it before anything is written."""
    coordinator, log = _coordinator()
    group = _stable_group(coordinator)
    written = len(log)
    with pytest.raises(BrokenInvariant, match="group g cannot move from Stable to Empty"):
        rebalance.complete_join(group, 10_002, coordinator._persist_group)
    assert len(log) == written


# ---------------------------------------------------------------------------------- transactions


def test_transaction_states_keep_kafkas_ids_and_names():
    assert [(s.value, s.kafka_name) for s in TransactionState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert set(TXN_TABLE) == set(TransactionState)
    assert txn_records.TransactionState is TransactionState and txn_records.TransactionMetadata is TransactionMetadata


@pytest.mark.parametrize("before,after", list(itertools.product(TransactionState, TransactionState)),
                         ids=lambda s: s.kafka_name)
def test_each_transaction_transition_is_accepted_exactly_when_kafka_allows_it(before, after):
    m = TransactionMetadata("tx", 5, 2, 60000, before, {("t", 0)}, 10, 5)
    if (before.kafka_name, after.kafka_name) in KAFKA_TXN_TRANSITIONS:
        new = m.transition_to(after, update_ms=11)
        assert (new.state, new.update_ms, new.partitions) == (after, 11, {("t", 0)})
    else:
        with pytest.raises(BrokenInvariant, match=f"cannot move from {before.kafka_name} to {after.kafka_name}"):
            m.transition_to(after, update_ms=11)
    assert (m.state, m.update_ms) == (before, 10)      # a value: the old one stays as it was


class _TxnFakes:
    """The coordinator's log and markers, completing when the test says so."""

    def __init__(self) -> None:
        config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:1"})
        self.writes: list = []
        self.markers: list = []
        self.next_pid = 1000
        self.c = TransactionCoordinator(config, self.append, self.new_pid, self.send_markers,
                                        lambda due, action: [])
        self.c.load_partition(self.c.partition_of("tx"), 5, [], 0)

    def append(self, index, records, done, now_ms):
        self.writes.append(done)
        return []

    def write(self, now_ms=1):
        return self.writes.pop(0)(ErrorCode.none, now_ms)

    def new_pid(self, callback, now_ms):
        self.next_pid += 1
        return callback(self.next_pid, now_ms)

    def send_markers(self, partitions, producer_id, epoch, commit, coordinator_epoch, done, current, now_ms,
                     transaction_version=0):
        self.markers.append(done)
        return []

    def ongoing(self) -> TransactionMetadata:
        self.c.init_producer_id("tx", 60000, lambda *a: [], 1)
        self.write()
        self.c.add_partitions("tx", 1001, 0, {("t", 0)}, lambda *a: [], 2)
        self.write()
        m = self.c.transactions["tx"]
        assert m.state is TransactionState.ONGOING
        return m


def test_the_coordinator_goes_through_kafkas_transitions_on_a_commit():
    f = _TxnFakes()
    seen = [f.c.transactions.get("tx")]
    f.ongoing()
    f.c.end_transaction("tx", 1001, 0, True, lambda *a: [], 3)
    f.write()
    seen.append(f.c.transactions["tx"])
    f.markers.pop()(4)
    f.write()
    seen.append(f.c.transactions["tx"])
    assert [m.state.kafka_name for m in seen[1:]] == ["PrepareCommit", "CompleteCommit"] and seen[0] is None


def test_a_coordinator_ending_a_transaction_it_never_prepared_stops_on_a_broken_invariant():
    """A caller that skipped the Prepare record would write CompleteCommit straight after Ongoing:
    a commit no new coordinator could finish had it failed over between the markers. The markers
    go out, and recording the end stops on the table instead of writing it."""
    f = _TxnFakes()
    m = f.ongoing()
    f.c._complete(m, True, 3)
    with pytest.raises(BrokenInvariant, match="cannot move from Ongoing to CompleteCommit"):
        f.markers.pop()(4)
    assert not f.writes and f.c.transactions["tx"] is m


def test_a_coordinator_preparing_a_transaction_that_is_not_ongoing_stops_on_a_broken_invariant():
    f = _TxnFakes()
    m = f.ongoing()
    f.c.end_transaction("tx", 1001, 0, False, lambda *a: [], 3)
    f.write()
    f.markers.pop()(4)
    f.write()
    ended = f.c.transactions["tx"]
    assert ended.state is TransactionState.COMPLETE_ABORT and m.state is TransactionState.ONGOING
    with pytest.raises(BrokenInvariant, match="cannot move from CompleteAbort to PrepareCommit"):
        f.c._prepare(ended, True, ended.producer_epoch, lambda e, t: [], 5)
    assert not f.writes


# ------------------------------------------------------------------------------ one way to change


def _state_changes(path: Path) -> list[tuple[str, int]]:
    """Where a module sets a state other than through the checking methods: an assignment to
    ``.state`` or ``._state``, or ``replace(..., state=...)``; each as (enclosing function, line)."""
    found = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.function = "<module>"

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            outer, self.function = self.function, node.name
            self.generic_visit(node)
            self.function = outer

        def _targets(self, targets) -> None:
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Attribute) and node.attr in ("state", "_state") and \
                            isinstance(node.ctx, ast.Store):
                        found.append((self.function, node.lineno))

        def visit_Assign(self, node: ast.Assign) -> None:
            self._targets(node.targets)
            self.generic_visit(node)

        def visit_AugAssign(self, node: ast.AugAssign) -> None:
            self._targets([node.target])
            self.generic_visit(node)

        def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
            self._targets([node.target])
            self.generic_visit(node)

        def visit_Call(self, node: ast.Call) -> None:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "replace" and any(k.arg == "state" for k in node.keywords):
                found.append((self.function, node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found


def test_states_change_only_through_the_methods_that_check_them():
    allowed = {("group/model.py", "transition_to"), ("group/model.py", "restore"),
               ("transaction/metadata.py", "transition_to")}
    changes = {(str(path.relative_to(SRC)), function, line)
               for package in ("group", "transaction") for path in sorted((SRC / package).glob("*.py"))
               for function, line in _state_changes(path)}
    assert {(p, f) for p, f, _ in changes} == allowed, sorted(changes)


def test_the_state_scan_finds_what_it_must_forbid(tmp_path):
    """The scan above can fail: it sees each way of setting a state past the table."""
    module = tmp_path / "m.py"
    module.write_text("import dataclasses\n"
                      "def f(group, m, a):\n"
                      "    group.state = 'Stable'\n"
                      "    a.b, group._state = 1, 'Dead'\n"
                      "    return dataclasses.replace(m, state=3)\n")
    assert _state_changes(module) == [("f", 3), ("f", 4), ("f", 5)]

