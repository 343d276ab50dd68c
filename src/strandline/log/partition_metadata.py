"""``partition.metadata``: the id of the topic a log belongs to (Kafka's PartitionMetadataFile, KIP-516).

A broker that missed a topic's deletion (it was stopped or cut off, or the controller failed over
before telling it) still holds the logs of the deleted topic's partitions when a new topic of the
same name is created. Kept and served as replicas of the new topic, such a log would hold the old
topic's records under the new topic's offsets, and a follower that truncates to its leader's epochs
would keep them. The file tells the two apart: a log that records another topic id than the
controller names is of the earlier topic, and the broker deletes it before it takes a role for the
new one (:meth:`strandline.replication.replica_manager.ReplicaManager.open_partition`).

The format is Kafka's::

    version: 0
    topic_id: <the id in base64, URL-safe, without padding>

It is written without an fsync, as creating thousands of partitions must not cost thousands of
fsyncs, and made durable with the log's first flush (:meth:`Log._sync_dir_if_new`, as Kafka's
``maybeFlush``), with the records the log holds: a log whose flushed records survive a power
loss keeps its id. A file lost before that (the log holds nothing durable), or torn, reads as no id,
and the log takes the id the controller names next (Kafka's ``checkOrSetTopicId``).
"""

from __future__ import annotations

import posixpath
import uuid

from strandline.log.disk import Disk
from strandline.uuids import uuid_from_base64, uuid_to_base64

FILE = "partition.metadata"


def read_topic_id(disk: Disk, log_dir: str) -> uuid.UUID | None:
    """The topic id recorded in the log directory ``log_dir``; None if there is none (or it is unreadable)."""
    path = posixpath.join(log_dir, FILE)
    if not disk.exists(path):
        return None
    try:
        fields = dict(line.split(": ", 1) for line in disk.read_file(path).decode().splitlines() if line)
        if fields.get("version") != "0":
            return None
        return uuid_from_base64(fields["topic_id"])
    except (ValueError, KeyError, UnicodeDecodeError):
        return None


def write_topic_id(disk: Disk, log_dir: str, topic_id: uuid.UUID) -> None:
    handle = disk.open(posixpath.join(log_dir, FILE))
    try:
        handle.truncate(0)
        handle.append(f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n".encode())
    finally:
        handle.close()


def sync_topic_id(disk: Disk, log_dir: str) -> None:
    """fsync ``partition.metadata`` (its directory entry is the caller's to fsync)."""
    handle = disk.open(posixpath.join(log_dir, FILE))
    try:
        handle.flush()
    finally:
        handle.close()
