"""ApiVersions v3+ with a client software name or version KIP-511 does not allow: INVALID_REQUEST
and no API list, as Kafka's ApiVersionsRequest.getErrorResponse (found by tests/differential:
api-versions-bad-software-name-v3); a valid one gets the list."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.unit.broker.test_broker_core import Harness


def test_an_invalid_software_name_is_invalid_request_without_the_api_list():
    h = Harness()
    bad = h.call(18, 3, {"client_software_name": "no spaces allowed!", "client_software_version": "1.0"})
    assert (bad.error_code, list(bad.api_keys)) == (ErrorCode.invalid_request, [])
    good = h.call(18, 3, {"client_software_name": "differential", "client_software_version": "1.0"})
    assert good.error_code == ErrorCode.none and len(good.api_keys) > 30
