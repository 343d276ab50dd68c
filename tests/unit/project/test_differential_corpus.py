"""The differential corpus (tests/differential/corpus.py) without clusters: it sends every API key
and version a Kafka 2.8 broker answers, its case names are unique, every kept difference it names is
in KEPT and described in docs/compatibility.md ("Differential tests"), and the client quotas APIs
are kept as "no-client-quotas" (to be compared once Strandline serves them)."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tests.differential.corpus import CASES, KEPT
from tests.unit.protocol.test_old_versions import KAFKA_2_8


def test_every_kafka_2_8_api_key_and_version_is_sent():
    sent = {(step.api, step.version) for case in CASES for step in case.steps}
    wanted = {(key, v) for key, (low, high) in KAFKA_2_8.items() for v in range(low, high + 1)}
    assert not wanted - sent, sorted(wanted - sent)


def test_case_names_are_unique_and_kept_differences_are_documented():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    used = {c.kept[0] for c in CASES if c.kept}
    assert used == set(KEPT), (used ^ set(KEPT))
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    section = doc.split("## Differential tests", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M))
    assert documented == set(KEPT), documented ^ set(KEPT)


def test_client_quotas_and_scram_descriptions_are_compared_with_kafka():
    """DescribeClientQuotas, AlterClientQuotas and DescribeUserScramCredentials are served: their
    cases compare the answers, no kept difference."""
    served = [c for c in CASES if any(s.api in (48, 49, 50) for s in c.steps)]
    assert {(s.api, s.version) for c in served for s in c.steps} == {(48, 0), (48, 1), (49, 0), (49, 1), (50, 0)}
    assert all(c.kept is None for c in served)