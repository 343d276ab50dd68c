"""What `strandline up --security` makes in its data directory (strandline.launch.secure), without
a cluster: the files and their modes, the brokers' and the clients' settings of each mode, and the
same CA and passwords on the next run."""

from __future__ import annotations

import json
import stat

import pytest
from cryptography import x509

from strandline.cli.client_config import from_properties
from strandline.core.config import parse_properties
from strandline.launch.secure import MODES, prepare
from strandline.security.principal import ssl_principal


def mode_of(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_mode_makes_its_files_owner_only_and_client_properties_the_cli_reads(tmp_path, mode):
    secured = prepare(tmp_path, mode, ["kafka.example"])
    d = tmp_path / "security"
    assert mode_of(d) == 0o700
    for name in ("users.json", "ca.key", "broker.pem", "client.properties", "admin.properties"):
        assert mode_of(d / name) == 0o600, name
    passwords = json.loads((d / "users.json").read_text())
    assert sorted(passwords) == ["admin", "broker", "client"] and len(set(passwords.values())) == 3
    security, warnings = from_properties(parse_properties((d / "client.properties").read_text()))
    assert warnings == [] and security.protocol == MODES[mode]
    if secured.sasl:
        assert (security.mechanism, security.username, security.password) == \
            ("SCRAM-SHA-512", "client", passwords["client"])
    if secured.tls:
        assert security.ca_file == str(d / "ca.pem")
    broker = x509.load_pem_x509_certificates((d / "broker.pem").read_bytes())[0]
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kafka.example" in names.get_values_for_type(x509.DNSName)


def test_sasl_ssl_brokers_authenticate_to_each_other_with_scram_as_a_super_user(tmp_path):
    secured = prepare(tmp_path, "sasl_ssl", [])
    lines = dict(line.split("=", 1) for line in secured.broker_lines())
    assert lines["inter.broker.listener.name"] == "SASL_SSL"
    assert lines["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert lines["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert lines["super.users"] == "User:admin;User:broker"
    assert lines["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    jaas = lines["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert f'username="broker" password="{secured.passwords["broker"]}"' in jaas
    assert lines["ssl.keystore.location"] == str(tmp_path / "security" / "broker.pem")
    assert "ssl.client.auth" not in lines


def test_ssl_requires_client_certificates_whose_cn_is_the_user(tmp_path):
    secured = prepare(tmp_path, "ssl", [])
    lines = dict(line.split("=", 1) for line in secured.broker_lines())
    assert lines["ssl.client.auth"] == "required" and "sasl.enabled.mechanisms" not in lines
    cert = x509.load_pem_x509_certificates((tmp_path / "security" / "client.pem").read_bytes())[0]
    rules = lines["ssl.principal.mapping.rules"]
    assert ssl_principal(cert.subject.rfc4514_string(), rules) == "client"      # User:client
    assert ssl_principal("CN=broker", rules) == "broker"


def test_the_next_run_keeps_the_ca_and_the_passwords(tmp_path):
    first = prepare(tmp_path, "sasl_ssl", [])
    ca = (tmp_path / "security" / "ca.pem").read_bytes()
    again = prepare(tmp_path, "sasl_ssl", ["other.example"])
    assert again.passwords == first.passwords and (tmp_path / "security" / "ca.pem").read_bytes() == ca
    assert (tmp_path / "security" / "client.properties").read_text().count(first.passwords["client"]) == 1


def test_an_unknown_mode_is_one_clear_error(tmp_path):
    from strandline.errors import StrandlineError

    with pytest.raises(StrandlineError, match="--security tls: give one of sasl_ssl, ssl, sasl_plaintext"):
        prepare(tmp_path, "tls", [])
