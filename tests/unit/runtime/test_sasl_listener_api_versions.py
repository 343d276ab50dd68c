"""A SASL listener answers an ApiVersions sent before authentication as the broker answers one
after it (Kafka's SaslServerAuthenticator asks the broker's ApiVersionManager): librdkafka takes
its API versions, and Kafka 4.x clients the finalized features, from that first answer."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.broker.apis import api_versions_answer
from strandline.core.config import BrokerConfig
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.runtime.broker_main import listener_specs
from strandline.security.authenticator import SaslAuthenticator

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')


def config(**extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({
        "broker.id": "1", "zookeeper.connect": "zk:2181", "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **extra})


def authenticator(conf: BrokerConfig) -> SaslAuthenticator:
    [spec] = listener_specs(conf, None)          # type: ignore[arg-type]  # ZooKeeper is read only for SCRAM
    assert spec.authenticator is not None
    return spec.authenticator()


def before_authentication(conf: BrokerConfig, version: int, body: dict, auth: SaslAuthenticator | None = None):
    auth = auth or authenticator(conf)
    step = auth.receive(api.encode_request(ApiKey.API_VERSIONS, version, 7, "t", body), 0)
    return api.decode_response(ApiKey.API_VERSIONS, version, step.send[0][4:])


def after_authentication(conf: BrokerConfig, version: int, body: dict):
    framed = api.encode_response(RequestHeader(ApiKey.API_VERSIONS, version, 7, "t"),
                                 api_versions_answer(conf, version, _Request(body)))
    return api.decode_response(ApiKey.API_VERSIONS, version, framed[4:])


class _Request:
    def __init__(self, body: dict) -> None:
        self.__dict__.update(body)


SOFTWARE = {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}


def test_the_answer_before_authentication_has_the_features_and_the_apis_of_the_one_after():
    conf = config(**{"group.coordinator.rebalance.protocols": "classic"})
    before = before_authentication(conf, 3, SOFTWARE)
    keys = {k.api_key for k in before.api_keys}
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in keys and ApiKey.FETCH in keys
    assert [(f.name, f.max_version_level) for f in before.finalized_features] == [("transaction.version", 2)]
    assert before == after_authentication(conf, 3, SOFTWARE)


def test_a_malformed_software_name_is_refused_before_authentication_as_after_it_and_may_ask_again():
    conf = config()
    bad = {"client_software_name": "-bad name", "client_software_version": "1"}
    auth = authenticator(conf)
    before = before_authentication(conf, 3, bad, auth)
    assert before.error_code == ErrorCode.invalid_request and not before.api_keys
    assert before == after_authentication(conf, 3, bad)
    again = before_authentication(conf, 3, SOFTWARE, auth)
    assert again.error_code == ErrorCode.none and again == after_authentication(conf, 3, SOFTWARE)
