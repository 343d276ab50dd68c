"""The feature ``transaction.version`` (KIP-890 part 2) on the wire: ApiVersions v3+ reports it
supported (0-2) and finalized at the broker's ``transaction.version``, which Kafka 4.x clients read
to choose transactions v2."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.unit.broker.test_broker_core import Harness

HELLO = {"client_software_name": "test", "client_software_version": "1"}


def features(h: Harness, version: int):
    body = h.call(18, version, HELLO if version >= 3 else {})
    assert body.error_code == ErrorCode.none
    return ([(f.name, f.min_version, f.max_version) for f in body.supported_features],
            body.finalized_features_epoch,
            [(f.name, f.min_version_level, f.max_version_level) for f in body.finalized_features])


def test_apiversions_finalizes_transaction_version_2_by_default_as_a_fresh_kafka_4_cluster():
    h = Harness()
    assert features(h, 4) == ([("transaction.version", 0, 2)], 0, [("transaction.version", 2, 2)])
    # v3: a supported range starting at 0 is left out, as Kafka does for those clients
    assert features(h, 3) == ([], 0, [("transaction.version", 2, 2)])


def test_apiversions_reports_the_configured_level_and_none_at_level_0():
    assert features(Harness(**{"transaction.version": "1"}), 4)[2] == [("transaction.version", 1, 1)]
    assert features(Harness(**{"transaction.version": "0"}), 4)[2] == []


def test_an_apiversions_refused_for_its_software_name_reports_no_feature():
    """As Kafka's ApiVersionsRequest.getErrorResponse (the differential test against Kafka 3.9)."""
    body = Harness().call(18, 3, {"client_software_name": "no spaces allowed!", "client_software_version": "1"})
    assert body.error_code == ErrorCode.invalid_request and not body.api_keys
    assert (body.finalized_features_epoch, body.finalized_features) == (-1, ())
