"""``strandline configs describe|alter`` (like ``kafka-configs``): topic, broker, group and user configs.

``--entity-type topics --entity-name T``, ``--entity-type brokers --entity-name ID``,
``--entity-type brokers --entity-default`` (every broker), ``--entity-type groups --entity-name G``
(a consumer or share group's own configs, such as ``share.auto.offset.reset``), or a broker's loggers with
``--entity-type broker-loggers --entity-name ID`` (``--add-config strandline=DEBUG`` sets a
logger's level live, ``--delete-config`` lets it inherit again). ``alter`` takes
``--add-config k=v,k2=[a,b]`` and ``--delete-config k,k2`` and applies them with
IncrementalAlterConfigs; ``describe`` shows the dynamic configs, or every config with ``--all``.

``--entity-type users`` (as kafka-configs with ``--bootstrap-server``): SCRAM credentials with
AlterUserScramCredentials (``--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'``:
the salt and PBKDF2 are computed here, the password never leaves this process;
``--delete-config SCRAM-SHA-256``) and user quotas (``producer_byte_rate``...) with
AlterClientQuotas; ``describe`` shows both. Kafka's own form, ``strandline configs --alter
--entity-type users ...`` (``--describe``), is read too.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.cli.topics import controller_address, metadata
from strandline.errors import StrandlineError
from strandline.security.scram import new_salt
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import error_code, refusal
from strandline.cli.parsers import Subcommands

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 48, 49, 50, 51
#: SCRAM mechanisms by name: (AlterUserScramCredentials' type, hashlib's name of the digest)
SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
SCRAM_NAMES = {code: name for name, (code, _) in SCRAM.items()}
DEFAULT_ITERATIONS = 4096
#: the quotas a user entity has (Kafka's QuotaConfigs for users)
USER_QUOTAS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
#: the quotas a client id has (the same as a user's; Kafka's QuotaConfigs for client ids)
CLIENT_QUOTAS = USER_QUOTAS
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE = 0, 1
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_SOURCES = {1, 2, 3, 6, 8}


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    configs = sub.add_parser("configs", help="describe and alter topic, broker and group configs (like kafka-configs)")
    csub = configs.add_subparsers(dest="action", required=True)
    for action in ("describe", "alter"):
        p = csub.add_parser(action, help=f"{action} the configs of one topic, one broker or every broker")
        p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
        p.add_argument("--entity-type", action=_Entity, required=True, metavar="{" + ",".join(ENTITY_TYPES) + "}",
                       help="what --entity-name names; users and clients may be given together (the quotas of a "
                            "user's client id), each followed by its own --entity-name or --entity-default")
        p.add_argument("--entity-name", action=_Entity,
                       help="the topic, the broker id (brokers, broker-loggers), the group, the user or the client id; one of "
                            "it and --entity-default is needed, except to describe users and clients")
        p.add_argument("--entity-default", action=_Entity, nargs=0,
                       help="brokers: the default of every broker; users, clients: the default quotas of every "
                            "user, of every client id")
        if action == "describe":
            p.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
        else:
            p.add_argument("--add-config", metavar="K=V,K2=[A,B]", help="configs to set")
            p.add_argument("--delete-config", metavar="K,K2", help="configs to remove (back to their defaults)")
    configs.set_defaults(func=run)


ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "groups", "users", "clients")
#: the quota entities' names on the wire (DescribeClientQuotas, AlterClientQuotas) and in Kafka's lines
QUOTA_ENTITIES = {"users": ("user", "user-principal", "user"), "clients": ("client-id", "client-id", "client")}


class _Entity(argparse.Action):
    """``--entity-type T [--entity-name N | --entity-default]``, repeated as kafka-configs takes
    them: ``args.entities`` holds [type, name, default] in the order given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        entities = list(getattr(namespace, "entities", None) or [])
        if option_string == "--entity-type":
            if values not in ENTITY_TYPES:
                parser.error(f"argument --entity-type: invalid choice: {values!r} (choose from "
                             + ", ".join(repr(t) for t in ENTITY_TYPES) + ")")
            entities.append([values, None, False])
        elif not entities:
            parser.error(f"{option_string} comes after the --entity-type it names")
        elif entities[-1][1] is not None or entities[-1][2]:
            parser.error(f"{option_string}: --entity-type {entities[-1][0]} already has a name or the default")
        elif option_string == "--entity-name":
            entities[-1][1] = values
        else:
            entities[-1][2] = True
        namespace.entities = entities
        namespace.entity_type, namespace.entity_name, namespace.entity_default = entities[0]


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


