"""One headless Chromium for the browser tests (the service page, tree.html): found, started and quit here.

A test that needs it skips, saying why, where Debian's ``chromium``/``chromium-driver`` or selenium is missing or
where Chromium cannot start.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists()
                                                 else None)
MISSING = ("headless browser test needs Debian's chromium and chromium-driver "
           "(apt-get install -y chromium chromium-driver)")


def skip_without_chromium() -> None:
    """Skip the calling test module where Chromium or its driver is not installed."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING, allow_module_level=True)


@contextlib.contextmanager
def headless_chrome(window: str = "1400,900", *extra_args: str) -> Iterator[object]:
    """A selenium Chrome driver on headless Chromium (window ``W,H``), quit on exit."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING)
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium (the dev extra)")
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={window}", "--no-first-run", "--disable-extensions", *extra_args):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as exc:
        pytest.skip(f"chromium could not start under chromedriver: {exc.msg}")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
