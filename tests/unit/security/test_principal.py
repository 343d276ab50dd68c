"""KIP-371's ssl.principal.mapping.rules as Kafka's SslPrincipalMapper applies them, on the examples
of Kafka's own SslPrincipalMapperTest."""

from __future__ import annotations

import pytest

from strandline.security.principal import InvalidRule, NoMatchingRule, parse_rules, ssl_principal


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    assert parse_rules(rules)


@pytest.mark.parametrize("rules", [
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "RULE:^CN=(unclosed/$1/",                       # not a regular expression
])
def test_invalid_rules(rules):
    with pytest.raises(InvalidRule):
        parse_rules(rules)


def test_unmatched_substring_is_named():
    with pytest.raises(InvalidRule, match="unmatched substring: `/U`"):
        parse_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U")


RULES = ", ".join([
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
])


@pytest.mark.parametrize("dn, name", [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
    ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_mapping(dn, name):
    assert ssl_principal(dn, RULES) == name


@pytest.mark.parametrize("rules, printed", [
    ("", "[]"),
    ("DEFAULT", "[DEFAULT]"),
    ("RULE://", "[RULE:/]"),
    ("RULE:/.*/", "[RULE:/.*]"),
    ("RULE:/.*/L", "[RULE:/.*/L]"),
    ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
    ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
    ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
    ("  RULE:  /     /U   ,DEFAULT  ", "[RULE:  /     /U, DEFAULT]"),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]"),
    # empty rules are ignored
    (",   , , ,      , , ,   ", "[]"),
    (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
    (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "[RULE: /   , DEFAULT]"),
    ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "[RULE:   /  /U, DEFAULT]"),
    # escape sequences
    ("RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//", "[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]"),
    ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]"),
    # rules rule
    ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
     "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]"),
])
def test_rules_splitting(rules, printed):
    assert "[" + ", ".join(str(r) for r in parse_rules(rules)) + "]" == printed


def test_escaped_comma_with_whitespace():
    rules = "RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT"
    assert ssl_principal("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz", rules) == "Tkac\\, Adam"


def test_no_rule_applies():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x,O=y, rules \\[RULE:\\^CN=z\\$/a\\]"):
        ssl_principal("CN=x,O=y", "RULE:^CN=z$/a/")


def test_default_rules_when_unset():
    assert ssl_principal("CN=a,O=b", None) == "CN=a,O=b"


def test_a_reference_to_a_group_the_pattern_lacks_is_literal():
    assert ssl_principal("CN=alice,O=acme", "RULE:^CN=(.*?),O=(.*)$/$1@$3/") == "alice@$3"
    assert ssl_principal("CN=alice,O=acme", "RULE:^CN=(.*?),O=(.*)$/$12/") == "alice2"      # group 1, then 2
    assert ssl_principal("CN=alice,O=acme", "RULE:^CN=(.*?),O=(.*)$/\\$1 $2/") == "$1 acme"       # escaped $
    with pytest.raises(NoMatchingRule, match="No group with name"):       # Java refuses it too
        ssl_principal("CN=alice,O=acme", "RULE:^CN=(.*?),O=(.*)$/${x}/")


def test_named_groups_and_escaped_slash():
    assert ssl_principal("CN=alice/ops,O=acme", "RULE:^CN=(?<who>[^\\/]*)\\/(.*?),.*$/${who}-$2/U") == "ALICE-OPS"


def test_first_applying_rule_wins_and_lower_upper():
    rules = "RULE:^CN=([^,]*),OU=ops.*$/$1/U,RULE:^CN=([^,]*).*$/$1/L,DEFAULT"
    assert ssl_principal("CN=Bob,OU=ops,O=x", rules) == "BOB"
    assert ssl_principal("CN=Bob,OU=dev,O=x", rules) == "bob"
    assert ssl_principal("O=x", rules) == "O=x"
