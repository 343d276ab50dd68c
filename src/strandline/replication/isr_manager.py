"""ISR changes a leader makes and tells the cluster about (SPEC ISR-3..ISR-6; Kafka's
``Partition.maybeShrinkIsr`` / ``maybeExpandIsr`` and the ``isr-change-propagation`` task).

A change is *pending* until it is decided: it counts for the high watermark at once (Kafka's
maximal ISR: the current and the proposed ISR together) but replaces the ISR only once ZooKeeper
has it, and the partition proposes nothing else meanwhile. How it is decided depends on
``inter.broker.protocol.version``:

- 2.7 and later (AlterIsr, KIP-497): the change is proposed to the controller
  (:class:`~strandline.replication.alter_isr_manager.AlterIsrManager`), which writes it and answers
  with the state it holds; the leader installs only that answer. A retriable error sends it
  again; FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION or UNKNOWN_TOPIC_OR_PARTITION mean the
  leader's view is stale: the change is dropped and the partition acknowledges nothing until the
  controller's next LeaderAndIsr says its role (NET-4). The controller tells the other brokers.
- before 2.7 (the legacy mode): the leader writes the state znode itself with compare-and-set on
  the version it knows; an answer that does not say whether it was applied, or a version
  conflict, is settled by reading the state back. Changed partitions are announced under
  ``/isr_change_notification`` once quiet for 5 s (or every 60 s).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.coordination import zk_layout
from strandline.coordination import znodes
from strandline.coordination.metadata import MetadataCache
from strandline.coordination.store import GetData, OpResult, ZkError
from strandline.coordination.znodes import LeaderAndIsr
from strandline.replication.alter_isr_manager import AlterIsrItem, AlterIsrManager
from strandline.replication.partition import Partition

ISR_CHANGE_CHECK_INTERVAL_MS = 2500   # Kafka's isr-change-propagation task period
ISR_CHANGE_BLACKOUT_MS = 5000         # propagate once the last change is this old...
ISR_CHANGE_MAX_DELAY_MS = 60000       # ...or at least this often
ISR_READ_BACK_RETRY_MS = 500          # read a partition's state again while ZooKeeper cannot answer
#: AlterIsr answers meaning the leader's view is stale: the change is dropped, not proposed again
STALE_VIEW = frozenset({ErrorCode.fenced_leader_epoch, ErrorCode.invalid_update_version,
                        ErrorCode.unknown_topic_or_partition})


class IsrManager:
    def __init__(self, partitions: dict[tuple[str, int], Partition], metadata: MetadataCache, outbox: Outbox,
                 high_watermark_moved: Callable[[list[tuple[str, int]], int], list[Effect]], now_ms: int,
                 alter_isr: AlterIsrManager | None = None) -> None:
        self.partitions = partitions
        #: the controller decides ISR changes (AlterIsr); None: this leader writes them (legacy)
        self.alter_isr = alter_isr
        self.metadata = metadata
        self.outbox = outbox
        self.high_watermark_moved = high_watermark_moved
        #: told of every ISR this leader installs (the replica manager's change journal: a follower
        #: dropped from the ISR must take the full update of its fetch again, to rejoin)
        self.partition_changed: Callable[[tuple[str, int]], None] | None = None
        self._change_set: set[tuple[str, int]] = set()
        self._last_change_ms = 0
        self._last_propagation_ms = now_ms
        # Kafka's ReplicaManager meters (their counts): ISR changes written, and ISR writes refused
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_isr_updates = 0

    def change_isr(self, partition: Partition, new_isr: tuple[int, ...], now_ms: int) -> list[Effect]:
        """ISR-5: propose the new ISR to the controller (AlterIsr), or write it (legacy mode)."""
        if self.alter_isr is not None:
            return self.propose_isr(partition, new_isr, now_ms)
        return self.write_isr(partition, new_isr, now_ms)

    def propose_isr(self, partition: Partition, new_isr: tuple[int, ...], now_ms: int) -> list[Effect]:
        """AlterIsr: the change is pending (it counts for the high watermark, nothing else is
        proposed) until the controller answers (Kafka 2.8's ``Partition.sendAlterIsrRequest``)."""
        assert self.alter_isr is not None
        state = LeaderAndIsr(partition.leader_id, partition.leader_epoch, tuple(new_isr),
                             partition.controller_epoch, partition.zk_version)
        partition.pending_isr = state.isr
        item = AlterIsrItem((partition.topic, partition.index), state,
                            lambda answer, when_ms: self._on_alter_isr_answer(partition, item, answer, when_ms),
                            lambda: self._still_pending(partition, state))
        return self.alter_isr.submit(item, now_ms)

    def _on_alter_isr_answer(self, partition: Partition, item: AlterIsrItem,
                             answer: ErrorCode | LeaderAndIsr | None, now_ms: int) -> list[Effect]:
        """The controller's answer to a proposal (Kafka 2.8's ``handleAlterIsrResponse``): its state
        is installed; a retriable error proposes again; a stale view drops the change and fences
        the partition until the controller says its role. An answer to a proposal the partition
        no longer waits for (a LeaderAndIsr came meanwhile) is ignored."""
        state = item.state
        if not self._still_pending(partition, state):
            return []
        key = item.key
        if answer is None:
            # as a legacy write whose answer was lost (NET-4): the controller may have applied it,
            # or refused the request whole because this broker's registration is gone (its session
            # expired, a new leader may be elected), so the leader acknowledges nothing until an
            # answer says what holds
            if partition.isr_outcome_unknown:
                return []
            partition.isr_outcome_unknown = True
            return [LogLine("warning", f"ISR change of {key[0]}-{key[1]} to {list(state.isr)}: the controller did not "
                                       f"decide it (no answer, or the request refused whole); acknowledge no write "
                                       f"until it does")]
        partition.isr_outcome_unknown = False
        if isinstance(answer, ErrorCode):
            if answer not in STALE_VIEW:
                assert self.alter_isr is not None
                return [LogLine("info", f"ISR change of {key[0]}-{key[1]} to {list(state.isr)} failed "
                                        f"({answer.name.upper()}); proposing it again")] + \
                    self.alter_isr.submit(item, now_ms)
            return self._stale_view(partition, f"the controller answered {answer.name.upper()}", now_ms)
        if answer.leader_epoch != partition.leader_epoch or answer.zk_version < partition.zk_version:
            return self._stale_view(partition, f"the controller answered leader epoch {answer.leader_epoch}, "
                                               f"version {answer.zk_version}", now_ms)
        installed = dataclasses.replace(state, isr=tuple(answer.isr))
        return self._isr_changed(partition, installed, answer.zk_version, now_ms)

    def _stale_view(self, partition: Partition, why: str, now_ms: int) -> list[Effect]:
        key = (partition.topic, partition.index)
        self.failed_isr_updates += 1
        proposed = partition.pending_isr
        partition.pending_isr = None
        partition.isr_update_failed = True
        return [LogLine("warning", f"ISR change of {key[0]}-{key[1]} to {list(proposed or ())} was refused ({why}): "
                                   f"its view (leader epoch {partition.leader_epoch}, version {partition.zk_version}) "
                                   f"is stale; acknowledge no write until the controller says this broker's role")] + \
            self.high_watermark_moved([key], now_ms)

    def write_isr(self, partition: Partition, new_isr: tuple[int, ...], now_ms: int) -> list[Effect]:
        """ISR-5, legacy mode: write the new ISR with compare-and-set on the state znode's version; it counts
        for the high watermark at once (the maximal ISR) but replaces the ISR only once ZooKeeper
        has it. An answer that does not say (connection loss) or a version conflict is settled by
        reading the state back, as Kafka's ``checkLeaderAndIsrZkData`` does."""
        state = LeaderAndIsr(partition.leader_id, partition.leader_epoch, tuple(new_isr),
                             partition.controller_epoch, partition.zk_version)
        partition.pending_isr = state.isr
        op = zk_layout.update_partition_state(partition.topic, partition.index, state)

        def on_result(results: list[OpResult], when_ms: int) -> list[Effect]:
            if not self._still_pending(partition, state):
                return []       # the controller has told this broker a newer state meanwhile
            if results[0].error is ZkError.NONE:
                return self._isr_changed(partition, state, results[0].version, when_ms)
            partition.isr_outcome_unknown = True
            return self._read_back_isr(partition, state, when_ms)

        return [self.outbox.zk([op], on_result)]

    def _still_pending(self, partition: Partition, state: LeaderAndIsr) -> bool:
        """Whether ``state`` is still the change in flight: same partition object, still leader
        in the same epoch on the same znode version (no LeaderAndIsr came in between)."""
        key = (partition.topic, partition.index)
        return self.partitions.get(key) is partition and partition.is_leader and \
            partition.pending_isr == state.isr and partition.leader_epoch == state.leader_epoch and \
            partition.zk_version == state.zk_version

    def _read_back_isr(self, partition: Partition, state: LeaderAndIsr, now_ms: int) -> list[Effect]:
        """What ZooKeeper holds decides: exactly our write (applied after all), the version we
        wrote on (not applied: our view is current, the change may be proposed again), or
        anything else (our view is stale: no more writes until the controller says our role).
        While ZooKeeper cannot be read the partition acknowledges nothing and asks again."""
        key = (partition.topic, partition.index)

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            if not self._still_pending(partition, state):
                return []
            res = results[0]
            if res.error is not ZkError.NONE:
                return self.outbox.after(when_ms + ISR_READ_BACK_RETRY_MS,
                                   lambda t: self._read_back_isr(partition, state, t)
                                   if self._still_pending(partition, state) else [])
            current = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
            if dataclasses.replace(current, zk_version=0) == dataclasses.replace(state, zk_version=0):
                return self._isr_changed(partition, state, current.zk_version, when_ms)
            self.failed_isr_updates += 1
            if current.zk_version == state.zk_version:
                partition.pending_isr = None
                partition.isr_outcome_unknown = False
                return [LogLine("warning", f"ISR change of {key[0]}-{key[1]} to {list(state.isr)} was not applied; "
                                    f"ZooKeeper still holds version {current.zk_version}")]
            partition.pending_isr = None
            partition.isr_outcome_unknown = False
            partition.isr_update_failed = True
            return [LogLine("warning", f"Cached zkVersion {state.zk_version} of {key[0]}-{key[1]} is not the one in "
                                   f"ZooKeeper ({current.zk_version}: leader {current.leader}, epoch "
                                   f"{current.leader_epoch}, ISR {list(current.isr)}); skip updating ISR and "
                                   f"acknowledge no write until the controller says this broker's role")] + \
                self.high_watermark_moved([key], when_ms)

        return [self.outbox.zk([GetData(znodes.TopicPartitionStateZNode.path(*key))], on_read)]

    def _isr_changed(self, partition: Partition, state: LeaderAndIsr, zk_version: int, now_ms: int) -> list[Effect]:
        key = (partition.topic, partition.index)
        old_isr = partition.isr
        advanced = partition.apply_isr(state.isr, zk_version, now_ms)
        if self.partition_changed is not None:
            self.partition_changed(key)
        if len(state.isr) < len(old_isr):
            self.isr_shrinks += 1
        elif len(state.isr) > len(old_isr):
            self.isr_expands += 1
        if self.alter_isr is None:       # with AlterIsr the controller tells the other brokers
            self._record_change(key, now_ms)
        topic = self.metadata.topics.get(key[0])
        if topic is not None:
            topic.states[key[1]] = dataclasses.replace(state, zk_version=zk_version)
        shrunk = len(state.isr) < len(old_isr)
        writer = "this leader wrote it" if self.alter_isr is None else "the controller wrote it (AlterIsr)"
        effects: list[Effect] = [LogLine("warning" if shrunk else "info",
                             f"ISR of {key[0]}-{key[1]} {'shrank' if shrunk else 'changed'} from {list(old_isr)} "
                             f"to {list(state.isr)} ({writer} at version {zk_version})",
                             "isr_shrink" if shrunk else "isr_expand" if len(state.isr) > len(old_isr) else None, key)]
        return effects + self.high_watermark_moved([key] if advanced else [], now_ms)

    def _record_change(self, key: tuple[str, int], now_ms: int) -> None:
        self._change_set.add(key)
        self._last_change_ms = now_ms

    def maybe_shrink_isrs(self, now_ms: int) -> list[Effect]:
        """ISR-3: the isr-expiration task drops followers that lag more than replica.lag.time.max.ms."""
        effects: list[Effect] = []
        for partition in self.partitions.values():
            new_isr = partition.isr_to_shrink(now_ms)
            if new_isr is not None:
                effects.extend(self.change_isr(partition, new_isr, now_ms))
        return effects

    def maybe_propagate_isr_changes(self, now_ms: int) -> list[Effect]:
        """ISR-6: write changed partitions as one sequential node under /isr_change_notification once
        the last change is 5 s old, or at least every 60 s."""
        if not self._change_set:
            return []
        if not (self._last_change_ms + ISR_CHANGE_BLACKOUT_MS < now_ms
                or self._last_propagation_ms + ISR_CHANGE_MAX_DELAY_MS < now_ms):
            return []
        changed = sorted(self._change_set)
        self._change_set.clear()
        self._last_propagation_ms = now_ms

        def on_result(results: list[OpResult], when_ms: int) -> list[Effect]:
            if results[0].error is ZkError.NONE:
                return []
            # not written (or not known to be): tell again on the next round; a duplicate is harmless
            self._change_set.update(changed)
            return [LogLine("warning", f"Writing the ISR change notification failed ({results[0].error.name}); "
                                   f"will write it again")]
        return [self.outbox.zk([zk_layout.isr_change_notification(changed)], on_result)]
