"""The JSON of Kafka's znodes: compact encoding like Kafka's Jackson encoder, strict decoding
that names the znode on malformed data, and Kafka's base64 UUIDs (cluster and topic ids)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable, TypeVar

from strandline.uuids import uuid_from_base64 as uuid_from_base64, uuid_to_base64 as uuid_to_base64  # noqa: F401  (part of this module's interface)

T = TypeVar("T")


def json_bytes(value: Any) -> bytes:
    """Kafka's ``Json.encodeAsBytes``: compact UTF-8 JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(path: str, data: bytes | None, parse: Callable[[Any], T]) -> T:
    """Parse ``data`` as JSON and hand it to ``parse``; any failure is a ValueError naming ``path``."""
    if data is None:
        raise ValueError(f"znode {path} has no data")
    try:
        obj = json.loads(data)
        return parse(obj)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"malformed data in znode {path}: {exc}: {bytes(data[:120])!r}") from None


def json_int(value: Any) -> int:
    """A JSON integer (not a bool, not a float with a fraction)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"expected an integer, got {value!r}")


def json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {value!r}")
    return value


def int_list(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list of integers, got {value!r}")
    return tuple(json_int(v) for v in value)


def new_cluster_id(value: uuid.UUID | None = None) -> str:
    """A cluster id like Kafka's ``CoreUtils.generateUuidAsBase64``; pass ``value`` to be deterministic."""
    return uuid_to_base64(value if value is not None else uuid.uuid4())


class FixedPathZNode:
    """A znode whose path is fixed: ``path()`` is ``PATH``."""

    PATH = ""

    @classmethod
    def path(cls) -> str:
        return cls.PATH


class SequentialZNode:
    """A znode whose children ZooKeeper names ``<PREFIX><10 digits>`` as they are created."""

    PREFIX = ""

    @classmethod
    def sequence(cls, child: str) -> int | None:
        """The sequence number of a child's name, None for a name that is not ``PREFIX`` and digits."""
        digits = child[len(cls.PREFIX):]
        return int(digits) if child.startswith(cls.PREFIX) and digits.isdigit() else None
