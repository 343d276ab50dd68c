"""The JWKS of an http(s) endpoint (strandline.runtime.jwks), with a fetcher standing in for urllib."""

from __future__ import annotations

import asyncio
import json
import ssl

import pytest

from strandline.runtime import jwks
from strandline.security import oauthbearer

DOC = json.dumps({"keys": []})


def endpoint(results: list, backoff_max_ms: int = 3) -> tuple[jwks.HttpJwks, list[str]]:
    """An HttpJwks whose fetches give ``results`` in turn (an exception is raised)."""
    calls: list[str] = []

    def fetcher(url: str, context: ssl.SSLContext | None) -> str:
        calls.append(url)
        result = results.pop(0) if results else DOC
        if isinstance(result, Exception):
            raise result
        return result
    return jwks.HttpJwks("https://idp.example/jwks", "SIGNED", 3_600_000, 1, backoff_max_ms, None, fetcher), calls


def test_before_a_fetch_works_the_token_is_refused_saying_why():
    source, calls = endpoint([OSError("Connection refused")] * 10)
    assert not asyncio.run(source.refresh())
    assert len(calls) == 3                             # waits of 1 and 2 ms: 3 ms of retries in all
    with pytest.raises(oauthbearer.InvalidToken, match="no JWKS from https://idp.example/jwks: Connection refused"):
        source()


def test_a_failed_refresh_keeps_the_last_keys_and_a_retry_may_succeed():
    source, calls = endpoint([DOC, OSError("reset"), OSError("reset"), OSError("reset"), OSError("reset")])
    assert asyncio.run(source.refresh()) and source() == DOC
    assert not asyncio.run(source.refresh()) and source() == DOC and source.error == "reset"
    flaky, _ = endpoint([ValueError("not a JWKS"), DOC])
    assert asyncio.run(flaky.refresh()) and flaky() == DOC


def test_an_unknown_key_id_wakes_the_refresher_once_a_minute():
    async def until(condition, timeout_s: float = 5.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.001)

    async def scenario() -> None:
        source, calls = endpoint([])
        source.start()
        await until(lambda: len(calls) == 1 and source.text is not None)     # the fetch at start
        source.key_id_missing("k2")
        await until(lambda: len(calls) == 2)
        source.key_id_missing("k2")                     # asked again within the minute: no wake-up
        assert source._wake is not None and not source._wake.is_set()
        source.key_id_missing("k3")
        assert source._wake.is_set()
        source.stop()
    asyncio.run(scenario())


def test_the_https_context_trusts_the_jaas_options_trust_store(tmp_path):
    from tests.unit.cli.fake_broker import make_pki

    pki = make_pki(tmp_path)
    ctx = jwks.https_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca"]}, "SIGNED")
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "Strandline Test CA"),),)]
