"""Producer ids for idempotent producers (Kafka's ProducerIdManager, ZooKeeper mode).

Each broker claims blocks of 1,000 ids from ``/latest_producer_id_block`` with compare-and-set on
the znode's version (a lost race reads the block again) and hands them out one by one; callers
wait while a block is being claimed, and get -1 when ZooKeeper cannot be written.
"""

from __future__ import annotations

from typing import Callable

from strandline.core.outbox import Outbox
from strandline.coordination import zk_layout
from strandline.coordination.store import OpResult, ZkError
from strandline.core.effects import Effect

PRODUCER_ID_BLOCK_SIZE = 1000

#: ``callback(producer_id, now_ms)``: an id, or -1.
Allocated = Callable[[int, int], list[Effect]]


class ProducerIdManager:
    def __init__(self, broker_id: int, outbox: Outbox) -> None:
        self.broker_id = broker_id
        self.outbox = outbox
        self._block: tuple[int, int] = (0, 0)  # next id, end (exclusive) of our block
        self._waiters: list[Allocated] = []
        self._claiming = False

    def generate_producer_id(self, callback: Allocated, now_ms: int) -> list[Effect]:
        next_id, end = self._block
        if next_id < end:
            self._block = (next_id + 1, end)
            return callback(next_id, now_ms)
        self._waiters.append(callback)
        if self._claiming:
            return []
        self._claiming = True
        return [self.outbox.zk([zk_layout.get_producer_id_block()], self._on_block_read)]

    def _on_block_read(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        result = results[0]
        if result.error is ZkError.NO_NODE:
            start, version = 0, -1
        elif result.error is ZkError.NONE:
            start, version = zk_layout.next_producer_id_block_start(result.data), result.version
        else:
            return self._fail(now_ms)
        end = start + PRODUCER_ID_BLOCK_SIZE
        op = zk_layout.claim_producer_id_block(self.broker_id, start, end - 1, version)

        def on_claimed(res: list[OpResult], when_ms: int) -> list[Effect]:
            if res[0].error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS):
                return [self.outbox.zk([zk_layout.get_producer_id_block()], self._on_block_read)]
            if res[0].error is not ZkError.NONE:
                return self._fail(when_ms)
            self._block = (start, end)
            self._claiming = False
            waiters, self._waiters = self._waiters, []
            effects: list[Effect] = []
            for waiter in waiters:
                effects.extend(self.generate_producer_id(waiter, when_ms))
            return effects

        return [self.outbox.zk([op], on_claimed)]

    def _fail(self, now_ms: int) -> list[Effect]:
        self._claiming = False
        waiters, self._waiters = self._waiters, []
        effects: list[Effect] = []
        for waiter in waiters:
            effects.extend(waiter(-1, now_ms))
        return effects
