"""The security keys (Kafka's SslConfigs and SaslConfigs as a broker takes them): TLS key and trust
stores, client authentication, and the SASL mechanisms with their JAAS configs and token
validation. Each may also be given for one listener as ``listener.name.<name>.<key>``
(:func:`listener_key`); :meth:`strandline.core.config.BrokerConfig.listener_config` gives a
listener's own."""

from __future__ import annotations

import re

from strandline.core.config_key import Key, key_table

SSL_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
STORE_TYPES = ("JKS", "PKCS12", "PEM")

#: The security keys: each may also be given for one listener as ``listener.name.<name>.<key>``
#: (the name in lower case, as Kafka), which then wins for that listener; the SASL JAAS config also as
#: ``listener.name.<name>.<mechanism>.sasl.jaas.config`` (the mechanism in lower case).
SECURITY_KEYS: dict[str, Key] = key_table(
    Key("ssl.protocol", "string", "TLSv1.3",
        doc="The TLS protocol of the broker's own client connections to other brokers (the enabled "
            "protocols bound what is negotiated)."),
    Key("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], choices=SSL_PROTOCOLS,
        doc="The TLS versions a listener (and the broker's own client side) accepts."),
    Key("ssl.cipher.suites", "list", [],
        doc="The cipher suites of TLS 1.2 (OpenSSL or IANA names, as Python's ssl takes them); empty: "
            "the library's defaults. TLS 1.3 suites are always the library's."),
    Key("ssl.keystore.type", "choice", "JKS", choices=STORE_TYPES,
        doc="PEM (KIP-651: a PEM file with the key and certificate chain, or ssl.keystore.key and "
            "ssl.keystore.certificate.chain inline) or PKCS12; JKS reads a PKCS12 file, as Java 9+ does "
            "(keytool's default), and refuses Java's own JKS format."),
    Key("ssl.keystore.location", "string", None, doc="The key store file (PEM or PKCS12)."),
    Key("ssl.keystore.password", "password", None, doc="The PKCS12 key store's password."),
    Key("ssl.key.password", "password", None, doc="The password of the private key (an encrypted PEM key)."),
    Key("ssl.keystore.certificate.chain", "password", None,
        doc="With ssl.keystore.type=PEM: the certificate chain in PEM, inline."),
    Key("ssl.keystore.key", "password", None, doc="With ssl.keystore.type=PEM: the private key in PEM, inline."),
    Key("ssl.truststore.type", "choice", "JKS", choices=STORE_TYPES,
        doc="PEM (certificates in a file or ssl.truststore.certificates inline) or PKCS12; JKS as for "
            "ssl.keystore.type."),
    Key("ssl.truststore.location", "string", None, doc="The trust store file (PEM or PKCS12)."),
    Key("ssl.truststore.password", "password", None, doc="The PKCS12 trust store's password."),
    Key("ssl.truststore.certificates", "password", None,
        doc="With ssl.truststore.type=PEM: the trusted certificates in PEM, inline."),
    Key("ssl.client.auth", "choice", "none", choices=("required", "requested", "none"),
        doc="Whether an SSL listener asks clients for a certificate (signed by the trust store's CAs): "
            "required refuses a client without one, requested takes one when given. SASL_SSL listeners "
            "take no certificate for the principal (SASL names it)."),
    Key("ssl.endpoint.identification.algorithm", "string", "https",
        doc="https: the broker's client side checks that another broker's certificate names its host; "
            "empty: no check."),
    Key("ssl.principal.mapping.rules", "string", "DEFAULT",
        doc="Rules mapping a client certificate's distinguished name to the principal's name (KIP-371); "
            "DEFAULT: the whole DN (RFC 2253), as User:CN=...,O=..."),
    Key("sasl.enabled.mechanisms", "list", ["GSSAPI"],
        doc="The SASL mechanisms a SASL listener offers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, "
            "as they are available)."),
    Key("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
        doc="The SASL mechanism brokers authenticate to each other with on a SASL inter-broker listener."),
    Key("sasl.jaas.config", "password", None,
        doc="The JAAS login module configuration: for PLAIN, org.apache.kafka.common.security.plain."
            "PlainLoginModule required username=\"..\" password=\"..\" user_<name>=\"<password>\" ...; "
            "username/password are the broker's own for inter-broker connections."),
    Key("sasl.server.max.receive.size", "int", 524288, lo=1,
        doc="The largest frame a SASL listener takes before the connection has authenticated; a larger "
            "one closes the connection."),
    Key("connection.failed.authentication.delay.ms", "int", 100, lo=0,
        doc="How long a connection whose authentication failed waits before its answer is sent and it "
            "closes (a client retrying a wrong password is slowed down)."),
    Key("connections.max.reauth.ms", "long", 0, lo=0,
        doc="KIP-368: the longest a SASL session lasts before the client must authenticate again "
            "(0: for ever); a request after it closes the connection."),
    Key("sasl.server.callback.handler.class", "string", None,
        doc="OAUTHBEARER's token validator: org.apache.kafka.common.security.oauthbearer."
            "OAuthBearerValidatorCallbackHandler (signed tokens, KIP-768) or, by default, the unsecured one "
            "(KIP-255, for development)."),
    Key("sasl.oauthbearer.jwks.endpoint.url", "string", None,
        doc="KIP-768: the JWKS whose keys sign the tokens: a file: URL (read at each authentication) or an "
            "http: or https: one (fetched at start-up and every sasl.oauthbearer.jwks.endpoint.refresh.ms, and "
            "when a token's key id is unknown; https: checked against the OAUTHBEARER JAAS config's "
            "ssl.truststore.* options, else the system's CAs)."),
    Key("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, lo=1,
        doc="KIP-768: how often an http(s) JWKS endpoint is fetched again."),
    Key("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100, lo=0,
        doc="KIP-768: the first wait before a failed JWKS fetch is tried again (doubled each time)."),
    Key("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10000, lo=0,
        doc="KIP-768: how long a JWKS fetch is retried before it waits for the next refresh."),
    Key("sasl.oauthbearer.expected.audience", "list", [],
        doc="KIP-768: a token's aud must name one of these (none: not checked)."),
    Key("sasl.oauthbearer.expected.issuer", "string", None, doc="KIP-768: a token's iss must be this (unset: not checked)."),
    Key("sasl.oauthbearer.sub.claim.name", "string", "sub", doc="KIP-768: the claim naming the principal."),
    Key("sasl.oauthbearer.scope.claim.name", "string", "scope", doc="KIP-768: the claim holding the scopes."),
    Key("sasl.oauthbearer.clock.skew.seconds", "int", 30, lo=0,
        doc="KIP-768: the clock difference allowed when checking a token's exp, iat and nbf."),
)
_PER_LISTENER = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_MECHANISM_KEY = re.compile(r"^([a-z0-9-]+)\.(sasl\.jaas\.config)$")


def listener_key(key: str) -> tuple[str, str, Key] | None:
    """``listener.name.<name>.<key>`` -> (listener name in upper case, the key as stored, its Key);
    the key may be ``<mechanism>.sasl.jaas.config``. None: not a per-listener key."""
    match = _PER_LISTENER.match(key)
    if match is None:
        return None
    name, rest = match.group(1).upper(), match.group(2)
    spec = SECURITY_KEYS.get(rest)
    if spec is None:
        mech = _MECHANISM_KEY.match(rest)
        if mech is None:
            return None
        spec = SECURITY_KEYS["sasl.jaas.config"]
    return name, rest, spec
