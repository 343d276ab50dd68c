"""What an explorer run may do: its families of faults, its admin requests and its workload's
options, by name. A run does all of them unless told otherwise (``sim explore --without ...``). A
module of its own so that the command line names them without loading the simulator.

- faults of the machines (:mod:`strandline.sim.nemesis`): ``clock``, ``zookeeper``,
  ``slow-links``, ``network``, ``process``, ``power-loss``, ``isr-power-loss`` (only with eligible
  leader replicas);
- an operator's requests: ``reassign`` (partition moves, four brokers, three replicas; CTL-11),
  ``add-partitions`` (CreatePartitions, up to three), ``recreate`` (a second topic, written all
  along, deleted and created again), ``delete-records`` (DeleteRecords below the high watermark);
- the workload: ``rack-reads`` (brokers in racks, consumers reading from followers; KIP-392).
"""

from __future__ import annotations

from typing import Any

FAULT_FAMILIES = ("clock", "zookeeper", "slow-links", "network", "process", "power-loss", "isr-power-loss")
ADMIN_FAMILIES = ("reassign", "add-partitions", "recreate", "delete-records")
WORKLOAD_OPTIONS = ("rack-reads",)
EVERYTHING = FAULT_FAMILIES + ADMIN_FAMILIES + WORKLOAD_OPTIONS

#: the Explorer's keyword for each admin family and workload option
KEYWORDS = {"reassign": "reassign", "add-partitions": "add_partitions", "recreate": "recreate",
            "delete-records": "delete_records", "rack-reads": "rack_reads"}


def run_options(without: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The Explorer's keyword arguments for a run with everything but ``without``."""
    unknown = set(without) - set(EVERYTHING)
    if unknown:
        raise ValueError(f"unknown: {', '.join(sorted(unknown))} (the menu: {', '.join(EVERYTHING)})")
    options: dict[str, Any] = {keyword: name not in without for name, keyword in KEYWORDS.items()}
    options["without"] = frozenset(name for name in FAULT_FAMILIES if name in without)
    return options


FULL_MENU = run_options()
"""Everything: the default of ``strandline sim explore``."""
