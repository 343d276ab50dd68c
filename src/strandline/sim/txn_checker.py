"""The transactions' invariants (KIP-98), judged from what read_committed clients see.

While the run goes (:meth:`TxnChecker.on_fetch`, from a :class:`ReadCommittedConsumer`):

- a read_committed fetch returns no batch at or above the last stable offset it reports;
- a record it delivers belongs to a transaction whose commit the producer had asked for by then
  (else the last stable offset passed an open transaction, or an aborted one was not dropped);
- every transactional batch it returns was decided when it was read: the transaction's marker that
  follows it in the final log lies below the high watermark of that answer;
- the same offset never shows two different records.

After the run heals and converges (:meth:`TxnChecker.final_check`, on every partition read again
from its leader with ``isolation_level=1``, aborted transactions dropped as a client drops them):

- every transaction whose commit was acknowledged is whole: all its records, on every partition it
  wrote, in the order it sent them;
- no record of an aborted transaction (or of one never asked to commit) is visible;
- a transaction whose commit outcome the producer never learned is entirely visible or entirely
  invisible;
- no record appears twice; every record read during the run is still at its offset;
- every acknowledged acks=all record of the plain producers is visible.

With DeleteRecords (``sim explore``'s ``delete-records``), a record below an offset the nemesis
asked to delete may be gone: :meth:`TxnChecker.records_deleted` learns the offset and the records
the partition's leader held below it (committed: the nemesis asks below the high watermark), and
only those are excused from the final checks.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.protocol.api import ApiKey
from strandline.protocol.records import iter_batches, iter_records
from strandline.sim.cluster import SimCluster
from strandline.sim.txn_workload import (FETCH_VERSION, TP, Txn, TxnHistory, Visible, _aborted, fetch_body,
                                         read_committed_view)
from strandline.sim.workload import History


@dataclass
class FinalRead:
    views: dict[TP, list[tuple[int, bytes]]] = field(default_factory=dict)
    open: dict[TP, tuple[int, int]] = field(default_factory=dict)        # tp -> (lso, hw) where lso < hw


@dataclass(eq=False)
class TxnChecker:
    sim: SimCluster
    history: TxnHistory
    plain: History
    plain_topic: str
    fail: Callable[[str, str], None]
    consumed: dict[TP, dict[int, bytes]] = field(default_factory=dict)
    fetched: dict[tuple[TP, int], tuple[int, int]] = field(default_factory=dict)   # (tp, base) -> (pid, lowest hw)
    reads: int = 0
    deleted: dict[TP, int] = field(default_factory=dict)            # the highest offset DeleteRecords asked
    deletable: set[bytes] = field(default_factory=set)              # records that were below it

    def records_deleted(self, tp: TP, offset: int, values: set[bytes]) -> None:
        """DeleteRecords of ``tp`` below ``offset`` was asked; ``values`` were the records there."""
        self.deleted[tp] = max(self.deleted.get(tp, 0), offset)
        self.deletable |= values

    # -- while the run goes

    def on_fetch(self, tp: TP, view: Visible, high_watermark: int, last_stable_offset: int) -> None:
        self.reads += 1
        if view.above_lso:
            self.fail("read_committed stops at the last stable offset",
                      f"{tp[0]}-{tp[1]}: a read_committed fetch returned a batch at {view.above_lso[0]}, "
                      f"its last stable offset is {last_stable_offset} (high watermark {high_watermark})")
        for base, pid in view.txn_batches:
            known = self.fetched.get((tp, base))
            if known is None or high_watermark < known[1]:
                self.fetched[(tp, base)] = (pid, high_watermark)
        seen = self.consumed.setdefault(tp, {})
        for offset, value in view.records:
            before = seen.get(offset)
            if before is not None and before != value:
                self.fail("consumers never see a record change",
                          f"{tp[0]}-{tp[1]} offset {offset} read committed as {before.decode()}, "
                          f"later as {value.decode()}")
            seen[offset] = value
            txn = self.history.by_value.get(value)
            if txn is not None and not txn.commit_sent:
                self.fail("read_committed shows only committed transactions",
                          f"{tp[0]}-{tp[1]} offset {offset}: {value.decode()} of {txn.describe()} was visible "
                          f"before its producer asked to commit (LSO {last_stable_offset}, HW {high_watermark})")

    # -- at the end

    def read_all(self, tps: list[TP], deadline_ms: int) -> FinalRead:
        """Read every partition from its leader, read_committed, up to its high watermark; a
        partition whose last stable offset stays below it (an open transaction) is waited for until
        ``deadline_ms``, then reported in ``open``."""
        sim = self.sim
        out = FinalRead()
        for tp in tps:
            records: list[tuple[int, bytes]] = []
            position = 0
            while True:
                leader = sim.state(tp[0], tp[1]).leader
                resp = sim.call(leader, ApiKey.FETCH, FETCH_VERSION, fetch_body(tp, position), "txn-checker",
                                within_ms=5000)
                answer = resp.responses[0].partitions[0]
                error = ErrorCode(int(answer.error_code))
                lso, hw = int(answer.last_stable_offset), int(answer.high_watermark)
                if error is ErrorCode.offset_out_of_range and int(answer.log_start_offset) > position:
                    position = int(answer.log_start_offset)         # the records below were deleted
                    continue
                if error is ErrorCode.none:
                    view = read_committed_view(answer.records, _aborted(answer), lso)
                    if view.above_lso:
                        self.fail("read_committed stops at the last stable offset",
                                  f"{tp[0]}-{tp[1]}: the final read returned a batch at {view.above_lso[0]}, "
                                  f"its last stable offset is {lso}")
                    records.extend((o, v) for o, v in view.records if o >= position)
                    if view.next_offset > position:
                        position = view.next_offset
                        continue
                    if lso >= hw:
                        break
                if sim.now >= deadline_ms:
                    out.open[tp] = (lso, hw)
                    break
                sim.advance(200)
            out.views[tp] = records
        return out

    def final_check(self, final: FinalRead, logs: dict[TP, bytes]) -> None:
        for tp, (lso, hw) in sorted(final.open.items()):
            self.fail("transactions end", f"{tp[0]}-{tp[1]}: a transaction is still open after the run healed and "
                                          f"every producer stopped (last stable offset {lso}, high watermark {hw}"
                                          f"{self._open_txn(tp, lso, logs)})")
        self._check_decided_when_read(logs)
        where: dict[bytes, list[tuple[TP, int]]] = {}
        for tp, records in final.views.items():
            for offset, value in records:
                where.setdefault(value, []).append((tp, offset))
        twice = [(v, w) for v, w in where.items() if len(w) > 1]
        if twice:
            v, w = twice[0]
            self.fail("no record appears twice", f"{len(twice)} record(s) visible more than once, "
                                                 f"e.g. {v.decode()} at {w}")
        for txn in self.history.txns:
            self._check_txn(txn, where)
        for tp, seen in sorted(self.consumed.items()):
            final_at = dict(final.views.get(tp, ()))
            for offset, value in sorted(seen.items()):
                if final_at.get(offset) != value and not (offset < self.deleted.get(tp, 0) and offset not in final_at):
                    self.fail("read_committed records stay",
                              f"{tp[0]}-{tp[1]} offset {offset}: read committed as {value.decode()} during the run, "
                              f"the final read has {(final_at.get(offset) or b'nothing').decode()}")
                    break
        for ack in self.plain.acked:
            if ack.acks != -1:
                continue
            tp = (self.plain_topic, ack.partition)
            final_at = dict(final.views.get(tp, ()))
            if any(final_at.get(ack.base_offset + i) != v for i, v in enumerate(ack.values)
                   if ack.base_offset + i >= self.deleted.get(tp, 0)):
                self.fail("acknowledged writes are visible to read_committed",
                          f"{self.plain_topic}-{ack.partition}: {ack.values[0].decode()} acknowledged at offset "
                          f"{ack.base_offset} is not in the final read_committed read")
                break

    def _check_txn(self, txn: Txn, where: dict[bytes, list[tuple[TP, int]]]) -> None:
        outcome = txn.outcome
        if outcome == "open":
            outcome = "unknown" if txn.commit_maybe or txn.commit_sent else "aborted"
        values = [v for vs in txn.writes.values() for v in vs]
        visible = [v for v in values if v in where]
        if outcome == "aborted" and visible:
            self.fail("aborted transactions stay invisible",
                      f"{len(visible)} of {len(values)} record(s) of {txn.describe()} are visible, "
                      f"e.g. {visible[0].decode()} at {where[visible[0]]}")
            return
        if outcome == "committed" or (outcome == "unknown" and visible):
            invariant = "committed transactions are whole" if outcome == "committed" else \
                "an undecided transaction is all or nothing"
            for tp, vs in sorted(txn.writes.items()):
                offsets = []
                for v in vs:
                    at = [o for t, o in where.get(v, ()) if t == tp]
                    if not at and v in self.deletable:
                        continue                        # deleted (DeleteRecords)
                    if not at:
                        self.fail(invariant, f"{v.decode()} of {txn.describe()} is not visible in {tp[0]}-{tp[1]} "
                                             f"({len(visible)} of its {len(values)} record(s) are)")
                        return
                    offsets.append(at[0])
                if offsets != sorted(offsets):
                    self.fail(invariant, f"the records of {txn.describe()} in {tp[0]}-{tp[1]} are out of order: "
                                         f"offsets {offsets}")
                    return

    def _check_decided_when_read(self, logs: dict[TP, bytes]) -> None:
        """Every transactional batch a read_committed fetch returned had its marker below that
        answer's high watermark."""
        markers: dict[TP, dict[int, list[int]]] = {}
        first: dict[TP, int] = {}           # the first batch the final log holds (DeleteRecords: not 0)
        for tp, data in logs.items():
            per_pid: dict[int, list[int]] = {}
            for _, header in iter_batches(data):
                first.setdefault(tp, header.base_offset)
                if header.is_control and header.is_transactional:
                    per_pid.setdefault(header.producer_id, []).append(header.base_offset)
            markers[tp] = per_pid
        for (tp, base), (pid, hw) in sorted(self.fetched.items()):
            ends = markers.get(tp, {}).get(pid, [])
            i = bisect_right(ends, base)
            marker = ends[i] if i < len(ends) else None
            if base < first.get(tp, self.deleted.get(tp, 0)):
                continue        # deleted (DeleteRecords): its marker may be too, and the next one found another's
            if marker is None or marker >= hw:
                self.fail("read_committed shows only decided transactions",
                          f"{tp[0]}-{tp[1]}: a read_committed fetch returned the batch at {base} of producer {pid} "
                          f"below high watermark {hw}, but its transaction's marker is "
                          f"{'nowhere' if marker is None else f'at {marker}'} in the final log")
                return

    def _open_txn(self, tp: TP, lso: int, logs: dict[TP, bytes]) -> str:
        data = logs.get(tp, b"")
        for pos, header in iter_batches(data):
            if header.base_offset == lso:
                first = next(iter_records(data, pos, header), None)
                owner = self.history.by_value.get(first.value) if first is not None and first.value is not None \
                    else None
                return f"; it begins with producer {header.producer_id} epoch {header.producer_epoch}'s batch" + \
                    (f", of {owner.describe()}" if owner else "")
        return ""
