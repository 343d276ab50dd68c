"""The broker's garbage-collector metrics (runtime/monitoring.py): each collection's pause counted in
its generation, by the hook alone, and the hook gone once the endpoint closes."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strandline.runtime.monitoring import GcMetrics


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_each_collection_is_counted_in_its_generation_with_its_pause():
    registry = CollectorRegistry(auto_describe=False)
    metrics = GcMetrics(registry)
    try:
        gc.collect(1)
        gc.collect(1)
        gc.collect(2)
        got = samples(registry)
    finally:
        metrics.close()
    count = got[("python_gc_collection_seconds_count", (("generation", "1"),))]
    assert count >= 2                       # ours (a young collection may also have run meanwhile)
    assert got[("python_gc_collection_seconds_count", (("generation", "2"),))] >= 1
    assert got[("python_gc_collection_seconds_sum", (("generation", "2"),))] > 0
    assert got[("python_gc_collection_seconds_bucket", (("generation", "1"), ("le", "+Inf")))] == count
    buckets = [v for (name, labels), v in got.items()
               if name == "python_gc_collection_seconds_bucket" and ("generation", "2") in labels]
    assert buckets == sorted(buckets)       # cumulative
    assert got[("python_gc_frozen_objects", ())] == gc.get_freeze_count()


def test_closing_removes_the_hook():
    registry = CollectorRegistry(auto_describe=False)
    metrics = GcMetrics(registry)
    metrics.close()
    gc.collect(2)
    assert samples(registry)[("python_gc_collection_seconds_count", (("generation", "2"),))] == 0
    assert metrics._on_gc not in gc.callbacks
