"""A real browser for the tests: the system's headless Chromium, driven by Playwright.

Without Chromium or Playwright the tests that use :func:`browser` skip, except under
``CI=true``, where they fail: CI installs both. Screenshots land in
``build/screenshots/`` (kept by CI).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from builders import REPO

CHROMIUM = os.environ.get("PHASEGRAPH_TEST_CHROMIUM", "/usr/bin/chromium")
SHOTS = REPO / "build" / "screenshots"
WAIT_MS = 15_000  # how long a page may take to show what a step committed
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def unavailable(reason: str) -> None:
    """Skip for ``reason``; under ``CI=true``, fail."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests (see .ci/run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module that asks for it."""
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        # The system's Chromium: Playwright never downloads a browser here.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def signed_in(browser: Any, url: str, token: str, height: int = 800) -> Iterator[Any]:
    """A fresh tab (empty sessionStorage), 1280 wide, that gave ``token`` to the viewer."""
    context = browser.new_context(viewport={"width": 1280, "height": height})
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(url + "/ui")
    tab.fill("#token", token)
    tab.click("text=Use token")
    tab.wait_for_selector("table.runs")
    try:
        yield tab
    finally:
        context.close()
    assert errors == [], errors  # no script error on any page the test visited


def shot(tab: Any, name: str) -> Path:
    """A full-page screenshot of ``tab`` under ``build/screenshots/NAME``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / name
    tab.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")  # shown with -s; CI lists the folder after the tests
    return path
