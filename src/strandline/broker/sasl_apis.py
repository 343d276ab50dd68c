"""SaslHandshake, SaslAuthenticate and the delegation token APIs on a PLAINTEXT listener.

Every Strandline listener is a PLAINTEXT one, as a Kafka 2.8 broker's with no SASL listener and no
``delegation.token.master.key``: these requests reach the API layer after no authentication, and
Kafka 2.8's ``KafkaApis`` answers each with a fixed error.

* SaslHandshake: ILLEGAL_SASL_STATE, no mechanisms (``handleSaslHandshakeRequest``).
* SaslAuthenticate: ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful
  authentication" (``handleSaslAuthenticateRequest``).
* Create-, Renew-, Expire- and DescribeDelegationToken: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
  (``allowTokenRequests`` is false on PLAINTEXT, checked before ``delegation.token.master.key``),
  with the connection's principal (``User:ANONYMOUS``) and -1 timestamps where the response has
  them (``DelegationTokenManager.ErrorTimestamp``).
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.wire import response
from strandline.protocol.api import ApiKey, RequestHeader

#: the principal of every connection: PLAINTEXT, Kafka's DefaultKafkaPrincipalBuilder
PRINCIPAL_TYPE, PRINCIPAL_NAME = "User", "ANONYMOUS"
AUTHENTICATE_MESSAGE = "SaslAuthenticate request received after successful authentication"
ERROR_TIMESTAMP = -1


def handlers() -> dict[int, Callable]:
    return {ApiKey.SASL_HANDSHAKE: _sasl_handshake, ApiKey.SASL_AUTHENTICATE: _sasl_authenticate,
            ApiKey.CREATE_DELEGATION_TOKEN: _create_token, ApiKey.RENEW_DELEGATION_TOKEN: _renew_or_expire,
            ApiKey.EXPIRE_DELEGATION_TOKEN: _renew_or_expire, ApiKey.DESCRIBE_DELEGATION_TOKEN: _describe_tokens}


def _sasl_handshake(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
    return [response(conn_id, header, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})]


def _sasl_authenticate(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
    return [response(conn_id, header, {"error_code": ErrorCode.illegal_sasl_state,
                                       "error_message": AUTHENTICATE_MESSAGE, "auth_bytes": b"",
                                       "session_lifetime": 0})]


def _create_token(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
    return [response(conn_id, header, {
        "error_code": ErrorCode.delegation_token_request_not_allowed, "principal_type": PRINCIPAL_TYPE,
        "principal_name": PRINCIPAL_NAME, "issue_timestamp": ERROR_TIMESTAMP, "expiry_timestamp": ERROR_TIMESTAMP,
        "max_timestamp": ERROR_TIMESTAMP, "token_id": "", "hmac": b"", "throttle_time": 0})]


def _renew_or_expire(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
    return [response(conn_id, header, {"error_code": ErrorCode.delegation_token_request_not_allowed,
                                       "expiry_timestamp": ERROR_TIMESTAMP, "throttle_time": 0})]


def _describe_tokens(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
    return [response(conn_id, header, {"error_code": ErrorCode.delegation_token_request_not_allowed,
                                       "tokens": [], "throttle_time": 0})]
