"""A real browser for the console's tests: Debian's chromium, headless, driven through
Debian's chromedriver by Selenium (no browser or driver is downloaded: both are host tools,
ci/host-tools.txt). Chromium is started as this machine's closed network needs it: no
background connections, a fresh profile each time.

Screenshots go to MSEB_SCREENSHOTS when it names a directory (docs/console/ holds the ones
docs/fleet-console.md shows: `MSEB_SCREENSHOTS=docs/console nox -s tests -- -k console`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from builder.core.runner import find_tool
from tests.support import requires

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--lang=en-US")


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    requires.need_tools("chromium", "chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(find_tool("chromium"))
    with tempfile.TemporaryDirectory(prefix="console-browser-") as profile:
        for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(find_tool("chromedriver"))),
                                  options=options)
        try:
            driver.set_page_load_timeout(30)
            yield driver
        finally:
            driver.quit()


def screenshot(driver: Any, name: str) -> Path | None:
    """Saved where MSEB_SCREENSHOTS says, else nowhere; the path, or None."""
    where = os.environ.get("MSEB_SCREENSHOTS")
    if not where:
        return None
    path = Path(where) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path


def wait_for(driver: Any, check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """The first truthy value of `check`, polled while the page updates itself."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def attempt(_: Any) -> Any:
        try:
            return check()
        except StaleElementReferenceException:
            return None   # the page re-rendered between finding and reading

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(attempt)
    except TimeoutException:
        raise AssertionError(f"the console never showed {what} within {timeout:g} s") from None
