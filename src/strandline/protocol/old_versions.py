"""Schemas of the API versions Kafka 2.8 serves that kio (generated from Kafka 4.x, which dropped
them, KIP-896) lacks: Produce v0-v2, Fetch v0-v3, ListOffsets v0, OffsetCommit v0-v1, OffsetFetch
v0, CreateTopics v0-v1, DeleteTopics v0, OffsetForLeaderEpoch v0-v1, WriteTxnMarkers v0,
DescribeAcls, CreateAcls and DeleteAcls v0, DescribeConfigs v0, AlterReplicaLogDirs v0,
DescribeLogDirs v0, the delegation token APIs' v0 (v1's fields) and AlterIsr v0 (AlterPartition's).

Each is derived from the oldest version kio has, as the message's JSON in Kafka 2.8 describes the
difference (``clients/src/main/resources/common/message/*.json``): fields dropped, fields added,
nested entities replaced by their own derived versions. The result is a frozen keyword-only
dataclass like kio's, so kio's reader and writer, the shape walker and ``build`` take it as they
take kio's own. :func:`request_schema` and :func:`response_schema` answer for every version,
kio's or derived.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.static.primitive import i16, i32, i64

_CLASS_VARS = ("__type__", "__flexible__", "__api_key__", "__header_schema__")


class _Added:
    """A field to add: ``name``, its Python type, kio's ``kafka_type``, a default, and the field
    it follows (None: first)."""

    def __init__(self, name: str, type_: Any, kafka_type: str | None, default: Any = dataclasses.MISSING,
                 after: str | None = None) -> None:
        self.name, self.type_, self.kafka_type, self.default, self.after = name, type_, kafka_type, default, after


def derive(cls: type, version: int, *, drop: tuple[str, ...] = (), add: tuple[_Added, ...] = (),
           nested: dict[str, type] | None = None, flexible: bool | None = None) -> type:
    """``cls`` as version ``version``: without the ``drop`` fields, with the ``add`` fields, an
    entity array's element class replaced by ``nested[name]``."""
    nested = nested or {}
    fields: list[tuple[str, Any, Any]] = []

    def spec(name: str, type_: Any, metadata: dict[str, Any], default: Any,
             default_factory: Any) -> tuple[str, Any, Any]:
        kwargs: dict[str, Any] = {"metadata": metadata}
        if default is not dataclasses.MISSING:
            kwargs["default"] = default
        elif default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = default_factory
        return name, type_, dataclasses.field(**kwargs)

    def insert_after(anchor: str | None) -> None:
        for extra in add:
            if extra.after == anchor:
                metadata = {"kafka_type": extra.kafka_type} if extra.kafka_type else {}
                fields.append(spec(extra.name, extra.type_, metadata, extra.default, dataclasses.MISSING))

    insert_after(None)
    for f in dataclasses.fields(cls):
        if f.name in drop:
            continue
        type_ = f.type
        if f.name in nested:
            inner = nested[f.name]
            optional = "None" in str(type_)
            type_ = (tuple[inner, ...] | None) if optional else tuple[inner, ...]  # type: ignore[valid-type]  # a class made at run time
        fields.append(spec(f.name, type_, dict(f.metadata), f.default, f.default_factory))
        insert_after(f.name)
    namespace = {k: getattr(cls, k) for k in _CLASS_VARS if hasattr(cls, k)}
    namespace["__version__"] = i16(version)
    if flexible is not None:
        namespace["__flexible__"] = flexible
    new = dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True, slots=True,
                                     kw_only=True)
    new.__module__ = __name__
    new.__qualname__ = f"{cls.__name__}V{version}"
    return new


def _array_element(cls: type, name: str) -> type:
    for f in dataclasses.fields(cls):
        if f.name == name:
            t = f.type
            args: tuple[Any, ...] = getattr(t, "__args__", ())
            for a in args:                          # tuple[X, ...] | None
                if getattr(a, "__origin__", None) is tuple:
                    element: type = a.__args__[0]
                    return element
            only: type = args[0]
            return only
    raise KeyError(name)


# -- the derivations, per (api key, version) ----------------------------------------------------

def _produce_request(v: int) -> type:
    base = load_request_schema(0, 3)
    topic = _array_element(base, "topic_data")
    partition = _array_element(topic, "partition_data")
    p = derive(partition, v)
    t = derive(topic, v, nested={"partition_data": p})
    return derive(base, v, drop=("transactional_id",), nested={"topic_data": t})


def _produce_response(v: int) -> type:
    base = load_response_schema(0, 3)
    topic = _array_element(base, "responses")
    partition = _array_element(topic, "partition_responses")
    p = derive(partition, v, drop=() if v >= 2 else ("log_append_time",))
    t = derive(topic, v, nested={"partition_responses": p})
    return derive(base, v, drop=() if v >= 1 else ("throttle_time",), nested={"responses": t})


