"""``strandline up --security sasl_ssl|ssl|sasl_plaintext``: a secured cluster to try security with.

Everything lives in ``<data-dir>/security/`` (mode 0700), made on the first run and used again by
the next ones (the clients' files stay valid):

- ``ca.pem`` and ``ca.key``: a certificate authority made with :mod:`strandline.security.certs`;
  ``broker.pem``: the brokers' key and certificate (for ``127.0.0.1``, ``localhost`` and the
  advertised host), issued again at each start;
- three users, their random passwords in ``users.json`` (0600): ``admin`` and ``broker``, super
  users, and ``client``, allowed everything on every topic, group and transactional id (ACLs)
  and idempotent writes, but not the cluster's administration (ACLs, configs, reassignments);
- ``client.properties`` and ``admin.properties`` (0600): Kafka client properties for
  ``--command-config`` (and Kafka's own tools): ``security.protocol``, ``sasl.mechanism`` with a
  ``ScramLoginModule`` ``sasl.jaas.config`` (SASL), the CA as a PEM trust store (TLS), the
  user's PEM key store (``ssl``: the certificate is the user, CN=client or CN=admin).

With SASL the users get SCRAM-SHA-512 credentials, written to ZooKeeper (``/config/users/<user>``,
as ``kafka-configs --zookeeper`` writes them) before the brokers start, and the brokers
authenticate to each other as ``broker`` with ``sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512``.
With ``ssl`` the listener requires client certificates (``ssl.client.auth=required``) and
``ssl.principal.mapping.rules`` maps a certificate's ``CN`` to the user name. The ACLs are
written to ZooKeeper before the brokers start, with the ACL authorizer on.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from strandline.coordination.acl_znodes import AclZNode
from strandline.coordination.znodes import ConfigEntityZNode
from strandline.errors import StrandlineError
from strandline.security.acl import (CLUSTER_NAME, AccessControlEntry, AclOperation, AclPermissionType,
                                     PatternType, ResourcePattern, ResourceType)

#: ``--security`` values and the listener (security protocol) each gives the brokers
MODES = {"sasl_ssl": "SASL_SSL", "ssl": "SSL", "sasl_plaintext": "SASL_PLAINTEXT"}
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096
USERS = ("admin", "client", "broker")
SUPER_USERS = ("admin", "broker")
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: a certificate's CN is its user (Kafka's ssl.principal.mapping.rules syntax)
MAPPING_RULES = "RULE:^CN=([^,]*).*$/$1/,DEFAULT"
#: what ``client`` may do: everything on every topic, group and transactional id, idempotent writes
CLIENT_ACLS = (
    (ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL), AclOperation.ALL),
    (ResourcePattern(ResourceType.GROUP, "*", PatternType.LITERAL), AclOperation.ALL),
    (ResourcePattern(ResourceType.TRANSACTIONAL_ID, "*", PatternType.LITERAL), AclOperation.ALL),
    (ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), AclOperation.IDEMPOTENT_WRITE),
)


def _write_secret(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (made 0600 before a byte is written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _jaas(user: str, password: str) -> str:
    return f'{SCRAM_LOGIN} required username="{user}" password="{password}";'


@dataclass(frozen=True)
class SecureCluster:
    """What ``up --security`` made: its files and the settings it gives the brokers."""

    mode: str
    dir: Path
    passwords: dict[str, str]

    @property
    def protocol(self) -> str:
        return MODES[self.mode]

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def ca_path(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def broker_store(self) -> Path:
        return self.dir / "broker.pem"

    def properties_path(self, user: str) -> Path:
        return self.dir / f"{user}.properties"

    def broker_lines(self) -> list[str]:
        """The brokers' security settings (server.properties lines; the listener is up's)."""
        name = self.protocol.lower()
        lines = [f"inter.broker.listener.name={self.protocol}",
                 "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                 "super.users=" + ";".join(f"User:{u}" for u in SUPER_USERS)]
        if self.tls:
            lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={self.broker_store}",
                      "ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca_path}"]
        if self.protocol == "SSL":
            lines += ["ssl.client.auth=required", f"ssl.principal.mapping.rules={MAPPING_RULES}"]
        if self.sasl:
            lines += [f"sasl.enabled.mechanisms={MECHANISM}", f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
                      f"listener.name.{name}.{MECHANISM.lower()}.sasl.jaas.config="
                      f"{_jaas('broker', self.passwords['broker'])}"]
        return lines

    def client_lines(self, user: str) -> list[str]:
        """A user's client properties (Kafka's Java client keys, as ``--command-config`` reads them)."""
        lines = [f"# The client properties of user {user}, written by `strandline up --security {self.mode}`: "
                 f"pass them as --command-config", f"security.protocol={self.protocol}"]
        if self.sasl:
            lines += [f"sasl.mechanism={MECHANISM}",
                      f"sasl.jaas.config={_jaas(user, self.passwords[user])}"]
        if self.tls:
            lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca_path}"]
        if self.protocol == "SSL":
            lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={self.dir / f'{user}.pem'}"]
        return lines


def prepare(root: Path, mode: str, hosts: Sequence[str]) -> SecureCluster:
    """Make (or find from an earlier run) the CA, the users' passwords and certificates, the
    brokers' certificate for ``hosts``, and the users' client properties files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from strandline.security.certs import CertificateAuthority

    if mode not in MODES:
        raise StrandlineError(f"--security {mode}: give one of {', '.join(MODES)}")
    d = root / "security"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    users_path = d / "users.json"
    try:
        passwords = json.loads(users_path.read_text()) if users_path.exists() else {}
    except (OSError, ValueError) as exc:
        raise StrandlineError(f"cannot read {users_path}: {exc}; remove it to make new passwords") from None
    if not isinstance(passwords, dict) or not all(isinstance(passwords.get(u), str) for u in USERS):
        passwords = {u: secrets.token_urlsafe(18) for u in USERS}
        _write_secret(users_path, json.dumps(passwords, indent=2).encode() + b"\n")
    ca_key, ca_cert = d / "ca.key", d / "ca.pem"
    if ca_key.exists() and ca_cert.exists():
        try:
            key = serialization.load_pem_private_key(ca_key.read_bytes(), None)
            ca = CertificateAuthority(key, x509.load_pem_x509_certificate(ca_cert.read_bytes()))  # type: ignore[arg-type]  # an EC key, as written below
        except (OSError, ValueError) as exc:
            raise StrandlineError(f"cannot read the CA in {d}: {exc}") from None
    else:
        ca = CertificateAuthority.new("Strandline up CA")
        _write_secret(ca_key, ca.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        ca_cert.write_bytes(ca.cert_pem)
    names = list(dict.fromkeys(["127.0.0.1", "localhost", *hosts]))
    _write_secret(d / "broker.pem", ca.issue("broker", hosts=names).pem)
    cluster = SecureCluster(mode, d, passwords)
    for user in ("admin", "client"):
        if cluster.protocol == "SSL" and not (d / f"{user}.pem").exists():
            _write_secret(d / f"{user}.pem", ca.issue(user).pem)
        _write_secret(cluster.properties_path(user), "\n".join(cluster.client_lines(user) + [""]).encode())
    return cluster


def store_users_and_acls(cluster: SecureCluster, zk_connect: str, timeout_s: float = 30.0) -> None:
    """Each user's SCRAM-SHA-512 credential in ``/config/users/<user>`` (SASL; other settings of
    the user there are kept) and ``client``'s ACLs, in ZooKeeper, before the brokers start."""
    import hashlib

    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    from strandline.security.scram import credential, new_salt

    zk = KazooClient(hosts=zk_connect, timeout=10.0)
    try:
        zk.start(timeout_s)
    except KazooTimeoutError:
        raise StrandlineError(f"ZooKeeper at {zk_connect} did not answer within {timeout_s:.0f} s") from None
    try:
        if cluster.sasl:
            for user in USERS:
                salt = new_salt()
                salted = hashlib.pbkdf2_hmac("sha512", cluster.passwords[user].encode(), salt, SCRAM_ITERATIONS)
                _merge(zk, ConfigEntityZNode.path("users", user),
                       _with_credential(user, credential(2, salt, salted, SCRAM_ITERATIONS)))
        for pattern, operation in CLIENT_ACLS:
            entry = AccessControlEntry("User:client", "*", operation, AclPermissionType.ALLOW)
            _merge(zk, AclZNode.path(pattern), _with_acl(AclZNode.path(pattern), entry))
    finally:
        zk.stop()
        zk.close()


def _with_credential(user: str, stored: str) -> Callable[[bytes | None], bytes]:
    def update(old: bytes | None) -> bytes:
        return ConfigEntityZNode.encode({**ConfigEntityZNode.decode(old, "users", user), MECHANISM: stored})
    return update


def _with_acl(path: str, entry: AccessControlEntry) -> Callable[[bytes | None], bytes]:
    def update(old: bytes | None) -> bytes:
        return AclZNode.encode(AclZNode.decode(old, path) | {entry})
    return update


def _merge(zk: Any, path: str, update: Callable[[bytes | None], bytes]) -> None:
    """Set ``path`` to ``update(old data)`` (made if missing), again if someone changed it meanwhile."""
    from kazoo.exceptions import (BadVersionError, NodeExistsError,
                                  NoNodeError)

    for _ in range(10):
        try:
            old, stat = zk.get(path)
        except NoNodeError:
            try:
                zk.create(path, update(None), makepath=True)
                return
            except NodeExistsError:
                continue
        try:
            zk.set(path, update(old), version=stat.version)
            return
        except BadVersionError:
            continue
    raise StrandlineError(f"{path} in ZooKeeper changed under every one of 10 updates")
