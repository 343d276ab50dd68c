"""Debian's headless Chromium driven by Selenium, for the console's tests (`make test` installs
both where it can; without them the tests skip, or fail under CI=true)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import missing_prerequisite

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def headless_chromium(profile: Path, *extra: str) -> Iterator[Any]:
    """A fixture's body: yields a driver (its profile in ``profile``), quits it afterwards."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        missing_prerequisite("no Chromium and ChromeDriver (Debian packages chromium and chromium-driver; "
                             "make browser installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", *extra):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()
