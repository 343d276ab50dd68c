"""A static member (KIP-345) back under a new member id while its group is Stable.

When the protocol the group would choose stays the same, Kafka's classic coordinator does not
rebalance: it persists the group with the member's new id and answers the join at once with the
current generation. A leader that sent JoinGroup v9+ (KIP-814) is told it leads, with every
member's metadata and ``skip_assignment`` set, so that it keeps its view of the group without
computing a new assignment; an older leader is told the old leader id and no members, so it acts
as a follower. If persisting fails, the member gets its old id back and the join its error.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.model import Group, Member
from strandline.group.rebalance import Persist

SKIP_ASSIGNMENT_VERSION = 9


def rejoin_stable(group: Group, member: Member, old_id: str, old_leader: str | None,
                  previous: tuple[list[tuple[str, bytes]], int, int],
                  persist: Persist, now_ms: int) -> list[Effect]:
    """Answer ``member``'s join without a rebalance. ``previous`` is its (protocols,
    session_timeout_ms, rebalance_timeout_ms) before this join, restored if persisting fails."""
    respond, member.join_respond = member.join_respond, None
    assert respond is not None                      # the join being answered
    new_id = member.member_id
    skipping = member.join_version >= SKIP_ASSIGNMENT_VERSION
    generation = group.generation

    def persisted(error: ErrorCode, when_ms: int) -> list[Effect]:
        base = {"generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol}
        if error is not ErrorCode.none:
            if group.members.get(new_id) is member and group.generation == generation:
                del group.members[new_id]
                member.member_id = old_id
                group.members[old_id] = member
                if group.leader == new_id:
                    group.leader = old_leader
                member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms = previous
            return respond({**base, "error_code": error, "member_id": "", "leader": old_leader or "",
                            "members": [], "skip_assignment": False})
        leads = group.leader == new_id
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(group.protocol)} for m in group.members.values()]
        return respond({**base, "error_code": ErrorCode.none, "member_id": new_id,
                        "leader": (group.leader if skipping else old_leader) or "",
                        "members": members if leads and skipping else [],
                        "skip_assignment": leads and skipping})

    return persist(group, now_ms, persisted)
