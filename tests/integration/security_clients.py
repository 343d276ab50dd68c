"""Four real clients, one way to drive each over a secured listener: confluent-kafka and kcat
(both librdkafka), kafka-python and aiokafka. :class:`Auth` says how to connect (security
protocol, SASL mechanism and user, the CA, a client certificate); :func:`round_trip` produces one
record and reads it back, :func:`auth_failure` says how a refused authentication reached the
client, :func:`produce_error` what a produce was answered."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass

from tests.conftest import missing_prerequisite

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")
TIMEOUT_S = 15


@dataclass(frozen=True)
class Auth:
    bootstrap: str
    protocol: str                       # SASL_PLAINTEXT, SASL_SSL or SSL
    mechanism: str | None = None        # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    user: str = ""                      # OAUTHBEARER: the token's sub
    password: str = ""
    ca: str | None = None               # PEM file
    cert: str | None = None             # PEM certificate (chain) of a client certificate
    key: str | None = None
    token_lifetime_s: int = 3600        # OAUTHBEARER: exp - iat (negative: expired already)
    token: str | None = None            # OAUTHBEARER: this (signed) token instead of an unsecured one
    token_endpoint: str | None = None   # kcat's OAUTHBEARER: an OIDC token endpoint (client credentials)


def oauth_token(auth: Auth) -> str:
    """The token an OAUTHBEARER client sends: the signed one given, else an unsecured one."""
    return auth.token if auth.token is not None else unsecured_jwt(auth.user, auth.token_lifetime_s)


def unsecured_jwt(sub: str, lifetime_s: int) -> str:
    """An unsecured JWS (alg none) as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes one."""
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    now_ms = int(time.time() * 1000)    # whole milliseconds, never past the clock (Kafka rounds iat to ms)
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now_ms / 1000, 'exp': now_ms / 1000 + lifetime_s})}."


def new_topic() -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


# -- confluent-kafka ------------------------------------------------------------------------------

def librdkafka_conf(auth: Auth, *, callbacks: bool = True) -> dict:
    """librdkafka's settings; with ``callbacks`` an OAUTHBEARER token comes from ``oauth_cb`` (a
    token of any lifetime), else from librdkafka's own unsecured tokens (kcat: a file of strings)."""
    conf = {"bootstrap.servers": auth.bootstrap, "security.protocol": auth.protocol, "socket.timeout.ms": 5000}
    if auth.ca:
        conf["ssl.ca.location"] = auth.ca
    if auth.cert:
        conf.update({"ssl.certificate.location": auth.cert, "ssl.key.location": auth.key})
    if auth.mechanism:
        conf["sasl.mechanisms"] = auth.mechanism
        if auth.mechanism == "OAUTHBEARER":
            if callbacks:
                # librdkafka takes only a token it believes unexpired: the expiry it is told is the
                # future, the token's exp what the test wants
                conf["oauth_cb"] = lambda _config: (oauth_token(auth), time.time() + 3600, auth.user, {})
            elif auth.token_endpoint is not None:   # librdkafka's OIDC client credentials flow
                conf.update({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": auth.user,
                             "sasl.oauthbearer.client.secret": auth.password or "secret",
                             "sasl.oauthbearer.token.endpoint.url": auth.token_endpoint})
            else:
                conf.update({"enable.sasl.oauthbearer.unsecure.jwt": "true",
                             "sasl.oauthbearer.config": f"principal={auth.user} lifeSeconds={auth.token_lifetime_s}"})
        else:
            conf.update({"sasl.username": auth.user, "sasl.password": auth.password})
    return conf


def _ck_produce(auth: Auth, topic: str, value: bytes) -> str:
    from confluent_kafka import Producer

    outcome: list[str] = []
    producer = Producer({**librdkafka_conf(auth), "message.timeout.ms": 10000, "retries": 0})
    producer.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err.name() if err else "NO_ERROR"))
    producer.flush(TIMEOUT_S)
    return outcome[0] if outcome else "NO_DELIVERY_REPORT"


