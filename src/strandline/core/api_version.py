"""``inter.broker.protocol.version``: the versions of Kafka's inter-broker protocol (Kafka 2.8's
``ApiVersion``), parsed as Kafka parses them, and what each lets a broker send.

A version is named in full (``2.7-IV2``) or by its release (``2.7``, ``2.7.1``: the newest of that
release's internal versions); the 0.x releases take three numbers (``0.10.2``). From ``2.7-IV2`` on a
leader proposes its ISR changes to the controller with AlterIsr (KIP-497) instead of writing the
partition state znode itself (SPEC ISR-5).
"""

from __future__ import annotations

from typing import Any

#: Kafka 2.8's inter-broker protocol versions, oldest first
VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0",
    "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2", "0.10.2-IV0",
    "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
    "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0", "2.4-IV1",
    "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1",
)
#: Kafka 2.8's default (its latest version)
LATEST = VERSIONS[-1]


def _release(version: str) -> str:
    return version.split("-", 1)[0]


#: every accepted name (full, and each release's short name for its newest) -> its position in VERSIONS
_BY_NAME: dict[str, int] = {}
for _i, _v in enumerate(VERSIONS):
    _BY_NAME[_v] = _i
    _BY_NAME[_release(_v)] = _i       # later internal versions of a release overwrite earlier ones

ALTER_ISR = _BY_NAME["2.7-IV2"]       # KAFKA_2_7_IV2: isAlterIsrSupported


def parse(text: str) -> int:
    """The position of version ``text`` in :data:`VERSIONS` (Kafka's ``ApiVersion.apply``: the
    first two dot-separated parts, three for 0.x, name the version); ValueError if none."""
    text = str(text).strip()
    parts = text.split(".")
    name = ".".join(parts[:3 if text.startswith("0.") else 2])
    position = _BY_NAME.get(name)
    if position is None:
        raise ValueError(f"Version `{text}` is not a valid version")
    return position


def alter_isr_supported(text: str) -> bool:
    """Whether leaders of this inter-broker protocol version send AlterIsr (2.7-IV2 and later)."""
    return parse(text) >= ALTER_ISR


def elr_enabled(config: Any) -> bool:
    """Whether eligible leader replicas (KIP-966) are on: ``eligible.leader.replicas.enable`` with
    AlterIsr (inter.broker.protocol.version 2.7 or later), through which the controller alone
    writes a partition's ISR and so keeps its ELR beside it."""
    return bool(config["eligible.leader.replicas.enable"]) and alter_isr_supported(config["inter.broker.protocol.version"])
