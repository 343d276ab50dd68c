"""A lab run's folder: what happened, as Parquet files the audit (a Spark job) reads.

    <run>/run.json           the scenario, its settings, the fault windows, the expectation
    <run>/ops.parquet        time_ms, producer, type (invoke|ok|fail|unknown), value, partition, offset, error
    <run>/replicas.parquet   time_ms, broker, partition, state, leader, leader_epoch, isr, controller, leo, hw
    <run>/batches.parquet    broker, partition, base_offset, last_offset, leader_epoch, digest (after healing)
    <run>/records.parquet    broker, partition, offset, value (after healing)
    <run>/final.parquet      partition, leader, high_watermark (after healing)
"""

from __future__ import annotations

from typing import Any, Sequence

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from strandline.lab.replicas import ReplicaView, StoredBatch
from strandline.load.history import Op

OPS = pa.schema([("time_ms", pa.float64()), ("producer", pa.int32()), ("type", pa.string()),
                 ("value", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("error", pa.string())])
REPLICAS = pa.schema([("time_ms", pa.float64()), ("broker", pa.int32()), ("partition", pa.int32()),
                      ("state", pa.string()), ("leader", pa.int32()), ("leader_epoch", pa.int32()),
                      ("isr", pa.string()), ("controller", pa.int32()), ("leo", pa.int64()), ("hw", pa.int64())])
BATCHES = pa.schema([("broker", pa.int32()), ("partition", pa.int32()), ("base_offset", pa.int64()),
                     ("last_offset", pa.int64()), ("leader_epoch", pa.int32()), ("digest", pa.string())])
RECORDS = pa.schema([("broker", pa.int32()), ("partition", pa.int32()), ("offset", pa.int64()),
                     ("value", pa.string())])
FINAL = pa.schema([("partition", pa.int32()), ("leader", pa.int32()), ("high_watermark", pa.int64())])


def _write(path: Path, schema: pa.Schema, rows: Sequence[tuple[Any, ...]]) -> None:
    columns: list[Sequence[Any]] = list(zip(*rows)) if rows else [[] for _ in schema]
    table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)
    pq.write_table(table, path)


def write_ops(run_dir: Path, ops: list[Op]) -> None:
    _write(run_dir / "ops.parquet", OPS, sorted(ops, key=lambda op: op[0]))


def write_replicas(run_dir: Path, views: list[ReplicaView]) -> None:
    _write(run_dir / "replicas.parquet", REPLICAS, [
        (v.time_ms, v.broker, v.partition, v.state, v.leader, v.leader_epoch, v.isr, v.controller, v.leo, v.hw)
        for v in views])


def write_logs(run_dir: Path, logs: dict[int, list[StoredBatch]]) -> None:
    """``logs``: broker id -> what :func:`strandline.lab.replicas.read_replica_logs` returned."""
    batches: list[tuple[int, int, int, int, int, str]] = []
    records: list[tuple[int, int, int, str]] = []
    for broker, entries in logs.items():
        for partition, base, last, epoch, digest, values in entries:
            batches.append((broker, partition, base, last, epoch, digest))
            records.extend((broker, partition, offset, value) for offset, value in values)
    _write(run_dir / "batches.parquet", BATCHES, batches)
    _write(run_dir / "records.parquet", RECORDS, records)


def write_final(run_dir: Path, final: list[tuple[int, int, int]]) -> None:
    _write(run_dir / "final.parquet", FINAL, final)


def write_run(run_dir: Path, info: dict[str, Any]) -> None:
    (run_dir / "run.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json, with ``run_dir`` where the folder is now (it may have been moved since)."""
    info: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
    info["run_dir"] = str(Path(run_dir).resolve())
    return info


def read_views(run_dir: Path) -> list[dict[str, Any]]:
    """The sampled replica views, in time order."""
    views: list[dict[str, Any]] = pq.read_table(run_dir / "replicas.parquet").to_pylist()
    return views
