"""The JWKS of an OAUTHBEARER listener whose ``sasl.oauthbearer.jwks.endpoint.url`` is an
``http:`` or ``https:`` URL (KIP-768; Kafka's ``RefreshingHttpsJwks``).

The JWKS is fetched in a worker thread (``urllib``), never on the event loop: first at start-up,
then every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once when a token names a key id
the JWKS lacks (at most once a minute per key id). A failed fetch is tried again after
``...retry.backoff.ms``, doubling, until ``...retry.backoff.max.ms`` have passed; the keys of the
last fetch that worked stay in use meanwhile. Until a first fetch works every signed token is
refused (``invalid_token``), and the broker logs why at each failed fetch; the broker serves
everything else.

An ``https:`` endpoint's certificate and host name are checked against the trust store that the
listener's OAUTHBEARER JAAS config gives as options (``ssl.truststore.location``,
``ssl.truststore.type``, ``ssl.truststore.password``, ``ssl.truststore.certificates``, as Kafka's
``JaasOptionsUtils`` reads them), else against the system's CAs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.error
import urllib.request
from typing import Any, Callable

from strandline.core.security_keys import SECURITY_KEYS
from strandline.runtime import tls
from strandline.runtime.clock import now_ms
from strandline.security import jaas, oauthbearer

log = logging.getLogger("strandline.jwks")

#: How long one HTTP(S) request for the JWKS may take.
FETCH_TIMEOUT_S = 10.0
#: The largest JWKS document read.
MAX_JWKS_BYTES = 1 << 20


def https_context(jaas_options: dict[str, str], listener: str) -> ssl.SSLContext:
    """The TLS context of the JWKS requests: the JAAS options' ``ssl.*`` trust store (PEM,
    PKCS12 or JKS-as-PKCS12), else the system's CAs; host names are always checked."""
    conf: dict[str, Any] = {k: spec.default for k, spec in SECURITY_KEYS.items() if k.startswith("ssl.")}
    for key, value in jaas_options.items():
        if key in conf:
            conf[key] = [v.strip() for v in value.split(",") if v.strip()] if isinstance(conf[key], list) else value
    ctx = tls.client_context(conf, f"{listener} (the OAUTHBEARER JWKS endpoint)")
    ctx.check_hostname = True
    return ctx


def fetch(url: str, context: ssl.SSLContext | None, timeout_s: float = FETCH_TIMEOUT_S) -> str:
    """The JWKS document at ``url`` (blocking: run it in a thread); :class:`OSError` or
    :class:`ValueError` saying why not."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    handlers: list[Any] = [urllib.request.ProxyHandler({})]         # as Kafka's JWKS requests: no proxy
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body: bytes = response.read(MAX_JWKS_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise OSError(str(exc.reason)) from None
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
    text = body.decode("utf-8")
    document = json.loads(text)
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS: no \"keys\" list")
    return text


class HttpJwks:
    """One listener's JWKS endpoint: :meth:`__call__` is the validator's JWKS
    (:data:`oauthbearer.JWKS`), :meth:`key_id_missing` its :data:`oauthbearer.JWKS_KEY_ID_MISSING`."""

    def __init__(self, url: str, listener: str, refresh_ms: int, backoff_ms: int, backoff_max_ms: int,
                 context: ssl.SSLContext | None,
                 fetcher: Callable[[str, ssl.SSLContext | None], str] = fetch) -> None:
        self.url = url
        self.listener = listener
        self.refresh_ms = refresh_ms
        self.waits_ms = oauthbearer.retry_waits_ms(backoff_ms, backoff_max_ms)
        self.context = context
        self.fetcher = fetcher
        self.text: str | None = None
        self.error = "not fetched yet"
        self.fetches = 0                    # fetches that worked
        self._missing = oauthbearer.MissingKeyIds()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def __call__(self) -> str:
        if self.text is None:
            raise oauthbearer.InvalidToken(f"no JWKS from {self.url}: {self.error}")
        return self.text

    def key_id_missing(self, kid: str) -> None:
        if self._wake is not None and self._missing.should_refresh(kid, now_ms()):
            log.info("Listener %s: no key of the JWKS has the key id %r; fetching %s again", self.listener, kid[:100],
                     self.url)
            self._wake.set()

    def start(self) -> None:
        """Fetch now and then on schedule, on the running loop, until :meth:`stop`."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"JWKS of {self.listener}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            await self.refresh()
            try:
                await asyncio.wait_for(self._wake.wait(), self.refresh_ms / 1000)
            except asyncio.TimeoutError:
                pass

    async def refresh(self) -> bool:
        """One fetch with its retries; whether it worked (if not, the last keys stay)."""
        for attempt in range(len(self.waits_ms) + 1):
            try:
                text = await asyncio.to_thread(self.fetcher, self.url, self.context)
            except (OSError, ValueError) as exc:        # (UnicodeDecodeError and JSON errors are ValueErrors)
                self.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, OSError) else str(exc)
                if attempt < len(self.waits_ms):
                    await asyncio.sleep(self.waits_ms[attempt] / 1000)
                continue
            self.text, self.error = text, ""
            self.fetches += 1
            return True
        kept = "the keys fetched before stay in use" if self.text is not None else \
            "signed OAUTHBEARER tokens are refused until a fetch works"
        log.warning("Listener %s: cannot fetch the JWKS from %s (%s); %s", self.listener, self.url, self.error, kept,
                    extra={"kind": "cannot fetch the JWKS"})
        return False


def endpoint(listener: str, conf: dict[str, Any], url: str) -> HttpJwks:
    """The :class:`HttpJwks` of a listener's config (not started)."""
    text = conf.get(oauthbearer.JAAS_CONFIG)
    options: dict[str, str] = {}
    if text:
        try:
            options = jaas.single(str(text)).options
        except jaas.JaasError as exc:
            raise oauthbearer.ConfigError(f"{oauthbearer.JAAS_CONFIG}: {exc}") from None
    context = https_context(options, listener) if url.lower().startswith("https:") else None
    return HttpJwks(url, listener, int(conf[oauthbearer.JWKS_REFRESH_MS]), int(conf[oauthbearer.JWKS_RETRY_BACKOFF_MS]),
                    int(conf[oauthbearer.JWKS_RETRY_BACKOFF_MAX_MS]), context)