def _fetch_request(v: int) -> type:
    base = load_request_schema(1, 4)
    topic = _array_element(base, "topics")
    partition = _array_element(topic, "partitions")
    t = derive(topic, v, nested={"partitions": derive(partition, v)})
    return derive(base, v, drop=("isolation_level",) + (() if v >= 3 else ("max_bytes",)), nested={"topics": t})


def _fetch_response(v: int) -> type:
    base = load_response_schema(1, 4)
    topic = _array_element(base, "responses")
    partition = _array_element(topic, "partitions")
    p = derive(partition, v, drop=("last_stable_offset", "aborted_transactions"))
    t = derive(topic, v, nested={"partitions": p})
    return derive(base, v, drop=() if v >= 1 else ("throttle_time",), nested={"responses": t})


def _list_offsets_request(v: int) -> type:
    base = load_request_schema(2, 1)
    topic = _array_element(base, "topics")
    partition = _array_element(topic, "partitions")
    p = derive(partition, v, add=(_Added("max_num_offsets", i32, "int32", i32(1), after="timestamp"),))
    return derive(base, v, nested={"topics": derive(topic, v, nested={"partitions": p})})


def _list_offsets_response(v: int) -> type:
    base = load_response_schema(2, 1)
    topic = _array_element(base, "topics")
    partition = _array_element(topic, "partitions")
    p = derive(partition, v, drop=("timestamp", "offset"),
               add=(_Added("old_style_offsets", tuple[i64, ...], "int64", (), after="error_code"),))
    return derive(base, v, nested={"topics": derive(topic, v, nested={"partitions": p})})


def _as_of(api_key: int, base: int, kind: str = "request") -> Callable[[int], type]:
    """The schema of version ``base`` under an older number (the fields did not change)."""
    load = load_request_schema if kind == "request" else load_response_schema
    return lambda v: derive(load(api_key, base), v)


def _without_throttle(api_key: int, base: int, *, also: dict[str, tuple[str, ...]] | None = None
                      ) -> Callable[[int], type]:
    """Version ``base``'s response without its throttle time (added in a later version), and
    without the fields ``also`` names for an entity array (its name: the fields dropped)."""
    def make(v: int) -> type:
        cls = load_response_schema(api_key, base)
        nested = {}
        for array, dropped in (also or {}).items():
            topic = _array_element(cls, array)
            inner_name = next(f.name for f in dataclasses.fields(topic) if f.name in ("partitions",))
            inner = derive(_array_element(topic, inner_name), v, drop=dropped)
            nested[array] = derive(topic, v, nested={inner_name: inner})
        return derive(cls, v, drop=("throttle_time",), nested=nested)
    return make


def _create_topics_request(v: int) -> type:
    return derive(load_request_schema(19, 2), v, drop=() if v >= 1 else ("validate_only",))


def _create_topics_response(v: int) -> type:
    base = load_response_schema(19, 2)
    topic = _array_element(base, "topics")
    t = derive(topic, v, drop=() if v >= 1 else ("error_message",))
    return derive(base, v, drop=("throttle_time",), nested={"topics": t})


def _offset_for_leader_epoch_request(v: int) -> type:
    base = load_request_schema(23, 2)
    topic = _array_element(base, "topics")
    p = derive(_array_element(topic, "partitions"), v, drop=("current_leader_epoch",))
    return derive(base, v, nested={"topics": derive(topic, v, nested={"partitions": p})})


def _acl_v0(api_key: int, kind: str) -> Callable[[int], type]:
    """An ACL API's v0: v1 without the resource pattern type (every pattern is literal)."""
    def make(v: int) -> type:
        base: type
        if kind == "request":
            base = load_request_schema(api_key, 1)
            if api_key == 29:
                return derive(base, v, drop=("pattern_type_filter",))
            array = "creations" if api_key == 30 else "filters"
            dropped = "resource_pattern_type" if api_key == 30 else "pattern_type_filter"
            return derive(base, v, nested={array: derive(_array_element(base, array), v, drop=(dropped,))})
        base = load_response_schema(api_key, 1)
        if api_key == 29:
            resource = derive(_array_element(base, "resources"), v, drop=("pattern_type",))
            return derive(base, v, nested={"resources": resource})
        if api_key == 31:
            result = _array_element(base, "filter_results")
            acls = derive(_array_element(result, "matching_acls"), v, drop=("pattern_type",))
            return derive(base, v, nested={"filter_results": derive(result, v, nested={"matching_acls": acls})})
        return derive(base, v)
    return make


def _describe_configs_request(v: int) -> type:
    return derive(load_request_schema(32, 1), v, drop=("include_synonyms",))


