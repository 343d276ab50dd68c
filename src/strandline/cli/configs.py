"""``strandline configs describe|alter`` (like ``kafka-configs``): topic and broker configs.

``--entity-type topics --entity-name T``, ``--entity-type brokers --entity-name ID`` or
``--entity-type brokers --entity-default`` (every broker), or a broker's loggers with
``--entity-type broker-loggers --entity-name ID`` (``--add-config strandline=DEBUG`` sets a
logger's level live, ``--delete-config`` lets it inherit again). ``alter`` takes
``--add-config k=v,k2=[a,b]`` and ``--delete-config k,k2`` and applies them with
IncrementalAlterConfigs; ``describe`` shows the dynamic configs, or every config with ``--all``.
"""

from __future__ import annotations

import argparse

from kio.schema.errors import ErrorCode

from strandline.cli.topics import metadata
from strandline.errors import StrandlineError
from strandline.runtime.client import KafkaConnection

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE = 0, 1
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
DYNAMIC_SOURCES = {1, 2, 3, 6}


def add_parser(sub: argparse._SubParsersAction, bootstrap_default: str, bootstrap_help: str) -> None:
    configs = sub.add_parser("configs", help="describe and alter topic and broker configs (like kafka-configs)")
    csub = configs.add_subparsers(dest="action", required=True)
    for action in ("describe", "alter"):
        p = csub.add_parser(action, help=f"{action} the configs of one topic, one broker or every broker")
        p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
        p.add_argument("--entity-type", choices=("topics", "brokers", "broker-loggers"), required=True,
                       help="what --entity-name names")
        who = p.add_mutually_exclusive_group(required=True)
        who.add_argument("--entity-name", help="the topic, or the broker id (brokers, broker-loggers)")
        who.add_argument("--entity-default", action="store_true", help="brokers: the default of every broker")
        if action == "describe":
            p.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
        else:
            p.add_argument("--add-config", metavar="K=V,K2=[A,B]", help="configs to set")
            p.add_argument("--delete-config", metavar="K,K2", help="configs to remove (back to their defaults)")
    configs.set_defaults(func=run)


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` as kafka-configs reads it: brackets keep a list value's commas."""
    result: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.find("=", i)
        if eq < 0:
            raise StrandlineError(f"--add-config: expected key=value at {text[i:]!r}")
        key = text[i:eq].strip()
        if not key:
            raise StrandlineError(f"--add-config: empty key at {text[i:]!r}")
        if text.startswith("[", eq + 1):
            end = text.find("]", eq + 2)
            if end < 0:
                raise StrandlineError(f"--add-config: unclosed [ in the value of {key}")
            value, i = text[eq + 2:end], end + 1
            if i < len(text) and text[i] != ",":
                raise StrandlineError(f"--add-config: expected , after the value of {key}")
            i += 1
        else:
            end = text.find(",", eq + 1)
            end = len(text) if end < 0 else end
            value, i = text[eq + 1:end], end + 1
        result[key] = value.strip()
    return result


def _resource(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, what to call it)."""
    if args.entity_type == "topics":
        if args.entity_default:
            raise StrandlineError("topics have no --entity-default: name one with --entity-name")
        return TOPIC, args.entity_name, f"topic {args.entity_name}"
    loggers = args.entity_type == "broker-loggers"
    if args.entity_default:
        if loggers:
            raise StrandlineError("broker-loggers have no --entity-default: name a broker with --entity-name")
        return BROKER, "", "the default of every broker"
    if not args.entity_name.isdigit():
        raise StrandlineError(f"--entity-name {args.entity_name!r}: a broker is named by its id")
    if loggers:
        return BROKER_LOGGER, args.entity_name, f"the loggers of broker {args.entity_name}"
    return BROKER, args.entity_name, f"broker {args.entity_name}"


def _address(conn: KafkaConnection, rtype: int, name: str, bootstrap: str) -> str:
    """A broker (or broker-loggers) resource named by an id is served by that broker only."""
    if rtype not in (BROKER, BROKER_LOGGER) or not name:
        return bootstrap
    for b in metadata(conn, []).brokers:
        if b.node_id == int(name):
            return f"{b.host}:{b.port}"
    raise StrandlineError(f"broker {name} is not in the cluster (or not running)")


def _check(code: object, message: str | None, what: str) -> None:
    code = code if isinstance(code, ErrorCode) else ErrorCode(int(code))  # type: ignore[arg-type]
    if code is not ErrorCode.none:
        raise StrandlineError(f"{what}: {code.name.upper()}" + (f": {message}" if message else ""))


def run(args: argparse.Namespace) -> int:
    rtype, name, what = _resource(args)
    with KafkaConnection(args.bootstrap_server) as conn:
        address = _address(conn, rtype, name, args.bootstrap_server)
    with KafkaConnection(address) as conn:
        if args.action == "describe":
            resp = conn.request(DESCRIBE_CONFIGS, 1, {"resources": [
                {"resource_type": rtype, "resource_name": name, "configuration_keys": None}], "include_synonyms": True})
            result = resp.results[0]
            _check(result.error_code, result.error_message, what)
            entries = [c for c in result.configs if args.all or int(c.config_source) in DYNAMIC_SOURCES]
            print(f"{'All' if args.all else 'Dynamic'} configs for {what} are:")
            for c in sorted(entries, key=lambda c: c.name):
                synonyms = ", ".join(f"{SOURCES.get(int(s.source), s.source)}:{s.name}={s.value}" for s in c.synonyms)
                print(f"  {c.name}={c.value if c.value is not None else 'null'} sensitive={str(c.is_sensitive).lower()}"
                      f" synonyms={{{synonyms}}}")
            return 0
        adds = parse_add_config(args.add_config) if args.add_config else {}
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if not adds and not deletes:
            raise StrandlineError("nothing to alter: give --add-config and/or --delete-config")
        both = sorted(set(adds) & set(deletes))
        if both:
            raise StrandlineError(f"{', '.join(both)} both added and deleted")
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in adds.items()] + \
              [{"name": k, "config_operation": DELETE, "value": None} for k in deletes]
        resp = conn.request(INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [
            {"resource_type": rtype, "resource_name": name, "configs": ops}], "validate_only": False})
        result = resp.responses[0]
        _check(result.error_code, result.error_message, f"cannot alter the configs of {what}")
    print(f"Completed updating config for {what}.")
    return 0
