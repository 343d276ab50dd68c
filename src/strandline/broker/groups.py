"""Consumer-group APIs of the broker core: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.

The state machine is :class:`strandline.group.coordinator.GroupCoordinator`; this mixin maps the
wire versions onto it, keeps ``__consumer_offsets`` (created on first use, Kafka's defaults)
and writes its records through the ISR like any acks=all produce.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.replication.purgatory import DelayedOperation
from strandline.broker.effects import Log
from strandline.group import records as rec
from strandline.group.coordinator import GroupCoordinator
from strandline.protocol.api import RequestHeader
from strandline.protocol.records import read_header

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


class Groups:
    """Mixin of :class:`strandline.broker.broker.Broker`."""

    def _init_groups(self) -> None:
        self.groups = GroupCoordinator(self.config, self._append_offsets,  # type: ignore[attr-defined]
                                       lambda: str(self.new_uuid()))  # type: ignore[attr-defined]
        self._responders: dict[int, int] = {}   # id(respond) -> connection

    # ------------------------------------------------------------------ the offsets topic

    def _append_offsets(self, index: int, records: list, done: Callable[[ErrorCode, int], list], now_ms: int) -> list:
        """Write records to our offsets partition; ``done`` once the ISR has them (HW past them)."""
        key = (OFFSETS_TOPIC, index)
        partition = self.partitions.get(key)  # type: ignore[attr-defined]
        if partition is None or not partition.is_leader:
            return done(ErrorCode.not_coordinator, now_ms)
        batch = rec.build_batch(records, now_ms)
        topic = self.metadata.topics[OFFSETS_TOPIC]  # type: ignore[attr-defined]
        min_isr = self.config.topic_value(topic.configs, "min.insync.replicas")  # type: ignore[attr-defined]
        outcome = partition.append_records_to_leader(batch, read_header(batch, 0), -1, min_isr, now_ms)
        if outcome.error is not ErrorCode.none:
            mapped = ErrorCode.not_coordinator if outcome.error is ErrorCode.not_leader_or_follower \
                else ErrorCode.coordinator_not_available
            return done(mapped, now_ms)
        effects = self.fetch_purgatory.check_keys([key], now_ms)  # type: ignore[attr-defined]
        required = outcome.last_offset + 1
        if partition.high_watermark >= required:
            return effects + done(ErrorCode.none, now_ms)

        def try_complete(when_ms: int, expired: bool) -> list | None:
            if not partition.is_leader or self.partitions.get(key) is not partition:  # type: ignore[attr-defined]
                return done(ErrorCode.not_coordinator, when_ms)
            if partition.high_watermark >= required:
                return done(ErrorCode.none, when_ms)
            if expired:
                return done(ErrorCode.request_timed_out, when_ms)
            return None

        deadline = now_ms + self.config["offsets.commit.timeout.ms"]  # type: ignore[attr-defined]
        self.produce_purgatory.watch(DelayedOperation(-1, deadline, (key,), try_complete))  # type: ignore
        return effects

    def _ensure_offsets_topic(self, now_ms: int) -> list:
        if OFFSETS_TOPIC in self.metadata.topics or OFFSETS_TOPIC in self._creating:  # type: ignore[attr-defined]
            return []
        cfg = self.config  # type: ignore[attr-defined]
        live = len(self.metadata.live_broker_ids())  # type: ignore[attr-defined]
        rf = max(1, min(cfg["offsets.topic.replication.factor"], live))
        # no log compaction here: keep every record (retention.ms=-1) so that no commit is lost
        configs = {"retention.ms": "-1", "segment.bytes": str(cfg["offsets.topic.segment.bytes"])}
        done = lambda error, message, when_ms: [] if error is ErrorCode.none else [  # noqa: E731
            Log("warning", f"Creating {OFFSETS_TOPIC} failed: {error.name} {message or ''}")]
        if not self.is_controller:  # type: ignore[attr-defined]
            return self._forward_create(OFFSETS_TOPIC, cfg["offsets.topic.num.partitions"], rf,  # type: ignore
                                        done, now_ms, configs)
        plan = self._plan_topic(OFFSETS_TOPIC, cfg["offsets.topic.num.partitions"], rf, {}, configs)  # type: ignore
        if isinstance(plan, tuple):
            return done(plan[0], plan[1], now_ms)
        return self._create_topic(plan, done, now_ms)  # type: ignore[attr-defined]

    def _on_leadership(self, partition: Any, leader: bool, now_ms: int) -> list:
        """Loading and unloading the groups of an offsets partition as its leadership moves."""
        if partition.topic != OFFSETS_TOPIC:
            return []
        if not leader:
            if partition.index in self.groups.owned:
                return self.groups.unload_partition(partition.index)
            return []
        log = partition.log
        data = log.read(log.log_start_offset, 1 << 40, max_offset=log.log_end_offset) if log.log_end_offset else b""
        count = self.groups.load_partition(partition.index, rec.iter_records(data), now_ms)
        return [Log("info", f"Coordinator of the groups of {OFFSETS_TOPIC}-{partition.index} "
                            f"({count} record(s) loaded)")] if count else []

    # ------------------------------------------------------------------ responding

    def _group_respond(self, conn_id: int, header: RequestHeader, shape: Callable[[dict], dict]) -> Callable:
        def respond(body: dict) -> list:
            self._responders.pop(id(respond), None)
            return [self._respond(conn_id, header, {"throttle_time": 0, **shape(body)})]  # type: ignore
        self._responders[id(respond)] = conn_id
        return respond

    def _groups_connection_closed(self, conn_id: int) -> None:
        gone = {rid for rid, cid in self._responders.items() if cid == conn_id}
        if gone:
            self.groups.connection_closed(lambda respond: id(respond) in gone)
            for rid in gone:
                self._responders.pop(rid, None)

    # ------------------------------------------------------------------ FindCoordinator

    def _find_coordinator(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        version = header.api_version
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        key_type = getattr(request, "key_type", 0)
        effects: list = []
        answers = []
        topic = self.metadata.topics.get(OFFSETS_TOPIC)  # type: ignore[attr-defined]
        if key_type == 0 and topic is None:
            effects += self._ensure_offsets_topic(now_ms)
        for key in keys:
            answer = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.none,
                      "error_message": None}
            if key_type != 0:
                answer["error_code"], answer["error_message"] = ErrorCode.invalid_request, \
                    "transactions are not served by this broker"
            elif topic is None:
                answer["error_code"] = ErrorCode.coordinator_not_available
            else:
                state = topic.states.get(self.groups.partition_of(key))
                node = self.metadata.brokers.get(state.leader) if state else None  # type: ignore[attr-defined]
                if node is None:
                    answer["error_code"] = ErrorCode.coordinator_not_available
                else:
                    answer.update(node_id=node.id, host=node.host, port=node.port)
            answers.append(answer)
        if version >= 4:
            body = {"throttle_time": 0, "coordinators": answers}
        else:
            body = {"throttle_time": 0, **answers[0]}
        return effects + [self._respond(conn_id, header, body)]  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ membership

    def _join_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        version = header.api_version

        def shape(body: dict) -> dict:
            if version < 7 and body.get("protocol_name") is None:
                body["protocol_name"] = ""
            return body

        req = {"group_id": request.group_id, "member_id": request.member_id,
               "group_instance_id": getattr(request, "group_instance_id", None),
               "client_id": header.client_id or "", "client_host": "/127.0.0.1",
               "session_timeout_ms": _ms(request.session_timeout),
               "rebalance_timeout_ms": _ms(getattr(request, "rebalance_timeout", request.session_timeout)),
               "protocol_type": request.protocol_type,
               "protocols": [(p.name, p.metadata) for p in request.protocols], "version": version}
        return self.groups.join(req, self._group_respond(conn_id, header, shape), now_ms)

    def _sync_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        req = {"group_id": request.group_id, "generation_id": request.generation_id, "member_id": request.member_id,
               "protocol_type": getattr(request, "protocol_type", None),
               "protocol_name": getattr(request, "protocol_name", None),
               "assignments": [{"member_id": a.member_id, "assignment": a.assignment} for a in request.assignments]}
        return self.groups.sync(req, self._group_respond(conn_id, header, lambda b: b), now_ms)

    def _heartbeat(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        req = {"group_id": request.group_id, "generation_id": request.generation_id, "member_id": request.member_id}
        return self.groups.heartbeat(req, self._group_respond(conn_id, header, lambda b: b), now_ms)

    def _leave_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if header.api_version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        return self.groups.leave(request.group_id, leaving, self._group_respond(conn_id, header, lambda b: b), now_ms)

    # ------------------------------------------------------------------ offsets

    def _offset_commit(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        generation = getattr(request, "generation_id_or_member_epoch", -1)
        topics = self.metadata.topics  # type: ignore[attr-defined]
        offsets, unknown = [], {}
        for t in request.topics:
            for p in t.partitions:
                if t.name in topics and p.partition_index in topics[t.name].assignment:
                    offsets.append((t.name, p.partition_index, p.committed_offset,
                                    getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
                else:  # as Kafka: that partition is refused, the others are committed
                    unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
        req = {"group_id": request.group_id, "generation_id": generation, "member_id": request.member_id,
               "offsets": offsets}

        def respond(results: dict) -> list:
            by_topic: dict[str, list] = {}
            for (name, index), code in {**unknown, **results}.items():
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
            return [self._respond(conn_id, header, {  # type: ignore[attr-defined]
                "throttle_time": 0, "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]})]

        if not offsets:
            return respond({})
        return self.groups.commit(req, respond, now_ms)

    def _offset_fetch_group(self, group_id: str, topics: Any) -> tuple[ErrorCode, list]:
        wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
        error, found = self.groups.fetch_offsets(group_id, wanted)
        by_topic: dict[str, list] = {}
        if error is ErrorCode.none:
            for (name, index), value in sorted(found.items()):
                by_topic.setdefault(name, []).append({
                    "partition_index": index, "committed_offset": value.offset if value else -1,
                    "committed_leader_epoch": value.leader_epoch if value else -1,
                    "metadata": value.metadata if value else "", "error_code": ErrorCode.none})
        elif wanted is not None:
            for name, indexes in wanted:
                by_topic[name] = [{"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
                                   "metadata": "", "error_code": error} for i in indexes]
        return error, [{"name": n, "partitions": p} for n, p in by_topic.items()]

    def _offset_fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if header.api_version >= 8:
            groups = []
            for g in request.groups:
                error, topics = self._offset_fetch_group(g.group_id, g.topics)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
            body = {"throttle_time": 0, "groups": groups}
        else:
            error, topics = self._offset_fetch_group(request.group_id, request.topics)
            body = {"throttle_time": 0, "topics": topics, "error_code": error}
        return [self._respond(conn_id, header, body)]  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ admin

    def _list_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        wanted = set(getattr(request, "states_filter", ()) or ())
        groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                   "group_type": "classic"}
                  for g in self.groups.list_groups() if not wanted or g.state in wanted]
        return [self._respond(conn_id, header, {  # type: ignore[attr-defined]
            "throttle_time": 0, "error_code": ErrorCode.none, "groups": groups})]

    def _describe_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        groups = [{**self.groups.describe(g), "authorized_operations": -2147483648} for g in request.groups]
        return [self._respond(conn_id, header, {"throttle_time": 0, "groups": groups})]  # type: ignore

    def _delete_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        names = list(dict.fromkeys(request.groups_names))
        results: dict[str, ErrorCode] = {}
        effects: list = []

        def finish() -> list:
            return [self._respond(conn_id, header, {  # type: ignore[attr-defined]
                "throttle_time": 0,
                "results": [{"group_id": n, "error_code": results[n]} for n in names]})]

        for name in names:
            def done(error: ErrorCode, when_ms: int, name: str = name) -> list:
                results[name] = error
                return finish() if len(results) == len(names) else []
            effects += self.groups.delete(name, done, now_ms)
        if not names:
            effects += finish()
        return effects