def _ck_consume(auth: Auth, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**librdkafka_conf(auth), "group.id": "g-" + topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return [m.value() for m in consumer.consume(num_messages=1, timeout=TIMEOUT_S) if m.error() is None]
    finally:
        consumer.close()


def _ck_auth_failure(auth: Auth) -> str:
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    producer = Producer({**librdkafka_conf(auth), "log_level": 0, "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    return errors[0].str()


# -- kafka-python ---------------------------------------------------------------------------------

def _kp_kwargs(auth: Auth) -> dict:
    kw: dict = {"bootstrap_servers": auth.bootstrap, "security_protocol": auth.protocol, "request_timeout_ms": 10000}
    if auth.ca:
        kw["ssl_cafile"] = auth.ca
    if auth.cert:
        kw.update({"ssl_certfile": auth.cert, "ssl_keyfile": auth.key})
    if auth.mechanism:
        kw["sasl_mechanism"] = auth.mechanism
        if auth.mechanism == "OAUTHBEARER":
            from kafka.net.sasl.oauth import AbstractTokenProvider

            class Tokens(AbstractTokenProvider):
                def token(self) -> str:
                    return oauth_token(auth)
            kw["sasl_oauth_token_provider"] = Tokens()
        else:
            kw.update({"sasl_plain_username": auth.user, "sasl_plain_password": auth.password})
    return kw


def _kp_produce(auth: Auth, topic: str, value: bytes) -> str:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(**_kp_kwargs(auth), max_block_ms=TIMEOUT_S * 1000, retries=0)
    try:
        producer.send(topic, value).get(timeout=TIMEOUT_S)
        return "NO_ERROR"
    except KafkaError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        producer.close(timeout=5)


def _kp_consume(auth: Auth, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, **_kp_kwargs(auth), auto_offset_reset="earliest",
                             consumer_timeout_ms=TIMEOUT_S * 1000, group_id="g-" + topic)
    try:
        for message in consumer:
            return [message.value]
        return []
    finally:
        consumer.close()


class _Logged(logging.Handler):
    """The log lines of a client library while a call runs (kafka-python and aiokafka say why a
    connection failed in their logs only: the exception says the bootstrap failed)."""

    def __init__(self, logger: str) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(logger)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> "_Logged":
        self.level_was = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_was)


def _kp_auth_failure(auth: Auth) -> str:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    with _Logged("kafka") as logged:
        try:
            KafkaAdminClient(**_kp_kwargs(auth), bootstrap_timeout_ms=4000).close()     # a refusal takes 0.1 s
        except KafkaError as exc:
            sent = ["SaslAuthenticate sent"] if any("SaslAuthenticateRequest" in line for line in logged.lines) else []
            return " | ".join([f"{type(exc).__name__}: {exc}", *sent,
                               *(line for line in logged.lines if "failed" in line)])
    raise AssertionError("kafka-python connected")


# -- aiokafka -------------------------------------------------------------------------------------

def _aio_kwargs(auth: Auth) -> dict:
    kw: dict = {"bootstrap_servers": auth.bootstrap, "security_protocol": auth.protocol, "request_timeout_ms": 10000}
    if auth.ca or auth.cert:
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context(cafile=auth.ca, certfile=auth.cert, keyfile=auth.key)
    if auth.mechanism:
        kw["sasl_mechanism"] = auth.mechanism
        if auth.mechanism == "OAUTHBEARER":
            from aiokafka.abc import AbstractTokenProvider

            class Tokens(AbstractTokenProvider):
                async def token(self) -> str:
                    return oauth_token(auth)
            kw["sasl_oauth_token_provider"] = Tokens()
        else:
            kw.update({"sasl_plain_username": auth.user, "sasl_plain_password": auth.password})
    return kw


async def _aio_produce_async(auth: Auth, topic: str, value: bytes) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    producer = AIOKafkaProducer(**_aio_kwargs(auth))
    await producer.start()
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, value), TIMEOUT_S)
        return "NO_ERROR"
    except KafkaError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await producer.stop()


async def _aio_consume_async(auth: Auth, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, **_aio_kwargs(auth), auto_offset_reset="earliest", group_id="g-" + topic)
    await consumer.start()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            values = [m.value for records in batches.values() for m in records]
            if values:
                return values
        return []
    finally:
        await consumer.stop()