def _describe_configs_response(v: int) -> type:
    """v0: ``is_default`` where v1 has the config source, no synonyms."""
    base = load_response_schema(32, 1)
    result = _array_element(base, "results")
    config = derive(_array_element(result, "configs"), v, drop=("config_source", "synonyms"),
                    add=(_Added("is_default", bool, "bool", False, after="read_only"),))
    return derive(base, v, nested={"results": derive(result, v, nested={"configs": config})})


def _offset_commit_request(v: int) -> type:
    """v0: group and offsets only; v1 adds the generation, the member id and a commit timestamp
    per partition (-1: the broker's time); v2 drops the timestamp for a retention time."""
    base = load_request_schema(8, 2)
    topic = _array_element(base, "topics")
    p = derive(_array_element(topic, "partitions"), v,
               add=(_Added("commit_timestamp", i64, "int64", i64(-1), after="committed_offset"),) if v >= 1 else ())
    drop = ("retention_time",) + (() if v >= 1 else ("generation_id_or_member_epoch", "member_id"))
    return derive(base, v, drop=drop, nested={"topics": derive(topic, v, nested={"partitions": p})})


def _rigid(cls: type, v: int, header: type) -> type:
    """``cls`` (a flexible version) as the same fields in a version before flexible versions, its
    entities too, with ``header`` as its header."""
    nested = {}
    for f in dataclasses.fields(cls):
        if "tuple[" in str(f.type):
            try:
                inner = _array_element(cls, f.name)
            except (IndexError, KeyError):
                continue
            if dataclasses.is_dataclass(inner):
                nested[f.name] = _rigid(inner, v, header)
    new = derive(cls, v, nested=nested, flexible=False)
    if hasattr(cls, "__header_schema__"):
        new.__header_schema__ = header  # type: ignore[attr-defined]  # kio's schema classes name their header class so
    return new


def _alter_isr(kind: str) -> Callable[[int], type]:
    """AlterIsr v0: AlterPartition v2 with topic names instead of ids, no leader recovery state
    and ``current_isr_version`` for the partition epoch."""
    def make(v: int) -> type:
        base = (load_request_schema if kind == "request" else load_response_schema)(56, 2)
        topic = _array_element(base, "topics")
        partition = derive(_array_element(topic, "partitions"), v, drop=("leader_recovery_state", "partition_epoch"),
                           add=(_Added("current_isr_version", i32, "int32", after="isr" if kind != "request"
                                       else "new_isr"),))
        name = _Added("name", str, "string")
        return derive(base, v, nested={"topics": derive(topic, v, drop=("topic_id",), add=(name,),
                                                        nested={"partitions": partition})})
    return make


#: (api key, version) -> (request schema maker, response schema maker)
DERIVED: dict[tuple[int, int], tuple[Callable[[int], type], Callable[[int], type]]] = {
    **{(0, v): (_produce_request, _produce_response) for v in (0, 1, 2)},
    **{(1, v): (_fetch_request, _fetch_response) for v in (0, 1, 2, 3)},
    (2, 0): (_list_offsets_request, _list_offsets_response),
    **{(19, v): (_create_topics_request, _create_topics_response) for v in (0, 1)},
    (20, 0): (_as_of(20, 1), _without_throttle(20, 1)),
    **{(23, v): (_offset_for_leader_epoch_request,
                 _without_throttle(23, 2, also={} if v >= 1 else {"topics": ("leader_epoch",)})) for v in (0, 1)},
    **{(8, v): (_offset_commit_request, _as_of(8, 2, "response")) for v in (0, 1)},
    (9, 0): (_as_of(9, 1), _as_of(9, 1, "response")),
    (27, 0): (lambda v: _rigid(load_request_schema(27, 1), v, load_request_schema(29, 1).__header_schema__),
              lambda v: _rigid(load_response_schema(27, 1), v, load_response_schema(29, 1).__header_schema__)),
    **{(k, 0): (_acl_v0(k, "request"), _acl_v0(k, "response")) for k in (29, 30, 31)},
    (32, 0): (_describe_configs_request, _describe_configs_response),
    (34, 0): (_as_of(34, 1), _as_of(34, 1, "response")),
    (35, 0): (_as_of(35, 1), _as_of(35, 1, "response")),
    **{(k, 0): (_as_of(k, 1), _as_of(k, 1, "response")) for k in (38, 39, 40, 41)},
    (56, 0): (_alter_isr("request"), _alter_isr("response")),
}


@lru_cache(maxsize=None)
def request_schema(api_key: int, version: int) -> type:
    """The request class of ``api_key`` v``version``: kio's, or derived here."""
    derived = DERIVED.get((api_key, version))
    if derived is not None:
        return derived[0](version)
    return load_request_schema(api_key, version)


@lru_cache(maxsize=None)
def response_schema(api_key: int, version: int) -> type:
    """The response class of ``api_key`` v``version``: kio's, or derived here."""
    derived = DERIVED.get((api_key, version))
    if derived is not None:
        return derived[1](version)
    return load_response_schema(api_key, version)
