"""A consume-transform-produce loop in a process of its own, which test_transactions SIGKILLs.

``python txn_loop_worker.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID PAUSE_MS``

It copies every record of SOURCE to the same partition of SINK inside a transaction that also
commits the consumer's offsets (``send_offsets_to_transaction``), as an exactly-once application
does: a read_committed consumer in GROUP (static membership, so that a restarted instance takes
its predecessor's place without waiting for its session to expire), a transactional producer
under TRANSACTIONAL_ID. It says where it is on stdout, one line per step, so that the test can
kill it at a chosen moment:

- ``READY`` once the producer is initialised (the previous instance fenced, its open
  transaction aborted) and the consumer subscribed;
- ``PRODUCED n`` once transaction n's records were sent and acknowledged, ``OFFSETS n`` once its
  offsets were added to it (each followed by a pause of PAUSE_MS, so that a kill lands while the
  transaction is open);
- ``COMMITTED n p=offset ...`` once it committed, with the offsets it committed.

It runs until killed, at most ``LIFETIME_S`` (then it ends with status 4: the test that should
have killed it did not); an error ends it with status 3 and the error on stderr.
"""

from __future__ import annotations

import sys
import time

LIFETIME_S = 300


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, pause_ms: str) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    pause_s = int(pause_ms) / 1000

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                             "transaction.timeout.ms": 60000})
        producer.init_transactions(60)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": f"{group}-0",
                             "session.timeout.ms": 6000, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe([source])
        say("READY")
        n = 0
        deadline = time.monotonic() + LIFETIME_S
        while time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(10, 0.2) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            nxt: dict[int, int] = {}
            for m in msgs:
                producer.produce(sink, m.value(), key=m.key(), partition=m.partition())
                nxt[m.partition()] = m.offset() + 1
            producer.flush(60)
            say(f"PRODUCED {n}")
            time.sleep(pause_s)
            offsets = [TopicPartition(source, p, o) for p, o in sorted(nxt.items())]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
            say(f"OFFSETS {n}")
            time.sleep(pause_s)
            producer.commit_transaction(60)
            say(f"COMMITTED {n} " + " ".join(f"{p}={o}" for p, o in sorted(nxt.items())))
            n += 1
    except KafkaException as exc:
        sys.stderr.write(f"worker error: {exc.args[0]!r}\n")
        sys.exit(3)
    sys.stderr.write(f"worker error: not killed within {LIFETIME_S} s\n")
    sys.exit(4)


if __name__ == "__main__":
    main(*sys.argv[1:])