async def _aio_auth_failure_async(auth: Auth) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    producer = AIOKafkaProducer(**_aio_kwargs(auth))
    with _Logged("aiokafka") as logged:
        try:
            await producer.start()
        except KafkaError as exc:
            # aiokafka takes OAUTHBEARER's error challenge ({"status":"invalid_token"}) for success
            # and sends its next request, which the broker answers by closing: the challenge is in its log
            return " | ".join([f"{type(exc).__name__}: {exc}", *(line for line in logged.lines if "failed" in line
                                                                 or "invalid_token" in line
                                                                 or "Unable connect" in line)])
        finally:
            await producer.stop()
    raise AssertionError("aiokafka connected")


# -- kcat -----------------------------------------------------------------------------------------

def _kcat(auth: Auth, args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    if shutil.which("kcat") is None:
        missing_prerequisite("kcat is not installed (make kcat installs it)")
    conf = librdkafka_conf(auth, callbacks=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kcat.conf")       # -F: the password stays off the command line
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in conf.items() if k != "bootstrap.servers"))
        return subprocess.run(["kcat", "-F", path, "-b", auth.bootstrap, *args], input=stdin, capture_output=True,
                              timeout=TIMEOUT_S + 15)


def _kcat_produce(auth: Auth, topic: str, value: bytes) -> str:
    done = _kcat(auth, ["-P", "-t", topic, "-X", "message.timeout.ms=10000"], value)
    errors = done.stderr.decode(errors="replace")
    return "NO_ERROR" if done.returncode == 0 and "ERROR" not in errors.upper() else errors


def _kcat_consume(auth: Auth, topic: str) -> list[bytes]:
    done = _kcat(auth, ["-C", "-t", topic, "-o", "beginning", "-c", "1", "-e", "-q", "-D", ""])
    assert done.returncode == 0, done.stderr
    return [done.stdout] if done.stdout else []


def _kcat_auth_failure(auth: Auth) -> str:
    done = _kcat(auth, ["-L", "-m", "3"])          # the refusal comes within 0.1 s; -L then gives up
    assert done.returncode != 0, done.stdout
    return "".join(line for line in done.stderr.decode(errors="replace").splitlines(keepends=True)
                   if not line.startswith("% Reading configuration"))


# -- the same for every client --------------------------------------------------------------------

def produce(client: str, auth: Auth, topic: str, value: bytes) -> str:
    """"NO_ERROR", or what the produce was answered."""
    if client == "confluent-kafka":
        return _ck_produce(auth, topic, value)
    if client == "kafka-python":
        return _kp_produce(auth, topic, value)
    if client == "aiokafka":
        return asyncio.run(_aio_produce_async(auth, topic, value))
    return _kcat_produce(auth, topic, value)


def consume(client: str, auth: Auth, topic: str) -> list[bytes]:
    """The first record of the topic's partition 0 (none if none came within the timeout)."""
    if client == "confluent-kafka":
        return _ck_consume(auth, topic)
    if client == "kafka-python":
        return _kp_consume(auth, topic)
    if client == "aiokafka":
        return asyncio.run(_aio_consume_async(auth, topic))
    return _kcat_consume(auth, topic)


def round_trip(client: str, auth: Auth) -> None:
    """One record produced to a new topic (created by the producer's Metadata request) and read
    back, with this client."""
    topic = new_topic()
    value = f"from {client} as {auth.user or auth.cert}".encode()
    assert produce(client, auth, topic, value) == "NO_ERROR"
    assert consume(client, auth, topic) == [value]


#: kafka-python 3.0.12 often reports a refused SaslAuthenticate as the connection the broker closed
#: right after its answer (it reads the close before the answer); the broker's answer is there
#: (the other clients read it), so this is what a refusal looks like to kafka-python then
KAFKA_PYTHON_CLOSED = ("Unable to bootstrap", "SaslAuthenticate sent", "socket disconnected")


def refused_as(error: str, message: str) -> bool:
    """Whether a client's error says the broker refused with ``message``, or (kafka-python) is a
    refusal it read as the close that follows it."""
    return message in error or all(part in error for part in KAFKA_PYTHON_CLOSED)


def auth_failure(client: str, auth: Auth) -> str:
    """The error the client got for an authentication the broker refused (it fails if none)."""
    if client == "confluent-kafka":
        return _ck_auth_failure(auth)
    if client == "kafka-python":
        return _kp_auth_failure(auth)
    if client == "aiokafka":
        return asyncio.run(_aio_auth_failure_async(auth))
    return _kcat_auth_failure(auth)
