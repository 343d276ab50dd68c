"""A classic group's rebalance (Kafka's ``prepareRebalance``, ``maybeCompleteJoin`` and
``onCompleteJoin``): a group's moves into PreparingRebalance and on to CompletingRebalance (or
Empty), and the answers to the members waiting in JoinGroup and SyncGroup.

Functions of one ``Group``, as ``group.static_members`` is: the coordinator passes its config and
``persist(group, now_ms, done(error, when_ms))``, which writes the group to ``__consumer_offsets``.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.model import Group, GroupState, Member

Persist = Callable[[Group, int, Callable[[ErrorCode, int], list[Effect]]], list[Effect]]


def answer_join(member: Member, body: dict[str, Any]) -> list[Effect]:
    """Answer the member's waiting JoinGroup, if any, with ``body`` (what it leaves out at its defaults)."""
    respond, member.join_respond = member.join_respond, None
    if respond is None:
        return []
    body.setdefault("generation_id", -1)
    body.setdefault("protocol_name", None)
    body.setdefault("leader", "")
    body.setdefault("member_id", member.member_id)
    body.setdefault("members", [])
    return respond(body)


def answer_sync(member: Member, code: ErrorCode, assignment: bytes = b"", group: Group | None = None) -> list[Effect]:
    """Answer the member's waiting SyncGroup, if any."""
    respond, member.sync_respond = member.sync_respond, None
    if respond is None:
        return []
    return respond({"error_code": code, "assignment": assignment,
                    "protocol_type": group.protocol_type if group else None,
                    "protocol_name": group.protocol if group else None})


def common_protocols(group: Group, offered: set[str], exclude: str = "") -> set[str]:
    """The protocols of ``offered`` that every member but ``exclude`` supports."""
    common = set(offered)
    for m in group.members.values():
        if m.member_id != exclude:
            common &= {n for n, _ in m.protocols}
    return common


def select_protocol(group: Group) -> str:
    """The protocol the members' votes choose: each votes for its first common one."""
    votes: dict[str, int] = {}
    common = common_protocols(group, {n for n, _ in next(iter(group.members.values())).protocols})
    for m in group.members.values():
        choice = next(n for n, _ in m.protocols if n in common)
        votes[choice] = votes.get(choice, 0) + 1
    return max(sorted(votes), key=lambda n: votes[n])


def prepare_rebalance(group: Group, config: Any, now_ms: int) -> list[Effect]:
    """Into PreparingRebalance: members waiting in SyncGroup are told REBALANCE_IN_PROGRESS; the join
    phase ends after the members' longest rebalance timeout (a group that was Empty: after
    group.initial.rebalance.delay.ms, if shorter)."""
    effects: list[Effect] = []
    if group.state is GroupState.COMPLETING_REBALANCE:
        for m in group.members.values():
            m.assignment = b""
            effects += answer_sync(m, ErrorCode.rebalance_in_progress)
    initial = group.state is GroupState.EMPTY
    group.transition_to(GroupState.PREPARING_REBALANCE)
    timeout = max([m.rebalance_timeout_ms for m in group.members.values()] or [0])
    delay = min(config["group.initial.rebalance.delay.ms"], timeout) if initial else timeout
    group.join_deadline_ms = now_ms + delay
    group.initial_delay = initial
    return effects


def maybe_complete_join(group: Group, now_ms: int, persist: Persist) -> list[Effect]:
    """Complete the join phase when its deadline passed, or once every member has rejoined (unless
    the group was Empty: it waits out the initial delay)."""
    if group.state is not GroupState.PREPARING_REBALANCE:
        return []
    everyone = all(m.join_respond is not None for m in group.members.values()) and not group.pending
    delay_over = group.join_deadline_ms is not None and now_ms >= group.join_deadline_ms
    if delay_over or (everyone and not group.initial_delay):
        return complete_join(group, now_ms, persist)
    return []


def complete_join(group: Group, now_ms: int, persist: Persist) -> list[Effect]:
    """Members that did not rejoin leave; a new generation: the leader gets every member's metadata,
    everyone the answer to its JoinGroup (an empty group is persisted as Empty). Members told their
    id that have not joined with it stay pending until their session times out, as in Kafka: one
    joining later starts the next rebalance."""
    for member_id in [m for m, mem in group.members.items() if mem.join_respond is None]:
        del group.members[member_id]
    group.join_deadline_ms = None
    group.generation += 1
    group.state_timestamp = now_ms
    if not group.members:
        group.transition_to(GroupState.EMPTY)
        group.protocol, group.leader = None, None
        return persist(group, now_ms, lambda error, t: [])
    group.protocol = select_protocol(group)
    if group.leader not in group.members:
        group.leader = next(iter(group.members))
    group.transition_to(GroupState.COMPLETING_REBALANCE)
    effects: list[Effect] = []
    everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(group.protocol)} for m in group.members.values()]
    for m in group.members.values():
        m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        effects += answer_join(m, {
            "error_code": ErrorCode.none, "generation_id": group.generation, "protocol_type": group.protocol_type,
            "protocol_name": group.protocol, "leader": group.leader, "member_id": m.member_id,
            "members": everyone if m.member_id == group.leader else []})
    return effects


def remove_members(group: Group, members: list[Member], now_ms: int, config: Any, persist: Persist) -> list[Effect]:
    """Members leave (LeaveGroup, or a session expired): their waiting answers say UNKNOWN_MEMBER_ID,
    and a Stable or CompletingRebalance group rebalances."""
    effects: list[Effect] = []
    for m in members:
        group.members.pop(m.member_id, None)
        effects += answer_join(m, {"error_code": ErrorCode.unknown_member_id})
        effects += answer_sync(m, ErrorCode.unknown_member_id)
    if group.leader not in group.members:
        group.leader = None
    if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        effects += prepare_rebalance(group, config, now_ms)
    if group.state is GroupState.PREPARING_REBALANCE and not group.members:
        return effects + complete_join(group, now_ms, persist)
    return effects + maybe_complete_join(group, now_ms, persist)
