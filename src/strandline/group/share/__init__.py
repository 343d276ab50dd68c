"""Share groups (KIP-932, Kafka's queues), as pure functions and data.

Many consumers of one share group read the same partition; each record is handed to one of them
at a time and acknowledged one by one. The partition's leader keeps, per share group, which
records are in flight and in what state (:mod:`.partition`): acquired by a member under a lock that
expires, available again, acknowledged, or archived once delivered too often or rejected. Nothing
here does I/O or reads a clock: time comes in as ``now_ms``.
"""
