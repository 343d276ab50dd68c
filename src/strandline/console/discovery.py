"""Finding and reading the brokers' operators' endpoints (blocking; the CLI's and the console's).

The brokers a cluster has registered come from Metadata; each one's ``metrics.port`` from
DescribeConfigs (the port it serves ``/metrics`` and ``/status`` on).
"""

from __future__ import annotations

from typing import Any

import json
import urllib.request

from strandline.console.model import cluster_view
from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection

DESCRIBE_CONFIGS, METADATA = 32, 3
BROKER_RESOURCE = 4


def metrics_addresses(bootstrap: str, timeout_s: float = 5.0) -> tuple[list[int], dict[int, str]]:
    """(the registered brokers' ids, ``http://host:port`` of those that answered)."""
    with KafkaConnection(bootstrap, timeout_s=timeout_s, client_id="strandline-console") as conn:
        md = conn.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False})
    found = {}
    for b in md.brokers:
        try:
            with KafkaConnection(f"{b.host}:{b.port}", timeout_s=timeout_s, client_id="strandline-console") as conn:
                resp = conn.request(DESCRIBE_CONFIGS, 1, {"resources": [
                    {"resource_type": BROKER_RESOURCE, "resource_name": str(b.node_id),
                     "configuration_keys": ["metrics.port"]}], "include_synonyms": False})
        except StrandlineError:
            continue
        port = next((int(c.value) for r in resp.results for c in r.configs if c.name == "metrics.port"), -1)
        if port == -1:        # a broker that does not report the port in use: the default rule
            port = int(b.port) + 1000 if int(b.port) + 1000 <= 65535 else 0
        if 0 < port <= 65535:
            found[int(b.node_id)] = f"http://{b.host}:{port}"
    return sorted(int(b.node_id) for b in md.brokers), found


def read_status(url: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """A broker's ``/status``, None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/status", timeout=timeout_s) as resp:
            status: dict[str, Any] = json.loads(resp.read())
            return status
    except Exception:      # refused, timed out, not HTTP, not JSON: it does not answer
        return None


def read_cluster(bootstrap: str) -> dict[str, Any]:
    """The console's picture of the cluster (:func:`strandline.console.model.cluster_view`), read
    now from every registered broker."""
    registered, addresses = metrics_addresses(bootstrap)
    statuses = {b: read_status(addresses[b]) if b in addresses else None for b in registered}
    return cluster_view(statuses, addresses)
