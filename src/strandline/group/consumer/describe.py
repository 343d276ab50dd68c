"""ConsumerGroupDescribe's answer for the groups of the KIP-848 protocol (Kafka's
``ConsumerGroup.asDescribedGroup`` and ``ConsumerGroupMember.asConsumerGroupDescribeMember``), as
the body of a DescribedGroup with kio's field names."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.group.consumer.group import ConsumerGroup, ConsumerGroupState
from strandline.group.consumer.model import EMPTY, Assignment, TopicMetadata


def preferred_assignor(group: ConsumerGroup, default: str) -> str:
    """The assignor the group's members ask for most (ties to the greater name), else ``default``."""
    counts = Counter(m.server_assignor for m in group.members.values() if m.server_assignor is not None)
    return max(counts, key=lambda n: (counts[n], n)) if counts else default


def _topic_partitions(a: Assignment, by_id: Mapping[UUID, TopicMetadata]) -> list[dict[str, Any]]:
    """The partitions of ``a`` by topic, those of topics the cluster no longer has left out."""
    return [{"topic_id": t, "topic_name": by_id[t].name, "partitions": sorted(a[t])} for t in sorted(a) if t in by_id]


#: ConsumerGroupDescribe v1's MemberType of a member of the classic protocol and of the consumer one
CLASSIC_MEMBER = 0
CONSUMER_MEMBER = 1


def describe(groups: Mapping[str, ConsumerGroup], group_ids: Iterable[str], default_assignor: str,
             topics: Mapping[str, TopicMetadata]) -> list[dict[str, Any]]:
    """One DescribedGroup for each id; GROUP_ID_NOT_FOUND for a group this coordinator does not
    hold as a consumer group."""
    by_id = {t.topic_id: t for t in topics.values()}
    described = []
    for group_id in group_ids:
        group = groups.get(group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            described.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id,
                              "error_message": f"Group {group_id} not found.", "group_state": "",
                              "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []})
            continue
        members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": {"topic_partitions": _topic_partitions(m.assigned, by_id)},
                    "target_assignment": {"topic_partitions": _topic_partitions(group.target.get(m.member_id, EMPTY),
                                                                                by_id)},
                    # ConsumerGroupDescribe v1's MemberType: 0 the classic protocol, 1 the consumer protocol
                    "member_type": CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER}
                   for m in sorted(group.members.values(), key=lambda m: m.member_id)]
        described.append({"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                          "group_state": group.state.value, "group_epoch": group.group_epoch,
                          "assignment_epoch": group.assignment_epoch,
                          "assignor_name": preferred_assignor(group, default_assignor), "members": members})
    return described
