"""JAAS configuration text as Kafka's JaasConfig reads sasl.jaas.config."""

from __future__ import annotations

import pytest

from strandline.security.jaas import JaasError, LoginModule, parse, single


def test_kafka_examples():
    assert single('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                  'password="alice-secret";') == \
        LoginModule("org.apache.kafka.common.security.scram.ScramLoginModule", "required",
                    {"username": "alice", "password": "alice-secret"})
    plain = single('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                   '    username="admin"\n    password="admin-secret"\n    user_admin="admin-secret"\n'
                   '    user_alice="alice-secret";')
    assert plain.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": "alice-secret"}
    oauth = single("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                   "unsecuredLoginStringClaim_sub=thePrincipalName unsecuredValidatorAllowableClockSkewMs=3000;")
    assert oauth.options["unsecuredLoginStringClaim_sub"] == "thePrincipalName"


def test_quoting_escapes_comments_and_several_modules():
    modules = parse('A optional k="a \\"q\\" \\\\ ; = b"; // a comment\n/* another */ B Sufficient;')
    assert modules == [LoginModule("A", "optional", {"k": 'a "q" \\ ; = b'}), LoginModule("B", "sufficient", {})]


@pytest.mark.parametrize("text, message", [
    ("", "no login module"),
    ("A required", "expected ; at the end"),
    ("A always;", "invalid control flag"),
    ('A required k="v', "unclosed quoted value"),
    ("A required k=;", "the value of k"),
    ("A required =v;", "an option name"),
    ("A required; B required;", None),
])
def test_errors(text, message):
    if message is None:
        with pytest.raises(JaasError, match="exactly one login module"):
            single(text)
        return
    with pytest.raises(JaasError, match=message):
        parse(text)
