"""A consumer group's records of ``__consumer_offsets`` in Kafka 4.0's formats: keys with their
record type (3 to 8), values as version 0 of flexible messages."""

from __future__ import annotations

import uuid

from strandline.group import records as classic
from strandline.group.consumer import records as rec
from strandline.group.consumer.model import ClassicMemberMetadata, MemberState, TopicMetadata

T = uuid.UUID("0123456789abcdef0123456789abcdef")

VALUES = [
    rec.GroupEpochValue(7),
    rec.PartitionMetadataValue((TopicMetadata(T, "orders", 6), TopicMetadata(uuid.UUID(int=5), "é", 1))),
    rec.MemberMetadataValue("i-1", None, "client", "/10.0.0.1", ("orders", "payments"), None, 30000, "range"),
    rec.MemberMetadataValue(None, "rack", "", "", (), "or.*", -1, None),
    rec.MemberMetadataValue(None, None, "c", "/h", ("orders",), None, 30000, None,
                            ClassicMemberMetadata(45000, (("range", b"\x00\x01sub"), ("cooperative-sticky", b"")))),
    rec.TargetAssignmentEpochValue(7),
    rec.TargetAssignmentMemberValue({T: frozenset({0, 2, 4})}),
    rec.CurrentAssignmentValue(7, 6, MemberState.UNREVOKED_PARTITIONS, {T: frozenset({0})}, {T: frozenset({3})}),
    rec.CurrentAssignmentValue(0, 0, MemberState.STABLE, {}, {}),
    rec.RegularExpressionValue(("orders", "payments"), 12, 1_700_000_000_000),
]


def test_every_value_and_key_reads_back_as_written():
    for value in VALUES:
        member = "m-1" if rec.value_type(value) in (rec.MEMBER_METADATA, rec.TARGET_ASSIGNMENT_MEMBER,
                                                    rec.CURRENT_MEMBER_ASSIGNMENT) else None
        regex = "or.*|pay.*" if rec.value_type(value) == rec.REGULAR_EXPRESSION else None
        record = (rec.Key(rec.value_type(value), "group-ü", member, regex), value)
        key_bytes, value_bytes = rec.encode(record)
        assert rec.decode(key_bytes, value_bytes) == record
        assert rec.decode(key_bytes, None) == (record[0], None)         # a tombstone


def test_keys_are_the_record_type_then_int16_length_strings():
    assert rec.encode_key(rec.Key(rec.GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert rec.encode_key(rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, "g", "m1")) == b"\x00\x08\x00\x01g\x00\x02m1"
    assert rec.encode_key(rec.Key(rec.PARTITION_METADATA, "g")) == b"\x00\x04\x00\x01g"
    assert rec.encode_key(rec.Key(rec.REGULAR_EXPRESSION, "g", regex="a.*")) == b"\x00\x10\x00\x01g\x00\x03a.*"


def test_values_are_version_0_of_flexible_messages():
    # version, epoch, no tagged fields
    assert rec.encode_value(rec.GroupEpochValue(5)) == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    # version, epoch, previous epoch, state, [TopicPartitions] twice, no tagged fields
    expected = (b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x02" + b"\x01"
                + b"\x02" + T.bytes + b"\x03" + b"\x00\x00\x00\x01\x00\x00\x00\x02" + b"\x00"
                + b"\x01"
                + b"\x00")
    value = rec.CurrentAssignmentValue(3, 2, MemberState.UNREVOKED_PARTITIONS, {T: frozenset({2, 1})}, {})
    assert rec.encode_value(value) == expected
    # compact nullable strings: length + 1, 0 for null
    member = rec.encode_value(rec.MemberMetadataValue(None, None, "c", "h", ("t",), None, 10, None))
    assert member == b"\x00\x00" + b"\x00\x00" + b"\x02c\x02h" + b"\x02\x02t" + b"\x00" + b"\x00\x00\x00\x0a" \
        + b"\x00" + b"\x00"


def test_a_classic_members_metadata_is_tagged_field_0_a_nullable_struct():
    classic_member = ClassicMemberMetadata(45000, (("range", b"ab"),))
    value = rec.encode_value(rec.MemberMetadataValue(None, None, "c", "h", ("t",), None, 10, None, classic_member))
    plain = rec.encode_value(rec.MemberMetadataValue(None, None, "c", "h", ("t",), None, 10, None))
    struct_bytes = b"\x01" + b"\x00\x00\xaf\xc8" + b"\x02" + b"\x06range" + b"\x03ab" + b"\x00" + b"\x00"
    assert value == plain[:-1] + b"\x01" + b"\x00" + bytes([len(struct_bytes)]) + struct_bytes


def test_tagged_fields_a_newer_coordinator_wrote_are_skipped():
    """A value with a tagged field this broker does not know (tag 1) reads as without it."""
    plain = rec.encode_value(rec.MemberMetadataValue(None, None, "c", "h", ("t",), None, 10, None))
    tagged = plain[:-1] + b"\x01" + b"\x01" + b"\x03xyz"
    assert rec.decode_value(rec.MEMBER_METADATA, tagged) == rec.decode_value(rec.MEMBER_METADATA, plain)


def test_the_other_records_of_the_topic_are_not_a_consumer_groups():
    assert rec.decode(classic.offset_key("g", "t", 0), b"") is None
    assert rec.decode(classic.group_key("g"), None) is None
    assert rec.decode(b"\x00\x11\x00\x01g", None) is None            # a type this coordinator does not know (17)
