"""docs/compatibility.md's "API versions" table against what it describes: Strandline's own table
(``SUPPORTED``), Kafka 2.8.2's ranges (``KAFKA_2_8``) and, when Kafka 4.4's jars are cached
(``strandline reference fetch --kafka 4``), the versions Kafka 4.4 brokers serve, read from
kafka-clients' ``common/message/*Request.json`` (the APIs whose ``listeners`` name ``broker``; a
``latestVersionUnstable`` newest version is not advertised, as a broker without
``unstable.api.versions.enable``). Kafka 4.0 dropped old versions (KIP-896) that Strandline keeps
serving; the page names them, and the APIs of 4.x brokers the table has no row for.

``python -m tests.unit.protocol.test_api_table`` prints the lines the page should hold."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from strandline.protocol.api import SUPPORTED, api_name
from strandline.reference import fetched
from tests.unit.protocol.test_old_versions import KAFKA_2_8

PAGE = Path(__file__).resolve().parents[3] / "docs" / "compatibility.md"
COLUMNS = ["API", "key", "Kafka 2.8", "Kafka 4.x", "Strandline", "Kafka 2.8's range served"]


def versions(span: tuple[int, int] | None) -> str:
    if span is None:
        return "-"
    low, high = span
    return str(low) if low == high else f"{low}-{high}"


def kafka_4_ranges() -> tuple[str, dict[int, tuple[str, tuple[int, int]]]] | None:
    """(version, {api key: (name, (min, max))}) of the cached Kafka 4.x brokers, or None."""
    dist = fetched("4")
    if dist is None:
        return None
    [jar] = dist.libs.glob("kafka-clients-*.jar")
    found = {}
    with zipfile.ZipFile(jar) as z:
        for entry in z.namelist():
            if not (entry.startswith("common/message/") and entry.endswith("Request.json")):
                continue
            text = "\n".join(line for line in z.read(entry).decode().splitlines()
                             if not line.strip().startswith("//"))
            spec = json.loads(text)
            if "broker" not in spec.get("listeners", ()):
                continue
            low, _, high = spec["validVersions"].partition("-")
            top = int(high or low) - (1 if spec.get("latestVersionUnstable") else 0)
            found[spec["apiKey"]] = (spec["name"].removesuffix("Request"), (int(low), top))
    return dist.version, found


def table_rows() -> dict[int, dict[str, str]]:
    """The table's rows by API key."""
    text = PAGE.read_text()
    section = text[text.index("## API versions"):]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        if not cells["key"].isdigit():
            break
        rows[int(cells["key"])] = cells
    return rows


def no_longer_served(ranges: dict[int, tuple[str, tuple[int, int]]]) -> str:
    """The sentence naming the versions Strandline serves that 4.x brokers no longer do."""
    dropped = []
    for key, (low, _) in sorted(SUPPORTED.items()):
        if key in ranges and low < ranges[key][1][0]:
            dropped.append(f"{ranges[key][0]} {versions((low, ranges[key][1][0] - 1))}")
    return "Served by Strandline, no longer by Kafka 4.x brokers (KIP-896): " + ", ".join(dropped) + "."


def not_in_table(ranges: dict[int, tuple[str, tuple[int, int]]]) -> str:
    rest = [f"{name} ({key})" for key, (name, _) in sorted(ranges.items()) if key not in SUPPORTED and key not in KAFKA_2_8]
    return "Kafka 4.x brokers also serve, and Strandline does not: " + ", ".join(rest) + "."


def test_the_table_shows_strandlines_and_kafka_2_8s_versions():
    rows = table_rows()
    assert set(rows) == set(SUPPORTED) | set(KAFKA_2_8)
    for key, cells in rows.items():
        assert cells["Kafka 2.8"] == versions(KAFKA_2_8.get(key)), (key, cells)
        if "not advertised" not in cells["Strandline"]:
            assert cells["Strandline"] == versions(SUPPORTED.get(key)), (key, cells)
        if key in SUPPORTED and key in KAFKA_2_8:
            low, high = SUPPORTED[key]
            served = low <= KAFKA_2_8[key][0] and high >= KAFKA_2_8[key][1]
            assert cells["Kafka 2.8's range served"].startswith("yes" if served else "no"), (key, cells)


def test_the_table_shows_kafka_4_brokers_versions():
    found = kafka_4_ranges()
    if found is None:
        pytest.skip("Kafka 4.x is not cached (strandline reference fetch --kafka 4)")
    _, ranges = found
    text = PAGE.read_text()
    for key, cells in table_rows().items():
        assert cells["Kafka 4.x"] == versions(ranges[key][1] if key in ranges else None), (api_name(key), cells)
    assert no_longer_served(ranges) in " ".join(text.split())
    assert not_in_table(ranges) in " ".join(text.split())


if __name__ == "__main__":
    found = kafka_4_ranges()
    assert found is not None, "Kafka 4.x is not cached"
    version, ranges = found
    for key in table_rows():
        print(f"{api_name(key)} ({key}): Kafka {version} {versions(ranges[key][1] if key in ranges else None)}")
    print(no_longer_served(ranges))
    print(not_in_table(ranges))