def kafka_style(argv: list[str]) -> list[str]:
    """Kafka's ``kafka-configs --alter|--describe ...`` as ``configs alter|describe ...``."""
    if len(argv) < 2 or argv[0] != "configs" or argv[1] in ("alter", "describe", "-h", "--help"):
        return argv
    actions = [a for a in argv[1:] if a in ("--alter", "--describe")]
    if len(actions) != 1:
        return argv                      # argparse says what is missing
    return ["configs", actions[0][2:]] + [a for a in argv[1:] if a not in ("--alter", "--describe")]


def _resource(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, what to call it)."""
    if args.entity_name is None and not args.entity_default:
        raise StrandlineError(f"--entity-type {args.entity_type} needs --entity-name or --entity-default")
    if args.entity_type == "topics":
        if args.entity_default:
            raise StrandlineError("topics have no --entity-default: name one with --entity-name")
        return TOPIC, args.entity_name, f"topic {args.entity_name}"
    if args.entity_type == "groups":
        if args.entity_default:
            raise StrandlineError("groups have no --entity-default: name one with --entity-name")
        return GROUP, args.entity_name, f"group {args.entity_name}"
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


def _check(code: ErrorCode | int, message: str | None, what: str) -> None:
    if error_code(code) is not ErrorCode.none:
        raise refusal(code, what, message)


def parse_scram(mechanism: str, value: str) -> tuple[int, str]:
    """``iterations=8192,password=secret`` (the brackets' content) as (iterations, password)."""
    fields: dict[str, str] = {}
    for item in value.split(","):
        key, eq, val = item.partition("=")
        if not eq or key.strip() not in ("iterations", "password"):
            raise StrandlineError(f"{mechanism}=[{value}]: expected iterations=N and password=P inside the brackets")
        fields[key.strip()] = val
    if "password" not in fields:
        raise StrandlineError(f"{mechanism}: give password=... (as {mechanism}=[password=secret])")
    iterations = fields.get("iterations", str(DEFAULT_ITERATIONS)).strip()
    if not iterations.isdigit():
        raise StrandlineError(f"{mechanism}: iterations={iterations!r} is not a number")
    return int(iterations), fields["password"]


def scram_upsertion(user: str, mechanism: str, iterations: int, password: str, salt: bytes | None = None) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion: a fresh salt and the salted password (RFC 5802's
    ``Hi``, PBKDF2), as Kafka's admin client computes them; the password itself is not sent."""
    code, digest = SCRAM[mechanism]
    salt = new_salt() if salt is None else salt
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    return {"name": user, "mechanism": code, "iterations": iterations, "salt": salt, "salted_password": salted}


def java_double(value: float) -> str:
    """A double as Java prints it (Kafka's tools print quotas so): 1024.0, 2.0E7."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:f}".rstrip("0")
    mantissa, exponent = f"{value:.16E}".split("E")
    digits = repr(float(mantissa))           # the shortest digits: Java's rule
    return f"{digits}E{int(exponent)}"


def _check_user_results(results: Any, what: str) -> None:
    for r in results:
        _check(r.error_code, r.error_message, f"{what} {r.user}")


def _describe_users(conn: KafkaConnection, name: str | None, default: bool) -> None:
    """Kafka's ``describeClientQuotaAndUserScramCredentialConfigs``: the quota line of each user
    entity, then the SCRAM line of each user (not for the default)."""
    component = {"entity_type": "user", "match_type": 1 if default else 0 if name else 2,
                 "match": None if default or not name else name}
    resp = conn.request(DESCRIBE_CLIENT_QUOTAS, 0, {"components": [component], "strict": True})
    _check(resp.error_code, resp.error_message, "cannot describe user quotas")
    for entry in resp.entries or ():
        users = [e.entity_name for e in entry.entity if e.entity_type == "user"]
        who = ", ".join("the default user-principal" if u is None else f"user-principal '{u}'" for u in users)
        values = ", ".join(f"{v.key}={java_double(float(v.value))}" for v in entry.values)
        print(f"Quota configs for {who} are {values}")
    if default:
        return
    resp = conn.request(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": name}] if name else None})
    _check(resp.error_code, resp.error_message, "cannot describe SCRAM credentials")
    for r in resp.results:
        code = r.error_code if isinstance(r.error_code, ErrorCode) else ErrorCode(int(r.error_code))
        if code is ErrorCode.resource_not_found:      # no credentials: nothing to say (Kafka's admin drops them)
            continue
        if code is not ErrorCode.none:
            print(f"Error retrieving SCRAM credential configs for user-principal '{r.user}': {code.name.upper()}"
                  + (f": {r.error_message}" if r.error_message else ""))
            continue
        infos = ", ".join(f"{SCRAM_NAMES.get(int(i.mechanism), i.mechanism)}=iterations={i.iterations}"
                          for i in r.credential_infos)
        print(f"SCRAM credential configs for user-principal '{r.user}' are {infos}")


def run_users(args: argparse.Namespace) -> int:
    name, default = args.entity_name, args.entity_default
    if name == "":
        raise StrandlineError("--entity-name: a user name is not empty (the default: --entity-default)")
    with KafkaConnection(args.bootstrap_server) as conn:
        if args.action == "describe":
            _describe_users(conn, name, default)
            return 0
        if name is None and not default:
            raise StrandlineError("--entity-type users needs --entity-name or --entity-default to alter")
        adds = parse_add_config(args.add_config) if args.add_config else {}
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if not adds and not deletes:
            raise StrandlineError("nothing to alter: give --add-config and/or --delete-config")
        unknown = sorted(k for k in [*adds, *deletes] if k not in SCRAM and k not in USER_QUOTAS)
        if unknown:
            raise StrandlineError(f"not a user config: {', '.join(unknown)} (SCRAM-SHA-256, SCRAM-SHA-512, "
                                  f"{', '.join(USER_QUOTAS)})")
        both = sorted(set(adds) & set(deletes))
        if both:
            raise StrandlineError(f"{', '.join(both)} both added and deleted")
        scram_adds = {k: parse_scram(k, v) for k, v in adds.items() if k in SCRAM}
        scram_deletes = [k for k in deletes if k in SCRAM]
        if default and (scram_adds or scram_deletes):
            raise StrandlineError("SCRAM credentials belong to one user: name it with --entity-name "
                                  "(--entity-default is for quotas)")
        quota_ops = []
        for key, value in adds.items():
            if key in USER_QUOTAS:
                try:
                    quota_ops.append({"key": key, "value": float(value), "remove": False})
                except ValueError:
                    raise StrandlineError(f"{key}={value!r} is not a number") from None
        quota_ops += [{"key": k, "value": 0.0, "remove": True} for k in deletes if k in USER_QUOTAS]
        if quota_ops:
            resp = conn.request(ALTER_CLIENT_QUOTAS, 0, {"entries": [
                {"entity": [{"entity_type": "user", "entity_name": None if default else name}], "ops": quota_ops}],
                "validate_only": False})
            for entry in resp.entries:
                _check(entry.error_code, entry.error_message, "cannot alter the quotas of "
                       + ("the default user" if default else f"user {name}"))
        if scram_adds or scram_deletes:
            # the controller alters them (Kafka 2.8's brokers answer NOT_CONTROLLER otherwise)
            with KafkaConnection(controller_address(conn)) as controller:
                resp = controller.request(ALTER_USER_SCRAM_CREDENTIALS, 0, {
                    "deletions": [{"name": name, "mechanism": SCRAM[m][0]} for m in scram_deletes],
                    "upsertions": [scram_upsertion(name, m, it, pw) for m, (it, pw) in scram_adds.items()]})
            _check_user_results(resp.results, "cannot alter the SCRAM credentials of user")
    print("Completed updating default config for users in the cluster." if default
          else f"Completed updating config for user {name}.")
    return 0


def _quota_entity(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """The quota entity named: (users' or clients' wire type, name, default) for each, users first."""
    entities = args.entities
    types = [t for t, _, _ in entities]
    if len(entities) > 2 or len(set(types)) != len(types) or not set(types) <= set(QUOTA_ENTITIES):
        raise StrandlineError("--entity-type: one of topics, brokers, broker-loggers, groups, or users and/or clients "
                              "(each at most once)")
    chosen = sorted(entities, key=lambda e: list(QUOTA_ENTITIES).index(e[0]))
    for kind, name, _ in chosen:
        if name == "":
            raise StrandlineError(f"--entity-name: a {QUOTA_ENTITIES[kind][2]} name is not empty "
                                  "(the default: --entity-default)")
    return [(t, n, d) for t, n, d in chosen]


def _who(entity: list[tuple[str, str | None, bool]] | list[tuple[str, str | None]]) -> str:
    """Kafka's words for a quota entity: ``user-principal 'alice', client-id 'app'``."""
    words = []
    for kind, name, *_ in entity:
        label = next(v[1] for k, v in QUOTA_ENTITIES.items() if k == kind or v[0] == kind)
        words.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(words)


def _describe_quotas(conn: KafkaConnection, entity: list[tuple[str, str | None, bool]]) -> None:
    components = [{"entity_type": QUOTA_ENTITIES[kind][0], "match_type": 1 if default else 0 if name else 2,
                   "match": None if default or not name else name} for kind, name, default in entity]
    resp = conn.request(DESCRIBE_CLIENT_QUOTAS, 0, {"components": components, "strict": True})
    _check(resp.error_code, resp.error_message, "cannot describe quotas")
    order = [QUOTA_ENTITIES[k][0] for k in QUOTA_ENTITIES]
    for entry in resp.entries or ():
        parts = sorted(((e.entity_type, e.entity_name) for e in entry.entity),
                       key=lambda p: order.index(p[0]) if p[0] in order else len(order))
        values = ", ".join(f"{v.key}={java_double(float(v.value))}" for v in entry.values)
        print(f"Quota configs for {_who(parts)} are {values}")


def run_quotas(args: argparse.Namespace, entity: list[tuple[str, str | None, bool]]) -> int:
    """Quotas of a client id, or of a user's client id (kafka-configs' ``--entity-type users
    --entity-name U --entity-type clients --entity-name C``)."""
    with KafkaConnection(args.bootstrap_server) as conn:
        if args.action == "describe":
            _describe_quotas(conn, entity)
            return 0
        missing = [kind for kind, name, default in entity if name is None and not default]
        if missing:
            raise StrandlineError(f"--entity-type {missing[0]} needs --entity-name or --entity-default to alter")
        adds = parse_add_config(args.add_config) if args.add_config else {}
        deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if not adds and not deletes:
            raise StrandlineError("nothing to alter: give --add-config and/or --delete-config")
        allowed = USER_QUOTAS if len(entity) > 1 else CLIENT_QUOTAS
        unknown = sorted(k for k in [*adds, *deletes] if k not in allowed)
        if unknown:
            raise StrandlineError(f"not a quota of {_who(entity)}: {', '.join(unknown)} ({', '.join(allowed)})")
        both = sorted(set(adds) & set(deletes))
        if both:
            raise StrandlineError(f"{', '.join(both)} both added and deleted")
        ops = []
        for key, value in adds.items():
            try:
                ops.append({"key": key, "value": float(value), "remove": False})
            except ValueError:
                raise StrandlineError(f"{key}={value!r} is not a number") from None
        ops += [{"key": k, "value": 0.0, "remove": True} for k in deletes]
        resp = conn.request(ALTER_CLIENT_QUOTAS, 0, {"entries": [{"entity": [
            {"entity_type": QUOTA_ENTITIES[kind][0], "entity_name": None if default else name}
            for kind, name, default in entity], "ops": ops}], "validate_only": False})
        for result in resp.entries:
            _check(result.error_code, result.error_message, f"cannot alter the quotas of {_who(entity)}")
    kind, name, default = entity[0]
    word = QUOTA_ENTITIES[kind][2]
    print(f"Completed updating default config for {kind} in the cluster." if default
          else f"Completed updating config for {word} {name}.")
    return 0


def run(args: argparse.Namespace) -> int:
    types = {t for t, _, _ in args.entities}
    if types & set(QUOTA_ENTITIES):
        entity = _quota_entity(args)
        if [t for t, _, _ in entity] == ["users"]:
            return run_users(args)
        return run_quotas(args, entity)
    if len(args.entities) > 1:
        raise StrandlineError("--entity-type is given once, except users with clients")
    if args.entity_name is not None and args.entity_default:
        raise StrandlineError("--entity-name and --entity-default do not go together")
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
