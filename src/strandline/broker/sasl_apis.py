"""SaslHandshake, SaslAuthenticate and the delegation token APIs as they reach the API layer.

A SASL listener's authentication happens before any request reaches the broker
(:mod:`strandline.security.authenticator`); what reaches it here comes after, or on another
listener, and Kafka 2.8's ``KafkaApis`` answers each with a fixed error:

* SaslHandshake: ILLEGAL_SASL_STATE, no mechanisms (``handleSaslHandshakeRequest``).
* SaslAuthenticate: ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful
  authentication" (``handleSaslAuthenticateRequest``).
* Create-, Renew-, Expire- and DescribeDelegationToken: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a
  PLAINTEXT listener and for SSL's anonymous clients (``allowTokenRequests``), else
  DELEGATION_TOKEN_AUTH_DISABLED (no ``delegation.token.master.key``), with the connection's
  principal and -1 timestamps where the response has them (``DelegationTokenManager.ErrorTimestamp``).
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.wire import Handler, response
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.core.effects import Effect

AUTHENTICATE_MESSAGE = "SaslAuthenticate request received after successful authentication"
ERROR_TIMESTAMP = -1


def handlers(session: Callable[[int], Any]) -> dict[int, Handler]:
    """``session(conn_id)``: the connection's :class:`~strandline.security.authorizer.Session`."""
    def token_error(conn_id: int) -> ErrorCode:
        s = session(conn_id)
        if s.protocol == "PLAINTEXT" or (s.protocol == "SSL" and s.principal == "User:ANONYMOUS"):
            return ErrorCode.delegation_token_request_not_allowed
        return ErrorCode.delegation_token_auth_disabled

    def create_token(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        kind, _, name = session(conn_id).principal.partition(":")
        return [response(conn_id, header, {
            "error_code": token_error(conn_id), "principal_type": kind, "principal_name": name,
            "issue_timestamp": ERROR_TIMESTAMP, "expiry_timestamp": ERROR_TIMESTAMP,
            "max_timestamp": ERROR_TIMESTAMP, "token_id": "", "hmac": b"", "throttle_time": 0})]

    def renew_or_expire(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        return [response(conn_id, header, {"error_code": token_error(conn_id),
                                           "expiry_timestamp": ERROR_TIMESTAMP, "throttle_time": 0})]

    def describe_tokens(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        return [response(conn_id, header, {"error_code": token_error(conn_id), "tokens": [], "throttle_time": 0})]

    return {ApiKey.SASL_HANDSHAKE: _sasl_handshake, ApiKey.SASL_AUTHENTICATE: _sasl_authenticate,
            ApiKey.CREATE_DELEGATION_TOKEN: create_token, ApiKey.RENEW_DELEGATION_TOKEN: renew_or_expire,
            ApiKey.EXPIRE_DELEGATION_TOKEN: renew_or_expire, ApiKey.DESCRIBE_DELEGATION_TOKEN: describe_tokens}


def _sasl_handshake(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
    return [response(conn_id, header, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})]


def _sasl_authenticate(conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
    return [response(conn_id, header, {"error_code": ErrorCode.illegal_sasl_state,
                                       "error_message": AUTHENTICATE_MESSAGE, "auth_bytes": b"",
                                       "session_lifetime": 0})]
