"""The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat), as pure functions and data.

The coordinator computes each member's target assignment with a server-side assignor
(:mod:`.assignors`: ``uniform`` and ``range``), moves each member towards it without ever giving a
partition to a member while another still owns it (:mod:`.reconcile`), answers heartbeats
(:mod:`.heartbeat`) and keeps a group as the records it writes to ``__consumer_offsets`` in
Kafka's formats (:mod:`.records`), which rebuild it when replayed (:mod:`.group`). Nothing here
does I/O or reads a clock: time comes in as ``now_ms``, and what must be written is returned.
"""
