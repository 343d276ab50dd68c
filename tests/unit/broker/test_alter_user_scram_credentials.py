"""AlterUserScramCredentials v0 (KIP-554) as a Kafka 2.8.2 broker in ZooKeeper mode serves it
(``KafkaApis.handleAlterUserScramCredentialsRequest``, ``ZkAdminManager.alterUserScramCredentials``,
``ScramFormatter``, ``ScramCredentialUtils``): the controller alone, ALTER on the cluster, Kafka's
validation, and each user's credentials written into ``/config/users/<user>`` with a change
notification."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from kio.schema.errors import ErrorCode

from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
from strandline.security.acl import ResourcePattern, ResourceType
from strandline.security.scram import credential
from tests.unit.broker.test_broker_core import Harness

SHA256, SHA512 = 1, 2

# RFC 7677, section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_AUTH_MESSAGE = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
RFC_CLIENT_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def salted(password: bytes, salt: bytes, iterations: int, digest: str = "sha256") -> bytes:
    return hashlib.pbkdf2_hmac(digest, password, salt, iterations)


def fields(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(","))


def test_the_stored_credential_authenticates_rfc_7677s_exchange():
    """The stored and server keys of RFC 7677's example verify its client proof and produce its
    server signature (SCRAM's server side), and the text is Kafka's layout."""
    text = credential(SHA256, RFC_SALT, salted(b"pencil", RFC_SALT, 4096), 4096)
    f = fields(text)
    assert list(f) == ["salt", "stored_key", "server_key", "iterations"]
    assert (base64.b64decode(f["salt"]), f["iterations"]) == (RFC_SALT, "4096")
    stored_key, server_key = base64.b64decode(f["stored_key"]), base64.b64decode(f["server_key"])
    assert hmac.new(server_key, RFC_AUTH_MESSAGE, hashlib.sha256).digest() == RFC_SERVER_SIGNATURE
    signature = hmac.new(stored_key, RFC_AUTH_MESSAGE, hashlib.sha256).digest()
    client_key = bytes(a ^ b for a, b in zip(RFC_CLIENT_PROOF, signature))
    assert hashlib.sha256(client_key).digest() == stored_key
    # another password is refused by the same check
    wrong = fields(credential(SHA256, RFC_SALT, salted(b"pencils", RFC_SALT, 4096), 4096))
    assert hmac.new(base64.b64decode(wrong["server_key"]), RFC_AUTH_MESSAGE, hashlib.sha256).digest() != \
        RFC_SERVER_SIGNATURE


def test_scram_sha_512_uses_sha_512():
    salt, pw = b"0123456789abcdef", salted(b"secret", b"0123456789abcdef", 4096, "sha512")
    f = fields(credential(SHA512, salt, pw, 8192))
    client_key = hmac.new(pw, b"Client Key", hashlib.sha512).digest()
    assert base64.b64decode(f["stored_key"]) == hashlib.sha512(client_key).digest()
    assert base64.b64decode(f["server_key"]) == hmac.new(pw, b"Server Key", hashlib.sha512).digest()
    assert f["iterations"] == "8192" and len(base64.b64decode(f["stored_key"])) == 64


def upsert(user: str, mechanism: int = SHA256, iterations: int = 4096, password: bytes = b"pencil") -> dict:
    return {"name": user, "mechanism": mechanism, "iterations": iterations, "salt": RFC_SALT,
            "salted_password": salted(password, RFC_SALT, iterations)}


def alter(h: Harness, upsertions=(), deletions=()):
    body = h.call(51, 0, {"upsertions": list(upsertions),
                          "deletions": [{"name": u, "mechanism": m} for u, m in deletions]})
    return [(r.user, r.error_code, r.error_message) for r in body.results]


def user_config(h: Harness, name: str) -> dict:
    return json.loads(h.zk.nodes[f"/config/users/{name}"][0])


def notifications(h: Harness) -> list[dict]:
    return [json.loads(data) for path, (data, _, _) in sorted(h.zk.nodes.items())
            if path.startswith("/config/changes/config_change_")]


def describe(h: Harness, *users: str):
    body = h.call(50, 0, {"users": [{"name": u} for u in users]})
    return [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in body.results]


def test_an_upsertion_is_written_with_a_change_notification_and_described():
    h = Harness()
    assert alter(h, [upsert("alice")]) == [("alice", ErrorCode.none, None)]
    config = user_config(h, "alice")
    assert config["version"] == 1
    assert config["config"] == {"SCRAM-SHA-256": credential(SHA256, RFC_SALT, salted(b"pencil", RFC_SALT, 4096), 4096)}
    assert notifications(h) == [{"version": 2, "entity_path": "users/alice"}]
    assert describe(h, "alice") == [("alice", ErrorCode.none, [(SHA256, 4096)])]
    assert not any("pencil" in line.message or "stored_key" in line.message for line in h.logs)


def test_quotas_are_kept_and_a_deletion_removes_the_key():
    h = Harness()
    assert h.call(49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "a b"}], "ops": [
        {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": False}
                  ).entries[0].error_code == ErrorCode.none
    assert alter(h, [upsert("a b"), upsert("a b", SHA512, 8192)]) == [("a b", ErrorCode.none, None)]
    assert set(user_config(h, "a%20b")["config"]) == {"producer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert alter(h, deletions=[("a b", SHA256)]) == [("a b", ErrorCode.none, None)]
    assert set(user_config(h, "a%20b")["config"]) == {"producer_byte_rate", "SCRAM-SHA-512"}
    assert describe(h, "a b") == [("a b", ErrorCode.none, [(SHA512, 8192)])]
    assert alter(h, deletions=[("a b", SHA256)]) == [
        ("a b", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")]
    assert alter(h, deletions=[("nobody", SHA512)]) == [
        ("nobody", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")]
    assert "/config/users/nobody" not in h.zk.nodes


def test_what_kafka_refuses_changes_nothing_for_that_user():
    h = Harness()
    got = alter(h, [upsert("few", iterations=4095), upsert("many", iterations=16385), upsert("", SHA256),
                    upsert("mech", 3), upsert("twice"), upsert("twice"), upsert("ok")],
                [("gone", 0)])
    assert got == [
        ("gone", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("many", ErrorCode.unacceptable_credential, "Too many iterations"),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("mech", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("twice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        ("ok", ErrorCode.none, None)]
    assert [p for p in h.zk.nodes if p.startswith("/config/users/")] == ["/config/users/ok"]
    # a user with one bad alteration keeps every other one unapplied; a deletion and an upsertion of
    # the same mechanism are a duplicate
    assert alter(h, [upsert("ok", SHA512, 8192), upsert("ok", SHA256, 1)]) == [
        ("ok", ErrorCode.unacceptable_credential, "Too few iterations")]
    assert alter(h, [upsert("ok")], [("ok", SHA256)]) == [
        ("ok", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")]
    assert list(user_config(h, "ok")["config"]) == ["SCRAM-SHA-256"]


def test_a_broker_that_is_not_the_controller_answers_not_controller_for_each_user():
    h = Harness()
    h.run(h.broker.controller.resign("a test"))
    assert alter(h, [upsert("b"), upsert("a")], [("b", SHA512)]) == [
        ("a", ErrorCode.not_controller, None), ("b", ErrorCode.not_controller, None)]
    assert not [p for p in h.zk.nodes if p.startswith("/config/users/")]


def test_alter_on_the_cluster_is_required_after_the_controller():
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.broker.connection_opened(1, "127.0.0.1")
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALTER, AclPermissionType.DENY)})})
    assert alter(h, [upsert("a")]) == [("a", ErrorCode.cluster_authorization_failed, None)]
    assert "/config/users/a" not in h.zk.nodes
    h.run(h.broker.controller.resign("a test"))
    assert alter(h, [upsert("a")]) == [("a", ErrorCode.not_controller, None)]
